"""Published baselines on torch: sps, rrs, rrs_wor, target_only.

Same rules as :mod:`resispec.verifiers.baselines` (``docs/RESISPEC.md``
section 3), batched over nodes and tokens.
"""

from __future__ import annotations

import torch

from ..verifiers.registry import register
from .base import TorchMassVerifier, TorchVerifier, reject_update


class _Plain(TorchMassVerifier):
    def __init__(self, *, dtype=None, device=None):
        self._init_backend(dtype, device)


@register("sps", backend="torch")
class SingleDraftTorch(_Plain):
    """Single-draft speculative sampling, ``m = min(p, q)`` on the first candidate only.

    Leviathan, Kalman, Matias 2023 (arXiv 2211.17192); Chen et al. 2023
    (arXiv 2302.01318).  Candidates after the first are accepted w.p. 0.
    """

    drafting = "iid"

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None):
        if i == 0:
            return torch.minimum(p_i, q_i, out=out)
        return torch.zeros_like(p_i) if out is None else out.zero_()


@register("rrs", backend="torch")
class RecursiveRejectionTorch(_Plain):
    """Recursive rejection sampling, iid drafts: ``m_i = min(p_i, q)``.

    SpecInfer, Miao et al. 2024 (arXiv 2305.09781).
    """

    drafting = "iid"

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None):
        return torch.minimum(p_i, q_i, out=out)


@register("rrs_wor", backend="torch")
class RecursiveRejectionWORTorch(_Plain):
    """Recursive rejection, without-replacement drafts: ``m_i = min(p_i, q_i)``.

    RSD, Jeon et al. 2024 (arXiv 2402.14160); Sequoia (arXiv 2402.12374).
    """

    drafting = "without_replacement"

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None):
        return torch.minimum(p_i, q_i, out=out)


@register("target_only", backend="torch")
class TargetOnlyTorch(TorchVerifier):
    """One-hot proposals: accept ``x_i`` w.p. ``p_i(x_i)``, then zero it in the residual.

    EAGLE-2, Li et al. 2024 (arXiv 2406.16858); SGLang.  Exact for any draft.
    """

    drafting = "any"

    def __init__(self, *, dtype=None, device=None):
        self._init_backend(dtype, device)

    def _chain_t(self, p, q, c):
        B, k = c.shape
        a = torch.empty((B, k), dtype=p.dtype, device=p.device)
        p_i = p
        for i in range(k):
            x = c[:, i:i + 1]
            px = torch.gather(p_i, 1, x)
            a[:, i] = px.squeeze(1)
            m = torch.zeros_like(p_i).scatter_(1, x, px)
            p_i = reject_update(p_i, m)
        return a.clamp_(0.0, 1.0), p_i
