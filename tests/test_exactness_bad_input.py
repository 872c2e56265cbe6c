"""Bad input: clear errors or warnings, never a silent pass."""

import numpy as np
import pytest

import exactness
import resispec

P = np.full(4, 0.25)


def ok_sampler(rng, m):
    return rng.integers(0, 4, m)


@pytest.mark.parametrize("law, match", [
    (np.array([0.5, -0.1, 0.3, 0.3]), "negative"),
    (np.array([0.5, np.nan, 0.25, 0.25]), "NaN or inf"),
    (np.array([0.5, np.inf, 0.25, 0.25]), "NaN or inf"),
    (np.array([0.5, 0.5, 0.5, 0.5]), "sums to"),
    (np.ones((2, 2)) / 4, "shape"),
])
def test_bad_laws(law, match):
    with pytest.raises(ValueError, match=match):
        exactness.certify_sampler(ok_sampler, law, 100)


def test_bad_law_type():
    with pytest.raises(TypeError, match="law"):
        exactness.certify_sampler(ok_sampler, "uniform", 100)


def _sampler_cause(sample, n) -> str:
    """A misbehaving sampler is a FAIL naming the cause (issue 37 item 3), never a ValueError / TypeError."""
    cert = exactness.certify_sampler(sample, P, n)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    return cert.details["subject"]["error"]


def test_sampler_float_output():
    assert "int64" in _sampler_cause(lambda rng, m: rng.random(m), 100)


def test_sampler_out_of_range():
    assert "outside" in _sampler_cause(lambda rng, m: rng.integers(0, 5, m), 1000)
    assert "outside" in _sampler_cause(lambda rng, m: rng.integers(-1, 4, m), 1000)


def test_sampler_wrong_shape():
    assert "shape" in _sampler_cause(lambda rng, m: rng.integers(0, 4, (m, 2)), 100)


@pytest.mark.parametrize("n", [0, -5])
def test_bad_n(n):
    with pytest.raises(ValueError, match="n must be"):
        exactness.certify_sampler(ok_sampler, P, n)


def test_bad_alpha_and_seed():
    with pytest.raises(ValueError, match="alpha"):
        exactness.certify_sampler(ok_sampler, P, 100, alpha=1.5)
    with pytest.raises(TypeError, match="seed"):
        exactness.certify_sampler(ok_sampler, P, 100, seed="x")


def test_not_callable():
    with pytest.raises(TypeError, match="callable"):
        exactness.certify_sampler(np.arange(4), P, 100)


def test_verifier_bad_input():
    v = resispec.get_verifier("rrs")
    with pytest.raises(ValueError, match="sums to"):
        exactness.certify_verifier(v, np.array([0.5, 0.6]), np.array([0.5, 0.5]), 1)
    with pytest.raises(ValueError, match="k must be"):
        exactness.certify_verifier(v, P, P, 0)
    with pytest.raises(TypeError):
        exactness.certify_verifier(object(), P, P, 1)


def test_verifier_too_few_samples_warns():
    v = resispec.get_verifier("rrs")
    with pytest.warns(exactness.ExactnessWarning, match="detectable TV"):
        exactness.certify_verifier(v, P, P, 1, n=500, tv=1e-3, tree=False)


def test_planner_bad_input():
    with pytest.raises(ValueError, match="tv"):
        exactness.samples_for_tv(0.0, 7)
    with pytest.raises(ValueError, match="power"):
        exactness.detectable_tv(100, 7, power=1.0)
    with pytest.raises(ValueError, match="df"):
        exactness.detectable_tv(100, 0)
