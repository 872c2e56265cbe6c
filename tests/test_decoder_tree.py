"""The reference tree decoder (exactness.tree_decoder) is exact; its planted tree bugs FAIL at defaults."""

import numpy as np
import pytest

import exactness
from exactness.tree_decoder import ParentPositionTree, TreeDecoder, WrongSliceTree

from _decoder_cases import setup


def test_tree_decoder_passes_at_defaults():
    model, target, prompts = setup()
    cert = exactness.certify_decoder(TreeDecoder(model, (2, 2), "rrs"), target, prompts, new_tokens=3)
    assert cert.passed, cert.summary()
    assert cert.details["joint"]["detectable_tv"] <= 0.02 + 1e-9


@pytest.mark.parametrize("branching,verifier", [((3, 1), "kseq"), ((2, 1, 1), "resispec"), ((1, 2), "target_only")])
def test_other_shapes_and_rules_pass(branching, verifier):
    model, target, prompts = setup(V=5, seed=1)
    cert = exactness.certify_decoder(TreeDecoder(model, branching, verifier), target, prompts, new_tokens=3,
                                     n=8000, seed=3)
    assert cert.passed, cert.summary()


@pytest.mark.parametrize("cls", [WrongSliceTree, ParentPositionTree])
def test_planted_tree_bugs_fail_at_defaults(cls):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(cls(model, (2, 2), "rrs"), target, prompts, new_tokens=3)
    assert not cert.passed
    assert cert.checks["joint"] < 1e-6


def test_seeded_and_shaped():
    model, _, prompts = setup()
    dec = TreeDecoder(model, "2,2")
    a = dec.sample(prompts, 4, np.random.default_rng(5))
    assert a.shape == (3, 4) and a.dtype == np.int64
    assert np.array_equal(a, dec.sample(prompts, 4, np.random.default_rng(5)))
    assert np.array_equal(dec(prompts[1], 4, np.random.default_rng(9)),
                          dec.sample(prompts[1:2], 4, np.random.default_rng(9))[0])


def test_bad_input():
    model, _, _ = setup()
    with pytest.raises(ValueError, match="branching"):
        TreeDecoder(model, (2, 0))
    with pytest.raises(ValueError, match="branching"):
        TreeDecoder(model, "2,x")
    with pytest.raises(TypeError, match="laws"):
        TreeDecoder(object(), (2,))
    with pytest.raises(ValueError, match="i.i.d."):
        TreeDecoder(model, (2,), "rrs_wor")
