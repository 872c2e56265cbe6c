"""Compiled draw loops of the fast paths (:mod:`exactness.fast_paths`): one pass a draw, no (n, k) temporaries.

Each kernel runs, row by row, the same float64 operations as the numpy reference in
:mod:`exactness.fast_paths` (``_TargetOnlyPath.walk`` / ``draw``, ``_RRSWORPath.candidates`` / ``walk`` /
``draw``), stopping at the first accepted candidate (later steps do not change an accepted draw).  The paths
use them when numba is present (a declared dependency, loaded on first use) and
``tests/test_fast_paths.py`` checks them bit for bit against ``verify``.
"""

from __future__ import annotations

import numpy as np

try:
    import numba

    _njit = numba.njit
    AVAILABLE = True
except ImportError:  # pragma: no cover - numba is a declared dependency
    AVAILABLE = False

    def _njit(*args, **kwargs):
        return lambda f: f

from resispec._reserve_tol import RESIDUAL_EPS as _EPS  # noqa: E402  (the residual threshold of every rule)


@_njit(cache=True, nogil=True)
def _gsearch(cdf, guide, inv_h, t):  # pragma: no cover - compiled
    """``searchsorted(cdf, t, "right")`` by the guide table (:mod:`exactness._search`)."""
    V = cdf.size
    if not t >= cdf[0]:
        return 0
    m = guide.size - 1
    bf = t * inv_h
    b = m if bf >= m else int(bf)
    b = b - 1 if b > 0 else 0
    j = guide[b]
    while j < V and cdf[j] <= t:
        j += 1
    return j


@_njit(cache=True, nogil=True)
def _advance(cdf, guide, inv_h, j, t):  # pragma: no cover - compiled
    """``searchsorted(cdf, t, "right")`` given that it is ``>= j``: a short scan from ``j``, else the guide."""
    V = cdf.size
    for _ in range(8):
        if j >= V or cdf[j] > t:
            return j
        j += 1
    return _gsearch(cdf, guide, inv_h, t)


@_njit(cache=True, nogil=True)
def _sorted_insert(buf, nb, x):  # pragma: no cover - compiled
    """Insert ``x`` into ``buf[:nb]`` (ascending); returns the new length."""
    j = nb
    while j > 0 and buf[j - 1] > x:
        buf[j] = buf[j - 1]
        j -= 1
    buf[j] = x
    return nb + 1


@_njit(cache=True, nogil=True)
def _inverse_without(cdf, guide, inv_h, vals, t, removed, nrem):  # pragma: no cover - compiled
    """``_inverse_cdf_without`` for one row: ``removed[:nrem]`` ascending."""
    V = cdf.size
    j = _gsearch(cdf, guide, inv_h, t)
    for c in range(nrem):
        s = removed[c]
        if s <= j:
            t += vals[s]
            j = _advance(cdf, guide, inv_h, j, t)   # t grew: the answer cannot move left
    return min(j, V - 1)


@_njit(cache=True, nogil=True)
def _last_kept(last_pos, removed, nrem):  # pragma: no cover - compiled
    for c in range(last_pos.size):
        y = last_pos[c]
        gone = False
        for j in range(nrem):
            if removed[j] == y:
                gone = True
        if not gone:
            return y
    return last_pos[0]


@_njit(cache=True, nogil=True)
def target_only_draw(p, cdf, guide, inv_h, cand, uv, total, total_wo_top, top, last_pos,
                     tokens, accepted):  # pragma: no cover - compiled
    n, k = cand.shape
    removed = np.empty(k, dtype=np.int64)
    srt = np.empty(k, dtype=np.int64)
    for r in range(n):
        nrem = 0
        ssum = 0.0
        ssum_wo = 0.0
        has_top = False
        scale = 1.0
        acc = -1
        for i in range(k):
            x = cand[r, i]
            rep = False
            for j in range(nrem):
                if removed[j] == x:
                    rep = True
            px = p[x]
            a = 0.0 if rep else px / scale
            a = min(max(a, 0.0), 1.0)
            if uv[r, i] < a:
                acc = i
                break
            left = (total_wo_top - ssum_wo) if has_top else (total - ssum)
            is_top = x == top
            new_left = (total_wo_top - ssum_wo) if (is_top and not has_top) else left - px
            if (not rep) and new_left / scale > _EPS:
                removed[nrem] = x
                nrem += 1
                ssum = ssum + px
                if not is_top:
                    ssum_wo = ssum_wo + px
                else:
                    has_top = True
                scale = (total_wo_top - ssum_wo) if has_top else (total - ssum)
        if acc >= 0:
            tokens[r] = cand[r, acc]
            accepted[r] = acc
            continue
        ns = 0
        for j in range(nrem):
            ns = _sorted_insert(srt, ns, removed[j])
        left = (total_wo_top - ssum_wo) if has_top else (total - ssum)
        y = _inverse_without(cdf, guide, inv_h, p, uv[r, k] * left, srt, ns)
        tokens[r] = min(y, _last_kept(last_pos, srt, ns))
        accepted[r] = -1


@_njit(cache=True, nogil=True)
def wor_candidates(q, cdf, guide, inv_h, last_q, uc, out):  # pragma: no cover - compiled
    n, k = uc.shape
    srt = np.empty(k, dtype=np.int64)
    tot = cdf[cdf.size - 1]
    for r in range(n):
        gone = 0.0
        ns = 0
        for i in range(k):
            x = _inverse_without(cdf, guide, inv_h, q, uc[r, i] * (tot - gone), srt, ns)
            x = min(x, _last_kept(last_q, srt, ns))
            out[r, i] = x
            if i + 1 < k:
                ns = _sorted_insert(srt, ns, x)
                gone += q[x]


@_njit(cache=True, nogil=True)
def _F(r_sorted, suf_p, suf_q, t):  # pragma: no cover - compiled
    c = np.searchsorted(r_sorted, t, side="right")
    return suf_p[c] - t * suf_q[c]


@_njit(cache=True, nogil=True)
def _segment(keys, cp, cq, lvl, s, g, cnt, t, span):  # pragma: no cover - compiled
    row = keys[lvl]
    pos = np.searchsorted(row, g * span + cnt + 1, side="left")
    end = (g + 1) * s
    return (cp[lvl, end] - cp[lvl, pos]) - t * (cq[lvl, end] - cq[lvl, pos])


@_njit(cache=True, nogil=True)
def _tree_inverse(keys, cp, cq, Vpad, V, span, cnt, target, t):  # pragma: no cover - compiled
    lo = 0
    rest = target
    s = Vpad // 2
    lvl = 0
    while s >= 1:
        left = _segment(keys, cp, cq, lvl, s, lo // s, cnt, t, span)
        if rest >= left:
            rest = rest - left
            lo += s
        s //= 2
        lvl += 1
    return min(lo, V - 1)


@_njit(cache=True, nogil=True)
def _tree_prefix(keys, cp, cq, Vpad, span, cnt, j, t):  # pragma: no cover - compiled
    hi = j + 1
    lo = 0
    out = 0.0
    s = Vpad // 2
    lvl = 0
    while s >= 1:
        if lo + s <= hi:
            out += _segment(keys, cp, cq, lvl, s, lo // s, cnt, t, span)
            lo += s
        s //= 2
        lvl += 1
    return out


@_njit(cache=True, nogil=True)
def rrs_wor_draw(p, q0, qtot, r_sorted, suf_p, suf_q, keys, cp, cq, Vpad, span, cand, uv,
                 tokens, accepted):  # pragma: no cover - compiled
    """Given candidates ``cand`` (n, k)."""
    _rrs_wor_rows(p, q0, qtot, r_sorted, suf_p, suf_q, keys, cp, cq, Vpad, span, cand, uv, tokens, accepted,
                  False, q0, q0, np.zeros(1, dtype=np.int64), 0.0, np.zeros(1, dtype=np.int64), np.zeros((1, 1)))


@_njit(cache=True, nogil=True)
def rrs_wor_draw_lazy(p, q0, qtot, r_sorted, suf_p, suf_q, keys, cp, cq, Vpad, span, uc, uv, tokens, accepted,
                      qraw, cdf, guide, inv_h, last_q):  # pragma: no cover - compiled
    """Candidates drawn from ``uc`` (n, k) as :func:`wor_candidates` does, each only when its step is reached."""
    _rrs_wor_rows(p, q0, qtot, r_sorted, suf_p, suf_q, keys, cp, cq, Vpad, span, np.zeros((uc.shape[0], uc.shape[1]),
                  dtype=np.int64), uv, tokens, accepted, True, qraw, cdf, guide, inv_h, last_q, uc)


@_njit(cache=True, nogil=True)
def _rrs_wor_rows(p, q0, qtot, r_sorted, suf_p, suf_q, keys, cp, cq, Vpad, span, cand, uv, tokens, accepted,
                  lazy, qraw, cdf, guide, inv_h, last_q, uc):  # pragma: no cover - compiled
    n, k = cand.shape
    V = p.size
    srt = np.empty(k, dtype=np.int64)
    tot_q = cdf[cdf.size - 1]
    fid = np.empty(k, dtype=np.int64)
    fT = np.empty(k)
    ext = np.empty(k)
    order = np.empty(k, dtype=np.int64)
    for r in range(n):
        t = 0.0
        Z = 1.0
        D = 1.0
        qgone = 0.0
        acc = -1
        ns = 0
        gone = 0.0
        for i in range(k):
            if lazy:  # successive sampling, exactly wor_candidates' step i
                x = _inverse_without(cdf, guide, inv_h, qraw, uc[r, i] * (tot_q - gone), srt, ns)
                x = min(x, _last_kept(last_q, srt, ns))
                cand[r, i] = x
                if i + 1 < k:
                    ns = _sorted_insert(srt, ns, x)
                    gone += qraw[x]
            else:
                x = cand[r, i]
            Px = max(p[x] - t * q0[x], 0.0)
            a = Px * D / (Z * q0[x]) if q0[x] > 0 else 0.0
            a = min(max(a, 0.0), 1.0)
            if uv[r, i] < a:
                acc = i
                break
            t_new = t + Z / D
            own = 0.0
            cur = 0.0
            for j in range(i):
                y = fid[j]
                own += max(p[y] - fT[j] * q0[y], 0.0)
                cur += max(p[y] - t_new * q0[y], 0.0)
            Z_new = _F(r_sorted, suf_p, suf_q, t_new) - cur + own
            if Z_new / Z > _EPS:
                t = t_new
                Z = Z_new
            fid[i] = x
            fT[i] = t
            if i + 1 < k:
                qgone += q0[x]
                D = qtot - qgone
        if acc >= 0:
            tokens[r] = cand[r, acc]
            accepted[r] = acc
            continue
        # residual: frozen tokens in ascending id order with their extra mass
        for j in range(k):
            order[j] = j
        for a_ in range(1, k):
            b_ = a_
            while b_ > 0 and fid[order[b_ - 1]] > fid[order[b_]]:
                tmp = order[b_ - 1]
                order[b_ - 1] = order[b_]
                order[b_] = tmp
                b_ -= 1
        for j in range(k):
            y = fid[j]
            ext[j] = max(p[y] - fT[j] * q0[y], 0.0) - max(p[y] - t * q0[y], 0.0)
        target = uv[r, k] * Z
        cnt = np.searchsorted(r_sorted, t, side="right")
        Dm = 0.0
        jj = _tree_inverse(keys, cp, cq, Vpad, V, span, cnt, target, t)
        for c in range(k):
            o = order[c]
            s_ = fid[o]
            if not (ext[o] > 0) or jj < s_:
                continue
            g = _tree_prefix(keys, cp, cq, Vpad, span, cnt, s_, t)
            if g + Dm + ext[o] > target:
                jj = s_
                break
            Dm += ext[o]
            jj = _tree_inverse(keys, cp, cq, Vpad, V, span, cnt, target - Dm, t)
        tokens[r] = jj
        accepted[r] = -1
