"""exactness.adapters.hf: transformers ``generate(assistant_model=..., do_sample=True)`` as a certify_decoder pair.

HF's standard assisted generation passes the exact two-token joint law at T = 1, T = 0.7 and top-k 3; the same
check fails a decoder whose processing differs from the target law's (top-k 2 decoding against the full law);
the target callable equals generate's logits processors; seeding from the harness rng is reproducible; bad
input gets clear errors.  (No test asserts a bug of transformers: the audit script reports those.)
"""

import numpy as np
import pytest
import torch

import exactness
from exactness.adapters import certify_joint, joint_law
from exactness.adapters.hf import HFDecoder, hf_target

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
V = 4
PROMPT = np.array([1, 2, 3], dtype=np.int64)
N = 80  # per certificate (~0.1 s a generate call on a loaded 2-core machine); the mismatch test shows its power
DRAFTING = dict(num_assistant_tokens=2, num_assistant_tokens_schedule="constant")


@pytest.fixture(scope="module")
def pair():
    return tiny_model("llama", vocab=V, seed=31, scale=10.0), tiny_model("qwen2", vocab=V, seed=32, scale=10.0)


def test_target_applies_generates_processors(pair):
    target, _ = pair
    ctx = np.array([[1, 2, 3], [3, 0, 2]], dtype=np.int64)
    rows = hf_target(target, temperature=0.7, top_k=3)(ctx)
    assert rows.shape == (2, V) and rows.dtype == np.float64
    for i in range(2):
        z = full_logits(target, ctx[i]).double() / 0.7
        keep = torch.topk(z, 3).indices
        want = torch.zeros(V, dtype=torch.float64)
        want[keep] = torch.softmax(z[keep], 0)
        np.testing.assert_allclose(rows[i], want.numpy(), atol=1e-6)
    assert (np.count_nonzero(rows, axis=1) == 3).all()


def test_decoder_output_and_seeding(pair):
    dec = HFDecoder(*pair, **DRAFTING)
    out = dec(PROMPT, 3, np.random.default_rng(5))
    assert out.shape == (3,) and out.dtype == np.int64 and ((0 <= out) & (out < V)).all()
    np.testing.assert_array_equal(out, dec(PROMPT, 3, np.random.default_rng(5)))  # torch seeded from rng
    assert len({tuple(dec(PROMPT, 3, np.random.default_rng(s))) for s in range(10)}) > 1


def test_generates_exactly_new_tokens_despite_eos(pair):
    """Stopping is not part of the law: eos from the model's config does not cut the continuation."""
    target, draft = pair
    assert target.generation_config.eos_token_id is not None
    dec = HFDecoder(target, draft, **DRAFTING)
    assert all(dec(PROMPT, 3, np.random.default_rng(s)).size == 3 for s in range(10))


@pytest.mark.parametrize("options", [dict(), dict(temperature=0.7), dict(top_k=3)], ids=["T1", "T0.7", "topk3"])
def test_assisted_generation_passes_the_two_token_law(pair, options):
    target, draft = pair
    cert = certify_joint(HFDecoder(target, draft, **DRAFTING, **options), hf_target(target, **options), PROMPT, N,
                         seed=4)
    assert cert.passed, cert.summary()


def test_a_processing_mismatch_fails(pair):
    """Decoding with top-k 2 certified against the untruncated law: the check has power through the adapter."""
    target, draft = pair
    tv = 0.5 * np.abs(joint_law(hf_target(target, top_k=2), PROMPT) - joint_law(hf_target(target), PROMPT)).sum()
    assert tv > 0.3
    cert = certify_joint(HFDecoder(target, draft, **DRAFTING, top_k=2), hf_target(target), PROMPT, N, seed=4)
    assert not cert.passed, cert.summary()


@pytest.mark.skipif(not hasattr(exactness, "certify_decoder"), reason="exactness.certify_decoder not in this checkout")
def test_through_certify_decoder(pair):
    target, draft = pair
    good = exactness.certify_decoder(HFDecoder(target, draft, **DRAFTING, top_k=3), hf_target(target, top_k=3),
                                     PROMPT[None], new_tokens=2, n=N, seed=1)
    assert good.passed, good.summary()
    bad = exactness.certify_decoder(HFDecoder(target, draft, **DRAFTING, top_k=2), hf_target(target),
                                    PROMPT[None], new_tokens=2, n=N, seed=1)
    assert not bad.passed, bad.summary()


def test_bad_input(pair):
    target, draft = pair
    other = tiny_model("qwen2", vocab=V + 4, seed=33)
    with pytest.raises(ValueError, match="assistant_model has a 8-token vocabulary but model has 4"):
        HFDecoder(target, other)
    with pytest.raises(ValueError, match="do_sample=True"):
        HFDecoder(target, draft, do_sample=False)
    with pytest.raises(TypeError, match="GenerationConfig"):
        HFDecoder(target, draft, generation_config={"temperature": 0.7})
    with pytest.raises(ValueError, match="pass assistant_model="):
        HFDecoder(target, num_assistant_tokens=3)
    dec = HFDecoder(target, draft, **DRAFTING)
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="dtype int64"):
        dec(PROMPT.astype(np.float32), 2, rng)
    with pytest.raises(TypeError, match="ndarray"):
        dec([1, 2, 3], 2, rng)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 4\)"):
        dec(np.array([1, 7], dtype=np.int64), 2, rng)
    with pytest.raises(ValueError, match="new_tokens"):
        dec(PROMPT, 0, rng)
    with pytest.raises(TypeError, match="Generator"):
        dec(PROMPT, 2, 0)
    with pytest.raises(TypeError, match="int64"):
        hf_target(target)(PROMPT[None].astype(np.int32))
