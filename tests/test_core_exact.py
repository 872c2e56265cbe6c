"""Exact output law == p for every verifier on hypothesis-drawn (p, q, k).

Small vocabularies (2..5 tokens) with integer weights 0..4, so ties, zeros,
one-hot laws and p == q are all drawn; every candidate tuple is enumerated.
Also: acceptance never exceeds alpha*, and no NaN anywhere.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resispec
from resispec.verifiers.resispec import solve_reserve

PROXY_CASES = [("draft", {}), ("tempered", {"tau": 2.0}), ("topk", {"top_k": 1}), ("uniform_mix", {"eps": 0.3}),
               ("coverage", {})]


def _law(w):
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


@st.composite
def pq_k(draw):
    V = draw(st.integers(2, 5))
    weights = st.lists(st.integers(0, 4), min_size=V, max_size=V).filter(lambda w: sum(w) > 0)
    kind = draw(st.sampled_from(["free", "free", "equal", "onehot_p", "onehot_q", "onehot_both"]))
    p = _law(draw(weights))
    q = _law(draw(weights))
    if kind == "equal":
        q = p.copy()
    if kind in ("onehot_p", "onehot_both"):
        p = np.eye(V)[draw(st.integers(0, V - 1))]
    if kind in ("onehot_q", "onehot_both"):
        q = np.eye(V)[draw(st.integers(0, V - 1))]
    k = draw(st.integers(1, 3))
    return p, q, k


def _verifiers():
    out = [resispec.get_verifier(n) for n in resispec.available_verifiers()]
    out += [resispec.get_verifier("resispec", proxy=n, proxy_options=o) for n, o in PROXY_CASES[1:]]
    out += [resispec.get_verifier("resispec", gamma=g) for g in (0.0, 0.5, 2.0)]
    return out


VERIFIERS = _verifiers()


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(pq_k())
def test_exact_output_law_equals_p(case):
    p, q, k = case
    support = int(np.count_nonzero(q))
    for v in VERIFIERS:
        if v.drafting == "without_replacement" and k > support:
            continue
        law = resispec.exact_output_law(v, p, q, k)
        assert np.all(np.isfinite(law)), v
        assert np.max(np.abs(law - p)) < 1e-12, (v, p, q, k, law)
        drafting = "without_replacement" if v.drafting == "without_replacement" else "iid"
        if drafting == "iid" or support <= 20:
            acc = resispec.acceptance_probability(v, p, q, k)
            assert np.isfinite(acc) and -1e-12 <= acc <= resispec.optimal_acceptance(p, q, k, drafting) + 1e-12, v


@settings(deadline=None, max_examples=60)
@given(pq_k(), st.sampled_from([0.5, 1.0, 3.0]))
def test_reserve_is_the_fixed_point(case, gamma):
    """lambda = gamma (1 - s(lambda)) with s(l) = sum min(q, (p - l rho)_+), to 1e-12."""
    p, q, _ = case
    for rho in (q, np.full_like(q, 1.0 / q.size)):
        lam = solve_reserve(p[None], q[None], rho[None], gamma)[0]
        s = np.minimum(q, np.maximum(p - lam * rho, 0.0)).sum()
        assert 0.0 <= lam <= gamma
        assert abs(lam - gamma * (1.0 - s)) < 1e-12


@pytest.mark.parametrize("name", resispec.available_verifiers())
def test_no_nan_on_equal_and_onehot(name):
    rng = np.random.default_rng(0)
    v = resispec.get_verifier(name)
    V, k = 6, 3
    base = rng.dirichlet(np.ones(V))
    one = np.eye(V)[2]
    cases = [(base, base), (one, base), (base, one), (one, one), (np.eye(V)[1], one)]
    for p, q in cases:
        if v.drafting == "without_replacement" and np.count_nonzero(q) < k:
            continue
        P, Q = np.tile(p, (50, 1)), np.tile(q, (50, 1))
        c = resispec.draw_candidates(Q, k, v.drafting if v.drafting != "any" else "iid", rng)
        ch = v.chain(P, Q, c)
        assert np.all(np.isfinite(ch.accept_probs)) and np.all(np.isfinite(ch.residual))
        assert np.all(np.isfinite(v.conditional_law(P, Q, c)))
        out = v.verify(P, Q, c, rng)
        assert np.all((out.tokens >= 0) & (out.tokens < V)) and np.all(p[out.tokens] > 0)
        np.testing.assert_allclose(resispec.exact_output_law(v, p, q, k), p, atol=1e-12)
        assert np.isfinite(resispec.acceptance_probability(v, p, q, k))
        assert np.isfinite(resispec.optimal_acceptance(p, q, k))
        if hasattr(v, "masses"):
            for arr in v.masses(P, Q, c):
                assert np.all(np.isfinite(arr))
