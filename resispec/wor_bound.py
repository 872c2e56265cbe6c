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
(O(k N) per token), so all prefixes cost O(V k N) for an N-point geometric
grid; the grid is refined until the bracket on alpha* is below ``tol``.

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


def _prefix_all_in(q_sorted: np.ndarray, k: int, t: np.ndarray):
    """Lower/upper bounds of ``Q(all k in H_m)`` for every prefix m = 1..V.

    ``q_sorted`` (V,) is the draft in prefix order; ``t`` (N,) an increasing
    grid starting above 0.  Returns (lo (V,), hi (V,)).
    """
    V = q_sorted.size
    N = t.size
    # complement mass c_m = q(H_m^c), computed as a suffix sum (no cancellation)
    c = np.concatenate([np.cumsum(q_sorted[::-1])[::-1][1:], [0.0]])
    n_pos = np.cumsum(q_sorted > 0)
    G = np.zeros((N, k))            # G[:, j] = P(exactly j of H's clocks rang by t), j < k
    G[:, 0] = 1.0
    lo = np.zeros(V)
    hi = np.zeros(V)
    tt = np.concatenate([[0.0], t])                          # knots t_0 = 0 .. t_N
    for m in range(V):
        qx = q_sorted[m]
        if qx > 0:
            stay = np.exp(-qx * t)[:, None]                  # clock not yet rung
            ring = -np.expm1(-qx * t)[:, None]
            G = G * stay + np.concatenate([np.zeros((N, 1)), G[:, :-1] * ring], axis=1)
        if n_pos[m] < k:
            continue                                         # cannot draw k tokens from H_m
        cm = c[m]
        if cm <= 0:
            lo[m] = hi[m] = 1.0
            continue
        F = np.clip(1.0 - G.sum(axis=1), 0.0, 1.0)           # F(t_1..t_N), non-decreasing
        F = np.maximum.accumulate(F)
        Fk = np.concatenate([[0.0], F])                      # F(t_0 = 0) = 0
        surv = np.exp(-cm * tt)                              # e^{-c t_l}
        w = surv[:-1] - surv[1:]
        tail = surv[-1]
        lo[m] = float(np.dot(Fk[:-1], w) + Fk[-1] * tail)
        hi[m] = float(np.dot(Fk[1:], w) + tail)
    return lo, hi


def alpha_star_wor(p, q, k: int, *, tol: float = 1e-4, max_points: int = 1 << 15) -> WorAlphaStar:
    """alpha* for without-replacement (successive-sampling) drafts, any V.

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
    if not (isinstance(tol, (int, float)) and tol > 0):
        raise ValueError(f"tol must be a positive float, got {tol!r}")
    p1, q1 = p2[0], q2[0]
    k = check_k(k)
    n_sup = int(np.count_nonzero(q1 > 0))
    if k > n_sup:
        raise ValueError(f"k = {k} exceeds the draft support ({n_sup} tokens) for without-replacement drafting")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q1 > 0, p1 / np.where(q1 > 0, q1, 1.0), np.inf)
    order = np.argsort(ratio, kind="stable")
    qs, ps = q1[order], p1[order]
    P = np.cumsum(ps)
    # grid: F(t) <= t^k / k! below t_min (its share is bounded in the bracket);
    # e^{-c t} < e^{-40} past t_max for every prefix with c >= 1e-12 (the tail
    # term of the bracket covers the rest, so the bracket stays certified).
    t_min = min(1.0, (1e-12 * math.factorial(k)) ** (1.0 / k))
    suffix = np.cumsum(qs[::-1])[::-1][1:]
    c_pos = suffix[suffix > 0]
    c_min = max(float(c_pos.min()), 1e-12) if c_pos.size else 1.0
    t_max = max(40.0 / c_min, 10.0 * t_min)
    n = 1024
    while True:
        t = np.geomspace(t_min, t_max, n)
        lo, hi = _prefix_all_in(qs, k, t)
        a_hi = 1.0 - max(0.0, float(np.max(lo - P)))          # smaller gap -> larger alpha*
        a_lo = 1.0 - max(0.0, float(np.max(hi - P)))
        if 0.5 * (a_hi - a_lo) <= tol or 2 * n > max_points:
            break
        n *= 2
    mid = 0.5 * (lo + hi)
    gap = mid - P
    m = int(np.argmax(gap))
    stat = 1.0 - max(0.0, float(gap[m]))
    a_lo, a_hi = np.clip([a_lo, a_hi], 0.0, 1.0)
    return WorAlphaStar(statistic=float(np.clip(stat, a_lo, a_hi)), lower=float(a_lo), upper=float(a_hi),
                        grid_points=n, prefix=m + 1 if gap[m] > 0 else 0)
