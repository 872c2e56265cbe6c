"""exactness.assert_coupled: the pytest form of coupled certification."""

import math

import numpy as np
import pytest

import exactness
from exactness import mutants
from resispec import get_verifier

P = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
Q = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])


def test_a_conforming_kernel_passes_with_the_requested_bound():
    cert = exactness.assert_coupled(get_verifier("rrs"), "rrs", P, Q, 2, tv=1e-3)
    assert cert.passed and cert.mismatches == 0
    assert cert.n == math.ceil(math.log(1e3) / 1e-3)
    assert cert.tv_upper <= 1e-3


def test_a_biased_kernel_raises_with_its_counterexample():
    with pytest.raises(AssertionError, match="FAIL") as err:
        exactness.assert_coupled(mutants.CATALOGUE["residual_not_renormalised"], "rrs", P, Q, 2, tv=1e-3)
    assert "counterexample" in str(err.value) and "import" in str(err.value)


@pytest.mark.parametrize("tv", [0, 1, -0.1, "1e-4", True])
def test_bad_tv(tv):
    with pytest.raises(ValueError, match="tv must be"):
        exactness.assert_coupled(get_verifier("rrs"), "rrs", P, Q, 2, tv=tv)
