"""Coupled certification of a depth-2 tree (one set of coins per node): positional bugs show at their depth."""

import asyncio

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

    cert = certify_coupled_tree(Flat(), "rrs", P0, Q0, P1, Q1, K, n=10)   # the subject misbehaved: a FAIL
    assert not cert.passed and "FAIL (subject error)" in cert.verdict and "shape" in cert.verdict

    class Raises:
        def verify_tree(self, *args, **coins):
            raise asyncio.CancelledError("from the kernel")

    cert = certify_coupled_tree(Raises(), "rrs", P0, Q0, P1, Q1, K, n=10)
    assert not cert.passed and "Raises.verify_tree" in cert.verdict and "CancelledError" in cert.verdict
    with pytest.raises(ValueError, match="p_child"):
        certify_coupled_tree(ReferenceTreeKernel(get_verifier("rrs")), "rrs", P0, Q0, P1[:1], Q1[:1], K, n=10)


# ---- the SGLang / FlashInfer tree layout, and batches of distinct trees

R = 3
PR, QR = rng.dirichlet(np.ones(V), size=R), rng.dirichlet(np.ones(V), size=R)
PC, QC = rng.dirichlet(np.ones(V), size=(R, K)), rng.dirichlet(np.ones(V), size=(R, K))


def test_sglang_layout_arrays_match_the_documented_mapping():
    from exactness.coupled.tree import sglang_tree

    k, B = 2, 2
    c0, c1 = np.array([[3, 5], [1, 2]]), np.array([[[7, 8], [9, 10]], [[0, 4], [6, 11]]])
    t = sglang_tree(np.broadcast_to(P0, (B, V)), np.broadcast_to(Q0, (B, V)), np.broadcast_to(P1, (B, k, V)),
                    np.broadcast_to(Q1, (B, k, V)), c0, c1)
    assert t["candidates"][0].tolist() == [-1, 3, 5, 7, 8, 9, 10]
    assert t["retrive_next_token"][0].tolist() == [1, 3, 5, -1, -1, -1, -1]
    assert t["retrive_next_sibling"][0].tolist() == [-1, 2, -1, 4, -1, 6, -1]
    assert t["retrive_index"][1].tolist() == list(range(7, 14))
    assert np.array_equal(t["target_probs"][1, 0], P0) and np.array_equal(t["target_probs"][1, 2], P1[1])
    assert np.array_equal(t["draft_probs"][0, 1], Q1[0]) and np.allclose(t["target_probs"][0, 3:], 1 / V)


@pytest.mark.parametrize("name", ["rrs", "sps", "resispec", "target_only"])
@pytest.mark.parametrize("convention", ["resispec", "sglang"])
def test_rule_walked_over_distinct_trees_passes_in_both_layouts(name, convention):
    cert = certify_coupled_tree(ReferenceTreeKernel(get_verifier(name), convention), name, PR, QR, PC, QC, K,
                                n=3000, convention=convention)
    assert cert.passed and cert.mismatches == 0 and cert.convention == convention, cert.verdict


def test_a_kernel_in_the_other_layout_is_an_error_never_a_pass():
    cert = certify_coupled_tree(ReferenceTreeKernel(get_verifier("rrs")), "rrs", P0, Q0, P1, Q1, K, n=100,
                                convention="sglang")      # it raises on the other layout's arguments
    assert not cert.passed and "'sglang' tree layout" in cert.verdict and "FAIL (subject error)" in cert.verdict
    with pytest.raises(ValueError, match="tree convention"):
        certify_coupled_tree(ReferenceTreeKernel(get_verifier("rrs")), "rrs", P0, Q0, P1, Q1, K, n=100,
                             convention="generator")


class RowZeroSGLang:
    """SGLang-layout kernel that reads row 0's target and draft laws for every row of the batch (row mixing)."""

    def verify_tree(self, cand, index, nxt, sib, tp, dp, *, uniform_samples, uniform_samples_for_final_sampling):
        from exactness.coupled.tree import walk_sglang

        t, a = walk_sglang(get_verifier("rrs"), cand, nxt, sib, np.broadcast_to(tp[:1], tp.shape),
                           np.broadcast_to(dp[:1], dp.shape), uniform_samples, uniform_samples_for_final_sampling)
        return VerifyResult(tokens=t, accepted=a)


class RowZeroResiSpec:
    """resispec-layout kernel that verifies every child node with row 0's child laws (row mixing at depth 2)."""

    def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
        t, a = reference_tree(get_verifier("rrs"), p0, q0, np.broadcast_to(p1[:1], p1.shape),
                              np.broadcast_to(q1[:1], q1.shape), c0, c1, uniforms)
        return VerifyResult(tokens=t, accepted=a)


@pytest.mark.parametrize("kernel,convention", [(RowZeroSGLang(), "sglang"), (RowZeroResiSpec(), "resispec")])
def test_row_mixing_shows_at_its_row(kernel, convention):
    cert = certify_coupled_tree(kernel, "rrs", PR, QR, PC, QC, K, n=3000, convention=convention)
    fm = cert.first_mismatch
    assert not cert.passed and fm["row"] != 0 and fm["row"] == fm["draw"] % R, cert.verdict
    assert f"tree row {fm['row']}" in cert.verdict
    one = certify_coupled_tree(kernel, "rrs", PR[0], QR[0], PC[0], QC[0], K, n=3000, convention=convention)
    assert one.passed                                       # exact one tree at a time: only batches show it


class SlotOneCoinSGLang:
    """SGLang-layout kernel that expands every root child with slot 1's coin (a positional bug)."""

    def verify_tree(self, cand, index, nxt, sib, tp, dp, *, uniform_samples, uniform_samples_for_final_sampling):
        from exactness.coupled.tree import walk_sglang

        us = uniform_samples.copy()
        us[:, 2:1 + K] = us[:, 1:2]
        t, a = walk_sglang(get_verifier("rrs"), cand, nxt, sib, tp, dp, us, uniform_samples_for_final_sampling)
        return VerifyResult(tokens=t, accepted=a)


def test_positional_bug_in_the_sglang_layout_shows_at_its_depth_and_slot():
    cert = certify_coupled_tree(SlotOneCoinSGLang(), "rrs", PR, QR, PC, QC, K, n=4000, convention="sglang")
    assert not cert.passed and cert.first_mismatch["depth"] == 2 and cert.first_mismatch["slot"] == 2, cert.verdict


class _AlwaysFirst:
    """Accepts candidate 0 at both levels: grossly biased."""

    def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
        B = c0.shape[0]
        return type("R", (), {"tokens": np.stack([c0[:, 0], c1[:, 0, 0]], 1),
                              "accepted": np.zeros((B, 2), np.int64)})()


def _tree_case():
    rng = np.random.default_rng(0)
    V, k = 6, 2
    return (rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=k),
            rng.dirichlet(np.ones(V), size=k), k)


def test_too_few_coupled_paths_are_refused_not_passed():
    """Breaker (session 34): a grossly biased tree kernel passed at n = 1 ("TV <= 0.999")."""
    from exactness.coupled.tree import certify_coupled_tree

    p, q, pc, qc, k = _tree_case()
    with pytest.raises(ValueError, match="pass n >= 10"):
        certify_coupled_tree(_AlwaysFirst(), "rrs", p, q, pc, qc, k, n=3, seed=3)


def test_a_tree_kernel_that_ignores_its_coins_fails():
    from exactness.coupled.tree import certify_coupled_tree

    class OwnRandomness:
        def __init__(self):
            self.rng = np.random.default_rng(1)

        def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
            B = c0.shape[0]
            j = self.rng.integers(0, c0.shape[1], size=B)
            return type("R", (), {"tokens": np.stack([c0[np.arange(B), j], c1[np.arange(B), j, 0]], 1),
                                  "accepted": np.stack([j, np.zeros(B, np.int64)], 1)})()

    p, q, pc, qc, k = _tree_case()
    cert = certify_coupled_tree(OwnRandomness(), "rrs", p, q, pc, qc, k, n=200, seed=0)
    assert not cert.passed and "ignores the coins" in cert.verdict
