"""onnxruntime-genai adapter (``exactness.engines.ortgenai``) on the shared tiny models: law, exact paths, a bias.

Skips with the reason when onnxruntime-genai (or its builder's onnx / onnx-ir) is not installed.  Budget: the
conversion (~10 s) once per module, option ``mtp``'s own Qwen3.5 + MTP model (~15 s, on first use), then
``certify_decoder`` at n = 1,000 continuations per prompt x 2 prompts, 3 new tokens, per speculative option.  The
standalone reproduction scripts (``mtp`` ~40 s; a planted FAIL's from the audit, and an exact ``off`` cell's) are
``slow``.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactness.engines.base import EngineUnavailable, get_engine
from exactness.settings import ORDERS, SamplingSettings, processed_law

ENGINE = get_engine("onnxruntime-genai")
pytestmark = pytest.mark.skipif(ENGINE.missing() is not None, reason=str(ENGINE.missing()))

#: One setting with every supported field active (penalties see prompt + generated tokens).
MIXED = SamplingSettings(temperature=0.7, top_k=5, top_p=0.9, repetition_penalty=1.2)
N = 1_000
NEW = 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from exactness.engines.tiny import build_tiny

    work = tmp_path_factory.mktemp("ortgenai")
    models = build_tiny(work / "tiny")
    return models, ENGINE.prepare(models, work)


def _contexts(prompts):
    """Prompt rows extended by 3 "generated" tokens that repeat prompt tokens, pad (t0) and EOS (t1)."""
    gen = np.array([[2, 0, 1], [6, 6, 1], [0, 3, 9], [1, 1, 1]], dtype=np.int64)
    return np.concatenate([np.repeat(prompts, len(gen), 0), np.tile(gen, (len(prompts), 1))], axis=1)


@pytest.mark.parametrize("settings", [
    SamplingSettings(), SamplingSettings(temperature=0.7), SamplingSettings(top_k=3), SamplingSettings(top_p=0.8),
    SamplingSettings(repetition_penalty=1.5), SamplingSettings(repetition_penalty=0.7), MIXED,
], ids=lambda s: s.label())
def test_law_matches_float64(tiny, settings):
    """Engine raw fp32 logits + its order == processed_law on transformers float64 logits (TV < 1e-4)."""
    from exactness.engines.tiny import float64_logits

    models, handle = tiny
    plen = models.prompts.shape[1]
    for ctx in (models.prompts, _contexts(models.prompts)):
        got = ENGINE.target(handle, settings, plen)(ctx)
        want = processed_law(float64_logits(models.target_dir)(ctx), ctx, plen, settings, ENGINE.order)
        assert got.shape == (len(ctx), models.vocab) and np.allclose(got.sum(1), 1.0)
        assert 0.5 * np.abs(got - want).sum(1).max() < 1e-4


def _mtp_float64_logits(handle):
    """``contexts (B, L) -> (B, V)``: transformers float64 logits of option ``mtp``'s checkpoint (its text model;
    no image is given, so the multimodal wrapper is bypassed)."""
    import torch
    from transformers import Qwen3_5ForConditionalGeneration

    handle.mtp()  # built on first use
    model = Qwen3_5ForConditionalGeneration.from_pretrained(str(handle.mtp_root / "hf"), dtype=torch.float64).eval()

    def logits(ctx):
        with torch.inference_mode():
            hidden = model.model.language_model(input_ids=torch.as_tensor(ctx), use_cache=False).last_hidden_state
            return model.lm_head(hidden)[:, -1].numpy()

    return logits


@pytest.mark.parametrize("settings", [SamplingSettings(), SamplingSettings(temperature=0.7), MIXED],
                         ids=lambda s: s.label())
def test_mtp_law_matches_float64(tiny, settings):
    """Option mtp's law is its model's own float16 logits: they are transformers float64 logits rounded to float16
    (to within one float16 step), and its law is processed_law on those rounded logits (TV < 1e-4); the rounding
    itself moves the law by less than 1e-3 in TV from the unrounded float64 law (measured ~2e-4 - 5e-4)."""
    models, handle = tiny
    plen = models.prompts.shape[1]
    f64 = _mtp_float64_logits(handle)
    for ctx in (models.prompts, _contexts(models.prompts)):
        raw, ref = ENGINE.raw_logits(handle, ctx, "mtp"), f64(ctx)
        ref16 = ref.astype(np.float16).astype(np.float64)
        assert np.all(np.abs(raw - ref16) <= np.spacing(np.abs(ref16).astype(np.float16)).astype(np.float64))
        got = ENGINE.target(handle, settings, plen, option="mtp")(ctx)
        assert got.shape == (len(ctx), models.vocab) and np.allclose(got.sum(1), 1.0)
        assert 0.5 * np.abs(got - processed_law(ref16, ctx, plen, settings, ENGINE.order)).sum(1).max() < 1e-4
        assert 0.5 * np.abs(got - processed_law(ref, ctx, plen, settings, ENGINE.order)).sum(1).max() < 1e-3


def test_mtp_declares_its_own_law(tiny):
    """Option mtp runs a model of its own: the engine declares it (own_law_options), target(option="mtp") is that
    model's law, and target() without an option stays the shared target's whatever decoder was made."""
    models, handle = tiny
    plen, s = models.prompts.shape[1], SamplingSettings()
    assert ENGINE.own_law_options == {"mtp"}
    plain = ENGINE.target(handle, s, plen, option="off")(models.prompts)
    mtp = ENGINE.target(handle, s, plen, option="mtp")(models.prompts)
    assert 0.5 * np.abs(plain - mtp).sum(1).max() > 0.1  # two different models
    law = ENGINE.target(handle, s, plen)
    ENGINE.decoder(handle, s, "mtp")
    assert np.array_equal(law(models.prompts), plain)


def test_order_is_declared_with_its_source():
    steps, source = ORDERS["onnxruntime-genai"]
    assert steps == ("repetition_penalty", "temperature", "top_k", "top_p:descending")
    assert "sampling_distribution.h" in source


@pytest.mark.parametrize("option", sorted(ENGINE.options))
def test_option_certifies(tiny, option):
    """Speculation off and every speculative option emit the processed law (pass at n = 1,000 x 2 prompts)."""
    import exactness

    models, handle = tiny
    dec = ENGINE.decoder(handle, MIXED, option)
    cert = exactness.certify_decoder(dec, ENGINE.target(handle, MIXED, models.prompts.shape[1], option=option),
                                     models.prompts, new_tokens=NEW, n=N, seed=1)
    assert cert.passed, cert.summary()
    if option != "off":
        acc = ENGINE.acceptance(dec)
        assert acc["tokens_emitted"] > 0 and acc["draft_tokens_evaluated"] > 0


@pytest.mark.parametrize("option", ["draft", "mtp"])
def test_planted_temperature_drop_fails(tiny, option):
    """The engine's speculative path run at temperature 1 while the law is at 0.7 (a dropped setting) fails."""
    import exactness

    models, handle = tiny
    law = SamplingSettings(temperature=0.7)
    dec = ENGINE.decoder(handle, SamplingSettings(temperature=1.0), option)
    cert = exactness.certify_decoder(dec, ENGINE.target(handle, law, models.prompts.shape[1], option=option),
                                     models.prompts, new_tokens=NEW, n=N, seed=2)
    assert not cert.passed


def test_exactly_new_tokens_and_seeded(tiny):
    """Exactly new_tokens tokens (EOS t1 does not stop: the ghost EOS is never drawn); same rng state, same draw."""
    models, handle = tiny
    for option in ("off", "draft", "ngram", "mtp"):
        dec = ENGINE.decoder(handle, SamplingSettings(), option)
        a = dec.sample(np.repeat(models.prompts, 50, 0), 6, np.random.default_rng(5))
        b = dec.sample(np.repeat(models.prompts, 50, 0), 6, np.random.default_rng(5))
        assert a.shape == (100, 6) and a.min() >= 0 and a.max() < models.vocab
        assert (a == models.eos).any()  # EOS was emitted and generation went on
        assert np.array_equal(a, b)


def test_bad_input(tiny):
    models, handle = tiny
    with pytest.raises(EngineUnavailable, match="does not implement min_p"):
        ENGINE.target(handle, SamplingSettings(min_p=0.1), 5)
    with pytest.raises(EngineUnavailable, match="no option 'medusa'"):
        ENGINE.decoder(handle, SamplingSettings(), "medusa")
    with pytest.raises(EngineUnavailable, match="no option 'medusa'"):
        ENGINE.target(handle, SamplingSettings(), 5, option="medusa")
    with pytest.raises(EngineUnavailable, match="no option 'medusa'"):
        ENGINE.repro_script(models, SamplingSettings(), "medusa", {"prompt": [2], "prefix": []}, None)
    with pytest.raises(EngineUnavailable, match="top_k > vocab_size"):
        ENGINE.decoder(handle, SamplingSettings(top_k=17), "off")
    dec = ENGINE.decoder(handle, SamplingSettings(), "off")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 16\)"):
        dec.sample(np.array([[3, 16]], dtype=np.int64), 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="new_tokens"):
        dec.sample(models.prompts, 0, np.random.default_rng(0))


@pytest.mark.slow  # rebuilds the MTP model in a subprocess and draws 2 x 600 continuations: ~40 s
def test_mtp_repro_script_is_standalone(tiny, tmp_path):
    """The mtp reproduction script runs without this project (python -I, another folder) and compares the engine's
    plain Generator with its MtpGenerator on the rebuilt model."""
    import subprocess
    import sys

    models, _ = tiny
    off = {"position": 1, "prompt": models.prompts[0].tolist(), "prefix": [], "token": 3, "observed": 0.1,
           "exact": 0.2, "count": 100}
    path = tmp_path / "repro.py"
    path.write_text(ENGINE.repro_script(models, SamplingSettings(), "mtp", off, None))
    out = subprocess.run([sys.executable, "-I", str(path), "600"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert out.returncode in (0, 1), out.stderr[-2000:]
    assert "draws with prefix []: off 600, mtp 600" in out.stdout, out.stdout


from _repro_run import run_isolated as _run_isolated, temperature_dropped_on_draft  # noqa: E402


_TemperatureDroppedOnDraft = temperature_dropped_on_draft(type(ENGINE))


@pytest.mark.slow  # an audit of 2 cells (conversion ~10 s) and the script (rebuild + 2 x 4,000 draws): ~1-2 min
def test_planted_fail_script_reproduces_without_the_project(tmp_path):
    """The audit writes a script for the planted FAIL; run alone (no resispec) it reproduces the bias: exit 1."""
    from exactness.engines import audit as A

    rep = A.audit(_TemperatureDroppedOnDraft(), settings=["temperature=0.7"], options=["off", "draft"], n=400,
                  shrink=False, workdir=tmp_path / "w", out=tmp_path / "out")
    off, draft = rep.cells
    assert off.verdict == "PASS" and off.repro is None, off.cause
    assert draft.verdict == "FAIL" and draft.repro, draft.cause
    src = open(draft.repro).read()
    assert "SEARCH_ON = {'do_sample': True, 'temperature': 1.0" in src and "import exactness" not in src
    got = _run_isolated(draft.repro, tmp_path, 4000)
    assert got.returncode == 1, (got.stdout, got.stderr[-3000:])
    assert "two-sample chi-square p = " in got.stdout


@pytest.mark.slow  # the script rebuilds and converts the tiny pair, then 4,000 batched draws: ~30 s
def test_exact_off_cell_script_exits_0(tiny, tmp_path):
    """Option off at a combined setting, no bias: the plain sampler matches the exact law in the script (exit 0)."""
    models, _ = tiny
    off = {"position": 2, "prompt": models.prompts[0].tolist(), "prefix": [int(models.prompts[0][1])], "token": 3,
           "observed": 0.1, "exact": 0.1, "count": 100}
    path = tmp_path / "repro_off.py"
    path.write_text(ENGINE.repro_script(models, MIXED, "off", off, None))
    got = _run_isolated(path, tmp_path, 4000)
    assert got.returncode == 0, (got.stdout, got.stderr[-3000:])
    assert "TV vs the exact law" in got.stdout
