"""Look-ahead reserve: O(V) scan vs binary search (numpy) vs torch searchsorted, side by side.

Usage: python benchmarks/lookahead_search.py [--V 1000 10000] [--B 16] [--k 4] [--out reports/lookahead_search.md]

Times ``lookahead_schedule`` (the reserve of one candidate with ``k`` left)
on ``softmax_noise`` laws, three ways in one run, and prints the ratios:
``scan`` (the ``np.sum`` count, O(V) per query), ``bsearch`` (the vectorised
binary search of :func:`resispec._xp.count_sorted`, which
the numpy code uses above ``SCAN_MAX_V``) and
``torch`` (CPU float64: the same :func:`resispec.verifiers.lookahead.lookahead_schedule` on tensors, ``searchsorted``).
Also reports the largest difference between the three schedules.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec.verifiers.lookahead as la  # noqa: E402
from simulators.families import get_family  # noqa: E402


def _scan(rows_sorted, x, strict):
    return np.sum((rows_sorted < x[:, None]) if strict else (rows_sorted <= x[:, None]), axis=1)


def _best(f, reps=2):
    best, out = np.inf, None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--out", default=None, help="markdown report path (written atomically)")
    a = ap.parse_args(argv)
    import torch

    import resispec._xp as xpmod

    torch.set_num_threads(1)
    lines = [f"# Look-ahead schedule: scan vs binary search vs torch (B={a.B}, k={a.k}, 1 thread, best of 2)", "",
             "| V | scan s | bsearch s | torch s | scan/bsearch | scan/torch | max diff |",
             "|---|---|---|---|---|---|---|"]
    for V in a.V:
        P, Q = get_family("softmax_noise").sample(np.random.default_rng(V), n=a.B, V=V)
        orig = la.count_sorted
        try:
            la.count_sorted = _scan
            t_scan, s_scan = _best(lambda: la.lookahead_schedule(P, Q, a.k))
        finally:
            la.count_sorted = orig
        old_max = xpmod.SCAN_MAX_V
        try:
            xpmod.SCAN_MAX_V = 0                   # force the binary search
            t_bs, s_bs = _best(lambda: la.lookahead_schedule(P, Q, a.k))
        finally:
            xpmod.SCAN_MAX_V = old_max
        Pt, Qt = torch.from_numpy(P), torch.from_numpy(Q)
        t_t, s_t = _best(lambda: la.lookahead_schedule(Pt, Qt, a.k).numpy())
        diff = max(np.abs(s_scan - s_bs).max(), np.abs(s_scan - s_t).max())
        lines.append(f"| {V} | {t_scan:.3f} | {t_bs:.3f} | {t_t:.3f} | {t_scan / t_bs:.1f}x | {t_scan / t_t:.1f}x "
                     f"| {diff:.1e} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        d = os.path.dirname(os.path.abspath(a.out))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
