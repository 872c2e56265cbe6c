"""A black-box verifier with a bf16 draft: planned budget, fixed-n verdict and sequential stopping, side by side.

The black box (``BF16Draft``: only ``drafting``, ``draft_law`` and ``verify``; no chain) drafts its
candidate from ``q`` rounded to bfloat16 (and renormalised, as a sampler does) but computes the
speculative-sampling acceptance ``min(1, p / q)`` with the float64 ``q`` (k = 1; Leviathan et al. 2023,
arXiv 2211.17192).  Its output law is known exactly:

    pi(y) = qb(y) a(y) + (1 - sum_x qb(x) a(x)) r(y),   a = min(1, p / q),  r = (p - q)_+ / sum (p - q)_+

so each node's exact TV(pi, p) is printed next to: the planned n for that TV (fixed chi-square,
``exactness.power.samples_for_tv``, power 0.99, alpha 1e-3), the fixed-n run's time and verdict
(``certify_verifier(..., tv=TV)``; refused plans are shown with the reason), and the sequential run
(``sequential=True``): median time to reject over a few seeds and the fraction of the fixed-n budget used.

Run:  PYTHONPATH=. python benchmarks/bf16_budget.py [--seeds 3] [--workers 2] [--out reports/bf16_budget.md]
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from exactness import certify_verifier
from exactness.budget import plan_for_tv
from exactness.mutants import bfloat16
from simulators.families import get_family

#: (family, V, seed) of the nodes.
NODES = (("zipf", 8, 0), ("softmax_noise", 16, 0), ("shifted", 32, 0), ("zipf", 50, 1))


class BF16Draft:
    """Black box: candidate drawn from bf16-rounded q, acceptance ratio with float64 q (k = 1)."""

    drafting = "iid"
    supported_k = (1,)

    def draft_law(self, q):
        qb = bfloat16(q)
        return qb / qb.sum(axis=1, keepdims=True)

    def verify(self, p, q, candidates, rng):
        B = p.shape[0]
        rows = np.arange(B)
        x = candidates[:, 0]
        acc = rng.random(B) * q[rows, x] < p[rows, x]  # u < min(1, p / q) with the float64 q
        tokens = x.copy()
        rej = np.flatnonzero(~acc)
        if rej.size:
            r = np.maximum(p[rej] - q[rej], 0.0)
            c = np.cumsum(r, axis=1)
            tokens[rej] = (c > rng.random((rej.size, 1)) * c[:, -1:]).argmax(axis=1)
        return SimpleNamespace(tokens=tokens, accepted=np.where(acc, 0, -1).astype(np.int64))


def exact_law(p, q):
    """The black box's output law (V,) float64 (module docstring)."""
    qb = bfloat16(q)
    qb = qb / qb.sum()
    a = np.minimum(1.0, np.divide(p, q, out=np.ones_like(p), where=q > 0))
    r = np.maximum(p - q, 0.0)
    return qb * a + (1.0 - float(np.sum(qb * a))) * r / r.sum()


def node(family, V, seed):
    p, q = get_family(family).sample(np.random.default_rng(seed), n=1, V=V)
    return np.asarray(p, dtype=np.float64).reshape(-1), np.asarray(q, dtype=np.float64).reshape(-1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--out", type=Path, default=Path("reports/bf16_budget.md"))
    args = ap.parse_args(argv)
    bb = BF16Draft()
    rows = []
    t_all = time.perf_counter()
    for family, V, seed in NODES:
        p, q = node(family, V, seed)
        tv = 0.5 * float(np.abs(exact_law(p, q) - p).sum())
        n_fix, df = plan_for_tv(p, tv, alpha=args.alpha, power=0.99)
        # certify_verifier runs the e-process at alpha / (checks Holm counts): 3 for this black box (k = 1, no tree)
        n_seq, _ = plan_for_tv(p, tv, alpha=args.alpha / 3, power=0.99, sequential=True)
        row = {"node": f"{family} V={V}", "tv": tv, "df": df, "n_fix": n_fix, "n_seq": n_seq}
        t0 = time.perf_counter()
        try:
            cert = certify_verifier(bb, p, q, 1, tv=tv, alpha=args.alpha, seed=seed, tree=False,
                                    workers=args.workers)
            row.update(fixed_s=time.perf_counter() - t0, fixed=("PASS" if cert.passed else "FAIL")
                       + f" (marginal p = {cert.checks['marginal']:.2g})", est=cert.details["plan"]["estimated_seconds"])
        except ValueError as e:
            row.update(fixed_s=None, fixed="refused (" + ("memory limit" if "memory limit" in str(e) else "time limit")
                       + ", see below)", est=None, why=str(e))
        times, fracs, verdicts = [], [], []
        for s in range(args.seeds):
            t0 = time.perf_counter()
            try:
                cert = certify_verifier(bb, p, q, 1, tv=tv, alpha=args.alpha, seed=[seed, 100 + s], tree=False,
                                        workers=args.workers, sequential=True)
            except ValueError as e:
                verdicts.append("refused")
                row["why_seq"] = str(e)
                break
            sq = cert.details["sequential"]
            assert sq["n_max"] == n_seq, (sq["n_max"], n_seq)
            times.append(time.perf_counter() - t0)
            fracs.append(sq["n"] / n_fix)
            verdicts.append("FAIL" if not cert.passed else "PASS")
        row.update(seq_median_s=float(np.median(times)) if times else None,
                   seq_frac=float(np.median(fracs)) if fracs else None, seq=", ".join(verdicts))
        rows.append(row)
        print(row, flush=True)
    total = time.perf_counter() - t_all
    fmt = lambda x, f: "-" if x is None else format(x, f)  # noqa: E731
    L = ["# bf16 draft: budget by the bias to detect, fixed-n vs sequential", "",
         f"`PYTHONPATH=. python benchmarks/bf16_budget.py --seeds {args.seeds} --workers {args.workers}` on "
         f"{platform.machine()} ({args.workers} worker processes; the machine was shared), total {total:.0f} s. "
         f"Black-box verifier `BF16Draft` (k = 1, no chain): draft from bf16-rounded q, ratio with float64 q. "
         f"alpha {args.alpha:g}, power 0.99; plan for the node's exact TV. The sequential e-process runs at "
         f"alpha / 3 (3 checks in the Holm family), so its budget n_max is larger than the fixed n; its fraction "
         "is of the fixed-n budget. Planned times on stderr come from a 2,000-draw pilot (noisy under load).", "",
         "| node | exact TV | df | planned n (fixed) | fixed-n time (s) | fixed-n verdict | planned n_max (seq.) | "
         "seq. median time (s) | seq. fraction of fixed n | seq. verdicts |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['node']} | {r['tv']:.3g} | {r['df']} | {r['n_fix']:,} | {fmt(r['fixed_s'], '.1f')} | "
                 f"{r['fixed']} | {r['n_seq']:,} | {fmt(r['seq_median_s'], '.1f')} | {fmt(r['seq_frac'], '.3f')} | "
                 f"{r['seq']} |")
    for r in rows:
        if r.get("why"):
            L += ["", f"- {r['node']}, fixed n: {r['why']}"]
        if r.get("why_seq"):
            L += ["", f"- {r['node']}, sequential: {r['why_seq']}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(L) + "\n")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
