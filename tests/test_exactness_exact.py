"""Exact joint law, tree law and the fast (table) Monte Carlo path."""

import numpy as np
import pytest
from hypothesis import given, settings

import resispec
from exactness.exact import certify_exact, joint_law
from exactness.sampling import NodeSampler, accept_table
from exactness.strategies import cells, distribution_pairs
from exactness.tree import default_tree, exact_pair_law

IID = ["sps", "rrs", "kseq", "resispec", "target_only"]


@settings(deadline=None, max_examples=30)
@given(cells(max_V=5, max_k=3))
def test_exact_joint_marginal_is_p(cell):
    p, q, k = cell
    for name in IID:
        J = joint_law(resispec.get_verifier(name), p, q, k)
        assert J.shape == (k + 1, p.size)
        assert np.abs(J.sum(axis=0) - p).max() < 1e-12, name
        assert J.sum() == pytest.approx(1.0, abs=1e-12)


@settings(deadline=None, max_examples=20)
@given(cells(max_V=5, max_k=3, drafting="without_replacement"))
def test_exact_joint_rrs_wor(cell):
    p, q, k = cell
    r = certify_exact(resispec.get_verifier("rrs_wor"), p, q, k)
    assert r.passed and r.tv < 1e-12


@settings(deadline=None, max_examples=20)
@given(distribution_pairs(max_V=6))
def test_table_equals_enumeration(pq):
    p, q = pq
    for name in ("rrs", "resispec", "kseq", "sps"):
        v = resispec.get_verifier(name)
        tab = accept_table(v, p, q, 3)
        assert tab is not None
        J_enum = joint_law(v, p, q, 3)
        a, r = tab
        reach, J_tab = 1.0, np.zeros_like(J_enum)
        for i in range(3):
            J_tab[i] = reach * q * a[i]
            reach -= J_tab[i].sum()
        J_tab[3] = reach * r
        assert np.abs(J_tab - J_enum).max() < 1e-12, name


@pytest.mark.parametrize("name", resispec.available_verifiers())
@pytest.mark.parametrize("depth", [1, 2])
def test_tree_pair_law_exact(name, depth):
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    p1, q1 = default_tree(p, q)
    law = exact_pair_law(resispec.get_verifier(name), p, q, p1, q1, 2, depth)
    assert np.abs(law - p[:, None] * p1).max() < 1e-12


def test_bonus_mutant_breaks_tree_law_only():
    from exactness.mutants import CATALOGUE

    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    p1, q1 = default_tree(p, q)
    v = CATALOGUE["bonus_from_residual"]
    assert certify_exact(v, p, q, 2).passed
    assert np.abs(exact_pair_law(v, p, q, p1, q1, 2, 1) - p[:, None] * p1).sum() > 1e-3


@pytest.mark.parametrize("name", ["sps", "rrs", "kseq", "resispec"])
def test_table_path_equals_generic_path(name):
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    v = resispec.get_verifier(name)
    fast, slow = NodeSampler(v, p, q, 4), NodeSampler(v, p, q, 4, fast=False)
    assert fast.path == "table" and slow.path == "generic"
    a, b = fast.draws(np.random.default_rng(9), 3000), slow.draws(np.random.default_rng(9), 3000)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)


def test_user_subclass_takes_generic_path():
    from resispec.verifiers.baselines import RecursiveRejection

    class Mine(RecursiveRejection):
        pass

    p = np.full(4, 0.25)
    assert NodeSampler(Mine(), p, p, 2).path == "generic"


@pytest.mark.parametrize("name", resispec.available_verifiers())
def test_joint_marginal_matches_core_exact_output_law(name):
    from exactness.mutants import CATALOGUE

    rng = np.random.default_rng(11)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    for v in (resispec.get_verifier(name), CATALOGUE["residual_is_p"], CATALOGUE["rrs_on_wor"]):
        ours = joint_law(v, p, q, 3).sum(axis=0)
        core = resispec.exact_output_law(v, p, q, 3)
        assert np.abs(ours - core).max() < 1e-12
