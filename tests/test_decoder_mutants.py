"""Biased decoders FAIL certify_decoder at default settings (joint law over 3 tokens, V = 4)."""

import pytest

import exactness
from exactness.decoder_mutants import MUTANTS

from _decoder_cases import setup

FIRST = ["argmax_draft_raw_q", "shared_rng", "residual_off_by_one", "target_off_by_one"]


@pytest.mark.parametrize("name", FIRST)
def test_mutant_fails(name):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(MUTANTS[name](model), target, prompts, new_tokens=3)
    assert not cert.passed, cert.summary()
    assert cert.failed_checks()
