"""SpecTr K-SEQ on torch (Sun et al. 2023, arXiv 2310.15141), iid drafts.

Mirror of :mod:`resispec.verifiers.kseq`: ``rho`` by the same 60 bisection
steps on ``[1, k]``, batched over nodes.
"""

from __future__ import annotations

import torch

from ..verifiers.registry import register
from .base import TorchVerifier
from ._validation import residual_eps

_BISECT_STEPS = 60


def kseq_rho(p: torch.Tensor, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K-SEQ division factor ``rho`` (B,) and ``beta`` (B,) for (B, V) laws.

    ``rho`` is the smallest value in ``[1, k]`` (60 bisection steps) with
    ``(1 - (1 - beta)^k) / beta <= rho``, ``beta(rho) = sum min(q, p / rho)``.
    """

    buf = torch.empty_like(p)          # reused: no (B, V) allocation per bisection step

    def L(rho):
        torch.div(p, rho.unsqueeze(1), out=buf)
        beta = torch.minimum(buf, q, out=buf).sum(dim=1)
        pos = beta > 0
        safe = torch.where(pos, beta, torch.ones_like(beta))
        val = torch.where(pos, (1.0 - (1.0 - beta) ** k) / safe, torch.full_like(beta, float(k)))
        return val, beta

    B = p.shape[0]
    lo = torch.ones(B, dtype=p.dtype, device=p.device)
    hi = torch.full((B,), float(k), dtype=p.dtype, device=p.device)
    val, _ = L(lo)
    done = val <= lo
    for _ in range(_BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        v, _ = L(mid)
        ok = v <= mid
        hi = torch.where(ok, mid, hi)
        lo = torch.where(ok, lo, mid)
    rho = torch.where(done, torch.ones_like(hi), hi)
    _, beta = L(rho)
    return rho, beta


@register("kseq", backend="torch")
class KSeqTorch(TorchVerifier):
    """SpecTr K-SEQ (Sun et al. 2023, arXiv 2310.15141), iid drafts, torch.

    Accept ``x_i`` w.p. ``min(1, p(x_i) / (rho q(x_i)))``; residual
    ``norm(p - min(q, p / rho) L)``, ``L = (1 - (1 - beta)^k) / beta``.
    """

    drafting = "iid"

    def __init__(self, *, dtype=None, device=None):
        self._init_backend(dtype, device)

    def _chain_t(self, p, q, c):
        B, k = c.shape
        rho, beta = kseq_rho(p, q, k)
        pc, qc = torch.gather(p, 1, c), torch.gather(q, 1, c)
        a = torch.clamp(pc / (rho.unsqueeze(1) * qc), max=1.0)
        pos = beta > 0
        L = torch.where(pos, (1.0 - (1.0 - beta) ** k) / torch.where(pos, beta, torch.ones_like(beta)),
                        torch.zeros_like(beta))
        resid = (p - torch.minimum(q, p / rho.unsqueeze(1)) * L.unsqueeze(1)).clamp_(min=0.0)
        z = resid.sum(dim=1, keepdim=True)
        ok = z > residual_eps(p.dtype)
        r = torch.where(ok, resid / torch.where(z > 0, z, torch.ones_like(z)), p)
        return a, r
