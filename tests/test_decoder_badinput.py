"""certify_decoder: bad input gets a clear error naming the argument and the fix; seeds."""

import re

import numpy as np
import pytest

import exactness
from exactness.decoder_mutants import CORRECT

from _decoder_cases import setup


def _good():
    model, target, prompts = setup()
    return CORRECT["token_chain"](model), target, prompts


class Fn:  # a plain callable decoder (no .sample)
    def __init__(self, inner, fix=lambda t: t):
        self.inner, self.fix = inner, fix

    def __call__(self, prompt, new_tokens, rng):
        return self.fix(self.inner(prompt, new_tokens, rng))


def test_plain_callable_decoder_passes():
    dec, target, prompts = _good()
    cert = exactness.certify_decoder(Fn(dec), target, prompts, n=300)
    assert cert.passed and "single" in cert.skipped and "pit[*,ratio]" in cert.skipped


def _fails_naming(cert, match):
    """A misbehaving decoder is a FAIL naming the cause (issue 37), never a ValueError / TypeError."""
    assert not cert.passed and cert.checks == {"subject": 0.0}, cert.summary()
    assert re.search(match, cert.details["subject"]["error"]), cert.details["subject"]["error"]


@pytest.mark.parametrize("fix, match", [
    (lambda t: t[:-1], r"shape \(1,\).*expected \(2,\)"),
    (lambda t: t.astype(np.float64), "dtype float64.*integer token ids"),
    (lambda t: t + 100, r"outside the target's vocabulary \[0, 4\)"),
])
def test_bad_decoder_output(fix, match):
    dec, target, prompts = _good()
    _fails_naming(exactness.certify_decoder(Fn(dec, fix), target, prompts, n=50), match)


def test_bad_batched_output():
    dec, target, prompts = _good()

    class Short:
        def sample(self, pr, m, rng):
            return dec.sample(pr, m, rng)[:, :1]

    _fails_naming(exactness.certify_decoder(Short(), target, prompts, n=50),
                  r"decoder.sample.*shape .*expected \(\d+, 2\)")


@pytest.mark.parametrize("tfix, match", [
    (lambda p: p * 1.1, "sums to .* not 1.*normalised"),
    (lambda p: p if p.shape[0] == 1 else np.concatenate([p, np.zeros((p.shape[0], 1))], axis=1),
     "returned V = 5 but V = 4 before"),
    (lambda p: p[:, :, None], r"shape .* must return \(B, V\)"),
])
def test_bad_target(tfix, match):
    dec, target, prompts = _good()
    with pytest.raises(ValueError, match=match):
        exactness.certify_decoder(dec, lambda c: tfix(target(c)), prompts, n=50)


def test_bad_prompts():
    dec, target, _ = _good()
    with pytest.raises(ValueError, match="unequal lengths"):
        exactness.certify_decoder(dec, target, [[0, 1], [2]], n=50)
    with pytest.raises(ValueError, match=r"shape \(P, L\)"):
        exactness.certify_decoder(dec, target, np.array([0, 1]), n=50)
    with pytest.raises(TypeError, match="integer token ids"):
        exactness.certify_decoder(dec, target, np.array([[0.5]]), n=50)
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        exactness.certify_decoder(dec, target, np.array([[1], [9]]), n=50)


def test_bad_arguments():
    dec, target, prompts = _good()
    for kw, match in [({"new_tokens": 0}, "new_tokens"), ({"n": 0}, "n must be"), ({"alpha": 2.0}, "alpha"),
                      ({"seeded": "yes"}, "seeded")]:
        with pytest.raises((ValueError, TypeError), match=match):
            exactness.certify_decoder(dec, target, prompts, **{"n": 50, **kw})
    with pytest.raises(TypeError, match="decoder must be"):
        exactness.certify_decoder(object(), target, prompts, n=50)
    with pytest.raises(TypeError, match="target must be"):
        exactness.certify_decoder(dec, None, prompts, n=50)


def test_decoder_that_ignores_its_seed():
    dec, target, prompts = _good()
    own = np.random.default_rng(123)

    class Unseeded:
        def sample(self, pr, m, rng):
            return dec.sample(pr, m, own)

    cert = exactness.certify_decoder(Unseeded(), target, prompts, n=200)
    assert "seeded" in cert.skipped and "seeded" not in cert.checks
    with pytest.raises(ValueError, match="ignores its seed.*draw every random number from the rng"):
        exactness.certify_decoder(Unseeded(), target, prompts, n=200, seeded=True)


def test_same_seed_same_certificate_and_tv_warning():
    dec, target, prompts = _good()
    a = exactness.certify_decoder(dec, target, prompts, n=400, seed=5)
    b = exactness.certify_decoder(dec, target, prompts, n=400, seed=5)
    assert a.checks == b.checks
    with pytest.warns(exactness.ExactnessWarning, match="detectable TV"):
        exactness.certify_decoder(dec, target, prompts, n=400, tv=0.01)


def test_bad_seed_and_seed_kinds():
    dec, target, prompts = _good()
    with pytest.raises(TypeError, match="seed must be"):
        exactness.certify_decoder(dec, target, prompts, n=50, seed="x")
    with pytest.raises(ValueError, match="seed must be >= 0"):
        exactness.certify_decoder(dec, target, prompts, n=50, seed=-1)
    a = exactness.certify_decoder(dec, target, prompts, n=100, seed=np.random.SeedSequence(5))
    b = exactness.certify_decoder(dec, target, prompts, n=100, seed=np.random.default_rng(5))
    assert a.passed and b.passed


def test_pit_memory_is_streamed(monkeypatch):
    # the PIT pass holds PIT_CHUNK rows of laws at a time, not (P, n, m, V): shrink it, same numbers
    import exactness.decoder as dec_mod

    dec, target, prompts = _good()
    a = exactness.certify_decoder(dec, target, prompts, n=300, seed=2, new_tokens=3)
    monkeypatch.setattr(dec_mod, "PIT_CHUNK", 7)
    b = exactness.certify_decoder(dec, target, prompts, n=300, seed=2, new_tokens=3)
    assert {k: v for k, v in a.checks.items() if k.startswith("pit")} == \
        {k: v for k, v in b.checks.items() if k.startswith("pit")}


@pytest.mark.parametrize("kw", [{"tv": 1e-9}, {"tv": 1e-4}, {"n": 10**9}])
def test_a_budget_over_the_kept_tokens_is_refused_before_any_draw(kw):
    """Breaker: tv=1e-4 died with a 112 GiB allocation error, tv=1e-9 with an OverflowError."""
    from exactness.budget import BudgetError

    dec, target, prompts = _good()
    with pytest.raises(BudgetError, match="MAX_DECODER_TOKENS"):
        exactness.certify_decoder(dec, target, prompts, **kw)
