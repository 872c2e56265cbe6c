"""The coupled certificate's checks as objects (exactness.coupled.checks, issue 39 item 3): every check declares
what it detects, its design twins and the planted bug it must catch, and catches it; the table is what
certify_coupled runs after a mismatch, in its order."""

import numpy as np
import pytest

from exactness.coupled import certify_coupled
from exactness.coupled.checks import COUPLED_CHECKS, COUPLED_MUTANTS, CoupledCheck
from resispec import get_verifier

RNG = np.random.default_rng(3)
P, Q = RNG.dirichlet(np.ones(50)), RNG.dirichlet(np.ones(50))


def test_the_table_names_every_check_once_and_each_declares_itself():
    assert [c.name for c in COUPLED_CHECKS] == ["coupled", "conditional", "fallback", "law"]
    for c in COUPLED_CHECKS:
        assert isinstance(c, CoupledCheck) and c.detects and c.mutant in COUPLED_MUTANTS, c


def test_an_exact_kernel_against_itself_records_no_mismatch():
    cert = certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=5_000)
    assert cert.passed and cert.checks == {"coupled": 1.0}, cert.checks


@pytest.mark.parametrize("check", COUPLED_CHECKS, ids=repr)
def test_every_check_catches_its_mutant(check):
    make, reference, k = COUPLED_MUTANTS[check.mutant]
    cert = certify_coupled(make(), reference, P, Q, k, n=50_000, fallback=check.name == "fallback")
    assert not cert.passed, cert.verdict
    assert cert.checks[check.name] < 1e-3, (check.name, cert.checks)


@pytest.mark.parametrize("check", COUPLED_CHECKS, ids=repr)
def test_design_twins_agree(check):
    """detectable_tv falls with n and n_for_tv inverts it (the event check: 1 - (1 - power)^(1/n))."""
    a, b = check.detectable_tv(1_000, 49), check.detectable_tv(100_000, 49)
    assert 0 < b < a < 1
    assert abs(check.n_for_tv(a, 49) - 1_000) <= 10
