"""Fused CPU solver of the ResiSpec reserve: one compiled pass over a row per Newton step.

The reserve (``docs/RESISPEC.md`` section 4) solves ``lambda = gamma (1 -
s(lambda))`` with ``s(lambda) = sum_x min(q, (p - lambda rho)_+)``, i.e. a
root of the non-decreasing (``0 <= gamma <= 1``) piecewise-linear

    g(lambda) = lambda - gamma (1 - s(lambda)),

whose knots are ``(p - q)_+ / rho`` and ``p / rho`` (``rho > 0``).  Every
solver of this package returns the same, uniquely defined point:

    lambda = min { l in [0, gamma] : g(l) >= -tau },   tau = reserve_tol(eps, gamma),

the smallest root up to ``tau = max(1e-13, 64 eps) (1 + gamma)`` (float64
2e-13, float32 1.5e-5).  It is the smallest root when ``g`` is flat at 0
(``gamma = 1``, every proxy token active) and 0 when ``g(0) = -gamma TV``
is within ``tau`` of 0 (``p ~ q``), and it lies ``tau / g'`` left of the
exact smallest root otherwise: ``|lambda - lambda*| <= tau / (1 - gamma)``
for ``gamma < 1``.  A well-defined target is what makes the answer
independent of the starting point and equal across solvers and backends.

The algorithm is Newton on ``h = g + tau`` (right slope from points with
``h < 0``, left slope from points with ``h >= 0``).  Steps that leave the
bracket bisect.  A Newton step from ``x`` lands on the zero of ``h``'s line
through ``x``.  If the pass there sees no token change state (saturated /
active / off) since ``x``, there is no knot in between: ``h`` is linear
there and the point is the answer, exactly (the "exact finish"); tokens
with ``q = 0`` never bend ``g`` and are not counted.  A point with
``|h| <= 4 eps (1 + gamma)`` is also taken (round-off level).  When the
bracket shrinks below ``4 eps gamma`` first, the last iterate is returned
(``exact = False``).  Warm starts and solvers agree to round-off in ``g``
divided by the slope ``g'`` at the answer: far below 1e-12 on ordinary rows,
but the crossing is ill-conditioned when almost all proxy mass is active
(``gamma = 1``, ``g' ~ 0``), where it may move by ``eps / g'``.

With numpy or eager torch every Newton step is several passes over (B, V)
arrays in main memory.  Here a thread solves a row, which stays in cache
after the first pass, and one pass computes everything a step needs: ``s``,
the right and left slopes, whether any token changed state, and the accepted
mass ``m = min(q, (p - lambda rho)_+)`` (written in place, so the ``m``
returned is the one at the returned ``lambda``).  Sums are accumulated in
float64 whatever the input dtype, in a vectorised (re-associated) order.

Threads: the rows are split into chunks run by a ``ThreadPoolExecutor``
(the kernel releases the GIL), so it is safe in forked workers and under
concurrent calls; ``RESISPEC_THREADS`` sets the count (default: the CPUs
this process may use).  numba's own parallel layer is not used because the
OpenMP one kills forked children.

Cost at V = 151,936 (``python benchmarks/reserve_agreement.py``): 3-7 passes
per row cold and 2-5 warm-started (mean per family), against 3-5 passes over main memory per
Newton step in the eager torch solver.
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from ._reserve_tol import reserve_tol

try:
    import numba
    AVAILABLE = True
    _njit = numba.njit
except ImportError:  # pragma: no cover - numba is a declared dependency
    AVAILABLE = False

    def _njit(*args, **kwargs):
        return lambda f: f

__all__ = ["AVAILABLE", "MAX_PASSES", "solve_reserve_rows", "warmup", "warn_unavailable"]

#: Largest number of passes over one row (bisection alone needs about 60 in float64).
MAX_PASSES = 200

_FASTMATH = {"reassoc", "contract", "nsz"}   # vectorised sums; NaN / inf semantics kept





@_njit(cache=True, fastmath=_FASTMATH, nogil=True)
def _pass(p, q, rho, x, x_prev, m):
    """One pass at ``x``; writes ``m = min(q, (p - x rho)_+)`` and returns

    ``s``, the rho-mass active just right / just left of ``x`` (slopes) and
    the number of tokens whose state changed between ``x_prev`` and ``x``.
    """
    s = 0.0
    a_right = 0.0
    a_left = 0.0
    changed = 0.0
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
        # a token with q = 0 adds 0 and no slope in every state: its knots do not bend g
        changed += 1.0 if qj > 0.0 and (((y0 > qj) != (y > qj)) or ((y0 > 0.0) != (y > 0.0))) else 0.0
    return s, a_right, a_left, changed


@_njit(cache=True, fastmath=_FASTMATH, nogil=True)
def _solve_row(p, q, rho, gamma, init, tau, eps, m):
    """One row: returns ``(lambda, passes, h(lambda), exact)``; ``m`` holds the mass at ``lambda``."""
    hi = gamma                     # h(gamma) = gamma s(gamma) + tau > 0
    lo = -1.0                      # largest x seen with h(x) < 0; -1: h(0) not known yet
    if not (init >= 0.0):          # cold start (or NaN): h(0) first
        x = 0.0
    else:
        x = min(init, gamma)
    x_prev = x
    newton = False                 # x came from a Newton step at x_prev
    passes = 0
    while True:
        s, ar, al, c = _pass(p, q, rho, x, x_prev, m)
        passes += 1
        h = x - gamma * (1.0 - s) + tau
        if newton and c == 0.0:
            return x, passes, h, True            # exact finish: h is linear between x_prev and x
        if abs(h) <= 4.0 * eps * (1.0 + gamma) and x > 0.0:
            return x, passes, h, True            # at the crossing to round-off
        if h >= 0.0:
            if x <= 0.0:
                return 0.0, passes, h, True      # h(0) >= 0: the answer is 0
            hi = min(hi, x)
        else:
            lo = max(lo, x)
        if hi - max(lo, 0.0) <= 4.0 * eps * gamma or passes >= MAX_PASSES:
            return x, passes, h, False
        if passes == 1 and init < 0.0:
            xn = gamma * (1.0 - s)               # cold: the lower bound gamma TV of g's root
            newton = False
            if not (xn > lo and xn < hi):
                xn = 0.5 * (max(lo, 0.0) + hi)
        else:
            dg = 1.0 - gamma * (ar if h < 0.0 else al)
            newton = dg > 0.0
            xn = x - h / dg if newton else -1.0
            if lo < 0.0 and not (xn > 0.0):
                xn = 0.0                         # h(0) unknown and the step points at it: try 0
                newton = False
            elif not (xn > max(lo, 0.0) and xn <= hi) or (passes > 24 and passes % 2 == 0):
                xn = 0.5 * (max(lo, 0.0) + hi)   # outside the bracket, or too slow: bisect
                newton = False
        if xn == x:
            return x, passes, h, False
        x_prev = x
        x = xn


@_njit(cache=True, nogil=True)
def _solve_chunk(p, q, rho, gamma, init, tau, eps, lam, m, passes, resid, exact, start, stop):
    for b in range(start, stop):
        lam[b], passes[b], resid[b], exact[b] = _solve_row(p[b], q[b], rho[b], gamma, init[b], tau, eps, m[b])


_POOL = {"pid": None, "pools": {}}
_POOL_LOCK = threading.Lock()


@_njit(cache=True, nogil=True)
def _rows_equal(p, q):
    """True when every row of ``p`` and of ``q`` equals row 0 (stops at the first difference)."""
    B, V = p.shape
    for b in range(1, B):
        for x in range(V):
            if p[b, x] != p[0, x] or q[b, x] != q[0, x]:
                return False
    return True


def _threads() -> int:
    env = os.environ.get("RESISPEC_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"RESISPEC_THREADS must be a positive integer, got {env!r}")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _pool(n: int):
    """A thread pool of ``n`` workers owned by this process (a forked child makes its own); one pool per
    ``n``, kept, so callers asking for different counts (layers of different sizes) do not rebuild it."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if _POOL["pid"] != os.getpid():
            _POOL["pools"], _POOL["pid"] = {}, os.getpid()
        pool = _POOL["pools"].get(n)
        if pool is None:
            pool = _POOL["pools"][n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="resispec-kernel")
        return pool


def run_chunks(fn, args: tuple, B: int, threads: int, *, serial: bool = False, bounds=None) -> None:
    """``fn(*args, lo, hi)`` over ``[0, B)``: in this thread when ``threads <= 1`` or ``serial``, else on the
    pool, ``bounds`` (ascending ints from 0 to B) or about 4 chunks per thread (load balance).  Every chunk
    has finished when this returns or raises; the first chunk's exception is raised here.

    Raises
    ------
    ValueError
        ``B < 0``, or ``bounds`` not non-decreasing from 0 to ``B``.
    """
    if B < 0:
        raise ValueError(f"run_chunks: B must be >= 0, got {B}")
    n = min(int(threads), B)
    if n <= 1 or serial:
        fn(*args, 0, B)
        return
    if bounds is None:
        bounds = np.linspace(0, B, min(B, 4 * n) + 1).astype(int)
    bounds = [int(b) for b in bounds]
    if len(bounds) < 2 or bounds[0] != 0 or bounds[-1] != B or any(a > b for a, b in zip(bounds, bounds[1:])):
        raise ValueError(f"run_chunks: bounds must go from 0 to B = {B} without decreasing, got {bounds}")
    futures = [_pool(n).submit(fn, *args, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    from concurrent.futures import wait

    wait(futures)                      # no chunk still writing into the caller's buffers after an error
    for f in futures:
        f.result()


def solve_reserve_rows(p_i: np.ndarray, q_i: np.ndarray, rho: np.ndarray, gamma: float,
                       init: np.ndarray | None = None, out: np.ndarray | None = None):
    """Reserve ``lambda`` and accepted mass ``m`` for every row, by the fused Newton solver.

    Parameters
    ----------
    p_i, q_i, rho : ndarray, shape (B, V), float64 or float32, C-contiguous
        Residual target, current draft and proxy (laws: rows sum to 1; not
        re-checked here).
    gamma : float in [0, 1]
        Reserve scale.
    init : array_like, shape (B,), optional
        Warm start, e.g. the previous candidate's reserve.  Only the speed
        depends on it; NaN or negative entries start cold.
    out : ndarray, shape (B, V), dtype of ``p_i``, optional
        Writable C-contiguous buffer for ``m``, sharing no memory with the inputs.

    Returns
    -------
    lam : ndarray, shape (B,), float64 in [0, gamma]
        ``min {l : g(l) >= -tau}`` (module docstring).
    m : ndarray, shape (B, V)
        ``min(q_i, (p_i - lam rho)_+)`` at the returned ``lam``.
    passes : ndarray, shape (B,), int64
        Passes over each row.
    resid : ndarray, shape (B,), float64
        ``h(lam) = g(lam) + tau``: 0 up to round-off where ``exact``.
    exact : ndarray, shape (B,), bool
        ``False`` where the bracket shrank below ``4 eps gamma`` (or a step
        no longer moved ``x``) before the crossing was pinned down; the
        answer is then within ``4 eps gamma`` of it.

    Raises
    ------
    ValueError
        ``gamma`` outside [0, 1]; shapes, dtypes, contiguity, ``init`` or
        ``out`` not as above.
    ImportError
        numba is not installed.

    Source: the reserve of ResiSpec (``docs/RESISPEC.md`` section 4), which
    reshapes the residual of recursive rejection sampling (SpecInfer, Miao
    et al. 2024, arXiv 2305.09781); safeguarded Newton with an exact finish
    on a piecewise-linear function.
    """
    if not AVAILABLE:
        raise ImportError("the fused reserve solver needs numba (pip install numba); "
                          "use the sort solver (method='sort' / solver='sort') or solver='newton' (torch)")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) \
            or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"the fused reserve solver needs 0 <= gamma <= 1, got {gamma!r}; use the sort solver")
    arrays = (p_i, q_i, rho)
    if not all(isinstance(a, np.ndarray) for a in arrays):
        raise TypeError("p_i, q_i and rho must be numpy arrays")
    if any(a.ndim != 2 or a.shape != p_i.shape for a in arrays):
        raise ValueError(f"p_i, q_i and rho must share one (B, V) shape, got {[a.shape for a in arrays]}")
    if any(a.dtype != p_i.dtype for a in arrays) or p_i.dtype not in (np.float64, np.float32):
        raise ValueError(f"p_i, q_i and rho must all be float64 or all float32, got {[str(a.dtype) for a in arrays]}")
    if not all(a.flags.c_contiguous for a in arrays):
        raise ValueError("p_i, q_i and rho must be C-contiguous (np.ascontiguousarray / tensor.contiguous())")
    B, V = p_i.shape
    if out is None:
        m = np.empty_like(p_i, order="C")
    else:
        m = out
        if not isinstance(m, np.ndarray) or m.shape != p_i.shape or m.dtype != p_i.dtype \
                or not m.flags.c_contiguous or not m.flags.writeable:
            raise ValueError("out must be a writable C-contiguous array with the shape and dtype of p_i")
        if any(np.shares_memory(m, a) for a in arrays):
            raise ValueError("out must not share memory with p_i, q_i or rho (it is written while they are read)")
    if init is None:
        init_ = np.full(B, -1.0)
    else:
        init_ = np.array(init, dtype=np.float64, copy=True).reshape(-1) if np.ndim(init) <= 1 else None
        if init_ is None or init_.shape != (B,):
            raise ValueError(f"init must have shape (B,) = ({B},), got {np.shape(init)}")
        init_[~np.isfinite(init_)] = -1.0
    lam = np.zeros(B)
    passes = np.zeros(B, dtype=np.int64)
    resid = np.zeros(B)
    exact = np.ones(B, dtype=np.bool_)
    if gamma == 0.0 or B == 0 or V == 0:
        np.minimum(p_i, q_i, out=m)
        return lam, m, passes, resid, exact
    eps = float(np.finfo(p_i.dtype).eps)
    args = (p_i, q_i, rho, float(gamma), init_, reserve_tol(eps, gamma), eps, lam, m, passes, resid, exact)
    run_chunks(_solve_chunk, args, B, _threads(), serial=B * V < 100_000)
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
