"""Sampling settings are part of the law: the spec, and the processed target law in each engine's order.

A speculative decoder is lossless when it emits the law its NON-speculative sampler would: softmax of the
logits after the engine's sampling settings (temperature, top-k, top-p, min-p, repetition / presence / frequency
penalties over their history, logit bias, bad words, min new tokens).  Engines apply these in different orders
and with different conventions (e.g. llama.cpp divides by the temperature AFTER top-k / top-p / min-p; transformers
and vLLM before), so the order is part of each engine's law: :data:`ORDERS` holds one tuple of named steps per
engine (from its documentation and source, cited per entry) and :func:`processed_law` applies them in float64.

An engine's own non-speculative path is the primary source of its law; :func:`processed_law` on the same weights
run in float64 (``exactness.engines.tiny.float64_logits``) is the independent cross-check: a mismatch is reported
as a finding about the law (``exactness.engines.audit``), never silently used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

NEG_INF = -np.inf


#: The smallest temperature certified: logits / T of a float32 engine keep their order only to ~1e-7 relative.
MIN_TEMPERATURE = 1e-4

@dataclass(frozen=True)
class SamplingSettings:
    """One engine-neutral sampling setting (defaults: plain sampling at temperature 1).

    temperature : float > 0                 logits / T
    top_k : int >= 0                        keep the k largest logits (0: off)
    top_p : float in (0, 1]                 keep the smallest set of most likely tokens of mass >= top_p
    min_p : float in [0, 1)                 drop tokens of probability < min_p * max probability
    repetition_penalty : float > 0          for a token seen in the history: logit / r if > 0 else logit * r (CTRL,
                                            Keskar et al. 2019, arXiv:1909.05858)
    presence_penalty, frequency_penalty : float   logit -= presence * [count > 0] + frequency * count (OpenAI API)
    penalty_window : int >= 0 or None       the penalties see the last ``penalty_window`` tokens of the history
                                            (llama.cpp's ``penalty_last_n``, mlx-lm's ``repetition_context_size``);
                                            None: all of it
    logit_bias : tuple of (token, bias)     logit += bias
    bad_words : tuple of token tuples       a word's last token is banned after the word's other tokens
    min_new_tokens : int >= 0               EOS is banned while fewer tokens than this were generated
    eos : int or None                       the EOS id (needed by ``min_new_tokens``)
    seed : int or None                      a per-request seed (engines that take one; not part of the law)

    Raises ``ValueError`` naming the field and its range on bad values.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_window: int | None = None
    logit_bias: tuple = ()
    bad_words: tuple = ()
    min_new_tokens: int = 0
    eos: int | None = None
    seed: int | None = field(default=None, compare=False)

    def __post_init__(self):
        def bad(name, want):
            raise ValueError(f"{name} must be {want}, got {getattr(self, name)!r}")

        def real(name):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                bad(name, "a finite number")
            return float(v)

        def integer(name, allow_none=False):
            v = getattr(self, name)
            if v is None and allow_none:
                return
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                bad(name, "an integer >= 0" + (" or None" if allow_none else ""))

        if real("temperature") < MIN_TEMPERATURE:   # below, logits / T is greedy up to float32 rounding, or inf
            bad("temperature", f">= {MIN_TEMPERATURE:g} (below it the law is greedy decoding up to the engines' "
                "float32 rounding, which is not a law to certify)")
        integer("top_k")
        if not 0 < real("top_p") <= 1:
            bad("top_p", "in (0, 1]")
        if not 0 <= real("min_p") < 1:
            bad("min_p", "in [0, 1)")
        if real("repetition_penalty") <= 0:
            bad("repetition_penalty", "> 0 (1: off)")
        real("presence_penalty"), real("frequency_penalty")
        integer("penalty_window", allow_none=True)
        integer("min_new_tokens")
        integer("eos", allow_none=True)
        if self.min_new_tokens and self.eos is None:
            raise ValueError("min_new_tokens needs eos= (the token it bans)")
        try:
            bias = tuple((int(t), float(b)) for t, b in (self.logit_bias.items() if isinstance(self.logit_bias, dict)
                                                         else self.logit_bias))
        except (TypeError, ValueError):
            bad("logit_bias", "pairs (token, bias) or a dict token -> bias")
        if any(t < 0 or not math.isfinite(b) for t, b in bias):
            bad("logit_bias", "pairs of a token id >= 0 and a finite bias")
        if len({t for t, _ in bias}) != len(bias):
            bad("logit_bias", "one bias per token (engines disagree on repeated tokens: some add, some keep the last)")
        object.__setattr__(self, "logit_bias", bias)
        try:
            words = tuple(tuple(int(t) for t in w) for w in self.bad_words)
        except (TypeError, ValueError):
            bad("bad_words", "a tuple of token-id tuples, e.g. ((3,), (4, 5))")
        if any(len(w) == 0 or min(w) < 0 for w in words):
            bad("bad_words", "non-empty tuples of token ids >= 0")
        object.__setattr__(self, "bad_words", words)

    def active(self) -> tuple[str, ...]:
        """Names of the fields that differ from plain sampling (``eos`` and ``seed`` are not settings)."""
        base = SamplingSettings()
        return tuple(f.name for f in fields(self) if f.name not in ("eos", "seed")
                     and getattr(self, f.name) != getattr(base, f.name))

    def label(self) -> str:
        """``"temperature=0.7,top_k=3,logit_bias=2:2 3:-2,bad_words=4|5 6"`` (``"T=1"`` for plain sampling).

        :func:`parse_settings` reads it back, and it holds no ``;`` (the CLI's separator between settings).
        """
        parts = []
        for name in self.active():
            v = getattr(self, name)
            if name == "logit_bias":
                v = " ".join(f"{t}:{b:g}" for t, b in v)
            elif name == "bad_words":
                v = "|".join(" ".join(map(str, w)) for w in v)
            parts.append(f"{name}={v:g}" if isinstance(v, float) else f"{name}={v}")
        if self.min_new_tokens:
            parts.append(f"eos={self.eos}")
        return ",".join(parts) or "T=1"

    def vocab_check(self, vocab: int) -> None:
        """ValueError naming a token id in ``logit_bias`` / ``bad_words`` / ``eos`` outside ``[0, vocab)``."""
        ids = [t for t, _ in self.logit_bias] + [t for w in self.bad_words for t in w]
        ids += [] if self.eos is None else [self.eos]
        if ids and max(ids) >= vocab:
            raise ValueError(f"setting {self.label()!r} names token {max(ids)}, outside the vocabulary [0, {vocab})")


def parse_settings(text: str, *, eos: int | None = None) -> SamplingSettings:
    """Read ``"temperature=0.7,top_k=3,logit_bias=3:2 5:-1,bad_words=4|6 7"`` (``"T=1"``: plain sampling).

    ``T`` is ``temperature``; ``logit_bias`` items ``TOKEN:BIAS`` are separated by spaces (or ``;``), ``bad_words``
    words by ``|`` (or ``;``) and a word's tokens by spaces.  Raises ``ValueError`` naming an unknown or repeated
    field, an empty value, or a value that does not parse.
    """
    import re

    names = {f.name: f for f in fields(SamplingSettings)}
    kw = {} if eos is None else {"eos": eos}
    text = text.strip()
    if text in ("", "T=1", "plain"):
        return SamplingSettings(**kw)
    seen = set()
    for part in text.split(","):
        key, sep, val = part.partition("=")
        key = "temperature" if key.strip() == "T" else key.strip()
        if not sep or key not in names or key == "seed":
            raise ValueError(f"setting {part!r}: expected NAME=VALUE with NAME one of "
                             f"{', '.join(n for n in names if n != 'seed')}")
        if key in seen:
            raise ValueError(f"setting {text!r} gives {key} twice")
        seen.add(key)
        if not val.strip():
            raise ValueError(f"setting {part!r}: {key} has no value")
        if not val.isascii() or "_" in val:   # float('١') and int('1_0') parse: a typo would start a long run
            raise ValueError(f"setting {part!r}: {val!r} is not a plain ASCII number (digits, '.', 'e', '-')")
        try:
            if key == "logit_bias":
                kw[key] = tuple((int(t), float(b)) for t, b in (x.split(":") for x in re.split(r"[;\s]+", val) if x))
            elif key == "bad_words":
                kw[key] = tuple(tuple(int(t) for t in w.split()) for w in re.split(r"[;|]", val) if w.strip())
                if not kw[key]:                # "bad_words=|" named no word: it was read as plain sampling
                    raise ValueError
            elif key in ("top_k", "min_new_tokens", "eos") or (key == "penalty_window" and val != "None"):
                kw[key] = int(val)
            elif key == "penalty_window":
                kw[key] = None
            else:
                kw[key] = float(val)
        except ValueError:
            raise ValueError(f"setting {part!r}: {val!r} does not parse as a value of {key}") from None
    return SamplingSettings(**kw)


# ----------------------------------------------------------------------------------------------------------------
# The steps.  Each takes (logits (V,) float64, History, SamplingSettings) and returns new logits (V,) float64;
# -inf marks a removed token.  Variants carry the engine's convention after a colon.


@dataclass(frozen=True)
class History:
    """The tokens a step sees: ``prompt`` (L0,) int64 and ``generated`` (g,) int64 so far."""

    prompt: np.ndarray
    generated: np.ndarray

    def window(self, n: int | None, *, generated_only: bool = False) -> np.ndarray:
        toks = self.generated if generated_only else np.concatenate([self.prompt, self.generated])
        return toks if n is None else toks[max(len(toks) - n, 0):] if n else toks[:0]


def _softmax(x):
    m = np.max(x)
    e = np.exp(x - m)  # p_i = exp(x_i - max) / sum_j exp(x_j - max)
    return e / e.sum()


def _logit_bias(x, h, s):
    x = x.copy()
    for t, b in s.logit_bias:
        x[t] += b  # logit_t += bias_t
    return x


def _repetition(x, h, s, *, generated_only=False):
    if s.repetition_penalty == 1.0:
        return x
    seen = np.unique(h.window(s.penalty_window, generated_only=generated_only))
    x = x.copy()
    r = s.repetition_penalty
    x[seen] = np.where(x[seen] > 0, x[seen] / r, x[seen] * r)  # CTRL: l / r if l > 0 else l * r
    return x


def _presence_frequency(x, h, s, *, generated_only=True):
    if s.presence_penalty == 0 and s.frequency_penalty == 0:
        return x
    count = np.bincount(h.window(s.penalty_window, generated_only=generated_only), minlength=x.size)[: x.size]
    return x - s.frequency_penalty * count - s.presence_penalty * (count > 0)  # l -= f * c + p * [c > 0]


def _bad_words(x, h, s):
    x = x.copy()
    seq = np.concatenate([h.prompt, h.generated])
    for w in s.bad_words:
        head = w[:-1]
        if len(head) == 0 or (len(seq) >= len(head) and tuple(seq[len(seq) - len(head):]) == head):
            x[w[-1]] = NEG_INF  # the word's last token after its prefix
    return x


def _min_new_tokens(x, h, s):
    if s.min_new_tokens and len(h.generated) < s.min_new_tokens:
        x = x.copy()
        x[s.eos] = NEG_INF  # no EOS before min_new_tokens
    return x


def _temperature(x, h, s):
    return x / s.temperature  # l / T


def _top_k(x, h, s):
    if s.top_k == 0 or s.top_k >= x.size:
        return x
    kth = np.sort(x)[-s.top_k]
    return np.where(x < kth, NEG_INF, x)  # keep l >= k-th largest (ties kept)


def _top_p_ascending(x, h, s):
    """transformers / vLLM: sort ascending, drop tokens whose cumulative mass <= 1 - top_p (the top one stays)."""
    if s.top_p >= 1.0:
        return x
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(_softmax(x)[order])
    drop = cum <= 1 - s.top_p  # cumulative mass from the least likely
    drop[-1] = False
    out = x.copy()
    out[order[drop]] = NEG_INF
    return out


def _top_p_descending(x, h, s):
    """llama.cpp / mlx-lm: sort descending, keep tokens until the cumulative mass reaches top_p (inclusive)."""
    if s.top_p >= 1.0:
        return x
    order = np.argsort(-x, kind="stable")
    cum = np.cumsum(_softmax(x)[order])
    keep = np.searchsorted(cum, s.top_p) + 1  # first index with cum >= top_p, kept
    out = np.full_like(x, NEG_INF)
    out[order[:keep]] = x[order[:keep]]
    return out


def _min_p(x, h, s):
    if s.min_p == 0:
        return x
    p = _softmax(x)
    return np.where(p < s.min_p * p.max(), NEG_INF, x)  # drop p_i < min_p * max_j p_j


STEPS = {
    "logit_bias": _logit_bias,
    "repetition_penalty": _repetition,
    "repetition_penalty:generated": lambda x, h, s: _repetition(x, h, s, generated_only=True),
    "presence_frequency:generated": _presence_frequency,
    "presence_frequency:all": lambda x, h, s: _presence_frequency(x, h, s, generated_only=False),
    "bad_words": _bad_words,
    "min_new_tokens": _min_new_tokens,
    "temperature": _temperature,
    "top_k": _top_k,
    "top_p:ascending": _top_p_ascending,
    "top_p:descending": _top_p_descending,
    "min_p": _min_p,
}

#: engine -> (steps in order, source of the order).  Sources are the engines' own code paths named there.
ORDERS: dict[str, tuple[tuple[str, ...], str]] = {
    "transformers": (("logit_bias", "repetition_penalty", "bad_words", "min_new_tokens", "temperature", "top_k",
                      "top_p:ascending", "min_p"),
                     "transformers GenerationMixin._get_logits_processor: SequenceBias, RepetitionPenalty (prompt "
                     "and generated), NoBadWords, MinNewTokensLength, then the warpers Temperature, TopK, TopP, MinP"),
}


def processed_logits(logits, history: History, settings: SamplingSettings, order: str) -> np.ndarray:
    """Apply ``ORDERS[order]``'s steps to one row of raw logits (V,) -> processed logits (V,) float64.

    Raises ``ValueError`` for an unknown ``order`` (naming the known ones).
    """
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; known: {', '.join(sorted(ORDERS))}")
    x = np.asarray(logits, dtype=np.float64)
    for step in ORDERS[order][0]:
        x = STEPS[step](x, history, settings)
    return x


def processed_law(logits, contexts, prompt_len: int, settings: SamplingSettings, order: str) -> np.ndarray:
    """The target law after ``settings`` in ``order``: (B, V) raw logits and (B, L) contexts -> (B, V) float64.

    ``contexts[b, :prompt_len]`` is the prompt, the rest the tokens generated so far.  Softmax in float64;
    rows sum to 1.  Raises ``ValueError`` when the settings leave no token in a row (e.g. every token banned).
    """
    logits = np.atleast_2d(np.asarray(logits, dtype=np.float64))
    ctx = np.atleast_2d(np.asarray(contexts, dtype=np.int64))
    if logits.shape[0] != ctx.shape[0]:
        raise ValueError(f"logits has {logits.shape[0]} rows but contexts has {ctx.shape[0]}")
    if not 0 <= prompt_len <= ctx.shape[1]:
        raise ValueError(f"prompt_len must lie in [0, {ctx.shape[1]}], got {prompt_len}")
    settings.vocab_check(logits.shape[1])
    out = np.empty_like(logits)
    for b in range(logits.shape[0]):
        x = processed_logits(logits[b], History(ctx[b, :prompt_len], ctx[b, prompt_len:]), settings, order)
        if not np.isfinite(x.max()):
            raise ValueError(f"settings {settings.label()!r} leave no token in row {b}")
        out[b] = _softmax(x)
    return out


def register_step(name: str, fn) -> None:
    """Add a step ``fn(logits (V,) float64, History, SamplingSettings) -> logits (V,)`` under ``name``."""
    if name in STEPS and STEPS[name] is not fn:
        raise ValueError(f"step {name!r} is already registered")
    STEPS[name] = fn


def register_order(engine: str, steps: tuple, source: str) -> None:
    """Declare ``engine``'s order of operations (step names of :data:`STEPS`) and where it was read (``source``)."""
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ValueError(f"order of {engine!r} names unknown steps {unknown}; known: {', '.join(sorted(STEPS))}")
    ORDERS[engine] = (tuple(steps), source)
