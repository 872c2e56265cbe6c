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
    return int(pair.vocab_size)


def prefix_laws(pair, depth: int, context=()) -> dict:
    """``{prefix: (p (V,), q (V,))}`` for every token prefix of length ``0..depth`` after ``context``."""
    V = int(pair.vocab_size)
    ctx = tuple(int(t) for t in context)
    prefixes = [pre for n in range(depth + 1) for pre in itertools.product(range(V), repeat=n)]
    p, q = pair.laws([ctx + pre for pre in prefixes])
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
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
