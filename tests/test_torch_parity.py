"""Same uniforms, same decisions: torch (CPU, float64) against the numpy reference.

Cases are drawn by hypothesis from small integer weights, so laws have ties
and zeros, and uniforms include exact thresholds such as 0.5.  Tie rule
(:mod:`resispec.torch_backend`): a row may differ only if one of its
uniforms lies within 1e-9 of a threshold of the numpy chain.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import resispec  # noqa: E402
from resispec.sampling import inverse_cdf as np_inverse_cdf  # noqa: E402
from resispec.torch_backend import draw_candidates as t_draw  # noqa: E402
from resispec.torch_backend import inverse_cdf as t_inverse_cdf  # noqa: E402

from _torch_cases import CONFIGS, config_id, near_tie_rows, numpy_options  # noqa: E402

DELTA = 1e-9
SETTINGS = settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw, drafting="iid"):
    V = draw(st.integers(2, 7))
    B = draw(st.integers(1, 4))
    k = draw(st.integers(1, min(4, V) if drafting == "without_replacement" else 4))
    weights = st.lists(st.integers(0, 3), min_size=V, max_size=V)
    P, Q, C = [], [], []
    for _ in range(B):
        wp = np.array(draw(weights.filter(lambda w: sum(w) > 0)), dtype=float)
        wq = np.array(draw(weights.filter(lambda w: sum(1 for x in w if x > 0) >= k)), dtype=float)
        P.append(wp / wp.sum())
        Q.append(wq / wq.sum())
        support = [int(i) for i in np.flatnonzero(wq)]
        if drafting == "without_replacement":
            C.append(draw(st.permutations(support))[:k])
        else:
            C.append(draw(st.lists(st.sampled_from(support), min_size=k, max_size=k)))
    special = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1 / 3, 2 / 3])
    uni = st.one_of(special, st.floats(0.0, 1.0, exclude_max=True))
    U = np.array(draw(st.lists(st.lists(uni, min_size=k + 1, max_size=k + 1), min_size=B, max_size=B)))
    return np.array(P), np.array(Q), np.array(C, dtype=np.int64), U


def _check_parity(name, opts, P, Q, C, U):
    vn = resispec.get_verifier(name, **numpy_options(opts))
    vt = resispec.get_verifier(name, backend="torch", **opts)
    rn = vn.verify(P, Q, C, uniforms=U)
    rt = vt.verify(torch.from_numpy(P), torch.from_numpy(Q), torch.from_numpy(C), uniforms=torch.from_numpy(U))
    same = (rt.tokens.numpy() == rn.tokens) & (rt.accepted.numpy() == rn.accepted)
    if not same.all():
        a, r = vn._chain(P, Q, C)
        excused = near_tie_rows(a, r, U, DELTA)
        assert excused[~same].all(), f"{name} {opts}: decisions differ away from a tie"
    return same


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] != "rrs_wor"], ids=config_id)
@SETTINGS
@given(data=cases())
def test_decisions_match_numpy(cfg, data):
    _check_parity(*cfg, *data)


@SETTINGS
@given(data=cases("without_replacement"))
def test_decisions_match_numpy_without_replacement(data):
    _check_parity("rrs_wor", {}, *data)


def test_parity_on_large_vocabulary():
    """V = 5000, B = 64: every row identical (no near-ties at this draw) for every verifier."""
    rng = np.random.default_rng(7)
    from simulators.families import get_family

    P, Q = get_family("softmax_noise").sample(rng, n=64, V=5000)
    for name in ["sps", "rrs", "target_only", "kseq", "resispec"]:
        C = resispec.draw_candidates(Q, 4, "iid", rng)
        U = rng.random((64, 5))
        same = _check_parity(name, {}, P, Q, C, U)
        assert same.all(), name


@settings(deadline=None, max_examples=50)
@given(st.integers(1, 5), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_inverse_cdf_bit_compatible(B, V, seed):
    rng = np.random.default_rng(seed)
    law = rng.integers(0, 4, size=(B, V)).astype(float)
    law[:, rng.integers(0, V)] += 1.0
    law /= law.sum(axis=1, keepdims=True)
    u = np.concatenate([rng.random((B, 3)), np.tile([0.0, 0.5, np.nextafter(1.0, 0.0)], (B, 1))], axis=1)
    got = t_inverse_cdf(torch.from_numpy(law), torch.from_numpy(u)).numpy()
    np.testing.assert_array_equal(got, np_inverse_cdf(law, u))


@pytest.mark.parametrize("drafting", ["iid", "without_replacement"])
def test_draw_candidates_same_uniforms_same_draws(drafting):
    rng = np.random.default_rng(1)
    q = rng.dirichlet(np.ones(9), size=20)
    U = np.random.default_rng(2).random((20, 4))
    want = resispec.draw_candidates(q, 4, drafting, np.random.default_rng(2))
    got = t_draw(torch.from_numpy(q), 4, drafting, uniforms=torch.from_numpy(U))
    np.testing.assert_array_equal(got.numpy(), want)
    g = torch.Generator().manual_seed(0)
    c = t_draw(torch.from_numpy(q), 4, drafting, g)
    assert c.dtype == torch.int64 and c.shape == (20, 4)
    if drafting == "without_replacement":
        assert all(len(set(row)) == 4 for row in c.tolist())


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c[0] != "rrs_wor"], ids=config_id)
def test_decisions_match_numpy_seeded_sweep(cfg):
    """Many rows with ties, zeros and exact-threshold uniforms (0.25, 0.5, ...): only near-ties differ."""
    rng = np.random.default_rng(5)
    for _ in range(8):
        V, B, k = int(rng.integers(2, 8)), 50, int(rng.integers(1, 5))
        P = rng.integers(0, 4, (B, V)).astype(float)
        P[:, 0] += 1
        Q = rng.integers(0, 4, (B, V)).astype(float)
        Q[:, 1] += 1
        P /= P.sum(1, keepdims=True)
        Q /= Q.sum(1, keepdims=True)
        C = resispec.draw_candidates(Q, k, "iid", rng)
        special = rng.choice([0.0, 0.25, 0.5, 0.75, 1 / 3, 2 / 3], (B, k + 1))
        U = np.where(rng.random((B, k + 1)) < 0.5, special, rng.random((B, k + 1)))
        _check_parity(*cfg, P, Q, C, U)
