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

    kw = dict(top_k=int(settings.top_k), top_p=float(settings.top_p), min_p=float(settings.min_p), typical_p=1.0,
              temp=float(settings.temperature), repeat_penalty=float(settings.repetition_penalty),
              frequency_penalty=float(settings.frequency_penalty), presence_penalty=float(settings.presence_penalty))
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
        data = (lc.llama_token_data * V)()
        for i in range(V):
            data[i].id, data[i].logit, data[i].p = i, float(logits[i]), 0.0
        arr = lc.llama_token_data_array(data=ctypes.cast(data, lc.llama_token_data_p), size=V, selected=-1,
                                        sorted=False)
        for i in range(n - 1):
            lc.llama_sampler_apply(lc.llama_sampler_chain_get(chain, i), ctypes.byref(arr))
        ids = np.array([arr.data[i].id for i in range(arr.size)], dtype=np.int64)
        kept = np.array([arr.data[i].logit for i in range(arr.size)], dtype=np.float64)
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


# ----------------------------------------------------------------------------------------------------------------
# Speculative decoding


class GreedyDraftModel:
    """A ``llama_cpp.llama_speculative.LlamaDraftModel`` running a draft GGUF greedily for ``k`` tokens.

    llama-cpp-python ships only the abstract hook and prompt lookup; this is the smallest draft model through the
    hook (argmax of the draft's logits, a deterministic function of the context, as the hook's contract allows).
    ``proposals`` / ``lengths``: per call, the tokens proposed and the context length it was handed.
    """

    def __init__(self, llm, k: int = 3):
        self.llm, self.k = llm, int(k)
        self.proposals: list[list[int]] = []
        self.lengths: list[int] = []

    def __call__(self, input_ids, /, **kwargs):
        ids = [int(t) for t in input_ids]
        self.llm.reset()
        self.llm.eval(ids)
        out = []
        for _ in range(self.k):
            tok = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            out.append(tok)
            self.llm.eval([tok])
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

    def __call__(self, prompt, new_tokens, rng):
        seed = int(rng.integers(1, 2**32 - 1))  # 0xFFFFFFFF is LLAMA_DEFAULT_SEED (random)
        self.llm.set_seed(seed)
        start = len(self.draft.lengths) if self.draft is not None else 0
        ids = [int(t) for t in np.asarray(prompt)]
        gen = self.llm.generate(ids, **self.kw)
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
    cache: dict = field(default_factory=dict)

    def llama(self, path, *, last_n: int | None, logits_all: bool = False, draft_model=None, key=None):
        """A cached ``Llama`` of ``path`` (``last_n`` = the penalty window; None: the whole context)."""
        from llama_cpp import Llama

        window = self.n_ctx if last_n is None else int(last_n)
        k = (str(path), window, logits_all, key)
        if key is None or k not in self.cache:
            llm = Llama(model_path=str(path), n_ctx=self.n_ctx, logits_all=logits_all, last_n_tokens_size=window,
                        draft_model=draft_model, **LLAMA_KW)
            if llm.n_vocab() != self.vocab:
                raise EngineUnavailable(f"{path} loads with n_vocab {llm.n_vocab()}, expected {self.vocab}")
            if key is None:
                return llm
            self.cache[k] = llm
        return self.cache[k]


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

    def missing(self):
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
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
        tgt = write_gguf(models.target_dir, work / "target.gguf")
        drf = write_gguf(models.draft_dir, work / "draft.gguf")
        handle = LlamaCppHandle(tgt, drf, int(models.vocab), int(models.eos))
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
            out = np.empty((ctx.shape[0], handle.vocab), dtype=np.float64)
            for b, row in enumerate(ctx):
                llm.reset()
                llm.eval([int(t) for t in row])
                logits = np.array(llm.scores[len(row) - 1], dtype=np.float32)
                out[b] = engine_law(llm, logits, row[prompt_len:], kw)
            return out

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
            draft = GreedyDraftModel(handle.llama(path, last_n=None, logits_all=True, key=option), k=3)
        llm = handle.llama(handle.target_gguf, last_n=settings.penalty_window, draft_model=draft)
        return LlamaCppDecoder(llm, sampling_kwargs(settings), handle.vocab, draft=draft)

    def acceptance(self, decoder) -> dict:
        """Drafted tokens proposed / kept over the decoder's calls (read from the engine's draft-model calls)."""
        if getattr(decoder, "draft", None) is None:
            return {}
        return {"drafted": decoder.drafted, "checked": decoder.checked, "accepted": decoder.accepted,
                "rate": decoder.accepted / decoder.checked if decoder.checked else float("nan"),
                "rounds_checked": decoder.rounds_checked, "rounds_consistent": decoder.rounds_consistent}
