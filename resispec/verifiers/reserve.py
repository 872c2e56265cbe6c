"""The fixed-point reserve of ResiSpec and its three solvers, written once for numpy and torch.

The myopic reserve (``docs/RESISPEC.md`` section 4) solves ``lambda = gamma (1 - s(lambda))`` with
``s(lambda) = sum_x min(q, (p - lambda rho)_+)``: a root of the piecewise-linear, non-decreasing (for
``gamma <= 1``) ``g(l) = l - gamma (1 - s(l))``, whose knots are ``(p - q)_+ / rho`` and ``p / rho``.  Every
solver returns the same point,

    ``lambda = min {l in [0, gamma] : g(l) >= -tau}``,  ``tau = reserve_tol(eps, gamma)``

(float64 2e-13, float32 1.5e-5; :mod:`resispec._reserve_tol`): the smallest root up to ``tau``, so starts,
solvers and backends agree, a flat piece of roots (``gamma = 1``) resolves to its left end and ``p ~ q``
reserves 0.  Error against the exact smallest root: ``tau / g'`` (at most ``tau / (1 - gamma)``).

Solvers (``solver=`` of ``resispec`` / ``resispec_myopic``; ``"auto"`` is ``"fused"`` for host arrays -- numpy
or CPU tensors -- with numba, ``"newton"`` on other devices, ``"sort"`` without numba):

``"fused"``
    The compiled per-row kernel of :mod:`resispec._reserve_fused` (safeguarded Newton with an exact finish,
    one pass over a cache-resident row per step, the accepted mass written at the returned reserve).  The
    acceleration of the two below; ``reports/bench_verify.md`` measures it.
``"newton"``
    The same safeguarded Newton on ``h = g + tau`` in array ops (any device: the accelerator path): bisection
    whenever a step leaves the bracket ``h(lo) < 0 <= h(hi)``, at most :data:`MAX_ITER` evaluations, the
    last one at the returned point (so ``m`` comes with it); once at most a quarter of the rows are open only
    those are evaluated.  Rows stop at ``-4 eps (1 + gamma) <= h <= tau / 8`` or a bracket narrower than
    ``4 eps gamma``.  ``gamma > 1`` (``g`` may decrease) sorts.
``"sort"``
    Sort the ``2V`` knots, O(V log V) per row; exact to round-off; the reference.

Exactness never depends on the accuracy of ``lambda``: the lemma of section 2 holds for ANY ``lambda >= 0``
computed without ``x_i`` or later candidates; solver error moves the acceptance by O(error), never the law.
Source: ``docs/RESISPEC.md`` section 4 (ResiSpec's reserve; SpecInfer's recursive rejection sampling, arXiv
2305.09781, is ``gamma = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._reserve_tol import reserve_tol
from .._xp import at, clip_to, device, host, host_out, into, is_torch, like, namespace, sub_scaled, sum_where_equal

#: Reserve solvers (module docstring).
SOLVERS = ("auto", "fused", "newton", "sort")
#: Largest number of evaluations of ``g`` by ``"newton"``.
MAX_ITER = 64


@dataclass(frozen=True)
class ReserveInfo:
    """Diagnostics of a reserve solve.

    Attributes
    ----------
    iterations : int
        Evaluations of ``g`` (``newton``: each a few passes over the (B, V) arrays; ``fused``: the most passes
        over any one row; ``sort``: 1).
    max_residual : float
        ``max_rows |g(lambda) + tau|`` at the returned ``lambda`` (0 at the targeted point).
    """

    iterations: int
    max_residual: float


def solve_reserve(p_i, q_i, rho, gamma: float, method: str = "auto", *, init=None):
    """The reserve ``lambda`` (B,) of ResiSpec's fixed point: ``min {l in [0, gamma] : g(l) >= -tau}``.

    Parameters
    ----------
    p_i, q_i, rho : array (numpy or torch), shape (B, V), one library, dtype and device
        Residual target, draft of the current candidate, proxy (rows sum to 1).  numpy arrays are computed
        in float64 whatever their dtype; tensors in theirs (float32 or float64).
    gamma : float >= 0
        Reserve scale.
    method : {"auto", "fused", "newton", "sort"}
        Solver (module docstring; the same point to round-off).
    init : array, shape (B,), optional
        Warm start of ``"fused"`` / ``"newton"`` (speed only).

    Returns
    -------
    array of ``p_i``'s library, shape (B,), in [0, gamma]

    Raises
    ------
    ValueError
        Unknown ``method``; negative or non-finite ``gamma``; arrays not 2-D of one shape, dtype and device;
        ``init`` not of shape (B,); ``"fused"`` on a tensor off the CPU; ``"newton"`` with ``gamma > 1``.
    TypeError
        Arrays of two libraries.

    Source: ``docs/RESISPEC.md`` section 4.
    """
    p_i, q_i, rho = _checked(p_i, q_i, rho, gamma, method)
    if init is not None:
        init = namespace(p_i).asarray(init, dtype=p_i.dtype, device=device(p_i))
        if tuple(init.shape) != (p_i.shape[0],):
            raise ValueError(f"init must have shape (B,) = ({p_i.shape[0]},), got {tuple(init.shape)}")
    if method == "newton" and gamma > 1.0:
        raise ValueError(f"the newton reserve solver needs 0 <= gamma <= 1, got {gamma}; use method='sort'")
    return reserve_and_mass(p_i, q_i, rho, gamma, method, init=init)[0]


def _checked(p_i, q_i, rho, gamma, method):
    """``(p_i, q_i, rho)`` of one (B, V) shape, library, dtype and device (numpy: float64); else ValueError."""
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {SOLVERS}, got {method!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) \
            or not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    arrays = (p_i, q_i, rho)
    if not any(is_torch(a) for a in arrays):
        arrays = tuple(np.asarray(a, dtype=np.float64) for a in arrays)          # float64 reference
    xp = namespace(*arrays)
    shapes = [tuple(a.shape) for a in arrays]
    if len(shapes[0]) != 2 or len(set(shapes)) != 1:
        raise ValueError(f"p_i, q_i and rho must be 2-D arrays of one shape (B, V), got {shapes}; "
                         "use x[None] for a single row")
    if len({a.dtype for a in arrays}) != 1 or arrays[0].dtype not in (xp.float32, xp.float64):
        raise ValueError(f"p_i, q_i and rho must all be float32 or all float64, got {[str(a.dtype) for a in arrays]}")
    if any(str(device(a)) == "meta" for a in arrays):
        raise ValueError("p_i, q_i and rho are meta tensors (no values); pass tensors on 'cpu' or 'cuda'")
    if len({str(device(a)) for a in arrays}) != 1:
        raise ValueError(f"p_i, q_i and rho must be on one device, got {[str(device(a)) for a in arrays]}")
    return tuple(a.detach() if is_torch(a) else a for a in arrays)


def solver_for(solver: str, gamma: float, p) -> str:
    """The solver that runs for ``p`` (B, V): ``"auto"`` resolved (module docstring), ``"sort"`` for ``gamma > 1``."""
    from .. import _reserve_fused

    if solver == "sort" or gamma > 1.0:
        return "sort"
    on_host = host(p[:0]) is not None
    if solver == "fused" and not on_host:
        raise ValueError(f"solver='fused' runs on host arrays (numpy or CPU tensors); use solver='newton' "
                         f"(array ops) on {device(p)}")
    if solver != "auto":
        return solver
    if not on_host:
        return "newton"
    if not _reserve_fused.AVAILABLE:
        _reserve_fused.warn_unavailable("the exact breakpoint sort")
        return "sort"
    return "fused"


def reserve_and_mass(p_i, q_i, rho, gamma, solver="auto", *, init=None, out=None, workspace=None):
    """``(lambda (B,), m (B, V), ReserveInfo)``: the reserve and ``m = min(q, (p - lambda rho)_+)`` at it.

    Inputs as :func:`solve_reserve` (checked); ``out``: a (B, V) buffer for ``m`` (never an input);
    ``workspace``: a dict the ``"newton"`` solver keeps its buffers in (the walk's state).
    """
    xp = namespace(p_i, q_i, rho)
    B = p_i.shape[0]
    if gamma == 0 or B == 0:
        return xp.zeros((B,), dtype=p_i.dtype, device=device(p_i)), _clip_mass(p_i, q_i, rho, None, out), \
            ReserveInfo(0, 0.0)
    run = {"fused": _fused, "newton": _newton, "sort": _sort}[solver_for(solver, gamma, p_i)]
    return run(p_i, q_i, rho, float(gamma), init, out, {} if workspace is None else workspace)


def _clip_mass(p_i, q_i, rho, lam, out=None):
    """``m = min(q, (p - lam rho)_+)`` (B, V) (``lam`` None: ``min(p, q)``), into ``out`` when given."""
    y = p_i if lam is None else sub_scaled(p_i, lam, rho, out)              # p - lambda rho
    return clip_to(y, q_i, out=out)                                         # min(q, (p - lambda rho)_+)


def _fused(p_i, q_i, rho, gamma, init, out, _ws):
    """The compiled kernel (host arrays; ``m`` written into ``out`` without a copy where it is C-ordered)."""
    from .._reserve_fused import solve_reserve_rows

    P, Q, R = (host(a) for a in (p_i, q_i, rho))
    buf = host_out(out, P.dtype)                                            # the kernel writes m there (or None)
    warm = None if init is None else host(init, np.float64)
    lam, m, passes, resid, _ = solve_reserve_rows(P, Q, R, gamma, init=warm, out=buf)
    info = ReserveInfo(int(passes.max()) if passes.size else 0, float(abs(resid).max()) if resid.size else 0.0)
    return like(lam, p_i), (out if buf is not None else into(out, like(m, p_i))), info


def _sort(p_i, q_i, rho, gamma, init, out, _ws):
    """Sort the ``2V`` knots of ``s`` and walk ``g`` to its first crossing of ``-tau`` (O(V log V) per row)."""
    xp = namespace(p_i, q_i, rho)
    B, V = p_i.shape
    z1 = xp.zeros((B, 1), dtype=p_i.dtype, device=device(p_i))
    s0 = xp.sum(xp.minimum(p_i, q_i), axis=1)                              # s(0), (B,)
    pos = rho > 0
    safe = xp.where(pos, rho, 1.0)
    far = 2.0 * gamma + 1.0                                                 # beyond the root bracket [0, gamma]
    with np.errstate(over="ignore", invalid="ignore"):                      # overflow for a subnormal rho: clamped
        start = xp.where(pos, xp.clip(xp.clip(p_i - q_i, 0.0, None) / safe, None, far), far)   # (p - q)_+ / rho
        stop = xp.where(pos, xp.clip(p_i / safe, None, far), far)                              # p / rho
    t = xp.concat([start, stop], axis=1)                                    # (B, 2V) knots
    d = xp.concat([xp.where(pos, -rho, 0.0), xp.where(pos, rho, 0.0)], axis=1)   # slope change of s at each
    order = xp.argsort(t, axis=1, stable=True)
    t = xp.concat([z1, xp.take_along_axis(t, order, axis=1)], axis=1)       # (B, 2V + 1), from 0
    slope = xp.concat([z1, xp.cumulative_sum(xp.take_along_axis(d, order, axis=1), axis=1)], axis=1)  # right of knot
    s = s0[:, None] + xp.concat([z1, xp.cumulative_sum(slope[:, :-1] * (t[:, 1:] - t[:, :-1]), axis=1)], axis=1)
    g = t - gamma * (1.0 - s)                                               # g at the knots
    n = t.shape[1]
    tau = reserve_tol(float(xp.finfo(p_i.dtype).eps), gamma)                # one definition for every solver
    above = g >= -tau                                                       # g == 0 up to round-off counts
    has = xp.any(above, axis=1)
    j = xp.where(has, xp.argmax(xp.astype(above, xp.int8), axis=1), n)      # first knot with g >= -tau
    jm = xp.clip(j - 1, 0, n - 1)
    t1 = xp.where(has, at(t, xp.clip(j, 0, n - 1)), float("inf"))
    t0, g0, sl = at(t, jm), at(g, jm), at(slope, jm)
    dg = 1.0 + gamma * sl                                                   # g' on that piece
    lam = xp.where(dg > 0, t0 - (g0 + tau) / xp.where(dg > 0, dg, 1.0), t1)   # g = -tau on this piece
    lam = xp.minimum(lam, t1)                                               # the crossing lies in (t_{j-1}, t_j]
    lam = xp.clip(xp.where(j == 0, 0.0, lam), 0.0, gamma)                   # g(0) >= 0: root at 0
    return lam, _clip_mass(p_i, q_i, rho, lam, out), ReserveInfo(1, 0.0)


def _newton(p_i, q_i, rho, gamma, init, out, ws):
    """Safeguarded Newton on ``h = g + tau`` in array ops (module docstring); rows compacted once few are open."""
    xp = namespace(p_i, q_i, rho)
    B = p_i.shape[0]
    eps = float(xp.finfo(p_i.dtype).eps)
    tau = reserve_tol(eps, gamma)
    tol_hi, tol_lo = tau / 8.0, 4.0 * eps * (1.0 + gamma)    # never stop on a flat piece of roots (h = tau)
    if ws.get("y") is None or tuple(ws["y"].shape) != tuple(p_i.shape) or ws["y"].dtype != p_i.dtype:
        ws["y"] = xp.empty(p_i.shape, dtype=p_i.dtype, device=device(p_i))   # (B, V) p - x rho, reused
        ws["e"] = xp.empty(p_i.shape, dtype=p_i.dtype, device=device(p_i))   # (B, V) activity indicator
    z = xp.empty(p_i.shape, dtype=p_i.dtype, device=device(p_i)) if out is None else out   # m(x), (B, V)
    s0 = xp.sum(_clip_mass(p_i, q_i, rho, None, z), axis=1)                # s(0), (B,)
    h0 = tau - gamma * (1.0 - s0)                                           # h(0) = tau - gamma TV
    done = h0 >= 0                                                          # these rows answer 0
    lo = xp.zeros((B,), dtype=p_i.dtype, device=device(p_i))
    hi = lo + gamma                                                         # h(gamma) > 0
    start = xp.clip(gamma * (1.0 - s0) if init is None else xp.where(xp.isnan(init), 0.0, init), 0.0, gamma)
    x = xp.where(done, lo, start)
    h = xp.where(done, h0, 0.0)
    rows, P, Q, R, Z, Y, E = None, p_i, q_i, rho, z, ws["y"], ws["e"]       # the open rows once few (compaction)
    its = 1
    while not bool(xp.all(done)):
        its += 1
        xs = x if rows is None else x[rows]
        sub_scaled(P, xs, R, Y)                                             # y = p - x rho
        clip_to(Y, Q, out=Z)                                                # m(x) = min(q, y_+)
        s = xp.sum(Z, axis=1)                                               # s(x)
        if rows is not None:
            z[rows] = Z
            s_all = xp.zeros((B,), dtype=p_i.dtype, device=device(p_i))
            s_all[rows] = s
            s = s_all
        h = xp.where(done, h, x - gamma * (1.0 - s) + tau)                  # h(x) = g(x) + tau
        below = h < 0
        lo = xp.where(below & ~done, x, lo)
        hi = xp.where(~below & ~done, x, hi)
        done = done | ((h <= tol_hi) & (h >= -tol_lo)) | (hi - lo <= 4.0 * eps * gamma)
        if its >= MAX_ITER or bool(xp.all(done)):
            break
        Rp = sum_where_equal(Z, Y, R, E)                                    # s'(x) = -sum rho [0 <= y <= q]
        if rows is not None:
            full = xp.zeros((B,), dtype=p_i.dtype, device=device(p_i))
            full[rows] = Rp
            Rp = full
        slope = 1.0 - gamma * Rp                                            # g'(x)
        xn = x - h / xp.where(slope > 0, slope, 1.0)                        # Newton step
        inside = (slope > 0) & (xn > lo) & (xn <= hi)
        x_next = xp.where(inside, xn, 0.5 * (lo + hi))                      # else bisect the bracket
        done = done | (x_next == x)                                         # no step moves x: round-off floor
        x = xp.where(done, x, x_next)
        if rows is None and B >= 4:
            open_ = xp.nonzero(~done)[0]
            if 4 * open_.shape[0] <= B:                                     # few stragglers: only their rows
                rows = open_
                P, Q, R = p_i[rows], q_i[rows], rho[rows]
                Z, Y, E = (xp.empty(P.shape, dtype=P.dtype, device=device(P)) for _ in "zye")
    return xp.clip(x, 0.0, gamma), z, ReserveInfo(its, float(xp.max(xp.abs(h))))
