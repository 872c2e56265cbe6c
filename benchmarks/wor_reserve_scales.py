"""Reserve sizes for ResiSpec on without-replacement drafts: is the myopic fixed point (g = 1) the best size?

Exact enumeration (``resispec.acceptance_probability``) at V = 8, k = 4, six nodes per (family, T) of
``softmax_noise`` and ``zipf`` (``resispec.bench.gap._nodes``, seed 0, the nodes of ``reports/bench_gap.md``'s
small WOR cases).  Printed side by side, per cell, the fraction of the ``rrs_wor``-to-sequential-optimum gap
closed (the optimum: the WOR sequential LP, :func:`resispec.bounds.sequential_optimum`) by:

- ``g=...``: the fixed point with a constant reserve scale ``g`` at every non-last step
  (``get_verifier("resispec", drafting="without_replacement", scales=(g,))``);
- ``lookahead-scale``: the scale of the iid look-ahead, ``g_i = L_1 / (L_1 - L_2)`` from the look-ahead schedule
  of ``(p_i, q_i)`` with the candidates left (``resispec.verifiers.lookahead.lookahead_schedule``; ``g = 1`` for the
  last two candidates): the reserve for every remaining candidate instead of the next one.

With ``--k8``, the same question at k = 8 (the issue's "0.46 of the gap at k = 8, T = 0.7"), V = 1000, four
nodes per (family, T) of ``softmax_noise`` and ``zipf`` at T in {0.7, 1} (the nodes of ``reports/bench_gap.md``'s
Monte Carlo WOR cells), by Monte Carlo: per-step scale schedules ``g_1..g_7`` (constant, front-loaded from a larger
or smaller scale down to 1, the plain ``rrs_wor`` step first then g = 1), every schedule on the same candidates
(successive sampling), each step's acceptance taken in expectation over its coin (Rao-Blackwellised); printed:
acceptance and the paired difference to g = 1 with its standard error.

Every variant is exact (any scale gives an exact rule); only the acceptance moves.  Source: ResiSpec
(``docs/RESISPEC.md``), the without-replacement rule of ``resispec.verifiers.resispec_wor``.

Usage::

    python benchmarks/wor_reserve_scales.py          # about 1-2 minutes on 2 shared cores
    python benchmarks/wor_reserve_scales.py --k8     # about 2 minutes (k = 8, V = 1000, Monte Carlo)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec  # noqa: E402
from resispec._wor_fused import FALLBACK, wor_step_rows  # noqa: E402
from resispec.bench.gap import _nodes  # noqa: E402
from resispec.bounds import sequential_optimum  # noqa: E402
from resispec.verifiers.base import reject_update  # noqa: E402
from resispec.verifiers.lookahead import lookahead_schedule  # noqa: E402
from resispec.verifiers.resispec_wor import ResiSpecWOR  # noqa: E402

SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)
CELLS = [(f, T) for f in ("softmax_noise", "zipf") for T in (0.7, 1.0, 1.5)]
V, K, NODES = 8, 4, 6


class LookaheadScaleWOR(ResiSpecWOR):
    """The WOR rule with the per-row scale ``g_i = L_1 / (L_1 - L_2)`` of the iid look-ahead schedule."""

    def _chain(self, p, q, c):
        B, k = c.shape
        rows = np.arange(B)
        a = np.empty((B, k))
        p_i, q_i = p, q / q.sum(axis=1, keepdims=True)
        for i in range(k):
            x = c[:, i]
            left = k - i
            if i == k - 1:
                m = np.minimum(p_i, q_i)
                a[:, i] = np.clip(m[rows, x] / np.where(q_i[rows, x] > 0, q_i[rows, x], 1.0), 0.0, 1.0)
                p_i = reject_update(p_i, m)
                continue
            g = np.ones(B)
            if left > 2:
                L = lookahead_schedule(p_i, q_i, left)
                r2 = L[:, 1] - L[:, 2]
                g = np.where(r2 > 1e-12, L[:, 1] / np.where(r2 > 1e-12, r2, 1.0), 1.0)
            nxt = np.empty_like(p_i)
            for b in range(B):                       # one kernel call per row: each row has its own scale
                ab, rb, st, _ = wor_step_rows(p_i[b:b + 1].copy(), q_i[b:b + 1].copy(), x[b:b + 1], float(g[b]))
                if st[0] == FALLBACK:
                    ab, rb = ResiSpecWOR(scales=(float(g[b]),), solver="reference")._reference_step(
                        p_i[b:b + 1], q_i[b:b + 1], x[b:b + 1])
                a[b, i], nxt[b] = ab[0], rb[0]
            p_i = nxt
            q_i = q_i.copy()
            q_i[rows, x] = 0.0
            q_i = q_i / q_i.sum(axis=1, keepdims=True)
        return a, p_i


K8, V8, NODES8, DRAWS8 = 8, 1000, 4, 3000
SCHEDULES = {"g=1 (shipped)": [1.0] * 7, "g=0.75": [0.75] * 7, "g=1.25": [1.25] * 7,
             "1.5->1": list(np.linspace(1.5, 1.0, 7)), "1.25->1": list(np.linspace(1.25, 1.0, 7)),
             "0.75->1": list(np.linspace(0.75, 1.0, 7)), "plain, then 1": [0.0] + [1.0] * 6, "rrs_wor": [0.0] * 7}


def expected_acceptance(p, q, c, schedule) -> np.ndarray:
    """Per draw (n,) float64: the acceptance probability of the WOR rule with reserve scale ``schedule[i]`` at
    non-last step ``i`` (0 = the plain ``rrs_wor`` step) given the candidates ``c`` (n, k) int64 drawn by successive
    sampling from ``q`` (V,); ``p`` (V,) the target.  Each step's coin is integrated out:
    ``sum_i prod_{j<i} (1 - a_j) a_i`` with ``a_i = m_i(x_i) / q_i(x_i)``.  ``schedule``: k - 1 floats >= 0.
    Source: ResiSpec (arXiv 2608.24411, ``docs/RESISPEC.md`` s.4); successive sampling and ``rrs_wor``: RSD
    (arXiv 2402.14160)."""
    n, k = c.shape
    rows = np.arange(n)
    P, Q = np.tile(p, (n, 1)), np.tile(q / q.sum(), (n, 1))
    alive, acc = np.ones(n), np.zeros(n)
    for i in range(k):
        x = c[:, i]
        g = 0.0 if i == k - 1 else float(schedule[i])
        if g == 0.0:
            m = np.minimum(P, Q)
            a = m[rows, x] / Q[rows, x]
            R = reject_update(P, m)
        else:
            a, R, status, _ = wor_step_rows(P, Q, x, g)
            back = status == FALLBACK
            if back.any():
                a[back], R[back] = ResiSpecWOR(scales=(g,), solver="reference")._reference_step(P[back], Q[back],
                                                                                               x[back])
        a = np.clip(a, 0.0, 1.0)
        acc += alive * a                          # P(reach step i) P(accept x_i)
        alive = alive * (1.0 - a)
        P, Q = R, Q.copy()
        Q[rows, x] = 0.0
        Q /= Q.sum(axis=1, keepdims=True)         # q_{i+1} = norm(q_i without x_i)
    return acc


def main_k8() -> None:
    from exactness.sampling import draw_node_candidates
    from resispec.wor_bound import alpha_star_wor

    print(f"acceptance at V = {V8}, k = {K8}, {NODES8} nodes per cell, {DRAWS8} candidate draws per node "
          "(the same draws for every schedule); in brackets the paired difference to g=1 (shipped), +- 1 s.e.")
    print("| family | T | alpha*_wor | " + " | ".join(SCHEDULES) + " |")
    print("|---|---|---|" + "---|" * len(SCHEDULES))
    for fam in ("softmax_noise", "zipf"):
        for T in (0.7, 1.0):
            P, Q = _nodes(fam, 0, V8, T, NODES8)
            per = {s: [] for s in SCHEDULES}
            for b in range(NODES8):
                q = Q[b] / Q[b].sum()
                c = draw_node_candidates(q, K8, "without_replacement", np.random.default_rng(b).random((DRAWS8, K8)))
                for s, sched in SCHEDULES.items():
                    per[s].append(expected_acceptance(P[b], q, c, sched))
            ref = np.concatenate(per["g=1 (shipped)"])
            astar = np.mean([alpha_star_wor(P[b], Q[b], K8).statistic for b in range(NODES8)])
            cells = []
            for s, v in per.items():
                a = np.concatenate(v)
                d = a - ref
                cells.append(f"{a.mean():.4f}" + ("" if s.startswith("g=1 ") else
                                                   f" ({d.mean():+.4f} +- {d.std(ddof=1) / np.sqrt(d.size):.4f})"))
            print(f"| {fam} | {T} | {astar:.4f} | " + " | ".join(cells) + " |", flush=True)


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k8", action="store_true",
                    help="the k = 8, V = 1000 Monte Carlo study of per-step scale schedules (about 2 minutes)")
    if ap.parse_args(argv).k8:
        return main_k8()
    variants = {f"g={g}": resispec.get_verifier("resispec", drafting="without_replacement", scales=(g,))
                for g in SCALES}
    variants["lookahead-scale"] = LookaheadScaleWOR()
    base = resispec.get_verifier("rrs_wor")
    print(f"fraction of the rrs_wor-to-sequential-optimum gap closed; V = {V}, k = {K}, {NODES} nodes per cell")
    print("| family | T | " + " | ".join(variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    sums = {n: [] for n in variants}
    for fam, T in CELLS:
        P, Q = _nodes(fam, 0, V, T, NODES)
        a0 = np.mean([resispec.acceptance_probability(base, P[b], Q[b], K) for b in range(NODES)])
        opt = np.mean([sequential_optimum(P[b], Q[b], K, "without_replacement") for b in range(NODES)])
        row = []
        for n, v in variants.items():
            a = np.mean([resispec.acceptance_probability(v, P[b], Q[b], K) for b in range(NODES)])
            fr = (a - a0) / (opt - a0) if opt - a0 > 1e-4 else float("nan")
            row.append(fr)
            if np.isfinite(fr):
                sums[n].append(fr)
        print(f"| {fam} | {T} | " + " | ".join(f"{x:.3f}" for x in row) + " |", flush=True)
    print("| mean | | " + " | ".join(f"{np.mean(s):.3f}" for s in sums.values()) + " |")


if __name__ == "__main__":
    main()
