"""Every bad input of issue 2 raises ValueError (or TypeError) naming the argument."""

import numpy as np
import pytest

import resispec
from resispec.bounds import optimal_acceptance_lp, sequential_optimum_iid

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
VERIFIERS = resispec.available_verifiers()


def _calls(v):
    """Every entry point that takes (p, q, candidates), as callables of (p, q, c)."""
    rng = np.random.default_rng(0)
    return {
        "verify": lambda p, q, c: v.verify(p, q, c, rng),
        "conditional_law": lambda p, q, c: v.conditional_law(p, q, c),
        "chain": lambda p, q, c: v.chain(p, q, c),
    }


BAD_LAWS = [
    ("shape mismatch", P, np.array([0.5, 0.5]), r"p has shape .* but q has shape"),
    ("batch mismatch", np.tile(P, (2, 1)), np.tile(Q, (3, 1)), r"p has shape .* but q has shape"),
    ("negative p", np.array([0.6, 0.5, -0.1]), Q, r"^p has negative"),
    ("negative q", P, np.array([1.2, -0.1, -0.1]), r"^q has negative"),
    ("nan p", np.array([np.nan, 0.5, 0.5]), Q, r"^p contains NaN"),
    ("inf q", P, np.array([np.inf, 0.0, 0.0]), r"^q contains NaN or inf"),
    ("p not normalised", np.array([0.5, 0.3, 0.3]), Q, r"^p row 0 sums to"),
    ("q not normalised", P, np.array([0.2, 0.2, 0.5]), r"^q row 0 sums to"),
    ("3-D p", P[None, None], Q, r"^p must have shape"),
]


@pytest.mark.parametrize("name", VERIFIERS)
@pytest.mark.parametrize("label,p,q,msg", BAD_LAWS, ids=[b[0] for b in BAD_LAWS])
def test_bad_laws(name, label, p, q, msg):
    v = resispec.get_verifier(name)
    for call in _calls(v).values():
        with pytest.raises(ValueError, match=msg):
            call(p, q, [0, 1])
    if np.ndim(p) == 1 and np.ndim(q) == 1:
        for fn in (lambda: resispec.exact_output_law(v, p, q, 2), lambda: resispec.acceptance_probability(v, p, q, 2),
                   lambda: resispec.optimal_acceptance(p, q, 2)):
            with pytest.raises(ValueError, match=msg):
                fn()


def test_sum_tolerance_is_1e_6():
    v = resispec.get_verifier("rrs")
    ok = np.array([0.5, 0.3, 0.2 + 5e-7])
    v.conditional_law(ok, Q, [0])
    with pytest.raises(ValueError, match="sums to"):
        v.conditional_law(np.array([0.5, 0.3, 0.2 + 5e-6]), Q, [0])


@pytest.mark.parametrize("name", VERIFIERS)
def test_bad_candidates(name):
    v = resispec.get_verifier(name)
    q0 = np.array([0.5, 0.5, 0.0])
    for call in _calls(v).values():
        with pytest.raises(ValueError, match=r"candidates contains ids outside \[0, 3\)"):
            call(P, Q, [0, 3])
        with pytest.raises(ValueError, match=r"candidates contains ids outside"):
            call(P, Q, [-1, 0])
        with pytest.raises(ValueError, match=r"candidates\[0, 1\] = 2 has draft probability q = 0"):
            call(P, q0, [0, 2])
        with pytest.raises(ValueError, match=r"candidates has 2 rows"):
            call(P, Q, [[0, 1], [1, 0]])
        with pytest.raises(ValueError, match=r"candidates must have shape"):
            call(P, Q, np.zeros((1, 0), dtype=np.int64))
        with pytest.raises(TypeError, match=r"candidates must be an integer array"):
            call(P, Q, [0.0, 1.0])
    if v.drafting == "without_replacement":
        with pytest.raises(ValueError, match=r"candidates repeat a token"):
            v.verify(P, Q, [1, 1], np.random.default_rng(0))


@pytest.mark.parametrize("k", [0, -2])
def test_bad_k(k):
    v = resispec.get_verifier("resispec")
    rng = np.random.default_rng(0)
    for fn in (lambda: resispec.draw_candidates(Q, k, "iid", rng), lambda: resispec.exact_output_law(v, P, Q, k),
               lambda: resispec.acceptance_probability(v, P, Q, k), lambda: resispec.optimal_acceptance(P, Q, k),
               lambda: sequential_optimum_iid(P, Q, k), lambda: optimal_acceptance_lp(P, Q, k)):
        with pytest.raises(ValueError, match=r"^k must be >= 1"):
            fn()
    with pytest.raises(TypeError, match=r"^k must be an integer"):
        resispec.optimal_acceptance(P, Q, 2.0)


def test_unknown_names():
    with pytest.raises(ValueError, match=r"unknown verifier 'nope'; choose one of"):
        resispec.get_verifier("nope")
    with pytest.raises(ValueError, match=r"unknown proxy 'nope'"):
        resispec.get_verifier("resispec", proxy="nope")
    with pytest.raises(ValueError, match=r"unknown proxy"):
        resispec.get_proxy("nope")
    with pytest.raises(TypeError, match=r"verifier 'rrs'"):
        resispec.get_verifier("rrs", gamma=1.0)
    with pytest.raises(ValueError, match=r"^gamma must be finite and >= 0"):
        resispec.get_verifier("resispec", gamma=-1.0)
    with pytest.raises(ValueError, match=r"drafting must be one of"):
        resispec.draw_candidates(Q, 2, "sideways", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"drafting must be one of"):
        resispec.optimal_acceptance(P, Q, 2, drafting="sideways")


def test_bad_rng_and_uniforms():
    v = resispec.get_verifier("rrs")
    with pytest.raises(TypeError, match=r"^rng must be a numpy.random.Generator"):
        v.verify(P, Q, [0, 1], rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match=r"pass rng"):
        v.verify(P, Q, [0, 1])
    with pytest.raises(ValueError, match=r"^uniforms must have shape"):
        v.verify(P, Q, [0, 1], uniforms=[0.1, 0.2])
    with pytest.raises(ValueError, match=r"^uniforms must be finite and lie in \[0, 1\)"):
        v.verify(P, Q, [0, 1], uniforms=[0.1, 0.2, 1.0])
    with pytest.raises(ValueError, match=r"^uniforms must be a rectangular float array of shape \(B, k \+ 1\) = \(2, 3\)"):
        v.verify(np.tile(P, (2, 1)), np.tile(Q, (2, 1)), [[0, 1], [0, 1]], uniforms=[[0.1, 0.2, 0.3], [0.1]])
    if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps:          # an 80/128-bit longdouble
        below_one = np.array([0.1, 0.2, 1 - np.finfo(np.longdouble).eps], dtype=np.longdouble)
        with pytest.raises(ValueError, match=r"^uniforms must lie in \[0, 1\) in float64: a .* value below 1 rounds"):
            v.verify(P, Q, [0, 1], uniforms=below_one)
    with pytest.raises(TypeError, match=r"^rng must be"):
        resispec.draw_candidates(Q, 2, "iid", 0)


def test_without_replacement_k_past_support():
    q = np.array([0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match=r"k = 3 exceeds the draft support"):
        resispec.draw_candidates(q, 3, "without_replacement", np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"k = 3 exceeds the draft support"):
        resispec.exact_output_law(resispec.get_verifier("rrs_wor"), P, q, 3)


def test_enumeration_limit():
    p = np.full(200, 1 / 200)
    with pytest.raises(ValueError, match=r"exact enumeration needs .* candidate tuples"):
        resispec.exact_output_law(resispec.get_verifier("target_only"), p, p, 3, method="enumeration")
    with pytest.raises(ValueError, match=r"exact enumeration needs .* candidate tuples"):
        resispec.exact_output_law(resispec.get_verifier("rrs_wor"), p, p, 3)   # no closed form


def test_non_numeric():
    v = resispec.get_verifier("rrs")
    with pytest.raises(TypeError, match=r"^p must be"):
        v.conditional_law("abc", Q, [0])
    with pytest.raises(TypeError, match=r"^q must be"):
        v.conditional_law(P, None, [0])


def test_nothing_mutated():
    """Inputs are never modified in place."""
    p, q = P.copy(), Q.copy()
    c = np.array([[2, 0, 1]])
    for name in VERIFIERS:
        v = resispec.get_verifier(name)
        v.verify(p, q, c, np.random.default_rng(0))
        resispec.exact_output_law(v, p, q, 2)
    np.testing.assert_array_equal(p, P)
    np.testing.assert_array_equal(q, Q)
    np.testing.assert_array_equal(c, [[2, 0, 1]])
