"""The node certificate's checks as objects (exactness.node_checks, issue 39 item 3): every check declares what it
detects, its design twins and the planted bug it must catch, and catches it."""

import numpy as np
import pytest

from exactness import certify_verifier
from exactness.decoder_checks import DECODER_CHECKS
from exactness.path_checks import PATH_CHECKS
from exactness.stepwise_checks import STEPWISE_CHECKS
from exactness.node_checks import NODE_CHECKS, NodeCheck
from exactness.node_mutants import NODE_MUTANTS

RNG = np.random.default_rng(5)
P, Q = RNG.dirichlet(np.ones(5)), RNG.dirichlet(np.ones(5))


def test_the_table_names_every_check_once_and_each_declares_itself():
    names = [n for c in NODE_CHECKS for n in c.names]
    assert len(names) == len(set(names))
    assert {"exact_law", "joint", "accepted_count", "residual", "batch_sizes", "acceptance_bound", "determinism",
            "batched", "batched_rows", "small_batches", "tree_bonus", "tree_two_level"} == set(names)
    for c in NODE_CHECKS:
        assert isinstance(c, NodeCheck) and c.detects and c.mutant in NODE_MUTANTS, c


@pytest.mark.parametrize("check", NODE_CHECKS + DECODER_CHECKS + PATH_CHECKS + STEPWISE_CHECKS, ids=repr)
def test_design_twins_agree(check):
    """Every check of the node, the decoder and the path / tree certificate: detectable_tv falls with n, and
    n_for_tv(detectable_tv(n)) gives back about n (deterministic: 0 and 1)."""
    if check.deterministic:
        assert check.detectable_tv(1000, 4) == 0.0 and check.n_for_tv(0.01, 4) == 1
        return
    a, b = check.detectable_tv(1_000, 4), check.detectable_tv(100_000, 4)
    assert 0 < b < a < 1
    assert abs(check.n_for_tv(a, 4) - 1_000) <= 10


@pytest.mark.parametrize("check", NODE_CHECKS, ids=repr)
def test_every_check_catches_its_mutant(check):
    make, k = NODE_MUTANTS[check.mutant]
    cert = certify_verifier(make(), P, Q, k, n=20_000, seed=1)
    failed = set(cert.failed_checks())
    assert not cert.passed and failed & set(check.names), (check.mutant, cert.checks, cert.skipped)
