"""Look-ahead reserve: the fused bucketed kernel vs the sorted reference, side by side in one run.

For every step of a k-candidate walk (the residual p_i of the look-ahead verifier, softmax_noise pairs)
it times the reserve of the reference (``resispec.verifiers.lookahead._lookahead_reserve_ref``: a stable
argsort over V and a numpy bisection) and of the kernel (``resispec._lookahead_fused.lookahead_rows``),
interleaved, best of ``--repeats``, and prints ms per row, their ratio and the largest reserve difference.

    python benchmarks/lookahead_fused.py                  # V = 151,936, B = 8, k = 8
    python benchmarks/lookahead_fused.py --V 1000 --k 4
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--B", type=int, default=8)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import resispec
    from resispec import _lookahead_fused as fused
    from resispec.verifiers.lookahead import _lookahead_reserve_ref
    from simulators.families import get_family

    rng = np.random.default_rng(args.seed)
    P, Q = get_family("softmax_noise").sample(rng, n=args.B, V=args.V)
    C = resispec.draw_candidates(Q, args.k, "iid", rng)
    _, ps, _ = resispec.get_verifier("resispec_lookahead").masses(P, Q, C)
    fused.lookahead_rows(P[:1], Q[:1], 2)            # compile / load the kernel outside the timings
    print(f"V={args.V:,}  B={args.B}  k={args.k}  best of {args.repeats}  "
          f"load average {os.getloadavg()[0]:.1f}  RESISPEC_THREADS={os.environ.get('RESISPEC_THREADS', '-')}")
    print("| step | k left | reference ms/row | kernel ms/row | speed-up | max abs reserve diff |")
    print("|---|---|---|---|---|---|")
    for i in range(args.k - 1):
        p_i = np.ascontiguousarray(ps[:, i])
        t_ref, t_new = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ref = _lookahead_reserve_ref(p_i, Q, args.k - i)
            t1 = time.perf_counter()
            new = fused.lookahead_rows(p_i, Q, args.k - i)[:, 1]
            t2 = time.perf_counter()
            t_ref.append(t1 - t0)
            t_new.append(t2 - t1)
        a, b = min(t_ref) / args.B * 1e3, min(t_new) / args.B * 1e3
        print(f"| {i + 1} | {args.k - i} | {a:.2f} | {b:.2f} | {a / b:.1f}x | {np.abs(new - ref).max():.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
