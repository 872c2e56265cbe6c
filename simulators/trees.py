"""Token trees: exact expected block efficiency and Monte Carlo tree decoding.

A tree of shape ``(k_1, ..., k_D)`` (:class:`resispec.trees.TreeShape`)
drafts ``k_{d+1}`` children at every node of depth ``d`` from the draft's
law at that node; the target runs once on the whole tree.  Verification
walks from the root: at each node the verifier accepts a child (and moves
to it) or emits a residual token and stops; after a full path the target
emits a bonus token (``docs/RESISPEC.md`` section 6; SpecInfer, arXiv
2305.09781; Sequoia, arXiv 2402.12374).  Block efficiency = expected tokens
emitted per target call.

Exact recursion: with ``M_d(c, x)`` the per-token acceptance mass at a
depth-``d`` node with context ``c`` (:func:`simulators.acceptance.acceptance_mass`),

    E(c, d) = 1 + sum_x M_d(c, x) E(c + x, d + 1),      E(c, D) = 1,

so for i.i.d. per-node pairs ``E = 1 + a_1 + a_1 a_2 + ... + a_1...a_D``
with ``a_d`` the acceptance rate with ``k_d`` candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import as_laws, check_rng
from resispec.sampling import draw_candidates, inverse_cdf
from resispec.trees import TreeShape

from .acceptance import acceptance_mass, node_split
from .autoregressive import AutoregressivePair, as_autoregressive, check_contexts

#: Largest number of (context, token) rows whose laws are requested at once.
_LAW_ROWS = 1 << 22


@dataclass(frozen=True)
class TreeEfficiency:
    """Expected block efficiency of a verifier on a tree.

    Attributes
    ----------
    block_efficiency : float
        Expected tokens emitted per target call (>= 1).
    acceptance : ndarray, shape (D,), float64
        Probability of accepting a child at depth ``d`` given the walk got
        there (``a_d``; for autoregressive pairs averaged over the contexts
        reached).
    error_bound : float
        Tokens possibly lost by pruning (0 when exact); the true value lies in
        ``[block_efficiency, block_efficiency + error_bound]``.  For
        ``method="monte_carlo"`` per-node acceptances it is 0 and
        ``stderr`` carries the uncertainty.
    stderr : float
        Standard error from Monte Carlo per-node acceptances (0 when exact).
    method : str
        How the per-node acceptance was computed.
    nodes : int
        Tree nodes (contexts) whose laws were evaluated.
    """

    block_efficiency: float
    acceptance: np.ndarray
    error_bound: float
    stderr: float
    method: str
    nodes: int


def tree_drafting(verifier, shape: TreeShape, strict: bool = True) -> str:
    """Candidate law used on ``shape`` by ``verifier``.

    Raises ValueError when the verifier is exact only for another drafting
    (``strict=False`` simulates the mismatch, e.g. to show ``rrs`` is biased
    on without-replacement trees).
    """
    vd = getattr(verifier, "drafting", "iid")
    if vd != "any" and vd != shape.drafting and strict:
        raise ValueError(
            f"verifier {getattr(verifier, 'name', verifier)!r} is exact for drafting={vd!r} but the tree "
            f"shape uses drafting={shape.drafting!r}; build the shape with TreeShape.parse(spec, drafting={vd!r}) "
            "or pass strict=False to simulate the (biased) mismatch")
    return shape.drafting


def block_efficiency_iid(verifier, shape, p, q, *, method: str = "auto", n_samples: int = 256,
                         rng: np.random.Generator | None = None, strict: bool = True) -> TreeEfficiency:
    """Exact block efficiency when every node draws its own (p, q) i.i.d.

    ``E = 1 + sum_d prod_{j <= d} a_j`` with ``a_j`` the mean acceptance
    rate over the given pairs with ``k_j`` candidates (independent nodes, so
    the expectation of the product is the product of expectations).

    Parameters
    ----------
    verifier : Verifier
    shape : TreeShape or str
        E.g. ``"4,2,2,1"`` (iid drafting) or ``TreeShape.parse("4,2", "without_replacement")``.
    p, q : array_like, shape (V,) or (B, V), float64
        One pair (used at every node) or B pairs (each node draws one uniformly).
    method, n_samples, rng
        Passed to :func:`simulators.acceptance.acceptance_mass`.
    strict : bool
        See :func:`tree_drafting`.

    Returns
    -------
    TreeEfficiency

    Raises
    ------
    ValueError
        Malformed shape, drafting mismatch, bad laws, enumeration too large.
    """
    shape = TreeShape.parse(shape)
    d = tree_drafting(verifier, shape, strict)
    p2, q2, _ = as_laws(p, q)
    acc, var, meth = {}, {}, set()
    for k in sorted(set(shape.branching)):
        am = acceptance_mass(verifier, p2, q2, k, drafting=d, method=method, n_samples=n_samples, rng=rng)
        acc[k] = float(am.acceptance.mean())
        var[k] = float(np.sum(am.stderr ** 2)) / am.stderr.size ** 2
        meth.add(am.method)
    a = np.array([acc[k] for k in shape.branching])
    prefix = np.cumprod(a)
    E = 1.0 + float(prefix.sum())
    # delta method: dE/da_j = sum_{d >= j} prod_{i <= d, i != j} a_i
    se2 = 0.0
    for j, k in enumerate(shape.branching):
        if var[k] > 0:
            grad = float(np.sum(prefix[j:] / a[j])) if a[j] > 0 else float(np.sum(np.cumprod(np.r_[1.0, a[j + 1:]])))
            se2 += grad ** 2 * var[k]
    return TreeEfficiency(E, a, 0.0, float(np.sqrt(se2)), "+".join(sorted(meth)), len(acc) * p2.shape[0])


def block_efficiency(verifier, shape, pair, context=(), *, prune: float = 0.0, max_nodes: int = 200_000,
                     method: str = "auto", n_samples: int = 256, rng: np.random.Generator | None = None,
                     strict: bool = True) -> TreeEfficiency:
    """Exact expected block efficiency on an autoregressive pair, by recursion.

    Walks the tree level by level over every accepted token ``x`` with
    positive acceptance mass, merging contexts with equal ``pair.state``
    (a Markov pair needs at most V contexts per depth).  Branches whose
    probability of being reached is ``<= prune`` are dropped; the tokens they
    could have added are bounded in ``error_bound``.

    Parameters
    ----------
    verifier : Verifier
    shape : TreeShape or str
    pair : AutoregressivePair (or anything :func:`as_autoregressive` accepts)
    context : sequence of int
        Tokens before the tree's root.
    prune : float >= 0
        Reach-probability threshold below which a branch is dropped (0 = exact).
    max_nodes : int
        Largest number of distinct contexts per depth before raising.
    method, n_samples, rng
        Passed to :func:`simulators.acceptance.acceptance_mass`.

    Returns
    -------
    TreeEfficiency

    Raises
    ------
    ValueError
        Malformed shape, drafting mismatch, context outside the vocabulary,
        negative ``prune``, or more than ``max_nodes`` contexts at a depth
        (the message suggests ``prune``).
    """
    shape = TreeShape.parse(shape)
    d_law = tree_drafting(verifier, shape, strict)
    pair = as_autoregressive(pair)
    if not np.isfinite(prune) or prune < 0:
        raise ValueError(f"prune must be a finite number >= 0, got {prune}")
    ctx0 = check_contexts([context], pair.vocab_size)[0]
    frontier = {pair.state(ctx0): [ctx0, 1.0]}
    total, bound, var, nodes = 1.0, 0.0, 0.0, 0
    acc = np.zeros(shape.depth)
    methods = set()
    V = pair.vocab_size
    # Laws depend on the state only; for static / last-token pairs the number of
    # distinct states is small, so per-node masses are cached across depths.
    cacheable = pair.state_kind in ("static", "last") and method != "monte_carlo"
    cache: dict = {}

    def node_masses(chunk, k):
        if not cacheable:
            p, q = pair.laws(chunk)
            am = acceptance_mass(verifier, p, q, k, drafting=d_law, method=method, n_samples=n_samples, rng=rng)
            methods.add(am.method)
            return am.mass, am.stderr
        keys = [pair.state(c) for c in chunk]
        todo: dict = {}
        for c, key in zip(chunk, keys):
            if (key, k) not in cache and key not in todo:
                todo[key] = c
        if todo:
            p, q = pair.laws(list(todo.values()))
            am = acceptance_mass(verifier, p, q, k, drafting=d_law, method=method, n_samples=n_samples, rng=rng)
            methods.add(am.method)
            for j, key in enumerate(todo):
                cache[(key, k)] = (am.mass[j], am.stderr[j])
        return (np.stack([cache[(key, k)][0] for key in keys]), np.array([cache[(key, k)][1] for key in keys]))

    for depth, k in enumerate(shape.branching):
        ctxs = [c for c, _ in frontier.values()]
        w = np.array([x for _, x in frontier.values()])
        nodes += len(ctxs)
        reached_here = w.sum()
        step = max(1, _LAW_ROWS // V)
        new: dict = {}
        gained = 0.0
        last = depth == shape.depth - 1
        for s in range(0, len(ctxs), step):
            mass, err = node_masses(ctxs[s:s + step], k)
            r = w[s:s + step, None] * mass                           # (b, V) reach of each child token
            gained += float(r.sum())
            var += float(np.sum((w[s:s + step] * err) ** 2))
            if last:
                continue
            keep = r > prune
            bound += float(r[~keep].sum()) * (shape.depth - 1 - depth)
            if pair.state_kind in ("static", "last"):
                _merge_vectorised(new, pair, ctxs[s], np.where(keep, r, 0.0))
            else:
                for b, x in zip(*np.nonzero(keep)):
                    c = ctxs[s + b] + (int(x),)
                    key = pair.state(c)
                    if key in new:
                        new[key][1] += float(r[b, x])
                    else:
                        new[key] = [c, float(r[b, x])]
            if len(new) > max_nodes:
                raise ValueError(
                    f"depth {depth + 1} reaches more than max_nodes={max_nodes} distinct contexts; "
                    f"pass prune > 0 (e.g. prune=1e-6, with error_bound reported) or raise max_nodes")
        total += gained
        acc[depth] = gained / reached_here if reached_here > 0 else 0.0
        frontier = new
        if not frontier and not last:
            break
    return TreeEfficiency(total, acc, bound, float(np.sqrt(var)), "+".join(sorted(methods)), nodes)


def _merge_vectorised(new: dict, pair, rep: tuple, r: np.ndarray) -> None:
    """Merge children whose state is static or the last token (no Python loop over V)."""
    if pair.state_kind == "static":
        tot = float(r.sum())
        if tot > 0:
            c = rep + (int(np.argmax(r.sum(axis=0))),)
            key = pair.state(c)
            new.setdefault(key, [c, 0.0])[1] += tot
        return
    col = r.sum(axis=0)
    for x in np.flatnonzero(col):
        c = rep + (int(x),)
        key = pair.state(c)
        new.setdefault(key, [c, 0.0])[1] += float(col[x])


@dataclass(frozen=True)
class TreeDecode:
    """Sequences emitted by Monte Carlo tree decoding.

    Attributes
    ----------
    tokens : ndarray, shape (n, n_tokens), int64
        The first ``n_tokens`` tokens emitted after the context, per sequence.
    first_block : ndarray, shape (n,), int64
        Tokens emitted by the first target call (the block from the given context).
    target_calls : ndarray, shape (n,), int64
        Target calls used to emit ``n_tokens`` tokens.
    """

    tokens: np.ndarray
    first_block: np.ndarray
    target_calls: np.ndarray

    @property
    def block_efficiency(self) -> float:
        """Mean tokens of the first block (estimates :func:`block_efficiency`)."""
        return float(self.first_block.mean())

    @property
    def stderr(self) -> float:
        """Standard error of :attr:`block_efficiency`."""
        return float(self.first_block.std(ddof=1) / np.sqrt(self.first_block.size))


def _block(verifier, shape, pair, contexts, drafting, rng):
    """One target call for every context: returns the emitted token lists."""
    B = len(contexts)
    out = [[] for _ in range(B)]
    cur = list(contexts)
    active = np.arange(B)
    for k in shape.branching:
        p, q = pair.laws([cur[i] for i in active])
        cands = draw_candidates(q, k, drafting, rng)              # (b, k) children of this node
        res = verifier.verify(p, q, cands, rng)                    # one emitted token per node
        for j, i in enumerate(active):
            t = int(res.tokens[j])
            out[i].append(t)
            cur[i] = cur[i] + (t,)
        active = active[res.accepted >= 0]                         # accepted -> move to that child
        if active.size == 0:
            return out
    p, _ = pair.laws([cur[i] for i in active])                     # full path: bonus token
    bonus = inverse_cdf(p, rng.random(active.size))
    for j, i in enumerate(active):
        out[i].append(int(bonus[j]))
    return out


def decode_tree(verifier, shape, pair, rng: np.random.Generator, *, n: int = 1000, context=(),
                n_tokens: int = 2, strict: bool = True) -> TreeDecode:
    """Monte Carlo tree decoding: emit sequences, one target call per block.

    Each block drafts the children of the node being verified from the
    draft's law at its context, verifies them with ``verifier`` and either
    moves to the accepted child or stops with the residual token; after a full
    path it adds a bonus token from the target.  Only the children on the
    verified path are drafted: unvisited subtrees never influence the
    verification, so the emitted sequence has the same law as when the whole
    tree is drafted up front.  Blocks repeat until ``n_tokens`` are emitted.

    Parameters
    ----------
    verifier : Verifier
    shape : TreeShape or str
    pair : AutoregressivePair (or anything :func:`as_autoregressive` accepts)
    rng : numpy.random.Generator
    n : int >= 1
        Independent sequences.
    context : sequence of int
    n_tokens : int >= 1
    strict : bool
        See :func:`tree_drafting`.

    Returns
    -------
    TreeDecode

    Raises
    ------
    ValueError, TypeError
        Malformed shape, drafting mismatch, bad context, rng, ``n`` or ``n_tokens``.
    """
    shape = TreeShape.parse(shape)
    drafting = tree_drafting(verifier, shape, strict)
    pair = as_autoregressive(pair)
    rng = check_rng(rng)
    for nm, val in (("n", n), ("n_tokens", n_tokens)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{nm} must be an integer >= 1, got {val!r}")
    ctx0 = check_contexts([context], pair.vocab_size)[0]
    emitted = [[] for _ in range(n)]
    calls = np.zeros(n, dtype=np.int64)
    first = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        blocks = _block(verifier, shape, pair, [ctx0 + tuple(emitted[i]) for i in todo], drafting, rng)
        for j, i in enumerate(todo):
            if calls[i] == 0:
                first[i] = len(blocks[j])
            calls[i] += 1
            emitted[i].extend(blocks[j])
        todo = np.array([i for i in todo if len(emitted[i]) < n_tokens], dtype=np.int64)
    tokens = np.array([e[:n_tokens] for e in emitted], dtype=np.int64)
    return TreeDecode(tokens, first, calls)


def exact_two_token_law(verifier, shape, pair, context=(), *, strict: bool = True) -> np.ndarray:
    """Exact joint law of the first two tokens emitted by tree decoding.

    By enumeration of every candidate tuple at each node (tiny vocabularies):
    with ``M_d, R_d`` the accepted / residual parts of the emitted law at a
    depth-``d`` node (:func:`simulators.acceptance.node_split`) and ``F_d``
    the law of the first token emitted from a depth-``d`` node (``M_d + R_d``,
    or the target for the bonus at depth ``D``)::

        L(y1, y2) = M_0(c, y1) F_1(c + y1, y2) + R_0(c, y1) F_0(c + y1, y2)

    (after a residual the next target call restarts at the root).  Equals
    ``p(y1 | c) p(y2 | c + y1)`` for an exact verifier.

    Returns
    -------
    ndarray, shape (V, V), float64

    Raises
    ------
    ValueError
        Malformed shape, drafting mismatch, bad context, enumeration too large.
    """
    shape = TreeShape.parse(shape)
    drafting = tree_drafting(verifier, shape, strict)
    pair = as_autoregressive(pair)
    c0 = check_contexts([context], pair.vocab_size)[0]
    V = pair.vocab_size

    def split(ctxs, depth):
        p, q = pair.laws(ctxs)
        if depth == shape.depth:
            return np.zeros_like(p), p
        return node_split(verifier, p, q, shape.branching[depth], drafting=drafting)

    M0, R0 = split([c0], 0)
    nxt = [c0 + (y,) for y in range(V)]
    M1, R1 = split(nxt, 1)
    Mr, Rr = split(nxt, 0)
    return M0[0][:, None] * (M1 + R1) + R0[0][:, None] * (Mr + Rr)


def two_token_sampler(verifier, shape, pair, context=(), *, strict: bool = True):
    """A sampler ``(rng, m) -> (m,) int64`` of ``y1 * V + y2`` from Monte Carlo tree decoding.

    Plug it into :func:`exactness.certify_sampler` with the law
    ``outer(p(. | c), p(. | c + y1)).ravel()`` (see :func:`certify_tree`).
    """
    shape = TreeShape.parse(shape)
    pair = as_autoregressive(pair)
    V = pair.vocab_size

    def sample(rng, m):
        out = decode_tree(verifier, shape, pair, rng, n=int(m), context=context, n_tokens=2, strict=strict)
        return out.tokens[:, 0] * V + out.tokens[:, 1]

    return sample


def target_two_token_law(pair, context=()) -> np.ndarray:
    """``p(y1 | c) p(y2 | c + y1)``, shape (V, V), float64: what exact tree decoding must emit."""
    pair = as_autoregressive(pair)
    c0 = check_contexts([context], pair.vocab_size)[0]
    p1, _ = pair.laws([c0])
    p2, _ = pair.laws([c0 + (y,) for y in range(pair.vocab_size)])
    return p1[0][:, None] * p2


def certify_tree(verifier, shape, pair, context=(), *, n: int = 20_000, alpha: float = 1e-3, seed=0,
                 strict: bool = True):
    """Certify the joint law of the first two tokens of tree decoding with the exactness harness.

    Runs :func:`exactness.certify_sampler` (pooled Pearson chi-square and
    G-test) on ``n`` decoded sequences against ``p(y1 | c) p(y2 | c + y1)``.

    Returns
    -------
    exactness.Certificate  (``passed``, ``statistic``, ``pvalue``, ``detectable_tv``, ...)

    Raises
    ------
    ValueError, TypeError
        As :func:`decode_tree`, and for bad ``n`` / ``alpha``.
    """
    from exactness import certify_sampler

    law = target_two_token_law(pair, context).ravel()
    return certify_sampler(two_token_sampler(verifier, shape, pair, context, strict=strict), law, n,
                           alpha=alpha, seed=seed)


__all__ = ["TreeEfficiency", "certify_tree", "target_two_token_law", "two_token_sampler", "TreeDecode", "block_efficiency", "block_efficiency_iid", "decode_tree",
           "exact_two_token_law", "tree_drafting", "AutoregressivePair"]
