"""The stepwise certificate's checks as objects (exactness.stepwise_checks, issue 39 item 3): every check declares
what it detects, its design twins and the planted bug it must catch, and catches it; the table is what
certify_stepwise runs, in its order."""

import math

import numpy as np
import pytest

from exactness import certify_stepwise
from exactness.stepwise import draws_for_tv
from exactness.stepwise_checks import DECLARED_STEPS, STEPWISE_CHECK_MUTANTS, STEPWISE_CHECKS, StepwiseCheck
from resispec import get_verifier


def _shaped_node():
    """V = 8: every state the without-replacement rule reaches is declared and some rows are shaped."""
    rng = np.random.default_rng(0)
    return rng.dirichlet(np.full(8, 0.7)), rng.dirichlet(np.full(8, 0.7))


def test_the_table_names_every_check_once_and_each_declares_itself():
    assert [c.name for c in STEPWISE_CHECKS] == ["declared_steps", "coupling"]
    for c in STEPWISE_CHECKS:
        assert isinstance(c, StepwiseCheck) and c.detects and c.mutant in STEPWISE_CHECK_MUTANTS, c


def test_an_exact_rule_passes_and_records_the_checks_that_apply():
    p, q = _shaped_node()
    cert = certify_stepwise(get_verifier("resispec", drafting="without_replacement"), p, q, 3, n=400, seed=0)
    assert cert.passed and cert.checks == {"declared_steps": 1.0}, cert.checks
    assert cert.skipped == {}


@pytest.mark.parametrize("check", STEPWISE_CHECKS, ids=repr)
def test_every_check_catches_its_mutant(check):
    p, q = _shaped_node()
    cert = certify_stepwise(STEPWISE_CHECK_MUTANTS[check.mutant](), p, q, 3, tv=0.02, seed=0)
    assert cert.verdict == "FAIL", cert.summary()
    assert cert.checks[check.name] < 1e-3, (check.name, cert.checks)


def test_the_event_check_twins_are_inverses_and_plan_the_route():
    """detectable_tv(n) = 1 - (1 - power)^(1/n) is what the certificate states; n_for_tv is its inverse; the
    route's planner (draws_for_tv) is the check's n at power max(power, 1 - alpha)."""
    for n in (10, 1_000, 123_456):
        tv = DECLARED_STEPS.detectable_tv(n)
        assert DECLARED_STEPS.n_for_tv(tv * (1 + 1e-9)) <= n <= DECLARED_STEPS.n_for_tv(tv * (1 - 1e-9))
    assert draws_for_tv(0.02, alpha=1e-3, power=0.99) == DECLARED_STEPS.n_for_tv(0.02, power=1 - 1e-3)
    assert draws_for_tv(0.02, alpha=0.1, power=0.99) == DECLARED_STEPS.n_for_tv(0.02, power=0.99)
    p, q = _shaped_node()
    cert = certify_stepwise(get_verifier("resispec", drafting="without_replacement"), p, q, 2, n=500, seed=1)
    assert math.isclose(cert.detectable_tv, DECLARED_STEPS.detectable_tv(500))


def test_a_mismatch_with_the_declared_law_is_not_called_biased():
    """own_coins: verify ignores its uniforms, so it mismatches its declared chain draw by draw; the coupling law
    check decides (a fixed generator makes its law given the candidates degenerate: caught)."""
    p, q = _shaped_node()
    cert = certify_stepwise(STEPWISE_CHECK_MUTANTS["own_coins"](), p, q, 3, tv=0.02, seed=0)
    assert cert.mismatches and not cert.defects and "coupling" in cert.checks
