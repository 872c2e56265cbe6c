"""ResiSpec for without-replacement drafts: exactness (enumeration + Monte Carlo), optimality, mutants."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import resispec
from resispec.bench.gap import wor_acceptance_k2
from resispec.bounds import sequential_optimum
from resispec.verifiers.resispec_wor import ResiSpecWOR, wor_reserve_fixed_point
from resispec.verifiers.zero_diagonal import LeftoverPlan, rank_one_zero_diagonal, zero_diagonal_plan
from test_gap_helpers import law_pairs, pooled_chisquare

WOR = resispec.get_verifier("resispec", drafting="without_replacement")
RRS_WOR = resispec.get_verifier("rrs_wor")


def test_contract():
    assert isinstance(WOR, ResiSpecWOR)
    assert WOR.name == "resispec" and WOR.drafting == "without_replacement"


@settings(deadline=None, max_examples=60)
@given(pq=law_pairs(min_V=2, max_V=6, min_support=3), k=st.integers(1, 3))
def test_exact_law(pq, k):
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    law = resispec.exact_output_law(WOR, p, q, k)
    assert np.max(np.abs(law - p)) < 1e-12
    A = resispec.acceptance_probability(WOR, p, q, k)
    assert A <= resispec.optimal_acceptance(p, q, k, "without_replacement") + 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_optimum_k2_and_above_rrs_wor(seed):
    """k = 2: equals the sequential LP optimum with candidate-dependent residuals; k = 3: between rrs_wor and it."""
    rng = np.random.default_rng(seed)
    V = int(rng.integers(4, 8))
    a = [0.3, 1.0, 3.0][seed % 3]
    p, q = rng.dirichlet(np.full(V, a)), rng.dirichlet(np.full(V, a))
    A2 = resispec.acceptance_probability(WOR, p, q, 2)
    S2 = sequential_optimum(p, q, 2, "without_replacement")
    assert abs(A2 - S2) < 1e-7
    assert abs(wor_acceptance_k2(WOR, p, q) - A2) < 1e-12
    assert abs(wor_acceptance_k2(RRS_WOR, p, q) - resispec.acceptance_probability(RRS_WOR, p, q, 2)) < 1e-12
    A3 = resispec.acceptance_probability(WOR, p, q, 3)
    R3 = resispec.acceptance_probability(RRS_WOR, p, q, 3)
    S3 = sequential_optimum(p, q, 3, "without_replacement")
    assert R3 - 1e-12 <= A3 <= S3 + 1e-8


def test_half_the_gap_on_small_cases():
    """Mean fraction of the rrs_wor-to-sequential-optimum gap closed at k = 3 is well above one half."""
    rng = np.random.default_rng(11)
    fr = []
    while len(fr) < 8:
        V = int(rng.integers(5, 8))
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        R = resispec.acceptance_probability(RRS_WOR, p, q, 3)
        S = sequential_optimum(p, q, 3, "without_replacement")
        if S - R > 1e-6:
            fr.append((resispec.acceptance_probability(WOR, p, q, 3) - R) / (S - R))
    assert np.mean(fr) > 0.5 and min(fr) > -1e-9


@pytest.mark.parametrize("solver, k", [("fused", 3), ("fused", 4), ("reference", 3)])
def test_monte_carlo_chisquare_and_rate(solver, k):
    """Both step solvers (the compiled kernel, the numpy reference): chi-square of the emitted tokens, acceptance rate."""
    v = resispec.get_verifier("resispec", drafting="without_replacement", solver=solver)
    p = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
    q = np.array([0.05, 0.10, 0.30, 0.05, 0.25, 0.05, 0.15, 0.05])
    N = 20000
    rng = np.random.default_rng(9 + 10 * (k - 3))
    P, Q = np.tile(p, (N, 1)), np.tile(q, (N, 1))
    c = resispec.draw_candidates(Q, k, "without_replacement", rng)
    out = v.verify(P, Q, c, rng)
    assert pooled_chisquare(out.tokens, p) > 1e-4
    A = resispec.acceptance_probability(v, p, q, k)
    assert abs(out.acceptance_rate - A) <= 4 * np.sqrt(A * (1 - A) / N)


class _PeekingWOR(ResiSpecWOR):
    """Mutant: after rejecting x_i it continues from the residual of a DIFFERENT token."""

    def _chain(self, p, q, c):
        c2 = c.copy()
        return super()._chain(p, q, c2)

    def step(self, p_i, q_i):
        m, opts, pick, best = super().step(p_i, q_i)
        for o in opts:
            orig = o.residual
            o.residual = lambda x, orig=orig, V=p_i.shape[1]: orig((x + 1) % V)
        return m, opts, pick, best


def test_mutant_is_caught():
    p = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
    q = np.array([0.05, 0.10, 0.30, 0.05, 0.25, 0.05, 0.15, 0.05])
    law = resispec.exact_output_law(_PeekingWOR(solver="reference"), p, q, 2)   # the mutant patches the reference step
    assert np.max(np.abs(law - p)) > 1e-3


def test_reserve_fixed_point_bounds():
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.full(9, 0.5), size=3), rng.dirichlet(np.full(9, 0.5), size=3)
    for g in (0.0, 0.5, 1.0, 2.0):
        m = wor_reserve_fixed_point(p, q, g)
        assert np.all(m >= 0) and np.all(m <= np.minimum(p, q) + 1e-15)
    assert np.array_equal(wor_reserve_fixed_point(p, q, 0.0), np.minimum(p, q))


@settings(deadline=None, max_examples=80)
@given(V=st.integers(2, 7), seed=st.integers(0, 10_000))
def test_zero_diagonal_plans(V, seed):
    rng = np.random.default_rng(seed)
    u = rng.dirichlet(np.full(V, rng.choice([0.2, 1.0, 5.0]))) * (rng.random(V) < 0.8)
    if u.sum() == 0:
        u[0] = 1.0
    u = u / u.sum()
    e = rng.dirichlet(np.full(V, rng.choice([0.2, 1.0, 5.0])))
    hall = bool(np.all(u + e <= 1.0 + 1e-12))
    plan = zero_diagonal_plan(u[None], e[None])
    if abs(np.max(u + e) - 1.0) > 1e-9:          # away from the boundary of Hall's condition
        assert bool(plan.ok[0]) == hall
    elif plan.ok[0]:
        assert hall
    both = LeftoverPlan(u[None], e[None])
    b, ok = rank_one_zero_diagonal(u[None], e[None])
    if ok[0]:
        assert hall
    for pl, valid in ((plan, plan.ok[0]), (both, both.ok[0])):
        if not valid:
            continue
        R = np.concatenate([pl.rows(np.array([x])) for x in range(V)])
        assert np.all(R >= 0)
        assert np.max(np.abs(np.diag(R))) == 0.0
        assert np.max(np.abs(R.sum(axis=1) - u)) < 1e-12
        assert np.max(np.abs(R.sum(axis=0) - e)) < 1e-12


def test_bad_input():
    with pytest.raises(ValueError, match="scales"):
        resispec.get_verifier("resispec", drafting="without_replacement", scales=())
    with pytest.raises(ValueError, match="scales"):
        resispec.get_verifier("resispec", drafting="without_replacement", scales=(-1.0,))
    with pytest.raises(TypeError):
        resispec.get_verifier("resispec", drafting="without_replacement", scales="1")
    with pytest.raises(TypeError):
        resispec.get_verifier("resispec", drafting="without_replacement", gamma=1.0)
    with pytest.raises(ValueError, match="repeat"):
        WOR.verify(np.full(4, 0.25), np.full(4, 0.25), np.array([1, 1]), np.random.default_rng(0))
