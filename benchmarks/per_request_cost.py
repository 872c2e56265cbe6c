"""What a per-request chain kernel costs in exactness.certify_decoder, next to batched ones, in one run (issue 40 #6).

The same rule -- token-wise chain verification (Leviathan et al. 2023, arXiv 2211.17192) -- three ways, certified
on the same tiny Markov pair, prompts and budget:

- ``per_request(torch)``: docs/pathlevel.md section 11's rule, written for ONE request in plain torch with its own
  coins, wrapped by ``exactness.chain.per_request`` (the harness calls it once per row);
- ``batched(torch)``: the same rule written over the batch in torch (the form section 11 recommends for speed);
- ``token_chain_kernel``: the harness's numpy reference (vectorised).

Prints, per kernel, the certificate's wall and CPU seconds and the ratio to ``token_chain_kernel``, and the share of
the per-request run spent inside the kernel itself (profiled separately), which no wrapper can remove: its Python
per row.  Usage (repository root): ``python benchmarks/per_request_cost.py [--n N]`` (default: the certificate's
default budget).  Times depend on load: read the ratios.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import exactness  # noqa: E402
from exactness.chain import chain_decoder, chain_target, per_request, token_chain_kernel  # noqa: E402
from simulators.autoregressive import MarkovPair  # noqa: E402


def their_rule(target_probs, draft_probs, draft_ids, generator):
    """One request: (L+1, V), (L, V) float64, (L,) int64 tensors -> (accepted, token); section 11's rule."""
    L = draft_ids.numel()
    for i in range(L):
        x = draft_ids[i]
        if torch.rand((), generator=generator, dtype=torch.float64) >= target_probs[i, x] / draft_probs[i, x]:
            residual = (target_probs[i] - draft_probs[i]).clamp_min(0)          # (p_i - q_i)_+
            return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    return L, int(torch.multinomial(target_probs[L], 1, generator=generator))  # bonus from p_L


def their_kernel(target_probs, draft_probs, draft_ids, rng):
    g = torch.Generator().manual_seed(int(rng.integers(2**63)))
    tau, token = their_rule(*(torch.from_numpy(a) for a in (target_probs, draft_probs, draft_ids)), g)
    return np.append(draft_ids[:tau], token)


def batched_kernel(target_probs, draft_probs, draft_ids, rng):
    """The same rule over the batch: (B, L+1, V), (B, L, V) float64, (B, L) int64 numpy -> (B, L+1) int64.
    Coins from ``rng.random`` (one stream per row when the decoder seeds rows separately)."""
    p, q, d = (torch.from_numpy(np.ascontiguousarray(a)) for a in (target_probs, draft_probs, draft_ids))
    B, L = d.shape
    rows, pos = torch.arange(B)[:, None], torch.arange(L)[None, :]
    ratio = p[rows, pos, d] / q[rows, pos, d]                                   # p_i(d_i) / q_i(d_i), (B, L)
    accept = torch.from_numpy(rng.random((B, L))) < ratio                       # u_i < p / q
    tau = accept.to(torch.int64).cumprod(dim=1).sum(dim=1)                      # accepted prefix length, (B,)
    at = tau.clamp(max=L - 1)
    residual = (p[torch.arange(B), at] - q[torch.arange(B), at]).clamp_min(0)   # (p_tau - q_tau)_+, (B, V)
    law = torch.where((tau == L)[:, None], p[:, L], residual)                   # bonus row after a full accept
    cdf = torch.cumsum(law / law.sum(dim=1, keepdim=True), dim=1)
    u = torch.from_numpy(rng.random(B))[:, None]
    token = torch.minimum((cdf < u).sum(dim=1), torch.tensor(law.shape[1] - 1))  # inverse CDF
    out = torch.where(pos < tau[:, None], d, torch.tensor(-1))
    out = torch.cat([out, torch.full((B, 1), -1)], dim=1)
    out[torch.arange(B), tau] = token
    return out.numpy()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=None, help="continuations per prompt (default: the default budget)")
    args = ap.parse_args(argv)
    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    prompts = [[0], [1], [2]]
    rows, ref = [], None
    for name, kernel in (("token_chain_kernel", token_chain_kernel), ("batched(torch)", batched_kernel),
                         ("per_request(torch)", per_request(their_kernel))):
        w, c = time.perf_counter(), time.process_time()
        cert = exactness.certify_decoder(chain_decoder(kernel, pair, gamma=2), chain_target(pair), prompts,
                                         new_tokens=3, n=args.n, seed=0)
        w, c = time.perf_counter() - w, time.process_time() - c
        ref = ref or (w, c)
        rows.append((name, cert.passed, cert.n, w, c, w / ref[0], c / ref[1]))
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    exactness.certify_decoder(chain_decoder(per_request(their_kernel), pair, gamma=2), chain_target(pair), prompts,
                              new_tokens=3, n=20_000, seed=0)
    prof.disable()
    st = pstats.Stats(prof)
    total = max(v[3] for v in st.stats.values())
    inside = next(v[3] for k, v in st.stats.items() if k[2] == "their_kernel")
    print(f"load average {os.getloadavg()[0]:.1f}; pair: MarkovPair V = 3, gamma = 2, 3 prompts, 3 new tokens\n")
    print("| kernel | passed | n | wall s | CPU s | wall / numpy | CPU / numpy |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:,} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.1f}x | {r[6]:.1f}x |")
    print(f"\nper_request(torch) at n = 20,000 (profiled): {inside / total:.0%} of the certificate's time is inside "
          "the per-request kernel itself (its Python and torch calls per row), which no wrapper can remove")
    return 0


if __name__ == "__main__":
    sys.exit(main())
