"""Tiny local models for engine audits: one Hugging Face checkpoint every engine converts (nothing downloaded).

:func:`build_tiny` writes a target and a draft (Llama, vocabulary ``vocab``, hidden 32, 2 and 1 layers, fixed
torch seeds, output head sharpened by ``scale`` so the draft differs visibly from the target) as ordinary
``save_pretrained`` directories with a word-level ``tokenizer.json`` (tokens ``t0 .. t{V-1}``; ``t0`` is pad and
``t1`` is EOS), so llama.cpp (GGUF), onnxruntime-genai (its model builder), mlx-lm and vLLM load the SAME weights.
:func:`float64_logits` runs the target in float64 with transformers: the independent source of the law that
each engine's own non-speculative law is cross-checked against (``exactness.engines.audit``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Default prompts: distinct rows (row mixing shows), repeats inside each (n-gram drafts find matches).
PROMPTS = np.array([[2, 3, 4, 2, 3], [5, 6, 7, 5, 6]], dtype=np.int64)


@dataclass(frozen=True)
class TinyModels:
    """Where :func:`build_tiny` wrote the checkpoints, and what they are.

    ``target_dir`` / ``draft_dir``: ``save_pretrained`` directories (config.json, model.safetensors,
    generation_config.json, tokenizer.json, tokenizer_config.json); ``vocab``: V; ``eos``: the EOS id;
    ``prompts``: (P, L) int64 default prompts; ``seed``: the torch seed of the target (draft: seed + 1).
    ``gguf``: True when ``target_dir`` / ``draft_dir`` are GGUF FILES (the user's quantised models, llama.cpp only;
    no float64 twin exists, so the law is not cross-checked).
    """

    target_dir: Path
    draft_dir: Path
    vocab: int
    eos: int
    prompts: np.ndarray
    seed: int
    gguf: bool = False


def _tokenizer_files(out: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"t{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "t0", "eos_token": "t1", "bos_token": None,
        "unk_token": "t0", "model_max_length": 128, "clean_up_tokenization_spaces": False}))
    (out / "special_tokens_map.json").write_text(json.dumps({"pad_token": "t0", "eos_token": "t1", "unk_token": "t0"}))


def _save(out: Path, *, vocab: int, layers: int, seed: int, scale: float) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=1, pad_token_id=0,
                      rms_norm_eps=1e-6, rope_theta=10000.0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)  # sharper laws: random init is near-uniform
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    _tokenizer_files(out, vocab)


def build_tiny(workdir, *, vocab: int = 16, seed: int = 0, scale: float = 8.0) -> TinyModels:
    """Write a tiny target (2 layers) and draft (1 layer) under ``workdir`` (``target/``, ``draft/``).

    Parameters
    ----------
    workdir : str or Path
        Created if missing; an existing ``target/`` or ``draft/`` written by the same arguments is reused
        (``tiny.json`` records them), any other is an error.
    vocab : int, 8 <= vocab <= 4096
    seed : int
    scale : float > 0, multiplier of the output head

    Returns
    -------
    TinyModels

    Raises
    ------
    ValueError
        ``vocab`` out of range, ``scale`` not positive, or ``workdir`` holds checkpoints of other arguments.
    """
    if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or not 8 <= vocab <= 4096:
        raise ValueError(f"vocab must be an integer in [8, 4096], got {vocab!r}")
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive float, got {scale!r}")
    work = Path(workdir)
    stamp = {"vocab": int(vocab), "seed": int(seed), "scale": float(scale), "arch": "llama-h32"}
    meta = work / "tiny.json"
    if meta.exists():
        old = json.loads(meta.read_text())
        if old != stamp:
            raise ValueError(f"workdir {work} holds tiny models built with {old}, not {stamp}; pass another workdir")
    else:
        _save(work / "target", vocab=vocab, layers=2, seed=seed, scale=scale)
        _save(work / "draft", vocab=vocab, layers=1, seed=seed + 1, scale=scale)
        meta.write_text(json.dumps(stamp))  # written last: a half-built workdir is rebuilt
    prompts = PROMPTS % vocab
    return TinyModels(work / "target", work / "draft", int(vocab), 1, prompts, int(seed))


def float64_logits(model_dir):
    """``logits(contexts (B, L) int64) -> (B, V) float64``: the checkpoint's last-position logits in float64.

    Cache-free transformers forward with the weights cast to float64: the independent computation the engines'
    own laws are cross-checked against.
    """
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64).eval()

    def logits(contexts):
        ctx = np.asarray(contexts, dtype=np.int64)
        if ctx.ndim != 2:
            raise ValueError(f"contexts must have shape (B, L), got {ctx.shape}")
        with torch.inference_mode():
            return model(input_ids=torch.as_tensor(ctx), use_cache=False).logits[:, -1].numpy().astype(np.float64)

    return logits


#: Python source that rebuilds :func:`build_tiny`'s checkpoints WITHOUT this project (torch, transformers,
#: tokenizers): the first part of every engine's reproduction script.  Format with vocab, seed, scale.
STANDALONE_BUILD = '''
import atexit, json, os, shutil, tempfile

import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM

V, SEED, SCALE = {vocab}, {seed}, {scale}
WORK = tempfile.mkdtemp(prefix="repro-tiny-")
atexit.register(shutil.rmtree, WORK, True)  # nothing left behind


def save(name, layers, seed):  # a tiny random Llama (hidden 32) with a word-level tokenizer t0..t{{V-1}}
    out = os.path.join(WORK, name)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=1, pad_token_id=0,
                      rms_norm_eps=1e-6, rope_theta=10000.0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(SCALE)
    model.save_pretrained(out, safe_serialization=True)
    tok = Tokenizer(tok_models.WordLevel(vocab={{f"t{{i}}": i for i in range(V)}}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({{"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "t0", "eos_token": "t1",
                   "unk_token": "t0", "model_max_length": 128}}, f)
    return out


TARGET, DRAFT = save("target", 2, SEED), save("draft", 1, SEED + 1)
'''


def standalone_build(models) -> str:
    """:data:`STANDALONE_BUILD` for ``models`` (read from its ``tiny.json``)."""
    stamp = json.loads((Path(models.target_dir).parent / "tiny.json").read_text())
    return STANDALONE_BUILD.format(vocab=stamp["vocab"], seed=stamp["seed"], scale=stamp["scale"])


def widen_heads(hf_dir, out, multiple: int) -> Path:
    """The same Llama function with each attention head zero-padded to ``multiple`` dimensions; returns ``out``.

    For engines whose CPU attention takes only some head sizes (vLLM: multiples of 32; onnxruntime's
    GroupQueryAttention: of 16) while the tiny models have head_dim 8.  Old head dim ``i < d/2`` goes to new
    ``f i`` and ``i + d/2`` to ``f i + D/2`` (``D = multiple``, ``f = D / d``): rotate-half RoPE (transformers'
    ``rotate_half``, vLLM's neox style for Llama) pairs dims ``(j, j + D/2)`` at frequency ``theta^(-2j/D)``, so new
    ``f i`` rotates at the old ``theta^(-2i/d)``; padded dims are 0 in q, k, v and dropped by ``o_proj``; q is
    scaled by ``sqrt(D / d)`` so ``q.k / sqrt(D)`` is the old ``q.k / sqrt(d)``.  Weights are written float32 under
    ``out`` with the tokenizer files.

    Raises
    ------
    EngineUnavailable
        The model is not a Llama with an even head_dim dividing ``multiple``.
    """
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from .base import EngineUnavailable

    hf_dir, out = Path(hf_dir), Path(out)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float64)
    cfg = model.config
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if cfg.model_type != "llama" or d % 2 or multiple % d:
        raise EngineUnavailable(f"{hf_dir}: head_dim {d}: the engine's CPU attention takes head sizes that are "
                                f"multiples of {multiple} and only a Llama whose even head_dim divides {multiple} is "
                                "widened here")
    f = multiple // d
    idx = np.concatenate([f * np.arange(d // 2), f * np.arange(d // 2) + multiple // 2])  # old dim -> new dim

    def widen_rows(w, heads, scale=1.0):  # (heads * d, hidden) -> (heads * D, hidden)
        new = torch.zeros(heads * multiple, w.shape[1], dtype=w.dtype)
        for h in range(heads):
            new[h * multiple + idx] = w[h * d:(h + 1) * d] * scale
        return new

    def widen_cols(w, heads):  # (hidden, heads * d) -> (hidden, heads * D)
        new = torch.zeros(w.shape[0], heads * multiple, dtype=w.dtype)
        for h in range(heads):
            new[:, h * multiple + idx] = w[:, h * d:(h + 1) * d]
        return new

    cfg2 = type(cfg).from_dict({**cfg.to_dict(), "head_dim": multiple})
    wide = type(model)(cfg2).to(torch.float64)
    sd = model.state_dict()
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    for k, v in sd.items():
        if k.endswith("self_attn.q_proj.weight"):
            sd[k] = widen_rows(v, nh, float(np.sqrt(multiple / d)))  # q . k / sqrt(D) = the old q . k / sqrt(d)
        elif k.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            sd[k] = widen_rows(v, nkv)
        elif k.endswith("self_attn.o_proj.weight"):
            sd[k] = widen_cols(v, nh)
    wide.load_state_dict(sd)
    out.mkdir(parents=True, exist_ok=True)
    wide.to(torch.float32).save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if (hf_dir / name).exists():
            shutil.copy(hf_dir / name, out / name)
    return out


def check_ids(name: str, arr, vocab: int) -> np.ndarray:
    """``arr`` if it is a (B, L) int64 array of token ids in ``[0, vocab)`` with L >= 1 (the engine adapters' check
    of the contexts and prompts they are given); ``TypeError`` / ``ValueError`` naming ``name`` otherwise."""
    if not isinstance(arr, np.ndarray) or arr.dtype != np.int64 or arr.ndim != 2 or arr.shape[1] < 1:
        raise TypeError(f"{name} must be a (B, L) numpy int64 array with L >= 1; pass np.asarray(ids, dtype=np.int64)")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab):
        raise ValueError(f"{name} ids must lie in [0, {vocab}) (the tiny vocabulary), got [{arr.min()}, {arr.max()}]")
    return arr
