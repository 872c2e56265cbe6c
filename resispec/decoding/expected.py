"""Exact expected accepted length of one drafted tree (Rao-Blackwellised block efficiency).

At one target call the engine holds the drafted :class:`~resispec.decoding.tree.DraftTree`, the draft
law ``q`` each node's children were drawn from and the target law ``p`` at the root and at every node
(the ONE tree pass).  Given these, the walk of :func:`resispec.decoding.engine._verify_walk` is random
only through the verification coins, and its accepted length has the closed form below, for ANY
verifier whose drafting law matches the tree's: the verifier's :meth:`~resispec.verifiers.base.Verifier.chain`
gives the per-step accept probabilities ``a_1..a_k`` at a node with children ``c_1..c_k`` (in drawn
order), so

    P(accept c_i) = a_i prod_{j<i} (1 - a_j),    E(node) = sum_i P(accept c_i) (1 + E(c_i)),

with ``E(leaf) = 0``.  ``E(root)`` is the conditional expectation of the number of accepted nodes
given the tree and the laws (Rao-Blackwell: same mean as the observed count, never more variance).
Because every exact verifier emits the target's law, the contexts a run visits are target samples
whatever verifier drives it, so ``E(root)`` computed for every verifier on the same trees gives a
paired comparison (``docs/decoding.md``, Benchmark).
"""

from __future__ import annotations

import numpy as np

from ..pathlevel.base import PathVerifier
from ..verifiers.base import Verifier
from .laws import SamplingConfig, process_logits
from .tree import ROOT, DraftTree


def serves(verifier, drafting: str, shape=None) -> bool:
    """True when ``verifier`` is exact for trees drafted with ``drafting`` ("iid" / "without_replacement").

    A verifier of drafting ``"any"`` (``target_only``) serves every tree; the others serve only trees drawn
    with their own law (``docs/RESISPEC.md`` section 3: e.g. ``rrs`` on without-replacement drafts is biased).
    A path-level verifier (``resispec.pathlevel``, e.g. ``block``) serves chains only: with ``shape`` (a
    ``TreeShape``) given, it serves iff every branching factor is 1; a tree rule (one with ``plan_tree``,
    ``traversal``) serves every tree of its drafting law.
    """
    if isinstance(verifier, PathVerifier) and shape is not None and not is_chain(shape) \
            and not hasattr(verifier, "plan_tree"):
        return False
    return verifier.drafting in ("any", drafting)


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


def path_expected_accepted(tree: DraftTree, p: dict, q_rows: dict, verifier: PathVerifier) -> float:
    """``E[tau | drafts] = sum_i i P(tau = i | drafts)`` of a path-level verifier on a chain tree.

    ``p``: processed target laws at ``ROOT`` and at every chain node (the last one for the bonus); ``q_rows``
    as in :func:`expected_accepted`.
    """
    nodes = chain_nodes(tree)
    plan = verifier.plan(np.stack([p[n] for n in [ROOT] + nodes]), np.stack([q_rows[n] for n in [ROOT] + nodes[:-1]]),
                         np.array([tree.tokens[n] for n in nodes], dtype=np.int64))
    return float(np.arange(len(nodes) + 1) @ plan.stop)


def target_laws(tree: DraftTree, p_logits: dict, sampling: SamplingConfig, *, leaves: bool = False) -> dict:
    """The processed target law at the root and every internal node of ``tree``.

    Parameters
    ----------
    tree : DraftTree
    p_logits : dict node id -> (V,) logits (any float dtype; ``ROOT`` = -1 for the root), from the one
        tree pass (``engine._target_pass``)
    sampling : SamplingConfig
        The same processing as the walk (:func:`resispec.decoding.laws.process_logits`).

    Returns
    -------
    dict node id -> (V,) float64 law, for the nodes that have children (node-level verifiers need no
    leaf), and for the leaves too with ``leaves=True`` (a path-level verifier's plan takes the bonus law).
    """
    nodes = [n for n, kids in tree.children.items() if kids or leaves]
    laws = process_logits(np.stack([np.asarray(p_logits[n]) for n in nodes]), sampling)
    return dict(zip(nodes, laws))


def expected_accepted(tree: DraftTree, p_rows: dict, q_rows: dict, verifier: Verifier,
                      sampling: SamplingConfig | None = None) -> float:
    """Exact expected number of accepted tree nodes at one target call, for ``verifier``.

    Exact for the given tree: it conditions on the drafted tree (tokens and drawn order), on ``p`` and on
    ``q``, and averages only over the verification coins (Rao-Blackwellised), so its mean over calls equals
    the mean observed accepted count (:attr:`DecodeResult.accepted`) with no more variance.

    Source: the recursion over the tree is the expected accepted length of tree verification (SpecInfer,
    arXiv 2305.09781; Sequoia, arXiv 2402.12374), here per verifier from its own accept chain.

    Parameters
    ----------
    tree : DraftTree
        The drafted tree of this call; ``tree.children[node]`` in drawn order (the order the walk verifies).
    p_rows : dict node id -> (V,) array
        Target at the root (``ROOT`` = -1) and at every node with children: logits of the one tree pass
        when ``sampling`` is given (processed here with :func:`process_logits`, as the walk does), else
        laws already processed (float64, rows summing to 1; e.g. from :func:`target_laws`).
    q_rows : dict node id -> (V,) float64
        The draft law each node's children were drawn from (``engine._draft_tree``).
    verifier : Verifier (numpy backend) or PathVerifier
        Its :meth:`~resispec.verifiers.base.Verifier.chain` gives the accept probabilities; it must be exact
        for the tree's drafting law (:func:`serves`), which the caller checks.  A path-level verifier
        (``resispec.pathlevel``) on a chain tree: ``E[tau | drafts]`` from its plan (the target law at the
        leaf, for the bonus, must then be in ``p_rows`` too).
    sampling : SamplingConfig, optional
        See ``p_rows``.

    Returns
    -------
    float
        ``E(root)`` in ``[0, tree depth]`` (number of accepted nodes; the call emits that plus one token,
        before any ``max_new_tokens`` / EOS cut).

    Raises
    ------
    ValueError
        A node with children missing from ``p_rows`` / ``q_rows``, or a law the verifier's door rejects.
    """
    if isinstance(verifier, PathVerifier) and hasattr(verifier, "plan_tree") and not _is_chain_tree(tree):
        rows = [ROOT] + list(range(len(tree)))
        if any(n not in p_rows for n in rows):
            raise ValueError("a tree rule needs p at ROOT and at every node (leaves too, for the bonus)")
        p = process_logits(np.stack([np.asarray(p_rows[n]) for n in rows]), sampling) if sampling is not None \
            else np.stack([p_rows[n] for n in rows])
        return float(np.asarray([0] + tree.depth) @ verifier.plan_tree(p, *tree_rule_inputs(tree, q_rows, p.shape[1])).stop)
    if isinstance(verifier, PathVerifier):
        nodes = chain_nodes(tree)
        rows = {n: p_rows[n] for n in [ROOT] + nodes if n in p_rows}
        if len(rows) != len(nodes) + 1 or any(n not in q_rows for n in [ROOT] + nodes[:-1]):
            raise ValueError("a path-level verifier needs p at ROOT and at every chain node (the last for the bonus) "
                             "and q at every node with a child")
        p = process_logits(np.stack(list(rows.values())), sampling) if sampling is not None else list(rows.values())
        return path_expected_accepted(tree, dict(zip(rows, p)), q_rows, verifier)
    if not isinstance(verifier, Verifier):
        raise TypeError(f"verifier must be a resispec Verifier (numpy backend) or a path-level verifier "
                        f"(resispec.pathlevel), got {type(verifier).__name__}")
    internal = [n for n, kids in tree.children.items() if kids]
    missing = [n for n in internal if n not in p_rows or n not in q_rows]
    if missing:
        raise ValueError(f"p_rows and q_rows need every node with children (ROOT = -1); missing {missing[:5]}")
    p = target_laws(tree, p_rows, sampling) if sampling is not None else p_rows
    step = {}  # node -> P(accept child i), in drawn order
    by_k: dict[int, list] = {}
    for n in internal:
        by_k.setdefault(len(tree.children[n]), []).append(n)
    for k, nodes in by_k.items():  # one chain call per branching factor
        cands = np.array([[tree.tokens[c] for c in tree.children[n]] for n in nodes], dtype=np.int64)
        a = verifier.chain(np.stack([p[n] for n in nodes]), np.stack([q_rows[n] for n in nodes]),
                           cands).accept_probs.reshape(len(nodes), k)
        survive = np.cumprod(np.concatenate([np.ones((len(nodes), 1)), 1.0 - a[:, :-1]], axis=1), axis=1)
        for n, row in zip(nodes, a * survive):
            step[n] = row
    E = {}
    for n in sorted(tree.children, reverse=True):  # children have larger ids than parents; ROOT = -1 last
        kids = tree.children[n]
        E[n] = float(sum(w * (1.0 + E[c]) for w, c in zip(step[n], kids))) if kids else 0.0
    return E[ROOT]
