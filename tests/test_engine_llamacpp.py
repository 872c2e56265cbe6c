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
(d) Reproduction scripts: a planted FAIL's script, written by the audit and run without this project, exits 1; an
    exact ``off`` cell's exits 0.
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


# ---------------------------------------------------------------------------------------------------------------
# The law read from the engine's own scores (issue 38, item 4), the plain schedule, and GGUF files as --model


def test_law_reads_the_decoders_scores_and_they_equal_plain_forwards(tiny):
    """The law serves the 'off' decoder's own rows at the contexts it emitted from; every spot check (a fresh plain
    forward) finds the same law.  (At V = 16 certify_decoder enumerates the joint law BEFORE sampling, so the
    contexts are asked for here after sampling, as the PIT checks of a large vocabulary ask for them.)"""
    models, handle, _ = tiny
    s = SETTINGS["combined"]
    dec = ENGINE.decoder(handle, s, "off")
    for i in range(40):
        dec(models.prompts[i % 2], NEW_TOKENS, np.random.default_rng(i))
    keys = [k for k in handle.scores if len(k) > PROMPT_LEN]
    assert keys
    law = ENGINE.target(handle, s, PROMPT_LEN)
    for L in {len(k) for k in keys}:
        law(np.array([k for k in keys if len(k) == L], dtype=np.int64))
    acc = ENGINE.acceptance(dec)
    assert acc["law_rows_served_from_scores"] >= len(keys) and acc["scores_spot_checked"] > 0, acc
    assert acc["scores_mismatch"] is None and acc["scores_max_tv"] <= 1e-6, acc


def test_scores_that_differ_from_plain_forwards_are_dropped(tiny):
    """A decoder whose kept rows are wrong (planted: logits shifted) is caught by the first spot check; the law
    then comes from plain forwards only, equal to the law of a fresh handle state."""
    from exactness.engines import llamacpp as LC

    models, handle, _ = tiny
    s = SETTINGS["plain"]
    dec = ENGINE.decoder(handle, s, "off")
    real = handle.remember
    handle.remember = lambda ctx, logits: real(ctx, np.asarray(logits) + np.linspace(0, 3, len(logits)))
    try:
        for i in range(20):
            dec(models.prompts[i % 2], NEW_TOKENS, np.random.default_rng(i))
    finally:
        del handle.remember
    assert handle.scores
    ctx = np.array([list(k) for k in handle.scores if len(k) == PROMPT_LEN + 1][:4], dtype=np.int64)
    got = ENGINE.target(handle, s, PROMPT_LEN)(ctx)
    assert handle.scores_check[2] is not None and handle.scores_check[1] > LC.SCORES_TOL
    assert not handle.scores  # dropped
    llm = handle.llama(handle.target_gguf, last_n=None, logits_all=True, key="law")
    kw = LC.sampling_kwargs(s)
    want = np.stack([LC.engine_law(llm, LC.plain_logits(llm, list(r), PROMPT_LEN), r[PROMPT_LEN:], kw) for r in ctx])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_plain_logits_follow_the_plain_schedule(tiny):
    """plain_logits = the prompt warmed (one batch, then its last token alone), then each generated token alone,
    whatever the KV cache held before; the decoder's own rows are those (its first request included)."""
    from exactness.engines import llamacpp as LC

    models, handle, _ = tiny
    llm = handle.llama(handle.target_gguf, last_n=None, logits_all=True, key="schedule")
    ctx = [int(t) for t in models.prompts[0]] + [3, 4, 5]
    llm.reset()
    llm.eval(ctx[:PROMPT_LEN])
    llm.n_tokens = PROMPT_LEN - 1
    llm.eval([ctx[PROMPT_LEN - 1]])
    for t in ctx[PROMPT_LEN:]:
        llm.eval([t])
    want = np.array(llm.scores[len(ctx) - 1])
    for before in ([int(t) for t in models.prompts[1]], ctx[:PROMPT_LEN + 1] + [9], ctx):  # other KV states
        LC.plain_logits(llm, before, PROMPT_LEN)
        np.testing.assert_array_equal(LC.plain_logits(llm, ctx, PROMPT_LEN), want)
    dec = ENGINE.decoder(handle, SETTINGS["plain"], "off")
    dec(models.prompts[0], 2, np.random.default_rng(0))      # the first request of a prompt
    for key, row in handle.scores.items():
        np.testing.assert_array_equal(row, LC.plain_logits(llm, list(key), PROMPT_LEN))


def test_gguf_files_as_the_users_models(tiny, tmp_path):
    """gguf_models reads V and EOS from the GGUF; the audit runs on the files as they are; bad files are errors."""
    from exactness.engines import audit as A
    from exactness.engines.llamacpp import gguf_models, write_gguf
    from exactness.engines.tiny import build_tiny

    models, handle, _ = tiny
    m = gguf_models(handle.target_gguf, handle.draft_gguf, models.prompts)
    assert (m.vocab, m.eos, m.gguf) == (V, models.eos, True)
    rep = A.audit(ENGINE, settings=["T=1"], options=["off", "draft"], n=60, shrink=False, models=m,
                  workdir=tmp_path / "w")
    assert [c.verdict for c in rep.cells] == ["PASS", "PASS"], rep.to_markdown()
    assert all(c.law_tv is None for c in rep.cells) and "GGUF files" in rep.to_markdown()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="--target .* is not a readable GGUF"):
        gguf_models(bad, handle.draft_gguf, models.prompts)
    with pytest.raises(ValueError, match="--draft .*no such file"):
        gguf_models(handle.target_gguf, tmp_path / "none.gguf", models.prompts)
    with pytest.raises(ValueError, match=r"--prompt-ids must be rows .* \[0, 16\)"):
        gguf_models(handle.target_gguf, handle.draft_gguf, [[1, 2, 99]])
    other = write_gguf(build_tiny(tmp_path / "v32", vocab=32).target_dir, tmp_path / "v32.gguf")
    with pytest.raises(ValueError, match="a draft must share the target's tokenizer"):
        gguf_models(handle.target_gguf, other, models.prompts)
    with pytest.raises(ValueError, match="takes Hugging Face checkpoint folders, not GGUF"):
        A.audit("transformers", settings=["T=1"], n=60, models=m)


# ---------------------------------------------------------------------------------------------------------------
# Standalone reproduction scripts


from _repro_run import run_isolated as _run_isolated, temperature_dropped_on_draft  # noqa: E402


_TemperatureDroppedOnDraft = temperature_dropped_on_draft(type(ENGINE))


def test_planted_fail_script_reproduces_without_the_project(tmp_path):
    """The audit writes a script for the planted FAIL; run alone (no resispec) it reproduces the bias: exit 1."""
    from exactness.engines import audit as A

    rep = A.audit(_TemperatureDroppedOnDraft(), settings=["temperature=0.5"], options=["off", "draft"], n=400,
                  shrink=False, workdir=tmp_path / "w", out=tmp_path / "out")
    off, draft = rep.cells
    assert off.verdict == "PASS" and off.repro is None, off.cause
    assert draft.verdict == "FAIL" and draft.repro, draft.cause
    src = open(draft.repro).read()
    assert "'temp': 1.0" in src and "import exactness" not in src and "def write_gguf" in src
    got = _run_isolated(draft.repro, tmp_path, 4000)
    assert got.returncode == 1, (got.stdout, got.stderr[-3000:])
    assert "two-sample chi-square p = " in got.stdout


def test_exact_off_cell_script_exits_0(tiny, tmp_path):
    """Option off at the combined setting, no bias: the plain sampler matches the engine's law in the script."""
    models, _, _ = tiny
    off = {"position": 2, "prompt": models.prompts[0].tolist(), "prefix": [int(models.prompts[0][1])], "token": 3,
           "observed": 0.1, "exact": 0.1, "count": 100}
    path = tmp_path / "repro_off.py"
    path.write_text(ENGINE.repro_script(models, SETTINGS["combined"], "off", off, None))
    got = _run_isolated(path, tmp_path, 4000)
    assert got.returncode == 0, (got.stdout, got.stderr[-3000:])
    assert "TV vs the exact law" in got.stdout


def test_repro_script_on_the_users_gguf_files_names_them(tiny):
    """--model x.gguf: the script loads the GGUF paths as they are (no rebuild) and parses."""
    from exactness.engines.llamacpp import gguf_models

    models, handle, _ = tiny
    m = gguf_models(handle.target_gguf, handle.draft_gguf, models.prompts)
    src = ENGINE.repro_script(m, SETTINGS["plain"], "ngram", {"position": 1, "prompt": models.prompts[0].tolist(),
                                                              "prefix": []}, None)
    compile(src, "repro.py", "exec")
    assert f"TARGET_GGUF, DRAFT_GGUF = {str(handle.target_gguf)!r}" in src and "def write_gguf" not in src
    with pytest.raises(EngineUnavailable, match="no option 'mtp'"):
        ENGINE.repro_script(models, SETTINGS["plain"], "mtp", {"prompt": [2], "prefix": []}, None)
