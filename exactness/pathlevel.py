"""Monte Carlo certification of a path-level verifier on a draft/target pair.

:func:`certify_path` runs whole decoding steps -- draft ``L`` tokens from the draft model, verify
them with the rule's own :meth:`~resispec.pathlevel.PathVerifier.verify`, continue the emitted
``tau + 1`` tokens with the target up to ``L + 1`` tokens -- and tests the counts of the
``V^(L+1)`` outcomes against the target's law of ``L + 1`` tokens (chi-square / G-test with
pooling, :func:`exactness.gof.gof_test`).

What it detects: any bias of the law of the first ``L + 1`` output tokens (the exactness
statement of ``docs/pathlevel.md``), in the plan or in the sampler, whose chi-square
non-centrality ``n sum (h - p)^2 / p`` is large; a planted bug of ``exactness.path_mutants``
with horizon TV >= 0.02 on the test pairs is flagged at n = 4000 (``tests/test_pathlevel.py``).
What it cannot: biases that vanish in the law of ``L + 1`` tokens (e.g. a wasted bonus token).
The exact check is :func:`resispec.pathlevel.analyse_path` (TV by enumeration).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec.pathlevel.analysis import check_pair, continuation, prefix_laws, tree_nodes
from resispec.sampling import _inverse_cdf

from .gof import gof_test


@dataclass(frozen=True)
class PathCertificate:
    """Outcome of :func:`certify_path`: ``passed`` (p-value >= alpha), ``p_value``, ``n``, ``counts`` (V^(L+1),)."""

    passed: bool
    p_value: float
    n: int
    counts: np.ndarray


def sample_horizon(verifier, pair, L: int, n: int, rng: np.random.Generator, context=()) -> np.ndarray:
    """``n`` sampled first-``L+1``-token outcomes, (n,) int64 flat indices into ``V^(L+1)`` (row-major).

    Each: drafts ``d_{i+1} ~ q(. | d_1..d_i)``, ``verifier.verify(p rows (L+1, V), q rows (L, V), d, rng)``,
    then the target continues the emitted tokens to ``L + 1``.
    """
    V = check_pair(pair, L)
    laws = prefix_laws(pair, L, context)
    one = np.empty(1)
    out = np.empty(n, dtype=np.int64)
    for s in range(n):
        d = []
        for i in range(L):
            one[0] = rng.random()
            d.append(int(_inverse_cdf(laws[tuple(d)][1][None, :], one)[0]))
        p = np.stack([laws[tuple(d[:i])][0] for i in range(L + 1)])
        q = np.stack([laws[tuple(d[:i])][1] for i in range(L)])
        r = verifier.verify(p, q, np.array(d, dtype=np.int64), rng)
        z = d[: r.accepted] + [r.token]
        while len(z) < L + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (L + 1)))
    return out


def certify_path(verifier, pair, L: int, *, n: int = 4000, alpha: float = 1e-3, seed=0, context=()) -> PathCertificate:
    """Chi-square test of the first ``L + 1`` output tokens of ``verifier`` against the target's law.

    Parameters
    ----------
    verifier : resispec.pathlevel.PathVerifier
    pair : object with ``vocab_size`` and ``laws(contexts)`` (e.g. ``MarkovPair``)
    L : int >= 1
        Drafts per step.
    n : int
        Decoding steps sampled.
    alpha : float
        False-alarm rate of an exact rule.
    seed : int or numpy.random.Generator
    context : sequence of int

    Returns
    -------
    PathCertificate

    Raises
    ------
    TypeError, ValueError
        Bad pair, L or n; laws the rule rejects.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (decoding steps to sample), got {n!r}")
    V = check_pair(pair, L)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    target = continuation(prefix_laws(pair, L, context), V, L + 1)[0].ravel()
    counts = np.bincount(sample_horizon(verifier, pair, L, n, rng, context), minlength=target.size)
    res = gof_test(counts, target)
    p_value = float(res.pvalue)
    return PathCertificate(bool(p_value >= alpha), p_value, int(n), counts)


def sample_tree_horizon(verifier, pair, branching, n: int, rng: np.random.Generator, context=()) -> np.ndarray:
    """As :func:`sample_horizon` for a tree rule (``verify_tree``) on iid-drafted trees of shape ``branching``:
    (n,) int64 flat indices into ``V^(D+1)`` of the emitted tokens continued by the target."""
    branching = tuple(int(k) for k in branching)
    D = len(branching)
    V = check_pair(pair, D)
    laws = prefix_laws(pair, D, context)
    parent, _ = tree_nodes(branching)
    N = len(parent) - 1
    par_ids = np.array(parent[1:], dtype=np.int64) - 1
    one = np.empty(1)
    out = np.empty(n, dtype=np.int64)
    for s in range(n):
        paths, toks = [()], []
        for r in range(1, N + 1):
            one[0] = rng.random()
            t = int(_inverse_cdf(laws[paths[parent[r]]][1][None, :], one)[0])     # iid child of its parent
            toks.append(t)
            paths.append(paths[parent[r]] + (t,))
        p = np.stack([laws[paths[r]][0] for r in range(N + 1)])
        q = np.stack([laws[paths[r]][1] for r in range(N + 1)])
        kept, token = verifier.verify_tree(p, q, par_ids, np.array(toks, dtype=np.int64), rng)
        z = [toks[i] for i in kept] + [token]
        while len(z) < D + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (D + 1)))
    return out


def certify_tree_rule(verifier, pair, branching, *, n: int = 4000, alpha: float = 1e-3, seed=0,
                      context=()) -> PathCertificate:
    """Chi-square test of the first ``D + 1`` output tokens of a tree rule against the target's law.

    Same contract as :func:`certify_path`, for ``verifier.verify_tree`` on iid-drafted trees of shape
    ``branching`` (tuple of int).  Detects biases of the sampled step (drafting, the rule's draws, the
    continuation) large enough for the chi-square at ``n``; the exact check is
    :func:`resispec.pathlevel.analyse_tree`.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1 (decoding steps to sample), got {n!r}")
    D = len(tuple(branching))
    V = check_pair(pair, D)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    target = continuation(prefix_laws(pair, D, context), V, D + 1)[0].ravel()
    counts = np.bincount(sample_tree_horizon(verifier, pair, branching, n, rng, context), minlength=target.size)
    res = gof_test(counts, target)
    return PathCertificate(bool(res.pvalue >= alpha), float(res.pvalue), int(n), counts)
