"""Tiny randomly initialised Qwen2 / Llama models for the decoding tests (no downloads)."""

from __future__ import annotations

import torch


def tiny_model(arch: str = "qwen2", vocab: int = 64, seed: int = 0, ctx: int = 128, scale: float = 1.0,
               attn: str = "sdpa", dtype=torch.float32):
    """A 2-layer causal LM of the given architecture; ``scale`` sharpens its logits."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=ctx,
                  tie_word_embeddings=False)
    cfg = {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch](**common)
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model.eval()


def full_logits(model, ids) -> torch.Tensor:
    """Logits of the last position from a cache-free forward over ``ids``."""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(ids)]), use_cache=False).logits[0, -1].float()
