import numpy as np
import pytest
from scipy.stats import chisquare

import resispec
from resispec.trees import TreeShape
from simulators.acceptance import acceptance_mass, node_split
from simulators.autoregressive import MarkovPair, StaticPair, as_autoregressive
from simulators.trees import block_efficiency, block_efficiency_iid, decode_tree, exact_two_token_law

NAMES = resispec.available_verifiers()


def _shape(v, spec):
    d = "without_replacement" if v.drafting == "without_replacement" else "iid"
    return TreeShape.parse(spec, d)


def _chi2_pvalue(obs, probs):
    """Pearson chi-square p-value, pooling cells with expected count < 5 into one."""
    exp = probs.ravel() * obs.sum()
    small = exp < 5
    o = np.r_[obs[~small], obs[small].sum()] if small.any() else obs
    e = np.r_[exp[~small], exp[small].sum()] if small.any() else exp
    return chisquare(o, e * o.sum() / e.sum()).pvalue


def _product(pair, ctx):
    p1, _ = pair.laws([ctx])
    p2, _ = pair.laws([ctx + (y,) for y in range(pair.vocab_size)])
    return p1[0][:, None] * p2


@pytest.fixture(scope="module")
def markov():
    return MarkovPair.random(np.random.default_rng(5), 4, noise=1.5)


@pytest.mark.parametrize("name", NAMES)
def test_acceptance_mass_closed_form_matches_enumeration(name):
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6), size=2), rng.dirichlet(np.ones(6), size=2)
    v = resispec.get_verifier(name)
    for k in (1, 3):
        a = acceptance_mass(v, p, q, k)
        e = acceptance_mass(v, p, q, k, method="enumeration")
        np.testing.assert_allclose(a.mass, e.mass, atol=1e-12)
        for b in range(2):
            assert a.acceptance[b] == pytest.approx(resispec.acceptance_probability(v, p[b], q[b], k), abs=1e-12)
        M, R = node_split(v, p, q, k)
        np.testing.assert_allclose(M + R, p, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("spec", ["2,2", "3,1,2"])
def test_exact_two_token_law_is_product_of_target_laws(name, spec, markov):
    v = resispec.get_verifier(name)
    L = exact_two_token_law(v, _shape(v, spec), markov, (1,))
    np.testing.assert_allclose(L, _product(markov, (1,)), atol=1e-12)


def test_exact_two_token_law_flags_a_biased_mutant(markov):
    v = resispec.get_verifier("rrs")           # rrs on without-replacement drafts is biased
    shape = TreeShape.parse("3,2", "without_replacement")
    L = exact_two_token_law(v, shape, markov, (1,), strict=False)
    assert np.abs(L - _product(markov, (1,))).max() > 1e-3


@pytest.mark.parametrize("name", ["resispec", "rrs_wor", "kseq"])
def test_monte_carlo_tree_decoding_joint_law(name, markov):
    v = resispec.get_verifier(name)
    out = decode_tree(v, _shape(v, "2,2"), markov, np.random.default_rng(11), n=6000, context=(1,))
    obs = np.bincount(out.tokens[:, 0] * 4 + out.tokens[:, 1], minlength=16)
    assert _chi2_pvalue(obs, _product(markov, (1,))) > 1e-4
    e = block_efficiency(v, _shape(v, "2,2"), markov, (1,)).block_efficiency
    assert abs(out.block_efficiency - e) < 4.5 * out.stderr


def test_monte_carlo_chi_square_rejects_a_biased_mutant():
    pair = StaticPair([0.6, 0.3, 0.05, 0.05], [0.05, 0.05, 0.45, 0.45])
    v = resispec.get_verifier("rrs")
    shape = TreeShape.parse("3,1", "without_replacement")
    L = exact_two_token_law(v, shape, pair, (), strict=False)
    out = decode_tree(v, shape, pair, np.random.default_rng(2), n=6000, strict=False)
    obs = np.bincount(out.tokens[:, 0] * 4 + out.tokens[:, 1], minlength=16)
    prod = np.outer(pair.p, pair.p).ravel()
    assert _chi2_pvalue(obs, prod) < 1e-6
    assert _chi2_pvalue(obs, L) > 1e-4   # it does follow its own (biased) law   # it does follow its own (biased) law


@pytest.mark.parametrize("name", NAMES)
def test_iid_formula_equals_recursion_on_static_pair(name):
    rng = np.random.default_rng(4)
    p, q = rng.dirichlet(np.ones(7)), rng.dirichlet(np.ones(7))
    v = resispec.get_verifier(name)
    shape = _shape(v, "3,2,1")
    a = block_efficiency_iid(v, shape, p, q)
    b = block_efficiency(v, shape, StaticPair(p, q))
    assert a.block_efficiency == pytest.approx(b.block_efficiency, abs=1e-12)
    acc = [resispec.acceptance_probability(v, p, q, k) for k in (3, 2, 1)]
    assert a.block_efficiency == pytest.approx(1 + acc[0] + acc[0] * acc[1] + acc[0] * acc[1] * acc[2], abs=1e-12)


def test_vectorised_merge_equals_generic_path():
    pair = MarkovPair.random(np.random.default_rng(0), 12, noise=1.0)

    class Plain:  # no state_kind: the generic (per-token) merge path
        vocab_size = 12

        def laws(self, contexts):
            return pair.laws(contexts)

    v = resispec.get_verifier("resispec")
    a = block_efficiency(v, "3,2,2", pair, (4,))
    b = block_efficiency(v, "3,2,2", as_autoregressive(Plain()), (4,))
    assert a.block_efficiency == pytest.approx(b.block_efficiency, abs=1e-12)
    assert a.nodes < b.nodes


def test_pruning_bounds_the_error():
    pair = MarkovPair.random(np.random.default_rng(0), 30, noise=1.0)
    v = resispec.get_verifier("rrs")
    exact = block_efficiency(v, "2,2,2", pair, (0,))
    pruned = block_efficiency(v, "2,2,2", pair, (0,), prune=1e-2)
    assert pruned.error_bound > 0 and pruned.nodes < exact.nodes
    assert pruned.block_efficiency <= exact.block_efficiency + 1e-12
    assert exact.block_efficiency <= pruned.block_efficiency + pruned.error_bound + 1e-12


def test_monte_carlo_acceptance_without_replacement_is_close_to_exact():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    v = resispec.get_verifier("rrs_wor")
    ex = acceptance_mass(v, p, q, 3).acceptance[0]
    mc = acceptance_mass(v, p, q, 3, method="monte_carlo", n_samples=4000, rng=rng)
    assert abs(mc.acceptance[0] - ex) < 5 * mc.stderr[0]


def test_64_node_tree_at_32000_tokens():
    """A 64-node tree at V = 32,000 runs through the closed form.  Its speed is measured by
    benchmarks/tree_speed.py, never asserted here: the suite runs on busy machines (issue 37 item 8)."""
    from simulators import get_family

    p, q = get_family("softmax_noise").sample(np.random.default_rng(0), n=1, V=32000)
    v = resispec.get_verifier("resispec")
    e = block_efficiency(v, "4,3,4", StaticPair(p[0], q[0]))
    assert TreeShape.parse("4,3,4").num_nodes == 64
    assert e.block_efficiency > 1


# ------------------------------------------------------------------ bad input
def test_malformed_tree_shapes():
    v = resispec.get_verifier("rrs")
    p, q = np.array([0.5, 0.5]), np.array([0.3, 0.7])
    for bad, msg in (("", "malformed"), ("4,,2", "malformed"), ("4,a", "integers"), ("4,0,2", "depth 1"),
                     ("0", "depth 0")):
        with pytest.raises(ValueError, match=msg):
            block_efficiency_iid(v, bad, p, q)
    with pytest.raises(ValueError, match="at least one depth"):
        block_efficiency_iid(v, [], p, q)
    with pytest.raises(TypeError, match="integer"):
        block_efficiency_iid(v, [2.5], p, q)


def test_contexts_outside_vocabulary(markov):
    v = resispec.get_verifier("rrs")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        block_efficiency(v, "2", markov, (7,))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_tree(v, "2", markov, np.random.default_rng(0), n=3, context=(-1,))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        markov.laws([(1,), (4,)])
    with pytest.raises(TypeError, match="integer token ids"):
        markov.laws([(1.5,)])
    with pytest.raises(ValueError, match="empty"):
        markov.laws([])


def test_drafting_mismatch_and_other_bad_arguments(markov):
    with pytest.raises(ValueError, match="drafting"):
        block_efficiency(resispec.get_verifier("rrs_wor"), "2,2", markov)
    with pytest.raises(ValueError, match="prune"):
        block_efficiency(resispec.get_verifier("rrs"), "2,2", markov, prune=-1)
    with pytest.raises(ValueError, match="max_nodes"):
        block_efficiency(resispec.get_verifier("rrs"), "2,2,2", MarkovPair.random(np.random.default_rng(0), 30),
                         max_nodes=5)
    with pytest.raises(ValueError, match="method"):
        acceptance_mass(resispec.get_verifier("rrs"), [0.5, 0.5], [0.5, 0.5], 2, method="magic")
    with pytest.raises(ValueError, match="monte_carlo"):
        acceptance_mass(resispec.get_verifier("rrs_wor"), np.ones(60) / 60, np.ones(60) / 60, 5)
    with pytest.raises(ValueError, match="no closed-form"):
        acceptance_mass(resispec.get_verifier("rrs_wor"), [0.5, 0.5], [0.5, 0.5], 2, method="closed_form")
    with pytest.raises(ValueError, match="n must be"):
        decode_tree(resispec.get_verifier("rrs"), "2", markov, np.random.default_rng(0), n=0)
    with pytest.raises(TypeError, match="Generator"):
        decode_tree(resispec.get_verifier("rrs"), "2", markov, 0)
    with pytest.raises(TypeError, match="laws"):
        as_autoregressive(object())
    with pytest.raises(ValueError, match="square"):
        MarkovPair(np.ones((2, 3)) / 3, np.ones((2, 3)) / 3)


def test_ngram_pair_tree_recursion_brackets_monte_carlo():
    from simulators.autoregressive import ngram_pair

    pair = ngram_pair()
    inner = pair.obj
    ctx = tuple(int(t) for t in inner.encode("def f(self, x):\n    return ")[-3:])
    assert pair.state(ctx + (5,)) == ctx[1:] + (5,)
    v = resispec.get_verifier("resispec")
    e = block_efficiency(v, "3,1", pair, ctx, prune=1e-3)
    d = decode_tree(v, "3,1", pair, np.random.default_rng(0), n=300, context=ctx)
    assert e.block_efficiency - 4 * d.stderr <= d.block_efficiency <= e.block_efficiency + e.error_bound + 4 * d.stderr
    with pytest.raises(ValueError, match="outside"):
        block_efficiency(v, "3,1", pair, (inner.V,))


def test_exactness_harness_certifies_tree_decoding(markov):
    from simulators.trees import certify_tree

    v = resispec.get_verifier("resispec")
    cert = certify_tree(v, "2,2", markov, (1,), n=6000, seed=3)
    assert cert.passed, cert
    mutant = certify_tree(resispec.get_verifier("rrs"), TreeShape.parse("3,1", "without_replacement"),
                          StaticPair([0.6, 0.3, 0.05, 0.05], [0.05, 0.05, 0.45, 0.45]), n=6000, seed=3, strict=False)
    assert not mutant.passed


def test_more_bad_input():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="V must be"):
        MarkovPair.random(rng, 1)
    with pytest.raises(ValueError, match="noise"):
        MarkovPair.random(rng, 4, noise=-1)
    with pytest.raises(ValueError, match="temperature"):
        MarkovPair.random(rng, 4, temperature=0)
    with pytest.raises(ValueError, match="exceeds the draft support"):
        decode_tree(resispec.get_verifier("rrs_wor"), TreeShape.parse("3", "without_replacement"),
                    StaticPair([0.5, 0.5, 0.0], [0.5, 0.5, 0.0]), rng, n=2)
    with pytest.raises(ValueError, match="drafting"):
        block_efficiency_iid(resispec.get_verifier("resispec"), TreeShape.parse("2", "without_replacement"),
                             [0.5, 0.5], [0.5, 0.5])
    with pytest.raises(ValueError, match="n_samples"):
        acceptance_mass(resispec.get_verifier("rrs_wor"), [0.5, 0.5], [0.5, 0.5], 2, method="monte_carlo",
                        n_samples=1, rng=rng)
    with pytest.raises(ValueError, match="sums to"):
        StaticPair([0.5, 0.6], [0.5, 0.5])
    with pytest.raises(ValueError, match="fixed vocabulary"):
        from simulators import get_family
        get_family("ngram").sample(rng, n=1, V=100)
