"""ResiSpec for without-replacement drafts (``docs/RESISPEC.md`` s.2 and s.4).

Candidates are drawn by successive sampling (RSD, Jeon et al. 2024, arXiv
2402.14160; Sequoia, arXiv 2402.12374): ``q_1 = q``, ``q_{i+1} = norm(q_i``
with ``x_i`` zeroed``)``.  A rejected token can never be drafted again, so
target mass the residual leaves on it is lost for every later candidate.
This rule uses a *candidate-dependent* residual ``r^(x)`` (section 4).

One step (candidate ``i`` of ``k``, not the last)
-------------------------------------------------
Write ``q = q_i``, ``p = p_i``, ``m`` the accepted mass, ``w = q - m`` (draft
and reject each token), ``d = p - m`` (target mass still owed) and, for the
next candidate after rejecting ``x``, ``q^(x) = norm(q`` without ``x)``.

*Residual (matched transport).*  The next candidate can accept at most
``w(x) q^(x)(y)`` of token ``y`` on the branch ``x``, so at most
``c(y) = q(y) (Omega - w(y) / (1 - q(y)))``, ``Omega = sum_x w(x) / (1 - q(x))``,
over all branches.  Route ``d`` as::

    R(x, y) = w(x) q^(x)(y) theta(y) + Z(x, y),     theta = min(1, d / c),

where the first (rank-one) part is fully usable by the next candidate and
``Z`` is a zero-diagonal plan for the leftovers (supplies
``w(x) - sum_y w(x) q^(x)(y) theta(y)``, demands ``d - theta c``): rank-one,
``Z(x, .) = u(x) norm(b`` without ``x)``, so that the leftovers keep the
shape of the owed mass as in ``rrs_wor`` (this matters for k > 2: an
arbitrary zero-diagonal plan cost up to twice the gain on small cases), or
the interval plan where no rank-one plan exists (see
:mod:`resispec.verifiers.zero_diagonal`); continue after rejecting ``x``
with ``r^(x) = R(x, .) / w(x)``.  Then ``sum_x R(x, .) = d`` and
``R(x, x) = 0``, and the next step (greedy) accepts exactly
``sum_y min(d(y), c(y))`` -- the largest possible for this ``m``.

*Accepted mass (reserve fixed point).*  Reserve for each token what the next
candidate can accept of it, scaled by ``g``::

    m = min(q, (p - g c(m))_+),   c(m)(y) = q(y) (Omega(m) - w(y)/(1 - q(y))).

Per token this is ``m(y) = clip(((1-q)(p - g q Omega) + g q^2) / (1 - q + g q), 0, min(p, q))``
(the right side is decreasing in ``m(y)``), and ``Omega`` is the unique root
of ``Omega = sum_x (q - m(Omega))(x) / (1 - q(x))`` (non-decreasing gap;
bisection, O(V) per iteration).  With ``g = 1`` and two candidates this
matched the sequential linear programme's optimum
(:func:`resispec.bounds.sequential_optimum`) on every small case we checked;
it is the without-replacement analogue of the k = 2 optimality of section 4.

*Choice.*  Options: every ``g`` in ``scales`` (when the leftover plan
exists) and plain ``rrs_wor`` (``m = min(p, q)``, residual ``norm(d)``).
Each option's exact next-step value ``sum(m) + sum_x w(x) sum_{y != x}
min(r^(x)(y), q^(x)(y))`` is computed in closed form and the best is kept.
For k = 2 that value is the acceptance, so the rule is never below
``rrs_wor``; for k > 2 the choice is one step deep (myopic).

The last candidate is greedy, ``m_k = min(p_k, q_k)``.

Exactness
---------
Step ``i`` accepts ``x_i = y`` with probability ``q(y) m(y)/q(y) = m(y)`` and
otherwise, with probability ``w(x)`` for each drafted-and-rejected ``x``,
continues from ``r^(x)``.  By induction from the last candidate (the plain
lemma of section 2) the rest of the chain emits exactly its current target,
so the emitted law is ``m + sum_x w(x) r^(x) = m + d = p_i``.  Everything
chosen at step ``i`` (``g``, ``m``, ``R``) is a function of ``p_i`` and
``q_i`` (hence of the candidates already rejected) only, never of ``x_i`` or
later candidates, as section 2 requires.  ``R >= 0`` with rows summing to
``w``, so every ``r^(x)`` is a law.  The bisection is carried to round-off,
and the exact-enumeration tests check ``law == p`` to 1e-12.

Cost per candidate: O(G (n_bisect V + V log V)) for ``G = len(scales)``
(default 1) and ``n_bisect = 60``; the residual row of the rejected token
costs O(V).

References: RSD (arXiv 2402.14160), SpecInfer (arXiv 2305.09781), SpecTr
(arXiv 2310.15141), Khisti et al. 2025 (arXiv 2410.18234).
"""

from __future__ import annotations

import numpy as np

from .._reserve_tol import OMEGA_TOL, WOR_TINY
from .base import Verifier, reject_update, sum_of_others
from .step_plan import StepPlan
from .zero_diagonal import LeftoverPlan

_BISECT = 60
#: ``auto``: the compiled kernel of :mod:`resispec._wor_fused` when numba is present and one scale is
#: tried, else the numpy reference; ``fused`` insists on the kernel; ``reference`` is the numpy code.
_SOLVERS = ("auto", "fused", "reference")
_TINY = WOR_TINY
#: Rows of one block of the chain: about 8 MiB of a (rows, V) float64 array.  Each step makes a few
#: (rows, V) arrays (the kernel's residuals, the next draft); on a whole batch at V = 151,936 and B = 256 each
#: is 311 MB, freshly paged in every step (numpy bookkeeping was 41 % of the call); blocks stay in cache.
_BLOCK_BYTES = 8 << 20


def _inverse_others(q: np.ndarray, one_q: np.ndarray) -> np.ndarray:
    """``1 / sum_of_others(q)`` on drafted tokens, 0 where nothing else is left."""
    ok = (q > 0) & (one_q > 0)
    return np.where(ok, 1.0 / np.where(ok, one_q, 1.0), 0.0)


def wor_reserve_fixed_point(p: np.ndarray, q: np.ndarray, g: float) -> np.ndarray:
    """Accepted mass ``m = min(q, (p - g c(m))_+)`` of the without-replacement rule.

    Parameters
    ----------
    p, q : ndarray, shape (B, V), float64
        Current residual target and current draft (rows sum to 1, ``q < 1``).
    g : float >= 0
        Reserve scale (``0`` gives ``min(p, q)``).

    Returns
    -------
    ndarray, shape (B, V), float64 with ``0 <= m <= min(p, q)``.
    """
    cap = np.minimum(p, q)
    if g == 0:
        return cap
    one_q = sum_of_others(q)
    inv = _inverse_others(q, one_q)

    def m_of(om):
        den = one_q + g * q
        m0 = (one_q * (p - g * q * om[:, None]) + g * q * q) / np.where(den > 0, den, 1.0)
        return np.clip(m0, 0.0, cap)

    lo = np.zeros(p.shape[0])
    hi = np.sum(q * inv, axis=1)
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        rhs = np.sum((q - m_of(mid)) * inv, axis=1)
        above = mid - rhs >= -OMEGA_TOL          # smallest root up to round-off (front-loads acceptance)
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    return m_of(hi)


def _plain_next_value(d: np.ndarray, q: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_x w(x) sum_{y != x} min(r(y), q(y) / (1 - q(x)))`` with ``r = norm(d)`` (B,).

    With ``t = 1 - q(x)`` the inner sum is ``(Psi(t) - min(r(x) t, q(x))) / t``,
    ``Psi(t) = sum_y min(r(y) t, q(y))``: one sort, O(V log V).
    """
    B, V = d.shape
    z = d.sum(axis=1, keepdims=True)
    r = np.where(z > _TINY, d / np.where(z > _TINY, z, 1.0), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(r > 0, q / np.where(r > 0, r, 1.0), np.inf)
    order = np.argsort(kappa, axis=1, kind="stable")
    ks = np.take_along_axis(kappa, order, axis=1)
    q_head = np.concatenate([np.zeros((B, 1)), np.cumsum(np.take_along_axis(q, order, axis=1), axis=1)], axis=1)
    rs = np.take_along_axis(r, order, axis=1)
    r_tail = np.concatenate([np.cumsum(rs[:, ::-1], axis=1)[:, ::-1], np.zeros((B, 1))], axis=1)
    t = sum_of_others(q)
    live = (w > 0) & (t > 0)
    tt = np.where(live, t, 0.0)
    # row-wise searchsorted (side="right": knots with kappa <= t are "capped by q") by one stable sort of
    # each row's knots followed by its queries: a query's rank is the number of knots sorted before it.
    # Exact and the same for a row wherever it sits in the batch.
    o = np.argsort(np.concatenate([ks, tt], axis=1), axis=1, kind="stable")
    rank = np.empty_like(o)
    np.put_along_axis(rank, o, np.cumsum(o < V, axis=1), axis=1)
    j = rank[:, V:]
    rows = np.arange(B)[:, None]
    psi = q_head[rows, j] + tt * r_tail[rows, j]
    inner = (psi - np.minimum(r * tt, q)) / np.where(live, t, 1.0)
    return np.sum(np.where(live, w * inner, 0.0), axis=1)


class _Option:
    """One candidate step: accepted mass and the matched residual's pieces."""

    def __init__(self, p, q, m):
        self.m = m
        d = np.maximum(p - m, 0.0)
        w = np.maximum(q - m, 0.0)
        one_q = sum_of_others(q)
        inv = _inverse_others(q, one_q)
        # c(y) = q(y) sum_{x != y} w(x) / (1 - q(x)) and the leftover supply
        # u(x) = w(x) / (1 - q(x)) sum_{y != x} q(y) (1 - theta(y)), both summed
        # without cancellation (exactness needs sum_x A(x, y) = theta c to round-off)
        c = q * sum_of_others(w * inv)
        pos = c > 0
        theta = np.where(pos, np.minimum(1.0, d / np.where(pos, c, 1.0)), 0.0)
        short = np.where(pos, np.maximum(c - d, 0.0) / np.where(pos, c, 1.0), 1.0)   # 1 - theta
        u = w * inv * sum_of_others(q * short)                           # leftover supply per rejection
        e = np.maximum(d - c, 0.0)                                       # leftover demand d - theta c
        # equalise the two totals (they agree up to round-off)
        su, se = u.sum(axis=1, keepdims=True), e.sum(axis=1, keepdims=True)
        u = np.where(su > 0, u * (np.where(se > 0, se, 0.0) / np.where(su > 0, su, 1.0)), u)
        self.q, self.w, self.d, self.theta, self.inv = q, w, d, theta, inv
        self.plan = LeftoverPlan(u, e)
        self.ok = self.plan.ok & (d.sum(axis=1) > _TINY)
        self.value = m.sum(axis=1) + np.minimum(d, c).sum(axis=1)

    def take(self, idx: np.ndarray) -> "_Option":
        """The option for rows ``idx`` (B',) of this batch (shares no state)."""
        o = object.__new__(_Option)
        o.m, o.q, o.w, o.d = self.m[idx], self.q[idx], self.w[idx], self.d[idx]
        o.theta, o.inv, o.ok, o.value = self.theta[idx], self.inv[idx], self.ok[idx], self.value[idx]
        o.plan = self.plan.take(idx)
        return o

    def residual(self, x: np.ndarray) -> np.ndarray:
        """``r^(x_b)`` (B, V) for the rejected tokens ``x`` (B,)."""
        B = x.size
        rows = np.arange(B)
        wx = self.w[rows, x]
        A = (wx * self.inv[rows, x])[:, None] * self.q * self.theta
        A[rows, x] = 0.0
        R = A + self.plan.rows(x)
        z = R.sum(axis=1, keepdims=True)
        return R / np.where(z > 0, z, 1.0)


class ResiSpecWOR(Verifier):
    """ResiSpec for without-replacement drafts (candidate-dependent residual).

    Obtain it with ``get_verifier("resispec", drafting="without_replacement")``.
    The rule, its exactness proof and its cost are in the module docstring
    (:mod:`resispec.verifiers.resispec_wor`).

    Parameters
    ----------
    scales : sequence of float >= 0, default (1,)
        Reserve scales ``g`` tried at every node besides plain ``rrs_wor``;
        ``g = 1`` is the fixed point (optimal for k = 2 in our checks),
        ``g = 0`` keeps greedy acceptance but still uses the matched
        residual.  On small cases with k = 3 the grid (0, 0.5, 1, 1.5) never
        chose anything but ``g = 1``, so the default tries only that (each
        extra scale costs one more fixed point and plan).
    solver : {"auto", "fused", "reference"}, default "auto"
        Who computes the non-last steps of :meth:`chain` / :meth:`verify`.
        ``fused``: the compiled kernel of :mod:`resispec._wor_fused`
        (Newton solves in cache, one thread per row; 2.2-2.9x ``rrs_wor`` at
        V = 151,936 in ``reports/bench_verify_wor.md``, against hundreds of
        times for the reference); rows that only the interval plan serves go
        to the reference.  ``reference``: the numpy code of this module
        (bisections, the interval plan, the plain-option comparison).
        ``auto``: ``fused`` when numba is installed and one scale is tried.
        Both are exact.  Their acceptances agree to round-off (1e-9 in the
        tests) except where a tolerance decision (Hall's condition, the plan's
        margins, shaped option vs plain) flips on the solvers' round-off: up
        to ~2e-7 was seen on float32-rounded peaked drafts.

    Raises
    ------
    ValueError
        Empty, negative or non-finite ``scales``; an unknown ``solver``.
    ImportError
        ``solver="fused"`` without numba.
    TypeError
        ``scales`` not a sequence of numbers, or unknown options.
    """

    name = "resispec"
    drafting = "without_replacement"
    host_only = True     # its steps are the compiled kernel of resispec._wor_fused (or the numpy reference)

    def __init__(self, scales=(1.0,), solver: str = "auto"):
        if isinstance(scales, (str, bytes)):
            raise TypeError(f"scales must be a sequence of floats >= 0, got {scales!r}")
        try:
            sc = tuple(float(s) for s in scales)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"scales must be a sequence of floats >= 0, got {scales!r}") from exc
        if not sc or any((not np.isfinite(s)) or s < 0 for s in sc):
            raise ValueError(f"scales must be a non-empty sequence of finite floats >= 0, got {scales!r}")
        self.scales = sc
        if solver not in _SOLVERS:
            raise ValueError(f"solver must be one of {sorted(_SOLVERS)}, got {solver!r}")
        self.solver = solver

    def options(self):
        return {"drafting": "without_replacement", "scales": self.scales, "solver": self.solver}

    def step(self, p_i: np.ndarray, q_i: np.ndarray):
        """Choose the step for a non-last candidate.

        Parameters
        ----------
        p_i, q_i : ndarray, shape (B, V), float64

        Returns
        -------
        m : ndarray (B, V)        accepted mass
        option : list of _Option  the shaped options
        pick : ndarray (B,) int64 index into ``option`` per row, -1 = plain rrs_wor
        value : ndarray (B,)      exact next-step value of the pick
        """
        B = p_i.shape[0]
        if B > 1 and np.array_equal(p_i, np.broadcast_to(p_i[:1], p_i.shape)) \
                and np.array_equal(q_i, np.broadcast_to(q_i[:1], q_i.shape)):
            # one node in every row (a Monte Carlo batch): one step (a general np.unique over (B, 2V)
            # rows cost seconds at V = 151,936)
            m, opts, pick, best = self.step(p_i[:1], q_i[:1])
            inverse = np.zeros(B, dtype=np.int64)
            return m[inverse], [o.take(inverse) for o in opts], pick[inverse], best[inverse]
        m0 = np.minimum(p_i, q_i)
        d0, w0 = np.maximum(p_i - m0, 0.0), np.maximum(q_i - m0, 0.0)
        best = m0.sum(axis=1) + _plain_next_value(d0, q_i, w0)
        pick = np.full(B, -1, dtype=np.int64)
        m = m0
        opts = []
        for j, g in enumerate(self.scales):
            o = _Option(p_i, q_i, wor_reserve_fixed_point(p_i, q_i, g))
            opts.append(o)
            better = o.ok & (o.value > best + 1e-15)
            if np.any(better):
                best = np.where(better, o.value, best)
                pick = np.where(better, j, pick)
                m = np.where(better[:, None], o.m, m)
        return m, opts, pick, best

    def _chain(self, p, q, c):
        return self._chain_decided(p, q, c, None)

    def _chain_decided(self, p, q, c, u):
        """The chain; with uniforms ``u`` (B, k + 1), each step only on the rows not yet accepted.

        A row accepted at step ``i`` (``u_i < a_i``) keeps ``a = 0`` after ``i`` and a zero residual (see
        :meth:`Verifier.chain_until_accept`): the later steps, each an O(V) fixed point and plan per row,
        are skipped.  Rows are run in blocks of about ``_BLOCK_BYTES`` (each row's decisions depend only on its
        own laws, candidates and uniforms).
        """
        B, k = c.shape
        rows_per = max(1, _BLOCK_BYTES // (8 * p.shape[1]))
        if B <= rows_per:
            return self._chain_block(p, q, c, u)
        a, r = np.empty((B, k)), np.empty(p.shape)
        for s in range(0, B, rows_per):
            e = min(B, s + rows_per)
            a[s:e], r[s:e] = self._chain_block(p[s:e], q[s:e], c[s:e], None if u is None else u[s:e])
        return a, r

    def _chain_block(self, p, q, c, u):
        """:meth:`_chain_decided` on one block of rows."""
        B, k = c.shape
        a = np.zeros((B, k))
        idx = np.arange(B)                                  # rows still undecided
        p_i, q_i = p, q / q.sum(axis=1, keepdims=True)      # the law the sampler draws
        cc = c
        fused = self._use_fused()
        if fused:
            from .._wor_fused import FALLBACK, wor_step_rows
        for i in range(k):
            rows = np.arange(idx.size)
            x = cc[:, i]
            if i == k - 1:
                m = np.minimum(p_i, q_i)
                qx = q_i[rows, x]
                a_i = np.clip(np.where(qx > 0, m[rows, x] / np.where(qx > 0, qx, 1.0), 0.0), 0.0, 1.0)
                nxt = reject_update(p_i, m)
            elif fused:
                a_i, nxt, status, _ = wor_step_rows(p_i, q_i, x, self.scales[0])
                fb = np.flatnonzero(status == FALLBACK)
                if fb.size:                      # no rank-one leftover plan: the reference (interval plan)
                    a_i[fb], nxt[fb] = self._reference_step(p_i[fb], q_i[fb], x[fb])
            else:
                a_i, nxt = self._reference_step(p_i, q_i, x)
            a[idx, i] = a_i
            keep = slice(None) if u is None else np.flatnonzero(~(u[idx, i] < a_i))
            if u is not None:
                idx, cc, x = idx[keep], cc[keep], x[keep]
            p_i = nxt[keep]
            if i + 1 < k:
                q_i = q_i[keep].copy() if u is not None else q_i.copy()
                q_i[np.arange(idx.size), x] = 0.0
                q_i = q_i / q_i.sum(axis=1, keepdims=True)
            if idx.size == 0:
                break
        if u is None:
            return a, p_i
        r = np.zeros((B, p.shape[1]))
        r[idx] = p_i
        return a, r

    def _use_fused(self) -> bool:
        if self.solver == "reference" or len(self.scales) != 1:
            return False
        from .._wor_fused import AVAILABLE

        if not AVAILABLE and self.solver == "fused":
            raise ImportError("solver='fused' needs numba (pip install numba); use solver='reference'")
        return AVAILABLE

    def step_plan(self, p_i: np.ndarray, q_i: np.ndarray, *, last: bool) -> StepPlan | None:
        """The step :meth:`verify` takes at one node, declared for :func:`exactness.certify_stepwise`.

        Parameters
        ----------
        p_i, q_i : ndarray, shape (V,), float64
            Current target and current (renormalised, without the rejected candidates) draft.
        last : bool
            The node's last candidate (greedy: ``m = min(p_i, q_i)``, plain residual).

        Returns
        -------
        StepPlan, or None where the step uses the interval leftover plan (not declared in
        O(V) form: the checker counts such a state as unverified).  The same solver as :meth:`verify`
        (the compiled kernel's :func:`resispec._wor_fused.wor_step_state`, or the numpy reference, which
        :meth:`verify` also runs on the rows the kernel hands back), so the same decisions.
        """
        p_i = np.asarray(p_i, dtype=np.float64)
        q_i = np.asarray(q_i, dtype=np.float64)
        if last:
            return StepPlan.plain_step(np.minimum(p_i, q_i))
        if self._use_fused():
            from .._wor_fused import OPTION, PLAIN, wor_step_state

            s = wor_step_state(p_i, q_i, self.scales[0])
            if s["status"] == PLAIN:
                return StepPlan.plain_step(s["m"])
            if s["status"] == OPTION:
                w = np.maximum(q_i - s["m"], 0.0)
                zb = sum_of_others(s["b"][None])[0]
                # rows of _emit: R(x, y) = wi(x) q theta(y) + f u(x) b(y) / sum_{z != x} b(z), y != x
                beta = np.where(zb > 0, s["f"] * s["u"] / np.where(zb > 0, zb, 1.0), 0.0)
                return self._declared(s["m"], w, s["qth"], s["b"], s["wi"], beta)
            # FALLBACK: verify runs the numpy reference on this row, so the reference step is declared below
        m, opts, pick, _ = self.step(p_i[None], q_i[None])
        if pick[0] < 0:
            return StepPlan.plain_step(m[0])
        o = opts[int(pick[0])]
        if not o.plan.rank_one[0]:
            return None
        b = o.plan.b[0]
        zb = sum_of_others(b[None])[0]
        # rows of _Option.residual: R(x, y) = w(x) inv(x) q theta(y) + u(x) b(y) / sum_{z != x} b(z), y != x
        beta = np.where(zb > 0, o.plan.u[0] / np.where(zb > 0, zb, 1.0), 0.0)
        return self._declared(m[0], o.w[0], o.q[0] * o.theta[0], b, o.w[0] * o.inv[0], beta)

    @staticmethod
    def _declared(m, w, g, h, alpha, beta) -> StepPlan:
        """A rank-two plan; rows the code leaves plain (never-rejected ``w = 0``, or an empty row) marked so.

        Only the ratio ``alpha(x) : beta(x)`` shapes a row: where one is infinite (``1 / (1 - q(x))`` overflows
        when ``1 - q(x)`` is subnormal) the row is that part alone, so it is declared ``(1, 0)`` or ``(0, 1)``.
        """
        a_inf, b_inf = np.isinf(alpha), np.isinf(beta)
        alpha = np.where(a_inf, 1.0, np.where(b_inf, 0.0, alpha))
        beta = np.where(b_inf, np.where(a_inf, beta, 1.0), np.where(a_inf, 0.0, beta))
        tot = alpha * sum_of_others(g[None])[0] + beta * sum_of_others(h[None])[0]
        plain = ~(w > 0) | ~(tot > 0) | ~np.isfinite(tot)
        return StepPlan(m=m, plain=plain, g=g, h=h, alpha=np.where(plain, 0.0, alpha), beta=np.where(plain, 0.0, beta))

    def _reference_step(self, p_i, q_i, x):
        """Accept probabilities (B,) and residuals (B, V) of one non-last step, numpy reference."""
        rows = np.arange(x.size)
        m, opts, pick, _ = self.step(p_i, q_i)
        qx = q_i[rows, x]
        a = np.clip(np.where(qx > 0, m[rows, x] / np.where(qx > 0, qx, 1.0), 0.0), 0.0, 1.0)
        nxt = reject_update(p_i, m)
        for j, o in enumerate(opts):
            # a candidate accepted surely (w(x_i) = 0) never reaches the residual: keep the plain one
            sel = (pick == j) & (o.w[rows, x] > 0)
            if np.any(sel):
                nxt[sel] = o.residual(x)[sel]
        return a, nxt
