"""Look-ahead reserve (iid, resispec reserve="lookahead"): exactness, optimality, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import resispec
from resispec.bounds import sequential_optimum, sequential_optimum_iid
from resispec.verifiers.lookahead import lookahead_schedule
from test_gap_helpers import law_pairs, pooled_chisquare

LA = resispec.get_verifier("resispec", reserve="lookahead")


@settings(deadline=None, max_examples=60)
@given(pq=law_pairs(max_V=5), k=st.integers(1, 4))
def test_exact_law(pq, k):
    p, q = pq
    law = resispec.exact_output_law(LA, p, q, k)
    assert np.max(np.abs(law - p)) < 1e-12
    A = resispec.acceptance_probability(LA, p, q, k)
    assert A <= resispec.optimal_acceptance(p, q, k) + 1e-12


def test_enumerated_acceptance_matches_step_formula():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    a_steps = resispec.acceptance_probability(LA, p, q, 3)
    a_enum = resispec.acceptance_probability(LA, p, q, 3, drafting="iid")
    assert abs(a_steps - a_enum) < 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_matches_sequential_optimum(seed):
    """The look-ahead rule attains the sequential LP optimum (to solver precision) and never exceeds it."""
    rng = np.random.default_rng(seed)
    V = int(rng.integers(4, 12))
    a = [0.3, 1.0, 3.0][seed % 3]
    p, q = rng.dirichlet(np.full(V, a)), rng.dirichlet(np.full(V, a))
    for k in (2, 3, 5):
        A = resispec.acceptance_probability(LA, p, q, k)
        lp = sequential_optimum_iid(p, q, k)
        assert A <= lp + 1e-8
        assert A >= lp - 1e-6
        assert A >= resispec.acceptance_probability(resispec.get_verifier("rrs"), p, q, k) - 1e-12


def test_k2_equals_myopic():
    rng = np.random.default_rng(1)
    my = resispec.get_verifier("resispec")
    for _ in range(5):
        p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
        assert abs(resispec.acceptance_probability(LA, p, q, 2) - resispec.acceptance_probability(my, p, q, 2)) < 1e-10


def test_schedule_is_consistent():
    """R_1 = 1, R_i non-increasing, and the rule's acceptance is phi(L_0)."""
    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(40))[None], rng.dirichlet(np.ones(40))[None]
    L = lookahead_schedule(p, q, 6)[0]
    R = -np.diff(L)
    assert abs(R[0] - 1.0) < 1e-9
    assert np.all(np.diff(R) <= 1e-12)
    phi = np.minimum(p, q * L[0]).sum()
    assert abs(resispec.acceptance_probability(LA, p[0], q[0], 6) - phi) < 1e-9


def test_monte_carlo_chisquare_and_rate():
    p = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
    q = np.array([0.05, 0.10, 0.30, 0.05, 0.25, 0.05, 0.15, 0.05])
    N, k = 20000, 4
    rng = np.random.default_rng(7)
    P, Q = np.tile(p, (N, 1)), np.tile(q, (N, 1))
    c = resispec.draw_candidates(Q, k, "iid", rng)
    out = LA.verify(P, Q, c, rng)
    assert pooled_chisquare(out.tokens, p) > 1e-4
    A = resispec.acceptance_probability(LA, p, q, k)
    assert abs(out.acceptance_rate - A) <= 4 * np.sqrt(A * (1 - A) / N)


def test_iid_sequential_lp_agrees_with_history_lp():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(4)), rng.dirichlet(np.ones(4))
    for k in (2, 3):
        assert abs(sequential_optimum(p, q, k, "iid") - sequential_optimum_iid(p, q, k)) < 1e-8


def test_registry_alias_and_bad_input():
    v = resispec.get_verifier("resispec_lookahead")
    assert v.options()["reserve"] == "lookahead"
    with pytest.raises(ValueError, match="reserve"):
        resispec.get_verifier("resispec", reserve="far")
    with pytest.raises(ValueError, match="proxy='draft'"):
        resispec.get_verifier("resispec", reserve="lookahead", proxy="tempered")
    with pytest.raises(ValueError, match="drafting"):
        resispec.get_verifier("resispec", drafting="sideways")


def _resolved_steps(v, p, q, k):
    """Step acceptances ``beta`` (B, k) with the reserve solved afresh at every candidate (no walk plan)."""
    from resispec.verifiers.base import reject_update

    p_i, beta = p, np.empty((p.shape[0], k))
    empty = np.zeros((p.shape[0], 0), dtype=np.int64)
    for i in range(k):
        m = v.accepted_mass(i, k, p_i, q, q=q, rejected=empty)   # outside a walk: solved afresh
        beta[:, i] = m.sum(axis=1)
        p_i = reject_update(p_i, m)
    return beta


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(3, 200), k=st.integers(2, 8),
       spread=st.floats(0.2, 4.0), zeros=st.booleans())
def test_one_solve_a_node_matches_solving_at_every_candidate(seed, V, k, spread, zeros):
    """The walk reuses the first step's schedule (dynamic consistency, ``planned_step``): the acceptance
    equals the per-candidate re-solve's to round-off, and the emitted law stays ``p``."""
    rng = np.random.default_rng(seed)
    lp = rng.normal(size=(3, V)) * spread
    p = np.exp(lp - lp.max(1, keepdims=True))
    lq = lp + rng.normal(size=(3, V))
    q = np.exp(lq - lq.max(1, keepdims=True))
    if zeros:
        q[:, : V // 3] = 0.0
    p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
    planned = LA.step_acceptance(p, q, k)                          # inside a walk: one solve
    fresh = _resolved_steps(LA, p, q, k)
    acc = lambda b: 1.0 - np.prod(1.0 - b, axis=1)                  # noqa: E731
    assert np.max(np.abs(acc(planned) - acc(fresh))) < 1e-9
    assert np.max(np.abs(planned[:, 0] - fresh[:, 0])) < 1e-12     # the first step is the same solve
    if V <= 6 and k <= 3:
        law = resispec.exact_output_law(LA, p[0], q[0], k)
        assert np.max(np.abs(law - p[0])) < 1e-12


def test_one_solve_a_node_only_at_gamma_one_and_the_same_in_chain_and_closed_form():
    """gamma != 1 keeps solving at every candidate; ``chain`` and the closed form walk with the same plan."""
    rng = np.random.default_rng(11)
    p, q = rng.dirichlet(np.full(50, 0.3), size=2), rng.dirichlet(np.full(50, 0.3), size=2)
    half = resispec.get_verifier("resispec", reserve="lookahead", gamma=0.5)
    assert np.array_equal(half.step_acceptance(p, q, 5), _resolved_steps(half, p, q, 5))
    c = rng.integers(0, 50, size=(2, 5))
    m, _, _ = LA.masses(p, q, c)                                   # (B, k, V), the walk's accepted masses
    assert np.allclose(m.sum(axis=2), LA.step_acceptance(p, q, 5), atol=1e-15)
    rows, steps = np.arange(2)[:, None], np.arange(5)[None, :]
    a_expect = np.clip(m[rows, steps, c] / q[rows, c], 0.0, 1.0)   # a_i = m_i(x_i) / q(x_i)
    assert np.allclose(LA.chain(p, q, c).accept_probs, a_expect, atol=1e-15)


@settings(deadline=None, max_examples=40)
@given(pq=law_pairs(max_V=8), k=st.integers(2, 6))
def test_lookahead_accepts_at_least_the_myopic_rule(pq, k):
    """Issue 13: the look-ahead rule's acceptance is never below the myopic fixed point's."""
    p, q = pq
    my = resispec.get_verifier("resispec", reserve="fixed_point")
    assert resispec.acceptance_probability(LA, p, q, k) >= resispec.acceptance_probability(my, p, q, k) - 1e-9
