"""exactness.adapters.laws.ModelLaws: two torch LMs as the batched model of the chain and tree decoders."""

import numpy as np
import pytest
import torch

import exactness
from exactness.adapters.laws import ModelLaws
from exactness.chain import chain_decoder, token_chain_kernel
from exactness.decoder_mutants import residual_off_by_one_kernel
from exactness.tree_decoder import TreeDecoder

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
V = 4
PROMPTS = np.array([[1, 2], [3, 0]], dtype=np.int64)


@pytest.fixture(scope="module")
def pair():
    return ModelLaws(tiny_model("qwen2", vocab=V, seed=1, scale=4.0), tiny_model("llama", vocab=V, seed=2, scale=4.0))


def test_laws_are_the_models_softmax_at_any_lengths(pair):
    ctx = [(1, 2), (3,), (1, 2, 0)]
    p, q = pair.laws(ctx)
    for i, c in enumerate(ctx):
        np.testing.assert_allclose(p[i], torch.softmax(full_logits(pair.models[0], c).double(), -1).numpy(), atol=1e-6)
        np.testing.assert_allclose(q[i], torch.softmax(full_logits(pair.models[1], c).double(), -1).numpy(), atol=1e-6)
    # memoised rows equal fresh ones
    np.testing.assert_array_equal(pair.laws(ctx)[0], p)
    np.testing.assert_allclose(ModelLaws(*pair.models, cache=False).target(PROMPTS), pair.target(PROMPTS), atol=1e-6)


def test_chain_and_tree_decoders_over_real_models_pass(pair):
    cert = exactness.certify_decoder(chain_decoder(token_chain_kernel, pair, gamma=2), pair.target, PROMPTS,
                                     new_tokens=3)
    assert cert.passed, cert.summary()
    cert = exactness.certify_decoder(TreeDecoder(pair, (2, 1)), pair.target, PROMPTS, new_tokens=3, n=6000, seed=1)
    assert cert.passed, cert.summary()


def test_a_biased_kernel_over_real_models_fails(pair):
    cert = exactness.certify_decoder(chain_decoder(residual_off_by_one_kernel, pair, gamma=2), pair.target, PROMPTS,
                                     new_tokens=3)
    assert not cert.passed


def test_bad_input(pair):
    with pytest.raises(ValueError, match="vocabularies differ"):
        ModelLaws(pair.models[0], tiny_model("llama", vocab=V + 1, seed=2))
    with pytest.raises(TypeError, match="SamplingConfig"):
        ModelLaws(*pair.models, sampling=0.7)
    with pytest.raises(ValueError, match="at least one token"):
        pair.laws([()])
    with pytest.raises(ValueError, match=r"outside \[0, 4\)"):
        pair.laws([(1, 9)])
    with pytest.raises(TypeError, match="integer array"):
        pair.target(np.zeros((2, 2)))
