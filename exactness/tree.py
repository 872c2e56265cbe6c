"""Joint law of two successive emitted tokens on a small draft tree.

The tree (``docs/RESISPEC.md`` section 6): the root ``(p0, q0)`` gets ``k``
candidates; after the first emitted token ``y1`` the target and draft are
``p1[y1], q1[y1]``.

- ``depth = 1``: the candidates are leaves.  If one is accepted (a full
  accept) the second token is the **bonus** token, drawn from
  ``bonus_law(p1[y1], q1[y1])`` -- ``p1[y1]`` for a correct engine (the
  verifier may define ``bonus_law`` to customise it; the harness checks it).
  A verifier that draws the bonus itself offers ``sample_bonus(p, q, rng) ->
  (B,) int64`` (``p, q`` the next node's laws, (B, V) float64, one row per
  full accept, rows of different nodes in one call); the Monte Carlo then
  uses the verifier's own draws (a black box's bonus is tested, not assumed).
- ``depth = 2``: each root candidate has ``k`` children drawn from
  ``q1[x]``; after accepting ``y1`` the verifier runs again on the children.

If every root candidate is rejected, ``y1`` is a residual token and ``y2``
comes from the next round: a fresh verification at node ``y1``.  An exact
engine emits ``(y1, y2)`` with law ``p0[y1] * p1[y1, y2]``.  Enumeration
gives the exact joint law; Monte Carlo samples the same walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import Laws, as_node

from .exact import joint_law
from .gof import gof_test
from .sampling import NodeSampler, _last_positive, _searchsorted_rows


@dataclass(frozen=True)
class TreeResult:
    """Two-token check on a small tree.

    Attributes
    ----------
    exact_tv : float or None
        TV between the exact joint law of (y1, y2) and ``p0 x p1``.
    statistic, pvalue : float
        Chi-square of the sampled pairs against ``p0 x p1`` (pooled).
    n : int
        Sampled pairs.
    df : int
        Degrees of freedom of the pooled test.
    tv_mc : float or None
        Plug-in TV between the sampled pairs and ``p0 x p1``.
    """

    exact_tv: float | None
    statistic: float
    pvalue: float
    n: int
    df: int = 0
    tv_mc: float | None = None


def default_tree(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Second-level laws from one node: ``p1[y] = roll(p, y + 1)``, same for ``q``.

    Returns ``p1, q1`` of shape (V, V): a different law after every first
    token, with the same support structure as ``(p, q)``.
    """
    V = p.size
    idx = (np.arange(V)[None, :] - (np.arange(V)[:, None] + 1)) % V
    return p[idx], q[idx]


def _bonus(verifier, p1: np.ndarray, q1: np.ndarray) -> np.ndarray:
    hook = getattr(verifier, "bonus_law", None)
    if hook is None:
        return p1
    b = np.asarray(hook(p1, q1), dtype=np.float64)
    if b.shape != p1.shape or not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError("verifier.bonus_law(p, q) must return a non-negative (B, V) law")
    return b / b.sum(axis=1, keepdims=True)


_MEMO: dict = {}


def _node_law(verifier, node: Laws, k):
    """Exact joint law at one trusted node (1, V), memoised (the tree checks reuse every node)."""
    key = (id(verifier), node.p.tobytes(), node.q.tobytes(), k)
    if key not in _MEMO:
        if len(_MEMO) > 256:
            _MEMO.clear()
        _MEMO[key] = (verifier, joint_law(verifier, node, None, k))
    return _MEMO[key][1]


def _tree_laws(p0, q0, p1, q1) -> tuple[Laws, Laws]:
    """The root (1, V) and the second level (V, V) as trusted :class:`Laws`, each checked once here.

    ``p0`` may be a one-node ``Laws`` (then ``q0=None``); ``p1, q1`` default
    to :func:`default_tree` of the root, which are laws when the root is.
    """
    root = as_node(p0, q0)
    if root.shape[0] != 1:
        raise ValueError(f"the tree root takes one node: p and q of shape (V,); got {root.shape[0]} rows")
    root = Laws(np.ascontiguousarray(root.p), np.ascontiguousarray(root.q), True)
    if p1 is None or q1 is None:
        return root, Laws(*default_tree(root.p[0], root.q[0]))
    nxt = as_node(p1, q1, names=("p1", "q1"))
    if nxt.shape != (root.shape[1], root.shape[1]):
        raise ValueError(f"p1 and q1 must have shape (V, V) = ({root.shape[1]}, {root.shape[1]}), one law per "
                         f"first token; got {nxt.shape}")
    return root, nxt


def exact_pair_law(verifier, p0, q0, p1, q1, k: int, depth: int = 1) -> np.ndarray:
    """Exact joint law (V, V) of the first two emitted tokens.

    Parameters
    ----------
    verifier : Verifier
    p0, q0 : ndarray, shape (V,), float64 -- root target / draft (or ``p0`` a
        one-node :class:`resispec._validation.Laws`, ``q0=None``: trusted)
    p1, q1 : ndarray, shape (V, V), float64 -- row ``y1``: laws after ``y1``
    k : int, candidates per node
    depth : {1, 2}

    Returns
    -------
    ndarray, shape (V, V): ``[y1, y2]`` probabilities.

    Raises
    ------
    ValueError, TypeError
        Bad laws (checked once, :func:`resispec._validation.as_node`) or depth.
    """
    if depth not in (1, 2):
        raise ValueError(f"depth must be 1 or 2, got {depth!r}")
    root, nxt = _tree_laws(p0, q0, p1, q1)
    return _pair_law(verifier, root, nxt, k, depth)


def _pair_law(verifier, root: Laws, nxt: Laws, k: int, depth: int) -> np.ndarray:
    """:func:`exact_pair_law` on trusted laws (root (1, V), second level (V, V))."""
    J0 = _node_law(verifier, root, k)
    acc, rej = J0[:-1].sum(axis=0), J0[-1]
    V = root.shape[1]
    E = np.zeros((V, V))
    live = np.flatnonzero(acc + rej > 0)
    for y in live:
        E[y] = _node_law(verifier, nxt.row(y), k).sum(axis=0)
    L = _bonus(verifier, nxt.p, nxt.q) if depth == 1 else E
    return acc[:, None] * L + rej[:, None] * E


def sample_pairs(verifier, p0, q0, p1, q1, k: int, n: int, rng: np.random.Generator,
                 depth: int = 1) -> np.ndarray:
    """Monte Carlo of the tree walk: pair counts (V, V) int64 from ``n`` walks (laws as :func:`exact_pair_law`)."""
    if depth not in (1, 2):
        raise ValueError(f"depth must be 1 or 2, got {depth!r}")
    root, nxt = _tree_laws(p0, q0, p1, q1)
    return _sample_pairs(verifier, root, nxt, k, n, rng, depth)


def _sample_pairs(verifier, root_laws: Laws, nxt: Laws, k: int, n: int, rng: np.random.Generator,
                  depth: int) -> np.ndarray:
    """:func:`sample_pairs` on trusted laws."""
    V = root_laws.shape[1]
    root = NodeSampler(verifier, root_laws, None, k).draws(rng, n)
    counts = np.zeros((V, V), dtype=np.int64)
    own = depth == 1 and getattr(verifier, "sample_bonus", None) is not None
    bonus = _bonus(verifier, nxt.p, nxt.q) if depth == 1 and not own else None
    if own:  # the verifier's own bonus draws, all full accepts at once, in draw order (rows of mixed nodes)
        counts += _own_bonus_counts(verifier, nxt, root.tokens[root.accepted >= 0], rng)
    for y in np.unique(root.tokens):
        sel = root.tokens == y
        n_acc = int(np.count_nonzero(sel & (root.accepted >= 0)))
        n_rej = int(np.count_nonzero(sel)) - n_acc
        node = None
        if n_acc and depth == 1 and not own:
            y2 = _searchsorted_rows(np.cumsum(bonus[y]), rng.random(n_acc), _last_positive(bonus[y]))
            counts[y] += np.bincount(y2, minlength=V)
        m = n_rej + (n_acc if depth == 2 else 0)
        if m:
            node = NodeSampler(verifier, nxt.row(y), None, k)
            counts[y] += np.bincount(node(rng, m), minlength=V)
    return counts


#: Fewest calls of a verifier's own ``sample_bonus`` in the tree check (the full accepts split between them).
BONUS_CALLS = 8


def _own_bonus_counts(verifier, nxt: Laws, ys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Counts (V, V) of ``(y1, verifier.sample_bonus(p1[y1], q1[y1], rng))`` for the full accepts ``ys``."""
    from ._checks import check_tokens
    from .sampling import _ELEMS

    V = nxt.shape[1]
    counts = np.zeros((V, V), dtype=np.int64)
    # at least BONUS_CALLS calls: a sampler right only on its first call (a stale cache) would pass were one call
    # to draw every bonus token
    step = max(1, min(_ELEMS // V, -(-ys.size // BONUS_CALLS)))
    name = f"{type(verifier).__name__}.sample_bonus(p, q, rng)"
    for s in range(0, ys.size, step):
        y = ys[s:s + step]
        try:
            y2 = verifier.sample_bonus(nxt.p[y].copy(), nxt.q[y].copy(), rng)
        except (ValueError, TypeError, IndexError) as e:
            raise TypeError(f"{name} failed on a batch of B = {y.size} next-node laws ({e}); it is called with p "
                            f"and q of shape (B, V) = ({y.size}, {V}) float64 and must return (B,) int64 bonus "
                            "tokens") from e
        y2 = check_tokens(y2, V, y.size, name=name)
        np.add.at(counts, (y, y2), 1)
    return counts


def tree_check(verifier, p0, q0, k: int, n: int, rng: np.random.Generator, *, depth: int = 1,
               p1=None, q1=None, exact: bool = True) -> TreeResult:
    """Exact and Monte Carlo check of the first two emitted tokens on a small tree.

    ``p0, q0`` (V,) float64 (or ``p0`` a one-node
    :class:`resispec._validation.Laws` and ``q0=None``, trusted) and ``p1,
    q1`` (V, V), defaulting to :func:`default_tree` of ``(p0, q0)``, are
    checked once here.  Returns :class:`TreeResult`; the p-value tests the
    sampled pairs against ``p0[y1] * p1[y1, y2]``.
    """
    if depth not in (1, 2):
        raise ValueError(f"depth must be 1 or 2, got {depth!r}")
    root, nxt = _tree_laws(p0, q0, p1, q1)
    target = root.p[0][:, None] * nxt.p
    tv = None
    if exact:
        tv = 0.5 * float(np.abs(_pair_law(verifier, root, nxt, k, depth) - target).sum())
    counts = _sample_pairs(verifier, root, nxt, k, n, rng, depth)
    res = gof_test(counts.ravel(), target.ravel())
    m = counts.sum()
    tv_mc = 0.5 * float(np.abs(counts / m - target).sum()) if m else None
    return TreeResult(tv, res.statistic, res.pvalue, n, res.df, tv_mc)
