"""Adversarial review (breaker 3) of tv planning, sequential testing, executors, proxies and cpu_linear."""

import warnings

import numpy as np
import pytest

from exactness import certify_verifier
from resispec import get_verifier

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("tv", [1e-160, 1e-300])
def test_tiny_tv_is_refused_naming_tv_not_an_overflow(tv, sequential):
    # was: OverflowError (pooled_df / pilot on a Python int beyond float range) or ZeroDivisionError (sequential)
    with pytest.raises(ValueError, match=r"tv = 1e-\d+ needs n = .*memory limit"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=tv, sequential=sequential)


@pytest.mark.parametrize("sequential", [False, True])
def test_tv_one_plans_a_test_that_can_fail(sequential):
    # was: tv=1 planned n = 9 draws, then "no degrees of freedom ... use n >= ..." although the user gave no n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cert = certify_verifier(get_verifier("rrs"), P, Q, 2, tv=1.0, sequential=sequential)
    assert cert.df >= 1 and cert.details["plan"]["n"] == cert.n


@pytest.mark.parametrize("kind", [["auto"], {"auto": 1}])
def test_linear_kind_not_a_string_is_a_type_error_naming_linear(kind):
    torch = pytest.importorskip("torch")
    from resispec.decoding.cpu_linear import apply_linear
    from resispec.decoding.models import load_model

    # was: TypeError "unhashable type: 'list'" (no argument named)
    with pytest.raises(TypeError, match="linear must be a string"):
        apply_linear(torch.nn.Linear(2, 2), kind)
    with pytest.raises(TypeError, match="linear must be a string"):
        load_model("tiny-missing-path-never-read", linear=kind)
