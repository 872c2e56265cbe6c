"""onnxruntime-genai as an audited engine: draft-model, n-gram and MTP speculative sampling, and plain sampling.

Models
------
:meth:`OrtGenaiEngine.prepare` converts the shared tiny checkpoints (``exactness.engines.tiny.build_tiny``) with
the engine's own model builder (``python -m onnxruntime_genai.models.builder -i <hf dir> -o <out> -p fp32 -e cpu``;
with ``-i`` a local directory nothing is downloaded; run in process), float32 on CPU.  Three edits, none of which
changes the model's function over the real vocabulary (``tests/test_engine_ortgenai.py`` cross-checks the engine's
logits against transformers float64 on the ORIGINAL checkpoint):

* **Heads widened to 16 dimensions** (:func:`_widen_heads`).  For fp32 on CPU the builder always emits
  GroupQueryAttention, whose CPU kernel requires ``head_size % 16 == 0`` (the tiny models have head_dim 8: the
  first forward fails with "head_size shall be a multiple of 16").  Each head is zero-padded with RoPE pairs and
  the attention scale preserved, an exact re-parametrisation.
* **A ghost EOS** (to generate exactly ``new_tokens`` tokens).  onnxruntime-genai stops a sequence at an EOS
  (``GreedySearch_Cpu::SetNextToken`` marks it done and pads the rest) and has no ``ignore_eos``;
  ``eos_token_id`` must lie in ``[0, vocab_size)`` (``Generator::Generator``) and an empty list falls back to
  ``pad_token_id`` (``config.cpp``).  So each exported graph gets one extra logit column, token ``V`` (the
  "ghost"), whose logit is float32 ``lowest`` (the value the engine itself writes to mask a token), and
  ``genai_config.json`` says ``vocab_size = V + 1``, ``eos_token_id = pad_token_id = V``.  The ghost has
  probability exactly 0 after every step of the engine's sampler (``exp((lowest - max) / T)`` underflows to 0; it
  never enters a top-k or a nucleus of mass < 1; it is never in the history the repetition penalty sees), so it is
  never drawn, EOS never stops a sequence, and the law over tokens ``0 .. V-1`` is the unedited model's.
  :meth:`OrtGenaiEngine.raw_logits` checks the ghost's logit on every row.
* **pad outside the vocabulary.**  A context token equal to ``pad_token_id`` is masked out of attention
  (``models/input_ids.cpp``: ``get_unpadded_sequence_length``); the tiny checkpoints' pad is ``t0``, a real token a
  continuation can emit.  ``pad_token_id = V`` (the ghost) is never in a context.

The law
-------
The engine does not expose its processed law: ``Generator.get_logits()`` returns the raw next-token scores
(penalties are applied in place inside ``generate_next_token``).  :meth:`target` is therefore the engine's OWN raw
float32 logits of the context (a batched Generator, one forward) with its documented order of operations applied
in float64 (``exactness.settings.processed_law`` with ``ORDERS["onnxruntime-genai"]``, declared below from the
engine's source).  The plain sampler (option ``off``) certifies that order against the engine's own draws.

Speculative options (0.18.0, CPU)
---------------------------------
``draft``: ``model.draft`` in ``genai_config.json`` (``BaseSpeculativeStrategy``: the 1-layer draft proposes K = 4
tokens sampled from its processed, truncated law; target verifies with min(1, p/q) and a residual draw);
``ngram``: ``speculative.ngram_size = 2`` (``NGramDecodingStrategy``: a deterministic proposal from the context,
verified by sampling the target and matching); ``ngram_chained``: the same with ``ngram_chained_lookup``;
``draft_adaptive``: the draft with ``min_adaptive_k = 1`` (K changes with measured throughput);
``draft_cooldown``: the draft with ``cooldown`` (a plain step after three zero-accept rounds).  The DFlash2 /
DSpark drafters (``builders/dflash2.py``, ``dspark.py``; driven by ``og.Engine``) need trained drafter heads of
their own and are not offered.  Speculative decoding takes batch 1 (``models/speculative_decoding.cpp``); option
``off`` decodes a batch of distinct prompts in one Generator.

Option ``mtp`` (its own model)
------------------------------
``og.MtpGenerator(main, head, params)`` with ``max_draft_tokens = 4``: the model's MTP head drafts, the main model
verifies.  The builder writes an MTP graph only for a Qwen3.5 / 3.6 checkpoint with ``mtp.*`` tensors, so this
option runs on a model of its own, built offline on first use by :mod:`exactness.engines.ort_mtp` (a tiny random
Qwen3.5, hidden 64, 2 layers, with a random 1-layer MTP head; the SAME vocabulary V and token ids, so the audit's
prompts and contexts are valid as they are) under ``workdir/ortgenai/mtp``.  On CPU its ``model.onnx`` must emit
float16 logits (see that module), so the law of option ``mtp`` is read from THIS model's raw logits through the
plain ``og.Generator`` -- the fp16 rounding is in the law as in the subject -- with the same documented order.
The engine declares ``own_law_options = {"mtp"}`` (``exactness.protocols.HOOKS``): the audit loop then asks
:meth:`OrtGenaiEngine.target` with ``option="mtp"`` for that cell's law, so the ``mtp`` cell is certified against
the MTP model's own law (its 'law TV' column is '-': the float64 twin in the audit is the shared target's; the MTP
model's law is cross-checked against transformers float64 rounded to float16 in ``tests/test_engine_ortgenai.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..settings import register_order
from . import ort_mtp
from .base import Engine, EngineUnavailable, register_engine
from .tiny import check_ids as _check_ids
from .tiny import widen_heads

#: Where the documented order below was read (onnxruntime-genai main, the 0.18 sampler).
ORDER_SOURCE = (
    "onnxruntime-genai src/sampling_distribution.h LogitsPenaltyProcessor::Apply (min-length, then repetition "
    "penalty over the whole sequence, prompt included: Search_Cpu::ApplyRepetitionPenalty uses "
    "sequences_.GetSequence(i); score < 0 ? score * r : score / r), then ComputeSampledCategorical: top-k on the "
    "scores (top_k > 1; top_k == 1 is greedy), probabilities exp((s - max) / T) renormalised over the top-k, "
    "nucleus inside them from the most likely down, keeping the token at which the cumulative mass first reaches "
    "top_p (inclusive); without top-k, FindNucleus (exact for vocab_size <= 64, a superset of the nucleus above). "
    "Shared by the speculative verifier (speculative_sampling.h ComputeTargetTokenSelection) and the draft "
    "(base_speculative_strategy.cpp Propose).")

register_order("onnxruntime-genai", ("repetition_penalty", "temperature", "top_k", "top_p:descending"), ORDER_SOURCE)

#: speculative option -> (the model it runs: "plain" the target, "spec" the target with model.draft, "mtp" the
#: MTP model's main + head through og.MtpGenerator; GeneratorParams.set_speculative_options keywords)
OPTION_SPEC = {
    "off": ("plain", {}),
    "draft": ("spec", {"max_draft_tokens": 4}),
    "draft_adaptive": ("spec", {"max_draft_tokens": 4, "min_adaptive_k": 1}),
    "draft_cooldown": ("spec", {"max_draft_tokens": 4, "cooldown": True}),
    "ngram": ("plain", {"ngram_size": 2, "max_draft_tokens": 4}),
    "ngram_chained": ("plain", {"ngram_size": 2, "max_draft_tokens": 4, "ngram_chained_lookup": True}),
    "mtp": ("mtp", {"max_draft_tokens": 4}),
}

#: Counters of ``Generator.get_speculative_stats()`` / ``MtpGenerator.get_stats()`` that add up over requests
#: (rates and timings do not).
COUNTERS = ("rounds", "draft_tokens_proposed", "draft_tokens_evaluated", "draft_tokens_accepted",
            "correction_tokens", "bonus_tokens", "tokens_emitted", "tokens_discarded", "draft_forward_passes",
            "target_forward_passes", "standard_fallback_steps", "ngram_lookup_hits", "ngram_lookup_misses",
            "mtp_failures")

#: float32 lowest: the logit of the ghost EOS column (the engine masks tokens with the same value).
GHOST_LOGIT = float(np.finfo(np.float32).min)
#: Output-head multiplier of option ``mtp``'s model (as ``tiny.build_tiny``'s default ``scale``: sharper laws).
MTP_SCALE = 8.0
#: The ghost's logit in the MTP model's float16 logits (float16 lowest: float32 lowest would cast to -inf).
MTP_GHOST_LOGIT = ort_mtp.FP16_GHOST
#: Rows per Generator in :meth:`OrtGenaiEngine.target` and the batched ``off`` decoder (the engine's limit is 32).
MAX_BATCH = 32


def _og():
    try:
        import onnxruntime_genai as og
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EngineUnavailable(f"onnxruntime-genai is not installed ({exc}): {OrtGenaiEngine.install}") from exc
    return og


def _add_ghost_column(onnx_path: Path, vocab: int) -> None:
    """Append logit column ``vocab`` = float32 lowest to the graph output ``logits`` (B, S, V) -> (B, S, V + 1)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(onnx_path), load_external_data=False)
    g = model.graph
    out = next((o for o in g.output if o.name == "logits"), None)
    if out is None:
        raise EngineUnavailable(f"{onnx_path}: the exported graph has no 'logits' output")
    dims = out.type.tensor_type.shape.dim
    if dims[-1].dim_value != vocab:
        raise EngineUnavailable(f"{onnx_path}: logits last dimension {dims[-1].dim_value}, expected {vocab}")
    for node in g.node:
        node.output[:] = ["logits_real" if o == "logits" else o for o in node.output]
    g.initializer.extend([
        helper.make_tensor("ghost_starts", TensorProto.INT64, [1], [0]),
        helper.make_tensor("ghost_ends", TensorProto.INT64, [1], [1]),
        helper.make_tensor("ghost_axes", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("ghost_zero", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("ghost_value", TensorProto.FLOAT, [], [GHOST_LOGIT]),
    ])
    g.node.extend([
        helper.make_node("Slice", ["logits_real", "ghost_starts", "ghost_ends", "ghost_axes"], ["ghost_col"]),
        helper.make_node("Mul", ["ghost_col", "ghost_zero"], ["ghost_zeros"]),  # (B, S, 1) zeros
        helper.make_node("Add", ["ghost_zeros", "ghost_value"], ["ghost_logit"]),  # (B, S, 1) = lowest
        helper.make_node("Concat", ["logits_real", "ghost_logit"], ["logits"], axis=-1),
    ])
    dims[-1].dim_value = vocab + 1
    onnx.save(model, str(onnx_path))


#: The head size onnxruntime's CPU GroupQueryAttention kernel takes a multiple of (the builder always uses GQA for
#: fp32 on CPU; head_size 8 fails at run time with "head_size shall be a multiple of 16").
GQA_HEAD_MULTIPLE = 16


def _widen_heads(hf_dir: Path, out: Path) -> Path:
    """``hf_dir`` when its head dim is a multiple of ``GQA_HEAD_MULTIPLE`` (16: onnxruntime's CPU
    GroupQueryAttention), else the same Llama with each head zero-padded to 16 dimensions written under ``out``
    (:func:`exactness.engines.tiny.widen_heads`, an exact re-parametrisation)."""
    cfg = json.loads((Path(hf_dir) / "config.json").read_text())
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    if d % GQA_HEAD_MULTIPLE == 0:
        return Path(hf_dir)
    return widen_heads(hf_dir, out, GQA_HEAD_MULTIPLE)


def _build(jobs, vocab: int) -> None:
    """Run the model builder on each ``(hf_dir, out)`` of ``jobs``, then add the ghost EOS to each output.

    The builder's own entry point, in process (``onnxruntime_genai.models.builder``: ``parse_extra_options`` then
    ``create_model``, what ``python -m onnxruntime_genai.models.builder -i HF -o OUT -p fp32 -e cpu`` runs; with a
    local ``-i`` nothing is downloaded).  Raises :class:`EngineUnavailable` with the cause when a conversion fails.
    """
    import contextlib
    import io

    try:
        from onnxruntime_genai.models import builder
    except ImportError as exc:
        raise EngineUnavailable(f"the onnxruntime-genai model builder does not import ({exc}): "
                                f"{OrtGenaiEngine.install}") from exc
    for hf_dir, out in jobs:
        src = _widen_heads(Path(hf_dir), out.parent / f"hf_{out.name}")
        args = (None, str(src), str(out), "fp32", "cpu", str(out.parent / f"cache_{out.name}"))
        log = io.StringIO()
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                extra = builder.parse_extra_options(*args, {})
                builder.create_model(*args, **extra)
        except Exception as exc:  # the builder raises ValueError / NotImplementedError / onnx errors
            raise EngineUnavailable(f"the onnxruntime-genai model builder failed on {hf_dir}: "
                                    f"{type(exc).__name__}: {exc}") from exc
        if not (out / "model.onnx").exists():
            raise EngineUnavailable(f"the onnxruntime-genai model builder wrote no model.onnx for {hf_dir}: "
                                    f"{' | '.join(log.getvalue().strip().splitlines()[-3:])}")
        _add_ghost_column(out / "model.onnx", vocab)
        cfg_path = out / "genai_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["model"].update(vocab_size=vocab + 1, eos_token_id=vocab, pad_token_id=vocab, bos_token_id=vocab)
        cfg["search"].update(top_k=0, top_p=1.0, do_sample=True)
        cfg_path.write_text(json.dumps(cfg, indent=2))


#: The standalone reproduction script of a FAIL (``OrtGenaiEngine.repro_script``; ``str.format`` fields; the model
#: section ``builder`` defines ``load_models(mode) -> (plain og.Model, the option's og.Model)``).
REPRO = '''#!/usr/bin/env python
"""Reproduce a resispec audit finding in onnxruntime-genai {version} (CPU), without resispec.

{head}
Usage: python <this script> [N draws per path] (default 4000; exit 1 when p < 1e-3: the bias is reproduced)
The audit measured: token {token} observed {observed:.4f} vs exact {exact:.4f} ({count:,} draws with that prefix).
"""
{builder}

if __name__ == "__main__":
    import sys

    import numpy as np
    import onnxruntime_genai as og
    from scipy import stats

    V, OPTION, MODE = {vocab}, {option!r}, {mode!r}
    PROMPT, PREFIX, PROMPTS = {prompt}, {prefix}, {prompts}
    NEW = {new}  # tokens generated per draw, as the audit generated them
    SEARCH_OFF = {search_off}  # GeneratorParams.set_search_options of speculation off, as the audit passed them
    SEARCH_ON = {search_on}  # the same for option OPTION, as the audit passed them
    SPECULATIVE = {spec}  # GeneratorParams.set_speculative_options of option OPTION
    LAW = {law}  # the setting the audit certified against
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    plain, model = load_models(MODE)

    def draw(on, seed, rows):
        """The NEW tokens of each row of one request (on: option OPTION; off: the plain og.Generator)."""
        m = model if on and MODE != "mtp" else plain  # mtp: the params are the main model's
        params = og.GeneratorParams(m)
        params.set_search_options(**(SEARCH_ON if on else SEARCH_OFF), max_length=len(rows[0]) + NEW,
                                  batch_size=len(rows), random_seed=seed)
        if on and SPECULATIVE:
            params.set_speculative_options(**SPECULATIVE)
        if on and MODE == "mtp":
            gen = og.MtpGenerator(plain, model, params)
            gen.append_tokens(np.array(rows[0], dtype=np.int32))
        else:
            gen = og.Generator(m, params)
            gen.append_tokens(np.array(rows, dtype=np.int32))
        for _ in range(NEW):
            gen.generate_next_token()
        if on and MODE == "mtp":
            return [[int(t) for t in gen.get_sequence()][len(rows[0]):]]
        return [[int(t) for t in gen.get_sequence(b)][len(rows[0]):] for b in range(len(rows))]

    def counts(on):
        """Counts of the token after PREFIX over N requests of PROMPT (option off: batched with the audit's prompts,
        one Generator holding them all, as the audit's plain decoder batches distinct prompts)."""
        rows = PROMPTS if OPTION == "off" and PROMPT in PROMPTS else [PROMPT]
        row, c = rows.index(PROMPT), np.zeros(V)
        for i in range(N):
            new = draw(on, int(on) * N + i + 1, rows)[row]
            if new[:len(PREFIX)] == PREFIX:
                c[new[len(PREFIX)]] += 1
        return c

    def exact_law():
        """The engine's raw float32 logits of PROMPT + PREFIX (Generator.get_logits) with its documented order in
        float64: repetition penalty over the whole sequence (prompt included; l / r if l > 0 else l * r),
        temperature, top-k (ties kept), top-p from the most likely down (the token reaching top_p kept)."""
        ctx = PROMPT + PREFIX
        params = og.GeneratorParams(plain)
        params.set_search_options(do_sample=True, top_k=0, top_p=1.0, max_length=len(ctx) + 1, batch_size=1)
        gen = og.Generator(plain, params)
        gen.append_tokens(np.array([ctx], dtype=np.int32))
        x = np.asarray(gen.get_logits(), dtype=np.float64).reshape(-1)[:V]  # column V is the ghost EOS
        r = LAW["repetition_penalty"]
        if r != 1.0:
            seen = np.unique(ctx)
            x[seen] = np.where(x[seen] > 0, x[seen] / r, x[seen] * r)
        x = x / LAW["temperature"]
        if 0 < LAW["top_k"] < V:
            x = np.where(x < np.sort(x)[-LAW["top_k"]], -np.inf, x)
        p = np.exp(x - x.max())
        p /= p.sum()
        if LAW["top_p"] < 1.0:
            order = np.argsort(-x, kind="stable")
            keep = np.searchsorted(np.cumsum(p[order]), LAW["top_p"]) + 1
            p[order[keep:]] = 0.0
            p /= p.sum()
        return p

    if OPTION == "off":  # the plain sampler against the exact law: one-sample chi-square
        c, exact = counts(False), exact_law()
        keep = exact > 0
        p = 0.0 if c[~keep].sum() else (stats.chisquare(c[keep], exact[keep] / exact[keep].sum() * c.sum()).pvalue
                                        if c.sum() else 1.0)
        freq = c / max(c.sum(), 1)
        print(f"draws with prefix {{PREFIX}}: off {{int(c.sum())}}; TV vs the exact law "
              f"{{0.5 * abs(freq - exact).sum():.4f}}, chi-square p = {{p:.3g}}")
        for t in np.argsort(-abs(freq - exact))[:5]:
            print(f"token {{t}}: speculation off {{freq[t]:.4f}}  exact {{exact[t]:.4f}}")
    else:  # speculation off vs on: two-sample chi-square
        c = np.stack([counts(False), counts(True)])
        keep = c.sum(axis=0) > 0
        p = stats.chi2_contingency(c[:, keep]).pvalue if keep.sum() > 1 and c.sum(axis=1).min() > 0 else 1.0
        freq = c / np.maximum(c.sum(axis=1, keepdims=True), 1)
        print(f"draws with prefix {{PREFIX}}: off {{int(c[0].sum())}}, {{OPTION}} {{int(c[1].sum())}}; "
              f"TV {{0.5 * abs(freq[0] - freq[1]).sum():.4f}}, two-sample chi-square p = {{p:.3g}}")
        for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
            print(f"token {{t}}: speculation off {{freq[0, t]:.4f}}  {{OPTION}} {{freq[1, t]:.4f}}")
    sys.exit(1 if p < 1e-3 else 0)
'''

#: The model section of a reproduction script on the shared tiny Llama pair (``@NAME@`` fields filled by
#: :func:`_llama_builder_source`): the pair rebuilt, then converted exactly as :func:`_build` converts it.
_LLAMA_BUILDER = '''
import contextlib
import io
from pathlib import Path

import numpy as np

#: float32 lowest: the logit of the ghost EOS column (exactness/engines/ortgenai.py GHOST_LOGIT).
GHOST_LOGIT = @GHOST@
#: onnxruntime's CPU GroupQueryAttention takes head sizes that are multiples of 16; the tiny models have 8.
GQA_HEAD_MULTIPLE = 16


class EngineUnavailable(Exception):
    """A conversion step failed (the adapter's exception; a plain one here)."""


# pasted from exactness/engines/tiny.py: each head zero-padded to 16 dimensions, an exact re-parametrisation
@WIDEN@

# pasted from exactness/engines/ortgenai.py: one extra logit column V (the ghost EOS, never drawn)
@GHOST_COLUMN@

def convert(hf_dir, out):
    """onnxruntime-genai's own model builder (python -m onnxruntime_genai.models.builder -i HF -o OUT -p fp32 -e cpu,
    in process), heads widened first, then the ghost EOS and genai_config.json edits: exactness/engines/ortgenai.py
    _build."""
    from onnxruntime_genai.models import builder

    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    src = hf_dir if d % GQA_HEAD_MULTIPLE == 0 else str(widen_heads(hf_dir, out + "_hf", GQA_HEAD_MULTIPLE))
    args = (None, src, out, "fp32", "cpu", out + "_cache")
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        extra = builder.parse_extra_options(*args, {})
        builder.create_model(*args, **extra)
    _add_ghost_column(Path(out) / "model.onnx", V)
    path = os.path.join(out, "genai_config.json")
    cfg = json.load(open(path))
    cfg["model"].update(vocab_size=V + 1, eos_token_id=V, pad_token_id=V, bos_token_id=V)
    cfg["search"].update(top_k=0, top_p=1.0, do_sample=True)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return out


def load_models(mode):
    """(plain og.Model of the target, the og.Model option mode runs: the target with model.draft for "spec")."""
    import onnxruntime_genai as og

    target = convert(TARGET, os.path.join(WORK, "target_onnx"))
    plain = og.Model(target)
    if mode != "spec":
        return plain, plain
    draft = convert(DRAFT, os.path.join(WORK, "draft_onnx"))
    cfg = og.Config(target)
    dec = json.load(open(os.path.join(draft, "genai_config.json")))["model"]["decoder"]
    dec["filename"] = f"../{os.path.basename(draft)}/{dec['filename']}"  # joined to the target dir as text
    cfg.overlay(json.dumps({"model": {"draft": dec}}))
    return plain, og.Model(cfg)
'''

#: The model section of an ``mtp`` reproduction script (after the pasted :mod:`~exactness.engines.ort_mtp`).
_MTP_LOADER = '''

V, SEED, SCALE = @VOCAB@, @SEED@, @SCALE@


def load_models(mode):
    """(main, head): option mtp's tiny Qwen3.5 + MTP head, rebuilt by the pasted builder above."""
    import atexit
    import tempfile

    import onnxruntime_genai as og

    work = tempfile.mkdtemp(prefix="repro-ort-mtp-")
    atexit.register(shutil.rmtree, work, True)  # nothing left behind
    main_dir, mtp_dir = build_mtp_models(os.path.join(work, "m"), V, SEED, SCALE)
    return og.Model(main_dir), og.Model(mtp_dir)
'''


def _llama_builder_source(models) -> str:
    """The tiny pair's standalone build (``tiny.standalone_build``), :func:`tiny.widen_heads` and
    :func:`_add_ghost_column` pasted, and the builder call of :func:`_build`: the model section of a script."""
    import inspect

    from . import tiny
    from .tiny import standalone_build

    widen = inspect.getsource(tiny.widen_heads)
    drop = "    from .base import EngineUnavailable\n\n"
    if drop not in widen:  # the pasted source must not import the project
        raise EngineUnavailable("tiny.widen_heads no longer imports EngineUnavailable as the script expects")
    section = (_LLAMA_BUILDER.replace("@GHOST@", repr(GHOST_LOGIT)).replace("@WIDEN@", widen.replace(drop, ""))
               .replace("@GHOST_COLUMN@", inspect.getsource(_add_ghost_column)))
    return standalone_build(models) + section


def _mtp_builder_source() -> str:
    """:mod:`exactness.engines.ort_mtp` as pasteable source (its docstring and ``__future__`` import dropped)."""
    import inspect

    src = inspect.getsource(ort_mtp)
    return src[src.index("from __future__ import annotations\n") + len("from __future__ import annotations\n"):]


class OrtGenaiHandle:
    """The converted models: ``plain`` (target alone) and ``spec`` (target with ``model.draft``), ``vocab`` V.

    :meth:`mtp` builds and loads option ``mtp``'s own model on first use (under ``mtp_root``, seeded by ``seed``).
    """

    def __init__(self, target_dir: Path, draft_dir: Path, vocab: int, mtp_root: Path | None = None, seed: int = 0):
        og = _og()
        self.vocab, self.target_dir, self.draft_dir = vocab, target_dir, draft_dir
        self.mtp_root, self.seed = mtp_root, int(seed)
        self._mtp = None
        try:
            self.plain = og.Model(str(target_dir))
            cfg = og.Config(str(target_dir))
            draft_dec = json.loads((draft_dir / "genai_config.json").read_text())["model"]["decoder"]
            draft_dec["filename"] = f"../{draft_dir.name}/{draft_dec['filename']}"  # joined to the target dir as text
            cfg.overlay(json.dumps({"model": {"draft": draft_dec}}))
            self.spec = og.Model(cfg)
        except Exception as exc:  # the engine raises RuntimeError / OgaResult errors
            raise EngineUnavailable(f"onnxruntime-genai cannot load the converted models: {exc}") from exc

    def mtp(self):
        """``(main, head)``: the ``og.Model`` pair of option ``mtp`` (``ort_mtp.build_mtp_models`` under ``mtp_root``,
        reused when its ``done.json`` records the same vocab, seed, scale, engine version and builder source).

        Raises :class:`EngineUnavailable` with the cause when the handle has no ``mtp_root``, or the checkpoint,
        the builder or the engine fails (e.g. a transformers without Qwen3.5).
        """
        import hashlib
        import inspect

        if self._mtp is not None:
            return self._mtp
        if self.mtp_root is None:
            raise EngineUnavailable("this onnxruntime-genai handle has no mtp_root: option mtp needs its own model "
                                    "(OrtGenaiEngine.prepare sets it)")
        og = _og()
        root = Path(self.mtp_root)
        stamp = {"vocab": self.vocab, "seed": self.seed, "scale": MTP_SCALE, "version": OrtGenaiEngine().version(),
                 "builder": hashlib.sha256(inspect.getsource(ort_mtp).encode()).hexdigest()[:16]}
        done = root / "done.json"
        try:
            if not (done.exists() and json.loads(done.read_text()) == stamp):
                ort_mtp.build_mtp_models(root, self.vocab, self.seed, MTP_SCALE)
                done.write_text(json.dumps(stamp))
            self._mtp = (og.Model(str(root / "onnx")), og.Model(str(root / "mtp_pkg")))
        except Exception as exc:  # transformers / the builder / the engine: any failure leaves mtp unavailable
            raise EngineUnavailable(f"onnxruntime-genai option mtp: its tiny Qwen3.5 + MTP model could not be built "
                                    f"or loaded under {root}: {type(exc).__name__}: {exc}") from exc
        return self._mtp

    def law_model(self, option: str):
        """``(og.Model, ghost logit)`` whose plain logits give ``option``'s law: the MTP main model (float16 logits)
        for ``mtp``, the shared target (float32) for every other option."""
        return (self.mtp()[0], MTP_GHOST_LOGIT) if option == "mtp" else (self.plain, GHOST_LOGIT)


def search_options(settings, *, max_length: int, batch_size: int = 1, seed: int | None = None) -> dict:
    """``SamplingSettings`` -> ``GeneratorParams.set_search_options`` keywords (top-k 0 and top-p 1: off)."""
    opts = dict(do_sample=True, temperature=float(settings.temperature), top_k=int(settings.top_k),
                top_p=float(settings.top_p), repetition_penalty=float(settings.repetition_penalty),
                min_length=0, max_length=int(max_length), batch_size=int(batch_size), num_beams=1)
    if seed is not None:
        opts["random_seed"] = int(seed)
    return opts


class OrtGenaiDecoder:
    """``decoder.sample(prompts (B, L) int64, new_tokens, rng) -> (B, new_tokens) int64`` through onnxruntime-genai.

    ``off``: one Generator per call holds all B distinct prompts (the engine's batching; one ``random_seed`` drawn
    from ``rng`` per call).  Speculative options: batch 1 (the engine's limit), one Generator and one seed per row.
    Option ``mtp``: one ``og.MtpGenerator`` (the MTP model's main + head) per row.  Every Generator runs exactly
    ``new_tokens`` ``generate_next_token`` steps (the ghost EOS is never drawn).  :attr:`stats` sums the engine's
    ``get_speculative_stats()`` (``MtpGenerator.get_stats()``) over requests.  Engine errors propagate.
    """

    def __init__(self, handle: OrtGenaiHandle, settings, option: str):
        self.handle, self.settings, self.option = handle, settings, option
        self.model_key, self.spec_kw = OPTION_SPEC[option]
        if self.model_key == "mtp":
            handle.mtp()  # built / loaded now: EngineUnavailable here, not while decoding
        self.stats: dict = {}

    def _params(self, model, *, max_length, batch_size, seed):
        og = _og()
        params = og.GeneratorParams(model)
        params.set_search_options(**search_options(self.settings, max_length=max_length, batch_size=batch_size,
                                                   seed=seed))
        if self.spec_kw:
            params.set_speculative_options(**self.spec_kw)
        return params

    def _run(self, rows: np.ndarray, new_tokens: int, seed: int) -> np.ndarray:
        og = _og()
        b, length = rows.shape
        if self.model_key == "mtp":
            main, head = self.handle.mtp()
            gen = og.MtpGenerator(main, head, self._params(main, max_length=length + new_tokens, batch_size=b,
                                                           seed=seed))
        else:
            model = self.handle.spec if self.model_key == "spec" else self.handle.plain
            gen = og.Generator(model, self._params(model, max_length=length + new_tokens, batch_size=b, seed=seed))
        gen.append_tokens(np.ascontiguousarray(rows if self.model_key != "mtp" else rows[0], dtype=np.int32))
        for _ in range(new_tokens):
            gen.generate_next_token()
        if self.model_key == "mtp":
            out = np.asarray(gen.get_sequence(), dtype=np.int64)[None, :]
            stats = gen.get_stats()
        else:
            out = np.stack([np.asarray(gen.get_sequence(i), dtype=np.int64) for i in range(b)])
            stats = gen.get_speculative_stats() if self.option != "off" else {}
        if self.option != "off":
            for k, v in stats.items():
                if k in COUNTERS:
                    self.stats[k] = self.stats.get(k, 0) + int(v)
        if out.shape[1] != length + new_tokens:
            raise RuntimeError(f"onnxruntime-genai returned {out.shape[1] - length} new tokens, asked for {new_tokens}")
        return out[:, length:]

    def sample(self, prompts, new_tokens: int, rng) -> np.ndarray:
        prompts = _check_ids("prompts", np.asarray(prompts) if isinstance(prompts, list) else prompts,
                             self.handle.vocab)
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
            raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        step = MAX_BATCH if self.option == "off" else 1
        parts = [self._run(prompts[i:i + step], int(new_tokens), int(rng.integers(0, 2**31 - 1)))
                 for i in range(0, len(prompts), step)]
        return np.concatenate(parts) if parts else np.empty((0, new_tokens), np.int64)

    def __call__(self, prompt, new_tokens: int, rng) -> np.ndarray:
        if not isinstance(prompt, np.ndarray) or prompt.ndim != 1:
            raise TypeError("prompt must be a (L,) numpy int64 array")
        return self.sample(prompt[None, :], new_tokens, rng)[0]


@register_engine("onnxruntime-genai")
class OrtGenaiEngine(Engine):
    """onnxruntime-genai (``og.Generator``), float32 models from its own builder, CPU execution provider."""

    distribution = "onnxruntime-genai"
    install = 'pip install -e ".[audit-ortgenai]"  # onnxruntime-genai, onnx, onnx-ir (its model builder)'
    order = "onnxruntime-genai"
    law_source = ("the engine's raw fp32 logits (Generator.get_logits) with its documented order applied in float64: "
                  "the processed law is not exposed; option off certifies the order against the engine's own draws")
    supported = frozenset({"temperature", "top_k", "top_p", "repetition_penalty"})
    options = {
        "off": "plain Generator(do_sample=True), batched distinct prompts: speculation off (must pass)",
        "draft": "model.draft = the 1-layer tiny draft (BaseSpeculativeStrategy, K = 4, rejection sampling)",
        "draft_adaptive": "the draft with min_adaptive_k = 1 (K adapts to measured throughput, up to 16)",
        "draft_cooldown": "the draft with cooldown (a plain step after three zero-accept rounds)",
        "ngram": "n-gram prompt lookup (NGramDecodingStrategy, ngram_size 2, K = 4, sample-and-match)",
        "ngram_chained": "n-gram lookup refilled from its own synthetic context (ngram_chained_lookup)",
        "mtp": "og.MtpGenerator, K = 4, on its own tiny Qwen3.5 with a random 1-layer MTP head (float16 logits; "
               "its law from that model's plain Generator)",
    }
    #: options that run a model of their own: the audit asks target(..., option=) for their law
    own_law_options = frozenset({"mtp"})

    def missing(self):
        from .base import module_found

        for mod in ("onnxruntime_genai", "onnx", "onnx_ir"):
            if not module_found(mod):
                return f"{mod} is not installed: {self.install}"
        return None

    def prepare(self, models, workdir) -> OrtGenaiHandle:
        """Convert ``models`` (``TinyModels``) with the builder into ``workdir/ortgenai/{target,draft}``.

        Reuses a finished conversion (``done.json`` records the tiny stamp).  Option ``mtp``'s own model is built
        under ``workdir/ortgenai/mtp`` on first use (:meth:`OrtGenaiHandle.mtp`), not here.  Raises
        :class:`EngineUnavailable` when the engine or its builder's dependencies are missing, or the builder fails
        (with its last lines).
        """
        why = self.missing()
        if why:
            raise EngineUnavailable(why)
        root = Path(workdir) / "ortgenai"
        stamp = {"target": str(models.target_dir), "draft": str(models.draft_dir), "vocab": int(models.vocab),
                 "seed": int(models.seed), "version": self.version()}
        done = root / "done.json"
        if not (done.exists() and json.loads(done.read_text()) == stamp):
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            _build([(models.target_dir, root / "target"), (models.draft_dir, root / "draft")], models.vocab)
            done.write_text(json.dumps(stamp))
        return OrtGenaiHandle(root / "target", root / "draft", int(models.vocab), mtp_root=root / "mtp",
                              seed=int(models.seed))

    def raw_logits(self, handle: OrtGenaiHandle, contexts, option: str = "off") -> np.ndarray:
        """The engine's own next-token logits of ``contexts`` (B, L) int64 -> (B, V) float64, from the model of
        ``option`` (:meth:`OrtGenaiHandle.law_model`: float32 logits of the shared target; float16 logits of the MTP
        model for ``mtp``).

        One batched plain ``Generator`` per 32 rows (``append_tokens`` then ``get_logits``).  Raises
        ``RuntimeError`` if the ghost column is not the model's ghost logit (the edited graph is not the one
        loaded).
        """
        og = _og()
        ctx = _check_ids("contexts", contexts, handle.vocab)
        model, ghost = handle.law_model(option)
        out = []
        for i in range(0, len(ctx), MAX_BATCH):
            rows = ctx[i:i + MAX_BATCH]
            params = og.GeneratorParams(model)
            params.set_search_options(do_sample=True, top_k=0, top_p=1.0, max_length=rows.shape[1] + 1,
                                      batch_size=len(rows))
            gen = og.Generator(model, params)
            gen.append_tokens(np.ascontiguousarray(rows, dtype=np.int32))
            lg = np.asarray(gen.get_logits(), dtype=np.float64).reshape(len(rows), -1)
            if lg.shape[1] != handle.vocab + 1 or not np.all(lg[:, -1] == ghost):
                raise RuntimeError(f"onnxruntime-genai logits have shape {lg.shape} / ghost column "
                                   f"{lg[:, -1].min() if lg.size else None}; expected {handle.vocab + 1} columns "
                                   f"ending in {ghost}")
            out.append(lg[:, :-1])
        return np.concatenate(out) if out else np.empty((0, handle.vocab))

    def target(self, handle, settings, prompt_len, option: str | None = None):
        """Engine raw logits + ``ORDERS["onnxruntime-genai"]`` in float64: ``contexts (B, L) -> (B, V)``.

        ``option``: the speculative option whose model the law is of; None or any option but ``mtp`` (the one in
        :attr:`own_law_options`) is the shared target's law.
        """
        from ..settings import processed_law

        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        if option is not None and option not in OPTION_SPEC:
            raise EngineUnavailable(f"onnxruntime-genai has no option {option!r}; options: {', '.join(OPTION_SPEC)}")
        which = option or "off"

        def law(contexts):
            ctx = np.asarray(contexts, dtype=np.int64)
            raw = self.raw_logits(handle, ctx, which)
            return processed_law(raw, ctx, prompt_len, settings, self.order)

        return law

    def decoder(self, handle, settings, option):
        """An :class:`OrtGenaiDecoder` for ``option`` (EngineUnavailable for an unknown option or setting, or an
        MTP model that cannot be built)."""
        self.check_settings(settings)
        settings.vocab_check(handle.vocab)
        if option not in OPTION_SPEC:
            raise EngineUnavailable(f"onnxruntime-genai has no option {option!r}; options: {', '.join(OPTION_SPEC)}")
        if settings.top_k > handle.vocab:
            raise EngineUnavailable(f"onnxruntime-genai rejects top_k > vocab_size ({settings.top_k} > {handle.vocab})")
        return OrtGenaiDecoder(handle, self.run_settings(settings, option), option)

    def run_settings(self, settings, option):
        """The settings ``option``'s decoder runs with: ``settings`` itself (the one place a path's settings are
        chosen; :meth:`repro_script` writes each path's from here, so a script runs what the audit ran)."""
        return settings

    def repro_script(self, models, settings, option, offending, report):
        """A standalone script (no resispec) for a FAIL of ``option``: the model rebuilt and converted inside it
        (the tiny Llama pair through the engine's own builder, :func:`_build`; ``mtp``: the pasted
        :mod:`~exactness.engines.ort_mtp`), then at the offending prefix speculation off (``og.Generator``) vs
        ``option`` (two-sample chi-square), or for ``off`` the plain sampler vs the exact law from the engine's raw
        logits and its documented order (one-sample chi-square).  Exit 1 when p < 1e-3.

        Raises :class:`EngineUnavailable` for an unknown option.
        """
        import textwrap

        if option not in OPTION_SPEC:
            raise EngineUnavailable(f"onnxruntime-genai has no option {option!r}; options: {', '.join(OPTION_SPEC)}")
        mode, spec = OPTION_SPEC[option]

        def search(s):
            out = search_options(s, max_length=1)
            for key in ("max_length", "batch_size"):
                out.pop(key)
            return out

        law = {k: v for k, v in search(settings).items()
               if k in ("temperature", "top_k", "top_p", "repetition_penalty")}
        if mode == "mtp":
            builder = _mtp_builder_source() + (_MTP_LOADER.replace("@VOCAB@", str(int(models.vocab)))
                                               .replace("@SEED@", str(int(models.seed)))
                                               .replace("@SCALE@", repr(MTP_SCALE)))
            model = ("option mtp's tiny random Qwen3.5 with a random 1-layer MTP head (its builder pasted below "
                     "from exactness/engines/ort_mtp.py)")
        else:
            builder = _llama_builder_source(models)
            model = ("the tiny random Llama target (2 layers; draft 1 layer), converted with onnxruntime-genai's "
                     "own model builder exactly as the audit converted it (heads zero-padded to 16 dimensions, a "
                     "ghost EOS column never drawn)")
        if option == "off":
            compare = ("N continuations from the plain og.Generator (one Generator holding the audit's prompts) "
                       "are compared with the exact law: the engine's own raw float32 logits (get_logits) with its "
                       "documented order in float64 (one-sample chi-square).")
        else:
            compare = (f"N continuations with speculation off (og.Generator) and N with "
                       f"{'og.MtpGenerator' if mode == 'mtp' else 'set_speculative_options'}({spec})"
                       f"{' on the target with model.draft = the 1-layer draft' if mode == 'spec' else ''}; "
                       "two-sample chi-square of that token's law.")
        prompts = report.prompts if report is not None and getattr(report, "prompts", None) else \
            models.prompts.tolist()
        new = max(int(getattr(report, "new_tokens", 0) or 0), len(offending["prefix"]) + 1)
        prompt, prefix = [int(t) for t in offending["prompt"]], [int(t) for t in offending["prefix"]]
        head = textwrap.fill(
            f"Setting {settings.label()!r}, option {option!r} ({self.options[option]}): the law of new token "
            f"{offending['position']} after prompt {prompt} and prefix {prefix}.  {compare}  The model is rebuilt "
            f"here from the same seed, nothing downloaded: {model}.  Needs torch, transformers, tokenizers, "
            "safetensors, onnx, onnx-ir, onnxruntime-genai, numpy, scipy.", 116)
        return REPRO.format(
            version=self.version(), head=head, option=option, prompt=prompt, prefix=prefix,
            token=offending.get("token", "-"), observed=offending.get("observed", float("nan")),
            exact=offending.get("exact", float("nan")), count=offending.get("count", 0), builder=builder,
            vocab=int(models.vocab), mode=mode, prompts=[[int(t) for t in r] for r in prompts], new=new,
            search_off=repr(search(self.run_settings(settings, "off"))),
            search_on=repr(search(self.run_settings(settings, option))), spec=repr(dict(spec)), law=repr(law))

    def acceptance(self, decoder) -> dict:
        """The engine's own speculative counters (``get_speculative_stats``), summed over the decoder's requests.

        Adds ``acceptance_rate`` = draft_tokens_accepted / draft_tokens_evaluated (None before any evaluation).
        """
        out = dict(decoder.stats)
        ev = out.get("draft_tokens_evaluated", 0)
        out["acceptance_rate"] = out.get("draft_tokens_accepted", 0) / ev if ev else None
        return out
