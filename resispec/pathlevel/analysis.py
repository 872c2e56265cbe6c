"""Exact analysis of a path-level rule on an autoregressive draft/target pair, by enumeration.

A pair is any object with ``vocab_size`` and ``laws(contexts) -> (p (B, V), q (B, V))`` (e.g.
``simulators.autoregressive.MarkovPair``).  :func:`analyse_path` enumerates every drafted chain
``d`` in ``V^L`` (probability ``Q(d) = prod_i q_i(d_{i+1})``), reads the rule's
:class:`~resispec.pathlevel.base.PathPlan` at each, and returns

- the **horizon law**: the law of the first ``L + 1`` output tokens when the emitted
  ``tau + 1`` tokens are continued by the target (the exactness statement of
  ``docs/pathlevel.md``: it must equal the target's law of ``L + 1`` tokens);
- the target's law of ``L + 1`` tokens and the TV between the two;
- the exact expected accepted length ``E[tau]`` (block efficiency is ``E[tau] + 1``).

Cost: ``V^L`` plans plus ``O(L V^(L+1))`` per plan; meant for ``V^(L+1) <= ~10^5``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

#: Largest ``V^(L+1)`` :func:`analyse_path` enumerates.
MAX_CELLS = 200_000


@dataclass(frozen=True)
class PathAnalysis:
    """Exact law of one decoding step of a path-level rule.

    Attributes
    ----------
    horizon_law : ndarray, shape (V,) * (L + 1), float64
        Law of the first L + 1 tokens: the emitted block continued by the target.
    target_law : ndarray, shape (V,) * (L + 1), float64
        The target's law of L + 1 tokens after ``context``.
    expected_accepted : float
        ``E[tau]``, accepted drafts per step (0..L).
    tv : float
        ``0.5 * sum |horizon_law - target_law|``.
    """

    horizon_law: np.ndarray
    target_law: np.ndarray
    expected_accepted: float
    tv: float

    @property
    def block_efficiency(self) -> float:
        """Tokens emitted per target call, ``E[tau] + 1``."""
        return self.expected_accepted + 1.0


def check_pair(pair, L) -> int:
    """``V`` of ``pair``; TypeError without ``laws`` / ``vocab_size``, ValueError for ``L`` not an int >= 1."""
    if not hasattr(pair, "laws") or not hasattr(pair, "vocab_size"):
        raise TypeError("pair must have vocab_size and laws(contexts) -> (p, q), e.g. "
                        "simulators.autoregressive.MarkovPair.random(rng, 3)")
    if isinstance(L, bool) or not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"L must be an integer >= 1 (drafted tokens per step), got {L!r}")
    V = pair.vocab_size
    if isinstance(V, bool) or not isinstance(V, (int, np.integer)) or V < 1:
        raise ValueError(f"pair.vocab_size must be an integer >= 1, got {V!r}")
    return int(V)


def prefix_laws(pair, depth: int, context=()) -> dict:
    """``{prefix: (p (V,), q (V,))}`` for every token prefix of length ``0..depth`` after ``context``."""
    V = int(pair.vocab_size)
    ctx = tuple(int(t) for t in context)
    prefixes = [pre for n in range(depth + 1) for pre in itertools.product(range(V), repeat=n)]
    p, q = pair.laws([ctx + pre for pre in prefixes])
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    for name, a in (("p", p), ("q", q)):           # the laws every analysis and the LP bound rest on
        if a.shape != (len(prefixes), V):
            raise ValueError(f"pair.laws returned {name} of shape {a.shape} for {len(prefixes)} contexts; "
                             f"expected ({len(prefixes)}, {V}) = (contexts, vocab_size)")
        bad = ~np.isfinite(a).all(axis=1) | (a < 0).any(axis=1) | (np.abs(a.sum(axis=1) - 1.0) > 1e-9)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ValueError(f"pair.laws returned a {name} row that is not a probability law (finite, >= 0, sum "
                             f"1 within 1e-9) at context {ctx + prefixes[j]}: sum {float(a[j].sum())!r}; fix the pair")
    return {pre: (p[j], q[j]) for j, pre in enumerate(prefixes)}


def continuation(laws: dict, V: int, horizon: int) -> list[np.ndarray]:
    """``cont[m]`` (V,) * horizon: ``prod_{j >= m} p(z_{j+1} | z_1..z_j)``, the target's law of tokens
    ``m+1..horizon`` given the first ``m`` (``cont[0]`` is the target law, ``cont[horizon] = 1``)."""
    cont = [None] * (horizon + 1)
    cont[horizon] = np.ones((V,) * horizon)
    for m in range(horizon - 1, -1, -1):
        step = np.empty((V,) * (m + 1))
        for pre in itertools.product(range(V), repeat=m):
            step[pre] = laws[pre][0]                                # p(z_{m+1} | z_1..z_m)
        cont[m] = step.reshape(step.shape + (1,) * (horizon - m - 1)) * cont[m + 1]
    return cont


def tree_nodes(branching) -> tuple[list[int], list[int]]:
    """``(parent, depth)`` per tree row, BFS order: row 0 is the root (parent -1), rows 1..N the drafted nodes,
    ``branching[j]`` children per node at depth ``j``, siblings consecutive (drawn order)."""
    parent, depth = [-1], [0]
    level = [0]
    for k in branching:
        nxt = []
        for a in level:
            for _ in range(k):
                parent.append(a)
                depth.append(depth[a] + 1)
                nxt.append(len(parent) - 1)
        level = nxt
    return parent, depth


def enumerate_trees(laws: dict, V: int, parent: list[int]):
    """Every drafted tree with iid children: yields ``(tokens (N,) tuple, paths per row, Q(T))`` with Q(T) > 0.

    ``paths[r]`` is the token string from the root to row ``r``; ``Q(T) = prod_n q(T_n | path of its parent)``.
    """
    N = len(parent) - 1
    for T in itertools.product(range(V), repeat=N):
        paths = [()]
        for n in range(1, N + 1):
            paths.append(paths[parent[n]] + (T[n - 1],))
        prob = float(np.prod([laws[paths[parent[n]]][1][T[n - 1]] for n in range(1, N + 1)]))
        if prob > 0:
            yield T, paths, prob


def analyse_tree(verifier, pair, branching, context=()) -> PathAnalysis:
    """Exact horizon law, TV and ``E[accepted]`` of a tree rule (``get_path_verifier("traversal")``) on
    iid-drafted trees of shape ``branching`` (tuple of int, or a string such as ``"2,1"``), by enumeration of
    every drafted tree.

    The rule's :meth:`plan_tree` is read at each tree; the horizon is ``D + 1`` tokens (``D`` the depth).
    Raises TypeError / ValueError for a bad pair, a rule without ``plan_tree``, or ``V^(N + D + 1)`` over
    ``MAX_CELLS * 10``.
    """
    if not hasattr(verifier, "plan_tree"):
        raise TypeError(f"{type(verifier).__name__} has no plan_tree; tree rules: get_path_verifier('traversal')")
    from ..trees import TreeShape

    if branching is None or not isinstance(branching, (str, tuple, list, TreeShape)):
        raise TypeError(f"branching must be a tree shape such as '2,1' or (2, 1), got {branching!r}")
    shape = TreeShape.parse(branching if isinstance(branching, (str, TreeShape)) else tuple(branching))
    if shape.drafting != "iid":
        raise ValueError(f"analyse_tree models iid-drafted trees only; {branching!r} drafts without replacement "
                         "(the tree rules are exact for iid siblings): drop the 'wor:' prefix")
    branching = shape.branching
    D = len(branching)
    V = check_pair(pair, D)
    parent, depth = tree_nodes(branching)
    N = len(parent) - 1
    if V ** (N + D + 1) > 10 * MAX_CELLS:
        raise ValueError(f"V^(N + D + 1) = {V}^{N + D + 1} ~ {float(V) ** (N + D + 1):.3g} exceeds {10 * MAX_CELLS:,}; "
                         "use a smaller V or tree")
    laws = prefix_laws(pair, D, context)
    cont = continuation(laws, V, D + 1)
    horizon = np.zeros((V,) * (D + 1))
    e_acc = 0.0
    par_ids = np.array(parent[1:], dtype=np.int64) - 1
    for T, paths, prob in enumerate_trees(laws, V, parent):
        p = np.stack([laws[paths[r]][0] for r in range(N + 1)])
        q = np.stack([laws[paths[r]][1] for r in range(N + 1)])
        plan = verifier.plan_tree(p, q, par_ids, np.array(T, dtype=np.int64))
        e_acc += prob * float(np.asarray(depth) @ plan.stop)       # E|kept node| = sum_T Q(T) sum_r depth_r P(r)
        for r in range(N + 1):
            if plan.stop[r] == 0:
                continue
            d = depth[r]
            emit = prob * plan.stop[r] * plan.laws[r]
            horizon[paths[r]] += emit.reshape((V,) + (1,) * (D - d)) * cont[d + 1][paths[r]]
    target = cont[0]
    return PathAnalysis(horizon, target, e_acc, 0.5 * float(np.abs(horizon - target).sum()))


def analyse_path(verifier, pair, L: int, context=()) -> PathAnalysis:
    """Exact horizon law, target law, TV and ``E[tau]`` of ``verifier`` on ``pair`` with L drafts per step.

    Parameters
    ----------
    verifier : resispec.pathlevel.PathVerifier
        E.g. ``get_path_verifier("block")``; its own :meth:`plan` is enumerated.
    pair : object with ``vocab_size`` and ``laws(contexts)``
    L : int >= 1
        Drafted tokens per step.
    context : sequence of int
        Tokens before the step.

    Returns
    -------
    PathAnalysis

    Raises
    ------
    TypeError, ValueError
        Bad pair or L; ``V^(L+1) > MAX_CELLS``; laws the rule rejects.
    """
    V = check_pair(pair, L)
    if V ** (L + 1) > MAX_CELLS:
        raise ValueError(f"V^(L+1) = {V ** (L + 1)} cells exceeds {MAX_CELLS}; use a smaller V or L")
    laws = prefix_laws(pair, L, context)
    cont = continuation(laws, V, L + 1)
    horizon = np.zeros((V,) * (L + 1))
    e_tau = 0.0
    taus = np.arange(L + 1)
    for d in itertools.product(range(V), repeat=L):
        qd = np.prod([laws[d[:i]][1][d[i]] for i in range(L)])      # Q(d) = prod_i q_i(d_{i+1})
        if qd == 0:
            continue
        plan = verifier.plan(np.stack([laws[d[:i]][0] for i in range(L + 1)]),
                             np.stack([laws[d[:i]][1] for i in range(L)]), np.array(d, dtype=np.int64))
        e_tau += qd * float(taus @ plan.stop)                        # E[tau] = sum_d Q(d) sum_i i P(tau = i | d)
        for i in range(L + 1):
            if plan.stop[i] == 0:
                continue
            emit = qd * plan.stop[i] * plan.laws[i]                  # P(d, tau = i, y) over y
            # first i tokens fixed to d_1..d_i, token i+1 = y, the rest continued by the target
            horizon[d[:i]] += emit.reshape((V,) + (1,) * (L - i)) * cont[i + 1][d[:i]]
    target = cont[0]
    return PathAnalysis(horizon, target, e_tau, 0.5 * float(np.abs(horizon - target).sum()))
