"""Path-level rules (``resispec.pathlevel``: ``block``, ``token``, ``traversal``) inside the engine.

The engine's drafted :class:`~resispec.decoding.tree.DraftTree` and its one target pass are turned into a
rule's inputs: on a chain, the target laws at the L + 1 nodes and the L draft laws; on a tree (rules with
``verify_tree``), the laws at every node with parents and tokens in the tree's own order (BFS, siblings in
drawn order).  :func:`verify_path` is the walk's replacement, :func:`path_expected_accepted` the
Rao-Blackwellised accepted count for ``also=`` (``docs/pathlevel.md`` section 7).
"""

from __future__ import annotations

import numpy as np

from ..pathlevel.base import PathVerifier
from .laws import SamplingConfig, process_logits
from .tree import ROOT, DraftTree


def is_chain(shape) -> bool:
    """True when the ``TreeShape`` has one child per node (``1,1,...,1``): what path-level rules decide."""
    return all(k == 1 for k in shape.branching)


def _is_chain_tree(tree: DraftTree) -> bool:
    return all(len(k) <= 1 for k in tree.children.values())


def tree_rule_inputs(tree: DraftTree, q_rows: dict, V: int) -> tuple:
    """``(q (N+1, V), parent (N,), tokens (N,))`` of a drafted tree for a tree rule's ``plan_tree`` / ``verify_tree``
    (row 0 the root, row n + 1 node n; rows of leaves, which have no draft law, are zeros and never read)."""
    q = np.zeros((len(tree) + 1, V))
    for n, row in q_rows.items():
        q[n + 1] = row
    return q, np.asarray(tree.parent, dtype=np.int64), np.asarray(tree.tokens, dtype=np.int64)


def chain_nodes(tree: DraftTree) -> list:
    """The drafted nodes of a chain tree, root's child first; ValueError when a node has two children."""
    nodes, node = [], ROOT
    while tree.children[node]:
        if len(tree.children[node]) != 1:
            raise ValueError(f"a path-level verifier decides chains (one draft per node), but node {node} has "
                             f"{len(tree.children[node])} children; use a tree shape like 1,1,1")
        node = tree.children[node][0]
        nodes.append(node)
    return nodes


def path_expected_accepted(tree: DraftTree, p_rows: dict, q_rows: dict, verifier: PathVerifier,
                           sampling: SamplingConfig | None = None) -> float:
    """Exact ``E[accepted | drafted tree]`` of a path-level verifier: ``sum_r depth_r P(kept row r)`` from its plan.

    A chain tree goes through :meth:`PathVerifier.plan`, any other tree through ``plan_tree`` (tree rules,
    ``traversal``).  ``p_rows``: target at ``ROOT`` and at every node the rule reads -- the chain's nodes,
    or every node of the tree, leaves included (the bonus law) -- as logits when ``sampling`` is given,
    else processed laws; ``q_rows``: the draft law each inner node's children were drawn from.
    Raises ValueError for a missing row, a tree given to a chain-only rule, or laws the rule rejects.
    """
    if hasattr(verifier, "plan_tree") and not _is_chain_tree(tree):
        rows = [ROOT] + list(range(len(tree)))
        chain = None
    else:
        chain = chain_nodes(tree)
        rows = [ROOT] + chain
    if any(n not in p_rows for n in rows) or any(n not in q_rows for n in rows if tree.children[n]):
        raise ValueError("a path-level verifier needs p at ROOT and at every node it reads (leaves too, for the "
                         "bonus) and q at every node with children")
    p = np.stack([np.asarray(p_rows[n]) for n in rows])
    p = process_logits(p, sampling) if sampling is not None else p.astype(np.float64)
    if chain is None:
        plan = verifier.plan_tree(p, *tree_rule_inputs(tree, q_rows, p.shape[1]))
        return float(np.asarray([0] + tree.depth) @ plan.stop)      # E|kept| = sum_r depth_r P(row r kept)
    plan = verifier.plan(p, np.stack([q_rows[n] for n in rows[:-1]]),
                         np.array([tree.tokens[n] for n in chain], dtype=np.int64))
    return float(np.arange(len(chain) + 1) @ plan.stop)             # E[tau] = sum_i i P(tau = i | drafts)


def verify_path(t: DraftTree, p_logits, q_rows, verifier: PathVerifier, sampling, rng, record):
    """A path-level verifier on a chain tree, or a tree rule (``verify_tree``: ``traversal``) on any tree:
    (emitted tokens, accepted node path).

    Hands it the target law at the root and at every chain node (L + 1 rows, the last for the bonus),
    the draft law each draft was drawn from (L rows) and the drafts; keeps ``drafts[:tau]`` and emits
    the token it returns.
    """
    if hasattr(verifier, "verify_tree") and any(len(k) > 1 for k in t.children.values()):
        rows = [ROOT] + list(range(len(t)))
        p = process_logits(np.stack([np.asarray(p_logits[n]) for n in rows]), sampling)
        q, parent, tokens = tree_rule_inputs(t, q_rows, p.shape[1])
        kept, token = verifier.verify_tree(p, q, parent, tokens, rng)
        if record is not None:
            record.extend({"p": p[n + 1], "q": q[n + 1], "candidates": np.array([t.tokens[c] for c in t.children[n]]),
                           "depth": 0 if n == ROOT else t.depth[n]} for n in [ROOT] + list(range(len(t)))
                          if t.children[n])
        return [t.tokens[n] for n in kept] + [int(token)], list(kept)
    nodes = chain_nodes(t)
    p = process_logits(np.stack([np.asarray(p_logits[n]) for n in [ROOT] + nodes]), sampling)
    q = np.stack([q_rows[n] for n in [ROOT] + nodes[:-1]])
    drafts = np.array([t.tokens[n] for n in nodes], dtype=np.int64)
    out = verifier.verify(p, q, drafts, rng)
    if record is not None:  # one entry per drafted node the rule looked at, as the node-level walk records
        record.extend({"p": p[i], "q": q[i], "candidates": drafts[i:i + 1], "depth": i} for i in range(len(nodes)))
    return [int(x) for x in drafts[: out.accepted]] + [int(out.token)], nodes[: out.accepted]
