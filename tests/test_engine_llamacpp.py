"""exactness.engines.llamacpp: llama-cpp-python's own law, its decoders under certify_decoder, a planted bias.

(a) The engine's law (``Llama(logits_all=True).eval`` + its own sampler chain, minus ``dist``) matches
    ``exactness.settings.processed_law`` in llama-cpp-python's declared order on transformers float64 logits of the
    same checkpoint (TV < 1e-4: float32 engine vs float64) at contexts holding generated tokens.
(b) Speculation off, prompt lookup and the draft-model hook (the 1-layer draft, and the target itself as a greedy
    draft for high acceptance) pass ``certify_decoder`` (V = 16, 2 prompts, 3 new tokens, N_CERT = 2,000
    continuations per prompt: detectable TV 0.15 of the 3-token joint law); the acceptance counts read from the
    engine's draft-model calls agree with its own bookkeeping.
(c) Dropping a setting (top-k = 2, or temperature = 0.5) on the verified positions (every token after the first)
    fails the same check at n = 400 per prompt.
Opt-in (``python -m pytest -m heavy_engine tests/test_engine_llamacpp.py``: the engine is a source build); skips
with the reason when llama_cpp does not import (build: benchmarks/build_llamacpp.sh).
"""

from __future__ import annotations

import numpy as np
import pytest

from exactness.engines.base import EngineUnavailable, get_engine

ENGINE = get_engine("llama-cpp-python")
_why = ENGINE.missing()
pytestmark = [pytest.mark.heavy_engine, pytest.mark.skipif(_why is not None, reason=str(_why))]

import exactness  # noqa: E402
from exactness.settings import SamplingSettings, processed_law  # noqa: E402

V = 16
N_CERT = 2000  # continuations per prompt (x 2 prompts) per certificate; ~1,000 a second through the adapter
NEW_TOKENS = 3  # the joint law of all 3 tokens is enumerated (V^3 = 4,096 cells)
PROMPT_LEN = 5

#: Each setting the engine implements, alone and combined (penalties see the generated tokens only).
SETTINGS = {
    "plain": SamplingSettings(),
    "temperature": SamplingSettings(temperature=0.6),
    "top_k": SamplingSettings(top_k=3, temperature=1.4),
    "top_p": SamplingSettings(top_p=0.7),
    "min_p": SamplingSettings(min_p=0.15, temperature=0.8),
    "repetition": SamplingSettings(repetition_penalty=1.8),
    "presence_frequency": SamplingSettings(presence_penalty=0.7, frequency_penalty=0.9, penalty_window=2),
    "logit_bias": SamplingSettings(logit_bias=((3, 2.5), (4, -3.0), (9, 1.0))),
    "combined": SamplingSettings(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05, repetition_penalty=1.4,
                                 frequency_penalty=0.3, penalty_window=3, logit_bias=((2, 1.5),)),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from exactness.engines.tiny import build_tiny, float64_logits

    work = tmp_path_factory.mktemp("llamacpp")
    models = build_tiny(work / "hf", vocab=V)
    handle = ENGINE.prepare(models, work / "gguf")
    return models, handle, float64_logits(models.target_dir)


def _contexts(models):
    """Contexts with 0, 2 and 4 generated tokens (repeats inside, so penalties and their window matter)."""
    p = models.prompts
    return [p, np.concatenate([p, p[:, [1, 1]]], axis=1), np.concatenate([p, p[:, [2, 2, 0, 2]]], axis=1)]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_engine_law_matches_float64_processed_law(tiny, name):
    models, handle, f64 = tiny
    s = SETTINGS[name]
    law = ENGINE.target(handle, s, PROMPT_LEN)
    for ctx in _contexts(models):
        got = law(ctx)
        want = processed_law(f64(ctx), ctx, PROMPT_LEN, s, "llama-cpp-python")
        assert got.shape == (ctx.shape[0], V) and got.dtype == np.float64
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
        tv = 0.5 * np.abs(got - want).sum(axis=1)
        assert tv.max() < 1e-4, (name, ctx.shape, tv)
        assert ((got == 0) == (want == 0)).all(), (name, "support differs")


def test_the_settings_change_the_law(tiny):
    """Each setting moves the law by more than the float tolerance (else the test above proves nothing)."""
    models, handle, f64 = tiny
    ctx = _contexts(models)[2]
    plain = processed_law(f64(ctx), ctx, PROMPT_LEN, SETTINGS["plain"], "llama-cpp-python")
    for name, s in SETTINGS.items():
        if name != "plain":
            tv = 0.5 * np.abs(processed_law(f64(ctx), ctx, PROMPT_LEN, s, "llama-cpp-python") - plain).sum(axis=1)
            assert tv.max() > 1e-2, (name, tv)


def test_penalties_see_generated_tokens_only(tiny):
    """llama-cpp-python never accepts the prompt into the penalty sampler: with no generated token, no penalty."""
    models, handle, f64 = tiny
    ctx = models.prompts
    np.testing.assert_allclose(ENGINE.target(handle, SETTINGS["repetition"], PROMPT_LEN)(ctx),
                               ENGINE.target(handle, SETTINGS["plain"], PROMPT_LEN)(ctx), atol=1e-12)


def test_decoder_output_and_seeding(tiny):
    models, handle, _ = tiny
    dec = ENGINE.decoder(handle, SETTINGS["plain"], "ngram")
    out = dec(models.prompts[0], 4, np.random.default_rng(5))
    assert out.shape == (4,) and out.dtype == np.int64 and ((0 <= out) & (out < V)).all()
    np.testing.assert_array_equal(out, dec(models.prompts[0], 4, np.random.default_rng(5)))
    assert len({tuple(dec(models.prompts[0], 4, np.random.default_rng(s))) for s in range(12)}) > 1


@pytest.mark.parametrize("option,setting", [("off", "plain"), ("off", "combined"), ("ngram", "plain"),
                                            ("draft", "plain"), ("self_draft", "temperature"),
                                            ("ngram", "combined"), ("self_draft", "combined"),
                                            ("draft", "presence_frequency"), ("self_draft", "logit_bias")])
def test_decoder_passes_certify_decoder(tiny, option, setting):
    models, handle, _ = tiny
    s = SETTINGS[setting]
    dec = ENGINE.decoder(handle, s, option)
    cert = exactness.certify_decoder(dec, ENGINE.target(handle, s, PROMPT_LEN), models.prompts,
                                     new_tokens=NEW_TOKENS, n=N_CERT, seed=1)
    assert cert.passed, cert.summary()
    if option != "off":
        acc = ENGINE.acceptance(dec)
        assert acc["accepted"] > 0 and acc["accepted"] <= acc["checked"] <= acc["drafted"], acc  # drafts were kept
        assert acc["rounds_consistent"] == acc["rounds_checked"] > 0, acc


class _DropOnVerified:
    """Planted bias: the first token under ``settings``, every later (verified) token with one setting dropped."""

    def __init__(self, first, rest):
        self.first, self.rest = first, rest

    def __call__(self, prompt, new_tokens, rng):
        head = self.first(prompt, 1, rng)
        tail = self.rest(np.concatenate([prompt, head]), new_tokens - 1, rng)
        return np.concatenate([head, tail])


@pytest.mark.parametrize("setting", [SamplingSettings(top_k=2), SamplingSettings(temperature=0.5)])
def test_a_setting_dropped_on_verified_positions_fails(tiny, setting):
    """top-k dropped: tokens outside the support appear; temperature dropped (same support): exact joint TV of
    the bias 0.23 / 0.28 on the two prompts, caught by the joint test (p ~ 1e-69 and 1e-86 at seeds 1 and 2)."""
    models, handle, _ = tiny
    law = ENGINE.target(handle, setting, PROMPT_LEN)
    bias = _DropOnVerified(ENGINE.decoder(handle, setting, "ngram"),
                           ENGINE.decoder(handle, SETTINGS["plain"], "ngram"))
    cert = exactness.certify_decoder(bias, law, models.prompts, new_tokens=2, n=400, seed=1)
    assert not cert.passed, cert.summary()


def test_bad_input(tiny, tmp_path):
    from exactness.engines.llamacpp import write_gguf

    models, handle, _ = tiny
    with pytest.raises(EngineUnavailable, match="bad_words"):
        ENGINE.target(handle, SamplingSettings(bad_words=((3,),)), PROMPT_LEN)
    with pytest.raises(EngineUnavailable, match="min_new_tokens"):
        ENGINE.decoder(handle, SamplingSettings(min_new_tokens=2, eos=1), "off")
    with pytest.raises(EngineUnavailable, match="no option 'mtp'"):
        ENGINE.decoder(handle, SETTINGS["plain"], "mtp")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ENGINE.target(handle, SamplingSettings(logit_bias=((V, 1.0),)), PROMPT_LEN)
    with pytest.raises(ValueError, match="int64"):
        ENGINE.target(handle, SETTINGS["plain"], PROMPT_LEN)(models.prompts.astype(np.int32))
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "gpt2"}')
    with pytest.raises(EngineUnavailable, match="Llama checkpoints only"):
        write_gguf(tmp_path, tmp_path / "x.gguf")
