"""Biased path-level verifiers (planted bugs of block verification) the path checks must flag.

Each is :class:`resispec.pathlevel.block.BlockVerifier` with ONE step changed; every one must
fail :func:`exactness.pathlevel.certify_path` and show an exact horizon TV well above 1e-12
(``tests/test_pathlevel.py``).  ``PATH_MUTANTS``: name -> factory.

- ``block_same_position_residual``: the correction after ``tau < L`` is the token-level residual
  ``norm((p_tau - q_tau)_+)`` of the stop node, without the block weight ``w_tau`` (the stop law
  is still block's);
- ``block_residual_child_row``: the residual reads the target row of the next node on the path,
  ``(w_tau p_{tau+1} - q_tau)_+`` (an off-by-one row index);
- ``block_tokenwise_accept``: ``tau`` from plain token-wise acceptance (first rejection of
  ``min(1, p_i(d_{i+1}) / q_i(d_{i+1}))``) with block's weighted residual;
- ``block_unclipped_weights``: ``w_i = w_{i-1} p_{i-1}(d_i) / q_{i-1}(d_i)`` without the
  ``min(1, .)`` (the raw path likelihood ratio), hazards then clipped to [0, 1];
- ``block_no_full_accept``: the full-acceptance branch is missing (``h_L = 0``: the rule never keeps
  all L drafts, so no bonus token is ever drawn);
- ``block_bonus_from_residual``: after ``tau = L`` the bonus is drawn from
  ``norm((w_L p_L - q_{L-1})_+)`` instead of ``p_L``.

Tree rule (``resispec.pathlevel.traversal``), ``TREE_MUTANTS``:

- ``traversal_stale_requirement``: after a child's subtree keeps nothing the parent's requirement is
  not updated (the next sibling is weighed against the old ``m``, as if the rejection never happened);
- ``traversal_normalised_residual``: the update renormalises, ``m <- norm((m - q_v)_+)``, instead of
  dividing by the rejection chance ``R`` (the token-level residual, right only when ``|m| = 1``);
- ``traversal_resispec_no_bottom``: ``traversal_resispec`` hands its node rule the normalised requirement
  ``m / |m|`` without the "keeps nothing" outcome ``⊥`` (right only when ``|m| = 1``, at the root).

Plan and sampler apart (``PLAN_MUTANTS``; ``exactness.plan_check`` must flag them, the exact analysis of the
declared plan cannot, since it reads the plan and not the code that runs):

- ``plan_says_block``: declares block's plan, samples token-wise (exact, so the horizon test passes; its plan's
  ``E[accepted]`` overstates what runs); ``verify`` takes ``uniforms=`` (the coupled form applies);
- ``plan_says_block_rng``: the same with ``verify(p, q, drafts, rng)`` only (the PIT form alone);
- ``traversal_plan_says_exact``: declares ``traversal``'s plan, samples ``traversal_stale_requirement``'s (biased).

Not a bug (so not here): dropping the bonus token after a full acceptance and letting the next
step draw it -- the emitted ``L`` drafts continued by the target keep the target law; it only wastes
a token (``docs/pathlevel.md``).
"""

from __future__ import annotations

import numpy as np

from resispec.pathlevel.base import normalise_rows
from resispec.pathlevel.block import BlockVerifier, stop_law
from resispec.pathlevel.tokenwise import TokenwiseVerifier
from resispec.pathlevel.traversal import TraversalVerifier
from resispec.pathlevel.traversal_node import NodeRuleTraversal


class SamePositionResidual(BlockVerifier):
    def _laws(self, p, q, w, excess):
        return super()._laws(p, q, w, np.maximum(p[:-1] - q, 0.0))          # BUG: w_tau dropped


class ResidualChildRow(BlockVerifier):
    def _laws(self, p, q, w, excess):
        return super()._laws(p, q, w, np.maximum(w[:-1, None] * p[1:] - q, 0.0))   # BUG: row tau + 1


class TokenwiseAccept(BlockVerifier):
    def _stop(self, p, q, d, w, excess):
        return TokenwiseVerifier()._plan(p, q, d)[0]                          # BUG: token-wise tau


class UnclippedWeights(BlockVerifier):
    def _weights(self, p, q, d):
        i = np.arange(d.size)
        return np.concatenate([[1.0], np.cumprod(p[i, d] / q[i, d])])         # BUG: no min(1, .)


class NoFullAccept(BlockVerifier):
    def _stop(self, p, q, d, w, excess):
        h = self._hazards(w, excess.sum(axis=1))
        h[-1] = 0.0                                                           # BUG: never keeps all L drafts
        return stop_law(h)


class BonusFromResidual(BlockVerifier):
    def _laws(self, p, q, w, excess):
        laws = super()._laws(p, q, w, excess)
        laws[-1] = normalise_rows(np.maximum(w[-1] * p[-1:] - q[-1:], 0.0), p[-1:])[0]   # BUG: not p_L
        return laws


PATH_MUTANTS = {
    "block_same_position_residual": SamePositionResidual,
    "block_residual_child_row": ResidualChildRow,
    "block_tokenwise_accept": TokenwiseAccept,
    "block_unclipped_weights": UnclippedWeights,
    "block_no_full_accept": NoFullAccept,
    "block_bonus_from_residual": BonusFromResidual,
}
for _name, _cls in PATH_MUTANTS.items():
    _cls.name = _name


class StaleRequirement(TraversalVerifier):
    @staticmethod
    def update(m, qv):
        return m                                                              # BUG: no update after a rejection


class NormalisedResidual(TraversalVerifier):
    @staticmethod
    def update(m, qv):
        e = np.maximum(m - qv, 0.0)
        return e / e.sum() if e.sum() > 1e-13 else np.zeros_like(m)          # BUG: norm, not / R


class NoBottom(NodeRuleTraversal):
    @staticmethod
    def extend(m):
        if m.sum() <= 1e-13:
            return np.append(np.zeros_like(m), 1.0)
        return np.append(m / m.sum(), 0.0)                                   # BUG: no "keeps nothing" outcome


TREE_MUTANTS = {
    "traversal_stale_requirement": StaleRequirement,
    "traversal_normalised_residual": NormalisedResidual,
    "traversal_resispec_no_bottom": NoBottom,
}
for _name, _cls in TREE_MUTANTS.items():
    _cls.name = _name


class PlanSaysBlock(BlockVerifier):
    """Block's plan, token-wise sampler (``PathVerifier.verify`` contract, with ``uniforms=``)."""

    def verify(self, p, q, drafts, rng=None, *, uniforms=None):
        return TokenwiseVerifier().verify(p, q, drafts, rng, uniforms=uniforms)   # BUG: not its declared plan


class PlanSaysBlockRng(BlockVerifier):
    """Block's plan, token-wise sampler taking only ``rng``."""

    def verify(self, p, q, drafts, rng):
        return TokenwiseVerifier().verify(p, q, drafts, rng)                      # BUG: not its declared plan


class TraversalPlanSaysExact(TraversalVerifier):
    """``traversal``'s plan, ``traversal_stale_requirement``'s sampler."""

    def verify_tree(self, p, q, parent, tokens, rng):
        return StaleRequirement().verify_tree(p, q, parent, tokens, rng)         # BUG: not its declared plan


PLAN_MUTANTS = {
    "plan_says_block": PlanSaysBlock,
    "plan_says_block_rng": PlanSaysBlockRng,
    "traversal_plan_says_exact": TraversalPlanSaysExact,
}
for _name, _cls in PLAN_MUTANTS.items():
    _cls.name = _name
