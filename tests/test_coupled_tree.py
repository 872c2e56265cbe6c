"""Coupled certification of a depth-2 tree (one set of coins per node): positional bugs show at their depth."""

import numpy as np
import pytest

from exactness.coupled.tree import ReferenceTreeKernel, certify_coupled_tree, reference_tree
from resispec import get_verifier
from resispec.verifiers.base import VerifyResult

rng = np.random.default_rng(2)
V, K = 12, 2
P0, Q0 = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
P1, Q1 = rng.dirichlet(np.ones(V), size=K), rng.dirichlet(np.ones(V), size=K)


@pytest.mark.parametrize("name", ["rrs", "sps", "resispec", "kseq"])
def test_rule_walked_over_the_tree_passes(name):
    cert = certify_coupled_tree(ReferenceTreeKernel(get_verifier(name)), name, P0, Q0, P1, Q1, K, n=4000)
    assert cert.passed and cert.mismatches == 0


class WrongChildCoins:
    """Verifies every child with slot 1's coins (a positional bug in the coin layout)."""

    def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
        u = uniforms.copy()
        u[:, 2:] = u[:, 1:2]
        t, a = reference_tree(get_verifier("rrs"), p0, q0, p1, q1, c0, c1, u)
        return VerifyResult(tokens=t, accepted=a)


def test_positional_bug_shows_at_depth_two():
    cert = certify_coupled_tree(WrongChildCoins(), "rrs", P0, Q0, P1, Q1, K, n=4000)
    assert not cert.passed and cert.first_mismatch["depth"] == 2


def test_bad_tree_kernels():
    with pytest.raises(TypeError, match="verify_tree"):
        certify_coupled_tree(get_verifier("rrs"), "rrs", P0, Q0, P1, Q1, K, n=10)

    class Flat:
        def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
            return VerifyResult(tokens=c0[:, 0], accepted=np.zeros(len(c0), np.int64))

    with pytest.raises(ValueError, match="shape"):
        certify_coupled_tree(Flat(), "rrs", P0, Q0, P1, Q1, K, n=10)
    with pytest.raises(ValueError, match="p_child"):
        certify_coupled_tree(ReferenceTreeKernel(get_verifier("rrs")), "rrs", P0, Q0, P1[:1], Q1[:1], K, n=10)
