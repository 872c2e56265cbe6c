"""ResiSpec on torch: residual shaping with an auxiliary proxy (``docs/RESISPEC.md`` s.4).

Same rule as :mod:`resispec.verifiers.resispec`: for candidates ``i < k``::

    m_i = min(q_i, (p_i - lambda_i rho_i)_+),   lambda_i = gamma (1 - sum m_i(lambda_i)),

the last one greedy.  Builds on SpecInfer (Miao et al. 2024, arXiv
2305.09781), SpecTr (arXiv 2310.15141) and Khisti et al. 2025 (arXiv
2410.18234).

The reserve solves ``lambda = gamma (1 - s(lambda))``: a root of the
non-decreasing (for ``gamma <= 1``) piecewise-linear
``g(l) = l - gamma (1 - s(l))``.  Every solver targets the same point,
``min {l in [0, gamma] : g(l) >= -tau}`` with
``tau = max(1e-13, 64 eps) (1 + gamma)`` of the working dtype (float64
2e-13, float32 1.5e-5; :mod:`resispec._reserve_fused`): the smallest root up
to ``tau``, so starts, solvers and backends agree, flat pieces of roots
(``gamma = 1``) resolve to their left end and ``p ~ q`` reserves 0.  Error
bound against the exact smallest root ``lambda*``: ``tau / g'`` (at most
``tau / (1 - gamma)`` for ``gamma < 1``).

Solvers (``solver=``; the default ``"auto"`` is ``"fused"`` for CPU tensors
and ``"newton"`` on other devices):

``"fused"`` (CPU)
    The compiled per-row kernel of :mod:`resispec._reserve_fused`, the one
    the numpy backend uses: safeguarded Newton on ``g + tau`` with an exact
    finish (the answer above to round-off), one pass over a cache-resident
    row per step, the accepted mass written at the returned reserve;
    warm-started from the previous candidate's reserve.  Measured with
    ``resispec bench verify`` (CPU, float64, B = 256, V = 151,936):
    ResiSpec / rrs about 1.1-1.6 for k = 2-8 (``reports/bench_verify.md``).
``"newton"`` (tensor ops, any device; the GPU path)
    The same Newton iteration on ``h = g + tau`` in tensor ops: bracket
    ``h(lo) < 0 <= h(hi)``, bisection whenever a step leaves it, at most
    :data:`MAX_ITER` evaluations into reused buffers.  An evaluation is
    three passes over the (B, V) tensors (``y = p - lambda rho`` by
    ``addcmul``, ``m = clamp(y, 0, q)``, ``sum``); the slope (two more
    passes: a 0/1 activity indicator and a batched dot product with
    ``rho``) only for rows that take another step.  The last evaluation is
    at the returned ``lambda``, so ``m`` comes with it.  Once at most a
    quarter of the rows are open, only those are evaluated (tail
    compaction).  Every row stops at ``-4 eps (1 + gamma) <= h(lambda) <=
    tau / 8`` (a further ``tau / (8 g')`` at most from the point above; never
    on a flat piece of roots, where ``h = tau``) or a bracket narrower than
    ``4 eps gamma``; if :data:`MAX_ITER` stops it
    first, :class:`ReserveInfo` reports the residual reached.  About 5-6
    evaluations per reserve, each several passes over (B, V) tensors in
    main memory: on the CPU that makes ResiSpec / rrs about 2.4-4.3 (k =
    2-8), which is why the CPU default is ``"fused"``.  ``gamma > 1``
    (``g`` may decrease) uses the sort solver.
``"sort"``
    The numpy algorithm (:func:`resispec.verifiers.resispec.solve_reserve`)
    on tensors: sort the ``2V`` breakpoints, O(V log V) per row; exact to
    round-off, ~30x the cost of a recursive-rejection step at V = 151,936.

Exactness never depends on the accuracy of ``lambda``: the lemma of section
2 holds for ANY ``lambda >= 0`` computed without ``x_i`` or later candidates,
so solver error moves the acceptance rate by O(error), never the law.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..verifiers.registry import register
from .._reserve_tol import reserve_tol
from .base import TorchMassVerifier
from .proxies import check_proxy_output, get_proxy

#: Key of the fixed-point solver's per-walk state (warm start, Newton buffers) in the walk plan.
_STATE_KEY = "resispec.fixed_point"

#: Largest number of Newton/bisection evaluations per reserve.
MAX_ITER = 64
#: Reserve solvers: ``auto`` = ``fused`` for CPU tensors, ``newton`` elsewhere.
SOLVERS = ("auto", "fused", "newton", "sort")


@dataclass(frozen=True)
class ReserveInfo:
    """Diagnostics of the last reserve solve.

    Attributes
    ----------
    iterations : int
        Evaluations of ``g``: ``newton``, each a few passes over the (B, V)
        tensors; ``fused``, the most passes over any one row.
    max_residual : float
        ``max_rows |g(lambda) + tau|`` at the returned ``lambda`` (0 at the
        targeted point; module docstring).
    """

    iterations: int
    max_residual: float


class _Workspace:
    """Buffers reused by every evaluation of ``g`` (no (B, V) allocation inside the loop)."""

    def __init__(self, p):
        self.y = torch.empty_like(p)
        self.e = torch.empty_like(p)     # activity indicator 0/1 in the working dtype
        self.zero = torch.zeros((), dtype=p.dtype, device=p.device)


def _mass(lam, p, q, rho, ws: _Workspace, z):
    """``z = min(q, (p - lam rho)_+)`` (the accepted mass at ``lam``) into ``z``; returns ``s = sum z`` (B,).

    ``y = p - lam rho`` stays in ``ws.y`` for :func:`_slope`.  Three passes (addcmul, clamp, sum);
    the same arithmetic as the numpy ``minimum(q, maximum(p - lam rho, 0))``.
    """
    torch.addcmul(p, rho, lam.unsqueeze(1), value=-1.0, out=ws.y)   # y = p - lam rho
    torch.clamp(ws.y, min=ws.zero, max=q, out=z)                     # z = min(q, max(y, 0))
    return z.sum(dim=1)


def _slope(rho, ws: _Workspace, z):
    """``R'(lam) = sum rho [0 <= p - lam rho <= q]`` (B,) from the buffers of the last :func:`_mass`.

    The indicator is written in the working dtype and reduced with ``rho`` by a batched dot
    product: two passes (a boolean mask with ``where`` + ``sum`` costs about three times more).
    """
    torch.eq(z, ws.y, out=ws.e)                                      # token active (1.0 / 0.0)
    return torch.bmm(ws.e.unsqueeze(1), rho.unsqueeze(2)).view(-1)


def _solve_newton(p_i, q_i, rho, gamma, *, init=None, max_iter=MAX_ITER, workspace=None, out=None):
    """Safeguarded Newton on ``h = g + tau``; returns ``(lam, m, info)``, ``m = min(q, (p - lam rho)_+)`` in ``out``.

    ``lam`` approximates ``min {l : g(l) >= -tau}`` (:func:`resispec.verifiers.resispec.reserve_tol`):
    every row stops at ``-4 eps (1 + gamma) <= h(lam) <= tau / 8`` (or a bracket narrower than
    ``4 eps gamma``, or a step that no longer moves ``lam``).  The last evaluation of ``s`` is at the returned ``lam``, so the accepted
    mass costs nothing extra; the slope is computed only for rows that need another step (lazy).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"the newton reserve solver needs 0 <= gamma <= 1, got {gamma}; use solver='sort'")
    B = p_i.shape[0]
    dt, dev = p_i.dtype, p_i.device
    eps = torch.finfo(dt).eps
    tau = reserve_tol(eps, gamma)
    # stop at -4 eps (1 + gamma) <= h <= tau / 8: never on a flat piece of g's roots (h = tau there),
    # nor on a flat piece of h just below 0 (p ~ q with TV ~ tau)
    tol_hi, tol_lo = tau / 8.0, 4.0 * eps * (1.0 + gamma)
    ws = _Workspace(p_i) if workspace is None else workspace
    z = torch.empty_like(p_i) if out is None else out
    if gamma == 0 or B == 0:
        torch.minimum(p_i, q_i, out=z)
        return torch.zeros(B, dtype=dt, device=dev), z, ReserveInfo(0, 0.0)
    hi = torch.full((B,), gamma, dtype=dt, device=dev)   # h(gamma) = gamma s(gamma) + tau > 0
    its = 1
    # h(0) = tau - gamma TV: rows with h(0) >= 0 answer 0; the others start above gamma TV (cold)
    s0 = torch.minimum(p_i, q_i, out=z).sum(dim=1)
    h0 = tau - gamma * (1.0 - s0)
    at_zero = h0 >= 0
    lo = torch.zeros(B, dtype=dt, device=dev)
    if init is None:
        x = torch.where(at_zero, lo, (gamma * (1.0 - s0)).clamp(0.0, gamma))
    else:
        x = torch.where(at_zero, lo, init.to(device=dev, dtype=dt).nan_to_num(0.0).clamp(0.0, gamma))
    done = at_zero.clone()
    h = torch.where(at_zero, h0, torch.zeros_like(h0))
    sub = None   # (idx, p, q, rho, workspace, z) of the open rows once they are few (tail compaction)
    while not bool(done.all()):
        its += 1
        if sub is None:
            s = _mass(x, p_i, q_i, rho, ws, z)            # every row at its own x: z = m(x)
        else:
            idx, ps, qs, rs, wss, zs = sub
            s = torch.zeros(B, dtype=dt, device=dev)
            s[idx] = _mass(x[idx], ps, qs, rs, wss, zs)
            z.index_copy_(0, idx, zs)                     # m(x) of these rows; the others keep theirs
        h = torch.where(done, h, x - gamma * (1.0 - s) + tau)
        below = h < 0
        lo = torch.where(below & ~done, x, lo)
        hi = torch.where(~below & ~done, x, hi)
        done = done | ((h <= tol_hi) & (h >= -tol_lo)) | (hi - lo <= 4.0 * eps * gamma)
        if its >= max_iter or bool(done.all()):
            break
        # slope only now (rows not done need a step): two more passes over buffers already hot
        if sub is None:
            Rp = _slope(rho, ws, z)
        else:
            Rp = torch.zeros(B, dtype=dt, device=dev)
            Rp[idx] = _slope(rs, wss, zs)
        slope = 1.0 - gamma * Rp
        # next point: Newton from x, bisection when the step leaves the bracket (lo, hi]
        step_ok = slope > 0
        xn = x - h / torch.where(step_ok, slope, torch.ones_like(slope))
        inside = step_ok & (xn > lo) & (xn <= hi)
        x_next = torch.where(inside, xn, 0.5 * (lo + hi))
        done = done | (x_next == x)                       # no step moves x any more: round-off floor
        x = torch.where(done, x, x_next)
        if sub is None and B >= 4:
            idx = torch.nonzero(~done).squeeze(1)
            if 4 * idx.numel() <= B:
                # few stragglers: evaluate only their rows from now on instead of all B
                ps, qs, rs = p_i.index_select(0, idx), q_i.index_select(0, idx), rho.index_select(0, idx)
                sub = (idx, ps, qs, rs, _Workspace(ps), torch.empty_like(ps))
    lam = x.clamp(0.0, gamma)
    return lam, z, ReserveInfo(its, float(h.abs().max()))


def solve_reserve_newton(p_i: torch.Tensor, q_i: torch.Tensor, rho: torch.Tensor, gamma: float,
                         *, init: torch.Tensor | None = None, max_iter: int = MAX_ITER,
                         workspace: "_Workspace | None" = None) -> tuple[torch.Tensor, ReserveInfo]:
    """The reserve ``min {l : g(l) >= -tau}`` by safeguarded Newton in tensor ops (any device).

    ``tau`` and the target point: :mod:`resispec._reserve_fused`.  Stops at
    ``-4 eps (1 + gamma) <= g(lam) + tau <= tau / 8`` in the working dtype.

    Parameters
    ----------
    p_i, q_i, rho : Tensor, shape (B, V), float32 or float64, one device
        Residual target, current draft and proxy (rows sum to 1).
    gamma : float in [0, 1]
        Reserve scale (``g`` is non-decreasing only for ``gamma <= 1``).
    init : Tensor, shape (B,), optional
        Starting point (e.g. the previous candidate's reserve).  Only the
        speed depends on it.
    max_iter : int
        Largest number of evaluations of ``g``.

    Returns
    -------
    lam : Tensor, shape (B,), dtype of ``p_i``, in [0, gamma]
    info : ReserveInfo

    Raises
    ------
    ValueError
        ``gamma`` outside [0, 1] (use :func:`solve_reserve_sort`); dtype not
        float32/float64; mismatched shapes, dtypes or devices.

    Source: ``docs/RESISPEC.md`` section 4 (ResiSpec's reserve; SpecInfer's
    recursive rejection sampling, arXiv 2305.09781, is the ``gamma = 0`` case).
    """
    p_i, q_i, rho = _check_solver_inputs(p_i, q_i, rho)
    if init is not None:
        init = torch.as_tensor(init).detach()
        if init.shape != (p_i.shape[0],):
            raise ValueError(f"init must have shape (B,) = ({p_i.shape[0]},), got {tuple(init.shape)}")
    lam, _, info = _solve_newton(p_i, q_i, rho, gamma, init=init, max_iter=max_iter, workspace=workspace)
    return lam, info


def solve_reserve_fused(p_i: torch.Tensor, q_i: torch.Tensor, rho: torch.Tensor, gamma: float,
                        *, init: torch.Tensor | None = None, out: torch.Tensor | None = None):
    """Reserve and accepted mass by the fused CPU kernel (:mod:`resispec._reserve_fused`).

    Parameters
    ----------
    p_i, q_i, rho : Tensor, shape (B, V), float64 or float32, on the CPU
        Residual target, current draft and proxy (rows sum to 1).
    gamma : float in [0, 1]
    init : Tensor, shape (B,), optional
        Warm start (speed only).
    out : Tensor, shape (B, V), optional
        Buffer for ``m`` (never ``p_i``, ``q_i`` or ``rho``).

    Returns
    -------
    lam : Tensor, shape (B,), dtype of ``p_i``, in [0, gamma]
    m : Tensor, shape (B, V), dtype of ``p_i``
        ``min(q_i, (p_i - lam rho)_+)`` at the returned ``lam``.
    info : ReserveInfo
        Largest number of passes over a row and ``max |g(lam) + tau|``.

    Raises
    ------
    ValueError
        Tensors not on the CPU, ``gamma`` outside [0, 1], dtype not
        float32/float64, mismatched shapes, ``init`` or ``out`` not as
        :func:`resispec._reserve_fused.solve_reserve_rows` requires.
    TypeError
        Inputs or ``out`` not tensors.
    ImportError
        numba is not installed.

    Source: ``docs/RESISPEC.md`` section 4 (ResiSpec's reserve; SpecInfer's
    recursive rejection sampling, arXiv 2305.09781, is the ``gamma = 0`` case).

    The point returned and its error bound: :mod:`resispec._reserve_fused`
    (``min {l : g(l) >= -tau}``, exact finish on a linear piece of ``g``).
    """
    from .._reserve_fused import solve_reserve_rows

    if any(t.device.type != "cpu" for t in (p_i, q_i, rho)):
        raise ValueError("solver='fused' runs on CPU tensors; use solver='newton' (tensor ops) on "
                         f"{p_i.device}")
    p_i, q_i, rho = _check_solver_inputs(p_i, q_i, rho)
    if out is None:
        m = torch.empty(p_i.shape, dtype=p_i.dtype)
    elif not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    else:
        m = out
    arrays = [t.contiguous().numpy() for t in (p_i, q_i, rho)]
    init_np = None if init is None else torch.as_tensor(init).detach().to(torch.float64).cpu().numpy()
    lam, _, passes, resid, _ = solve_reserve_rows(*arrays, float(gamma), init=init_np, out=m.detach().numpy())
    info = ReserveInfo(int(passes.max()) if passes.size else 0, float(abs(resid).max()) if resid.size else 0.0)
    return torch.from_numpy(lam).to(p_i.dtype), m, info


def _check_solver_inputs(p_i, q_i, rho):
    """Detached (B, V) float32/float64 tensors on one device, one dtype; else ValueError / TypeError."""
    ts = (p_i, q_i, rho)
    if not all(isinstance(t, torch.Tensor) for t in ts):
        raise TypeError("p_i, q_i and rho must be torch tensors")
    if any(t.dtype != p_i.dtype for t in ts) or p_i.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"p_i, q_i and rho must all be float32 or all float64, got {[t.dtype for t in ts]}")
    if any(t.dim() != 2 or t.shape != p_i.shape for t in ts):
        raise ValueError(f"p_i, q_i and rho must share one (B, V) shape, got {[tuple(t.shape) for t in ts]}")
    if any(t.device != p_i.device for t in ts):
        raise ValueError(f"p_i, q_i and rho must be on one device, got {[str(t.device) for t in ts]}")
    return tuple(t.detach() for t in ts)


def solve_reserve_sort(p_i: torch.Tensor, q_i: torch.Tensor, rho: torch.Tensor, gamma: float) -> torch.Tensor:
    """The reserve ``min {l : g(l) >= -tau}`` by sorting the ``2V`` breakpoints (port of the numpy solver).

    Shapes (B, V) -> (B,) in the dtype of ``p_i``, any ``gamma >= 0``.
    O(V log V) per row; exact to round-off.  ``tau``:
    :func:`resispec.verifiers.resispec.reserve_tol` of the working dtype.

    Raises
    ------
    ValueError, TypeError
        As :func:`solve_reserve_newton`.

    Source: as :func:`solve_reserve_newton`.
    """
    p_i, q_i, rho = _check_solver_inputs(p_i, q_i, rho)
    B, V = p_i.shape
    dt, dev = p_i.dtype, p_i.device
    if gamma == 0:
        return torch.zeros(B, dtype=dt, device=dev)
    s0 = torch.minimum(p_i, q_i).sum(dim=1)
    pos = rho > 0
    safe = torch.where(pos, rho, torch.ones_like(rho))
    far = torch.full_like(rho, 2.0 * gamma + 1.0)
    # clamp breakpoints past the bracket (incl. inf from a subnormal rho) to far
    start = torch.where(pos, torch.minimum((p_i - q_i).clamp(min=0.0) / safe, far), far)
    stop = torch.where(pos, torch.minimum(p_i / safe, far), far)
    t = torch.cat([start, stop], dim=1)
    zr = torch.zeros_like(rho)
    dd = torch.cat([torch.where(pos, -rho, zr), torch.where(pos, rho, zr)], dim=1)
    t, order = torch.sort(t, dim=1, stable=True)
    dd = torch.gather(dd, 1, order)
    z1 = torch.zeros((B, 1), dtype=dt, device=dev)
    t = torch.cat([z1, t], dim=1)
    slope = torch.cat([z1, torch.cumsum(dd, dim=1)], dim=1)
    ds = slope[:, :-1] * torch.diff(t, dim=1)
    s = s0.unsqueeze(1) + torch.cat([z1, torch.cumsum(ds, dim=1)], dim=1)
    g = t - gamma * (1.0 - s)
    n = t.shape[1]
    tau = reserve_tol(torch.finfo(dt).eps, gamma)
    above = g >= -tau
    has = above.any(dim=1)
    j = torch.where(has, torch.argmax(above.to(torch.uint8), dim=1), torch.full((B,), n, device=dev))
    jm = (j - 1).clamp(0, n - 1).unsqueeze(1)
    t1 = torch.where(has, torch.gather(t, 1, j.clamp(0, n - 1).unsqueeze(1)).squeeze(1),
                     torch.full((B,), float("inf"), dtype=dt, device=dev))
    t0, g0, sl = (torch.gather(v, 1, jm).squeeze(1) for v in (t, g, slope))
    dg = 1.0 + gamma * sl
    lam = torch.where(dg > 0, t0 - (g0 + tau) / torch.where(dg > 0, dg, torch.ones_like(dg)), t1)
    lam = torch.minimum(lam, t1)
    lam = torch.where(j == 0, torch.zeros_like(lam), lam)
    return lam.clamp(0.0, gamma)


def _versions(*tensors):
    """Autograd version counters (bumped by in-place ops), or None for inference-mode tensors."""
    try:
        return tuple(t._version for t in tensors)
    except RuntimeError:  # inference tensors do not track versions
        return None


@register("resispec", backend="torch", ours=True)
class ResiSpecTorch(TorchMassVerifier):
    """ResiSpec verifier on torch (iid drafts), the fixed-point (myopic) reserve.

    ``get_verifier("resispec", backend="torch")`` builds the look-ahead twin
    (:class:`~resispec.torch_backend.lookahead.ResiSpecLookaheadTorch`) wherever
    ``reserve="auto"`` resolves to it (the draft proxy, no ``solver=``;
    :func:`resispec.verifiers.resispec.resolve_reserve`), as numpy does; this class otherwise
    (any other proxy, ``solver=`` given, ``reserve="fixed_point"``, or ``resispec_myopic``).

    Parameters
    ----------
    proxy : str or callable, default "draft"
        Built-in name (``draft``, ``tempered``, ``topk``, ``uniform_mix``,
        ``coverage``) or ``callable(q_i, *, step, k, p_i)`` called with
        tensors and returning (B, V).
    gamma : float >= 0, default 1
        Reserve scale; ``gamma = 0`` gives ``rrs``.
    proxy_options : dict, optional
        Options of a built-in proxy, e.g. ``{"tau": 2.0}``.
    drafting : {"iid"}
    reserve : {"auto", "fixed_point", "lookahead"}, default "auto"
        As numpy's ``resispec`` (``"lookahead"`` returns the look-ahead twin).
    solver : {"auto", "fused", "newton", "sort"}, optional
        Fixed-point reserve solver (module docstring: cost and error bound;
        giving it selects the fixed point under ``reserve="auto"``).  ``auto``:
        ``fused`` (the compiled per-row kernel of
        :mod:`resispec._reserve_fused`, the one the numpy backend uses) for
        CPU tensors, ``newton`` (tensor ops) on other devices.
    dtype, device
        Working dtype / device for numpy inputs (tensors keep theirs).

    Raises
    ------
    ValueError, TypeError
        As the numpy :class:`resispec.verifiers.resispec.ResiSpec`, plus an
        unknown solver.
    """

    def __new__(cls, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None, drafting: str = "iid",
                *, solver: str | None = None, reserve: str = "auto", **kwargs):
        from ..verifiers.resispec import resolve_reserve

        if cls is ResiSpecTorch and drafting == "without_replacement":
            given = [n for n, bad in (("proxy", proxy != "draft"), ("gamma", gamma != 1.0),
                                      ("proxy_options", proxy_options is not None), ("reserve", reserve != "auto"))
                     if bad]
            if given:
                raise TypeError(f"resispec with drafting='without_replacement' is a different rule (ResiSpecWOR); "
                                 f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to drafting='iid' only: drop them, e.g. "
                                 "get_verifier('resispec', backend='torch', drafting='without_replacement')")
            from .resispec_wor import ResiSpecWORTorch

            return ResiSpecWORTorch(solver="auto" if solver is None else solver, **kwargs)
        if cls is ResiSpecTorch and drafting == "iid" and resolve_reserve(
                reserve, proxy, proxy_options, None if solver is None else f"solver={solver!r}") == "lookahead":
            from .lookahead import ResiSpecLookaheadTorch

            return ResiSpecLookaheadTorch(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                                          **kwargs)
        return super().__new__(cls)

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", *, solver: str | None = None, dtype=None, device=None,
                 reserve: str = "auto"):
        from ..verifiers.resispec import ResiSpec, resolve_reserve

        if drafting == "without_replacement":
            raise ValueError("this class is the iid rule; for drafting='without_replacement' use "
                             "get_verifier('resispec', backend='torch', drafting='without_replacement')")
        if drafting != "iid":
            raise ValueError(f"resispec supports drafting='iid' or 'without_replacement', got {drafting!r}")
        reserve = resolve_reserve(reserve, proxy, proxy_options, None if solver is None else f"solver={solver!r}")
        if reserve != "fixed_point":      # "lookahead" is built by __new__ (ResiSpecLookaheadTorch)
            raise ValueError(f"this class is the fixed-point reserve; got reserve={reserve!r}")
        solver = "auto" if solver is None else solver
        ResiSpec(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                 reserve="fixed_point")  # same checks
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        self._init_backend(dtype, device)
        self.proxy_name = proxy if isinstance(proxy, str) else getattr(proxy, "__name__", "custom")
        self.proxy = get_proxy(proxy, **(proxy_options or {}))
        self._builtin_proxy = isinstance(proxy, str)
        self.gamma = float(gamma)
        self.drafting = drafting
        self.solver = solver
        self._proxy_options = dict(proxy_options or {})
        self.last_reserve: ReserveInfo | None = None

    def __getnewargs_ex__(self):
        # copy / pickle rebuild through __new__: name the rule, or reserve="auto" would turn a copy into the look-ahead
        return (), {"reserve": "fixed_point"}

    def options(self):
        out = {"proxy": self.proxy_name, "gamma": self.gamma, "reserve": "fixed_point", "solver": self.solver}
        if self._proxy_options:
            out["proxy_options"] = self._proxy_options
        return out

    def _rho(self, i, k, p_i, q_i):
        if self._builtin_proxy:  # built-ins return laws by construction and never write their inputs
            return self.proxy(q_i, step=i, k=k, p_i=p_i)
        versions = _versions(q_i, p_i)
        rho = self.proxy(q_i, step=i, k=k, p_i=p_i)
        if versions is not None and _versions(q_i, p_i) != versions:
            raise ValueError(f"proxy {self.proxy_name!r} wrote into its input q_i or p_i (an in-place op); "
                             "a proxy must return a new tensor and leave its arguments unchanged")
        return check_proxy_output(rho, p_i, self.proxy_name).detach()   # a proxy's autograd graph is not ours

    def _solver_for(self, p_i):
        """The solver used for tensors on ``p_i``'s device (``auto`` resolved)."""
        if self.solver == "sort" or self.gamma > 1.0:
            return "sort"
        if self.solver == "auto":
            from .. import _reserve_fused

            if p_i.device.type == "cpu" and not _reserve_fused.AVAILABLE:
                _reserve_fused.warn_unavailable("the tensor-op Newton solver")
            return "fused" if p_i.device.type == "cpu" and _reserve_fused.AVAILABLE else "newton"
        return self.solver

    def _solve(self, i, k, p_i, q_i, out=None, plan=None):
        """``(rho, lam, m)`` for 0-based step ``i`` (``m`` at ``lam``, written into ``out`` if given);
        ``plan``: the walk's state (warm start, Newton buffers), or None outside a walk."""
        rho = self._rho(i, k, p_i, q_i)
        solver = self._solver_for(p_i)
        if solver == "sort":
            lam = solve_reserve_sort(p_i, q_i, rho, self.gamma)
            m = torch.addcmul(p_i, rho, lam.unsqueeze(1), value=-1.0, out=out).clamp_(min=0.0)  # (p_i - lam rho)_+
            return rho, lam, torch.minimum(m, q_i, out=m)
        state = plan.setdefault(_STATE_KEY, {}) if plan is not None else {}   # this walk's: warm start, buffers
        warm = state.get("warm")
        warm = warm if (i > 0 and warm is not None and warm.shape[0] == p_i.shape[0]) else None
        if solver == "fused":
            lam, m, self.last_reserve = solve_reserve_fused(p_i, q_i, rho, self.gamma, init=warm, out=out)
        else:   # newton: its last evaluation of s is at the returned reserve, so m comes with it
            lam, m, self.last_reserve = _solve_newton(p_i, q_i, rho, self.gamma, init=warm,
                                                      workspace=state.get("ws"), out=out)
        state["warm"] = lam
        return rho, lam, m

    def reserve(self, i, k, p_i, q_i):
        """Proxy ``rho_i`` (B, V) and reserve ``lambda_i`` (B,) for 0-based step ``i``."""
        rho, lam, _ = self._solve(i, k, p_i, q_i)
        return rho, lam

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None, state=None):
        if i == k - 1 or self.gamma == 0:
            return torch.minimum(p_i, q_i, out=out)
        return self._solve(i, k, p_i, q_i, out=out, plan=state)[2]

    def _walk_state(self, p) -> dict:
        """Newton buffers and the warm start live in the walk, not on self."""
        return {_STATE_KEY: {"ws": _Workspace(p) if self._solver_for(p) == "newton" else None}}


@register("resispec_myopic", backend="torch", ours=True)
class ResiSpecMyopicTorch(ResiSpecTorch):
    """Torch twin of :class:`resispec.verifiers.resispec.ResiSpecMyopic` (the fixed-point reserve by name)."""

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", *, solver: str | None = None, dtype=None, device=None,
                 reserve: str = "fixed_point"):
        if drafting != "iid":
            raise ValueError(f"resispec_myopic is an iid rule (drafting='iid'), got drafting={drafting!r}; for "
                             "without-replacement drafts use get_verifier('resispec', drafting='without_replacement')")
        if reserve not in ("auto", "fixed_point"):
            raise ValueError(f"resispec_myopic is the fixed-point reserve; got reserve={reserve!r} "
                             "(use get_verifier('resispec', backend='torch') for the look-ahead)")
        super().__init__(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                         solver=solver, dtype=dtype, device=device, reserve="fixed_point")
