"""Compiled balance of a declared step (:func:`exactness.stepwise.check_plan`): three passes over V, no temporaries.

The same quantities as the numpy reference ``exactness.stepwise._balance_reference`` (which
``tests/test_stepwise.py`` checks it against to 1e-12): the first value that is not finite or negative, the
largest ``m - q_i``, an empty shaped row, and the L1 error of ``m + sum_x w(x) r^(x) = p_i``.  Sums of the
others (``sum_{y != x} v(y)``) are taken without cancellation as in
:func:`resispec.verifiers.base.sum_of_others`: the entry holding the row's maximum gets the sum of the rest.
"""

from __future__ import annotations

import numpy as np

from ._fast_kernels import AVAILABLE, _njit

#: Result codes of :func:`balance`.
OK, BAD_VALUE, ABOVE_DRAFT, EMPTY_ROW, UNBALANCED, ROW_MASS = 0, 1, 2, 3, 4, 5


@_njit(cache=True, nogil=True)
def _others(v, s, top, rest, x):  # pragma: no cover - compiled
    """``sum_{y != x} v(y)`` from the total ``s``, the argmax ``top`` and the sum ``rest`` without it."""
    if x == top:
        return rest
    o = s - v[x]
    return o if o > 0.0 else 0.0


@_njit(cache=True, nogil=True)
def _sum_top_rest(v):  # pragma: no cover - compiled
    """``(sum v, argmax v, sum of v without its argmax)`` in one pass."""
    s = 0.0
    top = 0
    rest = 0.0
    for x in range(v.size):
        s += v[x]
        if x > 0 and v[x] > v[top]:
            rest += v[top]
            top = x
        elif x > 0:
            rest += v[x]
    return s, top, rest


@_njit(cache=True, nogil=True)
def balance(p, q, m, plain, g, h, al, be, tol, eps):  # pragma: no cover - compiled
    """Check one declared step; all arrays (V,) (``plain`` bool, the rest float64).

    Returns ``(code, which, idx, defect, a, b)``: ``code`` one of ``OK`` / ``BAD_VALUE`` (array ``which`` of
    ``m, g, h, alpha, beta`` at ``idx``) / ``ABOVE_DRAFT`` (``m(idx) = a > q_i(idx) = b``, ``defect`` the excess) /
    ``EMPTY_ROW`` (row ``idx``) / ``ROW_MASS`` (row ``idx`` formed as ``(alpha/tot) g + (beta/tot) h`` has mass
    ``a``, not 1: its scale is lost to round-off) / ``UNBALANCED`` (``defect`` the L1 error, largest at ``idx``: ``a`` vs ``p_i = b``).
    On ``OK`` ``defect`` is the L1 error.
    """
    V = p.size
    arrs = (m, g, h, al, be)
    for j in range(5):
        a = arrs[j]
        for x in range(V):
            if not (a[x] >= 0.0 and a[x] < np.inf):
                return BAD_VALUE, j, x, np.inf, a[x], 0.0
    over, yo = -np.inf, 0
    for x in range(V):
        if m[x] - q[x] > over:
            over, yo = m[x] - q[x], x
    if over > tol:
        return ABOVE_DRAFT, 0, yo, over, m[yo], q[yo]
    sg, tg, rg = _sum_top_rest(g)
    sh, th, rh = _sum_top_rest(h)
    A = np.zeros(V)
    B = np.zeros(V)
    wp = 0.0
    D = 0.0
    for x in range(V):
        w = q[x] - m[x]
        w = w if w > 0.0 else 0.0                                              # w = (q_i - m)_+
        d = p[x] - m[x]
        D += d if d > 0.0 else 0.0                                             # D = sum (p_i - m)_+
        if plain[x]:
            wp += w
        elif w > 0.0:
            og = _others(g, sg, tg, rg, x)
            oh = _others(h, sh, th, rh, x)
            tot = al[x] * og + be[x] * oh                                      # row mass off x
            if not tot > 0.0:
                return EMPTY_ROW, 0, x, np.inf, 0.0, 0.0
            mass = (al[x] / tot) * og + (be[x] / tot) * oh                     # the row as the chain forms it: 1
            if not abs(mass - 1.0) <= tol:
                return ROW_MASS, 0, x, abs(mass - 1.0), mass, 0.0
            A[x] = w * al[x] / tot                                             # w(x) alpha(x) / tot(x)
            B[x] = w * be[x] / tot                                             # w(x) beta(x) / tot(x)
    sa, ta, ra = _sum_top_rest(A)
    sb, tb, rb = _sum_top_rest(B)
    err = 0.0
    worst, yw, cw = -1.0, 0, 0.0
    for y in range(V):
        d = p[y] - m[y]
        rp = (d if d > 0.0 else 0.0) / D if D > eps else p[y]                 # r_plain = norm((p_i - m)_+)
        col = g[y] * _others(A, sa, ta, ra, y) + h[y] * _others(B, sb, tb, rb, y) + wp * rp   # sum_x w(x) r^(x)(y)
        e = abs(m[y] + col - p[y])                                             # |m + sum_x w r^(x) - p_i|
        err += e
        if e > worst:
            worst, yw, cw = e, y, m[y] + col
    if not err <= tol:
        return UNBALANCED, 0, yw, err, cw, p[yw]
    return OK, 0, 0, err, 0.0, 0.0
