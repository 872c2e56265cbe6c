"""Fused CPU solver of the look-ahead reserve: bucketed ratios instead of a sort over V.

The look-ahead reserve (``docs/RESISPEC.md`` s.4-5,
:mod:`resispec.verifiers.lookahead`) needs ``psi(L) = sum_x (L q - p)_+``
(non-decreasing, piecewise linear with knots at the ratios ``r = p / q``)
and its inverse inside an 80-step bisection on ``t``.  The reference sorts
the ``V`` ratios of every row (O(V log V), a stable argsort: about 18 ms a
row at V = 151,936) and runs the bisection as numpy calls over (B,) arrays.

Here one thread solves a row in compiled code:

1. One pass puts every token with ``q > 0`` (and a finite ratio) in a bucket
   of a fixed monotone grid on ``r`` (``SUB`` buckets per octave over
   ``[2^EMIN, 2^EMAX)``, one bucket below and one above; the bucket of ``r``
   is read off its binary exponent and leading mantissa bits, exact), summing
   ``q`` and ``p`` per bucket.  Prefix sums give ``psi`` exactly at every
   bucket edge ``e``: ``psi(e) = e Q(< e) - P(< e)``.
2. A counting-sort pass groups the tokens by bucket.
3. ``psi(L)``: the bucket of ``L`` (O(1)) plus the tokens of that bucket below
   ``L``; ``psi^-1(y)``: a binary search over the edge values, then over the
   knots inside one bucket.  A bucket is sorted the first time it is needed
   (lazily); the bisection touches a few dozen buckets of ~100 tokens.

The same bisection (``BISECT`` halvings, the same recursion and the same
``>= 1`` test) as the reference, so the answer equals the reference's up to
the round-off of sums taken in another order (bucket by bucket instead of
one cumulative sum): ``|Lambda_fused - Lambda_ref| <= 1e-12`` on the cases we
test, except on rows where ``L_0 - L_1 = 1`` holds on a whole interval of
``t`` (the root is not unique and either answer is exact; see
``tests/test_torch_lookahead.py::test_ill_conditioned_reserve_example``).

Cost per row: two passes over ``V`` plus O(BISECT k log V) look-ups plus the
lazily sorted buckets; optionally a third pass writes the accepted mass
``m = min(q, (p - gamma Lambda q)_+)``.  Threads as :mod:`resispec._reserve_fused`.

Source: the look-ahead reserve of ResiSpec (``docs/RESISPEC.md`` s.4-5),
reshaping the residual of recursive rejection sampling (SpecInfer, Miao et
al. 2024, arXiv 2305.09781).
"""

from __future__ import annotations

import math

import numpy as np

from ._reserve_fused import AVAILABLE, _njit, _rows_equal, _threads, run_chunks
from ._reserve_tol import LOOKAHEAD_TOL as TOL

__all__ = ["AVAILABLE", "BISECT", "SAT_TOL", "front_load_row", "lookahead_rows", "sub_buckets"]

#: Bisection halvings on ``t`` (as the reference :data:`resispec.verifiers.lookahead._BISECT`).
BISECT = 80
#: Binary exponents (``math.frexp``) of the bucket grid: ``r`` in ``[2^EMIN, 2^EMAX)`` is bucketed finely.
EMIN = -40
EMAX = 24


def sub_buckets(V: int) -> int:
    """Buckets per octave for a vocabulary of ``V`` tokens: about ``V / 1024`` (a power of 2, 1 to 1024)."""
    s = 1
    while s < 1024 and s * 1024 < V:
        s *= 2
    return s


@_njit(cache=True, nogil=True)
def _bucket(r, sub, nb):
    """Bucket of a ratio ``r >= 0`` (monotone non-decreasing in ``r``)."""
    if not (r >= math.ldexp(1.0, EMIN)):
        return 0
    if r >= math.ldexp(1.0, EMAX):
        return nb - 1
    mant, e = math.frexp(r)                       # r = mant 2^e, mant in [0.5, 1)
    return 1 + (e - EMIN - 1) * sub + int((2.0 * mant - 1.0) * sub)   # exact: 2 mant - 1 in [0, 1)


@_njit(cache=True, nogil=True)
def _edge(j, sub, nb):
    """Lower edge of bucket ``j`` (``+inf`` for ``j = nb``)."""
    if j <= 0:
        return 0.0
    if j >= nb:
        return np.inf
    if j == nb - 1:
        return math.ldexp(1.0, EMAX)
    e = (j - 1) // sub + EMIN + 1
    s = (j - 1) % sub
    return math.ldexp(1.0 + s / sub, e - 1)       # (1 + s / sub) 2^(e - 1), exact


#: Buckets with more tokens than this are gathered by a scan of the bucket ids (not the linked list).
_SCAN_GATHER = 1024
#: Half-width (in ulps) of a tie cluster: ratios equal up to round-off (``docs/verifiers.md``, tie rule).
_TIE_ULPS = 64.0


@_njit(cache=True, nogil=True)
def _ensure_sorted(j, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum):
    """Sort bucket ``j`` by ratio once, into the pool (bump-allocated): knots ``sr`` and within-bucket
    cumulative q / p ``scq`` / ``scp`` (inclusive); ``ws``/``iws`` rows: see :func:`_chunk`.

    A large bucket made mostly of one tie cluster (ratios within ``_TIE_ULPS`` ulps of one value, as the
    band that an earlier candidate levelled) is partitioned around it: the tokens below and above are
    sorted and the cluster becomes one knot at its largest ratio carrying the bucket's remaining mass
    (a change of psi below round-off: at most ``2 _TIE_ULPS eps L`` times the cluster's q-mass).
    """
    if iws[2, j] >= 0:
        return
    top = iws[3, 0]
    n = iws[1, j]
    if n > _SCAN_GATHER:                          # many tokens: a scan of the ids beats chasing the list
        c = 0
        for x in range(r_all.shape[0]):           # branch-free: write always, advance on a match
            iws[4, top + c] = x
            c += 1 if iws[0, x] == j else 0
        for i in range(n):
            ws[0, top + i] = r_all[iws[4, top + i]]
    else:
        c = 0
        x = head[j]
        while x >= 0:                             # the bucket's tokens (a linked list built by the pass)
            ws[0, top + c] = r_all[x]
            iws[4, top + c] = x
            c += 1
            x = nxt[x]
    vals = ws[0, top:top + n].copy()
    ids = iws[4, top:top + n].copy()
    if n > 1:
        best = 0
        piv = 0.0
        if n > 64:                                # look for a tie cluster holding most of the bucket
            for cand in (n // 2, n // 4, (3 * n) // 4):
                v0 = vals[cand]
                d = _TIE_ULPS * 2.220446049250313e-16 * v0
                cnt = 0
                for i in range(n):
                    cnt += 1 if abs(vals[i] - v0) <= d else 0
                if cnt > best:
                    best = cnt
                    piv = v0
                if best * 2 >= n:
                    break
        if best * 4 >= n:
            d = _TIE_ULPS * 2.220446049250313e-16 * piv
            nb_lo = 0
            nb_hi = 0
            cmax = -np.inf
            for i in range(n):
                if vals[i] < piv - d:
                    nb_lo += 1
                elif vals[i] > piv + d:
                    nb_hi += 1
                else:
                    cmax = max(cmax, vals[i])
            below = np.empty(nb_lo)
            below_id = np.empty(nb_lo, np.int64)
            above = np.empty(nb_hi)
            above_id = np.empty(nb_hi, np.int64)
            u = 0
            w = 0
            for i in range(n):
                if vals[i] < piv - d:
                    below[u] = vals[i]
                    below_id[u] = ids[i]
                    u += 1
                elif vals[i] > piv + d:
                    above[w] = vals[i]
                    above_id[w] = ids[i]
                    w += 1
            cq = 0.0
            cp = 0.0
            order = np.argsort(below, kind="mergesort")
            for i in range(nb_lo):
                x = below_id[order[i]]
                cq += q[x]
                cp += p[x]
                ws[0, top + i] = below[order[i]]
                ws[1, top + i] = cq
                ws[2, top + i] = cp
            oq = 0.0
            op = 0.0
            for i in range(nb_hi):
                oq += q[above_id[i]]
                op += p[above_id[i]]
            # the cluster: one knot at its largest ratio, carrying the bucket's mass minus the rest
            ws[0, top + nb_lo] = cmax
            cq = max(cq, (Qcum[j + 1] - Qcum[j]) - oq)
            cp = max(cp, (Pcum[j + 1] - Pcum[j]) - op)
            ws[1, top + nb_lo] = cq
            ws[2, top + nb_lo] = cp
            order = np.argsort(above, kind="mergesort")
            for i in range(nb_hi):
                x = above_id[order[i]]
                cq += q[x]
                cp += p[x]
                ws[0, top + nb_lo + 1 + i] = above[order[i]]
                ws[1, top + nb_lo + 1 + i] = cq
                ws[2, top + nb_lo + 1 + i] = cp
            n = nb_lo + 1 + nb_hi
            iws[1, j] = n
            iws[2, j] = top
            iws[3, 0] = top + n
            return
        order = np.argsort(vals, kind="mergesort")
        for i in range(n):
            ws[0, top + i] = vals[order[i]]
            iws[4, top + i] = ids[order[i]]
    cq = 0.0
    cp = 0.0
    for i in range(n):
        x = iws[4, top + i]
        cq += q[x]
        cp += p[x]
        ws[1, top + i] = cq
        ws[2, top + i] = cp
    iws[2, j] = top
    iws[3, 0] = top + n


@_njit(cache=True, nogil=True)
def _row_setup(p, q, sub, nb, edges, r_all, head, nxt, Qcum, Pcum, psiE, iws):
    """One pass over a row: ratios, buckets (linked lists), bucket sums; then prefix sums and psi at the edges."""
    V = p.shape[0]
    for j in range(nb + 1):
        head[j] = -1
        Qcum[j] = 0.0
        Pcum[j] = 0.0
        iws[1, j] = 0                             # tokens in the bucket
        iws[2, j] = -1                            # bucket not sorted yet
    iws[3, 0] = 0                                 # pool top
    for x in range(V):
        qx = q[x]
        r_all[x] = p[x] / qx if qx > 0.0 else np.inf
    bits = r_all.view(np.int64)
    s = 0
    while (1 << s) < sub:
        s += 1
    key_lo = (EMIN + 1023) << s                   # key of 2^EMIN: biased exponent, then s mantissa bits
    key_hi = (EMAX + 1023) << s
    inf_bits = 0x7FF0000000000000
    for x in range(V):
        bx = bits[x]
        if bx >= inf_bits:                        # q = 0, or p / tiny q overflowed: not a knot (the reference's rule)
            iws[0, x] = -1
            continue
        key = bx >> (52 - s)
        if key < key_lo:                          # (bx < 0: r = -0.0, bucket 0 with r = 0)
            b = 0
        elif key >= key_hi:
            b = nb - 1
        else:
            b = key - key_lo + 1                  # = _bucket(r): exponent and leading mantissa bits
        nxt[x] = head[b]
        head[b] = x
        iws[0, x] = b
        iws[1, b] += 1
        Qcum[b + 1] += q[x]                       # bucket sums, made cumulative below
        Pcum[b + 1] += p[x]
    run = -np.inf
    for j in range(nb):
        Qcum[j + 1] += Qcum[j]
        Pcum[j + 1] += Pcum[j]
        v = edges[j] * Qcum[j] - Pcum[j]           # psi(e_j) = e_j Q(< e_j) - P(< e_j)
        run = max(run, v)                         # monotone despite round-off
        psiE[j] = run
    psiE[nb] = np.inf


@_njit(cache=True, nogil=True)
def _psi(L, exact, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE):
    """``psi(L) = L Q(<= L) - P(<= L)`` for ``L >= 0``; ``exact=False``: interpolated between bucket edges."""
    j = _bucket(L, sub, nb)
    if not exact:
        if j == nb - 1:
            return psiE[j] + Qcum[nb] * (L - edges[j])
        return psiE[j] + (psiE[j + 1] - psiE[j]) * ((L - edges[j]) / (edges[j + 1] - edges[j]))
    if iws[1, j] == 0:
        return L * Qcum[j] - Pcum[j]              # empty bucket
    _ensure_sorted(j, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum)
    a = iws[2, j]
    b = a + iws[1, j]
    lo, hi = a, b                                 # count knots <= L in the bucket
    while lo < hi:
        mid = (lo + hi) // 2
        if ws[0, mid] <= L:
            lo = mid + 1
        else:
            hi = mid
    Q = Qcum[j]
    P = Pcum[j]
    if lo > a:
        Q += ws[1, lo - 1]
        P += ws[2, lo - 1]
    return L * Q - P


@_njit(cache=True, nogil=True)
def _psi_inv(y, exact, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE):
    """Smallest ``L >= 0`` with ``psi(L) >= y``; ``exact=False``: of the interpolated ``psi``."""
    if not (y > 0.0):
        return 0.0
    lo, hi = 0, nb                                # last edge with psi(e_j) < y (psiE[0] = 0 < y)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if psiE[mid] < y:
            lo = mid
        else:
            hi = mid
    j = lo
    base_L = edges[j]
    base_psi = psiE[j]
    if not exact:
        if j == nb - 1:
            slope = Qcum[nb]
        else:
            slope = (psiE[j + 1] - psiE[j]) / (edges[j + 1] - edges[j])
        return base_L + (y - base_psi) / slope if slope > 0.0 else base_L
    slope = Qcum[j]
    if iws[1, j] == 0:                            # empty bucket: one linear piece
        L = base_L + (y - base_psi) / slope if slope > 0.0 else edges[j + 1]
        return min(L, edges[j + 1])
    _ensure_sorted(j, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum)
    a = iws[2, j]
    b = a + iws[1, j]
    u, w = a, b                                   # knots of the bucket with psi(knot) < y: a prefix
    while u < w:
        mid = (u + w) // 2
        if ws[0, mid] * (Qcum[j] + ws[1, mid]) - (Pcum[j] + ws[2, mid]) < y:
            u = mid + 1
        else:
            w = mid
    if u > a:
        i = u - 1
        base_L = ws[0, i]
        slope = Qcum[j] + ws[1, i]
        base_psi = max(base_psi, base_L * slope - (Pcum[j] + ws[2, i]))
    nxt_L = ws[0, u] if u < b else edges[j + 1]   # end of the piece: psi(nxt_L) >= y
    if slope > 0.0:                               # psi linear on the piece: psi(L) = base_psi + slope (L - base_L)
        return min(base_L + (y - base_psi) / slope, nxt_L)
    return nxt_L                                  # flat piece: psi reaches y only at its end (round-off put it there)


@_njit(cache=True, nogil=True)
def _run(t, n, exact, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE):
    """The backward recursion ``psi(L_{i-1}) = psi(L_i) + L_i - L_{i+1}`` from ``L_n = 0``, ``L_{n-1} = t``;
    returns ``R_1 = L_0 - L_1``."""
    for i in range(n + 1):
        L[i] = 0.0
    L[n - 1] = t
    psi_next = _psi(t, exact, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE)
    for i in range(n - 1, 0, -1):
        target = psi_next + L[i] - L[i + 1]
        inv = _psi_inv(target, exact, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE)
        L[i - 1] = max(inv, L[i])
        psi_next = _psi(L[i - 1], exact, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE)
    return L[0] - L[1]


@_njit(cache=True, nogil=True)
def _solve_row(n, tol, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE):
    """The smallest ``t`` in [0, 1] with ``R_1(t) >= 1 - tol`` (bisection); ``L`` holds the schedule at it.

    Phase A bisects the interpolated ``psi`` (no bucket sorted) to a guess;
    the exact ``R_1`` is then checked at both ends of a bracket around it
    (widened until it holds, at worst [0, 1]), and the exact bisection runs
    inside, so only the buckets next to the answer get sorted.
    """
    lo = 0.0
    hi = 1.0
    for _ in range(48):                           # phase A: the interpolated psi
        mid = 0.5 * (lo + hi)
        if _run(mid, n, False, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE) >= 1.0 - tol:
            hi = mid
        else:
            lo = mid
    guess = hi
    w = max(guess * 2.0 ** -8, 2.0 ** -60)
    hi = min(1.0, guess + w)
    lo = max(0.0, guess - w)
    wh = w
    while hi < 1.0 and _run(hi, n, True, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum,
                            psiE) < 1.0 - tol:
        lo = hi                                   # R_1(hi) short of 1: the answer lies above
        wh *= 16.0
        hi = min(1.0, hi + wh)
    wl = w
    while lo > 0.0 and _run(lo, n, True, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum,
                            psiE) >= 1.0 - tol:
        hi = lo                                   # R_1(lo) already reaches 1: the answer lies below
        wl *= 16.0
        lo = max(0.0, lo - wl)
    for _ in range(BISECT):                       # phase B: exact, inside [lo, hi]
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _run(mid, n, True, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE) >= 1.0 - tol:
            hi = mid
        else:
            lo = mid
    _run(hi, n, True, L, sub, nb, edges, ws, iws, head, nxt, r_all, q, p, Qcum, Pcum, psiE)


#: A row is *saturated* when the target mass the draft cannot reach is at most this and the schedule's
#: acceptance ``phi(L_0) = sum_x min(p, q L_0)`` is at least ``1 -`` this (:func:`front_load_row`).
SAT_TOL = 1e-12


@_njit(cache=True, nogil=True)
def front_load_row(p, q, L, n):
    """Front-load the schedule ``L`` (n + 1,) of a saturated row in place; True when it changed.

    Where the look-ahead accepts with probability 1 (``phi(L_0) = 1``: every ratio ``p/q <= L_0`` and no
    target mass off the draft's support) every schedule with ``L_0 >= rho_max = max p/q`` is optimal, and
    the bisection's smallest-``t`` tie rule picks one that reserves the most for the later candidates,
    so which candidate is accepted then flips under round-off.  This picks the one that reserves the
    least at every step: ``L_1 = max(0, rho_max - 1)`` (the smallest with ``phi(L_0) = 1``), then
    ``L_{i+1} = psi(L_i) = sum_x (L_i q - p)_+`` (the recursion when ``psi(L_0) = L_0 - 1 = L_1``) and
    ``L_n = 0``.  It lies below the solver's schedule entry by entry (``psi`` is non-decreasing), so
    ``psi^(n-1)(L_1) = 0`` and the schedule is consistent; same acceptance (1), same law.
    """
    V = p.shape[0]
    off = 0.0
    on = 0.0
    phi0 = 0.0
    rmax = 0.0
    for x in range(V):
        if q[x] > 0.0:
            on += p[x]
            phi0 += min(p[x], q[x] * L[0])
            if p[x] > rmax * q[x]:
                rmax = p[x] / q[x]
        else:
            off += p[x]
    l1 = max(rmax - 1.0, 0.0)
    # relative tests: rows rounded to float32 sum to 1 only to ~1e-7, and phi(L_0) = sum p exactly when saturated
    if off > SAT_TOL * (on + off) or phi0 < on * (1.0 - SAT_TOL) or not l1 < L[1]:
        return False
    L[1] = l1
    L[0] = 1.0 + l1
    for i in range(1, n - 1):                     # L_{i+1} = psi(L_i) = sum_x (L_i q - p)_+
        acc = 0.0
        li = L[i]
        for x in range(V):
            acc += max(li * q[x] - p[x], 0.0)
        L[i + 1] = acc
    L[n] = 0.0
    return True


@_njit(cache=True, nogil=True)
def _chunk(p, q, n, sub, gamma, tol, sched, m, want_m, a0, a1):
    B, V = p.shape
    nb = (EMAX - EMIN) * sub + 2
    edges = np.empty(nb + 1)
    for j in range(nb + 1):
        edges[j] = _edge(j, sub, nb)
    r_all = np.empty(V)
    nxt = np.empty(V, np.int32)
    head = np.empty(nb + 1, np.int32)
    Qcum = np.empty(nb + 1)
    Pcum = np.empty(nb + 1)
    psiE = np.empty(nb + 1)
    ws = np.empty((3, V))                         # pool of sorted buckets: knots, cumulative q, cumulative p
    iws = np.empty((5, max(V + 1, nb + 1)), np.int32)  # 0: bucket of each token, 1: bucket length, 2: pool start
    # (-1: unsorted), 3[0]: pool top, 4: pool token ids
    L = np.empty(n + 1)
    for row in range(a0, a1):
        pr = p[row]
        qr = q[row]
        if n <= 1:
            for i in range(n + 1):
                sched[row, i] = 0.0
            sched[row, 0] = 1.0
        else:
            _row_setup(pr, qr, sub, nb, edges, r_all, head, nxt, Qcum, Pcum, psiE, iws)
            _solve_row(n, tol, L, sub, nb, edges, ws, iws, head, nxt, r_all, qr, pr, Qcum, Pcum, psiE)
            front_load_row(pr, qr, L, n)
            for i in range(n + 1):
                sched[row, i] = L[i]
        if want_m:
            lam = gamma * sched[row, 1] if n > 1 else 0.0
            mr = m[row]
            for x in range(V):
                mr[x] = min(qr[x], max(pr[x] - lam * qr[x], 0.0))   # m = min(q, (p - gamma Lambda q)_+)


def lookahead_rows(p: np.ndarray, q: np.ndarray, k_left: int, *, gamma: float | None = None,
                   out: np.ndarray | None = None):
    """Look-ahead schedule ``L_0 .. L_n`` of every row (and, with ``gamma``, the accepted mass).

    Parameters
    ----------
    p, q : ndarray, shape (B, V), float64, C-contiguous
        Residual target and draft (laws: rows sum to 1; not re-checked here).
    k_left : int >= 1
        Candidates still to verify, the current one included (``n``).
    gamma : float >= 0, optional
        When given, also return ``m = min(q, (p - gamma L_1 q)_+)`` (B, V).
    out : ndarray, shape (B, V), float64, C-contiguous, optional
        Buffer for ``m`` (with ``gamma`` only); must not share memory with ``p`` or ``q``.

    Returns
    -------
    sched : ndarray, shape (B, k_left + 1), float64
        ``L_0 .. L_n`` with ``L_0 - L_1 = 1`` (``L_1`` is the reserve ``Lambda``).
    m : ndarray, shape (B, V), float64 (only with ``gamma``)

    Raises
    ------
    ValueError
        Shapes, dtype or contiguity not as above, ``k_left < 1`` or a bad ``gamma``.
    ImportError
        numba is not installed.
    """
    if not AVAILABLE:
        raise ImportError("the fused look-ahead solver needs numba (pip install numba)")
    if isinstance(k_left, bool) or not isinstance(k_left, (int, np.integer)) or k_left < 1:
        raise ValueError(f"k_left must be an integer >= 1 (candidates left), got {k_left!r}")
    if not (isinstance(p, np.ndarray) and isinstance(q, np.ndarray)) or p.ndim != 2 or p.shape != q.shape:
        raise ValueError(f"p and q must be numpy arrays of one (B, V) shape, got {np.shape(p)} and {np.shape(q)}")
    if p.dtype != np.float64 or q.dtype != np.float64 or not (p.flags.c_contiguous and q.flags.c_contiguous):
        raise ValueError("p and q must be C-contiguous float64 (np.ascontiguousarray(x, dtype=np.float64))")
    want_m = gamma is not None
    if want_m and (isinstance(gamma, bool) or not np.isfinite(gamma) or gamma < 0):
        raise ValueError(f"gamma must be a finite number >= 0, got {gamma!r}")
    B, V = p.shape
    if out is not None:
        if not want_m:
            raise ValueError("out= needs gamma= (it is the buffer of the accepted mass)")
        if not isinstance(out, np.ndarray) or out.shape != p.shape or out.dtype != np.float64 \
                or not out.flags.c_contiguous or not out.flags.writeable \
                or np.shares_memory(out, p) or np.shares_memory(out, q):
            raise ValueError("out must be a writable C-contiguous float64 array of p's shape, sharing no memory "
                             "with p or q")
    n = int(k_left)
    g = float(gamma) if want_m else 0.0
    m = (np.empty(p.shape) if out is None else out) if want_m else np.empty((B, 0))
    if B > 1 and _rows_equal(p, q):               # identical nodes (a tiled Monte Carlo batch): one solve
        sched = np.zeros((1, n + 1))
        _chunk(p[:1], q[:1], n, sub_buckets(V), g, TOL, sched, m[:1], want_m, 0, 1)
        if want_m:
            m[1:] = m[:1]
        sched = np.repeat(sched, B, axis=0)
        return (sched, m) if want_m else sched
    sched = np.zeros((B, n + 1))
    sub = sub_buckets(V)
    run_chunks(_chunk, (p, q, n, sub, g, TOL, sched, m, want_m), B, _threads(), serial=B * V < 100_000)
    return (sched, m) if want_m else sched
