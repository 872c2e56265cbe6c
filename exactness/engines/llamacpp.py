"""llama-cpp-python (and the llama.cpp inside it) as an audited engine: prompt lookup, a draft model, plain sampling.

Models.  :func:`write_gguf` writes the shared tiny Hugging Face checkpoints (``exactness.engines.tiny``) to GGUF
float32 OFFLINE with the ``gguf`` package: architecture ``llama``, tensors renamed as llama.cpp's
``convert_hf_to_gguf.py`` (``LlamaModel``) does, q/k rows permuted from HF's rotate-half rope layout to llama.cpp's
(``LlamaModel.permute``), tokenizer ``gpt2`` (BPE) whose token list is ``t0 .. t{V-1}`` in id order.  The harness
hands token ids straight to ``Llama.eval`` / ``Llama.generate``: no text is tokenized, so ids map 1:1.  (The
``convert_hf_to_gguf.py`` vendored in the 0.3.36 sdist refuses the word-level tokenizer: "BPE pre-tokenizer was not
recognized - update get_vocab_base_pre()".)

The law is the engine's OWN: ``Llama(logits_all=True).eval(context)`` gives the float32 logits of the last position;
the sampler chain llama-cpp-python builds for ``generate`` (``Llama._init_sampler``: a Python logits processor for
``logit_bias``, then llama.cpp's ``penalties``, ``top_k``, ``typical``, ``top_p``, ``min_p``, ``temp``, ``dist``)
is built by the engine itself, the generated tokens are ``llama_sampler_accept``-ed into it (its penalty history),
and every sampler but the final ``dist`` is applied through ``llama_sampler_apply`` to those logits; the law is the
float64 softmax of the surviving logits (what ``dist`` draws from).  Its documented order is declared below as
``ORDERS["llama-cpp-python"]`` and cross-checked against transformers float64 in ``tests/test_engine_llamacpp.py``.

The user's own GGUF files (``resispec audit llama-cpp-python --target FILE.gguf|NAME``, :func:`gguf_models`) are
loaded as they are, on all cores.  Two facts about llama.cpp shape the law there.  (1) Its logits depend on how a
context was batched: on the Qwen2.5-Coder Q4_K_M GGUFs, a token evaluated alone vs inside a batch moves logits by up
to 0.6 (TV 0.01-0.06 of the next-token law), while every schedule is deterministic.  So the decoder keeps one
``Llama`` per prompt with the prompt warmed (:func:`warm_prompt`: one batch, then its last token alone, which is
what ``generate``'s prefix reuse re-evaluates on every later request), and the law (:func:`plain_logits`) follows
plain decoding's schedule exactly: that warm prompt, then each generated token alone.  (2) No separate target pass
is needed where the decoder already computed the row: each decoder hands the ``Llama.scores`` rows its tokens were
drawn from to the handle, and the law serves them, spot-checking the first 16 and every 8th against a fresh plain
forward (processed-law TV <= 1e-3); one mismatch drops the decoder's rows for plain forwards.  Speculative decoders'
rows come from verify batches, so they mismatch and their law is always the plain forward's (``scores_*`` in the
cell's acceptance says which).

Decoding is ``Llama.generate`` (the token generator under ``create_completion``), which never stops on EOS itself
(``create_completion`` does): the decoder takes exactly ``new_tokens`` tokens from it.  Each request sets the
sampler seed from the harness (``Llama.set_seed(seed)``, ``seed`` drawn from ``rng`` in [1, 2^32 - 2]: 0xFFFFFFFF
is llama.cpp's "random seed").  Speculation is the engine's ``draft_model=`` hook (``llama_cpp.llama_speculative``).

How llama-cpp-python verifies drafts (``Llama.generate``, 0.3.36): the drafted tokens are appended and evaluated in
one batch, then at each drafted position the SAME sampler chain samples a token from the target's processed law; a
drafted token is kept iff it equals that sample, and the first mismatch emits the sample and drops the rest.  That
is sample-and-match (exact for any draft that does not look at the sampler's random numbers; acceptance per drafted
token = p(draft token), which is what speculative sampling gives a deterministic draft).  One uniform is drawn per
emitted token, so under one seed speculation on and off emit the same tokens (up to float32 differences between a
batched and a one-token forward): measured here, 2,000 of 2,000 six-token continuations identical for each of
``ngram`` / ``draft`` / ``self_draft`` against ``off`` under the same seeds, at T = 1 and at a combined setting.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..settings import ORDERS, register_order
from .base import Engine, EngineUnavailable, register_engine

#: llama-cpp-python's order of operations for ``generate`` (see the module docstring and ``source`` below).
ORDER = ("logit_bias", "repetition_penalty:generated", "presence_frequency:generated", "top_k", "top_p:descending",
         "min_p", "temperature")
ORDER_SOURCE = (
    "llama-cpp-python 0.3.36 llama_cpp/llama.py Llama._init_sampler (chain: custom logits_processor [create_completion"
    "'s logit_bias processor: logit += bias], penalties(penalty_last_n=Llama(last_n_tokens_size), repeat, freq, "
    "present), top_k, typical(1: off), top_p(min_keep=1), min_p(min_keep=1), temp, dist); vendor/llama.cpp "
    "src/llama-sampler.cpp: penalties history = tokens llama_sampler_accept-ed by llama_sampler_sample, i.e. the "
    "GENERATED tokens only (generate never accepts the prompt), ring buffer of the last penalty_last_n; per token "
    "logit <= 0 ? logit * r : logit / r, then logit -= freq * count + present * [count > 0]; top_k <= 0 off; top_p "
    "keeps the descending prefix up to the first cumulative mass >= p; min_p keeps logit >= max + log(p); temp "
    "divides AFTER the truncations")
if "llama-cpp-python" not in ORDERS:
    register_order("llama-cpp-python", ORDER, ORDER_SOURCE)

#: Contexts whose logits the law keeps from the engine's own decoding (0.6 MB each at V = 151,936).
SCORES_ROWS = 2048

#: Contexts served from the engine's own scores that are also run through a fresh plain forward (the first ones,
#: then every SPOT_EVERY-th): a decoder whose rows differ (a speculative verify batch) turns its scores off (law from
#: plain forwards).  Rows served before the mismatch are not recomputed: a decoder whose rows are wrong at fewer
#: than 1 in SPOT_EVERY contexts, and right at the first SPOT_FIRST, could go unnoticed there.
SPOT_FIRST, SPOT_EVERY = 16, 8

#: Llama instances a decoder keeps warm, one per prompt (~0.6 GB each for a 0.5B GGUF); more prompts share them
#: round-robin and re-warm on every switch (slower, the same schedule).
MAX_INSTANCES = 4

#: Processed laws kept per handle (1.2 MB each at V = 151,936).
LAW_ROWS = 512

#: Largest TV between the processed laws of a kept score row and a fresh plain forward at the same context (float32
#: batching differences are ~1e-6).
SCORES_TOL = 1e-3

#: numpy layout of llama.cpp's ``llama_token_data`` (id int32, logit float32, p float32; 12 bytes).
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

#: Llama() keyword arguments shared by every instance (tiny models: one thread, no log lines).
LLAMA_KW = {"n_threads": 1, "n_threads_batch": 1, "verbose": False, "n_batch": 128, "n_ubatch": 128}

OPTIONS = {
    "off": "plain Llama.generate sampling: speculation off (must pass)",
    "ngram": "draft_model=LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3) (prompt lookup)",
    "draft": "draft_model= a LlamaDraftModel running the 1-layer draft GGUF greedily, 3 tokens a round (the "
             "engine's hook; llama-cpp-python ships no draft-model class)",
    "self_draft": "draft_model= the same hook running the TARGET GGUF greedily, 3 tokens a round (high acceptance: "
                  "exercises the accept and bonus paths)",
}


# ----------------------------------------------------------------------------------------------------------------
# HF safetensors -> GGUF (float32)


def _permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py ``LlamaModel.permute``: HF rotate-half rope rows -> llama.cpp interleaved rope rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model_dir, out_path) -> Path:
    """Write the HF Llama checkpoint in ``model_dir`` as a float32 GGUF at ``out_path``; returns ``out_path``.

    The tokenizer is ``gpt2`` (BPE, pre-tokenizer ``default``) with tokens ``t0 .. t{V-1}`` in id order, one
    merge (``t 0``; llama.cpp requires the key), EOS from ``config.json``'s ``eos_token_id``, no BOS added.

    Raises
    ------
    EngineUnavailable
        The checkpoint is not a Llama (``model_type``), or a tensor is missing / unexpected (names the tensor).
    """
    import gguf
    from safetensors.numpy import load_file

    src = Path(model_dir)
    cfg = json.loads((src / "config.json").read_text())
    if cfg.get("model_type") != "llama":
        raise EngineUnavailable(f"write_gguf converts Llama checkpoints only; {src} has model_type "
                                f"{cfg.get('model_type')!r}")
    weights = load_file(str(src / "model.safetensors"))
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hidden, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    head_dim = cfg.get("head_dim") or hidden // n_head
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    if cfg.get("tie_word_embeddings") and "lm_head.weight" not in weights:
        weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
    missing = sorted(set(names) - set(weights))
    extra = sorted(set(weights) - set(names))
    if missing or extra:
        raise EngineUnavailable(f"write_gguf: {src} tensors missing {missing[:3]} / unexpected {extra[:3]}")

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(src.name)
    w.add_context_length(int(cfg.get("max_position_embeddings", 128)))
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges(["t 0"])
    eos = cfg.get("eos_token_id")
    if isinstance(eos, int):
        w.add_eos_token_id(eos)
    if isinstance(cfg.get("pad_token_id"), int):
        w.add_pad_token_id(cfg["pad_token_id"])
    w.add_add_bos_token(False)
    for hf, gg in names.items():
        t = np.ascontiguousarray(weights[hf], dtype=np.float32)
        if hf.endswith("q_proj.weight"):
            t = _permute(t, n_head, n_head)
        elif hf.endswith("k_proj.weight"):
            t = _permute(t, n_head, n_kv)
        w.add_tensor(gg, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)  # atomic: a Llama that mmaps the old file keeps its inode (rewriting it in place: SIGBUS)
    return out


# ----------------------------------------------------------------------------------------------------------------
# The engine's own law


def logit_bias_processor(bias):
    """The processor ``Llama._create_completion`` builds from ``logit_bias`` (llama.py 0.3.36, copied verbatim).

    ``bias``: pairs (token, bias).  It runs as llama-cpp-python's custom sampler, first in the chain.
    """
    bias_map = {int(k): float(v) for k, v in bias}

    def processor(input_ids, scores):
        new_scores = np.copy(scores)
        for input_id, score in bias_map.items():
            new_scores[input_id] = score + scores[input_id]
        return new_scores

    return processor


def sampling_kwargs(settings) -> dict:
    """``SamplingSettings`` -> ``Llama.generate`` / ``Llama._init_sampler`` keyword arguments (filters off)."""
    from llama_cpp import LogitsProcessorList

    kw = _run_spec(settings)["kw"]  # the same keywords a reproduction script writes
    if settings.logit_bias:
        kw["logits_processor"] = LogitsProcessorList([logit_bias_processor(settings.logit_bias)])
    return kw


def engine_law(llm, logits, generated, kw) -> np.ndarray:
    """One row of the engine's law: ``logits`` (V,) float32 -> (V,) float64 after llama-cpp-python's own chain.

    Builds the chain with ``llm._init_sampler(**kw)``, accepts ``generated`` into it (its penalty history, as
    ``llama_sampler_sample`` does after each draw), applies every sampler but the final ``dist`` with
    ``llama_sampler_apply`` to a token-data array of ``logits``, and returns the float64 softmax of what survives.

    Raises ``EngineUnavailable`` if the chain does not end in ``dist`` (the engine changed its sampler layout).
    """
    import ctypes

    import llama_cpp as lc

    sampler = llm._init_sampler(**kw)
    try:
        chain = sampler.sampler
        n = lc.llama_sampler_chain_n(chain)
        last = lc.llama_sampler_name(lc.llama_sampler_chain_get(chain, n - 1))
        if last != b"dist":
            raise EngineUnavailable(f"llama-cpp-python's sampler chain ends in {last!r}, not b'dist': the law "
                                    "reader no longer matches this version")
        for t in generated:
            lc.llama_sampler_accept(chain, int(t))
        V = logits.shape[0]
        data = np.zeros(V, dtype=TOKEN_DATA)               # llama_token_data[V]: (id int32, logit f32, p f32)
        data["id"], data["logit"] = np.arange(V, dtype=np.int32), logits
        arr = lc.llama_token_data_array(data=data.ctypes.data_as(lc.llama_token_data_p), size=V, selected=-1,
                                        sorted=False)
        for i in range(n - 1):
            lc.llama_sampler_apply(lc.llama_sampler_chain_get(chain, i), ctypes.byref(arr))
        out = np.frombuffer((lc.llama_token_data * arr.size).from_address(ctypes.addressof(arr.data.contents)),
                            dtype=TOKEN_DATA)               # the samplers may shrink, sort or move the array
        ids, kept = out["id"].astype(np.int64), out["logit"].astype(np.float64)
    finally:
        sampler.close()
    keep = np.isfinite(kept)
    if not keep.any():
        raise ValueError("the settings leave no token (every logit -inf after the chain)")
    ids, kept = ids[keep], kept[keep]
    e = np.exp(kept - kept.max())  # p_i = exp(l_i - max) / sum_j exp(l_j - max), l after temp
    law = np.zeros(V, dtype=np.float64)
    np.add.at(law, ids, e / e.sum())
    return law


def gguf_models(target, draft, prompts, seed: int = 0):
    """``TinyModels`` (``gguf=True``) for the user's GGUF files: V and EOS read from the target's metadata.

    ``target`` / ``draft``: paths of ``.gguf`` files (the draft must share the target's vocabulary); ``prompts``:
    (P, L) int64 token ids in [0, V).  Raises ``ValueError`` naming the argument for a file that is missing, not a
    GGUF, without a token list, or a draft / prompt that does not fit the target's vocabulary.
    """
    from gguf import GGUFReader

    from .tiny import TinyModels

    def meta(path, flag):
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{flag} {path}: no such file (give a GGUF file)")
        try:
            reader = GGUFReader(str(path), "r")
        except Exception as exc:  # gguf raises ValueError / struct errors / OSError on a file that is not GGUF
            raise ValueError(f"{flag} {path} is not a readable GGUF file ({type(exc).__name__}: {exc})") from None
        toks = reader.fields.get("tokenizer.ggml.tokens")
        if toks is None:
            raise ValueError(f"{flag} {path} has no tokenizer.ggml.tokens: its vocabulary is unknown")
        eos = reader.fields.get("tokenizer.ggml.eos_token_id")
        return len(toks.data), int(eos.parts[eos.data[0]][0]) if eos is not None else 0

    draft = target if draft is None else draft
    vocab, eos = meta(target, "--target")
    dvocab, _ = meta(draft, "--draft")
    if dvocab != vocab:
        raise ValueError(f"--draft has vocabulary {dvocab:,}, --target {vocab:,}: a draft must share the "
                         "target's tokenizer")
    why = f"--prompt-ids must be rows of equal length of integer ids in [0, {vocab:,}) (the GGUF's vocabulary)"
    try:
        raw = np.asarray(prompts)
    except ValueError:                                   # ragged rows
        raise ValueError(why) from None
    if raw.dtype == bool or not np.issubdtype(raw.dtype, np.integer) or raw.ndim != 2 or 0 in raw.shape \
            or raw.min() < 0 or raw.max() >= vocab:
        raise ValueError(why)
    return TinyModels(Path(target), Path(draft), vocab, eos, raw.astype(np.int64),
                      int(seed), gguf=True)


# ----------------------------------------------------------------------------------------------------------------
# Speculative decoding


def held_prefix(llm, ids) -> int:
    """How many leading tokens of ``ids`` (a sequence of int ids) ``llm``'s KV cache already holds."""
    have = llm.input_ids[: llm.n_tokens]                                  # (n_tokens,) the evaluated ids
    n = min(len(ids), have.size)
    diff = np.flatnonzero(have[:n] != np.asarray(ids[:n]))
    return int(diff[0]) if diff.size else n


def last_logits(llm, ids) -> np.ndarray:
    """``llm``'s float32 logits (V,) after the context ``ids`` (``logits_all=True``), reusing its KV cache.

    Keeps the longest common prefix of ``ids`` with what ``llm`` last evaluated (``Llama.n_tokens`` and
    ``kv_cache_seq_rm``, as ``Llama.generate`` does with its prompt) and evaluates only the rest; a context equal to
    that prefix re-evaluates its last token.  The result is the same forward a ``reset()`` + ``eval(ids)`` gives,
    up to float32 batching differences; it saves the prompt's forward on every call.
    """
    common = held_prefix(llm, ids)
    common = min(common, len(ids) - 1)           # at least one token evaluated: fresh logits for the last position
    llm.n_tokens = common
    llm.eval(ids[common:])                       # eval drops the KV cache from n_tokens on (kv_cache_seq_rm)
    return np.array(llm.scores[len(ids) - 1], dtype=np.float32)


def warm_prompt(llm, ids) -> None:
    """Put the prompt ``ids`` in ``llm``'s KV cache as every later request of it finds it: the prompt in one batch
    from an empty cache, then its last token again alone.

    ``Llama.generate`` keeps a prompt it has seen and re-evaluates only its last token (its prefix reuse), so every
    request but the first of a prompt draws its first token from that single-token forward; warming the prompt
    this way makes the first request the same as the others.
    """
    llm.reset()
    llm.eval(list(ids))                          # the prompt in one batch (eval splits at n_batch, as generate does)
    llm.n_tokens = len(ids) - 1
    llm.eval([int(ids[-1])])                     # its last token alone: the row the first new token is drawn from


def plain_logits(llm, ids, prompt_len: int) -> np.ndarray:
    """The logits (V,) float32 plain decoding computes after ``ids``, on the schedule :class:`LlamaCppDecoder` runs.

    llama.cpp's logits depend on how a context was batched (measured on the Qwen2.5-Coder GGUFs: a token evaluated
    alone vs inside a batch moves logits by up to 0.6, TV 0.01-0.06 at a position; docs/audit.md), so the law
    follows plain decoding's own schedule: the prompt warmed as :func:`warm_prompt` does (one batch, then its last
    token alone), then each generated token alone.  The KV cache of the longest common prefix is reused (it was
    built on that schedule).  ``llm`` needs ``logits_all=True``.
    """
    L = int(prompt_len)
    common = held_prefix(llm, ids)
    if common < L:                               # the prompt is not held: warm it
        warm_prompt(llm, ids[:L])
        common = L
    if len(ids) > L:
        common = min(common, len(ids) - 1)       # the last token evaluated now: fresh logits for it
        llm.n_tokens = common
        for t in ids[common:]:                   # generated tokens one at a time, as plain generate evaluates them
            llm.eval([int(t)])
    return np.array(llm.scores[len(ids) - 1], dtype=np.float32)


class GreedyDraftModel:
    """A ``llama_cpp.llama_speculative.LlamaDraftModel`` running a draft GGUF greedily for ``k`` tokens.

    llama-cpp-python ships only the abstract hook and prompt lookup; this is the smallest draft model through the
    hook (argmax of the draft's logits, a deterministic function of the context, as the hook's contract allows).
    ``proposals`` / ``lengths``: per call, the tokens proposed and the context length it was handed.
    ``make``: () -> another draft ``Llama``; with it, up to ``pool`` instances each keep their own context's KV cache
    (one per prompt when prompts alternate), the one sharing the longest prefix with the context serving it.
    Which instance serves, and what its cache held, never depends on the verifier's random numbers, so the
    proposals stay independent of them (what sample-and-match needs).
    """

    def __init__(self, llm, k: int = 3, make=None, pool: int = 4):
        self.llm, self.k, self.make, self.pool = llm, int(k), make, int(pool)
        self.llms = [llm]
        self.proposals: list[list[int]] = []
        self.lengths: list[int] = []

    def _instance(self, ids):
        """The pooled draft Llama sharing the longest prefix with ``ids`` (a new one if none shares half)."""
        best = max(self.llms, key=lambda llm: held_prefix(llm, ids))
        if 2 * held_prefix(best, ids) < len(ids) and self.make is not None and len(self.llms) < self.pool:
            best = self.make()
            self.llms.append(best)
        return best

    def __call__(self, input_ids, /, **kwargs):
        ids = [int(t) for t in input_ids]
        llm = self._instance(ids)
        k = min(self.k, llm.n_ctx() - len(ids) + 1)   # its forwards stay inside its own context (n_ctx)
        if k <= 0:
            self.proposals.append([])
            self.lengths.append(len(ids))
            return np.zeros(0, dtype=np.intc)
        last_logits(llm, ids)                # the KV cache of the common prefix is kept
        out = []
        for i in range(k):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(tok)
            if i + 1 < k:                        # the last proposal needs no forward of its own
                llm.eval([tok])
        self.proposals.append(out)
        self.lengths.append(len(ids))
        return np.array(out, dtype=np.intc)


class CountingLookup:
    """``LlamaPromptLookupDecoding`` recording per call ``proposals`` and ``lengths`` (context)."""

    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 3):
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.inner = LlamaPromptLookupDecoding(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)
        self.proposals: list[list[int]] = []
        self.lengths: list[int] = []

    def __call__(self, input_ids, /, **kwargs):
        out = self.inner(input_ids, **kwargs)
        self.proposals.append([int(t) for t in out])
        self.lengths.append(len(input_ids))
        return out


@dataclass
class LlamaCppDecoder:
    """``decoder(prompt (L,) int64, new_tokens, rng) -> (new_tokens,) int64`` through ``Llama.generate``.

    ``llm``: a ``Llama`` (with ``draft_model=`` for a speculative option); ``kw``: :func:`sampling_kwargs`;
    ``draft``: that draft model (:class:`CountingLookup` / :class:`GreedyDraftModel`) or None.

    Acceptance (speculative options), read from what the engine handed its draft model and what it emitted: a
    round handed a context of length ``L`` proposes ``d`` tokens for positions ``L, L+1, ...``; under
    sample-and-match the emitted token at each position IS the verifier's sample, so the round accepted the
    longest prefix of the proposal equal to the emitted tokens.  ``drafted``: tokens proposed; ``checked``: drafted
    positions the verifier sampled against (up to the first mismatch, within the ``new_tokens`` emitted);
    ``accepted``: those kept.  ``accepted / checked`` is the acceptance per verified drafted token (under
    sample-and-match its expectation is the target probability of the drafted token).
    ``rounds_checked`` / ``rounds_consistent`` count the rounds followed by another draft call and those whose
    next context length equals ``L + accepted + 1`` (the engine's own bookkeeping agrees with the reading).
    """

    llm: object
    kw: dict
    vocab: int
    draft: object = None
    accepted: int = 0
    checked: int = 0
    drafted: int = 0
    rounds_checked: int = 0
    rounds_consistent: int = 0
    requests: int = 0
    handle: object = None          # a LlamaCppHandle: the emitted positions' logits go to its ``scores``
    make: object = None            # () -> another Llama like ``llm``: one per prompt, each keeping its prompt warm
    instances: dict = field(default_factory=dict)   # prompt -> its Llama
    warm: dict = field(default_factory=dict)        # id(Llama) -> the prompt it holds warm

    def __call__(self, prompt, new_tokens, rng):
        seed = int(rng.integers(1, 2**32 - 1))  # 0xFFFFFFFF is LLAMA_DEFAULT_SEED (random)
        start = len(self.draft.lengths) if self.draft is not None else 0
        ids = [int(t) for t in np.asarray(prompt)]
        key = tuple(ids)
        llm = self.instances.get(key)
        if llm is None:  # a new prompt: its own Llama where ``make`` can build one (at most MAX_INSTANCES)
            pool = list({id(x): x for x in self.instances.values()}.values())
            if not pool:
                llm = self.llm
            elif self.make is not None and len(pool) < MAX_INSTANCES:
                llm = self.make()
            else:  # shared round-robin: re-warmed at every switch of prompt
                llm = pool[len(self.instances) % len(pool)]
            self.instances[key] = llm
        if self.warm.get(id(llm)) != key:  # the prompt warmed: every request then runs the same schedule
            warm_prompt(llm, ids)
            self.warm[id(llm)] = key
        llm.set_seed(seed)
        gen = llm.generate(ids, **self.kw)
        out = []
        try:
            for tok in gen:  # generate never stops on EOS (create_completion does): exactly new_tokens tokens
                out.append(int(tok))
                if len(out) == new_tokens:
                    break
        finally:
            gen.close()
        if self.draft is not None:
            self._count(ids + out, start)
        if self.handle is not None and getattr(llm, "_logits_all", False):
            for i in range(len(out)):  # token i was drawn from the row of its context (prompt + out[:i])
                self.handle.remember(tuple(ids + out[:i]), llm.scores[len(ids) - 1 + i])
        self.requests += 1
        return np.asarray(out, dtype=np.int64)

    def _count(self, full, start):
        lens, props = self.draft.lengths[start:], self.draft.proposals[start:]
        for t, (L, d) in enumerate(zip(lens, props)):
            emitted = full[L:L + len(d) + 1]
            a = 0
            while a < len(d) and a < len(emitted) and emitted[a] == d[a]:
                a += 1
            self.drafted += len(d)
            self.checked += min(len(d), len(emitted), a + 1)  # positions the verifier sampled against a draft
            self.accepted += a
            if t + 1 < len(lens):
                self.rounds_checked += 1
                self.rounds_consistent += int(lens[t + 1] == L + a + 1)


# ----------------------------------------------------------------------------------------------------------------


@dataclass
class LlamaCppHandle:
    """What :meth:`LlamaCppEngine.prepare` returns: GGUF paths, V, EOS, and a cache of ``Llama`` instances."""

    target_gguf: Path
    draft_gguf: Path
    vocab: int
    eos: int
    n_ctx: int = 128
    threads: int = 1
    cache: dict = field(default_factory=dict)
    #: the engine's own float32 logits (V,) at contexts its decoders emitted from (``Llama.scores`` under
    #: ``logits_all``): the law reads them instead of a separate target pass (issue 38, item 4)
    scores: dict = field(default_factory=dict)
    #: [contexts spot-checked against a fresh plain forward, max TV of their processed laws, first mismatch or None,
    #: contexts served from the scores]
    scores_check: list = field(default_factory=lambda: [0, 0.0, None, 0])

    #: processed laws the target callables computed: (setting label, context) -> (law (V,) float64, from scores)
    laws: dict = field(default_factory=dict)

    def new_source(self) -> None:
        """A new decoder: forget the previous decoder's scores and every law computed from them."""
        self.scores.clear()
        self.scores_check[:] = [0, 0.0, None, 0]
        self.forget_scores()

    def forget_scores(self) -> None:
        """Drop the laws that came from kept scores (a mismatch, or a new decoder)."""
        for k in [k for k, (_, from_scores) in self.laws.items() if from_scores]:
            del self.laws[k]

    def remember(self, context: tuple, logits) -> None:
        """Keep the engine's logits at ``context`` (the first seen; at most :data:`SCORES_ROWS` contexts)."""
        if context not in self.scores and len(self.scores) < SCORES_ROWS and not self.scores_check[2]:
            self.scores[context] = np.array(logits, dtype=np.float32)

    def llama(self, path, *, last_n: int | None, logits_all: bool = False, draft_model=None, key=None):
        """A cached ``Llama`` of ``path`` (``last_n`` = the penalty window; None: the whole context)."""
        from llama_cpp import Llama

        window = self.n_ctx if last_n is None else int(last_n)
        k = (str(path), window, logits_all, key)
        if key is None or k not in self.cache:
            kw = dict(LLAMA_KW, n_threads=self.threads, n_threads_batch=self.threads)
            llm = Llama(model_path=str(path), n_ctx=self.n_ctx, logits_all=logits_all, last_n_tokens_size=window,
                        draft_model=draft_model, **kw)
            if llm.n_vocab() != self.vocab:
                raise EngineUnavailable(f"{path} loads with n_vocab {llm.n_vocab()}, expected {self.vocab}")
            if key is None:
                return llm
            self.cache[k] = llm
        return self.cache[k]


# ----------------------------------------------------------------------------------------------------------------
# Standalone reproduction scripts


#: The standalone reproduction script of a FAIL (``LlamaCppEngine.repro_script``; ``str.format`` fields).
REPRO = '''#!/usr/bin/env python
"""Reproduce a resispec audit finding in llama-cpp-python {version} (CPU), without resispec.

{head}
Usage: python <this script> [N draws per path] (default 4000; exit 1 when p < 1e-3: the bias is reproduced)
The audit measured: token {token} observed {observed:.4f} vs exact {exact:.4f} ({count:,} draws with that prefix).
"""
import ctypes
import json
import os
from pathlib import Path

import numpy as np


class EngineUnavailable(Exception):
    """The adapter's exception (a plain one here)."""

{models}
# exactness/engines/llamacpp.py, pasted: the adapter's constants and the code its decoders and law run
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
LLAMA_KW = {llama_kw}

{pasted}

if __name__ == "__main__":
    import sys

    from llama_cpp import Llama, LogitsProcessorList
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    from scipy import stats

    V, OPTION, N_CTX = {vocab}, {option!r}, {n_ctx}
    PROMPT, PREFIX = {prompt}, {prefix}
    NEW = {new}  # tokens generated per request, as the audit generated them
    # Llama.generate keyword arguments, logit bias and penalty window of each path, as the audit passed them
    RUN_OFF = {run_off}
    RUN_ON = {run_on}
    LAW = {law}  # the setting the audit certified against
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000

    def kwargs(run):
        kw = dict(run["kw"])
        if run["logit_bias"]:  # create_completion's logit-bias processor, first in the sampler chain
            kw["logits_processor"] = LogitsProcessorList([logit_bias_processor(run["logit_bias"])])
        return kw

    def llama(path, window=None, draft_model=None):
        return Llama(model_path=path, n_ctx=N_CTX, logits_all=True,
                     last_n_tokens_size=N_CTX if window is None else window, draft_model=draft_model,
                     **dict(LLAMA_KW, n_threads=THREADS, n_threads_batch=THREADS))

    def draft_model():
        if OPTION == "ngram":
            return LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
        if OPTION in ("draft", "self_draft"):  # a draft GGUF run greedily, 3 tokens a round
            path = DRAFT_GGUF if OPTION == "draft" else TARGET_GGUF
            return GreedyDraftModel(llama(path), k=3, make=lambda: llama(path))
        return None

    def counts(on):
        """Counts of the token after PREFIX over N Llama.generate requests of PROMPT (one Llama, prompt warmed)."""
        run = RUN_ON if on else RUN_OFF
        llm = llama(TARGET_GGUF, run["penalty_window"], draft_model() if on else None)
        warm_prompt(llm, PROMPT)
        kw, c = kwargs(run), np.zeros(V)
        for i in range(N):
            llm.set_seed(int(on) * N + i + 1)
            gen, out = llm.generate(PROMPT, **kw), []
            try:
                for tok in gen:  # generate never stops on EOS: exactly NEW tokens
                    out.append(int(tok))
                    if len(out) == NEW:
                        break
            finally:
                gen.close()
            if out[:len(PREFIX)] == PREFIX:
                c[out[len(PREFIX)]] += 1
        return c

    def pooled(table, expected=None):
        """Columns with enough mass kept (expected >= 5, or >= 10 draws in all), the rest pooled into one: a
        chi-square on a large vocabulary is not read off cells of expected count ~0."""
        mass = expected if expected is not None else table.sum(axis=0)
        big = mass >= (5 if expected is not None else 10)
        return np.concatenate([table[..., big], table[..., ~big].sum(axis=-1, keepdims=True)], axis=-1)

    if OPTION == "off":  # the plain sampler against the engine's own law: one-sample chi-square
        c = counts(False)
        llm = llama(TARGET_GGUF, LAW["penalty_window"])
        exact = engine_law(llm, plain_logits(llm, PROMPT + PREFIX, len(PROMPT)), PREFIX, kwargs(LAW))
        freq = c / max(c.sum(), 1)
        if c[exact == 0].sum():
            p = 0.0  # a token the law gives probability 0
        elif c.sum():
            e = exact * c.sum()
            obs, want = pooled(c, e), pooled(e, e)
            p = stats.chisquare(obs[want > 0], want[want > 0]).pvalue
        else:
            p = 1.0
        print(f"draws with prefix {{PREFIX}}: off {{int(c.sum())}}; TV vs the exact law "
              f"{{0.5 * abs(freq - exact).sum():.4f}}, chi-square p = {{p:.3g}}")
        for t in np.argsort(-abs(freq - exact))[:5]:
            print(f"token {{t}}: speculation off {{freq[t]:.4f}}  exact {{exact[t]:.4f}}")
    else:  # speculation off vs on: two-sample chi-square
        c = np.stack([counts(False), counts(True)])
        t = pooled(c)
        t = t[:, t.sum(axis=0) > 0]
        p = stats.chi2_contingency(t).pvalue if t.shape[1] > 1 and c.sum(axis=1).min() > 0 else 1.0
        freq = c / np.maximum(c.sum(axis=1, keepdims=True), 1)
        print(f"draws with prefix {{PREFIX}}: off {{int(c[0].sum())}}, {{OPTION}} {{int(c[1].sum())}}; "
              f"TV {{0.5 * abs(freq[0] - freq[1]).sum():.4f}}, two-sample chi-square p = {{p:.3g}}")
        for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
            print(f"token {{t}}: speculation off {{freq[0, t]:.4f}}  {{OPTION}} {{freq[1, t]:.4f}}")
    sys.exit(1 if p < 1e-3 else 0)
'''


def _run_spec(settings) -> dict:
    """A path's settings as a script writes them: ``Llama.generate`` keywords (:func:`sampling_kwargs` without the
    logits processor), the logit bias it builds that processor from, the penalty window (``last_n_tokens_size``)."""
    kw = dict(top_k=int(settings.top_k), top_p=float(settings.top_p), min_p=float(settings.min_p), typical_p=1.0,
              temp=float(settings.temperature), repeat_penalty=float(settings.repetition_penalty),
              frequency_penalty=float(settings.frequency_penalty), presence_penalty=float(settings.presence_penalty))
    return {"kw": kw, "logit_bias": [[int(t), float(b)] for t, b in settings.logit_bias],
            "penalty_window": settings.penalty_window}


def _pasted_source() -> str:
    """The adapter's functions a script runs, as source (none imports the project)."""
    import inspect

    return "\n\n".join(inspect.getsource(f) for f in (logit_bias_processor, engine_law, held_prefix, last_logits,
                                                      warm_prompt, plain_logits, GreedyDraftModel))


def _models_source(models) -> str:
    """The script's model section: the tiny pair rebuilt (``tiny.standalone_build``) and written to GGUF by the
    pasted :func:`write_gguf`, or the user's GGUF paths as they are."""
    import inspect

    if getattr(models, "gguf", False):
        return (f"\n# the user's GGUF files, as the audit loaded them (all cores, up to 8)\n"
                f"TARGET_GGUF, DRAFT_GGUF = {str(models.target_dir)!r}, {str(models.draft_dir)!r}\n"
                f"THREADS = max(1, min(os.cpu_count() or 1, 8))\n")
    from .tiny import standalone_build

    return (standalone_build(models) + "\n\n# exactness/engines/llamacpp.py, pasted: HF safetensors -> GGUF float32 "
            "(the gguf package)\n" + inspect.getsource(_permute) + "\n\n" + inspect.getsource(write_gguf)
            + "\n\nTARGET_GGUF = str(write_gguf(TARGET, os.path.join(WORK, 'target.gguf')))\n"
            "DRAFT_GGUF = str(write_gguf(DRAFT, os.path.join(WORK, 'draft.gguf')))\nTHREADS = 1\n")


@register_engine("llama-cpp-python")
class LlamaCppEngine(Engine):
    """llama-cpp-python (``Llama.generate``, its ``draft_model=`` speculation), float32 GGUF on CPU."""

    distribution = "llama-cpp-python"
    install = "bash benchmarks/build_llamacpp.sh  # source build of llama-cpp-python 0.3.36, ~14 min on 2 cores"
    order = "llama-cpp-python"
    law_source = ("llama.cpp's own sampler chain (Llama._init_sampler via llama_sampler_apply, all but the final draw) "
                  "on Llama.eval logits")
    supported = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                           "frequency_penalty", "penalty_window", "logit_bias"})
    options = OPTIONS
    formats = ("hf", "gguf")
    context = 256   # n_ctx of every Llama: a prompt plus its new tokens must fit (the audit refuses more)

    def missing(self):
        from .base import module_found

        if not module_found("llama_cpp"):
            return f"llama-cpp-python is not installed: {self.install}"
        try:
            import llama_cpp  # noqa: F401  (the native library loads here)
        except Exception as exc:  # a broken build: OSError / RuntimeError from ctypes
            return f"llama_cpp does not import: {type(exc).__name__}: {exc}"
        return None

    def prepare(self, models, workdir):
        """Write ``target.gguf`` / ``draft.gguf`` (float32) under ``workdir``; returns a :class:`LlamaCppHandle`.

        Raises :class:`EngineUnavailable` when llama_cpp does not import or cannot load the GGUF.
        """
        why = self.missing()
        if why:
            raise EngineUnavailable(why)
        work = Path(workdir)
        if getattr(models, "gguf", False):  # the user's GGUF files, as they are (all cores: real models)
            tgt, drf = Path(models.target_dir), Path(models.draft_dir)
            handle = LlamaCppHandle(tgt, drf, int(models.vocab), int(models.eos), n_ctx=self.context,
                                    threads=max(1, min(os.cpu_count() or 1, 8)))
        else:
            tgt = write_gguf(models.target_dir, work / "target.gguf")
            drf = write_gguf(models.draft_dir, work / "draft.gguf")
            handle = LlamaCppHandle(tgt, drf, int(models.vocab), int(models.eos), n_ctx=self.context)
        try:
            handle.llama(tgt, last_n=None, logits_all=True, key="law")
        except (ValueError, RuntimeError, OSError) as exc:  # Llama() raises ValueError on a failed load
            raise EngineUnavailable(f"llama-cpp-python cannot load {tgt}: {exc}") from exc
        return handle

    def target(self, handle, settings, prompt_len):
        """The engine's law ``target(contexts (B, L) int64) -> (B, V) float64`` (see :func:`engine_law`).

        Raises :class:`EngineUnavailable` for a setting llama-cpp-python does not implement; the callable raises
        ``ValueError`` for contexts that are not (B, L) int64 with ``prompt_len <= L <= n_ctx``.
        """
        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        llm = handle.llama(handle.target_gguf, last_n=settings.penalty_window, logits_all=True, key="law")
        kw = sampling_kwargs(settings)

        def law(contexts):
            ctx = np.asarray(contexts)
            if ctx.ndim != 2 or ctx.dtype != np.int64:
                raise ValueError(f"contexts must be (B, L) int64, got shape {ctx.shape} dtype {ctx.dtype}")
            if not max(prompt_len, 1) <= ctx.shape[1] <= handle.n_ctx:
                raise ValueError(f"contexts length {ctx.shape[1]} must lie in [max(prompt_len, 1), n_ctx "
                                 f"{handle.n_ctx}] (prompt_len {prompt_len})")
            keys = [tuple(int(t) for t in row) for row in ctx]
            laws, trusted = {}, handle.scores_check[2] is None
            for key in sorted(set(keys)):  # sorted: neighbours share prefixes, so the KV cache is reused
                got = handle.laws.get((label, key))
                if got is None:
                    logits, from_scores = _logits(key)
                    got = handle.laws[(label, key)] = (engine_law(llm, logits, key[prompt_len:], kw), from_scores)
                laws[key] = got[0]
            if trusted and handle.scores_check[2] is not None:  # a mismatch during this call: no kept scores
                return law(contexts)
            while len(handle.laws) > LAW_ROWS:  # oldest first
                handle.laws.pop(next(iter(handle.laws)))
            return np.stack([laws[key] for key in keys]) if keys else np.zeros((0, handle.vocab), dtype=np.float64)

        label = settings.label()

        def _logits(key):
            """(logits, from scores): the engine's own, from its decoder's scores (spot-checked) or plain forwards."""
            kept = handle.scores.get(key)
            if kept is None or handle.scores_check[2]:
                return plain_logits(llm, key, prompt_len), False
            chk = handle.scores_check
            chk[3] += 1
            if chk[3] <= SPOT_FIRST or chk[3] % SPOT_EVERY == 0:
                fresh = plain_logits(llm, key, prompt_len)
                gen = key[prompt_len:]
                tv = float(0.5 * np.abs(engine_law(llm, kept, gen, kw) - engine_law(llm, fresh, gen, kw)).sum())
                chk[0], chk[1] = chk[0] + 1, max(chk[1], tv)
                if tv > SCORES_TOL:  # the decoder's logits are not plain decoding's: stop trusting them
                    chk[2] = {"context": list(key), "tv": tv}
                    handle.scores.clear()
                    handle.forget_scores()
                    return fresh, False
            return kept, True

        return law

    def decoder(self, handle, settings, option):
        """``option`` in :data:`OPTIONS` -> :class:`LlamaCppDecoder` (EngineUnavailable for another option)."""
        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        if option not in OPTIONS:
            raise EngineUnavailable(f"llama-cpp-python has no option {option!r}; options: {', '.join(OPTIONS)}")
        draft = None
        if option == "ngram":
            draft = CountingLookup(max_ngram_size=2, num_pred_tokens=3)
        elif option in ("draft", "self_draft"):
            path = handle.draft_gguf if option == "draft" else handle.target_gguf
            draft = GreedyDraftModel(handle.llama(path, last_n=None, logits_all=True, key=option), k=3,
                                     make=lambda: handle.llama(path, last_n=None, logits_all=True))
        handle.new_source()
        run = self.run_settings(settings, option)

        def make():
            return handle.llama(handle.target_gguf, last_n=run.penalty_window, logits_all=True, draft_model=draft)

        return LlamaCppDecoder(make(), sampling_kwargs(run), handle.vocab, draft=draft, handle=handle, make=make)

    def run_settings(self, settings, option):
        """The settings ``option``'s decoder runs with: ``settings`` itself (the one place a path's settings are
        chosen; :meth:`repro_script` writes each path's from here, so a script runs what the audit ran)."""
        return settings

    def repro_script(self, models, settings, option, offending, report):
        """A standalone script (llama-cpp-python, numpy, scipy; the tiny pair also needs torch, transformers,
        tokenizers, safetensors, gguf) for a FAIL of ``option``: the tiny pair rebuilt from the same seed and
        written to GGUF by the pasted :func:`write_gguf` (the user's GGUF files: their paths), then at the
        offending prefix ``Llama.generate`` without ``draft_model`` vs with the option's (two-sample chi-square), or
        for ``off`` the plain sampler vs the engine's own law (:func:`engine_law` on :func:`plain_logits`;
        one-sample chi-square).  Exit 1 when p < 1e-3.  Raises :class:`EngineUnavailable` for an unknown option.
        """
        import textwrap

        if option not in OPTIONS:
            raise EngineUnavailable(f"llama-cpp-python has no option {option!r}; options: {', '.join(OPTIONS)}")
        gguf = bool(getattr(models, "gguf", False))
        prompt, prefix = [int(t) for t in offending["prompt"]], [int(t) for t in offending["prefix"]]
        if option == "off":
            compare = ("N continuations from plain Llama.generate are compared with the engine's own law: its "
                       "float32 logits on plain decoding's schedule with its own sampler chain applied (all but the "
                       "final draw), softmax in float64 (one-sample chi-square).")
        else:
            compare = (f"N continuations from Llama.generate without a draft model and N with draft_model= "
                       f"{OPTIONS[option].split('draft_model=', 1)[-1]}; two-sample chi-square of that token's law.")
        model = ("the user's GGUF files, as the audit loaded them" if gguf else
                 "the tiny random Llama target (2 layers; draft 1 layer) rebuilt from the same seed and written to "
                 "GGUF float32 with the gguf package exactly as the audit wrote it")
        needs = "llama-cpp-python, numpy, scipy" + ("" if gguf else ", torch, transformers, tokenizers, safetensors, "
                                                                     "gguf")
        head = textwrap.fill(
            f"Setting {settings.label()!r}, option {option!r}: the law of new token {offending['position']} after "
            f"prompt {prompt} and prefix {prefix}.  {compare}  Models: {model}.  Needs {needs}.", 116)
        new = max(int(getattr(report, "new_tokens", 0) or 0), len(prefix) + 1)
        return REPRO.format(
            version=self.version(), head=head, token=offending.get("token", "-"),
            observed=offending.get("observed", float("nan")), exact=offending.get("exact", float("nan")),
            count=offending.get("count", 0), models=_models_source(models), llama_kw=repr(LLAMA_KW),
            pasted=_pasted_source(), vocab=int(models.vocab), option=option, n_ctx=int(self.context), prompt=prompt,
            prefix=prefix, new=new, run_off=repr(_run_spec(self.run_settings(settings, "off"))),
            run_on=repr(_run_spec(self.run_settings(settings, option))), law=repr(_run_spec(settings)))

    def acceptance(self, decoder) -> dict:
        """Drafted tokens proposed / kept over the decoder's calls (read from the engine's draft-model calls)."""
        h = getattr(decoder, "handle", None)
        law = {} if h is None else {"scores_kept": len(h.scores), "law_rows_served_from_scores": h.scores_check[3],
                                    "scores_spot_checked": h.scores_check[0], "scores_max_tv": h.scores_check[1],
                                    "scores_mismatch": h.scores_check[2]}
        if getattr(decoder, "draft", None) is None:
            return law
        return law | {"drafted": decoder.drafted, "checked": decoder.checked, "accepted": decoder.accepted,
                "rate": decoder.accepted / decoder.checked if decoder.checked else float("nan"),
                "rounds_checked": decoder.rounds_checked, "rounds_consistent": decoder.rounds_consistent}
