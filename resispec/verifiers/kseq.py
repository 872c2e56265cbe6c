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

_BISECT_STEPS = 60


def kseq_rho(p, q, k: int):
    """The K-SEQ division factor ``rho`` and its ``beta``.

    ``beta(rho) = sum_x min(q, p / rho)``; ``rho`` is the smallest value in
    ``[1, k]`` (to bisection precision, 60 steps) with
    ``L(rho) = (1 - (1 - beta)^k) / beta <= rho``.  The returned ``rho``
    always satisfies that inequality, which is what exactness needs.

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
    buf = xp.empty(p.shape, dtype=p.dtype, device=device(p))   # (B, V) C order, reused: no allocation a bisection step

    def L(rho):
        nat.divide(p, rho[:, None], out=buf)                                 # p / rho
        beta = xp.sum(nat.minimum(buf, q, out=buf), axis=1)                  # beta(rho) = sum min(q, p / rho), (B,)
        safe = xp.where(beta > 0, beta, 1.0)
        val = xp.where(beta > 0, (1.0 - (1.0 - beta) ** k) / safe, float(k))   # L = (1 - (1 - beta)^k) / beta
        return val, beta

    B = p.shape[0]
    lo = xp.ones((B,), dtype=p.dtype, device=device(p))
    hi = xp.full((B,), float(k), dtype=p.dtype, device=device(p))
    val, _ = L(lo)
    done = val <= lo
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        v, _ = L(mid)
        ok = v <= mid
        hi = xp.where(ok, mid, hi)
        lo = xp.where(ok, lo, mid)
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
