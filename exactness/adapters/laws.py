"""A pair of torch causal LMs as a batched draft/target ``model`` for the chain and tree decoders.

:class:`ModelLaws` gives ``laws(contexts) -> (p, q)``: the target's and the draft's next-token laws
after one :class:`resispec.decoding.SamplingConfig`, computed by cache-free batched forwards
(contexts grouped by length, up to ``BATCH`` rows a forward).  With it
``exactness.chain.chain_decoder(kernel, ModelLaws(target, draft))`` or
``exactness.tree_decoder.TreeDecoder(ModelLaws(target, draft), ...)`` runs a chain or tree verifier
over real (or tiny random) transformers models in batches of thousands of rows, and
``exactness.chain.chain_target(pair)`` (or :meth:`ModelLaws.target`) is the matching ``target``.
Needs torch and transformers (the ``models`` extra).

Example (a user's chain kernel over two small models)::

    pair = ModelLaws(target_model, draft_model, SamplingConfig(0.7))
    cert = exactness.certify_decoder(chain_decoder(my_kernel, pair, gamma=4), pair.target, prompts, new_tokens=3)
"""

from __future__ import annotations

import numpy as np

from .engine import _vocab, last_position_laws

#: Most rows per forward pass (fewer at large V: at most ``LOGIT_ELEMS`` logits at once).
BATCH = 2048
#: Logit elements held per forward (2**24: 64 MiB of float32).
LOGIT_ELEMS = 1 << 24
#: Memory for memoised (context -> law) rows per model, bytes (tiny vocabularies revisit the same contexts).
CACHE_BYTES = 256 << 20


class ModelLaws:
    """Target and draft laws of two causal LMs at many contexts: ``laws(contexts) -> (p, q)``.

    Parameters
    ----------
    target, draft : transformers causal LMs sharing one vocabulary (eval mode)
    sampling : resispec.decoding.SamplingConfig, default T = 1
        Applied to both models' logits (``resispec.decoding.laws.process_logits``: float64,
        renormalised).
    cache : bool, default True
        Memoise the law of every context seen (up to ``CACHE_BYTES`` per model): a certification
        at a tiny vocabulary revisits the same few thousand contexts millions of times.  The
        models must not change while the object is used.

    Raises
    ------
    TypeError
        ``sampling`` is not a ``SamplingConfig``; a model without an output embedding.
    ValueError
        The two vocabularies differ (a draft law must live on the target's vocabulary); when
        called: contexts empty or holding ids outside ``[0, V)``.
    """

    def __init__(self, target, draft, sampling=None, *, cache: bool = True):
        from resispec.decoding.laws import SamplingConfig

        self.sampling = SamplingConfig() if sampling is None else sampling
        if not isinstance(self.sampling, SamplingConfig):
            raise TypeError(f"sampling must be a resispec.decoding.SamplingConfig, got {type(sampling).__name__}")
        vt, vd = _vocab(target), _vocab(draft)
        if vt != vd:
            raise ValueError(f"target and draft vocabularies differ ({vt} vs {vd}): the draft law must be over the "
                             "target's vocabulary; use a draft with the target's tokenizer")
        self.models, self.vocab = (target, draft), vt
        self._memo = ({}, {}) if cache else None
        self._cache_rows = CACHE_BYTES // (8 * vt)
        self._rows = max(1, min(BATCH, LOGIT_ELEMS // vt))

    def _laws(self, which: int, contexts: list) -> np.ndarray:
        if self._memo is None:
            return self._forward(self.models[which], contexts)
        memo = self._memo[which]
        out = np.empty((len(contexts), self.vocab))
        todo = {}
        for i, c in enumerate(contexts):
            row = memo.get(c)
            if row is None:
                todo.setdefault(c, []).append(i)
            else:
                out[i] = row
        if todo:
            keys = list(todo)
            fresh = self._forward(self.models[which], keys)
            for c, row in zip(keys, fresh):
                out[todo[c]] = row
                if len(memo) < self._cache_rows:
                    memo[c] = row
        return out

    def _forward(self, model, contexts: list) -> np.ndarray:
        out = np.empty((len(contexts), self.vocab))
        lengths = np.array([len(c) for c in contexts])
        if lengths.size and lengths.min() < 1:
            raise ValueError("every context must hold at least one token (start from a non-empty prompt)")
        for L in np.unique(lengths):
            idx = np.flatnonzero(lengths == L)
            ids = np.array([contexts[i] for i in idx], dtype=np.int64).reshape(idx.size, int(L))
            if ids.min() < 0 or ids.max() >= self.vocab:
                raise ValueError(f"contexts hold ids outside [0, {self.vocab})")
            out[idx] = last_position_laws(model, ids, self.sampling, self._rows)
        return out

    def laws(self, contexts) -> tuple[np.ndarray, np.ndarray]:
        """``(p, q)``, each (B, V) float64, at ``contexts`` (a sequence of B int sequences, any lengths)."""
        ctx = [tuple(int(t) for t in c) for c in contexts]
        return self._laws(0, ctx), self._laws(1, ctx)

    def target(self, contexts) -> np.ndarray:
        """The ``target(contexts (B, L) int64) -> (B, V) float64`` of :func:`exactness.certify_decoder`."""
        ctx = np.asarray(contexts)
        if ctx.ndim != 2 or not np.issubdtype(ctx.dtype, np.integer):
            raise TypeError(f"contexts must be a (B, L) integer array, got {ctx.dtype} of shape {ctx.shape}")
        return self._laws(0, [tuple(int(t) for t in c) for c in ctx])


__all__ = ["ModelLaws", "BATCH", "CACHE_BYTES", "LOGIT_ELEMS"]
