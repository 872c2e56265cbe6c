"""Traversal-style verification of an iid-drafted token tree: leaf-to-root, sequence-level acceptance.

Idea from Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi 2025, "Traversal Verification for Speculative Tree
Decoding" (arXiv 2505.12398): decide whole root-to-node sequences, deepest first, instead of node by
node from the root.  The rule below is OUR derivation (``docs/pathlevel.md`` section 8), which
extends the block-verification proof to siblings; it equals block verification
(:mod:`resispec.pathlevel.block`) on a chain and is exact for trees whose children are drawn iid from
the draft law at their parent.

Each node ``v`` is entered with a *requirement* ``m`` (a sub-probability vector over the next token,
``|m| <= 1``): the law of the next emitted token that the subtree of ``v`` still owes, times the
probability it emits through ``v`` at all.  The root is entered with ``m = p_root``.  At ``v``, for
each child ``c`` (token ``x``) in drawn order:

- enter ``c`` with ``m_c = w_c p_c``, ``w_c = min(1, m(x) / q_v(x))``; if ``c``'s subtree keeps a node,
  that is the outcome;
- else update ``m <- (m - q_v)_+ / R`` with ``R = 1 - |m| + |(m - q_v)_+|`` (the chance a child's
  subtree keeps nothing), and go on to the next child.

After the last child (or at a leaf), keep ``v`` with probability ``|m|`` and emit ``y ~ m / |m|``;
otherwise ``v``'s subtree keeps nothing and its parent goes on.  The kept node's path is accepted.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_law, check_rng
from ..sampling import _inverse_cdf
from .base import _RESIDUAL_EPS, PathPlan, PathVerifier
from .registry import register_path


def check_tree(p, q, parent, tokens):
    """Validate one drafted tree; return ``(p (N+1, V), q (N+1, V), parent (N,), tokens (N,))``.

    Row 0 of ``p`` / ``q`` is the root, row ``n + 1`` drafted node ``n``.  ``parent[n]`` is the parent's
    node id (-1 for the root) and must be smaller than ``n`` (parents first); siblings are verified in
    id order, which must be the order they were drawn.  Rows of ``q`` at leaves are not read (pass
    anything finite, e.g. zeros); every other row must be a law.

    Raises
    ------
    TypeError
        Non-numeric laws, non-integer ids.
    ValueError
        Shapes, parents not before children, ids outside ``[0, V)``, rows that are not laws, a drafted
        token of zero draft probability at its parent.
    """
    par = np.asarray(parent)
    tok = np.asarray(tokens)
    for name, a in (("parent", par), ("tokens", tok)):
        if a.size and (a.dtype == bool or not np.issubdtype(a.dtype, np.integer)):
            raise TypeError(f"{name} must be integer ids, got dtype {a.dtype}")
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one entry per drafted node), got shape {a.shape}")
    if par.size != tok.size or par.size == 0:
        raise ValueError(f"parent ({par.size}) and tokens ({tok.size}) need one entry per drafted node (N >= 1)")
    N = tok.size
    par, tok = par.astype(np.int64), tok.astype(np.int64)
    if np.any(par < -1) or np.any(par >= np.arange(N)):
        n = int(np.flatnonzero((par < -1) | (par >= np.arange(N)))[0])
        raise ValueError(f"parent[{n}] = {int(par[n])}: a node's parent must be -1 (the root) or an earlier node "
                         "(number the nodes parents first, siblings in drawn order)")
    for name, x in (("p", p), ("q", q)):
        if np.ndim(x) != 2 or np.shape(x)[0] != N + 1:
            raise ValueError(f"{name} must have shape (N + 1, V) = ({N + 1}, V): row 0 the root, row n + 1 node n; "
                             f"got {np.shape(x)}")
    p2 = np.array(as_law(p, name="p"))
    V = p2.shape[1]
    q2 = np.asarray(q, dtype=np.float64)
    if q2.shape != p2.shape:
        raise ValueError(f"q has shape {q2.shape} but p has {p2.shape}; both (N + 1, V) over one vocabulary")
    internal = np.unique(par + 1)
    q2 = q2.copy()
    q2[internal] = as_law(q2[internal], name="q (rows of nodes with children)")
    if np.any((tok < 0) | (tok >= V)):
        n = int(np.flatnonzero((tok < 0) | (tok >= V))[0])
        raise ValueError(f"tokens[{n}] = {int(tok[n])} lies outside the vocabulary [0, {V})")
    zero = q2[par + 1, tok] <= 0
    if np.any(zero):
        n = int(np.flatnonzero(zero)[0])
        raise ValueError(f"tokens[{n}] = {int(tok[n])} has draft probability 0 at its parent, so it cannot have "
                         "been drawn from q; pass the law each node's children were drawn from")
    return p2, q2, par, tok


def child_weight(m: np.ndarray, x: int, qv: np.ndarray) -> float:
    """``w_c = min(1, m(x) / q_v(x))``: how much of the child's path can still be kept."""
    return min(1.0, m[x] / qv[x])


def sibling_update(m: np.ndarray, qv: np.ndarray) -> np.ndarray:
    """Requirement after a child's subtree kept nothing: ``(m - q_v)_+ / (1 - |m| + |(m - q_v)_+|)``."""
    excess = np.maximum(m - qv, 0.0)                             # (m - q_v)_+
    R = 1.0 - m.sum() + excess.sum()                             # R = 1 - |m| + |(m - q_v)_+|
    return excess / R if R > _RESIDUAL_EPS else np.zeros_like(m)


def children_rows(parent) -> list[list[int]]:
    """Tree rows of each row's children (row 0 the root, row ``n + 1`` node ``n``), in node-id (drawn) order."""
    kids = [[] for _ in range(len(parent) + 1)]
    for n, a in enumerate(parent):
        kids[int(a) + 1].append(n + 1)
    return kids


def tree_plan(p: np.ndarray, q: np.ndarray, parent: np.ndarray, tokens: np.ndarray, *,
              weight=child_weight, update=sibling_update) -> PathPlan:
    """Exact law of the kept node and the emitted token for validated tree arrays (see :func:`check_tree`).

    Returns a :class:`PathPlan` over the N + 1 tree rows: ``stop[r]`` = P(row r's node is kept | tree),
    ``laws[r]`` the law of the token emitted after it.  ``weight`` / ``update`` are the two steps of the
    rule (:func:`child_weight`, :func:`sibling_update`; the planted bugs replace one).
    """
    N = tokens.size
    kids = children_rows(parent)
    stop = np.zeros(N + 1)
    laws = p.copy()

    def visit(v: int, m: np.ndarray, reach: float) -> float:
        """P(the subtree of row v keeps a node | v entered with requirement m); fills stop / laws."""
        kept, go = 0.0, 1.0
        for c in kids[v]:
            w = weight(m, tokens[c - 1], q[v])                   # w_c = min(1, m(x) / q_v(x))
            a = visit(c, w * p[c], reach * go)
            kept += go * a
            go *= 1.0 - a
            m = update(m, q[v])                                  # m <- (m - q_v)_+ / R
        tot = float(m.sum())
        stop[v] = reach * go * tot                               # keep v with probability |m|
        if tot > _RESIDUAL_EPS:
            laws[v] = m / tot                                    # y ~ m / |m|
        return kept + go * tot

    visit(0, p[0].copy(), 1.0)
    return PathPlan(stop, laws)


def path_of(parent: np.ndarray, row: int) -> list[int]:
    """Drafted node ids from the root's child down to tree row ``row`` (empty for the root)."""
    out, n = [], row - 1
    while n >= 0:
        out.append(n)
        n = int(parent[n])
    return out[::-1]


@register_path("traversal")
class TraversalVerifier(PathVerifier):
    """Traversal-style tree verification (after Weng et al. 2025, arXiv 2505.12398; our derivation); exact for
    iid-drafted trees, equal to block verification on a chain.

    On a chain it takes the :class:`PathVerifier` arguments (``p (L+1, V)``, ``q (L, V)``, ``drafts (L,)``);
    on a tree use :meth:`plan_tree` / :meth:`verify_tree`.
    """

    drafting = "iid"

    #: The rule's two steps (overridden by the planted bugs of ``exactness.path_mutants``).
    weight = staticmethod(child_weight)
    update = staticmethod(sibling_update)

    def _tree_plan(self, p, q, parent, tokens) -> PathPlan:
        return tree_plan(p, q, parent, tokens, weight=self.weight, update=self.update)

    def plan_tree(self, p, q, parent, tokens) -> PathPlan:
        """Exact law over the N + 1 tree rows of the kept node and the emitted token (:func:`check_tree` args).

        Raises TypeError / ValueError as :func:`check_tree`.
        """
        return self._tree_plan(*check_tree(p, q, parent, tokens))

    def verify_tree(self, p, q, parent, tokens, rng: np.random.Generator) -> tuple[list[int], int]:
        """Verify one drafted tree: ``(accepted node ids root-down, emitted token)``.

        ``p`` (N+1, V), ``q`` (N+1, V), ``parent`` (N,), ``tokens`` (N,) as in :func:`check_tree`; two
        uniforms from ``rng`` draw the kept row from ``plan.stop`` and the token from its law (inverse CDF).
        """
        p2, q2, par, tok = check_tree(p, q, parent, tokens)
        plan = self._tree_plan(p2, q2, par, tok)
        u = check_rng(rng).random(2)
        row = int(_inverse_cdf(plan.stop[None, :], u[:1])[0])
        return path_of(par, row), int(_inverse_cdf(plan.laws[row][None, :], u[1:])[0])

    def _plan(self, p, q, d):
        L = d.size
        qq = np.vstack([q, np.zeros((1, q.shape[1]))])          # the leaf's draft row is never read
        plan = self._tree_plan(p, qq, np.arange(-1, L - 1, dtype=np.int64), d)
        return plan.stop, plan.laws
