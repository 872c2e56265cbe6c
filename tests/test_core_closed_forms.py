"""Closed forms and optimality: rrs chain, kseq, ResiSpec k=2 vs the LP, alpha* vs the LP."""

import numpy as np
import pytest

import resispec
from resispec.bench.accept import target_only_acceptance_iid
from resispec.bounds import optimal_acceptance_lp, sequential_optimum_iid
from resispec.verifiers.kseq import kseq_rho


def _cases(n, V, seed, conc=1.0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        p = rng.dirichlet(np.full(V, conc))
        q = rng.dirichlet(np.full(V, conc))
        yield p, q


def test_rrs_chain_formula():
    """A = sum_i prod_{j<i}(1 - beta_j) beta_i, beta_i = sum min(p_i, q), p_{i+1} = norm((p_i - q)_+)."""
    v = resispec.get_verifier("rrs")
    for p, q in _cases(20, 5, 0, conc=0.5):
        for k in (1, 2, 3, 4):
            A, reach, p_i = 0.0, 1.0, p.copy()
            for _ in range(k):
                beta = np.minimum(p_i, q).sum()
                A += reach * beta
                reach *= 1.0 - beta
                r = np.maximum(p_i - q, 0.0)
                if r.sum() > 0:
                    p_i = r / r.sum()
            enum = resispec.acceptance_probability(v, p, q, k, drafting="iid")     # by enumeration
            fast = resispec.acceptance_probability(v, p, q, k)                     # step acceptances
            assert abs(enum - A) < 1e-12 and abs(fast - A) < 1e-12


def test_kseq_acceptance_closed_form():
    """kseq acceptance = 1 - (1 - beta)^k, beta = sum min(q, p / rho)."""
    v = resispec.get_verifier("kseq")
    for p, q in _cases(20, 4, 1):
        for k in (1, 2, 3, 5):
            rho, beta = kseq_rho(p[None], q[None], k)
            assert 1.0 <= rho[0] <= k
            assert (1 - (1 - beta[0]) ** k) / beta[0] <= rho[0] + 1e-12
            closed = 1.0 - (1.0 - beta[0]) ** k
            assert abs(resispec.acceptance_probability(v, p, q, k, drafting="iid") - closed) < 1e-12


def test_resispec_k2_is_the_sequential_lp_optimum():
    v = resispec.get_verifier("resispec")
    for V, conc, seed in ((4, 1.0, 2), (12, 0.3, 3), (50, 1.0, 4)):
        for p, q in _cases(8, V, seed, conc):
            lp = sequential_optimum_iid(p, q, 2)
            assert abs(resispec.acceptance_probability(v, p, q, 2) - lp) < 1e-9


def test_sequential_lp_bounds_every_iid_verifier():
    """The best sequential verifier is >= every sequential verifier and <= alpha*."""
    for p, q in _cases(6, 30, 5, 0.5):
        for k in (3, 4):
            lp = sequential_optimum_iid(p, q, k)
            assert lp <= resispec.optimal_acceptance(p, q, k) + 1e-9
            for name in ("rrs", "kseq", "resispec", "sps"):
                assert resispec.acceptance_probability(resispec.get_verifier(name), p, q, k) <= lp + 1e-9


@pytest.mark.parametrize("drafting", ["iid", "without_replacement"])
def test_alpha_star_sort_equals_coupling_lp(drafting):
    for p, q in _cases(10, 4, 6, 0.7):
        for k in (1, 2, 3):
            lp = optimal_acceptance_lp(p, q, k, drafting)
            assert abs(resispec.optimal_acceptance(p, q, k, drafting) - lp) < 1e-9


def test_alpha_star_with_ties_and_zeros_equals_lp():
    cases = [([0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25]), ([0.2, 0.2, 0.2, 0.4], [0.1, 0.1, 0.1, 0.7]),
             ([1, 0, 0], [0, 0.5, 0.5]), ([0.3, 0.3, 0.4], [0.3, 0.3, 0.4])]
    for p, q in cases:
        for k in (1, 2, 3):
            assert abs(resispec.optimal_acceptance(p, q, k) - optimal_acceptance_lp(p, q, k)) < 1e-9


def test_acceptance_never_exceeds_alpha_star_batch():
    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.full(200, 0.2), size=16)
    Q = rng.dirichlet(np.full(200, 0.2), size=16)
    for k in (2, 4, 8):
        alpha = resispec.optimal_acceptance(P, Q, k)
        for name in ("sps", "rrs", "kseq", "resispec"):
            v = resispec.get_verifier(name)
            acc = np.array([resispec.acceptance_probability(v, P[b], Q[b], k) for b in range(16)])
            assert np.all(acc <= alpha + 1e-12), name
        acc = target_only_acceptance_iid(P, Q, k)
        assert np.all(acc <= alpha + 1e-12)


def test_target_only_closed_form_matches_enumeration():
    v = resispec.get_verifier("target_only")
    for p, q in _cases(10, 5, 8, 0.5):
        for k in (1, 2, 3):
            assert abs(target_only_acceptance_iid(p, q, k) - resispec.acceptance_probability(v, p, q, k)) < 1e-12
