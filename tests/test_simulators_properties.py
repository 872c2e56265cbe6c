"""Property tests (hypothesis): closed forms equal enumeration; tree decoding law is the target's."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import resispec
from resispec.trees import TreeShape
from simulators.acceptance import acceptance_mass
from simulators.autoregressive import MarkovPair
from simulators.trees import block_efficiency, exact_two_token_law, target_two_token_law

laws = st.integers(min_value=2, max_value=5).flatmap(
    lambda V: st.tuples(st.just(V), st.integers(0, 2**31 - 1)))


@settings(deadline=None, max_examples=30)
@given(laws, st.integers(1, 3), st.sampled_from(["draft", "coverage", "uniform_mix", "topk"]),
       st.floats(0.0, 2.0))
def test_resispec_acceptance_mass_closed_form_equals_enumeration(vs, k, proxy, gamma):
    V, seed = vs
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V) * 0.5), rng.dirichlet(np.ones(V) * 0.5)
    v = resispec.get_verifier("resispec", proxy=proxy, gamma=gamma)
    a = acceptance_mass(v, p, q, k)
    e = acceptance_mass(v, p, q, k, method="enumeration")
    assert a.method == "closed_form"
    np.testing.assert_allclose(a.mass, e.mass, atol=1e-10)


@settings(deadline=None, max_examples=20)
@given(laws, st.lists(st.integers(1, 3), min_size=1, max_size=3),
       st.sampled_from(["resispec", "rrs", "kseq", "rrs_wor", "target_only", "sps"]), st.floats(0.2, 2.0))
def test_tree_two_token_law_is_exact(vs, branching, name, noise):
    V, seed = vs
    v = resispec.get_verifier(name)
    drafting = "without_replacement" if v.drafting == "without_replacement" else "iid"
    if drafting == "without_replacement":
        branching = [min(b, V) for b in branching]
    shape = TreeShape(tuple(branching), drafting)
    pair = MarkovPair.random(np.random.default_rng(seed), V, noise=noise)
    L = exact_two_token_law(v, shape, pair, (0,))
    np.testing.assert_allclose(L, target_two_token_law(pair, (0,)), atol=1e-10)
    E = block_efficiency(v, shape, pair, (0,)).block_efficiency
    assert 1.0 <= E <= shape.depth + 1 + 1e-12
