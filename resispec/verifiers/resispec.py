"""ResiSpec: residual shaping with an auxiliary proxy (``docs/RESISPEC.md`` s.4).

For candidates ``i < k`` (1-based)::

    m_i = min(q_i, (p_i - lambda_i rho_i)_+),   lambda_i = gamma (1 - sum m_i(lambda_i)),

and the last candidate is greedy, ``m_k = min(p_k, q_k)``.  Exact by the
sequential lemma (section 2) for any proxy that never reads ``x_i`` or later
candidates.  Builds on recursive rejection sampling (SpecInfer, Miao et al.
2024, arXiv 2305.09781) and the optimal-transport view of multi-draft
verification (SpecTr, arXiv 2310.15141; Khisti et al. 2025, arXiv 2410.18234).
"""

from __future__ import annotations


import numpy as np

from ..proxies import check_proxy_output, get_proxy
from .base import MassVerifier
from .lookahead import lookahead_reserve, lookahead_reserve_and_mass
from .registry import register
from .._reserve_tol import reserve_tol


#: Reserve rules of the iid ResiSpec verifier (``"auto"``, the default, resolves to one of them:
#: :func:`resolve_reserve`).
RESERVES = ("fixed_point", "lookahead")


def resolve_reserve(reserve: str, proxy, proxy_options, solver_option: str | None) -> str:
    """The reserve rule ``reserve="auto"`` stands for, or ``reserve`` itself (checked).

    ``"auto"`` (the default of ``resispec``) is the look-ahead, the best exact rule we ship
    (``docs/verifiers.md``), wherever it applies: the draft proxy (``proxy="draft"``, no
    ``proxy_options``) and no fixed-point solver asked for.  Any other proxy, or a fixed-point solver
    option (numpy ``reserve_method=``, torch ``solver=``; named by ``solver_option``, ``None`` when not
    given), selects the myopic fixed point of ``docs/RESISPEC.md`` section 4.

    Raises
    ------
    ValueError
        ``reserve`` not ``"auto"`` or one of :data:`RESERVES`; ``"lookahead"`` with another proxy or
        with a fixed-point solver option.
    """
    if reserve == "auto":
        draft_proxy = isinstance(proxy, str) and proxy == "draft" and not proxy_options
        return "lookahead" if draft_proxy and solver_option is None else "fixed_point"
    if reserve not in RESERVES:
        raise ValueError(f"reserve must be 'auto' or one of {RESERVES}, got {reserve!r}")
    if reserve == "lookahead" and solver_option is not None:
        raise ValueError(f"{solver_option} chooses a solver of the fixed-point reserve; the look-ahead has its own: "
                         f"drop {solver_option.split('=')[0]}= or pass reserve='fixed_point' (or use resispec_myopic)")
    return reserve


#: Solvers of :func:`solve_reserve`.
RESERVE_METHODS = ("newton", "sort")


def solve_reserve(p_i: np.ndarray, q_i: np.ndarray, rho: np.ndarray, gamma: float,
                  method: str = "newton", *, init: np.ndarray | None = None) -> np.ndarray:
    """Reserve of ResiSpec: the fixed point ``lambda = gamma (1 - s(lambda))``.

    ``s(lambda) = sum_x min(q, (p - lambda rho)_+)`` is piecewise linear with
    breakpoints ``(p - q)_+ / rho`` (slope drops by ``rho``) and ``p / rho``
    (slope rises by ``rho``); ``g(lambda) = lambda - gamma (1 - s(lambda))``
    has ``g(0) <= 0 <= g(gamma)``.  Every method returns the same point,

        ``lambda = min {l in [0, gamma] : g(l) >= -tau}``,  ``tau = 1e-13 (1 + gamma)``,

    the smallest root up to ``tau``: the left end of a flat piece of roots
    (``gamma = 1``, every token with ``rho > 0`` active), 0 when ``p ~ q``,
    and otherwise ``tau / g'`` left of the exact root
    (``|lambda - lambda*| <= tau / (1 - gamma)`` for ``gamma < 1``).

    ``method="newton"`` (default, ``0 <= gamma <= 1``): the fused per-row
    Newton kernel of :mod:`resispec._reserve_fused` (one compiled pass over
    a cache-resident row per step, about 4-7 steps, exact finish), shared
    with the torch backend on CPU; ``init`` (B,) warm-starts it (speed
    only).  ``method="sort"``: sort the ``2V`` knots, O(V log V) per row.
    ``gamma > 1`` (``g`` may decrease) always sorts.  Without numba,
    ``"newton"`` falls back to the sort with a warning.

    Parameters
    ----------
    p_i, q_i, rho : array_like, shape (B, V)
        Residual target, draft of the current candidate, proxy (rows sum to
        1); computed in float64 whatever their dtype.
    gamma : float >= 0
        Reserve scale.
    method : {"newton", "sort"}
        Solver (the same answer to round-off).
    init : ndarray, shape (B,), optional
        Warm start of ``"newton"``.

    Returns
    -------
    ndarray, shape (B,), float64 in [0, gamma]

    Raises
    ------
    ValueError
        Unknown ``method``; negative or non-finite ``gamma``; arrays not
        2-D of one shape; ``init`` not of shape (B,).

    Source: ``docs/RESISPEC.md`` section 4 (ResiSpec's reserve, reshaping
    the residual of SpecInfer's recursive rejection sampling, arXiv
    2305.09781).
    """
    if method not in RESERVE_METHODS:
        raise ValueError(f"method must be one of {RESERVE_METHODS}, got {method!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) \
            or not np.isfinite(gamma) or gamma < 0:
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    p_i, q_i, rho = (np.asarray(a, dtype=np.float64) for a in (p_i, q_i, rho))   # float64 reference
    shapes = [np.shape(a) for a in (p_i, q_i, rho)]
    if len(shapes[0]) != 2 or len(set(shapes)) != 1:
        raise ValueError(f"p_i, q_i and rho must be 2-D arrays of one shape (B, V), got {shapes}; "
                         "use x[None] for a single row")
    B, V = shapes[0]
    if gamma == 0:
        return np.zeros(B)
    if method == "newton" and gamma <= 1.0 and _fused_available():
        return _solve_fused(p_i, q_i, rho, gamma, init)[0]
    return _solve_reserve_sort(p_i, q_i, rho, gamma)


def _fused_available() -> bool:
    from .. import _reserve_fused

    if not _reserve_fused.AVAILABLE:
        _reserve_fused.warn_unavailable("the exact breakpoint sort")
    return _reserve_fused.AVAILABLE


def _solve_fused(p_i, q_i, rho, gamma, init=None):
    """``(lambda, m)`` by the fused kernel (float64, C-contiguous copies where needed)."""
    from .._reserve_fused import solve_reserve_rows

    arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in (p_i, q_i, rho)]
    lam, m, _, _, _ = solve_reserve_rows(*arrays, float(gamma), init=init)
    return lam, m


def _solve_reserve_sort(p_i, q_i, rho, gamma):
    """The sort solver of :func:`solve_reserve` (any ``gamma > 0``)."""
    B, V = p_i.shape
    lo = np.minimum(p_i, q_i)
    s0 = lo.sum(axis=1)
    pos = rho > 0
    safe = np.where(pos, rho, 1.0)
    far = 2.0 * gamma + 1.0  # beyond the root bracket [0, gamma]
    # Breakpoints past the bracket (including ones that overflow for a
    # subnormal rho) are clamped to ``far``: the root lies before them.
    with np.errstate(over="ignore", invalid="ignore"):
        start = np.where(pos, np.minimum(np.maximum(p_i - q_i, 0.0) / safe, far), far)
        stop = np.where(pos, np.minimum(p_i / safe, far), far)
    t = np.concatenate([start, stop], axis=1)
    d = np.concatenate([np.where(pos, -rho, 0.0), np.where(pos, rho, 0.0)], axis=1)
    order = np.argsort(t, axis=1, kind="stable")
    t = np.take_along_axis(t, order, axis=1)
    d = np.take_along_axis(d, order, axis=1)
    t = np.concatenate([np.zeros((B, 1)), t], axis=1)           # (B, 2V+1) knots
    slope = np.concatenate([np.zeros((B, 1)), np.cumsum(d, axis=1)], axis=1)  # slope of s right of knot
    ds = slope[:, :-1] * np.diff(t, axis=1)
    s = s0[:, None] + np.concatenate([np.zeros((B, 1)), np.cumsum(ds, axis=1)], axis=1)
    g = t - gamma * (1.0 - s)
    n = t.shape[1]
    rows = np.arange(B)
    tau = reserve_tol(np.finfo(np.float64).eps, gamma)   # one definition for every solver
    above = g >= -tau                                             # g == 0 up to round-off counts
    has = above.any(axis=1)
    j = np.where(has, np.argmax(above, axis=1), n)                # first knot with g >= -tau
    jm = np.clip(j - 1, 0, n - 1)
    t1 = np.where(has, t[rows, np.clip(j, 0, n - 1)], np.inf)
    t0, g0, sl = t[rows, jm], g[rows, jm], slope[rows, jm]
    dg = 1.0 + gamma * sl
    lam = np.where(dg > 0, t0 - (g0 + tau) / np.where(dg > 0, dg, 1.0), t1)   # g = -tau on this piece
    lam = np.minimum(lam, t1)                                      # the crossing lies in (t_{j-1}, t_j]
    lam = np.where(j == 0, 0.0, lam)                               # g(0) >= 0: root at 0
    return np.clip(lam, 0.0, gamma)


@register("resispec", ours=True)
class ResiSpec(MassVerifier):
    """ResiSpec verifier (iid drafts).

    Parameters
    ----------
    proxy : str or callable, default "draft"
        Auxiliary proxy ``rho_i`` (see :mod:`resispec.proxies`): a built-in
        name (``draft``, ``tempered``, ``topk``, ``uniform_mix``,
        ``coverage``) or ``callable(q_i, *, step, k, p_i) -> (B, V)``.
    gamma : float >= 0, default 1
        Reserve scale; ``gamma = 0`` gives ``rrs``.
    proxy_options : dict, optional
        Options of a built-in proxy, e.g. ``{"tau": 2.0}``.
    drafting : {"iid", "without_replacement"}
        The candidate law.  ``"without_replacement"`` returns the
        without-replacement rule :class:`~resispec.verifiers.resispec_wor.ResiSpecWOR`
        (candidate-dependent residual; its own options).
    reserve : {"auto", "fixed_point", "lookahead"}, default "auto"
        ``"lookahead"``: reserve what all the remaining candidates can still
        accept, ``lambda_i = gamma * Lambda_i`` from
        :func:`~resispec.verifiers.lookahead.lookahead_reserve` (iid drafts,
        proxy ``"draft"`` only; one schedule solve a node at ``gamma = 1``);
        it matches the sequential LP optimum of section 5 to about 1e-6 on
        the bench families.  ``"fixed_point"``: the myopic reserve
        ``lambda = gamma (1 - s(lambda))`` of section 4 (optimal for k = 2;
        also ``get_verifier("resispec_myopic")``).  ``"auto"``: the look-ahead
        for the draft proxy, the fixed point for any other proxy or when
        ``reserve_method`` is given (:func:`resolve_reserve`).
    reserve_method : {"newton", "sort"}, optional
        Solver of the fixed-point reserve (:func:`solve_reserve`; same answer
        to round-off; default ``"newton"``).  Giving it selects the fixed
        point under ``reserve="auto"``.

    Raises
    ------
    ValueError
        Unknown proxy, negative or non-finite gamma, unsupported drafting,
        unknown reserve, or ``reserve="lookahead"`` with a proxy other than
        ``"draft"`` or with ``reserve_method``.
    """

    def __new__(cls, *args, drafting: str = "iid", **kwargs):
        if cls is ResiSpec and drafting == "without_replacement":
            from .resispec_wor import ResiSpecWOR

            iid_only = sorted(set(kwargs) - {"scales", "solver"})
            if args or iid_only:
                given = iid_only or ["positional arguments"]
                raise TypeError(
                    f"resispec with drafting='without_replacement' is a different rule (ResiSpecWOR) that takes "
                    f"only scales= (reserve scales g >= 0, default (1.0,)) and solver= ('auto', 'fused', 'reference'); "
                    f"{', '.join(given)} "
                    f"{'applies' if len(given) == 1 else 'apply'} to drafting='iid' only: drop them, e.g. get_verifier('resispec', drafting='without_replacement') "
                    "or resispec[drafting=without_replacement]")
            return ResiSpecWOR(**kwargs)
        return super().__new__(cls)

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", reserve: str = "auto", reserve_method: str | None = None):
        reserve = resolve_reserve(reserve, proxy, proxy_options,
                                  None if reserve_method is None else f"reserve_method={reserve_method!r}")
        reserve_method = "newton" if reserve_method is None else reserve_method
        if reserve_method not in RESERVE_METHODS:
            raise ValueError(f"reserve_method must be one of {RESERVE_METHODS}, got {reserve_method!r}")
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating, np.integer)):
            raise TypeError(f"gamma must be a real number >= 0, got {gamma!r}")
        if not np.isfinite(gamma) or gamma < 0:
            raise ValueError(f"gamma must be finite and >= 0, got {gamma}")
        if drafting == "without_replacement":
            raise ValueError("pass drafting='without_replacement' as a keyword (get_verifier('resispec', "
                             "drafting='without_replacement')); it selects a different rule")
        if drafting != "iid":
            raise ValueError(f"resispec supports drafting='iid' or 'without_replacement', got {drafting!r}")
        if reserve == "lookahead" and (proxy != "draft" or proxy_options):
            raise ValueError("reserve='lookahead' reserves along the draft itself: use proxy='draft' "
                             "(or reserve='fixed_point' for other proxies)")
        self.reserve_rule = reserve
        self.proxy_name = proxy if isinstance(proxy, str) else getattr(proxy, "__name__", "custom")
        self.proxy = get_proxy(proxy, **(proxy_options or {}))
        self.gamma = float(gamma)
        self.drafting = drafting
        self._proxy_options = dict(proxy_options or {})
        self.reserve_method = reserve_method

    def options(self):
        out = {"proxy": self.proxy_name, "gamma": self.gamma, "reserve": self.reserve_rule}
        if self.reserve_rule == "fixed_point" and self.reserve_method != "newton":
            out["reserve_method"] = self.reserve_method
        if self._proxy_options:
            out["proxy_options"] = self._proxy_options
        return out

    def _proxy_and_lookahead(self, i, k, p_i, q_i):
        """``(rho, lam)``: ``lam`` from the look-ahead rule, ``None`` for the fixed point (to solve)."""
        if self.reserve_rule == "lookahead":
            return q_i, self.gamma * lookahead_reserve(p_i, q_i, k - i)
        # Read-only views: a proxy that writes into its inputs would corrupt the
        # caller's q (and the residual) without any error.
        q_ro, p_ro = q_i.view(), p_i.view()
        q_ro.flags.writeable = False
        p_ro.flags.writeable = False
        try:
            out = self.proxy(q_ro, step=i, k=k, p_i=p_ro)
        except ValueError as exc:
            if "read-only" not in str(exc):
                raise
            raise ValueError(f"proxy {self.proxy_name!r} tried to write into its input q_i or p_i; "
                             "a proxy must return a new array and leave its arguments unchanged") from exc
        return check_proxy_output(out, p_i.shape, self.proxy_name), None

    def reserve(self, i, k, p_i, q_i):
        """Proxy ``rho_i`` (B, V) and reserve ``lambda_i`` (B,) for 0-based step ``i``."""
        rho, lam, _ = self._solve(i, k, p_i, q_i)
        return rho, lam

    def _solve(self, i, k, p_i, q_i, state=None):
        """``(rho, lam, m)``: proxy, reserve and accepted mass of 0-based step ``i``; ``state``: the walk's dict."""
        if self.reserve_rule == "lookahead":
            lam, m = lookahead_reserve_and_mass(p_i, q_i, k - i, self.gamma, state)   # one fused pass (numba)
            return q_i, self.gamma * lam, m
        rho, lam = self._proxy_and_lookahead(i, k, p_i, q_i)
        if (lam is None and getattr(self, "reserve_method", "newton") == "newton" and self.gamma <= 1.0
                and _fused_available()):
            # warm start from this walk's previous candidate's reserve (it moves lambda's last bit, so it lives
            # in the walk's state: a verifier shared by threads decides as a single-threaded one)
            warm = None if state is None else state.get("warm")
            warm = warm if (i > 0 and warm is not None and warm.shape[0] == p_i.shape[0]) else None
            lam, m = _solve_fused(p_i, q_i, rho, self.gamma, warm)
            if state is not None:
                state["warm"] = lam
            return rho, lam, m
        if lam is None:
            lam = solve_reserve(p_i, q_i, rho, self.gamma, method=getattr(self, "reserve_method", "newton"))
        return rho, lam, np.minimum(q_i, np.maximum(p_i - lam[:, None] * rho, 0.0))

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, state=None):
        if i == k - 1 or self.gamma == 0:
            return np.minimum(p_i, q_i)
        return self._solve(i, k, p_i, q_i, state)[2]


def _iid_only(name: str, drafting) -> None:
    """ValueError for a named iid-only ResiSpec rule asked for another drafting law."""
    if drafting != "iid":
        raise ValueError(f"{name} is an iid rule (drafting='iid'), got drafting={drafting!r}; for "
                         "without-replacement drafts use get_verifier('resispec', drafting='without_replacement')")


@register("resispec_myopic", ours=True)
class ResiSpecMyopic(ResiSpec):
    """ResiSpec with the myopic fixed-point reserve (``reserve="fixed_point"``, section 4) under its own name.

    The default ``resispec`` was this rule until the look-ahead reached the cost of ``rrs``; it stays for
    comparison (``bench-gap`` prints the gap each closes) and for proxies other than the draft.
    """

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", reserve: str = "fixed_point", reserve_method: str | None = None):
        _iid_only("resispec_myopic", drafting)
        if reserve not in ("auto", "fixed_point"):
            raise ValueError(f"resispec_myopic is the fixed-point reserve; got reserve={reserve!r} "
                             "(use get_verifier('resispec') for the look-ahead)")
        super().__init__(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                         reserve="fixed_point", reserve_method=reserve_method)


@register("resispec_lookahead", ours=True)
class ResiSpecLookahead(ResiSpec):
    """ResiSpec with ``reserve="lookahead"`` under its own registry name (iid drafts).

    The same as ``get_verifier("resispec", reserve="lookahead")``; registered
    so that tools that take verifier *names* (``bench-accept``, ``bench``,
    ``certify``) can list it next to ``resispec_myopic`` (the default ``resispec`` is this rule too).
    """

    #: The same rule as the default ``resispec``: not listed twice by the tables that take every verifier.
    bench_default = False

    def __init__(self, proxy="draft", gamma: float = 1.0, proxy_options: dict | None = None,
                 drafting: str = "iid", reserve: str = "lookahead"):
        _iid_only("resispec_lookahead", drafting)
        if reserve not in ("auto", "lookahead"):
            raise ValueError(f"resispec_lookahead is the look-ahead reserve; got reserve={reserve!r} "
                             "(use get_verifier('resispec_myopic') for the fixed point)")
        reserve = "lookahead"
        super().__init__(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting, reserve=reserve)
