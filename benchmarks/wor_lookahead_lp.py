"""How much could a look-ahead add to ResiSpec on without-replacement drafts?  Idealised rules, solved by LP.

One-off study for issue 13 item 3 (a look-ahead reserve for without-replacement drafts).  At small V it puts,
side by side per (family, T), the fraction of the ``rrs_wor``-to-sequential-optimum gap closed by

- ``shipped``: ``get_verifier("resispec", drafting="without_replacement")`` (the myopic matched residual);
- ``iid-model LP``: at every step with ``n >= 3`` candidates left, the accepted mass ``m`` and the whole
  candidate-dependent residual plan ``R`` that maximise ``|m| + sum_x (value of branch x)``, where a branch's
  value is modelled by the best iid sequential verifier (:func:`resispec.bounds.sequential_optimum_iid`'s LP) with
  ``n - 1`` candidates drawn from ``q^(x) = norm(q without x)`` on the residual ``R(x, .)`` -- one LP per step
  holding ``m``, ``R`` and every branch's iid LP; with 2 candidates left the exact two-candidate optimum (the
  capacity LP below with ``q^(x)``), whose value the shipped rule attains;
- ``inclusion-capacity LP``: the same step with the branch value modelled by the upper bound
  ``sum_y min(r(y), pi(y))``, ``pi`` the inclusion probability of ``y`` in ``n - 1`` successive draws from ``q^(x)``
  (a look-ahead that believes later candidates take whatever they may draft);
- ``best scale per state``: the shipped rule's own step with its reserve scale ``g`` (``m = min(q, (p - g c(m))_+)``,
  the matched residual) or the plain ``rrs_wor`` step, the best chosen at every state with ``n >= 3`` candidates
  left by exact dynamic programming over the rest of the chain (``--scales``): the best any look-ahead that sizes
  the reserve per state (the literal "look-ahead reserve") can do with the shipped residual.

Every variant is exact (any ``m <= min(p, q)`` with a zero-diagonal plan ``R`` of row sums ``q - m`` and column
sums ``p - m`` is, ``docs/RESISPEC.md`` section 4); only the acceptance moves.  The LP rules are not practical
(a V^2 LP per prefix); they bound what a look-ahead built on either model could add to the shipped rule.  The
sequential optimum is :func:`resispec.bounds.sequential_optimum` (WOR), acceptance by recursion over prefixes.

Usage::

    python benchmarks/wor_lookahead_lp.py                  # V = 8, k = 4, 6 nodes per cell: ~1 min
    python benchmarks/wor_lookahead_lp.py --V 7 --k 5      # ~2-3 min (the scale DP: minutes more)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec  # noqa: E402
from resispec._wor_fused import FALLBACK, wor_step_rows  # noqa: E402
from resispec.bench.gap import _nodes  # noqa: E402
from resispec.bounds import sequential_optimum  # noqa: E402
from resispec.verifiers.base import reject_update  # noqa: E402
from resispec.verifiers.resispec_wor import ResiSpecWOR  # noqa: E402

CELLS = [(f, T) for f in ("softmax_noise", "zipf") for T in (0.7, 1.0, 1.5)]


def without(q: np.ndarray, x: int) -> np.ndarray:
    """``q^(x)`` (V,) float64: the next successive-sampling draft after ``x`` is drafted from ``q`` (V,) float64
    (zero vector if nothing is left).  Successive sampling as in RSD (arXiv 2402.14160)."""
    q2 = q.copy()
    q2[x] = 0.0
    s = q2.sum()
    return q2 / s if s > 0 else q2


def inclusion(q: np.ndarray, n: int) -> np.ndarray:
    """(V,) float64: probability that each token is among ``n`` successive draws from ``q`` (V,) float64
    (exact enumeration over V!/(V-n)! sequences: small V only)."""
    pi = np.zeros(q.size)

    def walk(qq, left, pr):
        s = qq.sum()
        if left == 0 or s <= 0:
            return
        for x in np.flatnonzero(qq > 0):
            px = pr * qq[x] / s
            pi[x] += px
            q2 = qq.copy()
            q2[x] = 0.0
            walk(q2, left - 1, px)

    walk(q.copy(), n, 1.0)
    return pi


class _LP:
    """A small sparse LP builder: maximise ``c . z`` over ``lo <= z <= hi``, ``A_ub z <= b``, ``A_eq z = b``."""

    def __init__(self):
        self.n, self.c, self.lo, self.hi, self.ub, self.eq = 0, [], [], [], [], []

    def var(self, shape, hi=None, gain=0.0):
        k = int(np.prod(shape))
        idx = np.arange(self.n, self.n + k).reshape(shape)
        self.n += k
        self.c += [gain] * k
        self.lo += [0.0] * k
        self.hi += list(np.broadcast_to(np.inf if hi is None else np.asarray(hi, float), shape).ravel())
        return idx

    def le(self, idx, coef, rhs):
        self.ub.append((list(idx), list(coef), rhs))

    def eq_(self, idx, coef, rhs):
        self.eq.append((list(idx), list(coef), rhs))

    def solve(self) -> np.ndarray:
        def mat(rows):
            r = [i for i, (idx, _, _) in enumerate(rows) for _ in idx]
            c = [j for idx, _, _ in rows for j in idx]
            v = [a for _, coef, _ in rows for a in coef]
            return coo_matrix((v, (r, c)), shape=(len(rows), self.n)).tocsr(), np.array([b for *_, b in rows])

        A_ub, b_ub = mat(self.ub) if self.ub else (None, None)
        A_eq, b_eq = mat(self.eq)
        res = linprog(-np.array(self.c), A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq,
                      bounds=list(zip(self.lo, [None if h == np.inf else h for h in self.hi])), method="highs")
        if res.status != 0:
            raise RuntimeError(f"LP failed: {res.message}")
        return res.x


def _step_common(lp: _LP, p, q):
    """``m`` and the zero-diagonal plan ``R`` with row sums ``q - m`` and column sums ``p - m``."""
    V = p.size
    m = lp.var((V,), hi=np.minimum(p, q), gain=1.0)
    allowed = (q[:, None] > 0) & ~np.eye(V, dtype=bool)
    R = lp.var((V, V), hi=np.where(allowed, np.inf, 0.0))
    for x in range(V):
        lp.eq_(list(R[x]) + [m[x]], [1.0] * (V + 1), q[x])         # sum_y R(x, y) = q(x) - m(x)
        lp.eq_(list(R[:, x]) + [m[x]], [1.0] * (V + 1), p[x])      # sum_x R(x, y) = p(y) - m(y)
    return m, R


def step_capacity(p, q, cap):
    """max ``|m| + sum_{x,y} min(R(x,y), (q(x) - m(x)) cap(x,y))`` for ``p, q`` (V,) float64 and ``cap`` (V, V)
    float64 (capacity per unit of branch mass).  Returns ``m`` (V,) and ``R`` (V, V) float64; RuntimeError if the
    LP fails."""
    lp = _LP()
    m, R = _step_common(lp, p, q)
    V = p.size
    t = lp.var((V, V), gain=1.0)
    for x in range(V):
        for y in range(V):
            lp.le([t[x, y], R[x, y]], [1.0, -1.0], 0.0)                    # t <= R
            lp.le([t[x, y], m[x]], [1.0, cap[x, y]], q[x] * cap[x, y])     # t <= (q(x) - m(x)) cap
    z = lp.solve()
    return np.clip(z[m], 0, None), np.clip(z[R], 0, None)


def step_iid_model(p, q, n):
    """The step whose branches are valued by the best iid verifier (the LP of
    :func:`resispec.bounds.sequential_optimum_iid`) with ``n - 1`` candidates from ``q^(x)``.  ``p, q`` (V,)
    float64; returns ``m`` (V,) and ``R`` (V, V) float64; RuntimeError if the LP fails."""
    lp = _LP()
    m, R = _step_common(lp, p, q)
    V = p.size
    for x in np.flatnonzero(q > 0):
        qq = without(q, x)
        M = lp.var((n - 1, V), gain=1.0)                # M_i(y): branch x accepts y at its i-th candidate
        for y in range(V):
            lp.le(list(M[:, y]) + [R[x, y]], [1.0] * (n - 1) + [-1.0], 0.0)   # sum_i M_i(y) <= R(x, y)
        for i in range(n - 1):                          # M_i(y) <= q^(x)(y) (w(x) - sum_{j<i} sum_z M_j(z))
            earlier = M[:i].ravel()
            for y in range(V):
                lp.le([M[i, y], m[x]] + list(earlier), [1.0, qq[y]] + [qq[y]] * earlier.size, qq[y] * q[x])
    z = lp.solve()
    return np.clip(z[m], 0, None), np.clip(z[R], 0, None)


def acceptance(p, q, n, model) -> float:
    """Exact acceptance probability (float) of the LP rule ``model`` ("iid" or "inclusion") with ``n``
    candidates left at ``p, q`` (V,) float64 (recursion over rejected prefixes: V^(n-1) LPs)."""
    if n == 1:
        return float(np.minimum(p, q).sum())
    V = p.size
    if n == 2:
        m, R = step_capacity(p, q, np.array([without(q, x) for x in range(V)]))
    elif model == "iid":
        m, R = step_iid_model(p, q, n)
    else:
        m, R = step_capacity(p, q, np.array([inclusion(without(q, x), n - 1) for x in range(V)]))
    value = m.sum()
    for x in range(V):
        w = R[x].sum()
        if w > 1e-14 and q[x] > 0:
            value += w * acceptance(R[x] / w, without(q, x), n - 1, model)
    return value


def scale_step(p, q, g):
    """One non-last step at ``p, q`` (V,) float64 for every draftable candidate: ``(xs, a, R)`` with ``xs`` the
    tokens with ``q > 0``, ``a`` (len(xs),) their acceptance probabilities ``m(x) / q(x)`` and ``R`` (len(xs), V)
    the residual after rejecting each.  ``g > 0``: the shipped rule with reserve scale ``g`` (its kernel, which
    itself keeps the better of the shaped and plain steps by next-step value; the numpy reference where the
    kernel hands a row back); ``g = 0``: the plain ``rrs_wor`` step.  Source: ResiSpec (arXiv 2608.24411,
    ``docs/RESISPEC.md`` s.4); ``rrs_wor``: RSD (arXiv 2402.14160)."""
    xs = np.flatnonzero(q > 0)
    P, Q = np.tile(p, (xs.size, 1)), np.tile(q, (xs.size, 1))
    if g == 0:
        m = np.minimum(P, Q)
        return xs, m[np.arange(xs.size), xs] / q[xs], reject_update(P, m)
    a, R, status, _ = wor_step_rows(P, Q, xs.astype(np.int64), float(g))
    back = status == FALLBACK
    if back.any():
        a[back], R[back] = ResiSpecWOR(scales=(float(g),), solver="reference")._reference_step(P[back], Q[back],
                                                                                              xs[back])
    return xs, a, R


def acceptance_best_scale(p, q, n, scales) -> float:
    """Exact acceptance (float) with ``n`` candidates left at ``p, q`` (V,) float64 when every state with ``n >= 3``
    takes the best of ``scale_step(., ., g)`` over ``g`` in ``scales`` (0 = plain ``rrs_wor``), by dynamic
    programming over the whole rest of the chain; states with 2 left take the shipped step (``g = 1``, optimal
    there).  Cost: (len(scales) V)^(n - 2) steps, small V only."""
    if n == 1:
        return float(np.minimum(p, q).sum())
    best = -np.inf
    for g in (scales if n >= 3 else (1.0,)):
        xs, a, R = scale_step(p, q, g)
        val = 0.0
        for j, x in enumerate(xs):
            val += q[x] * a[j]                                          # accept x: m(x) = q(x) a(x)
            if a[j] < 1:                                                # reject x: continue from R(x, .)
                val += q[x] * (1 - a[j]) * acceptance_best_scale(R[j], without(q, x), n - 1, scales)
        best = max(best, val)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--V", type=int, default=8, help="vocabulary size (default 8; the LPs grow like V^2 k)")
    ap.add_argument("--k", type=int, default=4, help="candidates (default 4; 3 <= k <= V)")
    ap.add_argument("--nodes", type=int, default=6, help="nodes per (family, T) cell (default 6)")
    ap.add_argument("--scales", default="0,0.5,0.75,1,1.25,1.5,2",
                    help="reserve scales the per-state DP chooses from (0 = plain rrs_wor; default 0,0.5,...,2)")
    a = ap.parse_args(argv)
    if not 3 <= a.k <= a.V or a.V > 10 or a.nodes < 1:
        ap.error("need 3 <= --k <= --V <= 10 and --nodes >= 1 (the sequential optimum is an LP over V^(k-1) prefixes)")
    t0 = time.time()
    shipped = resispec.get_verifier("resispec", drafting="without_replacement")
    base = resispec.get_verifier("rrs_wor")
    scales = tuple(float(g) for g in a.scales.split(","))
    if 1.0 not in scales or any(g < 0 for g in scales):
        ap.error("--scales must be non-negative and include 1 (the shipped scale)")
    names = ("shipped", "iid-model LP", "inclusion-capacity LP", "best scale per state")
    print(f"fraction of the rrs_wor-to-sequential-optimum gap closed; V = {a.V}, k = {a.k}, {a.nodes} nodes per cell")
    print("| family | T | gap (opt - rrs_wor) | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    fracs = {n: [] for n in names}
    for fam, T in CELLS:
        P, Q = _nodes(fam, 0, a.V, T, a.nodes)
        acc = {n: [] for n in names}
        a0, opt = [], []
        for p, q in zip(P, Q):
            a0.append(resispec.acceptance_probability(base, p, q, a.k))
            opt.append(sequential_optimum(p, q, a.k, "without_replacement"))
            acc["shipped"].append(resispec.acceptance_probability(shipped, p, q, a.k))
            acc["iid-model LP"].append(acceptance(p, q, a.k, "iid"))
            acc["inclusion-capacity LP"].append(acceptance(p, q, a.k, "inclusion"))
            acc["best scale per state"].append(acceptance_best_scale(p, q, a.k, scales))
        gap = np.mean(opt) - np.mean(a0)
        row = {n: (np.mean(v) - np.mean(a0)) / gap if gap > 1e-4 else float("nan") for n, v in acc.items()}
        for n, f in row.items():
            if np.isfinite(f):
                fracs[n].append(f)
        print(f"| {fam} | {T} | {gap:.4f} | " + " | ".join(f"{row[n]:.3f}" for n in names) + " |", flush=True)
    print("| mean | | | " + " | ".join(f"{np.mean(fracs[n]):.3f}" for n in names) + " |")
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
