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
from .pathwalk import is_chain, path_expected_accepted
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
            and not hasattr(verifier, "plan_tree"):                  # a chain-only path rule on a tree
        return False
    return verifier.drafting in ("any", drafting)


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
    if isinstance(verifier, PathVerifier):
        return path_expected_accepted(tree, p_rows, q_rows, verifier, sampling)
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
