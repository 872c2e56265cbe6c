"""Fused CPU kernel of one step of ResiSpec for without-replacement drafts.

The rule is :mod:`resispec.verifiers.resispec_wor` (``docs/RESISPEC.md`` s.2
and s.4): at candidate ``i`` (not the last) the accepted mass is the reserve
fixed point ``m = min(q, (p - g c(m))_+)`` and, on rejecting ``x``, the chain
continues from the matched residual ``r^(x) = (w(x) q^(x) theta + Z(x, .)) /
w(x)`` with ``Z`` the rank-one zero-diagonal leftover plan.  The numpy
reference spends 61 full-array passes on a bisection for ``Omega``, 64 on a
bisection for the plan's scalar ``S``, an argsort for the interval plan and
another for the plain option's value, each pass over a (B, V) array in main
memory: 367x ``rrs_wor`` in CPU time at V = 151,936 (B = 8, k = 4).

Here one thread handles a row, which stays in cache, in compiled passes:

1. ``Omega``: safeguarded Newton on the non-decreasing piecewise-linear
   ``G(Omega) = Omega - sum_x (q - m(Omega))(x) / (1 - q(x))`` with an exact
   finish (no token changed state since the last iterate: ``G`` is linear in
   between, so the Newton point is its root) -- typically 3-8 passes;
2. the option's pieces (``c``, ``theta``, the leftover supplies ``u`` and
   demands ``e``, the next-step value) in two passes;
3. the rank-one plan's ``S`` (``sum_y b_y(S) = 1``, ``b_y`` the smaller root
   of ``S b^2 - (S - u + e) b + e = 0``): ``sum_y b_y(S)`` is convex and
   decreasing in ``S``, so Newton from the left of the root never overshoots
   (a bisection step first, where the slope is infinite at ``S_lo``);
   the column margins are then checked to ``_MARGIN_TOL`` as in the
   reference;
4. the rejected candidate's residual row (two passes) and the accept
   probability ``m(x) / q(x)``.

Rows that violate Hall's condition ``u(y) + e(y) <= U`` have no zero-diagonal
plan at all: the reference's option is not ok there and the step is plain
``rrs_wor`` (status ``PLAIN``).  Rows where the reference would use the
interval plan (no rank-one plan with leftovers above ``_TINY``, Hall's
condition holding) come back with status ``FALLBACK`` and the caller runs the
numpy reference on them.  Where the leftovers are all below
``_TINY`` (1e-13) the plan part is dropped (the reference routes those
~1e-17 masses through the interval plan; the output law moves by at most the
leftover mass).  The reference keeps plain ``rrs_wor`` as an option chosen by
the exact next-step value; the kernel keeps the shaped option whenever its
plan exists, as the reference chose on every one of 2,160 checked nodes
(``tests/test_wor_fused.py`` compares the acceptance of both).

Exactness does not depend on how accurately ``Omega`` or ``S`` are solved:
``m`` is any value in ``[0, min(p, q)]`` and the residual is built from that
``m`` with column sums checked (section 2's lemma), so only the acceptance
moves with the solver's accuracy.

Sources: ResiSpec (``docs/RESISPEC.md``); recursive rejection sampling
without replacement (RSD, Jeon et al. 2024, arXiv 2402.14160; SpecInfer,
arXiv 2305.09781); threads as :mod:`resispec._reserve_fused`.
"""

from __future__ import annotations

import math

import numpy as np

from ._reserve_fused import AVAILABLE, MAX_PASSES as _MAX_PASSES, _njit, _rows_equal, _threads, run_chunks
from ._reserve_tol import OMEGA_TOL

__all__ = ["AVAILABLE", "FALLBACK", "OPTION", "PLAIN", "wor_step_rows", "wor_step_state"]

#: Row status: the shaped option was used / plain ``rrs_wor`` step / the caller must run the reference.
OPTION, PLAIN, FALLBACK = 0, 1, 2

from ._reserve_tol import WOR_MARGIN_TOL as _MARGIN_TOL  # noqa: E402  (one value for the kernel and the reference)
from ._reserve_tol import WOR_TINY as _TINY  # noqa: E402
from ._reserve_tol import RESIDUAL_EPS as _RESIDUAL_EPS  # noqa: E402  (the one value)
_FM = {"contract", "nsz"}     # sums in source order (reassoc made the last bits depend on memory placement); NaN / inf kept; no reciprocal
# multiplies ("arcp"): 1 / tot overflows for a subnormal row total where x / tot does not


@_njit(cache=True, nogil=True, fastmath=_FM)
def _sum_skip(v, skip):
    """``sum_{j != skip} v(j)`` summed directly (no cancellation)."""
    t = 0.0
    for j in range(skip):
        t += v[j]
    for j in range(skip + 1, v.shape[0]):
        t += v[j]
    return t


@_njit(cache=True, nogil=True)
def _top_rest(v, tot):
    """``(argmax v, sum of the others)``: ``tot - max`` loses at most a bit when the maximum is at most
    half of ``tot``; otherwise the others are summed directly."""
    top = _argmax(v)
    return top, _rest(v, tot, top)


@_njit(cache=True, nogil=True)
def _rest(v, tot, top):
    """``sum_{j != top} v(j)`` for ``top = argmax v`` found by the caller's own pass (:func:`_top_rest`)."""
    if v[top] <= 0.5 * tot:
        return max(tot - v[top], 0.0)
    return _sum_skip(v, top)


@_njit(cache=True, nogil=True)
def _argmax(v):
    top = 0
    best = v[0]
    for j in range(1, v.shape[0]):
        if v[j] > best:
            best = v[j]
            top = j
    return top


@_njit(cache=True, nogil=True, fastmath=_FM)
def _setup(p, q, g, inv, A, Bc, cap):
    """Per-token constants of the fixed point; returns ``(hi = sum q / (1 - q), msum0, D0, W0, tmin)``.

    ``msum0 = sum min(p, q)``, ``D0 = sum (p - q)_+``, ``W0`` the plain step's rejection mass on tokens with
    some other token left and ``tmin`` the smallest ``1 - q(x)`` among those (for :func:`_plain_value`).

    ``m(Omega) = clip(A - Bc Omega, 0, cap)`` with ``A = ((1-q) p + g q^2) / (1 - q + g q)``,
    ``Bc = g q (1 - q) / (1 - q + g q)``, ``cap = min(p, q)``; ``inv = 1 / (1 - q)`` (0 off the draft).
    """
    V = p.shape[0]
    qtot = 0.0
    top = 0
    best = -np.inf
    for j in range(V):
        qtot += q[j]
        if q[j] > best:                             # argmax q (the first of equal maxima), in the same pass
            best = q[j]
            top = j
    qrest = _rest(q, qtot, top)                     # 1 - q(top) without cancellation
    hi = 0.0
    msum0 = 0.0
    D0 = 0.0
    W0 = 0.0
    tmin = 2.0
    for j in range(V):
        qj = q[j]
        pj = p[j]
        oq = max(qtot - qj, 0.0)
        if j == top:
            oq = qrest
        den = oq + g * qj
        ok = qj > 0.0 and oq > 0.0 and den > 0.0
        iv = 1.0 / oq if ok else 0.0
        c = min(pj, qj)
        inv[j] = iv
        cap[j] = c
        A[j] = (oq * pj + g * qj * qj) / den if ok else c
        Bc[j] = g * qj * oq / den if ok else 0.0
        hi += qj * iv
        # the plain rrs_wor step's totals (for the choice): sum min(p, q), sum (p - q)_+, the rejection
        # mass on tokens with something else left, and the smallest 1 - q(x) among them
        msum0 += c
        D0 += pj - c
        w = qj - c
        if w > 0.0 and 0.0 < iv < np.inf:             # iv = inf: 1 - q(x) subnormal, nothing else left
            W0 += w
            tmin = min(tmin, oq)
    return hi, msum0, D0, W0, tmin


@_njit(cache=True, nogil=True, fastmath=_FM)
def _omega_pass(q, inv, A, Bc, cap, x):
    """``G(x)`` and the slope of ``G`` at ``x``."""
    s = 0.0
    act = 0.0
    for j in range(q.shape[0]):
        y = A[j] - Bc[j] * x
        c = cap[j]
        m = min(max(y, 0.0), c)
        s += inv[j] * (q[j] - m)
        act += inv[j] * Bc[j] if (y > 0.0) & (y < c) else 0.0   # d(q - m)/dOmega / (1 - q), active tokens
    return x - s, 1.0 - act


@_njit(cache=True, nogil=True)
def _solve_omega(q, inv, A, Bc, cap, hi):
    """Smallest ``Omega`` in ``[0, hi]`` with ``G(Omega) >= -OMEGA_TOL``; returns ``(Omega, passes)``.

    ``G(0) <= 0 <= G(hi)``, non-decreasing and piecewise linear: bracketed Newton on
    ``h = G + OMEGA_TOL`` (once on the root's linear piece the next step lands on the root), stopped
    at ``|h| <= 1e-14 (1 + hi)``.  ``G`` can be flat (zero up to round-off) on an interval where the
    next candidate is saturated; the smallest root front-loads acceptance, and the tolerance makes
    that choice immune to the round-off of the sums (the reference bisects to the same point).
    """
    lo = 0.0
    x = 0.0
    passes = 0
    scale = 1.0 + hi
    while True:
        G, slope = _omega_pass(q, inv, A, Bc, cap, x)
        h = G + OMEGA_TOL
        passes += 1
        if h >= 0.0 and x <= 0.0:
            return 0.0, passes
        if abs(h) <= 1e-14 * scale:
            return x, passes
        if h >= 0.0:
            hi = x
        else:
            lo = x
        if hi - lo <= 1e-15 * scale or passes >= _MAX_PASSES:
            return hi, passes
        nx = x - h / slope if slope > 0.0 else -1.0
        x = nx if lo < nx < hi else 0.5 * (lo + hi)


@_njit(cache=True, nogil=True, fastmath=_FM)
def _roots(uc, ec, n, S, b, want):
    """``sum_y b_y(S)`` over the ``n`` compacted tokens and its derivative in ``S`` (``-inf`` at a double root)."""
    tot = 0.0
    der = 0.0
    inf = False
    for j in range(n):
        ej = ec[j]
        a1 = S - uc[j] + ej
        disc = max(a1 * a1 - 4.0 * S * ej, 0.0)
        sq = math.sqrt(disc)
        den = a1 + sq
        bj = 2.0 * ej / den if den > 0.0 else 0.0
        if want:
            b[j] = bj
        tot += bj
        if sq > 0.0:
            der -= bj * (1.0 - bj) / sq
        elif bj > 0.0:
            inf = True
    return tot, (-np.inf if inf else der)


@_njit(cache=True, nogil=True)
def _solve_rank_one(uc, ec, n, W, umax, bc):
    """Rank-one zero-diagonal plan on the tokens with leftover demand; returns ``(ok, passes)``.

    Rows ``u(x) norm(b without x)``; ``b = 0`` where ``e = 0`` (the smaller root is 0 there), so only
    the ``n`` compacted tokens (``ec > 0``) enter the sums.  ``f(S) = sum_y b_y(S)`` is convex and
    decreasing, about ``W / S`` away from ``S_lo``: Newton on ``1 / f - 1`` (nearly linear) from
    ``S = W``, kept inside the bracket (bisection where a step would leave it or the slope is infinite).
    """
    s_lo = 0.0                                         # only tokens with demand need real roots
    for j in range(n):
        t = math.sqrt(ec[j]) + math.sqrt(uc[j])
        s_lo = max(s_lo, t * t)
    s_hi = max(2.0 * W + umax, s_lo)
    f_lo, d_lo = _roots(uc, ec, n, s_lo, bc, False)
    passes = 1
    if f_lo < 1.0:
        return False, passes                           # no rank-one plan (reference: ok = False)
    # f(S) ~ W / S away from S_lo, so Newton runs on phi = 1 / f - 1 (nearly linear), bracketed
    lo, hi = s_lo, s_hi
    x = min(max(W, s_lo), s_hi)
    best = lo
    last = np.nan                                      # the point whose b is in bc (each pass stores it)
    flast = 0.0
    while passes < _MAX_PASSES:
        fx, dx = _roots(uc, ec, n, x, bc, True)
        passes += 1
        last, flast = x, fx
        if fx >= 1.0:
            lo = x
        else:
            hi = x
        if abs(fx - 1.0) <= 4e-16:
            best = x
            break
        best = lo
        if hi - lo <= 4e-16 * hi:
            break
        nx = x + fx * (1.0 - fx) / dx if (dx < 0.0 and dx > -np.inf) else 0.5 * (lo + hi)
        x = nx if lo < nx < hi else 0.5 * (lo + hi)
    lo = best
    if lo == last:                                     # b at the solution is already stored: no pass more
        z = flast
    else:
        z, _ = _roots(uc, ec, n, lo, bc, True)
        passes += 1
    if not (z > 0.0):
        return False, passes
    for j in range(n):
        bc[j] /= z
        # norm(b without x) needs sum_{y != x} b > 0 on the rows that route mass (u(x) > 0); a token
        # with b ~ 1 and no supply is the one-demand-token plan R(x, y*) = u(x) (the reference takes
        # the interval plan there, the same plan)
        if bc[j] >= 1.0 - 1e-12 and uc[j] > 0.0:
            return False, passes
    return True, passes


@_njit(cache=True, nogil=True, fastmath=_FM)
def _margins_ok(uc, ec, bc, n, u_nc, u_nc_max, u_nc_top, tc):
    """Column sums ``b(y) sum_{x != y} u(x) / sum_{z != x} b(z)`` equal ``e`` to ``_MARGIN_TOL``.

    ``u_nc``: total supply of the tokens outside the compacted list (where ``b = 0``, so their
    ``sum_{z != x} b(z) = 1``), ``u_nc_max`` the largest of them (index ``u_nc_top``, -1 if none).
    Sums at the largest term exclude it directly, as :func:`resispec.verifiers.base.sum_of_others`.
    """
    bsum = 0.0
    for j in range(n):
        bsum += bc[j]
    btop, brest = _top_rest(bc[:n], bsum)
    tsum = 0.0
    for j in range(n):
        zj = brest if j == btop else max(bsum - bc[j], 0.0)
        tc[j] = uc[j] / max(zj, _TINY) if uc[j] > 0.0 else 0.0
        tsum += tc[j]
    ttop = _argmax(tc[:n])
    total = tsum + u_nc
    if u_nc_max > tc[ttop]:                            # the largest term is outside the list: nobody in it
        for j in range(n):
            if abs(bc[j] * max(total - tc[j], 0.0) - ec[j]) > _MARGIN_TOL:
                return False
        return True
    trest = (_sum_skip(tc[:n], ttop) if tc[ttop] > 0.5 * tsum else max(tsum - tc[ttop], 0.0)) + u_nc
    for j in range(n):
        oth = trest if j == ttop else max(total - tc[j], 0.0)
        if abs(bc[j] * oth - ec[j]) > _MARGIN_TOL:
            return False
    return True


@_njit(cache=True, nogil=True)
def _plain_value(p, q, cap, inv, msum0, D, W, tmin, exact):
    """Exact next-step value of the plain ``rrs_wor`` step, or (``exact=False``) an upper bound on it.

    ``sum min(p, q) + sum_x w(x) sum_{y != x} min(r(y), q(y) / t_x)`` with ``w = q - min(p, q)``,
    ``r = norm(p - min(p, q))``, ``t_x = 1 - q(x)`` (as :func:`resispec.verifiers.resispec_wor._plain_next_value`).
    With ``Psi(t) = sum_y min(r(y) t, q(y))`` the inner sum is ``(Psi(t_x) - min(r(x) t_x, q(x))) / t_x``;
    ``Psi(t) / t`` is non-increasing, so ``sum_x w(x) Psi(t_min) / t_min`` bounds it in one pass.  The
    exact value sorts the ratios ``q / r`` (O(V log V)).  ``msum0``, ``D``, ``W``, ``tmin``: from :func:`_setup`.
    """
    V = p.shape[0]
    if not (D > _TINY) or W <= 0.0:
        return msum0
    if not exact:
        psi = 0.0
        for j in range(V):
            psi += min(max(p[j] - cap[j], 0.0) / D * tmin, q[j])
        return msum0 + W * psi / tmin
    kap = np.empty(V)                                 # the rare exact path allocates its own scratch
    rr = np.empty(V)
    tmpi = np.empty(V, dtype=np.int64)
    n = 0
    for j in range(V):
        r = max(p[j] - cap[j], 0.0) / D
        if r > 0.0:
            kap[n] = q[j] / r
            rr[n] = r
            tmpi[n] = j
            n += 1
    order = np.argsort(kap[:n])
    ks = np.empty(n)
    qhead = np.zeros(n + 1)
    rtail = np.zeros(n + 1)
    for i in range(n):
        ks[i] = kap[order[i]]
        qhead[i + 1] = qhead[i] + q[tmpi[order[i]]]
    for i in range(n - 1, -1, -1):
        rtail[i] = rtail[i + 1] + rr[order[i]]
    tot = 0.0
    for j in range(V):
        w = max(q[j] - cap[j], 0.0)
        if not (w > 0.0 and 0.0 < inv[j] < np.inf):
            continue
        t = 1.0 / inv[j]
        i = np.searchsorted(ks, t, side="right")     # knots with q / r <= t are capped by q
        psi = qhead[i] + t * rtail[i]
        rx = max(p[j] - cap[j], 0.0) / D
        tot += w * (psi - min(rx * t, q[j])) / t
    return msum0 + tot


@_njit(cache=True, nogil=True)
def _option_beats_plain(p, q, cap, inv, value, plain):
    """The reference's choice: the shaped option only if its next-step value exceeds plain ``rrs_wor``'s
    by more than 1e-15 (the bound settles it in one pass on most rows; else the exact value, a sort).
    ``plain``: ``(msum0, D0, W0, tmin)`` from :func:`_setup`."""
    msum0, D, W, tmin = plain
    if value > _plain_value(p, q, cap, inv, msum0, D, W, tmin, False) + 1e-15:
        return True
    return value > _plain_value(p, q, cap, inv, msum0, D, W, tmin, True) + 1e-15


@_njit(cache=True, nogil=True, fastmath=_FM)
def _node(p, q, g, inv, A, Bc, cap, m, wi, qth, b, tmp, idx, uc, ec, bc, tc):
    """Everything the step needs at one node; returns ``(status, value, passes, f, bsum)``.

    Fills ``m`` (accepted mass), ``wi = (q - m) / (1 - q)``, ``qth = q theta``, ``Bc`` = the leftover
    supplies ``u / f`` (``f`` the equalising factor; ``u = f Bc``) and ``b`` (rank-one plan, dense, total
    ``bsum``).
    """
    V = p.shape[0]
    hi, msum0, D0, W0, tmin = _setup(p, q, g, inv, A, Bc, cap)
    plain = (msum0, D0, W0, tmin)
    om, passes = _solve_omega(q, inv, A, Bc, cap, hi)
    dsum = 0.0
    msum = 0.0
    wtot = 0.0
    wtop = 0
    wbest = -np.inf
    for j in range(V):
        mj = min(max(A[j] - Bc[j] * om, 0.0), cap[j])
        m[j] = mj
        msum += mj
        dsum += max(p[j] - mj, 0.0)
        w = max(q[j] - mj, 0.0) * inv[j]
        wi[j] = w
        wtot += w
        if w > wbest:                                  # argmax wi in the same pass
            wbest = w
            wtop = j
    if not (dsum > _TINY):
        for j in range(V):                            # nothing owed: the plain rrs_wor step
            m[j] = cap[j]
        return PLAIN, 0.0, passes, 0.0, 0.0
    wrest = _rest(wi, wtot, wtop)
    vsum = 0.0
    stot = 0.0
    stop = 0
    sbest = -np.inf
    for j in range(V):
        oth = wrest if j == wtop else max(wtot - wi[j], 0.0)
        c = q[j] * oth                                 # c(y) = q(y) sum_{x != y} w(x) / (1 - q(x))
        dj = max(p[j] - m[j], 0.0)
        pos = c > 0.0
        cc = c if pos else 1.0
        th = min(1.0, dj / cc) if pos else 0.0
        sh = q[j] * (max(c - dj, 0.0) / cc) if pos else q[j]   # q (1 - theta)
        qth[j] = q[j] * th
        A[j] = max(dj - c, 0.0)                        # leftover demand e = d - theta c (A reused)
        tmp[j] = sh
        stot += sh
        vsum += min(dj, c)
        if sh > sbest:                                 # argmax tmp in the same pass
            sbest = sh
            stop = j
    srest = _rest(tmp, stot, stop)
    su = 0.0
    se = 0.0
    n = 0
    u_nc = 0.0
    u_nc_max = -1.0
    u_nc_top = -1
    umax = 0.0
    for j in range(V):
        oth = srest if j == stop else max(stot - tmp[j], 0.0)
        uj = wi[j] * oth                               # u(x) = w(x)/(1-q(x)) sum_{y != x} q(y)(1-theta(y))
        Bc[j] = uj                                     # (Bc reused for u, before the equalising factor)
        su += uj
        ej = A[j]
        se += ej
        umax = max(umax, uj)
        if ej > 0.0:
            idx[n] = j
            uc[n] = uj
            ec[n] = ej
            n += 1
        else:
            u_nc += uj
            if uj > u_nc_max:
                u_nc_max = uj
                u_nc_top = j
    value = msum + vsum
    for j in range(V):
        b[j] = 0.0
    if not (se > _TINY):
        if not _option_beats_plain(p, q, cap, inv, value, plain):
            for j in range(V):
                m[j] = cap[j]
            return PLAIN, 0.0, passes, 0.0, 0.0
        return OPTION, value, passes, 0.0, 0.0         # leftovers below _TINY: no plan part
    f = se / su if su > 0.0 else 0.0                  # equalise the two totals (round-off): u <- f u
    for k in range(n):
        uc[k] *= f
    u_nc *= f
    u_nc_max *= f
    umax *= f
    # Hall's condition u(y) + e(y) <= U (U = se): without it no zero-diagonal plan exists and the
    # reference's option is not ok, so the step is plain rrs_wor (as the reference, no sort needed)
    hall = max(u_nc_max, 0.0)
    for k in range(n):
        hall = max(hall, uc[k] + ec[k])
    if hall > se * (1.0 + 1e-12) + 1e-15:
        for j in range(V):
            m[j] = cap[j]
        return PLAIN, 0.0, passes, 0.0, 0.0
    ok, pr = _solve_rank_one(uc, ec, n, se, umax, bc)
    passes += pr
    if not ok or not _margins_ok(uc, ec, bc, n, u_nc, u_nc_max, u_nc_top, tc):
        return FALLBACK, value, passes, f, 0.0
    if not _option_beats_plain(p, q, cap, inv, value, plain):
        for j in range(V):
            m[j] = cap[j]
        return PLAIN, 0.0, passes, 0.0, 0.0
    bsum = 0.0
    for k in range(n):
        b[idx[k]] = bc[k]
        bsum += bc[k]
    return OPTION, value, passes, f, bsum


@_njit(cache=True, nogil=True, fastmath=_FM)
def _emit(p, q, x, status, m, wi, qth, u0, f, b, bsum, out):
    """Accept probability of candidate ``x`` and the residual after rejecting it (into ``out``)."""
    V = p.shape[0]
    qx = q[x]
    a = min(max(m[x] / qx, 0.0), 1.0) if qx > 0.0 else 0.0
    wx = max(qx - m[x], 0.0)
    if status == OPTION and wx > 0.0:
        zb = _sum_skip(b, x) if b[x] > 0.5 * bsum else bsum - b[x]
        cb = f * u0[x] / zb if zb > 0.0 else 0.0
        cw = wi[x]
        tot = 0.0
        # R(x, y) = w(x) q^(x)(y) theta(y) + Z(x, y), y != x.  The diagonal term is never formed: with a
        # peaked draft it can be ~1e15 times the row (w(x) / (1 - q(x))), and subtracting it loses the row.
        for j in range(x):
            r = cw * qth[j] + cb * b[j]
            out[j] = r
            tot += r
        out[x] = 0.0
        for j in range(x + 1, V):
            r = cw * qth[j] + cb * b[j]
            out[j] = r
            tot += r
        if tot > 0.0:
            for j in range(V):
                out[j] /= tot
            return a
    tot = 0.0
    for j in range(V):                                   # plain residual norm((p - m)_+)
        r = max(p[j] - m[j], 0.0)
        out[j] = r
        tot += r
    if tot > _RESIDUAL_EPS:
        for j in range(V):
            out[j] /= tot
    else:
        for j in range(V):
            out[j] = p[j]
    return a


@_njit(cache=True, nogil=True)
def _chunk(P, Q, X, g, shared, A_out, R, status, passes, lo, hi):
    V = P.shape[1]
    inv = np.empty(V)
    A = np.empty(V)
    Bc = np.empty(V)
    cap = np.empty(V)
    m = np.empty(V)
    wi = np.empty(V)
    qth = np.empty(V)
    b = np.empty(V)
    tmp = np.empty(V)
    idx = np.empty(V, dtype=np.int64)
    uc = np.empty(V)
    ec = np.empty(V)
    bc = np.empty(V)
    tc = np.empty(V)
    st = -1
    f = 0.0
    bsum = 0.0
    for r in range(lo, hi):
        n = 0 if shared else r              # shared: P, Q hold the one node as row 0
        if r == lo or not shared:
            st, _, ps, f, bsum = _node(P[n], Q[n], g, inv, A, Bc, cap, m, wi, qth, b, tmp, idx, uc, ec, bc, tc)
            passes[r] = ps
        else:
            passes[r] = 0
        status[r] = st
        if st == FALLBACK:
            continue
        A_out[r] = _emit(P[n], Q[n], X[r], st, m, wi, qth, Bc, f, b, bsum, R[r])


def _c_writable(a: np.ndarray) -> np.ndarray:
    """``a`` as a writable C-contiguous float64 array (copied unless it already is one)."""
    if a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, dtype=np.float64, order="C")


def _need_numba() -> None:
    if not AVAILABLE:
        raise ImportError("the fused without-replacement kernel needs numba (pip install numba)")


def wor_step_rows(P: np.ndarray, Q: np.ndarray, X: np.ndarray, g: float = 1.0):
    """One non-last step of the without-replacement ResiSpec rule for every row.

    Parameters
    ----------
    P, Q : ndarray, shape (B, V), float64, any layout
        Current residual target and current (renormalised) draft of each row (copied to C order when
        strided, so the decisions do not depend on the layout).
    X : ndarray, shape (B,), int64
        The candidate drafted at this step in each row.
    g : float >= 0
        Reserve scale of the fixed point (1 = the rule's default).

    Returns
    -------
    a : ndarray (B,) float64
        ``m(x) / q(x)``, the probability of accepting ``X``.
    R : ndarray (B, V) float64
        The residual to continue from if ``X`` is rejected.
    status : ndarray (B,) int64
        ``OPTION`` / ``PLAIN``, or ``FALLBACK`` where ``a`` and ``R`` are not
        written and the caller must run the numpy reference.
    passes : ndarray (B,) int64
        Passes over the row spent by the two solvers (0 for a row that reused
        the previous identical row's node).

    Raises
    ------
    ImportError
        numba is not installed.
    """
    _need_numba()
    B, V = P.shape
    A = np.zeros(B)
    R = np.empty((B, V))
    status = np.empty(B, dtype=np.int64)
    passes = np.zeros(B, dtype=np.int64)
    X = np.ascontiguousarray(X, dtype=np.int64)
    # every row reaches the kernel as one array type (C order, writable), so a broadcast (stride-0,
    # read-only) batch, a copy of it and the torch twin's tensors run the same compiled code and decide the
    # same at ties (u == a); its sums run in source order (no reassoc), so neither memory placement nor
    # alignment moves their last bits (tests/test_wor_fused.py)
    if B > 1 and _rows_equal(P, Q):
        _chunk(_c_writable(P[:1]), _c_writable(Q[:1]), X, float(g), True, A, R, status, passes, 0, B)
        return A, R, status, passes
    P, Q = _c_writable(P), _c_writable(Q)
    run_chunks(_chunk, (P, Q, X, float(g), False, A, R, status, passes), B, _threads(), serial=B * V < 100_000)
    return A, R, status, passes


def wor_step_state(p: np.ndarray, q: np.ndarray, g: float = 1.0) -> dict:
    """The step :func:`wor_step_rows` takes at one node, as data (what :meth:`ResiSpecWOR.step_plan` declares).

    Parameters
    ----------
    p, q : ndarray, shape (V,), float64
        Current residual target and current (renormalised) draft of one node.
    g : float >= 0
        Reserve scale (1 = the rule's default).

    Returns
    -------
    dict with ``status`` (``OPTION`` / ``PLAIN`` / ``FALLBACK``) and the (V,) float64 arrays the kernel
    emits its rows from: ``m`` (accepted mass), ``wi`` (``(q - m) / (1 - q)``), ``qth`` (``q theta``),
    ``u`` (leftover supplies before the equalising factor), ``b`` (rank-one leftover plan), and the scalars
    ``f`` (equalising factor) and ``bsum``.  On ``OPTION`` the row after rejecting ``x`` is, for ``y != x``,
    ``wi(x) qth(y) + f u(x) b(y) / sum_{z != x} b(z)``, normalised (:func:`_emit`); on ``PLAIN`` it is
    ``norm((p - m)_+)``.  The same compiled :func:`_node` as :func:`wor_step_rows` on the same C-ordered
    writable arrays, so the same decisions.

    Raises
    ------
    ImportError
        numba is not installed.
    """
    _need_numba()
    p = np.array(p, dtype=np.float64, order="C")
    q = np.array(q, dtype=np.float64, order="C")
    V = p.shape[0]
    inv, A, Bc, cap, m, wi, qth, b, tmp, uc, ec, bc, tc = (np.empty(V) for _ in range(13))
    idx = np.empty(V, dtype=np.int64)
    st, _, _, f, bsum = _node(p, q, float(g), inv, A, Bc, cap, m, wi, qth, b, tmp, idx, uc, ec, bc, tc)
    return {"status": int(st), "m": m, "wi": wi, "qth": qth, "u": Bc, "b": b, "f": float(f), "bsum": float(bsum)}
