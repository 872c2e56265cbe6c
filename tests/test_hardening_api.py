"""Adversarial inputs to the public numpy API: each must give a clear
ValueError / TypeError naming the argument (never NaN, a wrong answer or a
numpy-internal traceback).  Regression tests for the hardening pass."""

import numpy as np
import pytest

import resispec
from resispec._validation import MAX_K

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
ONE_HOT = np.array([0.0, 1.0, 0.0])


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------- k limits
@pytest.mark.parametrize("call", [
    lambda: resispec.acceptance_probability(resispec.get_verifier("rrs"), P, Q, 10**9),
    lambda: resispec.exact_output_law(resispec.get_verifier("resispec"), P, Q, 10**6),
    lambda: resispec.draw_candidates(Q, 10**12, "iid", np.random.default_rng(0)),
    lambda: resispec.optimal_acceptance(P, Q, 10**9),
])
def test_huge_k_is_a_clear_error_not_a_hang_or_memoryerror(call):
    with pytest.raises(ValueError, match="MAX_K"):
        call()


def test_k_at_the_limit_is_still_accepted():
    assert resispec.optimal_acceptance(P, Q, MAX_K) == pytest.approx(1.0)


def test_enumeration_limit_message_for_astronomic_tuple_counts():
    # 3 ** 5000 tuples: the message must not fail on formatting a 2400-digit int
    with pytest.raises(ValueError, match="candidate tuples"):
        resispec.exact_output_law(resispec.get_verifier("rrs"), P, Q, 5000, method="enumeration")


@pytest.mark.parametrize("limit", [-1, 0, "x", 2.5, None])
def test_enumeration_limit_is_validated(limit):
    with pytest.raises(ValueError, match="limit"):
        resispec.exact_output_law(resispec.get_verifier("rrs"), P, Q, 2, limit=limit)


# ---------------------------------------------------------------- uniforms
@pytest.mark.parametrize("u", ["abc", [None, 0.1, 0.2], [True, False, True], [0.1 + 0j, 0.2, 0.3]])
def test_uniforms_of_the_wrong_type(u):
    with pytest.raises(TypeError, match="uniforms"):
        resispec.get_verifier("rrs").verify(P, Q, [0, 1], uniforms=u)


# ---------------------------------------------------------------- inverse_cdf
@pytest.mark.parametrize("law, u, match", [
    (np.array([0.5, 0.5]), np.array([0.5]), "law must have shape"),
    (np.zeros((1, 3)), np.array([0.5]), "all-zero row"),
    (np.array([[np.nan, 1.0]]), np.array([0.5]), "finite"),
    (np.array([[-0.5, 1.5]]), np.array([0.5]), "non-negative"),
    (np.array([[0.5, 0.5]]), np.array([1.0]), r"\[0, 1\)"),
    (np.array([[0.5, 0.5]]), np.array([0.1, 0.2]), "u must have shape"),
])
def test_inverse_cdf_rejects_bad_input(law, u, match):
    with pytest.raises(ValueError, match=match):
        resispec.inverse_cdf(law, u)


def test_inverse_cdf_unchanged_on_good_input():
    law = np.array([[0.0, 2.0, 0.0, 2.0]])  # unnormalised is allowed (documented)
    assert resispec.inverse_cdf(law, np.array([0.1])).tolist() == [1]
    assert resispec.inverse_cdf(law, np.array([[0.1, 0.6]])).tolist() == [[1, 3]]


# ---------------------------------------------------------------- proxies
@pytest.mark.parametrize("proxy, options", [
    ("tempered", {"tau": "2"}), ("tempered", {"tau": None}),
    ("uniform_mix", {"eps": "x"}), ("uniform_mix", {"eps": None}),
])
def test_proxy_option_of_the_wrong_type(proxy, options):
    with pytest.raises(TypeError, match="must be a real number"):
        resispec.get_verifier("resispec", proxy=proxy, proxy_options=options)


@pytest.mark.parametrize("bad", [lambda q_i, **kw: "abc", lambda q_i, **kw: q_i + 0j,
                                 lambda q_i, **kw: None])
def test_proxy_returning_non_real_output(bad, rng):
    v = resispec.get_verifier("resispec", proxy=bad)
    with pytest.raises((TypeError, ValueError), match="proxy"):
        v.verify(P, Q, [0, 1, 2], rng)


def test_proxy_writing_into_its_input_is_caught_and_q_is_untouched(rng):
    def inplace(q_i, *, step, k, p_i):
        q_i *= 2.0
        return q_i

    q = Q.copy()
    v = resispec.get_verifier("resispec", proxy=inplace)
    with pytest.raises(ValueError, match="write into its input"):
        v.verify(P, q, [0, 1, 2], rng)
    assert np.array_equal(q, Q)


# ---------------------------------------------------------------- p == q and one-hot: no NaN anywhere
@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor", "target_only", "kseq", "resispec"])
@pytest.mark.parametrize("p, q", [(P, P), (ONE_HOT, Q), (P, ONE_HOT), (ONE_HOT, ONE_HOT)])
def test_degenerate_laws_no_nan_and_no_warning(name, p, q, recwarn):
    v = resispec.get_verifier(name)
    k = 1 if (v.drafting == "without_replacement" and q.max() == 1.0) else 3
    law = resispec.exact_output_law(v, p, q, k)
    assert np.allclose(law, p, atol=1e-12)
    acc = resispec.acceptance_probability(v, p, q, k)
    d = "without_replacement" if v.drafting == "without_replacement" else "iid"
    assert np.isfinite(acc) and 0 <= acc <= resispec.optimal_acceptance(p, q, k, d) + 1e-12
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_drift_p_equals_q_has_no_nan():
    from simulators.drift import residual_drift

    p = np.tile(P, (2, 1))
    res = residual_drift(resispec.get_verifier("resispec_myopic"), p, p, 4)
    for arr in (res.beta, res.tv, res.top_mass, res.cumulative_acceptance):
        assert np.all(np.isfinite(arr))
    assert np.allclose(res.beta, 1.0) and np.allclose(res.tv, 0.0)
    # the look-ahead (the default) front-loads this saturated node (docs/verifiers.md): candidate 1 accepted
    la = residual_drift(resispec.get_verifier("resispec"), p, p, 4)
    for arr in (la.beta, la.tv, la.top_mass, la.cumulative_acceptance):
        assert np.all(np.isfinite(arr))
    assert np.allclose(la.beta, 1.0) and np.allclose(la.tv, 0.0)


def test_target_only_closed_form_one_hot_draft_no_warning():
    import warnings

    from simulators.acceptance import acceptance_mass

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        am = acceptance_mass(resispec.get_verifier("target_only"), P[None], ONE_HOT[None], 3)
    assert am.acceptance[0] == pytest.approx(0.3)


# ---------------------------------------------------------------- families and trees
@pytest.mark.parametrize("family, params, err", [
    ("zipf", {"exponent": float("nan")}, ValueError),
    ("zipf", {"noise": "x"}, TypeError),
    ("shifted", {"fraction": 2.0}, ValueError),
    ("dirichlet", {"concentration": 0.0}, ValueError),
    ("dirichlet", {"mix": 2.0}, ValueError),
    ("temp_mismatch", {"ratio": -1.0}, ValueError),
])
def test_family_parameters_are_validated(family, params, err, rng):
    from simulators.families import get_family

    with pytest.raises(err, match=family if err is ValueError else "must be a real number"):
        get_family(family).sample(rng, n=1, V=5, **params)


def test_family_temperature_string(rng):
    from simulators.families import get_family

    with pytest.raises(TypeError, match="temperature"):
        get_family("zipf").sample(rng, n=1, V=5, temperature="hot")


@pytest.mark.parametrize("spec", [None, 4, 2.5])
def test_tree_shape_parse_non_iterable(spec):
    from resispec.trees import TreeShape

    with pytest.raises(TypeError, match="tree shape"):
        TreeShape.parse(spec)


def test_bench_without_replacement_shape_wider_than_support():
    from resispec.bench.trees import run_bench

    with pytest.raises(ValueError, match="draft support"):
        run_bench(families=["softmax_noise"], temperatures=[1.0], shapes=["wor:8"], V=4, n=1, n_samples=4,
                  seed=0, progress=False)


def test_float16_law_error_says_how_to_fix():
    p = np.full(10, 0.1, dtype=np.float16)
    with pytest.raises(ValueError, match="cast to float64 and renormalise"):
        resispec.optimal_acceptance(p, p, 2)
