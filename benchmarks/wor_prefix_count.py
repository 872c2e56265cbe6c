"""Why ResiSpec for without-replacement drafts has no histogram fast path: distinct rejected prefixes.

The table and fast paths of ``exactness.fast_paths`` reach a detectable TV of 1e-3 at V = 151,936 by
drawing ~7.5e8 samples in O(k log V) each.  ResiSpec's without-replacement rule (``docs/RESISPEC.md``
s.4) continues after rejecting ``x`` from a residual that depends on ``x`` through an O(V) transport
plan, and the next step's reserve fixed point has per-token clip points that move with that residual:
every distinct rejected prefix ``(x_1, .., x_i)`` costs one O(V) step, even when each is computed once
and cached.  This script counts them on the node of ``benchmarks/fast_paths.py`` (``p`` Zipf(1) over V,
``q = 0.7 p + 0.3 perm(p)``), k = 4:

- distinct first rejections expected in ``N`` draws: ``sum_x (1 - exp(-N w_1(x)))``, ``w_1 = q - m_1`` the
  mass drafted and rejected at the first candidate (exact, one fixed point);
- distinct two-token prefixes: ``sum_{x1, x2} (1 - exp(-N w_1(x1) w_2^{(x1)}(x2)))``, estimated by
  importance sampling ``x1 ~ w_1`` (``--samples`` second steps, each one O(V) fixed point);
- the time one compiled step takes (``resispec._wor_fused.wor_step_rows``, one row, best of 5) and so the
  CPU time the prefixes alone would cost on one core, cached, before any third-level prefix.

Usage::

    python benchmarks/wor_prefix_count.py [--V 151936] [--draws 7.5e8] [--samples 12] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fast_paths import node  # noqa: E402
from resispec import get_verifier  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--draws", type=float, default=7.5e8, help="draws of the histogram test (7.5e8: TV 1e-3)")
    ap.add_argument("--samples", type=int, default=12, help="importance samples of the first rejection")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.V < 3 or a.draws < 1 or a.samples < 1:
        ap.error("--V must be >= 3, --draws >= 1 and --samples >= 1")
    V, N = a.V, a.draws
    p, q = node(V)
    v = get_verifier("resispec", drafting="without_replacement", solver="reference")
    t0 = time.process_time()
    m1 = v.step(p[None], q[None])[0][0]
    w1 = np.maximum(q - m1, 0.0)                       # drafted and rejected at the first candidate
    W1 = float(w1.sum())
    first = float(np.sum(-np.expm1(-N * w1)))           # sum_x (1 - exp(-N w_1(x)))
    rng = np.random.default_rng(a.seed)
    xs = rng.choice(V, size=a.samples, p=w1 / W1)
    est, rej2 = [], []
    for x in xs:
        _, nxt = v._reference_step(p[None], q[None], np.array([x]))
        q2 = q.copy()
        q2[x] = 0.0
        q2 /= q2.sum()
        w2 = np.maximum(q2 - v.step(nxt, q2[None])[0][0], 0.0)
        rej2.append(float(w2.sum()))
        est.append(W1 / w1[x] * float(np.sum(-np.expm1(-N * w1[x] * w2))))   # importance weight W1 / w1(x1)
    second, se = float(np.mean(est)), float(np.std(est) / np.sqrt(len(est)))
    try:
        from resispec._wor_fused import wor_step_rows

        wor_step_rows(p[None], q[None], xs[:1])          # compile
        best = min(_timed(wor_step_rows, p[None], q[None], xs[:1]) for _ in range(5))
    except ImportError:
        best = float("nan")
    print(f"V = {V:,}, k = 4, {N:.3g} draws (the histogram test's budget for TV 1e-3 at alpha 1e-3, power 0.99); "
          f"load average {os.getloadavg()[0]:.1f}, analysis {time.process_time() - t0:.1f} CPU s")
    print("| quantity | value |")
    print("|---|---|")
    print(f"| rejection at the first candidate | {W1:.3f} |")
    print(f"| rejection at the second, after a first rejection (mean of {len(rej2)}) | {np.mean(rej2):.3f} |")
    print(f"| distinct first rejections (x1) | {first:,.0f} |")
    print(f"| distinct two-token prefixes (x1, x2), estimated | {second:.2g} (s.e. {se:.1g}) |")
    print(f"| one compiled step at one prefix (CPU s) | {best:.2g} |")
    print(f"| the prefixes' steps alone, cached, one core | {(first + second) * best / 3600:.3g} hours |")


def _timed(f, *args) -> float:
    t = time.perf_counter()
    f(*args)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
