"""A model plus its KV cache, fed new tokens with an explicit 4-D mask.

The cache is a transformers ``DynamicCache``; after a tree pass it is pruned
to the committed prefix plus the accepted path with an index-select along
the sequence axis of every layer (``DynamicCache.crop`` only cuts a suffix,
and the accepted path is not a suffix of the tree).
"""

from __future__ import annotations

import inspect

import numpy as np

from .tree import attention_mask


class CachedModel:
    """A causal LM with a KV cache of ``length`` committed tokens.

    Attributes
    ----------
    model : transformers PreTrainedModel
    length : int
        Tokens whose keys/values are in the cache, in sequence order.
    calls : int
        Forward passes made.
    seconds : float
        Wall-clock time spent in forward passes.
    features : torch.Tensor (T, H) float32 or None
        With ``keep_features=True``: the last forward's hidden states after the final norm (what the
        lm_head reads), one row per fed token; None otherwise.
    """

    def __init__(self, model, keep_features: bool = False):
        import torch
        from transformers import DynamicCache

        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cache = DynamicCache(config=model.config)
        self.length = 0
        self.calls = 0
        self.seconds = 0.0
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._torch = torch
        self.features = None
        self._norm = None
        if keep_features:
            self._norm = getattr(getattr(model, "base_model", None), "norm", None)
            if self._norm is None:
                raise ValueError(f"{type(model).__name__} has no final norm at .base_model.norm: a draft that reads "
                                 "the target's features needs a Llama/Qwen-style decoder")

    def _keep(self, _module, _inputs, output):
        self.features = output[0].detach().float().cpu()

    def forward(self, tokens, positions, visible) -> "torch.Tensor":
        """Run new tokens through the model on top of the cache.

        Parameters
        ----------
        tokens : sequence of int, length T
        positions : sequence of int, length T
            Position ids (tree nodes of equal depth share a position).
        visible : ndarray, shape (T, cached_after_prefix + T), bool
            Which uncommitted cached tokens (after ``length``) and which new
            tokens each new token may attend to.

        Returns
        -------
        torch.Tensor, shape (T, V), float32 logits (on CPU)
        """
        import time

        torch = self._torch
        ids = torch.as_tensor(np.asarray(tokens, dtype=np.int64), device=self.device)[None]
        pos = torch.as_tensor(np.asarray(positions, dtype=np.int64), device=self.device)[None]
        mask = attention_mask(self.length, visible, self.dtype, self.device)
        t0 = time.perf_counter()
        hook = self._norm.register_forward_hook(self._keep) if self._norm is not None else None  # only this pass
        try:
            with torch.inference_mode():
                out = self.model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True,
                                 **{self._cache_kw: self.cache})
                logits = out.logits[0].float().cpu()
        finally:
            if hook is not None:
                hook.remove()
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return logits

    def cached_tokens(self) -> int:
        """Total tokens in the cache (committed + uncommitted tree tokens)."""
        return int(self.cache.get_seq_length())

    def commit(self, keep_extra) -> None:
        """Keep the committed prefix plus the uncommitted entries ``keep_extra``.

        ``keep_extra``: indices (relative to ``length``) of cached tokens to
        keep, in order; everything else after ``length`` is dropped.
        """
        torch = self._torch
        total = self.cached_tokens()
        keep_extra = [int(i) for i in keep_extra]
        if keep_extra == list(range(total - self.length)):
            self.length = total
            return
        idx = torch.as_tensor(list(range(self.length)) + [self.length + i for i in keep_extra],
                              dtype=torch.long, device=self.device)
        for layer in _layers(self.cache):
            layer.keys = layer.keys.index_select(-2, idx)
            layer.values = layer.values.index_select(-2, idx)
        self.length = len(idx)


def _layers(cache):
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if layers is None:
        raise ValueError("this transformers version has no DynamicCache.layers; resispec.decoding needs transformers>=4.56")
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise ValueError(f"KV-cache layer type {type(layer).__name__} cannot be pruned to a tree path; "
                             "use a model without sliding-window attention")
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        yield layer
