"""ResiSpec: residual shaping with an auxiliary proxy (``docs/RESISPEC.md`` s.4).

For candidates ``i < k`` (1-based)::

    m_i = min(q_i, (p_i - lambda_i rho_i)_+),   lambda_i = gamma (1 - sum m_i(lambda_i)),

and the last candidate is greedy, ``m_k = min(p_k, q_k)``.  Exact by the
sequential lemma (section 2) for any proxy that never reads ``x_i`` or later
candidates.  Builds on recursive rejection sampling (SpecInfer, Miao et al.
2024, arXiv 2305.09781) and the optimal-transport view of multi-draft
verification (SpecTr, arXiv 2310.15141; Khisti et al. 2025, arXiv 2410.18234).

Written once against the array namespace of its inputs (:mod:`resispec._xp`):
``get_verifier("resispec", backend="torch")`` runs these lines on tensors.  The
reserve's solvers are :mod:`resispec.verifiers.reserve` (fixed point) and
:mod:`resispec.verifiers.lookahead` (look-ahead), both written once too.
"""

from __future__ import annotations


import numpy as np

from .._xp import is_torch, namespace, native
from ..proxies import check_proxy_output, get_proxy
from .base import MassVerifier
from .lookahead import lookahead_reserve, lookahead_reserve_and_mass
from .registry import register
from .reserve import SOLVERS, ReserveInfo, reserve_and_mass, solve_reserve, solver_for  # noqa: F401


#: Reserve rules of the iid ResiSpec verifier (``"auto"``, the default, resolves to one of them:
#: :func:`resolve_reserve`).
RESERVES = ("fixed_point", "lookahead")


def resolve_reserve(reserve: str, proxy, proxy_options, solver_option: str | None) -> str:
    """The reserve rule ``reserve="auto"`` stands for, or ``reserve`` itself (checked).

    ``"auto"`` (the default of ``resispec``) is the look-ahead, the best exact rule we ship
    (``docs/verifiers.md``), wherever it applies: the draft proxy (``proxy="draft"``, no
    ``proxy_options``) and no fixed-point solver asked for.  Any other proxy, or a fixed-point solver
    option (``solver=``; named by ``solver_option``, ``None`` when not given), selects the myopic
    fixed point of ``docs/RESISPEC.md`` section 4.

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


@register("resispec", ours=True)
class ResiSpec(MassVerifier):
    """ResiSpec verifier (iid drafts), on numpy arrays or torch tensors.

    Parameters
    ----------
    proxy : str or callable, default "draft"
        Auxiliary proxy ``rho_i`` (see :mod:`resispec.proxies`): a built-in
        name (``draft``, ``tempered``, ``topk``, ``uniform_mix``,
        ``coverage``) or ``callable(q_i, *, step, k, p_i) -> (B, V)``, called
        with arrays of the verifier's inputs (tensors on ``backend="torch"``).
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
        ``solver`` is given (:func:`resolve_reserve`).
    solver : {"auto", "fused", "newton", "sort"}, optional
        Solver of the fixed-point reserve (:mod:`resispec.verifiers.reserve`; the same point to round-off;
        default ``"auto"``: the compiled kernel for host arrays, array-op Newton on other devices).  Giving it
        selects the fixed point under ``reserve="auto"``.

    Raises
    ------
    ValueError
        Unknown proxy, negative or non-finite gamma, unsupported drafting,
        unknown reserve or solver, or ``reserve="lookahead"`` with a proxy other than
        ``"draft"`` or with ``solver``.
    TypeError
        ``gamma`` not a real number; a proxy that cannot be called as one.
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
                 drafting: str = "iid", reserve: str = "auto", solver: str | None = None):
        reserve = resolve_reserve(reserve, proxy, proxy_options, None if solver is None else f"solver={solver!r}")
        if solver is not None and solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
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
        self._builtin_proxy = isinstance(proxy, str)
        self.gamma = float(gamma) + 0.0                  # -0.0 reads as 0.0
        self.drafting = drafting
        self._proxy_options = dict(proxy_options or {})
        self.solver = "auto" if solver is None else solver
        self.last_reserve: ReserveInfo | None = None     # diagnostics of the last fixed-point solve

    def __getnewargs_ex__(self):
        # copy / pickle rebuild through __new__ (drafting="iid": never the without-replacement rule)
        return (), {}

    def __getstate__(self):
        state = dict(self.__dict__)
        if self._builtin_proxy:
            state["proxy"] = None        # a closure: rebuilt from its name and options (pickles for workers)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.proxy is None:
            self.proxy = get_proxy(self.proxy_name, **self._proxy_options)

    def options(self):
        out = {"proxy": self.proxy_name, "gamma": self.gamma, "reserve": self.reserve_rule}
        if self.reserve_rule == "fixed_point" and self.solver != "auto":
            out["solver"] = self.solver
        if self._proxy_options:
            out["proxy_options"] = self._proxy_options
        return out

    def _rho(self, i, k, p_i, q_i):
        """The proxy ``rho_i`` (B, V) of 0-based step ``i``, checked (a law; the proxy left its inputs alone)."""
        if self._builtin_proxy:          # built-ins return laws by construction and never write their inputs
            return self.proxy(q_i, step=i, k=k, p_i=p_i)
        wrote = ValueError(f"proxy {self.proxy_name!r} tried to write into its input q_i or p_i (an in-place op); "
                           "a proxy must return a new array and leave its arguments unchanged")
        q_in, p_in = _guarded(q_i), _guarded(p_i)
        before = _fingerprint(q_in, p_in)
        try:
            out = self.proxy(q_in, step=i, k=k, p_i=p_in)
        except ValueError as exc:
            if "read-only" in str(exc) and not is_torch(q_i):
                raise wrote from exc
            raise
        if _fingerprint(q_in, p_in) != before:
            raise wrote
        return check_proxy_output(out, q_i, self.proxy_name)

    def reserve(self, i, k, p_i, q_i):
        """Proxy ``rho_i`` (B, V) and reserve ``lambda_i`` (B,) for 0-based step ``i``."""
        if self.reserve_rule == "lookahead":
            return q_i, self.gamma * lookahead_reserve(p_i, q_i, k - i)     # lambda_i = gamma Lambda_i
        rho = self._rho(i, k, p_i, q_i)
        return rho, reserve_and_mass(p_i, q_i, rho, self.gamma, self.solver)[0]

    def solver_for(self, p) -> str:
        """The fixed-point solver that runs for arrays like ``p`` (B, V) (``"auto"`` resolved)."""
        return solver_for(self.solver, self.gamma, p)

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None, state=None):
        """``m_i = min(q_i, (p_i - lambda_i rho_i)_+)`` (B, V); the last candidate greedy, ``min(p_i, q_i)``.

        ``state``: the walk's dict (the look-ahead's schedule, the fixed point's warm start and buffers);
        ``out``: the walk's (B, V) buffer for ``m_i``."""
        if i == k - 1 or self.gamma == 0:
            return native(namespace(p_i, q_i)).minimum(p_i, q_i, out=out)   # m_k = min(p_k, q_k)
        if self.reserve_rule == "lookahead":                                # lambda_i = gamma Lambda_i (s.4-5)
            return lookahead_reserve_and_mass(p_i, q_i, k - i, self.gamma, state, out)[1]
        rho = self._rho(i, k, p_i, q_i)
        state = {} if state is None else state
        warm = state.get("warm") if i > 0 else None                         # the previous candidate's reserve
        warm = warm if (warm is not None and warm.shape[0] == p_i.shape[0]) else None
        lam, m, self.last_reserve = reserve_and_mass(p_i, q_i, rho, self.gamma, self.solver, init=warm, out=out,
                                                     workspace=state.setdefault("newton", {}))
        state["warm"] = lam                  # the walk's: a verifier shared by threads decides as a single one
        return m


def _guarded(x):
    """What a user's proxy gets: a read-only view of a numpy array (writing into it raises); a copy of a tensor
    (tensors cannot be made read-only: a write through ``.data`` or ``.numpy()`` lands in the copy, an in-place op
    bumps its version counter, :func:`_fingerprint`)."""
    if is_torch(x):
        return x.clone()
    v = x.view()
    v.flags.writeable = False
    return v


def _fingerprint(*arrays):
    """Autograd version counters of tensors (bumped by in-place ops), or None (numpy, inference tensors)."""
    try:
        return tuple(a._version for a in arrays if is_torch(a))
    except RuntimeError:  # inference tensors do not track versions
        return None


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
                 drafting: str = "iid", reserve: str = "fixed_point", solver: str | None = None):
        _iid_only("resispec_myopic", drafting)
        if reserve not in ("auto", "fixed_point"):
            raise ValueError(f"resispec_myopic is the fixed-point reserve; got reserve={reserve!r} "
                             "(use get_verifier('resispec') for the look-ahead)")
        super().__init__(proxy=proxy, gamma=gamma, proxy_options=proxy_options, drafting=drafting,
                         reserve="fixed_point", solver=solver)


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
