"""Fused CPU solver of the ResiSpec reserve: one compiled pass over a row per Newton step.

The reserve ``lambda`` (``docs/RESISPEC.md`` section 4) is the smallest root
of the non-decreasing (``0 <= gamma <= 1``) piecewise-linear

    g(lambda) = lambda - gamma (1 - s(lambda)),   s(lambda) = sum_x min(q, (p - lambda rho)_+),

whose knots are ``(p - q)_+ / rho`` and ``p / rho`` (``rho > 0``).  With
numpy or eager torch every Newton step is several passes over (B, V) arrays
in main memory; here each row is solved by one thread (``numba.prange`` over
rows), so after the first pass the row stays in cache, and one pass computes
everything a step needs: ``s``, the right and left slopes of ``g``, the
accepted mass ``m = min(q, (p - lambda rho)_+)`` (written in place, so the
returned ``m`` is the one at the returned ``lambda``), and whether any token
changed state (saturated / active / off) since the previous iterate.

Answer (the same as the sort solver of
:func:`resispec.verifiers.resispec.solve_reserve`, to round-off): the sort
solver returns, on the first knot ``t_j`` with ``g(t_j) >= -tol``
(``tol = 1e-13 (1 + gamma)``), the root of ``g``'s line on
``[t_{j-1}, t_j]``.  Newton steps from a point ``x`` with ``g(x) < -tol``
land on the root of ``g``'s line through ``x``; when the pass at that root
sees no token change state (no knot in between) it is that answer, exactly
(the "exact finish").  Steps that leave the bracket ``(lo, hi]`` bisect.  For
``gamma = 1`` ``g`` can vanish on a whole piece where every token with
``rho > 0`` is active; when the iterate sits on such a piece (``|g| <= tol``
and zero left slope) the piece's left end ``max (p - q)_+ / rho`` is
evaluated and returned: the smallest root.  If the bracket shrinks below
``4 eps gamma`` first (round-off in ``s``), its last iterate is returned:
error at most ``4 eps gamma`` in ``lambda``.

Sums are accumulated in float64 whatever the input dtype, in a vectorised
(re-associated) order, so ``s`` differs from ``numpy.sum`` by round-off only.

Cost: one pass per Newton step over a row that stays in cache; on the
``simulators`` families at V = 151,936 about 6-8 passes cold and 4-5
warm-started, against 3-5 passes over main memory per step in the eager
torch solver (measured by ``resispec bench-verify``).
"""

from __future__ import annotations

import warnings

import numpy as np

try:
    import numba
    AVAILABLE = True
    _njit, _prange = numba.njit, numba.prange
except ImportError:  # pragma: no cover - numba is a declared dependency
    AVAILABLE = False

    def _njit(*args, **kwargs):
        return lambda f: f

    _prange = range

__all__ = ["AVAILABLE", "solve_reserve_rows", "ROOT_TOL", "warmup", "warn_unavailable"]

#: ``g >= -ROOT_TOL (1 + gamma)`` counts as reaching 0 (as the numpy sort solver).
ROOT_TOL = 1e-13
#: Largest number of passes per row (bisection alone needs about 60 in float64).
MAX_PASSES = 200

_FASTMATH = {"reassoc", "contract", "nsz"}   # vectorised sums; NaN / inf semantics kept


@_njit(cache=True, fastmath=_FASTMATH, nogil=True)
def _pass(p, q, rho, x, x_prev, delta, m):
    """One pass at ``x``; writes ``m = min(q, (p - x rho)_+)`` and returns

    ``s``, the rho-mass active just right / just left of ``x`` (slopes), the
    number of tokens whose state changed between ``x_prev`` and ``x``, and
    the number of tokens with ``rho > 0`` saturated beyond ``x + delta`` or
    off before ``x - delta`` (0 = ``x`` is on the all-active piece).
    """
    s = 0.0
    a_right = 0.0
    a_left = 0.0
    changed = 0.0
    not_all = 0.0
    for j in range(p.shape[0]):
        pj = np.float64(p[j])
        qj = np.float64(q[j])
        rj = np.float64(rho[j])
        y = pj - x * rj
        z = min(qj, max(y, 0.0))
        m[j] = z
        s += z
        a_right += rj if (y > 0.0 and y <= qj) else 0.0     # active just right of x
        a_left += rj if (y >= 0.0 and y < qj) else 0.0      # active just left of x
        y0 = pj - x_prev * rj
        changed += 1.0 if ((y0 > qj) != (y > qj)) or ((y0 > 0.0) != (y > 0.0)) else 0.0
        not_all += 1.0 if rj > 0.0 and (y > qj + delta * rj or y < -delta * rj) else 0.0
    return s, a_right, a_left, changed, not_all


@_njit(cache=True, fastmath=_FASTMATH, nogil=True)
def _flat_left(p, q, rho):
    """Left end ``max (p - q)_+ / rho`` (``rho > 0``) of the all-active piece."""
    left = 0.0
    for j in range(p.shape[0]):
        rj = np.float64(rho[j])
        if rj > 0.0:
            d = np.float64(p[j]) - np.float64(q[j])
            if d > 0.0:
                left = max(left, d / rj)
    return left


@_njit(cache=True, fastmath=_FASTMATH, nogil=True)
def _solve_row(p, q, rho, gamma, init, tol, eps, m):
    """One row: returns ``(lambda, passes, g(lambda), exact)``; ``m`` holds the mass at ``lambda``."""
    delta = 64.0 * eps            # knots within delta of x count as at x (all-active test)
    hi = gamma                     # g(gamma) = gamma s(gamma) >= 0: the answer is <= gamma
    passes = 0
    if init < 0.0:                 # cold start: g(0) = -gamma TV, then the lower bound gamma TV
        s, ar, al, c, na = _pass(p, q, rho, 0.0, 0.0, delta, m)
        passes = 1
        g = -gamma * (1.0 - s)
        if g >= -tol:
            return 0.0, passes, g, True          # no reserve needed (TV ~ 0)
        lo = 0.0
        x = gamma * (1.0 - s)
        if not (x > lo and x < hi):
            x = 0.5 * (lo + hi)
    else:
        lo = -1.0                  # g(0) unknown: steps may reach 0
        x = min(max(init, 0.0), gamma)
    x_prev = x
    newton = False                 # x is the root of g's line through x_prev, with g(x_prev) < -tol
    while True:
        s, ar, al, c, na = _pass(p, q, rho, x, x_prev, delta, m)
        passes += 1
        g = x - gamma * (1.0 - s)
        if newton and c == 0:
            return x, passes, g, True            # exact finish: g is linear on [x_prev, x]
        if abs(g) <= tol:
            if x <= 0.0:
                return 0.0, passes, g, True
            if gamma == 1.0 and na == 0.0:
                # on the all-active piece, where g is flat (gamma = 1): its left end is the smallest root
                left = _flat_left(p, q, rho)
                if left < x:
                    s2, ar2, al2, c2, na2 = _pass(p, q, rho, left, left, delta, m)
                    passes += 1
                    g2 = left - gamma * (1.0 - s2)
                    if abs(g2) <= tol:
                        return left, passes, g2, True
                    _pass(p, q, rho, x, x, delta, m)       # m back to m(x)
                    passes += 1
            return x, passes, g, True
        if g < 0.0:
            lo = max(lo, x)
        else:
            hi = min(hi, x)
        if hi - max(lo, 0.0) <= 4.0 * eps * gamma or passes >= MAX_PASSES:
            return x, passes, g, False
        # Newton: from the left with the right slope (lands on the root of the line), from the
        # right with the left slope
        dg = 1.0 - gamma * (ar if g < 0.0 else al)
        xn = -1.0
        newton = False
        if dg > 0.0:
            xn = x - g / dg
            newton = g < 0.0
        if not (xn > lo and xn <= hi and xn >= 0.0) or (passes > 24 and passes % 2 == 0):
            xn = 0.5 * (max(lo, 0.0) + hi)
            newton = False
        if xn == x:
            return x, passes, g, False
        x_prev = x
        x = xn


@_njit(parallel=True, cache=True, nogil=True)
def _solve_rows(p, q, rho, gamma, init, tol, eps, lam, m, passes, resid, exact):
    for b in _prange(p.shape[0]):
        lam[b], passes[b], resid[b], exact[b] = _solve_row(p[b], q[b], rho[b], gamma, init[b], tol, eps, m[b])


def solve_reserve_rows(p_i: np.ndarray, q_i: np.ndarray, rho: np.ndarray, gamma: float,
                       init: np.ndarray | None = None, out: np.ndarray | None = None):
    """Reserve ``lambda`` and accepted mass ``m`` for every row, by the fused Newton solver.

    Parameters
    ----------
    p_i, q_i, rho : ndarray, shape (B, V), float64 or float32, C-contiguous
        Residual target, current draft and proxy (rows sum to 1; one dtype).
    gamma : float in [0, 1]
        Reserve scale.
    init : ndarray, shape (B,), float64, optional
        Warm start (e.g. the previous candidate's reserve); speed only.
    out : ndarray, shape (B, V), dtype of ``p_i``, optional
        Buffer for ``m`` (must not alias the inputs).

    Returns
    -------
    lam : ndarray, shape (B,), float64 in [0, gamma]
    m : ndarray, shape (B, V)
        ``min(q_i, (p_i - lam rho)_+)`` at the returned ``lam``.
    passes : ndarray, shape (B,), int64
        Passes over each row.
    resid : ndarray, shape (B,), float64
        ``g(lam)``.
    exact : ndarray, shape (B,), bool
        ``True`` where the answer is the sort solver's to round-off; ``False``
        where the bracket shrank below ``4 eps gamma`` first.

    Raises
    ------
    ValueError
        ``gamma`` outside [0, 1], mismatched shapes / dtypes, non-contiguous arrays.
    ImportError
        numba is not installed.

    Source: the fixed point of ``docs/RESISPEC.md`` section 4; safeguarded
    Newton with an exact finish on piecewise-linear ``g``.
    """
    if not AVAILABLE:
        raise ImportError("the fused reserve solver needs numba (pip install numba); "
                          "use the sort solver (method='sort' / solver='sort') or solver='newton' (torch)")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"the fused reserve solver needs 0 <= gamma <= 1, got {gamma}; use the sort solver")
    arrays = (p_i, q_i, rho)
    if any(a.ndim != 2 or a.shape != p_i.shape for a in arrays):
        raise ValueError(f"p_i, q_i and rho must share one (B, V) shape, got "
                         f"{[a.shape for a in arrays]}")
    if any(a.dtype != p_i.dtype for a in arrays) or p_i.dtype not in (np.float64, np.float32):
        raise ValueError(f"p_i, q_i and rho must all be float64 or all float32, got {[a.dtype for a in arrays]}")
    if not all(a.flags.c_contiguous for a in arrays):
        raise ValueError("p_i, q_i and rho must be C-contiguous (np.ascontiguousarray / tensor.contiguous())")
    B, V = p_i.shape
    m = np.empty_like(p_i) if out is None else out
    if m.shape != p_i.shape or m.dtype != p_i.dtype or not m.flags.c_contiguous:
        raise ValueError("out must be a C-contiguous array with the shape and dtype of p_i")
    lam = np.zeros(B)
    passes = np.zeros(B, dtype=np.int64)
    resid = np.zeros(B)
    exact = np.ones(B, dtype=np.bool_)
    if gamma == 0.0 or B == 0:
        np.minimum(p_i, q_i, out=m)
        return lam, m, passes, resid, exact
    init_ = np.full(B, -1.0) if init is None else np.ascontiguousarray(init, dtype=np.float64)
    eps = float(np.finfo(p_i.dtype).eps)
    tol = 64.0 * eps * (1.0 + gamma)
    _solve_rows(p_i, q_i, rho, float(gamma), init_, tol, eps, lam, m, passes, resid, exact)
    return np.clip(lam, 0.0, gamma), m, passes, resid, exact


def warmup() -> float:
    """Compile (or load from numba's on-disk cache) the kernel for float64 and float32; returns seconds.

    The first call of a process otherwise pays this once (about 2 s to
    compile, 0.1-0.5 s to load); benchmarks call it before timing.
    """
    import time

    if not AVAILABLE:
        return 0.0
    t0 = time.perf_counter()
    for dt in (np.float64, np.float32):
        p = np.array([[0.7, 0.2, 0.1]], dtype=dt)
        q = np.array([[0.2, 0.3, 0.5]], dtype=dt)
        solve_reserve_rows(p, q, q, 1.0)
        solve_reserve_rows(p, q, q, 1.0, init=np.array([0.3]))
    return time.perf_counter() - t0


_WARNED = []


def warn_unavailable(fallback: str) -> None:
    """Warn once per process that numba is missing and ``fallback`` is used instead."""
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn(f"numba is not installed: the ResiSpec reserve falls back to {fallback} (slower, same "
                      "answer to round-off); pip install numba", RuntimeWarning, stacklevel=3)
