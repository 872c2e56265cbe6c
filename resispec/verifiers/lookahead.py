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
runs the bisection as numpy calls over the rows (``psi`` and its inverse by
a vectorised binary search, :func:`_count_sorted`); it is the oracle of the
kernel's tests and the path without numba.  Tie rule: the smallest ``t``
with ``L_0 - L_1 >= 1 - LOOKAHEAD_TOL`` (``docs/verifiers.md``).

Builds on SpecInfer (Miao et al. 2024, arXiv 2305.09781) and the
optimal-transport view of multi-draft verification (SpecTr, Sun et al. 2023,
arXiv 2310.15141; Khisti et al. 2025, arXiv 2410.18234).
"""

from __future__ import annotations

import numpy as np

from .._reserve_tol import LOOKAHEAD_TOL

_BISECT = 80


#: Above this vocabulary size ``psi`` / ``psi_inv`` use the binary search of
#: :func:`_count_sorted`; below it one vectorised O(V) scan is cheaper in numpy
#: (``benchmarks/lookahead_search.py``, B = 8, k = 4: scan/bsearch time ratio 0.4 at V = 1000,
#: 0.5 at 10,000, 1.4 at 50,000, 2.3 at 150,000).
_SCAN_MAX_V = 32768


def _count_sorted(rows_sorted: np.ndarray, x: np.ndarray, strict: bool) -> np.ndarray:
    """Per row, how many entries are ``< x`` (``strict``) or ``<= x``: (B, V) ascending rows, (B,) -> (B,) int.

    The same counts as ``np.sum(rows_sorted < x[:, None], axis=1)`` for rows
    sorted ascending (``+inf`` allowed): that scan for ``V <= _SCAN_MAX_V``,
    else a vectorised binary search over the ``B`` rows
    (``ceil(log2(V + 1))`` passes of O(B)) without the O(V) scan.
    """
    B, V = rows_sorted.shape
    if V <= _SCAN_MAX_V:
        return np.sum((rows_sorted < x[:, None]) if strict else (rows_sorted <= x[:, None]), axis=1)
    rows = np.arange(B)
    lo = np.zeros(B, dtype=np.int64)
    hi = np.full(B, V, dtype=np.int64)
    for _ in range(int(V).bit_length()):
        mid = (lo + hi) // 2
        val = rows_sorted[rows, np.minimum(mid, V - 1)]
        right = (val < x) if strict else (val <= x)
        active = lo < hi
        lo = np.where(active & right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
    return lo


class _Psi:
    """``phi`` / ``psi`` of one batch of rows, with a vectorised inverse of ``psi``."""

    def __init__(self, p: np.ndarray, q: np.ndarray):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # p / tiny q -> inf, as q = 0
            ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)
        order = np.argsort(ratio, axis=1, kind="stable")
        r = np.take_along_axis(ratio, order, axis=1)
        qs = np.take_along_axis(q, order, axis=1)
        ps = np.take_along_axis(p, order, axis=1)
        fin = np.isfinite(r)
        r = np.where(fin, r, 0.0)
        qs = np.where(fin, qs, 0.0)
        ps = np.where(fin, ps, 0.0)
        self.knots = r                                  # (B, V) ratios, ascending (q = 0 tokens pad at 0 ... sorted last)
        self.Qc = np.cumsum(qs, axis=1)                 # q-mass with ratio <= knot j
        self.Pc = np.cumsum(ps, axis=1)
        self.valid = fin
        self.search_knots = np.where(fin, r, np.inf)     # ascending with +inf tail, for _count_sorted
        self.psi_knots = np.where(fin, r * self.Qc - self.Pc, np.inf)
        self.psi_knots = np.maximum.accumulate(np.where(fin, self.psi_knots, -np.inf), axis=1)
        self.psi_knots = np.where(fin, self.psi_knots, np.inf)

    def psi_inv(self, y: np.ndarray) -> np.ndarray:
        """Smallest ``L >= 0`` with ``psi(L) >= y`` for ``y >= 0``, shape (B,)."""
        y = np.maximum(y, 0.0)
        j = _count_sorted(self.psi_knots, y, strict=True)       # knots strictly below y
        rows = np.arange(y.size)
        jm = np.clip(j - 1, 0, self.knots.shape[1] - 1)
        base_L = np.where(j > 0, self.knots[rows, jm], 0.0)
        base_psi = np.where(j > 0, self.psi_knots[rows, jm], 0.0)
        slope = np.where(j > 0, self.Qc[rows, jm], 0.0)
        L = np.where(slope > 0, base_L + (y - base_psi) / np.where(slope > 0, slope, 1.0), base_L)
        return np.where(y <= 0, 0.0, L)

    def psi(self, L: np.ndarray) -> np.ndarray:
        j = _count_sorted(self.search_knots, L, strict=False)   # valid knots <= L
        rows = np.arange(L.size)
        jm = np.clip(j - 1, 0, self.knots.shape[1] - 1)
        Qc = np.where(j > 0, self.Qc[rows, jm], 0.0)
        Pc = np.where(j > 0, self.Pc[rows, jm], 0.0)
        return L * Qc - Pc


def lookahead_schedule(p: np.ndarray, q: np.ndarray, k: int) -> np.ndarray:
    """Tail sums ``L_0 .. L_k`` (B, k + 1) of the look-ahead reserve, with ``L_0 - L_1 = 1``.

    ``L_i`` is the expected number of candidates after candidate ``i``
    (1-based) per unit of reach of candidate 1; the reserve of the first
    candidate is ``Lambda_1 = L_1``.

    Parameters
    ----------
    p, q : ndarray, shape (B, V), float64
        Current residual target and draft (rows sum to 1).
    k : int >= 1
        Candidates still to verify (including the current one).

    Returns
    -------
    ndarray, shape (B, k + 1), float64
    """
    B = p.shape[0]
    out = np.zeros((B, k + 1))
    if k == 1:
        out[:, 0] = 1.0
        return out
    f = _Psi(p, q)

    def run(t):
        L = np.zeros((B, k + 1))
        L[:, k - 1] = t
        psi_next = f.psi(t)                     # psi(L_{k-1})
        for i in range(k - 1, 0, -1):           # compute L_{i-1}
            target = psi_next + L[:, i] - L[:, i + 1]
            L[:, i - 1] = np.maximum(f.psi_inv(target), L[:, i])
            psi_next = f.psi(L[:, i - 1])
        return L

    lo = np.zeros(B)
    hi = np.ones(B)
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        L = run(mid)
        big = (L[:, 0] - L[:, 1]) >= 1.0 - LOOKAHEAD_TOL     # tie rule: the smallest such t
        hi = np.where(big, mid, hi)
        lo = np.where(big, lo, mid)
    return front_load_saturated(run(hi), p, q)


def front_load_saturated(L: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The schedules ``L`` (B, n + 1) with every saturated row front-loaded (numpy; a new array).

    The reference of :func:`resispec._lookahead_fused.front_load_row` (same rule, vectorised): where
    ``phi(L_0) = 1`` (and no target mass lies off the draft's support) the reserve is the least that keeps
    the acceptance at 1, ``L_1 = max(0, max p/q - 1)``, ``L_{i+1} = psi(L_i)``, ``L_n = 0``; other rows
    are returned unchanged.  ``docs/verifiers.md``, "Saturated nodes".
    """
    from .._lookahead_fused import SAT_TOL

    L = np.array(L, dtype=np.float64)
    n = L.shape[1] - 1
    if n < 2:
        return L
    pos = q > 0
    off = np.where(pos, 0.0, p).sum(axis=1)
    on = np.where(pos, p, 0.0).sum(axis=1)
    phi0 = np.minimum(p, q * L[:, :1]).sum(axis=1)                     # phi(L_0) = sum min(p, q L_0)
    rmax = np.max(np.where(pos, p / np.where(pos, q, 1.0), 0.0), axis=1)
    l1 = np.maximum(rmax - 1.0, 0.0)
    sat = (off <= SAT_TOL * (on + off)) & (phi0 >= on * (1.0 - SAT_TOL))   # relative: float32-rounded rows
    rows = np.flatnonzero(sat & (l1 < L[:, 1]))
    if rows.size:
        P, Q = p[rows], q[rows]
        F = np.zeros((rows.size, n + 1))
        F[:, 1] = l1[rows]
        F[:, 0] = 1.0 + F[:, 1]
        for i in range(1, n - 1):
            F[:, i + 1] = np.maximum(F[:, i:i + 1] * Q - P, 0.0).sum(axis=1)   # L_{i+1} = psi(L_i)
        L[rows] = F
    return L


def lookahead_reserve(p_i: np.ndarray, q: np.ndarray, k_left: int) -> np.ndarray:
    """Reserve ``Lambda`` (B,) of the current candidate with ``k_left`` candidates left (itself included).

    ``p_i``, ``q``: (B, V) float64 laws.  ``L_1`` of :func:`lookahead_schedule`,
    computed by the fused kernel of :mod:`resispec._lookahead_fused` (no sort
    over ``V``; the same bisection, equal to the reference up to round-off and
    the tie rule of ``docs/verifiers.md``) when numba is installed, else by the
    reference :func:`_lookahead_reserve_ref`.  0 when ``k_left <= 1``.
    """
    return lookahead_reserve_and_mass(p_i, q, k_left)[0]


def lookahead_reserve_and_mass(p_i: np.ndarray, q: np.ndarray, k_left: int, gamma: float | None = None,
                               plan: dict | None = None):
    """``(Lambda, m)``: the reserve (B,) and, with ``gamma``, ``m = min(q, (p_i - gamma Lambda q)_+)`` (B, V).

    ``m`` is ``None`` without ``gamma``.  One fused pass per row computes both
    when numba is installed (:mod:`resispec._lookahead_fused`); otherwise the
    reference sort (:func:`_lookahead_reserve_ref`) and numpy.  Given the walk's
    ``plan`` (its state dict, :func:`resispec._xp.walk`) with ``gamma = 1`` the
    schedule of the walk's first step serves the later ones (:func:`planned_step`).
    """
    if gamma == 1.0 and k_left > 1 and plan is not None:
        return planned_step(plan, p_i, q, k_left)
    return _solve_step(p_i, q, k_left, gamma)


#: Below this reach a step is unreachable (its reserve is 0, the greedy step; any reserve is exact).
_REACH_EPS = 1e-300


def planned_step(plan: dict, p_i: np.ndarray, q: np.ndarray, k_left: int):
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

    ``plan``: the walk's dict; ``p_i``, ``q``: (B, V) float64; ``k_left >= 2`` candidates left.
    """
    B = p_i.shape[0]
    got = plan.get(_PLAN_KEY)
    if got is not None:
        k0, sched = got
        j = k0 - k_left                                  # candidates rejected since the schedule was solved
        if sched.shape[0] == B and 0 < j < k0 - 1:
            L_prev, L_next = sched[:, j], sched[:, j + 1]
            reach = L_prev - L_next                      # R_{j+1}, per unit of the first step's reach
            lam = np.where(reach > _REACH_EPS, L_next / np.where(reach > _REACH_EPS, reach, 1.0), 0.0)
            return lam, np.minimum(q, np.maximum(p_i - lam[:, None] * q, 0.0))   # m = min(q, (p_i - Lambda q)_+)
    sched, m = _solve_step(p_i, q, k_left, 1.0, schedule=True)
    plan[_PLAN_KEY] = (k_left, sched)
    return sched[:, 1], m


_PLAN_KEY = "resispec.lookahead"


def _solve_step(p_i: np.ndarray, q: np.ndarray, k_left: int, gamma: float | None, schedule: bool = False):
    """``(Lambda, m)`` solved afresh (``schedule=True``: ``(L_0..L_k (B, k_left + 1), m)``)."""
    from .. import _lookahead_fused

    if schedule:
        if _lookahead_fused.AVAILABLE:
            return _lookahead_fused.lookahead_rows(np.ascontiguousarray(p_i, dtype=np.float64),
                                                   np.ascontiguousarray(q, dtype=np.float64), int(k_left),
                                                   gamma=float(gamma))
        sched = _lookahead_schedule_ref(p_i, q, k_left)
        lam = sched[:, 1]
        return sched, np.minimum(q, np.maximum(p_i - (gamma * lam)[:, None] * q, 0.0))
    if k_left <= 1:
        lam = np.zeros(p_i.shape[0])
    elif _lookahead_fused.AVAILABLE:
        p64 = np.ascontiguousarray(p_i, dtype=np.float64)
        q64 = np.ascontiguousarray(q, dtype=np.float64)
        if gamma is None:
            return _lookahead_fused.lookahead_rows(p64, q64, int(k_left))[:, 1], None
        sched, m = _lookahead_fused.lookahead_rows(p64, q64, int(k_left), gamma=float(gamma))
        return sched[:, 1], m
    else:
        lam = _lookahead_reserve_ref(p_i, q, k_left)
    if gamma is None:
        return lam, None
    return lam, np.minimum(q, np.maximum(p_i - (gamma * lam)[:, None] * q, 0.0))


def _lookahead_reserve_ref(p_i: np.ndarray, q: np.ndarray, k_left: int) -> np.ndarray:
    """The reference reserve: ``L_1`` of :func:`lookahead_schedule` (a sort over ``V`` per row; slow, kept as the
    oracle of the fused kernel and the path without numba)."""
    if k_left <= 1:
        return np.zeros(p_i.shape[0])
    return _lookahead_schedule_ref(p_i, q, k_left)[:, 1]


def _lookahead_schedule_ref(p_i: np.ndarray, q: np.ndarray, k_left: int) -> np.ndarray:
    """:func:`lookahead_schedule`, identical nodes solved once (B, k_left + 1)."""
    if p_i.shape[0] > 1:                       # identical nodes share one schedule
        uniq, first, inverse = np.unique(np.concatenate([p_i, q], axis=1), axis=0, return_index=True,
                                         return_inverse=True)
        if uniq.shape[0] < p_i.shape[0]:
            return lookahead_schedule(p_i[first], q[first], k_left)[inverse.reshape(-1)]
    return lookahead_schedule(p_i, q, k_left)
