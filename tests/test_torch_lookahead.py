"""Torch twin of ``resispec_lookahead``: parity with numpy, exact law, Monte Carlo, bad input."""

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import resispec  # noqa: E402
from resispec.torch_backend import NumpyFacade, draw_candidates  # noqa: E402
from resispec._reserve_tol import LOOKAHEAD_TOL  # noqa: E402
from resispec.verifiers.lookahead import _Psi, lookahead_reserve, lookahead_schedule  # noqa: E402

# one definition (resispec._xp): the same functions on tensors
PsiTable, lookahead_schedule_t, lookahead_reserve_t = _Psi, lookahead_schedule, lookahead_reserve

from _torch_cases import near_tie_rows  # noqa: E402

DELTA = 1e-9
SETTINGS = settings(deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow])
#: Flat-root case (:func:`test_ill_conditioned_reserve_example`), always replayed by the parity test.
FLAT = (np.array([[0, 0, 0, 0, 1.], [1 / 7, 1 / 7, 2 / 7, 1 / 7, 2 / 7]]),
        np.array([[0, 0, 0, 0, 1.], [1 / 9, 1 / 9, 2 / 9, 2 / 9, 3 / 9]]),
        np.array([[4, 4, 4], [0, 0, 0]]), np.zeros((2, 4)))
GAMMAS = [1.0, 0.5]


@st.composite
def cases(draw):
    """Small laws from integer weights (ties, zeros in p and q), candidates, uniforms with exact thresholds."""
    V = draw(st.integers(2, 7))
    B = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    weights = st.lists(st.integers(0, 3), min_size=V, max_size=V).filter(lambda w: sum(w) > 0)
    P, Q, C = [], [], []
    for _ in range(B):
        wp = np.array(draw(weights), dtype=float)
        wq = np.array(draw(weights), dtype=float)
        P.append(wp / wp.sum())
        Q.append(wq / wq.sum())
        support = [int(i) for i in np.flatnonzero(wq)]
        C.append(draw(st.lists(st.sampled_from(support), min_size=k, max_size=k)))
    special = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1 / 3, 2 / 3])
    uni = st.one_of(special, st.floats(0.0, 1.0, exclude_max=True))
    U = np.array(draw(st.lists(st.lists(uni, min_size=k + 1, max_size=k + 1), min_size=B, max_size=B)))
    return np.array(P), np.array(Q), np.array(C, dtype=np.int64), U


def _pairs(seed, V=5):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    p[0] = 0.0           # a token the target never emits
    q[1] = 0.0           # a token the draft never proposes
    return p / p.sum(), q / q.sum()


def test_registered_as_twin():
    v = resispec.get_verifier("resispec_lookahead", backend="torch")
    assert v.backend == "torch" and v.name == "resispec_lookahead" and v.drafting == "iid"
    assert v.options() == {"proxy": "draft", "gamma": 1.0, "reserve": "lookahead"}


@SETTINGS
@given(data=cases(), k_left=st.integers(1, 5))
def test_schedule_and_reserve_match_numpy(data, k_left):
    P, Q, _, _ = data
    want = lookahead_schedule(P, Q, k_left)
    got = lookahead_schedule_t(torch.from_numpy(P), torch.from_numpy(Q), k_left).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    r_t = lookahead_reserve_t(torch.from_numpy(P), torch.from_numpy(Q), k_left).numpy()
    np.testing.assert_allclose(r_t, lookahead_reserve(P, Q, k_left), rtol=0, atol=1e-10)
    assert np.all(got[:, 0] - got[:, 1] >= 1.0 - LOOKAHEAD_TOL - 1e-12) if k_left > 1 else True   # the tie rule


@SETTINGS
@given(data=cases(), y=st.lists(st.floats(-0.5, 3.0), min_size=4, max_size=4))
def test_psi_and_inverse_match_numpy_counting(data, y):
    """searchsorted look-ups == the numpy reference's O(V) counts, at random points and at the knots."""
    P, Q, _, _ = data
    B = P.shape[0]
    ref, tab = _Psi(P, Q), PsiTable(torch.from_numpy(P), torch.from_numpy(Q))
    ys = np.array(y[:B] + [0.0] * max(0, B - len(y)))[:B]
    L = np.abs(ys)
    knots_L = np.where(ref.valid, ref.knots, 0.0)                  # evaluate exactly at every knot too
    for col in [L] + [knots_L[:, j] for j in range(P.shape[1])]:
        np.testing.assert_allclose(tab.psi(torch.from_numpy(col)).numpy(), ref.psi(col), rtol=0, atol=1e-13)
    for col in [ys] + [np.where(np.isfinite(ref.psi_knots[:, j]), ref.psi_knots[:, j], 1.0)
                       for j in range(P.shape[1])]:
        np.testing.assert_allclose(tab.psi_inv(torch.from_numpy(col)).numpy(), ref.psi_inv(col),
                                   rtol=0, atol=1e-12)


def _ill_conditioned_rows(vn, vt, P, Q, C, tol=1e-10):
    """Rows (B,) where the numpy reserve itself moves by > ``tol`` between the two engines' residuals.

    The look-ahead equation ``L_0 - L_1 = 1`` can hold on a whole interval of
    ``t`` (:func:`test_ill_conditioned_reserve_example`); the
    bisection then lands anywhere in it, decided by round-off.  The torch
    engine's residual ``p_i`` may differ from numpy's by an ulp (sums in a
    different order), so on such rows the (equally exact) reserves differ.
    """
    _, pn, _ = vn.masses(P, Q, C)
    _, pt, _ = vt.masses(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(C))
    pt = pt.numpy()
    k = C.shape[1]
    ill = np.zeros(P.shape[0], dtype=bool)
    for i in range(k - 1):
        close = np.max(np.abs(pn[:, i] - pt[:, i]), axis=1) < 1e-14
        r_n = lookahead_reserve(pn[:, i], Q, k - i)
        r_t = lookahead_reserve(pt[:, i], Q, k - i)          # the numpy solver on the torch residual
        ill |= close & (np.abs(r_n - r_t) > tol)
    return ill


@pytest.mark.parametrize("gamma", GAMMAS)
@SETTINGS
@given(data=cases())
@example(data=FLAT)
def test_decisions_match_numpy(gamma, data):
    """Same uniforms, same decisions and chains to 1e-10, except near-ties and ill-conditioned reserves."""
    P, Q, C, U = data
    vn = resispec.get_verifier("resispec_lookahead", gamma=gamma)
    vt = resispec.get_verifier("resispec_lookahead", backend="torch", gamma=gamma)
    rn = vn.verify(P, Q, C, uniforms=U)
    rt = vt.verify(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(C), uniforms=torch.from_numpy(U))
    a_n, r_n = vn._chain(P, Q, C)
    a_t, r_t = vt._chain(P, Q, C)
    far = (np.abs(a_t - a_n).max(axis=1) > 1e-10) | (np.abs(r_t - r_n).max(axis=1) > 1e-10)
    if far.any():
        ill = _ill_conditioned_rows(vn, vt, P, Q, C)
        assert ill[far].all(), "chains differ by > 1e-10 on a well-conditioned row"
    else:
        ill = np.zeros(P.shape[0], dtype=bool)
    same = (rt.tokens.numpy() == rn.tokens) & (rt.accepted.numpy() == rn.accepted)
    if not same.all():
        assert (near_tie_rows(a_n, r_n, U, DELTA) | ill)[~same].all(), "decisions differ away from a tie"


def test_ill_conditioned_reserve_example():
    """The flat-root case found by hypothesis: both engines stay exact; the reserve is not unique.

    Row ``p = (1,1,2,1,2)/7``, ``q = (1,1,2,2,3)/9``, 2 candidates left:
    ``L_0 - L_1 = 1`` holds for every ``t`` in ``[2/7, 9/14]`` (``psi`` has slope 1
    beyond ``t + 1 >= 9/7``), so a 1-ulp change of ``p`` moves the bisection's
    answer between the ends (numpy: 2/7, torch engine: 9/14).  Enumeration: law == p to 1e-12.
    """
    p = np.array([1, 1, 2, 1, 2.]) / 7
    q = np.array([1, 1, 2, 2, 3.]) / 9
    P, Q = torch.from_numpy(p[None]), torch.from_numpy(q[None])
    ts = torch.linspace(2 / 7, 9 / 14, 11, dtype=torch.float64)
    f = PsiTable(P.expand(11, 5).contiguous(), Q.expand(11, 5).contiguous())
    L0 = f.psi_inv(f.psi(ts) + ts)
    np.testing.assert_allclose((L0 - ts).numpy(), 1.0, atol=1e-12)   # every t on the piece is a root
    v = resispec.get_verifier("resispec_lookahead", backend="torch")
    for k in (2, 3):
        assert np.max(np.abs(resispec.exact_output_law(v, p, q, k) - p)) < 1e-12


def test_decisions_match_numpy_on_larger_vocabulary():
    """V = 2000, B = 16, k = 4, softmax_noise family: every decision identical, reserves to 1e-10."""
    from simulators.families import get_family

    rng = np.random.default_rng(7)
    P, Q = get_family("softmax_noise").sample(rng, n=16, V=2000)
    C = resispec.draw_candidates(Q, 4, "iid", rng)
    U = rng.random((16, 5))
    vn = resispec.get_verifier("resispec_lookahead")
    vt = resispec.get_verifier("resispec_lookahead", backend="torch")
    rn = vn.verify(P, Q, C, uniforms=U)
    rt = vt.verify(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(C), uniforms=torch.from_numpy(U))
    np.testing.assert_array_equal(rt.tokens.numpy(), rn.tokens)
    np.testing.assert_array_equal(rt.accepted.numpy(), rn.accepted)
    for k_left in (2, 4):
        np.testing.assert_allclose(lookahead_reserve_t(torch.from_numpy(P), torch.from_numpy(Q), k_left).numpy(),
                                   lookahead_reserve(P, Q, k_left), rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)], ids=["f64", "f32"])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_exact_law_by_enumeration(dtype, tol, gamma):
    """Enumerating every candidate tuple, the torch path (chain, decisions) emits p exactly."""
    v = resispec.get_verifier("resispec_lookahead", backend="torch", dtype=dtype, gamma=gamma)
    for seed, k, V in [(0, 1, 5), (1, 2, 5), (2, 3, 5), (3, 4, 4)]:
        p, q = _pairs(seed, V)
        law = resispec.exact_output_law(v, p, q, k)
        assert np.max(np.abs(law - p)) < tol, (k, np.max(np.abs(law - p)))
        law_f = resispec.exact_output_law(NumpyFacade(v), p, q, k)
        assert np.max(np.abs(law_f - p)) < tol


def test_exact_acceptance_matches_numpy():
    """Acceptance by enumeration, torch vs numpy, and above rrs (the reserve does something)."""
    for seed, k in [(1, 2), (2, 3), (3, 4)]:
        p, q = _pairs(seed)
        a_t = resispec.acceptance_probability(resispec.get_verifier("resispec_lookahead", backend="torch"), p, q, k)
        a_n = resispec.acceptance_probability(resispec.get_verifier("resispec_lookahead"), p, q, k)
        a_r = resispec.acceptance_probability(resispec.get_verifier("rrs"), p, q, k)
        assert abs(a_t - a_n) < 1e-10
        assert a_t >= a_r - 1e-12


def _mc_pvalue(v, p, q, k, n, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    P = torch.from_numpy(np.tile(p, (n, 1))).to(dtype)
    Q = torch.from_numpy(np.tile(q, (n, 1))).to(dtype)
    c = draw_candidates(Q, k, "iid", gen)
    out = v.verify(P, Q, c, gen)
    counts = np.bincount(out.tokens.numpy(), minlength=p.size)
    keep = p > 0
    if counts[~keep].sum() > 0:      # emitted a token of target probability 0: certainly biased
        return 0.0
    return stats.chisquare(counts[keep], n * p[keep] / p[keep].sum()).pvalue


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_monte_carlo_chi_square(dtype):
    v = resispec.get_verifier("resispec_lookahead", backend="torch")
    p, q = _pairs(5, V=6)
    assert _mc_pvalue(v, p, q, 3, 20_000, 11, dtype) > 1e-3


def test_identical_rows_share_one_schedule_exactly():
    """The CPU shortcut for identical nodes gives the same reserve as the row-by-row solve."""
    p, q = _pairs(5, V=6)
    P, Q = torch.from_numpy(np.tile(p, (7, 1))), torch.from_numpy(np.tile(q, (7, 1)))
    shared = lookahead_reserve_t(P, Q, 3)
    Q2 = Q.clone()
    Q2[-1] = torch.from_numpy(_pairs(6, V=6)[1])                   # one different row: no shortcut
    each = lookahead_reserve_t(P, Q2, 3)
    assert torch.equal(shared[:-1], each[:-1])
    assert torch.equal(shared, lookahead_schedule_t(P, Q, 3)[:, 1])


def test_monte_carlo_detects_biased_mutant():
    """The same test catches a biased rule: the reserve with the wrong sign (``m`` may exceed ``p_i``)."""
    from resispec.torch_backend.base import TorchRule
    from resispec.verifiers.resispec import ResiSpecLookahead

    class Mutant(ResiSpecLookahead):
        def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, out=None, state=None):
            if i == k - 1:
                return torch.minimum(p_i, q_i)
            _, lam = self.reserve(i, k, p_i, q_i)
            return torch.minimum(q_i, p_i + lam[:, None] * q_i)          # biased: exceeds p_i

    class MutantTorch(TorchRule):                                        # a user's rule on tensors
        rule_class = Mutant
        name = "mutant"

    p, q = _pairs(5, V=6)
    assert _mc_pvalue(MutantTorch(), p, q, 3, 20_000, 12, torch.float64) < 1e-6


@pytest.mark.parametrize("kwargs,err,match", [
    ({"proxy": "tempered"}, ValueError, "proxy"),
    ({"proxy_options": {"tau": 2.0}}, ValueError, "proxy"),
    ({"gamma": -1.0}, ValueError, "gamma"),
    ({"gamma": "1"}, TypeError, "gamma"),
    ({"reserve": "fixed_point"}, ValueError, "reserve"),
    ({"drafting": "any"}, ValueError, "drafting"),
    ({"dtype": torch.float16}, ValueError, "dtype"),
])
def test_bad_options(kwargs, err, match):
    with pytest.raises(err, match=match):
        resispec.get_verifier("resispec_lookahead", backend="torch", **kwargs)


def test_schedule_rejects_bad_k():
    p = torch.full((1, 3), 1 / 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="k must be"):
        lookahead_schedule_t(p, p, 0)


def test_gamma_zero_is_rrs():
    p, q = _pairs(2)
    rng = np.random.default_rng(0)
    c = resispec.draw_candidates(np.tile(q, (5, 1)), 3, "iid", rng)
    P, Q = np.tile(p, (5, 1)), np.tile(q, (5, 1))
    a0, _ = resispec.get_verifier("resispec_lookahead", backend="torch", gamma=0.0)._chain(P, Q, c)
    ar, _ = resispec.get_verifier("rrs", backend="torch")._chain(P, Q, c)
    np.testing.assert_allclose(a0, ar, rtol=0, atol=1e-15)


def _count_by_scan(rows_sorted, x, strict):
    """The numpy reference's former O(V) count, kept as the oracle of the binary search."""
    return np.sum((rows_sorted < x[:, None]) if strict else (rows_sorted <= x[:, None]), axis=1)


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 5), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_numpy_binary_search_counts_like_the_scan(B, V, seed):
    from resispec._xp import count_sorted as _count_sorted

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.integers(0, 5, (B, V)).astype(float), axis=1)
    rows[:, V - rng.integers(0, V + 1):] = np.inf                    # +inf tail (q = 0 tokens)
    x = np.concatenate([rng.integers(-1, 6, B).astype(float), rng.random(B) * 5])
    rows2 = np.concatenate([rows, rows])
    import resispec._xp as la

    for strict in (True, False):
        for scan_max in (0, la.SCAN_MAX_V):                           # binary search and scan paths
            monkey = la.SCAN_MAX_V
            la.SCAN_MAX_V = scan_max
            try:
                got = _count_sorted(rows2, x, strict)
            finally:
                la.SCAN_MAX_V = monkey
            np.testing.assert_array_equal(got, _count_by_scan(rows2, x, strict))


@pytest.mark.parametrize("V,B,k", [(6, 30, 3), (300, 10, 4), (3000, 4, 3)])
def test_numpy_schedule_unchanged_by_binary_search(monkeypatch, V, B, k):
    """The numpy schedule with the binary search == with the former O(V) scan, to 1e-12."""
    import resispec._xp as xpmod
    import resispec.verifiers.lookahead as la

    rng = np.random.default_rng(V)
    p = rng.dirichlet(np.full(V, 0.5), B)
    q = rng.dirichlet(np.full(V, 0.5), B)
    q[:, :2] = 0.0
    q /= q.sum(axis=1, keepdims=True)
    monkeypatch.setattr(xpmod, "SCAN_MAX_V", 0)                        # binary search at every V
    fast = la.lookahead_schedule(p, q, k)
    monkeypatch.setattr(la, "count_sorted", _count_by_scan)
    np.testing.assert_allclose(fast, la.lookahead_schedule(p, q, k), rtol=0, atol=1e-12)
