"""The real draft/target pair: stdlib Kneser-Ney n-gram models."""

import numpy as np
import pytest

from simulators import get_family
from simulators import ngram


@pytest.fixture(scope="module")
def pair():
    return ngram.load_pair()


def test_vocab_and_laws(pair):
    assert pair.V >= 2000 and len(pair.vocab) == pair.V and pair.vocab[0] == "<unk>"
    rng = np.random.default_rng(0)
    ctx = pair.heldout_contexts(64, rng)
    assert ctx.shape == (64, pair.context_length) and ctx.dtype == np.int64
    p, q = pair.laws(ctx)
    for a in (p, q):
        assert a.shape == (64, pair.V) and a.dtype == np.float64
        assert np.all(a > 0) and np.allclose(a.sum(1), 1.0, atol=1e-12)
    # variable-length contexts, including empty (unigram) ones
    p2, q2 = pair.laws([[], ctx[0][-1:], list(ctx[1])])
    assert p2.shape == (3, pair.V) and np.allclose(p2.sum(1), 1)
    # the draft is a different (lower-order) model
    assert np.mean(0.5 * np.abs(p - q).sum(1)) > 0.05


def test_roundtrip_and_bad_ids(pair):
    src = "def foo(self, x):\n    return x + 1\n"
    ids = pair.encode(src)
    assert ids.dtype == np.int64 and pair.decode(ids) == src
    with pytest.raises(ValueError, match="contexts"):
        pair.laws([[0, pair.V]])
    with pytest.raises(ValueError, match="contexts"):
        pair.laws(np.array([[-1, 2, 3]]))
    with pytest.raises(ValueError, match="ids"):
        pair.decode([pair.V + 5])
    with pytest.raises(ValueError, match="vocab_size"):
        ngram.load_pair(vocab_size=10)


def _naive_kn(counts, order, V, ctx):
    """Scalar, dict-based interpolated KN (reference for KNModel.laws)."""
    def table(kind, m):
        return dict(zip(counts[f"{kind}{m}_keys"].tolist(), counts[f"{kind}{m}_counts"].tolist()))

    def disc(c):
        c = np.array(list(c.values()))
        n1, n2 = np.sum(c == 1), np.sum(c == 2)
        return n1 / (n1 + 2 * max(n2, 1))

    uni = table("cont", 1) if order > 1 else table("raw", 1)
    D = disc(uni)
    tot = sum(uni.values())
    P = np.full(V, D * len(uni) / tot / V)
    for w, c in uni.items():
        P[w] += max(c - D, 0) / tot
    for m in range(2, order + 1):
        t = table("raw" if m == order else "cont", m)
        D = disc(t)
        h = 0
        for tok in ctx[len(ctx) - (m - 1):]:
            h = h * V + int(tok)
        ws = {key % V: c for key, c in t.items() if key // V == h}
        if not ws:
            continue
        tot = sum(ws.values())
        new = P * D * len(ws) / tot
        for w, c in ws.items():
            new[w] += max(c - D, 0) / tot
        P = new
    return P / P.sum()


def test_kn_matches_naive_reference(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    counts = ngram._train_counts(3, 2000, None, 1_500_000)
    V = len(counts["vocab"])
    model = ngram.KNModel.from_counts(counts, 3, V)
    held = counts["held_tokens"]
    rng = np.random.default_rng(1)
    pos = rng.integers(2, held.size, size=3)
    ctx = np.stack([held[i - 2:i] for i in pos])
    fast = model.laws(ctx, np.full(3, 2))
    for i in range(3):
        np.testing.assert_allclose(fast[i], _naive_kn(counts, 3, V, ctx[i]), rtol=1e-10, atol=1e-15)


def test_cache_written_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = ngram.load_pair(max_bytes=2_000_000)
    files = list((tmp_path / "resispec").iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"   # no temp file left behind
    ngram.load_pair.cache_clear()
    b = ngram.load_pair(max_bytes=2_000_000)
    assert b.info["source"] == "cache" and b.vocab == a.vocab
    ctx = a.heldout_contexts(5, np.random.default_rng(0))
    np.testing.assert_array_equal(a.laws(ctx)[0], b.laws(ctx)[0])


def test_family_registered():
    fam = get_family("ngram")
    p, q = fam.sample(np.random.default_rng(0), n=4, temperature=0.7)
    assert p.shape == (4, fam.fixed_vocab) and np.allclose(q.sum(1), 1)
    p1, q1 = ngram.real_nodes(4, seed=3, temperature=1.5)
    p2, q2 = ngram.real_nodes(4, seed=3, temperature=1.5)
    np.testing.assert_array_equal(p1, p2)
    with pytest.raises(ValueError, match="temperature"):
        ngram.real_nodes(2, temperature=0)
