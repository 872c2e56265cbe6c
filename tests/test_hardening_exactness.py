"""Adversarial inputs to the exactness harness (regression tests)."""

import numpy as np
import pytest

import exactness
import resispec

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])


class _Bad:
    drafting = "iid"

    def __init__(self, make):
        self.make = make

    def verify(self, p, q, candidates, rng, uniforms=None):
        return self.make(np.shape(candidates)[0])


@pytest.mark.parametrize("make, match", [
    (lambda B: resispec.VerifyResult(np.full(B, 7, dtype=np.int64), np.zeros(B, dtype=np.int64)),
     "outside the vocabulary"),
    (lambda B: resispec.VerifyResult(np.zeros(B) + 0.5, np.zeros(B, dtype=np.int64)), "dtype"),
    (lambda B: resispec.VerifyResult(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)),
     "shape"),  # used to PASS with n = 1
    (lambda B: None, "tokens"),
])
def test_bad_verify_output_fails_naming_it_never_a_pass(make, match):
    # the subject misbehaved: a FAIL naming the cause (issue 37 item 3), not a ValueError / TypeError
    cert = exactness.certify_verifier(_Bad(make), P, Q, 2, n=500)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert match in cert.details["subject"]["error"] and "_Bad.verify" in cert.details["subject"]["error"]


def test_accepted_out_of_range_is_certified_on_the_tokens():
    bad = lambda B: resispec.VerifyResult(np.zeros(B, dtype=np.int64), np.full(B, 5, dtype=np.int64))  # noqa: E731
    cert = exactness.certify_verifier(_Bad(bad), P, Q, 2, n=500)
    assert not cert.passed and "marginal" in cert.failed_checks()   # always token 0: biased
    assert "accepted" in cert.details["accepted_index"]["error"] and "[-1, 2)" in cert.details["accepted_index"]["error"]


def test_negative_seed():
    with pytest.raises(ValueError, match="seed must be >= 0"):
        exactness.certify_sampler(lambda r, n: r.choice(3, size=n, p=P), P, 100, seed=-1)


def test_assert_exact_with_no_k_does_not_pass_vacuously():
    with pytest.raises(ValueError, match="k is empty"):
        exactness.assert_exact(resispec.get_verifier("rrs"), P, Q, k=[], n=500)


@pytest.mark.parametrize("tv, err", [(float("nan"), ValueError), (-0.1, ValueError), (2.0, ValueError),
                                     ("x", TypeError)])
def test_chi2_power_rejects_bad_tv(tv, err):
    with pytest.raises(err, match="tv"):
        exactness.chi2_power(tv, 100, 10, 1e-3)
