"""Biased decoders FAIL at defaults: block verification, batches, bonus token (second half of the catalogue)."""

import pytest

import exactness
from exactness.decoder_mutants import MUTANTS

from _decoder_cases import setup

SECOND = ["block_same_position_residual", "rows_mixed", "bonus_from_residual"]
#: gamma per mutant: the block-residual bug acts when a stop row carries a block weight < 1, i.e.
#: after one or more accepted drafts, with room for the residual token inside the 3 certified tokens
GAMMA = {"block_same_position_residual": 3}


def test_catalogue_is_split_over_the_two_files():
    from test_decoder_mutants import FIRST

    assert sorted(FIRST + SECOND) == sorted(MUTANTS)


@pytest.mark.parametrize("name", SECOND)
def test_mutant_fails(name):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(MUTANTS[name](model, GAMMA.get(name, 2)), target, prompts, new_tokens=3)
    assert not cert.passed, cert.summary()


def test_rows_mixed_is_invisible_to_batches_of_one():
    # the planted bug spares batches of <= 2 rows: the single-prompt path must pass
    model, target, prompts = setup()
    cert = exactness.certify_decoder(MUTANTS["rows_mixed"](model), target, prompts, new_tokens=3)
    assert cert.checks["single"] > 1e-3 and cert.checks["joint"] < 1e-6


def test_pit_alone_finds_the_mutants_at_any_vocabulary(monkeypatch):
    # with enumeration switched off only the PIT checks run (what happens at large V)
    import exactness.decoder as dec

    monkeypatch.setattr(dec, "JOINT_MAX", 1)
    model, target, prompts = setup(V=8)
    ok = exactness.certify_decoder(exactness.decoder_mutants.CORRECT["token_chain"](model), target, prompts,
                                   new_tokens=3)
    assert ok.passed and "joint" in ok.skipped, ok.summary()
    bad = exactness.certify_decoder(MUTANTS["argmax_draft_raw_q"](model), target, prompts, new_tokens=3)
    pit_based = ("pit", "single", "small_batches", "tile_rows", "homogeneous", "acceptance_bound", "draft_law")
    assert not bad.passed and all(k.startswith(pit_based) for k in bad.failed_checks()), bad.summary()
