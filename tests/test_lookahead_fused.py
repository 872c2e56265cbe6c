"""The fused look-ahead kernel (``resispec/_lookahead_fused.py``) against the sorted reference.

What these tests can detect: a kernel reserve or decision that departs from the reference
(``resispec.verifiers.lookahead.lookahead_schedule``, the former implementation, kept as the slow
path) beyond round-off, except where the reference itself is ill-conditioned -- there the kernel's
schedule must still solve the look-ahead equations; a look-ahead rule below the myopic one; a broken
tie-cluster / large-bucket path at a real vocabulary size; bad input reaching the kernel.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import resispec
import resispec._lookahead_fused as fused
from resispec._reserve_tol import LOOKAHEAD_TOL
from resispec.verifiers.lookahead import _Psi, _lookahead_reserve_ref, lookahead_schedule
from _torch_cases import near_tie_rows
from test_gap_helpers import law_pairs

SETTINGS = settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
DELTA = 1e-9


@st.composite
def batches(draw):
    """Small batches of laws from integer weights (ties, zeros in p and q), candidates and uniforms."""
    V = draw(st.integers(2, 7))
    B = draw(st.integers(1, 4))
    k = draw(st.integers(1, 5))
    weights = st.lists(st.integers(0, 3), min_size=V, max_size=V).filter(lambda w: sum(w) > 0)
    P, Q, C = [], [], []
    for _ in range(B):
        wp, wq = np.array(draw(weights), float), np.array(draw(weights), float)
        P.append(wp / wp.sum())
        Q.append(wq / wq.sum())
        C.append(draw(st.lists(st.sampled_from([int(i) for i in np.flatnonzero(wq)]), min_size=k, max_size=k)))
    special = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1 / 3, 2 / 3])
    uni = st.one_of(special, st.floats(0.0, 1.0, exclude_max=True))
    U = np.array(draw(st.lists(st.lists(uni, min_size=k + 1, max_size=k + 1), min_size=B, max_size=B)))
    return np.array(P), np.array(Q), np.array(C, dtype=np.int64), U


def _solves_equations(p, q, L, tol=1e-9):
    """True when the schedule ``L`` (n + 1,) solves the look-ahead equations of row (p, q) (reference psi)."""
    f = _Psi(p[None], q[None])
    psi = np.array([f.psi(np.array([x]))[0] for x in L])
    n = L.size - 1
    ok = abs((L[0] - L[1]) - 1.0) <= tol and L[n] == 0.0
    for i in range(n - 1, 0, -1):          # psi(L_{i-1}) = psi(L_i) + L_i - L_{i+1}, or L_{i-1} = L_i (clamp)
        ok &= abs(psi[i - 1] - (psi[i] + L[i] - L[i + 1])) <= tol or L[i - 1] == L[i]
    return bool(ok)


@SETTINGS
@given(data=batches(), k_left=st.integers(1, 6))
def test_kernel_schedule_equals_reference(data, k_left):
    """Same schedule as the sorted reference to 1e-10, or (a non-unique root) an exact solution too."""
    P, Q, _, _ = data
    got = fused.lookahead_rows(P, Q, k_left)
    want = lookahead_schedule(P, Q, k_left)
    far = np.abs(got - want).max(axis=1) > 1e-10
    for b in np.flatnonzero(far):
        assert _solves_equations(P[b], Q[b], got[b]), (P[b], Q[b], got[b], want[b])
    if k_left > 1:
        assert np.all(got[:, 0] - got[:, 1] >= 1.0 - LOOKAHEAD_TOL - 1e-12)


@pytest.mark.parametrize("gamma", [1.0, 0.5])
@SETTINGS
@given(data=batches())
def test_decisions_equal_reference(gamma, data):
    """Same uniforms: the kernel path and the reference path (no numba) decide alike, except near-ties
    (a uniform within 1e-9 of a threshold) and rows whose reserves differ (non-unique roots, checked above)."""
    P, Q, C, U = data
    v = resispec.get_verifier("resispec_lookahead", gamma=gamma)
    fast = v.verify(P, Q, C, uniforms=U)
    a_f, r_f = v._chain(P, Q, C)
    saved = fused.AVAILABLE
    fused.AVAILABLE = False                 # the reference sort path of lookahead_reserve_and_mass
    try:
        slow = v.verify(P, Q, C, uniforms=U)
        a_s, r_s = v._chain(P, Q, C)
    finally:
        fused.AVAILABLE = saved
    apart = (np.abs(a_f - a_s).max(axis=1) > 1e-10) | (np.abs(r_f - r_s).max(axis=1) > 1e-10)
    same = (fast.tokens == slow.tokens) & (fast.accepted == slow.accepted)
    assert (near_tie_rows(a_s, r_s, U, DELTA) | apart)[~same].all(), "decisions differ away from a tie"


@settings(deadline=None, max_examples=40)
@given(pq=law_pairs(max_V=6), k=st.integers(2, 5))
def test_acceptance_at_least_myopic(pq, k):
    """The look-ahead rule accepts at least as often as the myopic fixed point (exact acceptances)."""
    p, q = pq
    la = resispec.acceptance_probability(resispec.get_verifier("resispec_lookahead"), p, q, k)
    my = resispec.acceptance_probability(resispec.get_verifier("resispec"), p, q, k)
    assert la >= my - 1e-9


def test_large_vocabulary_and_tie_clusters():
    """V = 20,000 (32 buckets per octave): at every step of a k = 6 walk the residual holds a tie
    cluster (the band a candidate levelled); kernel reserves == reference to 1e-10."""
    from simulators.families import get_family

    rng = np.random.default_rng(3)
    P, Q = get_family("softmax_noise").sample(rng, n=3, V=20_000)
    C = resispec.draw_candidates(Q, 6, "iid", rng)
    _, ps, _ = resispec.get_verifier("resispec_lookahead").masses(P, Q, C)
    for i in range(5):
        p_i = np.ascontiguousarray(ps[:, i])
        np.testing.assert_allclose(fused.lookahead_rows(p_i, Q, 6 - i)[:, 1], _lookahead_reserve_ref(p_i, Q, 6 - i),
                                   rtol=0, atol=1e-10)
    assert fused.sub_buckets(20_000) == 32 and fused.sub_buckets(8) == 1


def test_mass_and_identical_rows():
    """``gamma=`` returns ``m = min(q, (p - gamma Lambda q)_+)``; a tiled batch equals the row-by-row solve."""
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    P, Q = np.tile(p, (5, 1)), np.tile(q, (5, 1))
    sched, m = fused.lookahead_rows(P, Q, 4, gamma=0.5)
    lam = 0.5 * sched[:, 1]
    np.testing.assert_array_equal(m, np.minimum(Q, np.maximum(P - lam[:, None] * Q, 0.0)))
    one = fused.lookahead_rows(P[:1], Q[:1], 4)
    np.testing.assert_array_equal(sched, np.repeat(one, 5, axis=0))
    out = np.empty_like(P)
    _, m2 = fused.lookahead_rows(P, Q, 4, gamma=0.5, out=out)
    assert m2 is out and np.array_equal(out, m)


@pytest.mark.parametrize("kwargs,match", [
    ({"k_left": 0}, "k_left"),
    ({"gamma": -1.0}, "gamma"),
    ({"p": np.ones((2, 3), dtype=np.float32) / 3}, "float64"),
    ({"p": np.ones((3, 2)) / 2}, "shape"),
    ({"out": np.empty((2, 3))}, "gamma"),
])
def test_bad_input(kwargs, match):
    args = {"p": np.full((2, 3), 1 / 3), "q": np.full((2, 3), 1 / 3), "k_left": 2}
    args.update(kwargs)
    out = args.pop("out", None)
    gamma = args.pop("gamma", None)
    with pytest.raises(ValueError, match=match):
        fused.lookahead_rows(args["p"], args["q"], args["k_left"], gamma=gamma, out=out)
