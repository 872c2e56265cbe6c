"""This project's tree speculative decoder as a ``decoder`` / ``target`` pair for ``exactness.certify_decoder``.

:class:`EngineDecoder` wraps ``resispec.decoding.engine.speculative_decode``
for any registry verifier and tree shape (``"4,2"`` i.i.d. drafting,
``"wor:4,2"`` without replacement); :func:`engine_target` is the target's
next-token law after the same ``SamplingConfig`` (``resispec.decoding.laws``).
Needs torch and transformers (the ``models`` extra).

Example::

    dec = EngineDecoder(target_model, draft_model, "rrs_wor", "wor:2,1", sampling=SamplingConfig(0.7))
    cert = exactness.certify_decoder(dec, engine_target(target_model, SamplingConfig(0.7)), prompts)
"""

from __future__ import annotations

import numpy as np

from . import check_new_tokens, check_output, check_prompt, check_rng


#: Contexts per forward pass of :func:`engine_target` (at V = 151,936: 64 rows of float32 logits ~ 39 MB).
TARGET_ROWS = 64


def parse_tree(tree):
    """``"4,2"`` -> i.i.d. ``TreeShape``; ``"wor:4,2"`` -> without replacement; a ``TreeShape`` as is.

    Raises ValueError for a malformed shape (``resispec.trees.TreeShape.parse``).
    """
    from resispec.trees import TreeShape

    if isinstance(tree, str) and tree.strip().startswith("wor:"):
        return TreeShape.parse(tree.strip()[4:], "without_replacement")
    return TreeShape.parse(tree, "iid")


def _vocab(model) -> int:
    emb = getattr(model, "get_output_embeddings", lambda: None)()
    if emb is None:
        raise TypeError(f"model must be a transformers causal LM with an output embedding, got {type(model).__name__}")
    return int(emb.weight.shape[0])


class EngineDecoder:
    """``decoder(prompt, new_tokens, rng)`` running ``speculative_decode`` on one prompt.

    Parameters
    ----------
    target, draft : transformers causal LMs sharing one vocabulary
    verifier : str or resispec Verifier
        A registry name (``rrs``, ``rrs_wor``, ``kseq``, ``resispec``,
        ``target_only``, ...) or a built verifier.
    tree : str or TreeShape
        ``"2,1"`` (i.i.d. drafting) or ``"wor:2,1"`` (without replacement;
        the verifier must be exact for it, e.g. ``rrs_wor``, ``target_only``).
    sampling : resispec.decoding.SamplingConfig, default T = 1
        Applied to target and draft logits alike.

    Calling it returns the first ``new_tokens`` tokens (ndarray int64),
    drawn with ``rng`` only (all drafting and verification randomness).

    Raises
    ------
    ValueError
        Different vocabularies, a ``wor:`` tree for a verifier exact only for
        i.i.d. drafts (or the reverse), a malformed tree; per call: a bad
        prompt (see :func:`exactness.adapters.check_prompt`).
    TypeError
        Prompt not an int64 ndarray, ``rng`` not a numpy Generator.
    """

    def __init__(self, target, draft, verifier, tree, *, sampling=None):
        from resispec.pathlevel.registry import get_any_verifier
        from resispec.trees import TreeShape
        from resispec.decoding.engine import check_pair, resolve_drafting
        from resispec.decoding.laws import SamplingConfig

        self.target, self.draft = target, draft
        self.verifier = get_any_verifier(verifier) if isinstance(verifier, str) else verifier  # node or path rule
        self.tree = tree if isinstance(tree, TreeShape) else parse_tree(tree)
        self.sampling = SamplingConfig() if sampling is None else sampling
        if not isinstance(self.sampling, SamplingConfig):
            raise TypeError(f"sampling must be a resispec.decoding.SamplingConfig, got {type(sampling).__name__}")
        check_pair(target, draft)
        # a wor: tree is an explicit request: a verifier exact only for iid drafts is refused here
        self.drafting = self.tree.drafting if self.tree.drafting == "without_replacement" else None
        resolve_drafting(self.verifier, self.tree, explicit=self.drafting is not None)
        self.vocab = _vocab(target)

    def __call__(self, prompt, new_tokens, rng) -> np.ndarray:
        return self._decode(prompt, new_tokens, rng, False)[0]

    def _decode(self, prompt, new_tokens, rng, record):
        from resispec.decoding.engine import speculative_decode

        prompt = check_prompt(prompt, self.vocab)
        new_tokens = check_new_tokens(new_tokens)
        rng = check_rng(rng)
        res = speculative_decode(self.target, self.draft, prompt, self.verifier, self.tree, sampling=self.sampling,
                                 max_new_tokens=new_tokens, rng=rng, drafting=self.drafting, record=record)
        return check_output(res.tokens, new_tokens, self.vocab, f"speculative_decode ({self.verifier.name})"), res

    @property
    def rule(self):
        """The node rule for the conditional checks: the verifier's registry name (None if not registered)."""
        from resispec import available_verifiers

        name = getattr(self.verifier, "name", None)
        return name if name in available_verifiers() else None

    def draft_law(self, contexts) -> np.ndarray:
        """The draft's law after ``sampling`` at each context (B, L) int64 -> (B, V) float64 (the q verified with)."""
        if getattr(self, "_draft_target", None) is None:
            self._draft_target = engine_target(self.draft, self.sampling)
        return self._draft_target(np.asarray(contexts, dtype=np.int64))

    def sample_events(self, prompts, new_tokens, rng):
        """Decode each row of ``prompts`` (B, L) and report its node decisions.

        Returns ``(tokens (B, new_tokens) int64, exactness.decoder_events.DecoderEvents)``, read off
        ``speculative_decode(..., record=True)``: per target call the recorded nodes (``depth`` 0
        starts a call) give the candidates; the first ``accepted`` of them accepted the emitted token
        (the first candidate holding it: duplicates of i.i.d. drafts decide alike for the checks), the
        next one rejected, and after a full path the bonus draw has no candidates.  The same random
        draws as ``__call__`` (the same tokens under the same ``rng``).
        """
        from exactness.decoder_events import DecoderEvents

        prompts = np.asarray(prompts, dtype=np.int64)
        rows, cols = [], {f: [] for f in ("position", "candidates", "accepted", "token", "call")}
        out, calls = [], 0
        for b, prompt in enumerate(prompts):
            tokens, res = self._decode(prompt.copy(), new_tokens, rng, True)
            out.append(tokens)
            starts = [i for i, nd in enumerate(res.nodes) if nd["depth"] == 0] + [len(res.nodes)]
            pos = 0
            for c, a in enumerate(res.accepted):
                nodes = res.nodes[starts[c]:starts[c + 1]]
                for i in range(a + 1):
                    if pos >= new_tokens:
                        break
                    tok = int(tokens[pos])
                    cand = np.asarray(nodes[i]["candidates"], dtype=np.int64) if i < len(nodes) else np.zeros(0, int)
                    hit = np.flatnonzero(cand == tok)
                    rows.append(b)
                    cols["position"].append(pos)
                    cols["candidates"].append(cand)
                    cols["accepted"].append(int(hit[0]) if i < a and hit.size else -1)
                    cols["token"].append(tok)
                    cols["call"].append(calls + c)
                    pos += 1
            calls += len(res.accepted)
        k = max([c.size for c in cols["candidates"]] + [1])
        cand = np.full((len(rows), k), -1, dtype=np.int64)
        for i, c in enumerate(cols["candidates"]):
            cand[i, :c.size] = c
        ev = DecoderEvents(np.array(rows, dtype=np.int64), np.array(cols["position"], dtype=np.int64), cand,
                           *(np.array(cols[f], dtype=np.int64) for f in ("accepted", "token", "call")))
        return np.stack(out) if out else np.zeros((0, new_tokens), dtype=np.int64), ev

    def __repr__(self) -> str:
        wor = "wor:" if self.tree.drafting == "without_replacement" else ""
        return f"EngineDecoder({self.verifier.name}, {wor}{','.join(map(str, self.tree.branching))}, {self.sampling})"


def engine_target(model, sampling=None):
    """The ``target(contexts)`` callable: ``model``'s next-token law after ``sampling``.

    Parameters
    ----------
    model : transformers causal LM (the target)
    sampling : SamplingConfig, default T = 1 (the decoder's)

    Returns
    -------
    callable ``(contexts (B, L) int64) -> (B, V) float64``
        Cache-free forward in chunks of ``TARGET_ROWS`` contexts, the last position's logits only
        (``logits_to_keep=1``), ``process_logits``
        (float64 softmax, renormalised) -- the law ``speculative_decode``
        must emit at every position.

    Raises (when called)
    ------
    TypeError / ValueError
        Contexts not a 2-D int64 array, or ids out of range.
    """
    from resispec.decoding.laws import SamplingConfig

    sampling = SamplingConfig() if sampling is None else sampling
    vocab = _vocab(model)

    def target(contexts):
        return last_position_laws(model, _check_contexts(contexts, vocab), sampling)

    return target


def last_position_laws(model, ids: np.ndarray, sampling, rows: int = TARGET_ROWS) -> np.ndarray:
    """Next-token laws (B, V) float64 of ``model`` after ``ids`` (B, L) int64 (checked), under ``sampling``.

    Cache-free forwards of ``rows`` contexts at a time keeping only the last position's logits
    (``logits_to_keep=1``: memory O(rows V), not O(B L V)), then ``process_logits`` (float64,
    renormalised).  Shared by :func:`engine_target` and :class:`exactness.adapters.laws.ModelLaws`.
    """
    import torch

    from resispec.decoding.laws import process_logits

    device = next(model.parameters()).device
    out = []
    for s in range(0, ids.shape[0], rows):
        with torch.inference_mode():
            logits = model(input_ids=torch.as_tensor(ids[s:s + rows], device=device), use_cache=False,
                           logits_to_keep=1).logits[:, -1]
        out.append(process_logits(logits.float(), sampling))
    return np.concatenate(out) if out else np.zeros((0, _vocab(model)))


def _check_contexts(contexts, vocab: int) -> np.ndarray:
    if not isinstance(contexts, np.ndarray) or contexts.dtype != np.int64:
        raise TypeError("contexts must be a (B, L) numpy int64 array; pass np.asarray(ids, dtype=np.int64)")
    if contexts.ndim != 2 or contexts.shape[1] < 1:
        raise ValueError(f"contexts must have shape (B, L) with L >= 1, got {contexts.shape}")
    if contexts.size and (contexts.min() < 0 or contexts.max() >= vocab):
        raise ValueError(f"contexts ids must lie in [0, {vocab})")
    return contexts


def every_engine_decoder(target, draft, trees=("2,1", "wor:2,1"), sampling=None) -> dict:
    """An :class:`EngineDecoder` for every registry verifier on every tree it is exact for.

    Parameters
    ----------
    target, draft : transformers causal LMs sharing one vocabulary
    trees : sequence of str
        Tree shapes (``"wor:"`` prefix = without replacement).  A verifier
        exact only for i.i.d. drafts (``rrs``, ``kseq``, ``resispec``, ...)
        runs on the i.i.d. shapes, one exact only for without-replacement
        drafts (``rrs_wor``) on the ``wor:`` shapes, ``target_only`` on all.
    sampling : SamplingConfig, optional

    Returns
    -------
    dict ``"<verifier>@<tree>" -> EngineDecoder``, sorted by verifier name.
    """
    from resispec import available_verifiers, get_verifier

    out = {}
    for name in available_verifiers():
        v = get_verifier(name)
        for tree in trees:
            shape = parse_tree(tree)
            if v.drafting in ("any", shape.drafting):
                out[f"{name}@{tree}"] = EngineDecoder(target, draft, v, shape, sampling=sampling)
    return out
