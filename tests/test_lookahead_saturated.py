"""The look-ahead on saturated nodes (acceptance 1): one front-loaded schedule, stable decisions, every engine alike.

Also the verifier-object hardening that came with making the look-ahead the default (a breaker's findings):
copies keep their rule, the torch fixed point is thread-safe, named rules refuse the other reserve.
"""

import copy
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import resispec
from resispec.verifiers.lookahead import front_load_saturated, lookahead_schedule

LA = resispec.get_verifier("resispec")


def _close_pair(rng, B, V, noise):
    z = rng.normal(size=(B, V)) * 2.0
    p = np.exp(z)
    q = np.exp(z + noise * rng.normal(size=(B, V)))
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


def test_p_equal_q_accepts_the_first_candidate():
    p = np.array([[0.5, 0.3, 0.2]])
    for k in (2, 3, 4, 8):
        assert np.allclose(LA.step_acceptance(p, p, k)[0, 0], 1.0)


def test_saturated_schedule_is_front_loaded_and_optimal():
    """p = (.5,.3,.2), q = (.2,.3,.5), k = 64: acceptance exactly 1 (rrs: 1 - 2e-7), accepting from candidate 1 on."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    beta = LA.step_acceptance(p[None], q[None], 64)[0]
    assert beta[0] == pytest.approx(0.2) and beta[3] == pytest.approx(1.0)   # L_1 = max p/q - 1 = 1.5: least reserve
    assert resispec.acceptance_probability(LA, p, q, 64) == pytest.approx(1.0, abs=1e-12)
    law = resispec.exact_output_law(LA, p, q, 3)
    assert np.max(np.abs(law - p)) < 1e-12


def test_decisions_do_not_flip_under_round_off_on_saturated_nodes():
    """A 1e-10 change of the draft must not move which candidate is accepted (it did, in 246 of 256 rows,
    when the tie rule back-loaded the reserve)."""
    rng = np.random.default_rng(0)
    p, q = _close_pair(rng, 256, 1000, 0.01)
    q2 = q.copy()
    q2[:, 0] += 1e-10
    q2 /= q2.sum(1, keepdims=True)
    c = resispec.draw_candidates(q, 4, "iid", rng)
    u = rng.random((256, 5))
    a = LA.verify(p, q, c, None, uniforms=u).accepted
    b = LA.verify(p, q2, c, None, uniforms=u).accepted
    assert np.count_nonzero(a != b) <= 2                                   # near-ties of a uniform only


def test_kernel_reference_and_tensor_port_front_load_alike():
    torch = pytest.importorskip("torch")
    from resispec._lookahead_fused import AVAILABLE, lookahead_rows
    lookahead_schedule_t = lookahead_schedule                           # written once: the same function on tensors

    rng = np.random.default_rng(3)
    p, q = _close_pair(rng, 12, 300, 0.02)
    p[0], q[0] = p[1], p[1]                                                 # p = q
    for k in (2, 3, 5, 8):
        ref = lookahead_schedule(p, q, k)
        port = lookahead_schedule_t(torch.from_numpy(p), torch.from_numpy(q), k).numpy()
        assert np.allclose(port, ref, atol=1e-9)
        if AVAILABLE:
            assert np.allclose(lookahead_rows(p, q, k), ref, atol=1e-9)
        assert np.allclose(ref[0], np.r_[1.0, np.zeros(k)])


@settings(deadline=None, max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), V=st.integers(2, 6), k=st.integers(2, 4), noise=st.floats(0.0, 0.3))
def test_front_loading_keeps_the_law_and_the_acceptance(seed, V, k, noise):
    """Exact law (enumeration) and acceptance >= the myopic rule, on nodes near and at saturation."""
    rng = np.random.default_rng(seed)
    p, q = _close_pair(rng, 1, V, noise)
    law = resispec.exact_output_law(LA, p[0], q[0], k)
    assert np.max(np.abs(law - p[0])) < 1e-12
    my = resispec.get_verifier("resispec_myopic")
    assert resispec.acceptance_probability(LA, p[0], q[0], k) >= resispec.acceptance_probability(my, p[0], q[0], k) - 1e-9


def test_front_loading_leaves_unsaturated_rows_alone():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.full(50, 0.3), size=4), rng.dirichlet(np.full(50, 0.3), size=4)
    L = lookahead_schedule(p, q, 4)
    assert np.array_equal(front_load_saturated(L, p, q), L)


def test_copies_keep_their_rule():
    torch = pytest.importorskip("torch")   # noqa: F841
    for kw in ({"proxy": "tempered", "proxy_options": {"tau": 2.0}}, {"solver": "sort"}, {"reserve": "fixed_point"}):
        v = resispec.get_verifier("resispec", backend="torch", **kw)
        w = copy.deepcopy(v)
        assert type(w) is type(v) and w.options() == v.options()
    assert copy.deepcopy(resispec.get_verifier("resispec", backend="torch")).options()["reserve"] == "lookahead"
    assert copy.deepcopy(resispec.get_verifier("resispec")).options()["reserve"] == "lookahead"


def test_torch_fixed_point_newton_is_thread_safe():
    pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    v = resispec.get_verifier("resispec_myopic", backend="torch", solver="newton")
    cases = []
    for V in (20, 300, 50, 300):
        cases.append((rng.dirichlet(np.ones(V), size=3), rng.dirichlet(np.ones(V), size=3),
                      rng.integers(0, V, size=(3, 4))))
    ref = [v.chain(*c).accept_probs.numpy() for c in cases]
    bad = []

    def work(j):
        for _ in range(20):
            if not np.allclose(v.chain(*cases[j]).accept_probs.numpy(), ref[j], atol=1e-12):
                bad.append(j)

    threads = [threading.Thread(target=work, args=(j,)) for j in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


@pytest.mark.parametrize("name,kw,match", [
    ("resispec_lookahead", {"reserve": "fixed_point"}, "resispec_myopic"),
    ("resispec_lookahead", {"drafting": "without_replacement"}, "iid rule"),
    ("resispec_myopic", {"drafting": "without_replacement"}, "iid rule"),
    ("resispec_myopic", {"reserve": "lookahead"}, "fixed-point"),
    ("resispec", {"reserve": "lookahead", "solver": "sort"}, "solver"),
])
def test_named_rules_refuse_the_other_reserve(name, kw, match):
    with pytest.raises(ValueError, match=match):
        resispec.get_verifier(name, **kw)
