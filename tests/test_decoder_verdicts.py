"""certify_decoder never passes without testing and is immune to a decoder reusing its output buffer."""

import warnings

import numpy as np
import pytest

import exactness
from exactness.chain import token_chain_kernel, ChainDecoder
from exactness.decoder_mutants import MUTANTS

from _decoder_cases import setup


def test_too_few_continuations_is_an_error_not_a_pass():
    model, target, prompts = setup()
    with pytest.raises(ValueError, match="no degree of freedom"):
        exactness.certify_decoder(MUTANTS["residual_off_by_one"](model, 2), target, prompts, n=1, new_tokens=3)


def test_no_power_is_said(monkeypatch):
    import exactness.decoder as dec

    monkeypatch.setattr(dec, "JOINT_MAX", 1)       # PIT checks only (large V): 12 tokens, df 1
    model, target, prompts = setup()
    with pytest.warns(exactness.ExactnessWarning, match="no power"):
        cert = exactness.certify_decoder(ChainDecoder(token_chain_kernel, model), target, prompts, n=4,
                                         new_tokens=3, seeded=False)
    assert any("no power" in note for note in cert.notes)


@pytest.mark.parametrize("tv", ["0.1", -1, 0, 2.0])
def test_bad_tv_is_refused_before_running(tv):
    model, target, prompts = setup()
    with pytest.raises((TypeError, ValueError), match="tv must"):
        exactness.certify_decoder(ChainDecoder(token_chain_kernel, model), target, prompts, n=50, tv=tv)


class ReusedBuffer(ChainDecoder):
    """Exact, but hands back one output buffer, overwritten on every call."""

    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        buf = getattr(self, "_buf", None)
        if buf is None or buf.shape != out.shape:
            buf = self._buf = np.empty_like(out)
        buf[...] = out
        return buf


def test_a_reused_output_buffer_is_copied():
    model, target, prompts = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        cert = exactness.certify_decoder(ReusedBuffer(token_chain_kernel, model), target, prompts, n=3000,
                                         new_tokens=2, seed=4)
    assert cert.passed, cert.summary()
