"""alpha* for without-replacement drafts past enumeration (``docs/RESISPEC.md`` s.5).

``alpha* = 1 - max_H [Q(all k drafts in H) - p(H)]`` (max-flow / min-cut).
For successive sampling (RSD, Jeon et al. 2024, arXiv 2402.14160) the draft
tuple is the ``k`` first arrivals of independent exponential clocks
``E_x ~ Exp(q(x))`` (equivalently Gumbel-top-k), so with ``c = q(H^c)``::

    Q(all k in H) = int_0^inf  c e^{-c t}  F_H(t) dt,
    F_H(t) = P(at least k clocks of H ring before t)      (Poisson-binomial).

``F_H`` is non-decreasing, so on any grid ``0 = t_0 < ... < t_N`` the
integral lies between the lower and upper Riemann-Stieltjes sums
``sum_l F(t_l) w_l`` and ``sum_l F(t_{l+1}) w_l`` with exact weights
``w_l = e^{-c t_l} - e^{-c t_{l+1}}`` (and a tail in ``[F(t_N), 1] e^{-c t_N}``):
a *certified* bracket.  Over the prefixes ``H_m`` of the tokens sorted by
``p/q`` ascending the Poisson-binomial table is updated one token at a time
(O(k N) per token).  A 512-point geometric grid is swept first; each cell's
largest width ``dF w`` then places the next grid (``s ~ sqrt(width)`` points
per cell, about ``(sum sqrt(width))^2 / tol`` in all), until the bracket on
alpha* is below ``tol``.  (F is computed to round-off, not made monotone;
the bracket is widened by ``4 V eps`` for that.)

Exact values and pruning (cost).  ``k = 1``: ``Q(all in H) = q(H)``; ``k = 2``:
``Q = q(H) - c sum_{x in H} q(x) / (1 - q(x))`` (sum over the first draw), exact
for every prefix in O(V).  For ``k >= 3`` every prefix gets the cheap
certified bracket

    Q2 prod_{j=2}^{k-1} (q(H) - s_j)_+ / (1 - s_j)  <=  Q(all k in H)  <=  Q2 q(H)^{k-2}

(``Q2`` the exact two-draw value, ``s_j`` the mass of the ``j`` largest
tokens of ``H``; given ``j`` drafts in ``H`` the next lands in ``H`` with
probability ``(q(H) - s)/(1 - s)``, decreasing in the drawn mass
``s <= s_j`` and at most ``q(H)``).  Only prefixes whose upper bound beats the
best lower bound can hold the maximum; the time grid is swept (numba,
O(k N) per token) only up to the last of them and integrated only at them,
and the bracket of the others is their cheap one.  Measured (2 shared
cores, RESISPEC_THREADS=2): V = 151,936, k = 4: about 9 s, k = 8: about 5 s,
k = 2: 0.05 s (it was 26 s at V = 1e3 and did not finish at V = 1e5); the
cost is O(k V) + O(k N m*) with ``m*`` the last live prefix and N a few
thousand points at ``tol = 1e-4``, and the grid pieces run on threads.

Restricting ``H`` to ratio-sorted prefixes is the conjecture of section 5
(it held against every subset on every small case we checked; the tests
check it again).  The prefix value is never below the true alpha*, so
"acceptance <= prefix alpha*" stays a valid test of bias.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._validation import as_laws, check_k
from .verifiers.base import sum_of_others

try:
    import numba

    _njit = numba.njit
except ImportError:  # pragma: no cover - numba is a declared dependency
    def _njit(*args, **kwargs):
        return lambda f: f

#: Least round-off allowance added to each side of the bracket (4 V eps for sums of V terms).
_ROUND = 1e-12


@dataclass(frozen=True)
class WorAlphaStar:
    """alpha* for without-replacement drafts with a certified bracket.

    Attributes
    ----------
    statistic : float
        Mid-point estimate of alpha* (over ratio-sorted prefixes).
    lower, upper : float
        Certified bounds: ``lower <= alpha*_prefix <= upper``.
    grid_points : int
        Size of the time grid that reached the tolerance.
    prefix : int
        Number of tokens in the maximising prefix ``H``.
    """

    statistic: float
    lower: float
    upper: float
    grid_points: int
    prefix: int

    @property
    def error(self) -> float:
        """Half-width of the certified bracket."""
        return 0.5 * (self.upper - self.lower)


@_njit(cache=True, nogil=True)
def _top_sums(qs, k):
    """``s[m, j]`` = mass of the ``j`` largest entries of ``qs[:m + 1]``, j = 0..k-1 (V, k)."""
    V = qs.size
    top = np.zeros(k)                      # descending, top[0] largest
    out = np.zeros((V, k))
    for m in range(V):
        x = qs[m]
        i = k - 1
        if k > 1 and x > top[k - 2]:
            i = k - 2
            while i > 0 and x > top[i - 1]:
                top[i] = top[i - 1]
                i -= 1
            top[i] = x
        acc = 0.0
        for j in range(1, k):
            acc += top[j - 1]
            out[m, j] = acc
    return out


@_njit(cache=True, nogil=True, fastmath={"contract", "nsz"})
def _sweep(qs, k, t, evals, c, tail):
    """Partial certified sums of ``Q(all k in H_m)`` at the prefixes ``evals`` (sorted, int64).

    ``t`` (n + 1,) is a piece of the grid with the knot before it in front
    (``t[0] = 0`` for the first piece).  The Poisson-binomial table
    ``G[j, l] = P(exactly j clocks of H rang by t_l)``, ``j < k``, is updated
    token by token up to ``evals[-1]``; at each evaluated prefix
    ``F = 1 - sum_j G`` is integrated against ``c e^{-c t}`` over the cells
    ``(t[l-1], t[l]]`` by the lower and upper Riemann-Stieltjes sums with exact
    weights, plus (``tail``) the last piece's ``[F(t_N), 1] e^{-c t_N}``.
    Returns ``(lo, hi, cell)``; ``cell[l - 1]`` is the largest width
    ``(F(t_l) - F(t_{l-1})) w_l`` over the prefixes (to place a finer grid).
    """
    N = t.size
    G = np.zeros((k, N))                   # row j contiguous: the l loops vectorise
    G[0, :] = 1.0
    st = np.empty(N)
    rg = np.empty(N)
    lo = np.zeros(evals.size)
    hi = np.zeros(evals.size)
    cell = np.zeros(N - 1)
    e = 0
    last = evals[evals.size - 1] if evals.size else -1
    for m in range(last + 1):
        qx = qs[m]
        if qx > 0.0:
            for l in range(N):
                st[l] = math.exp(-qx * t[l])
                rg[l] = 1.0 - st[l]            # absolute error <= eps per token: within the V eps allowance
            for j in range(k - 1, 0, -1):
                for l in range(N):
                    G[j, l] = G[j, l] * st[l] + G[j - 1, l] * rg[l]
            for l in range(N):
                G[0, l] *= st[l]
        while e < evals.size and evals[e] == m:
            cm = c[m]
            if cm <= 0.0:                          # H holds all the mass: Q = 1
                lo[e] = 1.0 if tail else 0.0
                hi[e] = lo[e]
            else:
                g = 0.0
                for j in range(k):
                    g += G[j, 0]
                f_prev = min(max(1.0 - g, 0.0), 1.0)
                s_prev = math.exp(-cm * t[0])
                a_lo = 0.0
                a_hi = 0.0
                for l in range(1, N):
                    g = 0.0
                    for j in range(k):
                        g += G[j, l]
                    f = min(max(1.0 - g, 0.0), 1.0)
                    s_l = math.exp(-cm * t[l])
                    w = s_prev - s_l
                    a_lo += f_prev * w
                    a_hi += f * w
                    cell[l - 1] = max(cell[l - 1], abs(f - f_prev) * w)
                    f_prev = f
                    s_prev = s_l
                if tail:
                    a_lo += f_prev * s_prev
                    a_hi += s_prev
                lo[e] = a_lo
                hi[e] = a_hi
            e += 1
    return lo, hi, cell


def _sweep_threads(qs, k, t, evals, c):
    """:func:`_sweep` over the whole grid ``t`` (N,), split in pieces run on threads.

    Threads as in :mod:`resispec._reserve_fused` (``RESISPEC_THREADS``; the
    kernel releases the GIL).  Returns ``(lo, hi, cell (N,))``.
    """
    from ._reserve_fused import _pool, _threads

    knots = np.concatenate([[0.0], t])
    n = max(1, min(_threads(), t.size // 256))
    cuts = np.linspace(0, t.size, n + 1).astype(np.int64)
    jobs = [(knots[a:b + 1], b == t.size) for a, b in zip(cuts[:-1], cuts[1:])]
    if n == 1:
        parts = [_sweep(qs, k, piece, evals, c, tail) for piece, tail in jobs]
    else:
        futs = [_pool(n).submit(_sweep, qs, k, piece, evals, c, tail) for piece, tail in jobs]
        parts = [f.result() for f in futs]
    lo = np.sum([part[0] for part in parts], axis=0)
    hi = np.sum([part[1] for part in parts], axis=0)
    return lo, hi, np.concatenate([part[2] for part in parts])


def _refine(t: np.ndarray, cell: np.ndarray, eps: float, max_points: int) -> np.ndarray:
    """A finer grid: cell l split geometrically into ``s_l ~ sqrt(cell_l)`` parts.

    Splitting a cell in ``s`` parts divides both its ``F`` and weight steps by
    about ``s``, so its width becomes ``cell / s``; ``s_l = sqrt(cell_l) / lam``
    with ``lam = eps / sum sqrt(cell)`` makes the total about ``eps`` with the
    fewest points, ``(sum sqrt(cell))^2 / eps`` (any grid keeps the bracket
    certified; this only chooses where the points go).
    """
    root = np.sqrt(np.maximum(cell, 0.0))
    total = float(root.sum())
    if total <= 0:
        return t
    want = min(max(2 * t.size, int(total * total / eps) + t.size), max_points)
    parts = np.maximum(1, np.ceil(root / total * (want - t.size)).astype(np.int64) + 1)
    left = np.concatenate([[t[0] * 0.5], t[:-1]])      # cell 0 is (0, t_0]: split it from t_0 / 2
    pieces = [np.geomspace(a, b, s + 1)[1:] for a, b, s in zip(left, t, parts)]
    out = np.concatenate([t[:1] * 0.5, *pieces]) if parts[0] > 1 else np.concatenate(pieces)
    return np.unique(out)


def _two_draws(qs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``q(H_m)`` and the exact ``Q(first two draws in H_m)`` for every prefix m (V,), ``qs`` normalised."""
    qH = np.cumsum(qs)
    c = np.concatenate([np.cumsum(qs[::-1])[::-1][1:], [0.0]])      # q(H_m^c) as a suffix sum
    one_q = sum_of_others(qs[None, :])[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(qs > 0, qs / np.where(one_q > 0, one_q, 1.0), 0.0)
    Q2 = np.clip(qH - c * np.cumsum(r), 0.0, 1.0)
    return qH, c, Q2


def alpha_star_wor(p, q, k: int, *, tol: float = 1e-4, max_points: int = 1 << 15) -> WorAlphaStar:
    """alpha* for without-replacement (successive-sampling) drafts, any V.

    ``k <= 2`` is exact (O(V log V)); ``k >= 3`` is bracketed (module
    docstring), with cost O(k V) plus O(k N m*) for the numba grid sweep, where
    ``m*`` is the last ratio-sorted prefix that can still hold the maximum
    and ``N <= max_points`` the grid (about 2 s at V = 151,936, k = 4 or 8,
    on one core: ``tests/test_hardening_numerics.py``).

    Parameters
    ----------
    p, q : array_like, shape (V,), float64
        Target and draft laws of one node.
    k : int >= 1
        Candidates (at most the draft support).
    tol : float > 0
        Target half-width of the certified bracket on alpha*.
    max_points : int
        Largest time grid; if the bracket is still wider than ``tol`` the
        result says so through ``lower`` / ``upper``.

    Returns
    -------
    WorAlphaStar
        ``statistic`` (float), certified ``lower`` / ``upper``.

    Raises
    ------
    ValueError
        Bad laws, ``k`` above the draft support, non-positive ``tol``.
    """
    p2, q2, _ = as_laws(p, q)
    if p2.shape[0] != 1:
        raise ValueError(f"p and q must describe one node, shape (V,); got {p2.shape[0]} rows")
    if isinstance(tol, bool) or not (isinstance(tol, (int, float)) and tol > 0):
        raise ValueError(f"tol must be a positive float, got {tol!r}")
    p1, q1 = p2[0], q2[0]
    k = check_k(k)
    n_sup = int(np.count_nonzero(q1 > 0))
    if k > n_sup:
        raise ValueError(f"k = {k} exceeds the draft support ({n_sup} tokens) for without-replacement drafting")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q1 > 0, p1 / np.where(q1 > 0, q1, 1.0), np.inf)
    order = np.argsort(ratio, kind="stable")
    qs, ps = q1[order] / q1.sum(), p1[order]           # the sampler draws q / sum(q)
    P = np.cumsum(ps)
    feasible = np.cumsum(qs > 0) >= k                   # H_m can hold k distinct drafts
    qH, c, Q2 = _two_draws(qs)
    if k == 1:
        lo = hi = np.minimum(qH, 1.0)
    elif k == 2:
        lo = hi = Q2
    else:
        # (q(H) - s_j) / (1 - s_j) = a / (a + c) is increasing in a = q(H) - s_j: take a
        # below its round-off (sequential sums err by <= m eps) so the bound stays a lower bound
        s = _top_sums(qs, k)[:, 2:]
        err = 2.0 * np.finfo(float).eps * (np.arange(qs.size) + 2.0)[:, None]
        a = np.maximum(qH[:, None] - s - err, 0.0)
        den = a + c[:, None]
        fac = np.where(den > 0, a / np.where(den > 0, den, 1.0), 0.0)
        lo = Q2 * np.prod(fac, axis=1)
        hi = Q2 * np.minimum(qH, 1.0) ** (k - 2)
    lo = np.where(feasible, lo, 0.0)
    hi = np.where(feasible, hi, 0.0)
    n = 0
    if k >= 3:
        best_lo = float(np.max(lo - P))
        # prefixes whose gap can still be the largest and whose cheap bracket is wider than tol
        live = np.flatnonzero(feasible & (hi - P >= best_lo) & (hi - lo > tol))
        if live.size:
            # grid: F(t) <= t^k / k! below t_min (its share is bounded in the bracket);
            # e^{-c t} < e^{-40} past t_max for the live prefixes (the tail term covers the rest)
            t_min = min(1.0, (1e-12 * math.factorial(k)) ** (1.0 / k))
            c_live = c[live][c[live] > 0]
            c_min = max(float(c_live.min()), 1e-12) if c_live.size else 1.0
            t_max = max(40.0 / c_min, 10.0 * t_min)
            lo, hi = lo.copy(), hi.copy()
            t = np.geomspace(t_min, t_max, 512)
            n = 0
            while True:
                g_lo, g_hi, cell = _sweep_threads(qs, k, t, live.astype(np.int64), c)
                n = max(n, t.size)
                lo[live] = np.maximum(lo[live], g_lo)
                hi[live] = np.minimum(hi[live], g_hi)
                best = max(0.0, float(np.max(lo - P)))
                half = 0.5 * (max(0.0, float(np.max(hi - P))) - best)
                if half <= tol or t.size >= max_points:
                    break
                live = live[(hi[live] - P[live] >= best) & (hi[live] - lo[live] > tol)]
                if not live.size:
                    break
                t = _refine(t, cell, 1.6 * tol, max_points)
    a_hi = 1.0 - max(0.0, float(np.max(lo - P)))          # smaller gap -> larger alpha*
    a_lo = 1.0 - max(0.0, float(np.max(hi - P)))
    mid = 0.5 * (lo + hi)
    gap = mid - P
    m = int(np.argmax(gap))
    stat = 1.0 - max(0.0, float(gap[m]))
    rnd = max(_ROUND, 4.0 * qs.size * np.finfo(float).eps)
    a_lo, a_hi = np.clip([a_lo - rnd, a_hi + rnd], 0.0, 1.0)
    return WorAlphaStar(statistic=float(np.clip(stat, a_lo, a_hi)), lower=float(a_lo), upper=float(a_hi),
                        grid_points=n, prefix=m + 1 if gap[m] > 0 else 0)
