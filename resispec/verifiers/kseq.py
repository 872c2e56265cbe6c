"""SpecTr K-SEQ for iid drafts (Sun et al. 2023, arXiv 2310.15141)."""

from __future__ import annotations

import numpy as np

from .._validation import as_node, check_k
from .base import Verifier
from .registry import register

_BISECT_STEPS = 60


def kseq_rho(p: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The K-SEQ division factor ``rho`` and its ``beta``.

    ``beta(rho) = sum_x min(q, p / rho)``; ``rho`` is the smallest value in
    ``[1, k]`` (to bisection precision, 60 steps) with
    ``L(rho) = (1 - (1 - beta)^k) / beta <= rho``.  The returned ``rho``
    always satisfies that inequality, which is what exactness needs.

    Parameters
    ----------
    p, q : ndarray, shape (B, V), float64
    k : int

    Returns
    -------
    rho, beta : ndarray, shape (B,), float64
    """

    def L(rho):
        beta = np.minimum(q, p / rho[:, None]).sum(axis=1)
        safe = np.where(beta > 0, beta, 1.0)
        val = np.where(beta > 0, (1.0 - (1.0 - beta) ** k) / safe, float(k))
        return val, beta

    B = p.shape[0]
    lo = np.ones(B)
    hi = np.full(B, float(k))
    val, _ = L(lo)
    done = val <= lo
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        v, _ = L(mid)
        ok = v <= mid
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    rho = np.where(done, 1.0, hi)
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
        B, k = c.shape
        rho, beta = kseq_rho(p, q, k)
        rows = np.arange(B)[:, None]
        pc, qc = p[rows, c], q[rows, c]
        a = np.minimum(1.0, pc / (rho[:, None] * qc))
        return a, _kseq_split(p, q, k, rho, beta)[1]

    def closed_form_split(self, p, q, k, drafting=None):
        """``M = min(q, p / rho) L``, ``R = (1 - beta)^k norm(p - M)`` (iid drafts; SpecTr, arXiv 2310.15141)."""
        if self._candidate_law(drafting) != "iid":
            return None
        p2, q2, _ = as_node(p, q)
        k = check_k(k)
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
    L = np.where(beta > 0, (1.0 - (1.0 - beta) ** k) / np.where(beta > 0, beta, 1.0), 0.0)
    M = np.minimum(q, p / rho[:, None]) * L[:, None]
    resid = np.maximum(p - M, 0.0)
    z = resid.sum(axis=1, keepdims=True)
    r = np.where(z > 1e-13, resid / np.where(z > 0, z, 1.0), p)
    return M, r
