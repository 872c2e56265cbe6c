"""Published baselines: single-draft, recursive rejection and target-only.

Rules from ``docs/RESISPEC.md`` section 3.  Each is written once, against the array namespace of its
inputs (:mod:`resispec._xp`): ``backend="torch"`` runs these lines on tensors.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_node, check_k
from .._xp import at, device, namespace, native, reject_at
from .base import MassVerifier, Verifier, sum_of_others
from .registry import register


@register("sps")
class SingleDraft(MassVerifier):
    """Speculative sampling with one draft: ``m = min(p, q)``.

    Leviathan, Kalman, Matias 2023 (arXiv 2211.17192); Chen et al. 2023
    (arXiv 2302.01318).  Only the first candidate is verified; extra
    candidates (k > 1) are ignored (accepted with probability 0), so the
    acceptance is ``1 - TV(p, q)`` for every k.
    """

    drafting = "iid"

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
        xp = namespace(p_i, q_i)
        if i > 0:                                                         # C order, as every mass of the walk
            return xp.zeros(p_i.shape, dtype=p_i.dtype, device=device(p_i))
        return xp.minimum(p_i, q_i)                                       # m_0 = min(p, q), then nothing


@register("rrs")
class RecursiveRejection(MassVerifier):
    """Recursive rejection sampling for iid drafts: ``m_i = min(p_i, q)``.

    SpecInfer multi-step speculative sampling, Miao et al. 2024
    (arXiv 2305.09781).  Biased on without-replacement drafts.
    """

    drafting = "iid"

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None):
        return native(namespace(p_i, q_i)).minimum(p_i, q_i, out=out)     # m_i = min(p_i, q) (into the walk's buffer)


@register("rrs_wor")
class RecursiveRejectionWOR(MassVerifier):
    """Recursive rejection for without-replacement drafts: ``m_i = min(p_i, q_i)``.

    ``q_i`` is the draft renormalised after removing the rejected candidates.
    RSD, Jeon et al. 2024 (arXiv 2402.14160); Sequoia (arXiv 2402.12374).
    """

    drafting = "without_replacement"
    candidate_independent = False

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None):
        return native(namespace(p_i, q_i)).minimum(p_i, q_i, out=out)     # m_i = min(p_i, q_i) (into the walk's buffer)


@register("target_only")
class TargetOnly(Verifier):
    """Verify each candidate as a one-hot proposal (any candidate law).

    Accept ``x_i`` with probability ``p_i(x_i)``; on rejection continue with
    ``p_{i+1} = norm(p_i`` with ``x_i`` zeroed).  EAGLE-2, Li et al. 2024
    (arXiv 2406.16858); SGLang's tree verifier.  Exact whatever the draft.
    """

    drafting = "any"

    def _chain(self, p, q, c):
        xp = namespace(p, q)
        B, k = c.shape
        a = xp.empty((B, k), dtype=p.dtype, device=device(p))          # (B, k)
        bufs = [xp.empty(p.shape, dtype=p.dtype, device=device(p)) for _ in range(min(k, 2))]   # (B, V) ping-pong
        p_i = p                                                         # (B, V)
        for i in range(k):
            x = c[:, i]                                                 # (B,)
            a[:, i] = at(p_i, x)                                        # accept x_i w.p. p_i(x_i)
            p_i = reject_at(p_i, x, out=bufs[i % 2])                    # p_{i+1} = norm(p_i without x_i)
        return xp.clip(a, 0.0, 1.0), p_i

    def closed_form_split(self, p, q, k, drafting=None):
        """``M = p (1 - (1 - q)^k)``, ``R = p (1 - q)^k`` under iid drafts.

        The chain rejects every candidate iff the emitted residual token is
        none of the distinct candidates, and rejecting the set ``S`` leaves
        ``norm(p`` without ``S)``, so token ``x`` is emitted by the residual
        with probability ``p(x) P(x not drafted) = p(x) (1 - q(x))^k``.  The
        draws are from ``q / sum(q)`` (rows may be off 1 by ``SUM_TOL``).
        ``None`` for without-replacement drafts.
        """
        k = check_k(k)
        if self._candidate_law(drafting) != "iid":
            return None
        p2, q2, _ = as_node(p, q)
        left = sum_of_others(q2) / q2.sum(axis=1, keepdims=True)   # 1 - q(x) without cancellation
        with np.errstate(divide="ignore"):  # one-hot draft: log(0) = -inf, miss = 0 (correct)
            log_miss = k * np.log(np.minimum(left, 1.0))
        return p2 * -np.expm1(log_miss), p2 * np.exp(log_miss)
