"""Tree speculative decoding: draft a token tree, verify it in one target pass.

One step (``docs/RESISPEC.md`` section 6)::

    1. draft: the tree depth by depth -- ONE draft level call per depth over
       all nodes of that depth (:mod:`.drafts`; for a model draft one batched
       forward with a tree attention mask, reusing its KV cache); each node's
       children are drawn from its law q (iid or without replacement,
       ``resispec.draw_candidates``).
    2. target: ONE forward over [pending tokens | all tree nodes] with a 4-D
       tree attention mask and per-node position ids (prefix + depth - 1),
       giving the target law p at the root and at every node.
    3. verify: from the root, the registry verifier picks a child (accepted
       candidate) or emits a residual token and stops; after a full path a
       bonus token is drawn from p at the leaf.  A path-level verifier
       (``resispec.pathlevel``, e.g. ``block``) on a chain tree (``1,1,...,1``)
       instead decides the whole drafted chain at once (``docs/pathlevel.md``).
    4. prune both KV caches to the committed prefix + the accepted path.

Exactness: each node's children and their subtrees are drawn from the draft
before any verification coin, the subtree below candidate ``i`` depends only
on ``x_i`` and draft randomness, so the verifier's per-node exactness
(section 2) makes every emitted token follow p given the emitted prefix; the
joint law of the emitted sequence is the target's (tested on a tiny model).
Temperature 0 makes p and q one-hot, so every verifier emits the target's
arg-max: output equals target greedy decoding token for token.

References: SpecInfer (Miao et al. 2024, arXiv 2305.09781), Sequoia
(arXiv 2402.12374), EAGLE-2 (arXiv 2406.16858) for tree attention; the
verifiers' own references are in :mod:`resispec.verifiers`.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass, field

import numpy as np

from ..pathlevel.base import PathVerifier
from ..sampling import draw_candidates, inverse_cdf
from ..trees import TreeShape
from ..verifiers.base import Verifier
from .drafts import Draft, DraftSession, as_draft
from .expected import expected_accepted, serves, target_laws
from .pathwalk import is_chain, verify_path
from .kv import CachedModel
from .laws import SamplingConfig, process_logits
from .tree import ROOT, DraftTree


@dataclass
class DecodeResult:
    """Outcome of decoding one prompt.

    Attributes
    ----------
    tokens : list of int
        New tokens (prompt excluded), at most ``max_new_tokens``.
    target_calls : int
        Target forward passes (the prompt prefill is the first one; every
        call emits >= 1 token).
    draft_calls : int
        Draft forward passes (one per drafted level for a model-free draft).
    draft_levels : int
        Drafted tree levels (:meth:`DraftSession.level` calls).
    accepted : list of int
        Accepted candidates per target call (the call produced accepted + 1 tokens).
    tokens_per_call : list of int
        Tokens each target call added to ``tokens`` (accepted + 1, less what
        ``max_new_tokens`` or an EOS cut off; sums to ``len(tokens)``).
    seconds : float
        Wall-clock time of the whole decode (prefill included).
    cpu_seconds : float
        CPU time of this process over the decode (``time.process_time``, all
        threads): unlike ``seconds`` it does not grow while other processes hold
        the cores, so ratios of it stay fair on an oversubscribed machine.
    target_seconds, draft_seconds : float
        Time inside target / draft forward passes.
    nodes : list of dict
        Per verified node (only with ``record=True``): ``p``, ``q`` (V,)
        float64, ``candidates``, ``depth``.
    expected : dict name -> list of float
        Only with ``also=``: per target call, the exact expected accepted count
        (:func:`resispec.decoding.expected.expected_accepted`) of the driving
        verifier and of every verifier in ``also`` exact for this run's drafting,
        on the SAME trees and target pass (empty otherwise).
    expected_seconds : float
        Wall-clock time spent computing ``expected`` (already taken out of
        ``seconds`` and ``cpu_seconds``, so timings stay those of decoding).
    """

    tokens: list = field(default_factory=list)
    target_calls: int = 0
    draft_calls: int = 0
    draft_levels: int = 0
    accepted: list = field(default_factory=list)
    tokens_per_call: list = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    nodes: list = field(default_factory=list)
    expected: dict = field(default_factory=dict)
    expected_seconds: float = 0.0

    @property
    def block_efficiency(self) -> float:
        """Mean tokens emitted per target call."""
        return len(self.tokens) / max(self.target_calls, 1)

    @property
    def tokens_per_second(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")


def context_length(model) -> int | None:
    """The model's maximum context (``max_position_embeddings``; a Draft's ``context_length``), or None."""
    if isinstance(model, Draft):
        return model.context_length
    return getattr(model.config, "max_position_embeddings", None)


#: Bytes a tree pass holds per node and vocabulary entry (the node's target and draft laws, float64), an
#: upper estimate: a 200-node star at V = 151,936 added 1.1 MB a node to the peak RSS (7.4 bytes an entry).
TREE_BYTES_PER_ENTRY = 16
#: Share of this machine's physical memory a tree's laws may take (the models need the rest).
TREE_MEMORY_SHARE = 0.5


@functools.lru_cache(maxsize=1)
def _physical_memory() -> int | None:
    """Bytes this process may use: physical memory, or a smaller cgroup limit (containers); None if unknown."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                limit = int(f.read().strip())          # "max" (no limit) is not an int
        except (OSError, ValueError):
            continue
        mem = limit if mem is None else min(mem, limit)
    return mem


def check_fits(model, prompt_len: int, max_new_tokens: int, tree: TreeShape | None = None, *, what="target"):
    """Raise ValueError when the prompt, the new tokens or a tree pass exceed the context or the memory.

    A tree pass needs ``prompt_len + max_new_tokens + depth`` positions and
    holds ``num_nodes`` tree tokens in one forward, and the laws of every node:
    ``(num_nodes + 1) V TREE_BYTES_PER_ENTRY`` bytes, refused above
    ``TREE_MEMORY_SHARE`` of this machine's physical memory or of a smaller
    cgroup limit (before any forward, instead of an out-of-memory kill
    mid-run; not checked where neither is known).
    """
    ctx = context_length(model)
    if prompt_len < 1:
        raise ValueError("prompt is empty; pass at least one token")
    mem = _physical_memory() if tree is not None else None
    if mem:
        V = _vocab(model)
        need = (tree.num_nodes + 1) * V * TREE_BYTES_PER_ENTRY   # laws of every node, float64 p and q
        if need > TREE_MEMORY_SHARE * mem:
            most = int(TREE_MEMORY_SHARE * mem / (V * TREE_BYTES_PER_ENTRY)) - 1
            raise ValueError(f"tree {tree} has {tree.num_nodes:,} nodes: their laws over V = {V:,} tokens need "
                             f"~{need / 2**30:.1f} GiB, over half of this machine's {mem / 2**30:.1f} GiB (physical "
                             f"or cgroup limit); use a smaller tree (at most {most:,} nodes here)")
    if ctx is None:
        return
    if prompt_len >= ctx:
        raise ValueError(f"prompt has {prompt_len} tokens but the {what} model's context is {ctx}; "
                         "shorten the prompt (or truncate it)")
    depth = tree.depth if tree is not None else 0
    if tree is not None and tree.num_nodes + 1 > ctx:
        raise ValueError(f"tree {tree} has {tree.num_nodes} nodes, larger than the {what} context of {ctx} "
                         "tokens; use a smaller tree")
    need = prompt_len + max_new_tokens + depth
    if need > ctx:
        raise ValueError(f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) + tree depth ({depth}) = "
                         f"{need} positions exceed the {what} context of {ctx}; lower max_new_tokens or the prompt")


def _check_prompt(prompt_ids, vocab: int) -> list[int]:
    ids = [int(t) for t in np.asarray(prompt_ids, dtype=np.int64).reshape(-1)]
    if not ids:
        raise ValueError("prompt is empty; pass at least one token")
    if min(ids) < 0 or max(ids) >= vocab:
        raise ValueError(f"prompt token ids must lie in [0, {vocab}); got range [{min(ids)}, {max(ids)}]")
    return ids


def _check_max_new(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {n!r}")
    return int(n)


def _vocab(model) -> int:
    if isinstance(model, Draft):
        return int(model.vocab_size)
    return int(model.get_output_embeddings().weight.shape[0])


def check_pair(target, draft, target_tokenizer=None, draft_tokenizer=None) -> None:
    """Raise ValueError when target and draft cannot be paired.

    ``draft``: a transformers model or a :class:`~resispec.decoding.drafts.Draft`.
    They must have the same output vocabulary size and, when both token ->
    id maps are known (tokenizers given, or the Draft's ``tokenizer_vocab()``),
    identical maps.
    """
    vt, vd = _vocab(target), _vocab(draft)
    if vt != vd:
        raise ValueError(f"target has a {vt}-token vocabulary but the draft has {vd}; speculative decoding needs "
                         "a draft over the target's tokenizer and vocabulary")
    if isinstance(draft, Draft) and callable(getattr(draft, "check_target", None)):
        draft.check_target(target)    # a draft built on one target model (the feature head) refuses another
    if draft_tokenizer is None and isinstance(draft, Draft):
        b = draft.tokenizer_vocab()
    else:
        b = None if draft_tokenizer is None else draft_tokenizer.get_vocab()
    if target_tokenizer is not None and b is not None:
        a = target_tokenizer.get_vocab()
        if a != b:
            diff = len(set(a.items()) ^ set(b.items()))
            raise ValueError(f"target and draft tokenizers differ ({len(a)} vs {len(b)} tokens, {diff} entries "
                             "differ); use a draft trained with (or built over) the target's tokenizer")


def resolve_drafting(verifier: Verifier, tree: TreeShape, explicit: bool) -> str:
    """The candidate law to draft with: the verifier's, or the tree's for ``any``.

    ``explicit``: the user asked for ``tree.drafting``; a conflict with the
    verifier's law is an error (e.g. ``rrs`` on without-replacement drafts
    is biased, ``docs/RESISPEC.md`` section 3).
    """
    if verifier.drafting == "any":
        return tree.drafting
    if explicit and tree.drafting != verifier.drafting:
        raise ValueError(f"verifier {verifier.name!r} is exact only for {verifier.drafting!r} drafting, but the "
                         f"tree asks for {tree.drafting!r}; drop the drafting option or pick a matching verifier")
    return verifier.drafting


def _draw(q_row: np.ndarray, k: int, drafting: str, rng) -> np.ndarray:
    if drafting == "without_replacement":
        k = min(k, int(np.count_nonzero(q_row)))  # top-k/top-p/greedy can leave fewer tokens than k
    return draw_candidates(q_row, k, drafting, rng)[0]


def speculative_decode(target, draft, prompt_ids, verifier: Verifier, tree, *, sampling: SamplingConfig,
                       max_new_tokens: int, rng: np.random.Generator, eos_token_id=None,
                       drafting: str | None = None, record: bool = False, on_tokens=None,
                       also=None) -> DecodeResult:
    """Decode one prompt with tree speculative sampling.

    Parameters
    ----------
    target : transformers causal LM (p)
    draft : :class:`~resispec.decoding.drafts.Draft` (q), or a transformers causal LM sharing
        the target's vocabulary (wrapped in ``ModelDraft``); exactness holds for any draft
    prompt_ids : sequence of int, length L
    verifier : resispec.Verifier (numpy backend), e.g. ``get_verifier("resispec")``, or a path-level
        verifier, e.g. ``resispec.pathlevel.get_path_verifier("block")`` (chain trees only)
    tree : TreeShape or str like ``"4,2,2,1"`` (``"1,1,1"``: a chain of 3 drafts)
    sampling : SamplingConfig
        Applied identically to target and draft logits.
    max_new_tokens : int >= 1
    rng : numpy.random.Generator
        All drafting and verification randomness.
    eos_token_id : int or collection of int, optional
        Stop after emitting one of these.
    drafting : {"iid", "without_replacement"}, optional
        Override the candidate law (default: the verifier's; the tree's for
        ``target_only``).  Must match the verifier's law.
    record : bool
        Keep (p, q, candidates) of every verified node in ``result.nodes``.
    on_tokens : callable(list of int), optional
        Called with the tokens emitted by each target call (streaming).
    also : sequence of Verifier, optional
        When given (even empty), every target call also records in
        ``result.expected[name]`` the exact expected accepted count of the
        driving verifier and of each verifier here whose drafting law serves
        this run's trees (iid trees: iid and ``any`` verifiers; without-
        replacement trees: without-replacement and ``any`` ones; others are
        skipped), on the same tree and target pass: no extra forward, no
        randomness drawn, so the decoded tokens are unchanged.  Names
        (``Verifier.name``, the keys) must be distinct; the driver may appear.

    Returns
    -------
    DecodeResult

    Raises
    ------
    ValueError
        Mismatched vocabularies, prompt/tree exceeding the context, bad ids,
        a drafting law the verifier is not exact for, two verifiers of one
        name among the driver and ``also``, a path-level verifier driving a
        tree that is not a chain.
    TypeError
        An entry of ``also`` that is not a Verifier.
    """
    tree = TreeShape.parse(tree, drafting or "iid")
    if isinstance(verifier, PathVerifier) and not is_chain(tree) and not hasattr(verifier, "verify_tree"):
        raise ValueError(f"verifier {verifier.name!r} is a path-level rule that decides a chain of drafts; tree "
                         f"{','.join(map(str, tree.branching))} is not a chain: use a tree like "
                         f"{','.join(['1'] * tree.depth)} (one draft per depth)")
    # a 'wor:' tree (the only way a tree is without-replacement when drafting= is not given) asks for
    # without-replacement drafts as explicitly as drafting= does
    mode = resolve_drafting(verifier, tree, explicit=drafting is not None or tree.drafting == "without_replacement")
    draft = as_draft(draft)
    check_pair(target, draft)
    max_new_tokens = _check_max_new(max_new_tokens)
    ids = _check_prompt(prompt_ids, _vocab(target))
    check_fits(target, len(ids), max_new_tokens, tree, what="target")
    check_fits(draft, len(ids), max_new_tokens, tree, what="draft")
    eos = _eos_set(eos_token_id)
    scored = _scored(verifier, also, mode, tree)
    leaves = any(isinstance(v, PathVerifier) for v in scored)
    S = draft.session(sampling)
    feats = bool(getattr(S, "needs_target_features", False))
    P = CachedModel(target, keep_features=feats)
    res = DecodeResult(expected={v.name: [] for v in scored})
    t0, c0 = time.perf_counter(), time.process_time()
    spent = spent_cpu = 0.0
    while len(res.tokens) < max_new_tokens:
        dtree, q_rows = _draft_tree(S, ids, tree, mode, rng)
        p_logits = _target_pass(P, ids, dtree)
        if scored:
            e0, ec0 = time.perf_counter(), time.process_time()
            laws = target_laws(dtree, p_logits, sampling, leaves=leaves)
            for v in scored:
                res.expected[v.name].append(expected_accepted(dtree, laws, q_rows, v))
            spent, spent_cpu = spent + time.perf_counter() - e0, spent_cpu + time.process_time() - ec0
        walk = verify_path if isinstance(verifier, PathVerifier) else _verify_walk
        emitted, path = walk(dtree, p_logits, q_rows, verifier, sampling, rng, res.nodes if record else None)
        n_pend = len(ids) - P.length
        if feats:  # the target's feature before the next pending token: last accepted node, else the tree's root
            S.observe_target(P.features[n_pend + path[-1] if path else n_pend - 1])
        P.commit(list(range(n_pend)) + [n_pend + i for i in path])
        S.commit(ids, dtree, path)
        res.accepted.append(len(path))
        room = max_new_tokens - len(res.tokens)
        emitted = emitted[:room]
        stop = next((j for j, t in enumerate(emitted) if t in eos), None)
        if stop is not None:
            emitted = emitted[:stop + 1]
        ids.extend(emitted)
        res.tokens.extend(emitted)
        res.tokens_per_call.append(len(emitted))
        if on_tokens is not None:
            on_tokens(emitted)
        if stop is not None:
            break
    res.seconds, res.cpu_seconds = time.perf_counter() - t0 - spent, time.process_time() - c0 - spent_cpu
    res.expected_seconds = spent
    res.target_calls, res.draft_calls, res.draft_levels = P.calls, S.calls, S.levels
    res.target_seconds, res.draft_seconds = P.seconds, S.seconds
    return res


def _scored(verifier: Verifier, also, mode: str, shape: TreeShape | None = None) -> list:
    """The verifiers whose expected accepted count a run records: the driver, then those of ``also`` serving
    ``mode`` (and, for path-level verifiers, the tree ``shape``: chains only)."""
    if also is None:
        return []
    if isinstance(also, (Verifier, PathVerifier)) or isinstance(also, (str, bytes)):
        raise TypeError("also must be a sequence of Verifier objects (e.g. [get_verifier('rrs')]), "
                        f"got {type(also).__name__}")
    also = list(also)
    bad = [type(v).__name__ for v in also if not isinstance(v, (Verifier, PathVerifier))]
    if bad:
        raise TypeError(f"also must hold Verifier objects (numpy backend, get_verifier(name)); got {bad}")
    also = [v for v in also if v is not verifier]
    names = [verifier.name] + [v.name for v in also]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"the driving verifier and also share the name(s) {dup}; expected values are keyed by "
                         "name, so pass each verifier once and no two of one name")
    return [verifier] + [v for v in also if serves(v, mode, shape)]


def _eos_set(eos_token_id) -> set:
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, (int, np.integer)):
        return {int(eos_token_id)}
    return {int(t) for t in eos_token_id}


def _pending(model: CachedModel, ids: list) -> tuple[list, np.ndarray, np.ndarray]:
    """Committed tokens not yet in ``model``'s cache: tokens, positions, causal visibility."""
    pend = ids[model.length:]
    n = len(pend)
    return pend, np.arange(model.length, len(ids)), np.tril(np.ones((n, n), dtype=bool))


def _draft_tree(S: DraftSession, ids: list, shape: TreeShape, drafting: str, rng):
    """Draft the token tree: one :meth:`DraftSession.level` call per depth.

    Returns ``(tree, q_rows)``: ``q_rows[node]`` (V,) float64 is the draft
    law the children of ``node`` were drawn from (``ROOT`` for the root).
    """
    t = DraftTree()
    q_rows = {ROOT: S.level(ids, t, [ROOT])[0]}
    frontier = [ROOT]
    for d, k in enumerate(shape.branching):
        new = []
        for node in frontier:
            for tok in _draw(q_rows[node], k, drafting, rng):
                new.append(t.add(node, tok))
        frontier = new
        if d + 1 == shape.depth:
            break
        rows = S.level(ids, t, new)
        for j, i in enumerate(new):
            q_rows[i] = rows[j]
    return t, q_rows


def _target_pass(P: CachedModel, ids: list, t: DraftTree):
    """ONE target forward over [pending tokens | every tree node]; returns logits per node.

    Returns dict node -> (V,) float32 logits, ``ROOT`` for the last pending token.
    """
    pend, pos, vis_p = _pending(P, ids)
    n, N = len(pend), len(t)
    nodes = list(range(N))
    vis = np.zeros((n + N, n + N), dtype=bool)
    vis[:n, :n] = vis_p
    vis[n:, :n] = True
    vis[n:, n:] = t.visibility(nodes, nodes)
    positions = np.concatenate([pos, [len(ids) - 1 + t.depth[i] for i in nodes]]).astype(np.int64)
    logits = P.forward(pend + t.tokens, positions, vis)
    return {ROOT: logits[n - 1], **{i: logits[n + i] for i in nodes}}


def _verify_walk(t: DraftTree, p_logits, q_rows, verifier: Verifier, sampling, rng, record):
    """Walk from the root; return (emitted tokens, accepted node path)."""
    node, path, emitted = ROOT, [], []
    while True:
        p = process_logits(p_logits[node][None], sampling)[0]
        kids = t.children[node]
        if not kids:  # full path accepted: bonus token from the target
            emitted.append(int(inverse_cdf(p[None], rng.random(1))[0]))
            return emitted, path
        cands = np.array([t.tokens[i] for i in kids], dtype=np.int64)
        q = q_rows[node]
        out = verifier.verify(p, q, cands, rng)
        if record is not None:
            record.append({"p": p, "q": q, "candidates": cands, "depth": 0 if node == ROOT else t.depth[node]})
        a = int(out.accepted[0])
        emitted.append(int(out.tokens[0]))
        if a < 0:
            return emitted, path
        node = kids[a]
        path.append(node)


def autoregressive_decode(target, prompt_ids, *, sampling: SamplingConfig, max_new_tokens: int,
                          rng: np.random.Generator, eos_token_id=None, on_tokens=None) -> DecodeResult:
    """Target-only autoregressive decoding (the baseline every speed-up is measured against).

    One target forward per token with the KV cache; tokens drawn by inverse
    CDF from the processed law (same processing as speculative decoding).
    """
    max_new_tokens = _check_max_new(max_new_tokens)
    ids = _check_prompt(prompt_ids, _vocab(target))
    check_fits(target, len(ids), max_new_tokens, None, what="target")
    eos = _eos_set(eos_token_id)
    P = CachedModel(target)
    res = DecodeResult()
    t0, c0 = time.perf_counter(), time.process_time()
    while len(res.tokens) < max_new_tokens:
        pend, pos, vis = _pending(P, ids)
        logits = P.forward(pend, pos, vis)
        P.commit(range(len(pend)))
        p = process_logits(logits[-1:], sampling)
        tok = int(inverse_cdf(p, rng.random(1))[0])
        ids.append(tok)
        res.tokens.append(tok)
        res.accepted.append(0)
        res.tokens_per_call.append(1)
        if on_tokens is not None:
            on_tokens([tok])
        if tok in eos:
            break
    res.seconds, res.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    res.target_calls, res.target_seconds = P.calls, P.seconds
    return res
