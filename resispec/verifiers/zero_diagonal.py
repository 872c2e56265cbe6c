"""Transport plans with a zero diagonal, one row at a time (O(V) per row).

Used by the without-replacement ResiSpec rule: the mass ``e(y)`` still owed to
token ``y`` must be routed through the rejection events ``x`` (mass ``u(x)``)
with nothing routed from ``x`` to ``x`` itself -- a rejected token can never
be drafted again.  Such a plan exists iff ``u(y) + e(y) <= U`` for every
``y`` (``U = sum u = sum e``; Hall's condition for the complete bipartite
graph minus a perfect matching).

Construction (constructive proof of sufficiency).  Sort the tokens by
``u + e`` descending, lay the supply intervals ``[A_j, A_j + u_j)`` forward
from 0 and the demand intervals backward from ``U``; the plan
``R(x, y) = |supply_x cap demand_y|`` has the right margins, and only the one
token where the running sum of ``u + e`` crosses ``U`` can overlap itself
(mass ``D``).  That diagonal is cleared by moving the fraction
``f = D / (U - u_* - e_* + D)`` of the block outside row and column ``*``
into row and column ``*`` (margins preserved; ``f <= 1`` by Hall).

The interval plan routes mass in blocks.  When the later candidates should
see leftovers shaped like the demands (as plain ``rrs_wor`` does with
``norm(d)``), :func:`rank_one_zero_diagonal` is preferred: rows
``R(x, .) = u(x) norm(b`` without ``x)`` for one vector ``b``;
:class:`LeftoverPlan` uses it where it exists and the interval plan
elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._reserve_tol import WOR_MARGIN_TOL, WOR_TINY
from .base import sum_of_others

_TINY = WOR_TINY


@dataclass(frozen=True)
class ZeroDiagonalPlan:
    """A zero-diagonal transport plan, stored in O(V) per row of the batch.

    Attributes (all float64 unless said)
    ----------
    u, e : (B, V)   supplies and demands
    start : (B, V)  supply interval start of each token
    dlo, dhi : (B, V)  demand interval of each token
    star : (B,) int64  the token whose diagonal is cleared
    f : (B,)   fraction moved
    ok : (B,) bool   Hall's condition holds (else the plan is not valid)
    """

    u: np.ndarray
    e: np.ndarray
    start: np.ndarray
    dlo: np.ndarray
    dhi: np.ndarray
    star: np.ndarray
    f: np.ndarray
    ok: np.ndarray

    def raw_rows(self, x: np.ndarray) -> np.ndarray:
        """Interval-overlap plan rows ``R(x_b, :)`` (B, V) before the diagonal fix."""
        rows = np.arange(x.size)
        a = self.start[rows, x][:, None]
        b = a + self.u[rows, x][:, None]
        return np.maximum(np.minimum(b, self.dhi) - np.maximum(a, self.dlo), 0.0)

    def rows(self, x: np.ndarray) -> np.ndarray:
        """Rows ``R(x_b, :)`` (B, V) of the zero-diagonal plan, ``x`` (B,) int64."""
        B, V = self.u.shape
        rows = np.arange(B)
        R = self.raw_rows(x)
        R[rows, x] = 0.0
        s = self.star
        is_star = x == s
        Rs = R[rows, s].copy()
        f = self.f[:, None]
        # row x != *: scale the outside block, move the rest to column *
        other = (1.0 - f) * R
        other[rows, s] = Rs + self.f * (self.u[rows, x] - Rs)
        # row *: add f * (column remainder outside row *)
        col_rest = np.maximum(self.e - R, 0.0)
        star_row = R + f * col_rest
        star_row[rows, s] = 0.0
        out = np.where(is_star[:, None], star_row, other)
        out[rows, x] = 0.0
        return np.maximum(out, 0.0)


def zero_diagonal_plan(u: np.ndarray, e: np.ndarray) -> ZeroDiagonalPlan:
    """Build the plan for supplies ``u`` and demands ``e`` (B, V), equal row totals.

    Returns
    -------
    ZeroDiagonalPlan
        ``ok`` is False in rows that violate ``u(y) + e(y) <= U``.
    """
    B, V = u.shape
    U = u.sum(axis=1)
    order = np.argsort(-(u + e), axis=1, kind="stable")
    us = np.take_along_axis(u, order, axis=1)
    es = np.take_along_axis(e, order, axis=1)
    A = np.cumsum(us, axis=1) - us
    Ecum = np.cumsum(es, axis=1)
    dlo_s = U[:, None] - Ecum
    dhi_s = dlo_s + es
    inv = np.argsort(order, axis=1)
    start = np.take_along_axis(A, inv, axis=1)
    dlo = np.take_along_axis(dlo_s, inv, axis=1)
    dhi = np.take_along_axis(dhi_s, inv, axis=1)
    diag = np.maximum(np.minimum(start + u, dhi) - np.maximum(start, dlo), 0.0)
    star = np.argmax(diag, axis=1)
    rows = np.arange(B)
    D = diag[rows, star]
    out_mass = U - u[rows, star] - e[rows, star] + D
    hall = np.all(u + e <= U[:, None] * (1.0 + 1e-12) + 1e-15, axis=1)
    ok = hall & ((D <= _TINY) | (out_mass > _TINY))
    f = np.where(D > 0, D / np.where(out_mass > _TINY, out_mass, 1.0), 0.0)
    f = np.clip(f, 0.0, 1.0)
    return ZeroDiagonalPlan(u=u, e=e, start=start, dlo=dlo, dhi=dhi, star=star, f=f, ok=ok)


_BISECT = 64

#: Largest column-sum error accepted from the rank-one plan (``resispec._reserve_tol.WOR_MARGIN_TOL``).
_MARGIN_TOL = WOR_MARGIN_TOL


def rank_one_zero_diagonal(u: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``sum_x u(x) norm(b without x) = e`` for ``b`` (rank-one, zero diagonal).

    Per token ``b(y) (S - u(y) / (1 - b(y))) = e(y)`` with
    ``S = sum_x u(x) / (1 - b(x))`` and ``sum b = 1``: ``b(y)`` is the smaller
    root of ``S b^2 - (S - u + e) b + e = 0`` (real for
    ``S >= (sqrt(e) + sqrt(u))^2``; ``b(y) = 0`` wherever ``e(y) = 0``, so only
    tokens with demand bound ``S`` from below), and the scalar ``S`` is found by
    bisection on ``sum_y b(y) = 1`` (O(V) per iteration).  Summing the
    per-token equations shows that the definition of ``S`` then holds.

    Parameters
    ----------
    u, e : ndarray, shape (B, V), float64 >= 0, equal row sums

    Returns
    -------
    b : ndarray, shape (B, V), rows sum to 1 where ``ok``
    ok : ndarray, shape (B,), bool -- False where no rank-one plan exists
    """
    W = e.sum(axis=1)
    # b(y) = 0 for any S where e(y) = 0, so only tokens with demand need real roots
    s_lo = np.max(np.where(e > 0, (np.sqrt(e) + np.sqrt(u)) ** 2, 0.0), axis=1)
    s_hi = np.maximum(2.0 * W + np.max(u, axis=1), s_lo)

    def roots(S):
        S = S[:, None]
        a1 = S - u + e
        disc = np.maximum(a1 * a1 - 4.0 * S * e, 0.0)
        den = a1 + np.sqrt(disc)
        return np.where(den > 0, 2.0 * e / np.where(den > 0, den, 1.0), 0.0)

    ok = (W > _TINY) & (roots(s_lo).sum(axis=1) >= 1.0)
    lo, hi = s_lo.copy(), s_hi.copy()
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        big = roots(mid).sum(axis=1) >= 1.0
        lo = np.where(big, mid, lo)
        hi = np.where(big, hi, mid)
    b = roots(lo)
    z = b.sum(axis=1, keepdims=True)
    b = np.where(z > 0, b / np.where(z > 0, z, 1.0), 0.0)
    # norm(b without x) needs sum_{y != x} b > 0 on rows with supply; b ~ 1 on a token without
    # supply is the one-demand-token plan R(x, y*) = u(x)
    ok &= np.all((b < 1.0 - 1e-12) | (u <= 0), axis=1)
    return b, ok


class LeftoverPlan:
    """Zero-diagonal plan for ``(u, e)``: rank-one where it exists, intervals elsewhere.

    Attributes
    ----------
    ok : ndarray (B,) bool
        Some zero-diagonal plan exists (Hall's condition).
    """

    def __init__(self, u: np.ndarray, e: np.ndarray):
        self.u = u
        self.intervals = zero_diagonal_plan(u, e)
        self.b, self.rank_one = rank_one_zero_diagonal(u, e)
        # the bisection leaves the column sums off by up to ~1e-11 on some rows: keep the
        # rank-one plan only where the columns its rows() produce match e, else intervals (exact)
        z = np.maximum(sum_of_others(self.b), _TINY)
        cols = self.b * sum_of_others(np.where(u > 0, u / z, 0.0))
        self.rank_one &= np.max(np.abs(cols - e), axis=1) <= _MARGIN_TOL
        self.ok = self.intervals.ok | self.rank_one

    def take(self, idx: np.ndarray) -> "LeftoverPlan":
        """The plan for rows ``idx`` of this batch."""
        out = object.__new__(LeftoverPlan)
        out.u, out.b, out.rank_one, out.ok = self.u[idx], self.b[idx], self.rank_one[idx], self.ok[idx]
        out.intervals = ZeroDiagonalPlan(*(getattr(self.intervals, f)[idx] for f in
                                          ("u", "e", "start", "dlo", "dhi", "star", "f", "ok")))
        return out

    def rows(self, x: np.ndarray) -> np.ndarray:
        """Rows ``R(x_b, :)`` (B, V) with ``R(x_b, x_b) = 0`` and row sums ``u(x_b)``."""
        rows = np.arange(x.size)
        r = self.b.copy()
        r[rows, x] = 0.0
        z = r.sum(axis=1, keepdims=True)
        r = r / np.where(z > 0, z, 1.0) * self.u[rows, x][:, None]
        if np.all(self.rank_one):
            return r
        return np.where(self.rank_one[:, None], r, self.intervals.rows(x))
