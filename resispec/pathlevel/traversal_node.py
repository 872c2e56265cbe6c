"""Traversal verification with any exact node-level rule at the siblings: ``traversal_resispec``.

``traversal`` (:mod:`resispec.pathlevel.traversal`) walks the siblings of a node entered with the
requirement ``m`` (a sub-probability, ``|m| <= 1``) exactly as ``rrs`` walks candidates: accept weight
``w = min(1, m(x) / q_v(x))``, update ``m <- (m - q_v)_+ / R``.  That is ``rrs`` run on the EXTENDED law
``r = (m, 1 - |m|)`` over ``V + 1`` outcomes, the last one (``⊥``, "this subtree keeps nothing") never
drafted (``q_v(⊥) = 0``).  Any node-level rule exact for i.i.d. candidates can take ``rrs``'s place
(``docs/pathlevel.md`` section 10 has the proof): at node ``v`` run the rule's accept chain on
``(r, (q_v, 0), children's tokens)``, enter child ``i`` with ``a_i p_c`` (``a_i`` the rule's probability of
accepting candidate ``i`` after rejecting ``0..i-1``), and when every child's subtree kept nothing keep ``v``
with the residual's mass on ``V`` (``1 - residual(⊥)``), emitting ``y ~ residual[:V] / (1 - residual(⊥))``.

With the node rule ``rrs`` this IS ``traversal``; with ``resispec`` (the default) ResiSpec's reserve acts at
every node with several children, before its first decision, on the requirement the traversal owes there.
On a chain (one child per node) ``rrs``, ``resispec`` and ``kseq`` accept a single candidate with
``min(1, r(x) / q(x))``, so it is block verification (Sun et al., arXiv 2403.10444); ``target_only`` stays
exact but accepts less.  Ours: the composition and its proof (traversal after Weng et
al., arXiv 2505.12398; ResiSpec ``docs/RESISPEC.md``).
"""

from __future__ import annotations

import numpy as np

from .base import _RESIDUAL_EPS, PathPlan
from .registry import register_path
from .traversal import TraversalVerifier, children_rows


def extend_requirement(m: np.ndarray) -> np.ndarray:
    """``r = (m, 1 - |m|)`` over ``V + 1`` outcomes, (V + 1,) float64 summing to 1: ``⊥`` = "keeps nothing"."""
    r = np.append(m, max(0.0, 1.0 - float(m.sum())))             # r = (m, 1 - |m|)
    return r / r.sum()                                           # |r| = 1 up to round-off


def node_rule_tree_plan(p: np.ndarray, q: np.ndarray, parent: np.ndarray, tokens: np.ndarray, rule, *,
                        extend=extend_requirement) -> PathPlan:
    """Exact plan (kept row, emitted token) of traversal with the node-level ``rule`` at the siblings.

    Arguments as :func:`resispec.pathlevel.traversal.tree_plan` (validated by ``check_tree``); ``rule`` a
    numpy :class:`resispec.Verifier` exact for i.i.d. candidates (its :meth:`chain` is read once per node
    with children); ``extend`` builds the node rule's target from the requirement
    (:func:`extend_requirement`; a planted bug replaces it).  Returns a :class:`PathPlan` over the
    ``N + 1`` tree rows.
    """
    N, V = tokens.size, p.shape[1]
    kids = children_rows(parent)
    stop = np.zeros(N + 1)
    laws = p.copy()

    def visit(v: int, m: np.ndarray, reach: float) -> float:
        """P(the subtree of row v keeps a node | drafts, v entered with requirement m); fills stop / laws."""
        if not kids[v]:                                          # a leaf: keep it with |m|, emit m / |m|
            tot = float(m.sum())
            stop[v] = reach * tot
            if tot > _RESIDUAL_EPS:
                laws[v] = m / tot
            return tot
        r = extend(m)                                            # r = (m, 1 - |m|): ⊥ = "keeps nothing"
        qv = np.append(q[v], 0.0)                                # ⊥ is never drafted
        cands = np.array([[tokens[c - 1] for c in kids[v]]], dtype=np.int64)
        ch = rule.chain(r[None, :], qv[None, :], cands)
        a, res = ch.accept_probs[0], ch.residual[0]
        kept, go = 0.0, 1.0
        for c, ai in zip(kids[v], a):
            got = visit(c, ai * p[c], reach * go)                # enter child c with a_i p_c
            kept += go * got
            go *= 1.0 - got
        mass = float(res[:V].sum())                              # keep v with the residual's mass on V (= 1 - res(⊥))
        stop[v] = reach * go * mass
        if mass > _RESIDUAL_EPS:
            laws[v] = res[:V] / mass                             # y ~ residual[:V] / |residual[:V]|
        return kept + go * mass

    visit(0, p[0].copy(), 1.0)
    return PathPlan(stop, laws)


@register_path("traversal_resispec", ours=True)
class NodeRuleTraversal(TraversalVerifier):
    """Traversal verification with an exact node-level rule at every node's children (default ResiSpec).

    Parameters
    ----------
    node_rule : str -- a registered numpy verifier exact for i.i.d. candidates (``"resispec"``; ``"rrs"``
        gives ``traversal`` itself); ``**options`` go to :func:`resispec.get_verifier`.

    Same calls as ``traversal`` (:meth:`plan_tree`, :meth:`verify_tree`, and the chain methods).  Raises
    ValueError for a node rule that is not exact for i.i.d. candidates.
    """

    drafting = "iid"
    #: the node rule's target from the requirement (overridden by a planted bug of ``exactness.path_mutants``)
    extend = staticmethod(extend_requirement)

    def __init__(self, node_rule: str = "resispec", **options):
        from ..verifiers.registry import get_verifier

        self.node = get_verifier(node_rule, **options)
        if getattr(self.node, "drafting", None) not in ("iid", "any"):
            raise ValueError(f"node_rule {node_rule!r} is exact for {self.node.drafting!r} drafts; the traversal "
                             "draws children i.i.d., so pick a rule exact for i.i.d. candidates (resispec, rrs, kseq)")
        self.node_rule = node_rule

    def __repr__(self) -> str:
        return f"{type(self).__name__}(node_rule={self.node_rule!r})"

    def _tree_plan(self, p, q, parent, tokens) -> PathPlan:
        return node_rule_tree_plan(p, q, parent, tokens, self.node, extend=self.extend)
