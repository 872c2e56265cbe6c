"""The path / tree certificate's checks as objects (exactness.path_checks, issue 39 item 3): every check declares
what it detects and the planted bug it must catch, and catches it; the table is what certify_path runs, in its order
(the design twins of every check of every route: tests/test_node_checks.py)."""

import numpy as np
import pytest

from exactness.path_checks import PATH_CHECK_MUTANTS, PATH_CHECKS, PathCheck
from exactness.pathlevel import certify_path
from resispec.pathlevel import get_path_verifier
from simulators.autoregressive import MarkovPair

PAIR = MarkovPair.random(np.random.default_rng(1), 3, noise=2.0, scale=2.0)


def test_the_table_names_every_check_once_and_each_declares_itself():
    names = [c.name for c in PATH_CHECKS]
    assert names == ["horizon", "acceptance_bound", "plan_sampler", "exact_bound", "exact_law"]
    for c in PATH_CHECKS:
        assert isinstance(c, PathCheck) and c.detects and c.mutant in PATH_CHECK_MUTANTS, c
    # the sampled checks come first: Holm is over them, a deterministic FAIL overrides it
    det = [c.deterministic for c in PATH_CHECKS]
    assert det == sorted(det)


def test_an_exact_rule_passes_every_check_in_the_table():
    cert = certify_path(get_path_verifier("block"), PAIR, 2, n=2000, seed=0)
    assert cert.passed and list(cert.checks) == [c.name for c in PATH_CHECKS], cert.summary()


@pytest.mark.parametrize("check", PATH_CHECKS, ids=repr)
def test_every_check_catches_its_mutant(check):
    cert = certify_path(PATH_CHECK_MUTANTS[check.mutant](), PAIR, 2, n=4000, seed=1)
    assert not cert.passed, cert.summary()
    assert cert.checks[check.name] < 1e-3, (check.name, cert.checks)
