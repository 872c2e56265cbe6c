"""mlx-lm engine adapter (``exactness.engines.mlxlm``) on the shared tiny local models (MLX CPU backend).

Skips with the reason when ``mlx`` / ``mlx_lm`` do not import (``pip install "mlx[cpu]" mlx-lm``).
Budget: the certifications run n = 150 continuations per prompt x 2 prompts (300 pooled, 3 new tokens, V = 16:
detectable TV ~0.3 of the 3-token joint law), about 30-60 s in all on 2 shared cores.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

MISSING = next((m for m in ("mlx.core", "mlx_lm") if importlib.util.find_spec(m.split(".")[0]) is None), None)
if MISSING is None:
    try:
        import mlx.core  # noqa: F401  (the CPU wheel may be present but not load)
    except Exception as exc:  # pragma: no cover - depends on the machine
        MISSING = f"mlx.core does not import: {exc}"
pytestmark = pytest.mark.skipif(MISSING is not None,
                                reason=f"mlx-lm is not importable ({MISSING}): pip install \"mlx[cpu]\" mlx-lm")

import exactness  # noqa: E402
from exactness.engines.base import EngineUnavailable, get_engine  # noqa: E402
from exactness.settings import parse_settings, processed_law  # noqa: E402

N = 150  # continuations per prompt in each certification
NEW = 3

#: Every supported field, alone and combined; temperature != 1 next to each filter (mlx-lm divides by T LAST).
LAW_SETTINGS = [
    "T=1", "temperature=0.7", "temperature=1.6", "top_k=3", "top_p=0.6", "min_p=0.1",
    "temperature=0.5,min_p=0.2", "temperature=2,top_p=0.5", "temperature=0.5,top_k=4",
    "repetition_penalty=1.8", "repetition_penalty=0.6,penalty_window=3", "repetition_penalty=1.8,penalty_window=7",
    "presence_penalty=1.5", "frequency_penalty=0.8,penalty_window=4", "logit_bias=3:2.5;5:-1",
    "temperature=0.8,top_k=5,top_p=0.9,min_p=0.05,repetition_penalty=1.3,frequency_penalty=0.5,"
    "presence_penalty=0.3,logit_bias=7:1.5",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from exactness.engines.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("mlx_tiny"))


@pytest.fixture(scope="module")
def engine():
    return get_engine("mlx-lm")


@pytest.fixture(scope="module")
def handle(engine, tiny, tmp_path_factory):
    return engine.prepare(tiny, tmp_path_factory.mktemp("mlx_work"))


@pytest.fixture(scope="module")
def ref(tiny):
    """The independent law source: the same checkpoint's raw logits in float64 (transformers)."""
    from exactness.engines.tiny import float64_logits

    return float64_logits(tiny.target_dir)


@pytest.fixture(scope="module")
def contexts(tiny):
    """Prompts followed by 0-3 'generated' tokens (repeats of prompt tokens and new ones)."""
    rng = np.random.default_rng(0)
    rows = [np.concatenate([p, rng.integers(0, tiny.vocab, g)]) for g in (0, 1, 3) for p in tiny.prompts]
    return {L: np.stack([r for r in rows if len(r) == L]).astype(np.int64) for L in sorted({len(r) for r in rows})}


@pytest.mark.parametrize("text", LAW_SETTINGS)
def test_engine_law_matches_float64_processed_law(engine, handle, tiny, contexts, ref, text):
    """mlx-lm's own law (its processors and sampler chain on fp32 logits) == processed_law on float64 logits."""
    settings = parse_settings(text)
    law = engine.target(handle, settings, prompt_len=tiny.prompts.shape[1])
    for L, ctx in contexts.items():
        got = law(ctx)
        want = processed_law(ref(ctx), ctx, tiny.prompts.shape[1], settings, engine.order)
        assert got.shape == (ctx.shape[0], tiny.vocab) and got.dtype == np.float64
        np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-12)
        tv = 0.5 * np.abs(got - want).sum(1).max()
        assert tv < 1e-4, f"{text} at context length {L}: TV {tv:.2e} between mlx-lm's law and the float64 law"


def test_order_is_discriminating(tiny, contexts, ref):
    """The check above can fail: transformers' order (temperature first) differs from mlx-lm's by TV > 0.1."""
    ctx = contexts[tiny.prompts.shape[1]]
    x = ref(ctx)
    for text in ("temperature=0.5,min_p=0.2", "temperature=2,top_p=0.5"):
        s = parse_settings(text)
        tv = 0.5 * np.abs(processed_law(x, ctx, 5, s, "mlx-lm") - processed_law(x, ctx, 5, s, "transformers")).sum(1)
        assert tv.max() > 0.1, (text, tv)


@pytest.mark.parametrize("option", ["off", "draft"])
def test_exact_paths_pass(engine, handle, tiny, option):
    """generate_step and speculative_generate_step (sample-and-match) pass with filters, temperature and a bias."""
    settings = parse_settings("temperature=0.7,top_k=6,min_p=0.02,logit_bias=4:1")
    dec = engine.decoder(handle, settings, option)
    cert = exactness.certify_decoder(dec, engine.target(handle, settings, tiny.prompts.shape[1]), tiny.prompts,
                                     new_tokens=NEW, n=N, seed=11, seeded=False)
    assert cert.passed, cert
    acc = engine.acceptance(dec)
    assert acc["calls"] == N * len(tiny.prompts) and acc["emitted"] == acc["calls"] * NEW
    if option == "draft":
        assert 0 < acc["accepted"] <= acc["drafted"]


def test_planted_verifier_drops_top_k_fails(engine, handle, tiny):
    """Planted at engine level: the verifier's sampler drops top_k (the draft keeps it) -> FAIL."""
    from mlx_lm.sample_utils import make_sampler

    from exactness.engines.mlxlm import MLXDecoder

    settings = parse_settings("top_k=3")
    full, loose = make_sampler(temp=1.0, top_k=3), make_sampler(temp=1.0)

    def planted(logprobs):  # drafting calls with one row, verification with num_draft + 1 rows
        return full(logprobs) if logprobs.shape[0] == 1 else loose(logprobs)

    dec = MLXDecoder(handle["target"], handle["vocab"], settings, handle["draft"], sampler=planted)
    cert = exactness.certify_decoder(dec, engine.target(handle, settings, tiny.prompts.shape[1]), tiny.prompts,
                                     new_tokens=NEW, n=N, seed=12, seeded=False)
    assert not cert.passed


def test_seeded_from_rng(engine, handle, tiny):
    """Each request is seeded from the harness rng: the same rng state gives the same continuation."""
    settings = parse_settings("temperature=1.3")
    for option in ("off", "draft"):
        dec = engine.decoder(handle, settings, option)
        a = [dec(tiny.prompts[0], 6, np.random.default_rng(s)) for s in range(4)]
        b = [dec(tiny.prompts[0], 6, np.random.default_rng(s)) for s in range(4)]
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert all(x.shape == (6,) and x.dtype == np.int64 for x in a)
        assert len({tuple(x) for x in a}) > 1


def test_speculative_penalty_history_finding(handle, tiny):
    """A fact about mlx-lm 0.32.2 (see the module docstring): speculative_generate_step's logits processors see
    only the LAST prompt token plus the generated ones; generate_step sees the whole prompt.  If this fails,
    mlx-lm changed: re-measure the penalty cells of the audit and update the finding."""
    from exactness.engines.mlxlm import spec_histories

    prompt = tiny.prompts[0]
    h = spec_histories(handle["target"], handle["draft"], prompt, 3)
    assert h["off"][0] == prompt.tolist()
    assert h["draft"][0] == prompt[-1:].tolist()


@pytest.mark.parametrize("text,why", [("bad_words=4", "does not implement bad_words"),
                                      ("repetition_penalty=1.2,penalty_window=0", "tokens[-0:]"),
                                      ("top_k=16", "0 < top_k < V")])
def test_unsupported_settings_are_unavailable(engine, handle, text, why):
    with pytest.raises(EngineUnavailable, match=why.replace("[", r"\[").replace("(", r"\(")):
        engine.decoder(handle, parse_settings(text), "draft")
    with pytest.raises(EngineUnavailable, match=why.replace("[", r"\[").replace("(", r"\(")):
        engine.target(handle, parse_settings(text), 5)


def test_bad_input(engine, handle, tiny):
    with pytest.raises(EngineUnavailable, match="no option 'ngram'"):
        engine.decoder(handle, parse_settings("T=1"), "ngram")
    law = engine.target(handle, parse_settings("T=1"), 5)
    with pytest.raises(TypeError, match="int64"):
        law(tiny.prompts.astype(np.int32))
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        law(tiny.prompts + 20)
    assert engine.missing() is None and engine.version() != "not installed"
