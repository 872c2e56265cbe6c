"""Block efficiency of the path-level rules (``resispec.pathlevel``) on the bench's i.i.d.-node trees.

The node-level verifiers of :mod:`resispec.bench.trees` have closed forms because every node draws its own
(p, q) pair independently: the block efficiency is ``1 + sum_d prod_j a_j``.  A path-level rule (block
verification, Sun et al. arXiv 2403.10444; traversal verification, after Weng et al. arXiv 2505.12398)
decides whole paths, so its acceptance is not a product of per-node rates.  Here it is estimated by a
PAIRED Rao-Blackwellised Monte Carlo average over sampled trees:

- draw a tree: every node picks one of the ``n`` pairs uniformly (the bench's model), the children of a
  node are drawn i.i.d. from its ``q``;
- on that tree compute EXACTLY (no coins) the rule's expected accepted length ``E_rule`` from its plan
  (``sum_r P(keep row r) depth(r)``) and its CONTROL's, the node-level walk of the rule it extends
  (``rrs``; ``resispec`` for ``traversal_resispec``: its ``node_rule``), ``E_ctl`` (SpecInfer's recursion,
  arXiv 2305.09781, with the node rule's accept chain);
- report ``BE_rule = BE_ctl (closed form, exact) + mean(E_rule - E_ctl)``, with the standard error of the
  paired difference (``E_ctl`` has mean ``BE_ctl - 1``, so the estimate is unbiased; pairing on the same
  trees removes most of the variance).

Chain-only rules (``block``, ``token``) run on chains (every branching factor 1); rules with a tree plan
(``traversal``) on every i.i.d. shape.  Without-replacement shapes are left out (the tree rule is exact
for i.i.d. children only).
"""

from __future__ import annotations

import numpy as np

from ..pathlevel.registry import available_path_verifiers, get_path_verifier
from ..trees import TreeShape

#: Path-level rules the bench runs by default (every registered one).
DEFAULT_PATH_RULES = tuple(available_path_verifiers())


def serves_shape(rule, shape: TreeShape) -> bool:
    """True when ``rule`` (a PathVerifier) decides trees of ``shape``: i.i.d. drafting, and a chain unless the
    rule has a tree plan (``plan_tree``)."""
    if shape.drafting != "iid":
        return False
    return all(k == 1 for k in shape.branching) or hasattr(rule, "plan_tree")


def sample_tree(p: np.ndarray, q: np.ndarray, shape: TreeShape, rng: np.random.Generator):
    """One i.i.d.-node tree of ``shape``: ``(P (N+1, V), Q (N+1, V), parent (N,), tokens (N,), depth (N+1,))``.

    ``p``, ``q``: (n, V) float64 pairs; row 0 of ``P``/``Q`` is the root, row ``i + 1`` drafted node ``i``
    (parents first, siblings in drawn order), each row one pair drawn uniformly; the children of a node
    are drawn i.i.d. from its ``Q`` row (inverse CDF).
    """
    n = p.shape[0]
    parent, depth_of = [], [0]
    frontier = [0]                                              # tree rows of the current depth
    for d, k in enumerate(shape.branching):
        nxt = []
        for v in frontier:
            for _ in range(k):
                parent.append(v - 1)                            # node id of the parent (-1 = root)
                depth_of.append(d + 1)
                nxt.append(len(parent))                         # tree row of the new node
        frontier = nxt
    N = len(parent)
    pick = rng.integers(0, n, size=N + 1)
    P, Q = p[pick], q[pick]
    par = np.asarray(parent, dtype=np.int64)
    cdf = np.cumsum(Q[par + 1], axis=1)                         # the parent's draft CDF per node
    u = rng.random(N) * cdf[:, -1]
    tokens = np.minimum((cdf < u[:, None]).sum(axis=1), p.shape[1] - 1).astype(np.int64)
    return P, Q, par, tokens, np.asarray(depth_of)


def walk_expected(P, Q, parent, tokens, verifier) -> float:
    """Exact expected accepted nodes of a node-level walk (``verifier``: a numpy Verifier exact for i.i.d.
    candidates) on one drafted tree (arrays of :func:`sample_tree`; row 0 = the root, node ``i`` = row
    ``i + 1``, ``parent`` in node ids with -1 = the root): the engine's own recursion,
    :func:`resispec.decoding.expected.expected_accepted`, ``E(v) = sum_i prod_{j<i} (1 - a_j) a_i (1 + E(c_i))``
    (SpecInfer, arXiv 2305.09781).

    Shapes: ``P``, ``Q`` (N + 1, V) float64 target / draft laws, ``parent`` (N,) int (each -1 or an earlier
    node), ``tokens`` (N,) int.  Returns the expected number of accepted nodes (float, in [0, depth]).
    Raises ValueError for arrays that are not of that form."""
    from ..decoding.expected import expected_accepted
    from ..decoding.tree import DraftTree

    parent, tokens = np.asarray(parent), np.asarray(tokens)
    n = parent.size
    if parent.ndim != 1 or tokens.shape != (n,) or parent.dtype.kind not in "iu" or tokens.dtype.kind not in "iu":
        raise ValueError(f"parent and tokens must be 1-D integer arrays of one length (sample_tree's), got "
                         f"{parent.dtype}{parent.shape} and {tokens.dtype}{tokens.shape}")
    if n and (np.any(parent < -1) or np.any(parent >= np.arange(n))):
        raise ValueError("parent[i] must be -1 (the root) or a node before i (sample_tree's breadth-first order)")
    if len(P) != n + 1 or len(Q) != n + 1:
        raise ValueError(f"P and Q need one row per node plus the root ({n + 1}), got {len(P)} and {len(Q)}")
    tree = DraftTree()
    for pa, tok in zip(parent, tokens):                     # breadth first: a parent precedes its children
        tree.add(int(pa), int(tok))
    return expected_accepted(tree, {v: P[v + 1] for v in tree.children}, {v: Q[v + 1] for v in tree.children},
                             verifier)


def control_name(rule) -> str:
    """The node-level rule a path rule extends (its control variate): ``rule.node_rule`` or ``"rrs"``."""
    return getattr(rule, "node_rule", "rrs")


def rule_expected(rule, P, Q, parent, tokens, depth) -> float:
    """Exact expected accepted nodes of a path-level ``rule`` on one drafted tree: ``sum_r stop[r] depth[r]``."""
    if hasattr(rule, "plan_tree"):
        plan = rule.plan_tree(P, Q, parent, tokens)
    else:                                                       # a chain: rows 0..L are its nodes in order
        plan = rule.plan(P, Q[:-1], tokens)
    return float(plan.stop @ depth)                             # E[tau] = sum_r P(keep r) depth(r)


def path_efficiency(p: np.ndarray, q: np.ndarray, shape: TreeShape, exact: dict, rules=DEFAULT_PATH_RULES,
                    n_trees: int = 128, rng: np.random.Generator | None = None) -> dict:
    """``{rule: (block efficiency, standard error)}`` of the path-level ``rules`` serving ``shape``.

    Parameters
    ----------
    p, q : ndarray, shape (n, V), float64 -- the (family, T) pairs (each tree node picks one uniformly)
    shape : TreeShape (i.i.d. drafting; others give ``{}``)
    exact : dict name -> float -- closed-form (exact) block efficiencies of node-level rules on ``shape`` for
        these pairs; must hold ``"rrs"``, and the control of every rule (:func:`control_name`) where
        available (a rule whose control is missing falls back to ``rrs``)
    rules : names of registered path-level verifiers
    n_trees : int >= 2 -- sampled trees (the same trees for every rule)
    rng : numpy.random.Generator

    Returns
    -------
    dict name -> (float, float): ``exact[ctl] + mean(E_rule - E_ctl)`` and the s.e. of that paired mean
    (tokens per target call).

    Raises
    ------
    ValueError -- ``n_trees`` < 2, an unknown rule name, no finite ``"rrs"`` in ``exact``, ``p`` / ``q`` not
    two (n, V) arrays of laws of one shape, a malformed ``shape``.
    TypeError -- ``rng`` not a numpy Generator.
    """
    if isinstance(n_trees, bool) or not isinstance(n_trees, (int, np.integer)) or n_trees < 2:
        raise ValueError(f"n_trees must be an integer >= 2 (a standard error needs two trees), got {n_trees!r}")
    from .._validation import as_law
    from ..verifiers.registry import get_verifier

    if np.ndim(p) != 2 or np.shape(p) != np.shape(q):
        raise ValueError(f"p and q must be (n, V) arrays of the same shape (n pairs), got {np.shape(p)} and "
                         f"{np.shape(q)}")
    p, q = (np.asarray(as_law(x, name=name), dtype=np.float64) for x, name in ((p, "p"), (q, "q")))
    shape = TreeShape.parse(shape)
    if not isinstance(exact, dict) or not all(isinstance(v, (int, float, np.floating)) and np.isfinite(v)
                                              for v in exact.values()):
        raise ValueError(f"exact must be a dict of finite closed-form block efficiencies, got {exact!r}")
    if "rrs" not in exact:
        raise ValueError("exact needs the closed-form block efficiency of 'rrs' (the default control)")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    built = {name: get_path_verifier(name) for name in rules}
    todo = {name: r for name, r in built.items() if serves_shape(r, shape)}
    if not todo:
        return {}
    ctl = {name: control_name(r) if control_name(r) in exact else "rrs" for name, r in todo.items()}
    walkers = {c: get_verifier(c) for c in set(ctl.values())}
    rng = np.random.default_rng(0) if rng is None else rng
    diffs = {name: np.empty(n_trees) for name in todo}
    for t in range(n_trees):
        P, Q, par, tok, depth = sample_tree(p, q, shape, rng)
        base = {c: walk_expected(P, Q, par, tok, w) for c, w in walkers.items()}
        for name, r in todo.items():
            diffs[name][t] = rule_expected(r, P, Q, par, tok, depth) - base[ctl[name]]
    return {name: (float(exact[ctl[name]] + d.mean()), float(d.std(ddof=1) / np.sqrt(n_trees)))
            for name, d in diffs.items()}
