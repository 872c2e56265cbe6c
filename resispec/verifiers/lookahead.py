"""Look-ahead reserve for ResiSpec on iid drafts (``docs/RESISPEC.md`` s.4-5).

The myopic fixed point of section 4 keeps back, at candidate ``i``, only what
the *next* candidate can use.  The look-ahead reserve keeps back, for every
token, what *all* the remaining candidates can still accept of it.  In
unnormalised masses (``R_i`` = probability of reaching candidate ``i``,
``L_i = R_{i+1} + ... + R_k`` the expected number of candidates still to
come, ``P_i = p - M_1 - ... - M_{i-1}``)::

    M_i = min( q R_i, (P_i - L_i q)_+ ),        i.e.  m_i = min(q, (p_i - Lambda_i q)_+),
    Lambda_i = L_i / R_i,

and the last candidate is greedy (``L_k = 0``).  Token ``x`` is then accepted in
total ``min(p(x), q(x) L_0)`` with ``L_0 = R_1 + ... + R_k``, and step ``i``
accepts ``s_i = phi(L_{i-1}) - phi(L_i)`` with ``phi(L) = sum_x min(p, q L)``.
The reaches must be consistent, ``R_{i+1} = R_i - s_i``; with
``psi(L) = L - phi(L)`` (non-decreasing, piecewise linear with knots at the
sorted ratios ``p/q``) that is the backward recursion::

    L_k = 0,  L_{k-1} = t,   psi(L_{i-1}) = psi(L_i) + L_i - L_{i+1},

and ``t`` is fixed by ``L_0 - L_1 = R_1 = 1`` (bisection; ``R_1`` grows from 0
at ``t = 0`` to at least 1 at ``t = 1``).  The acceptance is
``phi(L_0)``: the cut ``I = {1..k}`` of the sequential linear programme of
section 5 holds with equality, which is why the rule lands on (or next to)
the LP optimum.  For ``k = 2`` it is the myopic fixed point.

Exactness: ``Lambda_i`` depends on ``p_i``, ``q`` and the number of
candidates left only -- never on ``x_i`` or later candidates -- and
``0 <= m_i <= min(p_i, q)``, so the sequential lemma (section 2) applies
whatever ``Lambda_i`` is; the solver's accuracy only affects the acceptance.
Cost: :func:`lookahead_reserve` runs the compiled kernel of
:mod:`resispec._lookahead_fused` (bucketed ratios, no sort over ``V``: two
passes per row and candidate plus O(BISECT k log V) look-ups).  The
reference here, :func:`lookahead_schedule`, sorts ``p_i/q`` (O(V log V)) and
runs the bisection as array calls over the rows (``psi`` and its inverse by
:func:`resispec._xp.count_sorted`: ``searchsorted`` on torch, a vectorised
scan or binary search on numpy); it is the oracle of the kernel's tests, the
path without numba and the path on accelerators.  Written once against the
array namespace of its inputs (:mod:`resispec._xp`): the same lines run on
numpy arrays and torch tensors; the compiled kernel serves host arrays (numpy
or CPU tensors).  Tie rule: the smallest ``t``
with ``L_0 - L_1 >= 1 - LOOKAHEAD_TOL`` (``docs/verifiers.md``).

Builds on SpecInfer (Miao et al. 2024, arXiv 2305.09781) and the
optimal-transport view of multi-draft verification (SpecTr, Sun et al. 2023,
arXiv 2310.15141; Khisti et al. 2025, arXiv 2410.18234).
"""

from __future__ import annotations

import numpy as np

from .._reserve_tol import LOOKAHEAD_TOL
from .._xp import at, clip_to, count_sorted, cummax, device, host, host_out, into, like, namespace, sub_scaled

_BISECT = 80


class _Psi:
    """``phi`` / ``psi`` of one batch of rows (B, V), with a vectorised inverse of ``psi`` (numpy or torch)."""

    def __init__(self, p, q):
        xp = namespace(p, q)
        pos = q > 0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # p / tiny q -> inf, as q = 0
            ratio = xp.where(pos, p / xp.where(pos, q, 1.0), float("inf"))   # p / q, (B, V)
        order = xp.argsort(ratio, axis=1, stable=True)
        r = xp.take_along_axis(ratio, order, axis=1)                        # ratios ascending, (B, V)
        fin = xp.isfinite(r)                                                # q > 0 tokens: a prefix of each row
        self.valid = fin
        self.knots = xp.where(fin, r, 0.0)
        self.Qc = xp.cumulative_sum(xp.where(fin, xp.take_along_axis(q, order, axis=1), 0.0), axis=1)  # q-mass, ratio <= knot j
        self.Pc = xp.cumulative_sum(xp.where(fin, xp.take_along_axis(p, order, axis=1), 0.0), axis=1)
        self.search_knots = xp.where(fin, r, float("inf"))                  # ascending, +inf tail (count_sorted)
        psi_k = cummax(xp.where(fin, self.knots * self.Qc - self.Pc, -float("inf")))   # psi at the knots, monotone
        self.psi_knots = xp.where(fin, psi_k, float("inf"))

    def _before(self, table, j):
        """``table[row, j - 1]`` (B,), 0 where ``j = 0``."""
        V = self.knots.shape[1]
        jm = namespace(j).clip(j - 1, 0, V - 1)
        return namespace(table).where(j > 0, at(table, jm), 0.0)

    def psi_inv(self, y):
        """Smallest ``L >= 0`` with ``psi(L) >= y`` for ``y`` (B,), shape (B,)."""
        xp = namespace(y)
        y = xp.clip(y, 0.0, None)
        j = count_sorted(self.psi_knots, y, strict=True)                    # knots strictly below y
        base_L, base_psi, slope = (self._before(t, j) for t in (self.knots, self.psi_knots, self.Qc))
        L = xp.where(slope > 0, base_L + (y - base_psi) / xp.where(slope > 0, slope, 1.0), base_L)
        return xp.where(y <= 0, 0.0, L)

    def psi(self, L):
        """``psi(L) = L Q(L) - P(L)`` for ``L`` (B,) >= 0, shape (B,)."""
        j = count_sorted(self.search_knots, L, strict=False)                # valid knots <= L
        return L * self._before(self.Qc, j) - self._before(self.Pc, j)


def lookahead_schedule(p, q, k: int):
    """Tail sums ``L_0 .. L_k`` (B, k + 1) of the look-ahead reserve, with ``L_0 - L_1 = 1``.

    ``L_i`` is the expected number of candidates after candidate ``i``
    (1-based) per unit of reach of candidate 1; the reserve of the first
    candidate is ``Lambda_1 = L_1``.

    Parameters
    ----------
    p, q : array (numpy or torch), shape (B, V), float64 (float32 tensors too)
        Current residual target and draft (rows sum to 1).
    k : int >= 1
        Candidates still to verify (including the current one).

    Returns
    -------
    array of ``p``'s library, shape (B, k + 1), ``p``'s dtype

    Raises
    ------
    ValueError
        ``k`` not an integer >= 1.

    Source: ``docs/RESISPEC.md`` sections 4-5 (the look-ahead reserve; the cut ``I = {1..k}`` of the
    sequential LP holds with equality).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (candidates left), got {k!r}")
    xp = namespace(p, q)
    B, k = p.shape[0], int(k)
    zeros = lambda *shape: xp.zeros(shape, dtype=p.dtype, device=device(p))   # noqa: E731
    if k == 1:
        out = zeros(B, 2)
        out[:, 0] = 1.0
        return out
    f = _Psi(p, q)

    def run(t):
        L = zeros(B, k + 1)                                                 # (B, k + 1), L_k = 0
        L[:, k - 1] = t
        psi_next = f.psi(t)                                                 # psi(L_{k-1})
        for i in range(k - 1, 0, -1):                                       # L_{i-1} from L_i, L_{i+1}
            target = psi_next + L[:, i] - L[:, i + 1]                       # psi(L_{i-1}) = psi(L_i) + L_i - L_{i+1}
            L[:, i - 1] = xp.maximum(f.psi_inv(target), L[:, i])
            psi_next = f.psi(L[:, i - 1])
        return L

    lo, hi = zeros(B), zeros(B) + 1.0
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        L = run(mid)
        big = (L[:, 0] - L[:, 1]) >= 1.0 - LOOKAHEAD_TOL                   # tie rule: the smallest such t
        hi = xp.where(big, mid, hi)
        lo = xp.where(big, lo, mid)
    return front_load_saturated(run(hi), p, q)


def front_load_saturated(L, p, q):
    """The schedules ``L`` (B, n + 1) with every saturated row front-loaded (a new array of ``L``'s library).

    The reference of :func:`resispec._lookahead_fused.front_load_row` (same rule, vectorised): where
    ``phi(L_0) = 1`` (and no target mass lies off the draft's support) the reserve is the least that keeps
    the acceptance at 1, ``L_1 = max(0, max p/q - 1)``, ``L_{i+1} = psi(L_i)``, ``L_n = 0``; other rows
    are returned unchanged.  Every row is computed and the saturated ones selected (no host
    synchronisation on an accelerator).  ``docs/verifiers.md``, "Saturated nodes".
    """
    from .._lookahead_fused import SAT_TOL

    xp = namespace(L, p, q)
    L = xp.asarray(L, copy=True)
    n = L.shape[1] - 1
    if n < 2:
        return L
    pos = q > 0
    off = xp.sum(xp.where(pos, 0.0, p), axis=1)                             # target mass off the draft, (B,)
    on = xp.sum(xp.where(pos, p, 0.0), axis=1)
    phi0 = xp.sum(xp.minimum(p, q * L[:, :1]), axis=1)                      # phi(L_0) = sum min(p, q L_0)
    rmax = xp.max(xp.where(pos, p / xp.where(pos, q, 1.0), 0.0), axis=1)    # max p / q
    l1 = xp.clip(rmax - 1.0, 0.0, None)
    tol = SAT_TOL if p.dtype == xp.float64 else 64 * float(xp.finfo(p.dtype).eps)   # relative: float32 rows
    sat = (off <= tol * (on + off)) & (phi0 >= on * (1.0 - tol)) & (l1 < L[:, 1])
    F = xp.zeros(L.shape, dtype=L.dtype, device=device(L))
    F[:, 1] = l1
    F[:, 0] = 1.0 + l1
    for i in range(1, n - 1):
        F[:, i + 1] = xp.sum(xp.clip(F[:, i:i + 1] * q - p, 0.0, None), axis=1)   # L_{i+1} = psi(L_i)
    return xp.where(sat[:, None], F, L)


def lookahead_reserve(p_i, q, k_left: int):
    """Reserve ``Lambda`` (B,) of the current candidate with ``k_left`` candidates left (itself included).

    ``p_i``, ``q``: (B, V) laws (numpy or torch).  ``L_1`` of :func:`lookahead_schedule`,
    computed by the fused kernel of :mod:`resispec._lookahead_fused` (no sort
    over ``V``; the same bisection, equal to the reference up to round-off and
    the tie rule of ``docs/verifiers.md``) for host arrays when numba is installed, else by the
    reference :func:`_lookahead_reserve_ref`.  0 when ``k_left <= 1``.
    """
    return lookahead_reserve_and_mass(p_i, q, k_left)[0]


def lookahead_reserve_and_mass(p_i, q, k_left: int, gamma: float | None = None, plan: dict | None = None,
                               out=None):
    """``(Lambda, m)``: the reserve (B,) and, with ``gamma``, ``m = min(q, (p_i - gamma Lambda q)_+)`` (B, V).

    ``m`` is ``None`` without ``gamma``.  One fused pass per row computes both
    for host arrays when numba is installed (:mod:`resispec._lookahead_fused`); otherwise the
    reference sort (:func:`_lookahead_reserve_ref`) in array ops.  Given the walk's
    ``plan`` (its state dict, :func:`resispec._xp.walk`) with ``gamma = 1`` the
    schedule of the walk's first step serves the later ones (:func:`planned_step`).
    ``out``: optional (B, V) buffer for ``m``.
    """
    if gamma == 1.0 and k_left > 1 and plan is not None:
        return planned_step(plan, p_i, q, k_left, out)
    if k_left <= 1:
        xp = namespace(p_i, q)
        lam = xp.zeros((p_i.shape[0],), dtype=p_i.dtype, device=device(p_i))
        return lam, (None if gamma is None else _mass(p_i, q, lam, gamma, out))
    sched, m = _solve_schedule(p_i, q, k_left, gamma, out)
    return sched[:, 1], m


#: Below this reach a step is unreachable (its reserve is 0, the greedy step; any reserve is exact).
_REACH_EPS = 1e-300


def planned_step(plan: dict, p_i, q, k_left: int, out=None):
    """``(Lambda, m)`` of the look-ahead rule (``gamma = 1``) from the schedule solved at the walk's first step.

    Dynamic consistency (``docs/verifiers.md``, "one solve a node"): with ``gamma = 1`` the residual the
    rule leaves after ``j`` rejections is ``p_{j+1} = min(p, L_j q) / R_{j+1}`` off the ``q = 0`` tokens,
    ``R_{j+1} = L_j - L_{j+1}`` (unnormalised masses of the module docstring).  On ``[0, L_j / R_{j+1}]``,
    the range its own schedule lives in, its ``psi`` is ``psi(R L) / R`` and the recursion is
    scale-free, so solving again at step ``j + 1`` gives the tail of the first schedule rescaled,
    ``L'_i = L_{j+i} / R_{j+1}``, and the reserve ``Lambda_{j+1} = L_{j+1} / (L_j - L_{j+1})``.  One
    solve a node instead of one a candidate; the same numbers up to round-off and the tie rule.
    Exactness never rests on it: ``Lambda`` depends on ``p``, ``q`` and the step only, and
    ``0 <= m <= min(p_i, q)`` (section 2's lemma).

    ``plan``: the walk's dict; ``p_i``, ``q``: (B, V) laws (numpy or torch); ``k_left >= 2`` candidates left;
    ``out``: optional (B, V) buffer for ``m``.
    """
    got = plan.get(_PLAN_KEY)
    if got is not None:
        k0, sched = got
        j = k0 - k_left                                  # candidates rejected since the schedule was solved
        if sched.shape[0] == p_i.shape[0] and 0 < j < k0 - 1:
            xp = namespace(p_i, q)
            L_prev, L_next = sched[:, j], sched[:, j + 1]
            reach = L_prev - L_next                      # R_{j+1}, per unit of the first step's reach
            lam = xp.where(reach > _REACH_EPS, L_next / xp.where(reach > _REACH_EPS, reach, 1.0), 0.0)
            return lam, _mass(p_i, q, lam, 1.0, out)     # m = min(q, (p_i - Lambda q)_+)
    sched, m = _solve_schedule(p_i, q, k_left, 1.0, out)
    plan[_PLAN_KEY] = (k_left, sched)
    return sched[:, 1], m


_PLAN_KEY = "resispec.lookahead"


def _mass(p_i, q, lam, gamma, out=None):
    """``m = min(q, (p_i - gamma lam q)_+)`` (B, V), into ``out`` when given (no other (B, V) allocation)."""
    m = sub_scaled(p_i, gamma * lam, q, out)                                # p_i - gamma Lambda q
    return clip_to(m, q, out=m)                                             # min(q, (.)_+)


def _solve_schedule(p_i, q, k_left: int, gamma, out=None):
    """``(L_0..L_k (B, k_left + 1), m or None)`` solved afresh: the compiled kernel for host arrays (numba),
    else the reference :func:`_lookahead_schedule_ref` in array ops."""
    from .. import _lookahead_fused

    P, Q = host(p_i, np.float64), host(q, np.float64)
    if P is not None and _lookahead_fused.AVAILABLE:
        if gamma is None:
            return like(_lookahead_fused.lookahead_rows(P, Q, int(k_left)), p_i), None
        if not str(p_i.dtype).endswith("float64"):
            # another working dtype (float32): the schedule from the kernel, m in that dtype (no float64 (B, V) copy)
            sched = like(_lookahead_fused.lookahead_rows(P, Q, int(k_left)), p_i)
            return sched, _mass(p_i, q, sched[:, 1], gamma, out)
        buf = host_out(out)                                                 # the kernel writes m into out
        sched, m = _lookahead_fused.lookahead_rows(P, Q, int(k_left), gamma=float(gamma), out=buf)
        return like(sched, p_i), (out if buf is not None else into(out, like(m, p_i)))
    sched = _lookahead_schedule_ref(p_i, q, k_left)
    return sched, (None if gamma is None else _mass(p_i, q, sched[:, 1], gamma, out))


def _lookahead_reserve_ref(p_i, q, k_left: int):
    """The reference reserve: ``L_1`` of :func:`lookahead_schedule` (a sort over ``V`` per row; slow, kept as the
    oracle of the fused kernel, the path without numba and the path on accelerators)."""
    if k_left <= 1:
        return namespace(p_i).zeros((p_i.shape[0],), dtype=p_i.dtype, device=device(p_i))
    return _lookahead_schedule_ref(p_i, q, k_left)[:, 1]


def _lookahead_schedule_ref(p_i, q, k_left: int):
    """:func:`lookahead_schedule`, identical nodes solved once (B, k_left + 1) (host arrays: an accelerator
    never waits on the check)."""
    xp = namespace(p_i, q)
    B = p_i.shape[0]
    if B > 1 and host(p_i) is not None and bool(xp.all(p_i == p_i[:1])) and bool(xp.all(q == q[:1])):
        return xp.broadcast_to(lookahead_schedule(p_i[:1], q[:1], k_left), (B, k_left + 1)) * 1.0
    return lookahead_schedule(p_i, q, k_left)
