"""mlx-lm (Apple's MLX, CPU backend on Linux x86-64) as an audited engine: draft-model speculation and plain sampling.

Install: ``pip install "mlx[cpu]" mlx-lm`` (wheels; a few seconds; it does not move torch, numpy or
transformers).  The shared tiny Hugging Face checkpoints (``exactness.engines.tiny.build_tiny``: Llama
safetensors + tokenizer.json) load as they are with ``mlx_lm.load`` (float32, nothing downloaded).

The law is mlx-lm's own (``mlx_lm/generate.py`` ``generate_step``): the target's last-position logits
``model(ids)[:, -1]``, then the logits processors of ``mlx_lm.sample_utils.make_logits_processors`` called on
``(history, logits)`` with the history = the WHOLE context (prompt and generated tokens; ``generate_step``
accumulates the prompt into ``tokens``), then ``logprobs = logits - logsumexp(logits)``, then the filters
``make_sampler`` chains (read out of its closure, so the engine's own ``apply_top_p``, ``apply_min_p``,
``apply_top_k`` run in the engine's own order), then ``categorical_sampling``'s ``logits * (1 / temp)``:
the temperature is applied AFTER top-p / min-p / top-k (they see the temperature-1 law).  Softmax in float64.

Decoders: ``off`` is ``generate_step`` (speculation off: an exact path that must pass); ``draft`` is
``speculative_generate_step`` with the 1-layer tiny draft (``num_draft_tokens=2``, mlx-lm's default).  mlx-lm's
speculative decoding is *sample-and-match*: the target samples its own token at every drafted position with
the same sampler and a drafted token is kept only when it equals the target's sample, so it is exact when the
target's sampler sees the same law as in ``generate_step``.  Both take ``mx.random``'s global state, seeded per
request from the harness: ``mx.random.seed(int(rng.integers(2**31)))``.  Neither stops at EOS (only
``stream_generate`` checks EOS), so each call yields exactly ``new_tokens`` tokens.

Known convention differences (read from ``mlx_lm/sample_utils.py`` and ``generate.py``, mlx-lm 0.32.2):

* ``repetition_context_size`` (and the presence / frequency context sizes) is ``SamplingSettings.penalty_window``
  over prompt + generated tokens; ``None`` is passed as a window longer than any context; a window of 0 is
  refused (mlx-lm slices ``tokens[-0:]``, i.e. the WHOLE history, not none);
* ``top_k >= V`` is refused (``apply_top_k`` raises for ``top_k`` outside ``(0, V)``);
* ``speculative_generate_step`` hands its logits processors a history holding only the LAST prompt token and
  the generated ones (``_prefill`` does not add the prompt to ``prev_tokens``), while ``generate_step`` hands
  them the whole prompt: with a penalty whose window reaches into the prompt the ``draft`` path samples from
  another law than ``off``.  This adapter reproduces the engine as it is; ``spec_histories`` records both.
"""

from __future__ import annotations

import numpy as np

from ..settings import register_order
from .base import Engine, EngineUnavailable, register_engine

#: Tokens drafted per round by the ``draft`` option (``speculative_generate_step``'s default).
NUM_DRAFT_TOKENS = 2

#: The window passed for ``penalty_window=None`` (longer than any context the harness builds).
WHOLE_HISTORY = 1 << 30

ORDER = ("logit_bias", "repetition_penalty", "presence_frequency:all", "top_p:descending", "min_p", "top_k",
         "temperature")

register_order(
    "mlx-lm", ORDER,
    "mlx_lm/generate.py generate_step._step: logits_processors(tokens = prompt + generated, logits) in the order "
    "of mlx_lm/sample_utils.py make_logits_processors (logit_bias_processor, make_repetition_penalty (sign-aware "
    "CTRL), make_presence_penalty, make_frequency_penalty; each over tokens[-context_size:]), then logprobs = "
    "logits - logsumexp, then make_sampler's chain apply_top_p (keeps the tokens whose more likely mass is < "
    "top_p: descending, boundary inclusive), apply_min_p (p < min_p * p_max at temperature 1), apply_top_k, "
    "then categorical_sampling: categorical(logits * (1 / temp)) -- temperature last")


def _mlx():
    try:
        import mlx.core as mx
        import mlx_lm  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise EngineUnavailable(f"mlx-lm is not importable ({exc}): pip install -e \".[audit-mlx]\" "
                                "(mlx[cpu], mlx-lm)") from exc
    return mx


def _window(settings) -> int:
    w = settings.penalty_window
    if w == 0 and {"repetition_penalty", "presence_penalty", "frequency_penalty"} & set(settings.active()):
        raise EngineUnavailable("mlx-lm has no empty penalty window: repetition_context_size=0 slices tokens[-0:], "
                                "the whole history (use penalty_window=None for the whole history)")
    return WHOLE_HISTORY if w is None else int(w)


def engine_processors(settings) -> list:
    """mlx-lm's own logits processors for ``settings`` (``mlx_lm.sample_utils.make_logits_processors``).

    Each processor is ``fn(tokens mx.array (n,), logits mx.array (1, V)) -> (1, V)``; inactive settings are
    passed as ``None`` (as a user who does not set them).  Several ``logit_bias`` entries for one token are
    summed (mlx-lm takes a dict).  Raises :class:`EngineUnavailable` for ``penalty_window=0`` with a penalty.
    """
    from mlx_lm.sample_utils import make_logits_processors

    w = _window(settings)
    bias: dict[int, float] = {}
    for t, b in settings.logit_bias:
        bias[t] = bias.get(t, 0.0) + b
    return make_logits_processors(
        logit_bias=bias or None,
        repetition_penalty=None if settings.repetition_penalty == 1.0 else float(settings.repetition_penalty),
        repetition_context_size=w,
        presence_penalty=float(settings.presence_penalty) or None, presence_context_size=w,
        frequency_penalty=float(settings.frequency_penalty) or None, frequency_context_size=w)


def engine_sampler(settings, vocab: int):
    """mlx-lm's own sampler for ``settings`` (``mlx_lm.sample_utils.make_sampler(temp, top_p, min_p, top_k)``).

    Raises :class:`EngineUnavailable` for ``top_k >= vocab`` (``apply_top_k`` accepts only ``0 < top_k < V``).
    """
    from mlx_lm.sample_utils import make_sampler

    if settings.top_k >= vocab:
        raise EngineUnavailable(f"mlx-lm's apply_top_k accepts 0 < top_k < V = {vocab}, got top_k={settings.top_k} "
                                "(use top_k=0 for no top-k)")
    return make_sampler(temp=float(settings.temperature), top_p=float(settings.top_p), min_p=float(settings.min_p),
                        top_k=int(settings.top_k))


def sampler_parts(fn):
    """``(sampling_methods, temp)`` read from a ``make_sampler`` closure: the engine's own filter chain.

    Raises :class:`EngineUnavailable` when this mlx-lm's ``make_sampler`` no longer closes over them (the
    adapter then needs updating: the law would no longer be the engine's own).
    """
    names = getattr(getattr(fn, "__code__", None), "co_freevars", ())
    cells = dict(zip(names, (c.cell_contents for c in (fn.__closure__ or ()))))
    if "sampling_methods" not in cells or "temp" not in cells:
        from importlib import metadata

        raise EngineUnavailable(f"mlx-lm {metadata.version('mlx-lm')}: make_sampler's sampler no longer closes over "
                                f"sampling_methods and temp (free variables {names}); update exactness.engines.mlxlm")
    return list(cells["sampling_methods"]), float(cells["temp"])


def mlx_target(model, vocab: int, settings):
    """The engine's OWN non-speculative law: ``target(contexts (B, L) int64) -> (B, V) float64``.

    ``model(ids)[:, -1]`` (float32, cache-free, all rows in one forward), then per row the processors of
    :func:`engine_processors` with the whole row as history (as ``generate_step`` passes it), ``logits -
    logsumexp``, the ``make_sampler`` filter chain (:func:`sampler_parts`), ``* (1 / temp)``; softmax in float64.
    Raises ``TypeError`` / ``ValueError`` for contexts that are not (B, L) int64 ids in ``[0, V)``.
    """
    mx = _mlx()
    procs = engine_processors(settings)
    methods, temp = sampler_parts(engine_sampler(settings, vocab))

    def target(contexts):
        from ..adapters.engine import _check_contexts

        ctx = _check_contexts(contexts, vocab)
        logits = model(mx.array(ctx.astype(np.int32)))[:, -1, :].astype(mx.float32)  # (B, V)
        out = np.empty((ctx.shape[0], vocab), dtype=np.float64)
        for b in range(ctx.shape[0]):
            x = logits[b: b + 1]
            hist = mx.array(ctx[b].astype(np.int32))
            for proc in procs:
                x = proc(hist, x)
            lp = x - mx.logsumexp(x, axis=-1, keepdims=True)  # generate_step
            for method in methods:  # make_sampler's chain
                lp = method(lp)
            z = np.asarray(lp * (1.0 / temp), dtype=np.float64)[0]  # categorical_sampling
            z = np.exp(z - z.max())
            out[b] = z / z.sum()
        return out

    return target


class MLXDecoder:
    """``decoder(prompt (L,) int64, new_tokens, rng) -> (new_tokens,) int64`` through mlx-lm's generators.

    Parameters
    ----------
    model : mlx_lm model (the target)
    vocab : int, V
    settings : SamplingSettings
    draft_model : mlx_lm model or None
        None: ``generate_step`` (speculation off); else ``speculative_generate_step`` with it.
    num_draft_tokens : int >= 1
    sampler, processors : optional overrides of mlx-lm's own (for planted mutants in tests)

    Each call seeds ``mx.random`` from ``rng`` (``rng.integers(2**31)``) and keeps mlx-lm's ``from_draft`` flags;
    :attr:`stats` sums drafted / accepted / emitted tokens over calls (``acceptance``).
    Raises ``ValueError`` / ``TypeError`` for a bad prompt, ``new_tokens`` or ``rng``.
    """

    no_events_reason = ("mlx-lm's generators report only a from_draft flag per token, not the candidates and the "
                        "accepted index per round, so the conditional checks are not run; a bias shows in the joint "
                        "and PIT checks")

    def __init__(self, model, vocab, settings, draft_model=None, *, num_draft_tokens=NUM_DRAFT_TOKENS,
                 sampler=None, processors=None):
        self.model, self.vocab, self.settings, self.draft_model = model, int(vocab), settings, draft_model
        if isinstance(num_draft_tokens, bool) or not isinstance(num_draft_tokens, int) or num_draft_tokens < 1:
            raise ValueError(f"num_draft_tokens must be an integer >= 1, got {num_draft_tokens!r}")
        self.num_draft_tokens = num_draft_tokens
        self.sampler = engine_sampler(settings, vocab) if sampler is None else sampler
        self.processors = engine_processors(settings) if processors is None else list(processors)
        self.stats = {"calls": 0, "drafted": 0, "accepted": 0, "emitted": 0}

    def _drafted(self, flags, new_tokens) -> int:
        """Tokens drafted, replayed from the from_draft flags (speculative_generate_step's round structure)."""
        drafted, ntoks, i = 0, 0, 0
        while ntoks < new_tokens:
            nd = min(new_tokens - ntoks, self.num_draft_tokens)
            drafted += nd
            k = 0
            while k < nd and i < len(flags) and flags[i]:
                k, i, ntoks = k + 1, i + 1, ntoks + 1
            if ntoks < new_tokens:
                i, ntoks = i + 1, ntoks + 1
        return drafted

    def __call__(self, prompt, new_tokens, rng) -> np.ndarray:
        from mlx_lm.generate import generate_step, speculative_generate_step

        from ..adapters import check_new_tokens, check_output, check_prompt, check_rng

        mx = _mlx()
        prompt = check_prompt(prompt, self.vocab)
        new_tokens = check_new_tokens(new_tokens)
        rng = check_rng(rng)
        mx.random.seed(int(rng.integers(2**31)))
        ids = mx.array(prompt.tolist())  # as stream_generate builds it from a token list
        kw = dict(max_tokens=new_tokens, sampler=self.sampler, logits_processors=self.processors or None)
        if self.draft_model is None:
            toks = [int(t) for t, _ in generate_step(ids, self.model, **kw)]
            flags = [False] * len(toks)
        else:
            out = list(speculative_generate_step(ids, self.model, self.draft_model,
                                                 num_draft_tokens=self.num_draft_tokens, **kw))
            toks, flags = [int(t) for t, _, _ in out], [bool(f) for _, _, f in out]
            self.stats["drafted"] += self._drafted(flags, new_tokens)
            self.stats["accepted"] += sum(flags)
        self.stats["calls"] += 1
        self.stats["emitted"] += len(toks)
        return check_output(np.asarray(toks, dtype=np.int64), new_tokens, self.vocab, "mlx_lm generate")

    def __repr__(self) -> str:
        how = "generate_step" if self.draft_model is None else f"speculative_generate_step(k={self.num_draft_tokens})"
        return f"MLXDecoder({how}, {self.settings.label()})"


def spec_histories(model, draft_model, prompt, new_tokens: int, seed: int = 0) -> dict:
    """The histories mlx-lm hands its logits processors, plain vs speculative: ``{"off": [...], "draft": [...]}``.

    Runs ``generate_step`` and ``speculative_generate_step`` (temperature 1) with a recording processor and
    returns, per path, the list of token lists it received (one per processor call, in call order).
    """
    from mlx_lm.generate import generate_step, speculative_generate_step
    from mlx_lm.sample_utils import make_sampler

    mx = _mlx()
    seen: list = []

    def record(tokens, logits):
        seen.append([int(t) for t in tokens.tolist()])
        return logits

    out = {}
    for name in ("off", "draft"):
        seen = []
        mx.random.seed(seed)
        ids = mx.array([int(t) for t in prompt])
        kw = dict(max_tokens=new_tokens, sampler=make_sampler(temp=1.0), logits_processors=[record])
        gen = (generate_step(ids, model, **kw) if name == "off"
               else speculative_generate_step(ids, model, draft_model, num_draft_tokens=NUM_DRAFT_TOKENS, **kw))
        for _ in gen:
            pass
        out[name] = seen
    return out


REPRO = '''"""Reproduce a resispec audit finding in mlx-lm {version}, without resispec.

Setting {setting!r}: the law of new token {position} after prompt {prompt} and prefix {prefix} from
speculative_generate_step (draft model, {k} tokens a round) against generate_step (speculation off), same model,
same sampler and logits processors; a two-sample chi-square test.  Needs mlx[cpu], mlx-lm, torch, transformers,
tokenizers, numpy, scipy.  Usage: python <this script> [N draws per path] (exit 1 when p < 1e-3: bias reproduced)
The audit measured: token {token} observed {observed:.4f} vs exact {exact:.4f} ({count} draws with that prefix).
"""
import sys

import numpy as np
from scipy import stats
{build}
import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler

PROMPT, PREFIX = {prompt}, {prefix}
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
model, _ = load(TARGET)
draft, _ = load(DRAFT)
sampler = make_sampler(**{sampler})
procs = make_logits_processors(**{processors})


def run(spec, seed):
    mx.random.seed(seed)
    kw = dict(max_tokens=len(PREFIX) + 1, sampler=sampler, logits_processors=procs or None)
    if spec:
        return [int(t) for t, _, _ in speculative_generate_step(mx.array(PROMPT), model, draft,
                                                                 num_draft_tokens={k}, **kw)]
    return [int(t) for t, _ in generate_step(mx.array(PROMPT), model, **kw)]


counts = np.zeros((2, V))
for spec in (0, 1):
    for i in range(N):
        out = run(spec, spec * N + i)
        if out[:len(PREFIX)] == PREFIX:
            counts[spec, out[len(PREFIX)]] += 1
keep = counts.sum(axis=0) > 0
p = stats.chi2_contingency(counts[:, keep]).pvalue
freq = counts / counts.sum(axis=1, keepdims=True)
print(f"draws with prefix {{PREFIX}}: off {{int(counts[0].sum())}}, speculative {{int(counts[1].sum())}}; "
      f"TV {{0.5 * abs(freq[0] - freq[1]).sum():.4f}}, two-sample chi-square p = {{p:.3g}}")
for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
    print(f"token {{t}}: speculation off {{freq[0, t]:.4f}}  speculative {{freq[1, t]:.4f}}")
sys.exit(1 if p < 1e-3 else 0)
'''


@register_engine("mlx-lm")
class MLXLMEngine(Engine):
    """mlx-lm (``mlx_lm.generate``) on MLX's CPU backend, float32."""

    distribution = "mlx-lm"
    install = 'pip install -e ".[audit-mlx]"  # mlx[cpu], mlx-lm'
    order = "mlx-lm"
    law_source = ("mlx-lm's own logits processors and sampler filters (make_logits_processors, make_sampler) on "
                  "model(ids) logits")
    supported = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                           "frequency_penalty", "penalty_window", "logit_bias"})
    options = {"off": "plain generate_step: speculation off (must pass)",
               "draft": f"speculative_generate_step with the 1-layer draft ({NUM_DRAFT_TOKENS} tokens a round, "
                        "sample-and-match)"}

    def missing(self) -> str | None:
        """None when ``mlx.core`` and ``mlx_lm`` import here; else why not and how to install them."""
        try:
            _mlx()
        except EngineUnavailable as exc:
            return str(exc)
        return None

    def prepare(self, models, workdir):
        """Load the tiny HF checkpoints with ``mlx_lm.load`` (float32 safetensors as they are; nothing converted).

        Returns ``{"target", "draft", "vocab"}``.  Raises :class:`EngineUnavailable` when mlx-lm cannot load them.
        """
        _mlx()
        from mlx_lm import load

        try:
            target, _ = load(str(models.target_dir))
            draft, _ = load(str(models.draft_dir))
        except Exception as exc:  # mlx-lm raises ValueError / FileNotFoundError / KeyError for a bad checkpoint
            raise EngineUnavailable(f"mlx-lm cannot load the tiny checkpoints: {type(exc).__name__}: {exc}") from exc
        return {"target": target, "draft": draft, "vocab": int(models.vocab)}

    def target(self, handle, settings, prompt_len):
        """mlx-lm's own non-speculative law (:func:`mlx_target`; mlx-lm's history does not split at ``prompt_len``)."""
        self.check_settings(settings)
        return mlx_target(handle["target"], handle["vocab"], settings)

    def decoder(self, handle, settings, option):
        """:class:`MLXDecoder` for ``option`` (``off``: ``generate_step``; ``draft``: ``speculative_generate_step``)."""
        self.check_settings(settings)
        if option not in self.options:
            raise EngineUnavailable(f"mlx-lm has no option {option!r}; options: {', '.join(self.options)}")
        draft = handle["draft"] if option == "draft" else None
        return MLXDecoder(handle["target"], handle["vocab"], settings, draft)

    def acceptance(self, decoder) -> dict:
        """mlx-lm's own counts (its ``from_draft`` flags): drafted, accepted, emitted tokens, calls, rate."""
        s = dict(decoder.stats)
        s["rate"] = s["accepted"] / s["drafted"] if s["drafted"] else float("nan")
        return s

    def repro_script(self, models, settings, option, offending, report):
        """A standalone script (no resispec) comparing mlx-lm's speculative and plain paths at the offending token."""
        from .tiny import standalone_build

        w = _window(settings)
        bias: dict = {}
        for t, b in settings.logit_bias:
            bias[t] = bias.get(t, 0.0) + b
        rep = settings.repetition_penalty
        processors = dict(logit_bias=bias or None, repetition_penalty=None if rep == 1.0 else rep,
                          repetition_context_size=w, presence_penalty=settings.presence_penalty or None,
                          presence_context_size=w, frequency_penalty=settings.frequency_penalty or None,
                          frequency_context_size=w)
        sampler = dict(temp=settings.temperature, top_p=settings.top_p, min_p=settings.min_p, top_k=settings.top_k)
        return REPRO.format(version=self.version(), setting=settings.label(), position=offending["position"],
                            prompt=list(offending["prompt"]), prefix=list(offending["prefix"]), k=NUM_DRAFT_TOKENS,
                            token=offending.get("token", "-"), observed=offending.get("observed", float("nan")),
                            exact=offending.get("exact", float("nan")), count=offending.get("count", 0),
                            build=standalone_build(models), sampler=repr(sampler), processors=repr(processors))
