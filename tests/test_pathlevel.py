"""Path-level verifiers (``resispec.pathlevel``): exactness by enumeration, Monte Carlo, planted bugs,
expected accepted length against token-wise verification, and the LP bound over all exact rules.

What each check can detect is said in its docstring; ``docs/pathlevel.md`` has the proof.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resispec
from exactness.chain import block_weights as chain_block_weights
from exactness.path_mutants import PATH_MUTANTS
from exactness.pathlevel import certify_path
from resispec.pathlevel import (analyse_path, available_path_verifiers, check_path, get_path_verifier,
                                optimal_accepted)
from resispec.pathlevel.block import stop_law
from simulators.autoregressive import MarkovPair
from simulators.trees import block_efficiency

RULES = ("block", "token")


def _pair(seed, V, noise=1.0, scale=3.0, temperature=1.0):
    return MarkovPair.random(np.random.default_rng(seed), V, noise=noise, scale=scale, temperature=temperature)


#: The pair on which every planted bug has horizon TV >= 0.04 at L = 2 (found by a scan over seeds).
MUTANT_PAIR = dict(seed=50, V=3, noise=4.0, scale=1.0)


def test_registry():
    assert {"block", "token"} <= set(available_path_verifiers())
    assert get_path_verifier("block").name == "block"
    with pytest.raises(ValueError, match="unknown path-level verifier 'rrs'"):
        get_path_verifier("rrs")
    with pytest.raises(TypeError, match="path-level verifier 'block'"):
        get_path_verifier("block", gamma=3)


# ------------------------------------------------------------------ exact enumeration
@pytest.mark.parametrize("name", RULES)
@pytest.mark.parametrize("V, L", [(2, 1), (2, 3), (3, 2), (3, 3), (4, 1), (4, 3)])
def test_horizon_law_is_the_target_law(name, V, L):
    """The emitted block continued by the target has the target's law of L + 1 tokens (TV < 1e-12)."""
    for seed in range(2):
        pair = _pair(100 * V + 10 * L + seed, V, noise=[0.5, 2.0][seed])
        a = analyse_path(get_path_verifier(name), pair, L, context=(seed % V,))
        assert a.tv < 1e-12, (name, V, L, seed, a.tv)
        assert abs(a.horizon_law.sum() - 1) < 1e-12 and 0 <= a.expected_accepted <= L


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31), V=st.integers(2, 4), L=st.integers(1, 3),
       noise=st.floats(0.0, 4.0), temperature=st.floats(0.3, 2.0))
def test_block_exact_and_never_below_tokenwise(seed, V, L, noise, temperature):
    """Hypothesis pairs: block is exact and E[tau] (block) >= E[tau] (token-wise), Sun et al. Theorem 1."""
    pair = _pair(seed, V, noise=noise, temperature=temperature)
    b = analyse_path(get_path_verifier("block"), pair, L)
    t = analyse_path(get_path_verifier("token"), pair, L)
    assert b.tv < 1e-12 and t.tv < 1e-12
    assert b.expected_accepted >= t.expected_accepted - 1e-12


def test_identical_models_accept_everything():
    P = _pair(3, 3).P
    pair = MarkovPair(P, P)
    for name in RULES:
        assert analyse_path(get_path_verifier(name), pair, 3).expected_accepted == pytest.approx(3.0, abs=1e-12)


def test_block_stop_law_matches_the_exactness_reference_kernel():
    """Independent implementation: exactness.chain.block_weights (the decoder reference) gives the same
    weights and backward hazards, so the same P(tau = i | d); catches a wrong hazard or weight formula."""
    rng = np.random.default_rng(7)
    ver = get_path_verifier("block")
    for L in (1, 2, 4):
        p = rng.dirichlet(np.ones(5), size=L + 1)
        q = rng.dirichlet(np.ones(5), size=L)
        d = np.array([rng.choice(5, p=q[i]) for i in range(L)])
        w, h = chain_block_weights(p[None], q[None], d[None])
        h = h[0].copy()
        h[0] = 1.0
        np.testing.assert_allclose(ver.plan(p, q, d).stop, stop_law(h), atol=1e-15)
        exc = np.maximum(w[0, :L, None] * p[:L] - q, 0.0)
        plan = ver.plan(p, q, d)
        for i in range(L):
            if exc[i].sum() > 1e-12:
                np.testing.assert_allclose(plan.laws[i], exc[i] / exc[i].sum(), atol=1e-15)
        np.testing.assert_array_equal(plan.laws[L], p[L])


# ------------------------------------------------------------------ planted bugs
@pytest.mark.parametrize("name", sorted(PATH_MUTANTS))
def test_mutants_are_biased_exactly(name):
    """Enumeration sees each planted bug (horizon TV >= 0.04 on MUTANT_PAIR at L = 2)."""
    assert analyse_path(PATH_MUTANTS[name](), _pair(**MUTANT_PAIR), 2).tv > 0.04


@pytest.mark.parametrize("name", list(RULES) + sorted(PATH_MUTANTS))
def test_monte_carlo_certificate(name):
    """The sampled path (drafting, verify's inverse-CDF draws, continuation) passes for the exact rules
    and flags every planted bug at n = 3000 (alpha = 1e-3)."""
    ver = get_path_verifier(name) if name in RULES else PATH_MUTANTS[name]()
    cert = certify_path(ver, _pair(**MUTANT_PAIR), 2, n=3000, seed=1)
    assert cert.passed == (name in RULES), (name, cert.pvalue)


# ------------------------------------------------------------------ the LP bound
@pytest.mark.parametrize("seed, V, L", [(0, 2, 1), (1, 3, 2), (2, 4, 2), (3, 3, 3), (4, 2, 3)])
def test_block_attains_the_lp_bound_on_chains(seed, V, L):
    """Over ALL exact rules (LP over couplings), block verification is optimal for one drafted chain."""
    pair = _pair(seed, V, noise=1.5)
    lp = optimal_accepted(pair, (1,) * L).expected_accepted
    assert analyse_path(get_path_verifier("block"), pair, L).expected_accepted == pytest.approx(lp, abs=1e-8)


def test_lp_at_depth_one_is_the_node_optimum():
    """At one depth the LP is the optimal multi-draft acceptance alpha* (resispec.optimal_acceptance)."""
    pair = _pair(0, 3)
    for k in (1, 2):
        assert optimal_accepted(pair, (k,)).expected_accepted == pytest.approx(
            resispec.optimal_acceptance(pair.p0, pair.q0, k), abs=1e-9)


def test_lp_bounds_the_tree_walk():
    """On trees the LP bounds the node-level rrs tree walk, and a wider tree can only help."""
    pair = _pair(1, 3)
    chain = optimal_accepted(pair, "1,1").expected_accepted
    tree = optimal_accepted(pair, "2,1").expected_accepted
    walk = block_efficiency(resispec.get_verifier("rrs"), "2,1", pair).block_efficiency - 1.0
    assert tree >= chain - 1e-9 and tree >= walk - 1e-9


# ------------------------------------------------------------------ inputs
def _good(L=2, V=3):
    rng = np.random.default_rng(0)
    return rng.dirichlet(np.ones(V), size=L + 1), rng.dirichlet(np.ones(V), size=L), np.zeros(L, dtype=np.int64)


@pytest.mark.parametrize("mutate, match", [
    (lambda p, q, d: (p[:-1], q, d), "p needs L \\+ 1 = 3 rows"),
    (lambda p, q, d: (p, q, np.zeros((2, 2), dtype=np.int64)), "a tree .* is not a chain"),
    (lambda p, q, d: (p[None], q, d), "one chain"),
    (lambda p, q, d: (p[0], q, d), "one node"),
    (lambda p, q, d: (p, q[:, :2] / q[:, :2].sum(1, keepdims=True), d), "same vocabulary"),
    (lambda p, q, d: (p, q, d[:1]), "one draft per row of q"),
    (lambda p, q, d: (p, q, np.array([0, 3])), "outside the vocabulary"),
    (lambda p, q, d: (p * 2, q, d), "sums to"),
    (lambda p, q, d: (p, np.array([[1.0, 0, 0], [0, 1.0, 0]]), np.array([0, 2])), "cannot have been drawn"),
])
def test_bad_input_is_a_clear_value_error(mutate, match):
    with pytest.raises(ValueError, match=match):
        get_path_verifier("block").verify(*mutate(*_good()), np.random.default_rng(0))


def test_verify_uniforms_and_emitted():
    p, q, d = _good()
    ver = get_path_verifier("block")
    plan = ver.plan(p, q, d)
    for u in (0.001, 0.3, 0.999):
        r = ver.verify(p, q, d, uniforms=[u, 0.5])                    # inverse CDF of tau, then of the token
        assert r.accepted == int((np.cumsum(plan.stop) <= u).sum())
        assert r.token == int((np.cumsum(plan.laws[r.accepted]) <= 0.5).sum())
    assert r.emitted(d).tolist() == d[: r.accepted].tolist() + [r.token]
    assert ver.verify(p, q, d, uniforms=[0.0, 0.0]).accepted == 0
    with pytest.raises(ValueError, match="uniforms"):
        ver.verify(p, q, d, uniforms=[0.5])
    with pytest.raises(ValueError, match="rng"):
        ver.verify(p, q, d)
    with pytest.raises(TypeError, match="integer"):
        check_path(p, q, d.astype(float))
    with pytest.raises(ValueError, match="L must be an integer >= 1"):
        analyse_path(ver, _pair(0, 2), 0)


def test_paper_example_binary_context_free():
    """Sun et al. 2024 (arXiv 2403.10444) motivating example: p = (1/3, 2/3), q = (2/3, 1/3) at every
    context, L = 2: token-wise accepts 10/9 drafts per step, block 11/9, and the LP says 11/9 is the best."""
    from simulators.autoregressive import StaticPair

    pair = StaticPair(np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3]))
    assert analyse_path(get_path_verifier("token"), pair, 2).expected_accepted == pytest.approx(10 / 9, abs=1e-14)
    assert analyse_path(get_path_verifier("block"), pair, 2).expected_accepted == pytest.approx(11 / 9, abs=1e-14)
    assert optimal_accepted(pair, (1, 1)).expected_accepted == pytest.approx(11 / 9, abs=1e-9)


# ------------------------------------------------------------------ trees: traversal-style verification
from exactness.path_mutants import TREE_MUTANTS  # noqa: E402
from exactness.pathlevel import certify_tree_rule  # noqa: E402
from resispec.pathlevel import analyse_tree  # noqa: E402

TREE_MUTANT_PAIR = dict(seed=0, V=3, noise=2.0, scale=1.0)


def test_traversal_is_block_on_a_chain():
    rng = np.random.default_rng(3)
    trav, block = get_path_verifier("traversal"), get_path_verifier("block")
    for L in (1, 3):
        p, q = rng.dirichlet(np.ones(4), size=L + 1), rng.dirichlet(np.ones(4), size=L)
        d = np.array([rng.choice(4, p=q[i]) for i in range(L)])
        a, b = trav.plan(p, q, d), block.plan(p, q, d)
        np.testing.assert_allclose(a.stop, b.stop, atol=1e-15)
        np.testing.assert_allclose(a.laws, b.laws, atol=1e-15)


@pytest.mark.parametrize("seed, V, shape", [(0, 3, (2, 1)), (1, 2, (2, 2)), (2, 3, (1, 2)), (3, 2, (3, 1)),
                                            (4, 2, (2, 1, 1)), (5, 3, (3,))])
def test_traversal_exact_on_trees_and_between_rrs_and_the_lp(seed, V, shape):
    """Exact horizon law (TV < 1e-12) on iid-drafted trees; E[accepted] >= the rrs tree walk's and <= the LP."""
    pair = _pair(seed, V, noise=1.5)
    a = analyse_tree(get_path_verifier("traversal"), pair, shape)
    assert a.tv < 1e-12
    walk = block_efficiency(resispec.get_verifier("rrs"), ",".join(map(str, shape)), pair).block_efficiency - 1
    assert walk - 1e-12 <= a.expected_accepted <= optimal_accepted(pair, shape).expected_accepted + 1e-8
    if len(shape) == 1:                                 # one level: traversal is rrs
        assert a.expected_accepted == pytest.approx(walk, abs=1e-12)


@pytest.mark.parametrize("seed, V, shape", [(0, 3, (2, 1)), (1, 2, (2, 2)), (2, 3, (1, 2)), (3, 2, (3, 1)),
                                            (4, 2, (2, 1, 1)), (5, 3, (3,))])
def test_traversal_resispec_exact_and_traversal_with_rrs(seed, V, shape):
    """traversal with ResiSpec at the siblings: exact horizon law (TV < 1e-12); with the node rule rrs it IS
    traversal (same plan); at one level it is the node-level resispec walk."""
    pair = _pair(seed, V, noise=1.5)
    a = analyse_tree(get_path_verifier("traversal_resispec"), pair, shape)
    assert a.tv < 1e-12
    assert a.expected_accepted <= optimal_accepted(pair, shape).expected_accepted + 1e-8
    t = analyse_tree(get_path_verifier("traversal"), pair, shape)
    assert analyse_tree(get_path_verifier("traversal_resispec", node_rule="rrs"), pair, shape).expected_accepted \
        == pytest.approx(t.expected_accepted, abs=1e-12)
    if len(shape) == 1:
        walk = block_efficiency(resispec.get_verifier("resispec"), ",".join(map(str, shape)), pair)
        assert a.expected_accepted == pytest.approx(walk.block_efficiency - 1, abs=1e-9)


def test_traversal_resispec_beats_both_parents_on_a_wide_root():
    """Measured fact on one pair (docs/pathlevel.md section 10): above traversal and the resispec walk."""
    pair = _pair(0, 3, noise=1.5)
    a = analyse_tree(get_path_verifier("traversal_resispec"), pair, (3, 1)).expected_accepted
    walk = block_efficiency(resispec.get_verifier("resispec"), "3,1", pair).block_efficiency - 1
    assert a > analyse_tree(get_path_verifier("traversal"), pair, (3, 1)).expected_accepted + 1e-3
    assert a > walk + 1e-4


def test_analyse_tree_takes_a_shape_string():
    pair = _pair(0, 3, noise=1.5)
    v = get_path_verifier("traversal_resispec")
    assert analyse_tree(v, pair, "2,1").expected_accepted == analyse_tree(v, pair, (2, 1)).expected_accepted
    with pytest.raises(ValueError, match="malformed tree shape"):
        analyse_tree(v, pair, "2,x")


def test_traversal_resispec_bad_node_rule():
    with pytest.raises(ValueError, match="i.i.d."):
        get_path_verifier("traversal_resispec", node_rule="rrs_wor")
    with pytest.raises(ValueError, match="unknown"):
        get_path_verifier("traversal_resispec", node_rule="nope")
    from resispec.verifiers.registry import is_ours

    assert is_ours("traversal_resispec") and not is_ours("traversal")


@pytest.mark.parametrize("name", sorted(TREE_MUTANTS))
def test_tree_mutants_are_biased(name):
    assert analyse_tree(TREE_MUTANTS[name](), _pair(**TREE_MUTANT_PAIR), (2, 1)).tv > 0.1


@pytest.mark.parametrize("name", ["traversal", "traversal_resispec"] + sorted(TREE_MUTANTS))
def test_tree_monte_carlo_certificate(name):
    ver = get_path_verifier(name) if name.startswith("traversal") and name not in TREE_MUTANTS else TREE_MUTANTS[name]()
    cert = certify_tree_rule(ver, _pair(**TREE_MUTANT_PAIR), (2, 1), n=2000, seed=2)
    assert cert.passed == (name not in TREE_MUTANTS), (name, cert.pvalue)


def test_tree_bad_input():
    from resispec.pathlevel.traversal import check_tree

    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(3), size=4), rng.dirichlet(np.ones(3), size=4)
    par, tok = np.array([-1, -1, 0]), np.array([0, 1, 2])
    check_tree(p, q, par, tok)
    with pytest.raises(ValueError, match="parent must be -1"):
        check_tree(p, q, np.array([-1, 2, 0]), tok)
    with pytest.raises(ValueError, match=r"shape \(N \+ 1, V\)"):
        check_tree(p[:3], q, par, tok)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        check_tree(p, q, par, np.array([0, 1, 3]))
    q0 = q.copy()
    q0[0] = [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="cannot have\\s+been drawn"):
        check_tree(p, q0, par, tok)
    with pytest.raises(TypeError, match="no plan_tree"):
        analyse_tree(get_path_verifier("block"), _pair(0, 2), (2,))
