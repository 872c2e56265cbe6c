"""Exact decoders pass certify_decoder at default settings: the two chain references and an rrs decoder."""

import numpy as np
import pytest

import exactness
from exactness.chain import block_kernel, chain_decoder, per_request, token_chain_kernel
from exactness.decoder import joint_law, markov_joint_law
from exactness.decoder_mutants import CORRECT

from _decoder_cases import setup


def test_enumerated_joint_law_matches_the_markov_closed_form():
    model, target, prompts = setup(V=5)
    for pr in prompts:
        np.testing.assert_allclose(joint_law(target, pr, 3), markov_joint_law(model, pr, 3), atol=1e-15)


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_decoders_pass_at_defaults(name):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT[name](model), target, prompts, new_tokens=3)
    assert cert.passed, cert.summary()
    assert "joint" in cert.checks and "pit[3,ratio]" in cert.checks and "single" in cert.checks
    assert cert.checks["seeded"] == 1.0
    assert cert.detectable_tv <= 0.02
    assert [d["position"] for d in cert.details["positions"]] == [1, 2, 3]


def test_per_request_kernel_and_one_hot_drafts():
    def one(tp, dp, d, rng):  # the token-level rule written per request
        out = token_chain_kernel(tp[None], None if dp is None else dp[None], d[None], rng)[0]
        return out[out >= 0]

    model, target, prompts = setup()
    dec = chain_decoder(per_request(one), model, gamma=2, one_hot=True)
    cert = exactness.certify_decoder(dec, target, prompts, n=1500, seed=1)
    assert cert.passed, cert.summary()


def test_block_verification_accepts_at_least_as_much_as_token_level():
    # Sun et al. 2024: block verification is never worse in expected accepted length.
    model, target, prompts = setup(V=6)
    rng = np.random.default_rng(0)
    B, g, V = 20000, 3, 6
    p, q = model.P[rng.integers(0, V, B)], model.Q[rng.integers(0, V, B)]
    tp = np.repeat(p[:, None], g + 1, axis=1)
    dp = np.repeat(q[:, None], g, axis=1)
    d = np.stack([exactness.chain._sample_rows(dp[:, i], rng.random(B)) for i in range(g)], axis=1)
    tok = (token_chain_kernel(tp, dp, d, np.random.default_rng(1)) >= 0).sum(1).mean()
    blk = (block_kernel(tp, dp, d, np.random.default_rng(1)) >= 0).sum(1).mean()
    assert blk >= tok - 0.02
