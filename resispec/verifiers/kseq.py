"""SpecTr K-SEQ for iid drafts (Sun et al. 2023, arXiv 2310.15141).

Written once against the array namespace of its inputs (:mod:`resispec._xp`): ``backend="torch"`` runs these
lines on tensors, batched over nodes and tokens.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_node, check_k
from .._xp import device, namespace, native, residual_eps
from .base import Verifier
from .registry import register

#: Most steps of the bracketing solve for ``rho`` (it stops when every row's bracket is below its tolerance: about
#: 15 steps; plain bisection took 60, one (B, V) pass each; a bracket that did not halve in two steps is bisected, so
#: it halves at least every 3 steps and 200 always suffice).
_MAX_STEPS = 200


def kseq_rho(p, q, k: int):
    """The K-SEQ division factor ``rho`` and its ``beta``.

    ``beta(rho) = sum_x min(q, p / rho)``; ``rho`` is the smallest value in ``[1, k]`` (to ``1e-12 k``; float32:
    ``64 eps k``) with ``L(rho) = (1 - (1 - beta)^k) / beta <= rho``.  ``L`` rises with ``rho``, so
    ``f(rho) = L(rho) - rho`` changes sign once on ``[1, k]`` (``f(k) <= 0``); each row keeps a bracket
    ``[lo, hi]`` with ``f(lo) > 0 >= f(hi)`` and shrinks it by the Illinois variant of regula falsi (Dowell &
    Jarratt 1971, BIT 11: the secant through the bracket's ends, the retained end's value halved when the same
    end moves twice; a secant point closer than 1/1024 of the bracket to an end is moved that far inside, and a
    bracket that did not halve in two steps is bisected, so it halves at least every 3 steps; about 15 steps where
    bisection took 60).  The returned ``rho`` is ``hi``,
    so it always satisfies ``L(rho) <= rho``, which is what exactness needs.

    Parameters
    ----------
    p, q : array (numpy or torch), shape (B, V), float64 (float32 tensors too)
    k : int

    Returns
    -------
    rho, beta : arrays of ``p``'s library, shape (B,), ``p``'s dtype
    """
    xp = namespace(p, q)
    nat = native(xp)                         # numpy or torch: both spell divide / minimum with out=
    buf = xp.empty(p.shape, dtype=p.dtype, device=device(p))   # (B, V) C order, reused: no allocation a step

    def L(rho):
        nat.divide(p, rho[:, None], out=buf)                                 # p / rho
        beta = xp.sum(nat.minimum(buf, q, out=buf), axis=1)                  # beta(rho) = sum min(q, p / rho), (B,)
        safe = xp.where(beta > 0, beta, 1.0)
        val = xp.where(beta > 0, (1.0 - (1.0 - beta) ** k) / safe, float(k))   # L = (1 - (1 - beta)^k) / beta
        return val, beta

    B = p.shape[0]
    lo = xp.ones((B,), dtype=p.dtype, device=device(p))                     # f(lo) > 0 (rows where f(1) <= 0: done)
    hi = xp.full((B,), float(k), dtype=p.dtype, device=device(p))           # f(hi) <= 0: L <= k always
    val, _ = L(lo)
    done = val <= lo                                                         # rho = 1 already satisfies L(1) <= 1
    f_lo, f_hi = val - lo, L(hi)[0] - hi                                     # (B,) each
    side = xp.zeros((B,), dtype=p.dtype, device=device(p))                  # +1: lo moved last, -1: hi moved last
    tol = max(1e-12, 64.0 * float(xp.finfo(p.dtype).eps)) * float(k)        # rho to 1e-12 relative (float64)
    w_before = w_last = hi - lo                                             # bracket widths 2 and 1 steps ago
    for _ in range(_MAX_STEPS):
        open_ = (hi - lo > tol) & ~done
        if not bool(xp.any(open_)):
            break
        den = f_lo - f_hi
        sec = hi + f_hi * (hi - lo) / xp.where(den > 0, den, 1.0)           # root of the secant: hi - f_hi (hi - lo) / (f_hi - f_lo)
        mid, w = 0.5 * (lo + hi), hi - lo
        inner = xp.minimum(xp.maximum(sec, lo + w / 1024), hi - w / 1024)   # a secant point at an end: 1/1024 inside
        slow = w > 0.5 * w_before                                           # the bracket did not halve in 2 steps
        c = xp.where((den > 0) & ~slow, inner, mid)                         # then (and where f is flat): bisect
        w_before, w_last = w_last, w
        c = xp.where(open_, c, hi)
        fc = L(c)[0] - c
        down = open_ & (fc <= 0)                                             # c satisfies L(c) <= c: the new hi
        up = open_ & ~down
        f_lo = xp.where(down & (side < 0), 0.5 * f_lo, f_lo)                 # Illinois: hi moved twice, halve f(lo)
        f_hi = xp.where(up & (side > 0), 0.5 * f_hi, f_hi)                   # lo moved twice, halve f(hi)
        hi, f_hi = xp.where(down, c, hi), xp.where(down, fc, f_hi)
        lo, f_lo = xp.where(up, c, lo), xp.where(up, fc, f_lo)
        side = xp.where(down, -1.0, xp.where(up, 1.0, side))
    rho = xp.where(done, 1.0, hi)
    _, beta = L(rho)
    return rho, beta


@register("kseq")
class KSeq(Verifier):
    """SpecTr K-SEQ (Sun et al. 2023, arXiv 2310.15141), iid drafts.

    Accept ``x_i`` with probability ``min(1, p(x_i) / (rho q(x_i)))``; if all
    ``k`` are rejected emit from ``norm(p - min(q, p / rho) L)`` with
    ``L = (1 - (1 - beta)^k) / beta``.  Acceptance ``1 - (1 - beta)^k``.
    """

    drafting = "iid"

    def _chain(self, p, q, c):
        xp = namespace(p, q)
        B, k = c.shape
        rho, beta = kseq_rho(p, q, k)                                        # (B,), (B,)
        pc = xp.take_along_axis(p, c, axis=1)                                # p(x_i), (B, k)
        qc = xp.take_along_axis(q, c, axis=1)                                # q(x_i), (B, k)
        a = xp.clip(pc / (rho[:, None] * qc), None, 1.0)                     # min(1, p(x_i) / (rho q(x_i)))
        return a, _kseq_split(p, q, k, rho, beta)[1]

    def closed_form_split(self, p, q, k, drafting=None):
        """``M = min(q, p / rho) L``, ``R = (1 - beta)^k norm(p - M)`` (iid drafts; SpecTr, arXiv 2310.15141)."""
        k = check_k(k)
        if self._candidate_law(drafting) != "iid":
            return None
        p2, q2, _ = as_node(p, q)
        rho, beta = kseq_rho(p2, q2, k)
        M, r = _kseq_split(p2, q2, k, rho, beta)
        return M, ((1.0 - beta) ** k)[:, None] * r

    def step_acceptance(self, p, q, k):
        p2, q2, _ = as_node(p, q)
        k = check_k(k)
        _, beta = kseq_rho(p2, q2, k)
        return np.repeat(np.clip(beta, 0, 1)[:, None], k, axis=1)


def _kseq_split(p, q, k, rho, beta):
    """Accepted mass ``min(q, p / rho) L`` (B, V) and the residual law ``norm(p - that)`` (B, V)."""
    xp = namespace(p, q)
    L = xp.where(beta > 0, (1.0 - (1.0 - beta) ** k) / xp.where(beta > 0, beta, 1.0), 0.0)   # (B,)
    M = xp.minimum(q, p / rho[:, None]) * L[:, None]                        # M = min(q, p / rho) L, (B, V)
    resid = xp.clip(p - M, 0.0, None)                                       # (p - M)_+
    z = xp.sum(resid, axis=1, keepdims=True)                                # (B, 1)
    r = xp.where(z > residual_eps(xp, p.dtype), resid / xp.where(z > 0, z, 1.0), p)   # norm(p - M)
    return M, r
