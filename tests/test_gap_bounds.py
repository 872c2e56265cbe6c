"""Reference optima: WOR sequential LP, alpha* for WOR drafts past enumeration."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import resispec
from resispec.analysis import _alpha_star_wor
from resispec.bench.gap import wor_acceptance_k2
from resispec.bounds import optimal_acceptance_lp, sequential_optimum
from resispec.wor_bound import alpha_star_wor
from test_gap_helpers import law_pairs


@settings(deadline=None, max_examples=40)
@given(pq=law_pairs(min_V=3, max_V=7, min_support=3), k=st.integers(2, 3))
def test_alpha_star_wor_bracket_contains_enumeration(pq, k):
    """The prefix integral brackets the all-subsets enumeration (prefix property + certified error)."""
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    exact = _alpha_star_wor(p, q, k)
    r = alpha_star_wor(p, q, k)
    assert r.lower - 1e-12 <= exact <= r.upper + 1e-12
    # the documented guarantee: the estimate lies in the certified bracket, of half-width <= tol = 1e-4
    # (the k >= 3 pruned grid puts its points where the bracket is widest, so the mid-point is not always
    # within 1e-6 of the exact value: p = (0, 0, 0, 1), q uniform, k = 3 gave 0.74996 for 0.75)
    assert r.lower - 1e-12 <= r.statistic <= r.upper + 1e-12
    assert abs(r.statistic - exact) <= 2 * r.error + 1e-12
    assert r.error <= 1e-4 + 1e-15


def test_alpha_star_wor_agrees_with_coupling_lp():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    r = alpha_star_wor(p, q, 2)
    lp = optimal_acceptance_lp(p, q, 2, "without_replacement")
    assert r.lower - 1e-8 <= lp <= r.upper + 1e-8


def test_optimal_acceptance_wor_past_enumeration():
    rng = np.random.default_rng(1)
    V = 30
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    a = resispec.optimal_acceptance(p, q, 2, "without_replacement")
    r = alpha_star_wor(p, q, 2)
    assert r.lower <= a <= r.upper
    wor = resispec.get_verifier("resispec", drafting="without_replacement")
    A_res = wor_acceptance_k2(wor, p, q)
    A_rrs = wor_acceptance_k2(resispec.get_verifier("rrs_wor"), p, q)
    assert A_rrs - 1e-12 <= A_res <= r.upper + 1e-12
    # without replacement never does worse than iid here
    assert a >= resispec.optimal_acceptance(p, q, 2) - 1e-4


@pytest.mark.parametrize("seed", range(4))
def test_sequential_optimum_wor_sandwich(seed):
    rng = np.random.default_rng(seed)
    V = int(rng.integers(4, 7))
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    for k in (2, 3):
        S = sequential_optimum(p, q, k, "without_replacement")
        R = resispec.acceptance_probability(resispec.get_verifier("rrs_wor"), p, q, k)
        a = resispec.optimal_acceptance(p, q, k, "without_replacement")
        assert R - 1e-9 <= S <= a + 1e-9


def test_sequential_optimum_details_and_k1():
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.2, 0.6])
    val, det = sequential_optimum(p, q, 2, "without_replacement", return_details=True)
    assert det["histories"][0] == () and det["M"].shape[1] == 3
    assert abs(det["M"].sum() - val) < 1e-9
    assert abs(sequential_optimum(p, q, 1, "without_replacement") - np.minimum(p, q).sum()) < 1e-9


def test_bad_input():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="exceeds the draft support"):
        sequential_optimum(p, q, 3, "without_replacement")
    with pytest.raises(ValueError, match="exceeds the draft support"):
        alpha_star_wor(p, q, 3)
    with pytest.raises(ValueError, match="tol"):
        alpha_star_wor(p, q, 2, tol=0.0)
    with pytest.raises(ValueError, match="variables"):
        sequential_optimum(np.full(40, 1 / 40), np.full(40, 1 / 40), 4, "without_replacement")
    with pytest.raises(ValueError, match="drafting"):
        sequential_optimum(p, q, 2, "sideways")


def test_lp_retries_another_highs_method_after_a_solve_error(monkeypatch):
    """HiGHS's default choice can stop with status 4 ("Solve error"); the bounds retry dual simplex, then IPM."""
    import resispec.bounds as B

    calls, real = [], B.linprog

    def flaky(c, method, **kw):
        calls.append(method)
        res = real(c, method=method, **kw)
        if method == "highs":
            res.status, res.message = 4, "Solve error (simulated)"
        return res

    monkeypatch.setattr(B, "linprog", flaky)
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    val = B.sequential_optimum_iid(p, q, 2)
    monkeypatch.setattr(B, "linprog", real)
    assert calls[:2] == ["highs", "highs-ds"] and abs(val - B.sequential_optimum_iid(p, q, 2)) < 1e-9
