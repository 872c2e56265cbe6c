import numpy as np
import pytest

from simulators import FAMILIES, divergence, divergence_table, family_divergence, get_family, truncate, truncated_family

NEW = ["dirichlet", "temp_mismatch", "softmax_noise_top_k", "softmax_noise_top_p"]


@pytest.mark.parametrize("name", ["softmax_noise", "zipf", "shifted"] + NEW)
@pytest.mark.parametrize("T", [0.7, 1.5])
def test_family_rows_are_laws(name, T):
    p, q = get_family(name).sample(np.random.default_rng(0), n=5, V=200, temperature=T)
    assert p.shape == q.shape == (5, 200)
    assert np.all(p >= 0) and np.all(q >= 0)
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-12)
    np.testing.assert_allclose(q.sum(1), 1, atol=1e-12)


def test_family_is_seeded():
    a = get_family("dirichlet").sample(np.random.default_rng(3), n=2, V=50)
    b = get_family("dirichlet").sample(np.random.default_rng(3), n=2, V=50)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_truncate_top_k_and_top_p():
    x = np.array([0.05, 0.4, 0.1, 0.3, 0.15])
    t = truncate(x, top_k=2)
    np.testing.assert_allclose(t, [0, 0.4 / 0.7, 0, 0.3 / 0.7, 0])
    t = truncate(x, top_p=0.7)            # 0.4 + 0.3 reaches 0.7
    assert set(np.flatnonzero(t)) == {1, 3}
    t = truncate(x, top_p=0.71)           # needs the next token too
    assert set(np.flatnonzero(t)) == {1, 3, 4}
    t = truncate(x, top_p=0.01)           # always keeps the top token
    np.testing.assert_allclose(t, [0, 1, 0, 0, 0])


def test_truncated_family_applies_to_both_sides():
    p, q = get_family("softmax_noise_top_k").sample(np.random.default_rng(0), n=4, V=300, top_k=10)
    assert np.all((p > 0).sum(1) == 10) and np.all((q > 0).sum(1) == 10)
    fam = truncated_family("zipf", top_p=0.5, register=False)
    assert fam.name == "zipf_top_p" and fam.name not in FAMILIES
    p, q = fam.sample(np.random.default_rng(0), n=3, V=300)
    base = get_family("zipf").sample(np.random.default_rng(0), n=3, V=300)
    np.testing.assert_allclose(p, truncate(base[0], top_p=0.5))
    np.testing.assert_allclose(q, truncate(base[1], top_p=0.5))


def test_divergence_values_and_dial():
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    d = divergence(p, q)
    assert d.tv[0] == pytest.approx(0.5)
    assert d.kl[0] == pytest.approx(np.log(2))
    assert np.isinf(divergence(q, p).kl[0])
    tvs = [family_divergence("softmax_noise", np.random.default_rng(0), n=32, V=300, noise=s).tv for s in (0.2, 0.6, 1.5)]
    assert tvs[0] < tvs[1] < tvs[2]
    rows, md = divergence_table(["zipf", "dirichlet"], (1.0,), V=100, n=4)
    assert len(rows) == 2 and "| `zipf` | 1 |" in md


def test_bad_family_input():
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        get_family("nope")
    with pytest.raises(ValueError, match="no parameter"):
        get_family("dirichlet").sample(np.random.default_rng(0), n=2, V=10, noise=1.0)
    with pytest.raises(ValueError, match="top_k"):
        truncate(np.ones(3) / 3, top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        truncate(np.ones(3) / 3, top_p=1.5)
    with pytest.raises(ValueError, match="top_k and/or top_p"):
        truncated_family("zipf", register=False)
    with pytest.raises(ValueError, match="unknown family"):
        truncated_family("nope", top_k=3)
