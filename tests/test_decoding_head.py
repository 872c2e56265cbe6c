"""The feature-head draft (EAGLE-style, :mod:`resispec.decoding.feature`) on a tiny model: no downloads.

Exactness never depends on the draft; these tests check that it also holds with a draft that READS the
target's features: the exact joint law of the emitted tokens equals the target's for every registry
verifier, the engine hands the head the target's feature at the right position (checked against a
cache-free forward), greedy equals target greedy, the laws are normalised, cover V and are deterministic
given the seed, the build is cached and checksummed, and bad options are clear errors.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from resispec import get_verifier
from resispec.decoding import feature
from resispec.decoding.drafts import check_draft_spec, make_draft
from resispec.decoding.engine import autoregressive_decode, speculative_decode
from resispec.decoding.feature import HeadConfig, load_head, target_features
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.decoding.tree import ROOT, DraftTree
from resispec.verifiers.registry import available_verifiers

from _decoding_tiny import full_logits, tiny_model
from test_decoding_drafts import CharTok

torch.set_num_threads(1)
V = 6
PROMPT = [1, 2, 3]
CFG = HeadConfig(tokens=1024, seq_len=16, vocab=5, hidden=16, epochs=40, lr=1e-2, floor=0.05, seed=0)


def _corpus(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        (root / f"m{i}.py").write_text("".join("abcdef"[j] for j in rng.integers(0, V, 120)) + "abcabcab" * 10)
    return root


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen2", vocab=V, seed=5, scale=3.0)


@pytest.fixture(scope="module")
def head(target, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("head")
    return load_head(target, CharTok(V), CFG, corpus=_corpus(tmp), cache=tmp / "cache", progress=False)


def _laws(target, head, sampling, ctx=PROMPT):
    """Target and head laws at ``ctx`` and after each first token, the head fed the cache-free feature."""
    p0 = process_logits(full_logits(target, ctx)[None], sampling)[0]
    p1 = np.stack([process_logits(full_logits(target, ctx + [a])[None], sampling)[0] for a in range(V)])
    s, t = head.session(sampling), DraftTree()
    s.observe_target(target_features(target, ctx)[-2])
    q0 = s.level(ctx, t, [ROOT])[0]
    q1 = s.level(ctx, t, [t.add(ROOT, a) for a in range(V)])
    return p0, q0, p1, q1


def test_laws_are_normalised_cover_v_and_deterministic(target, head, tmp_path):
    for T in (1.0, 0.7):
        p0, q0, p1, q1 = _laws(target, head, SamplingConfig(T))
        for q in (q0[None], q1):
            assert np.all(q > 0) and np.allclose(q.sum(1), 1, atol=1e-12)
    again = load_head(target, CharTok(V), CFG, corpus=_corpus(tmp_path), cache=tmp_path / "c2", progress=False)
    np.testing.assert_array_equal(_laws(target, head, SamplingConfig(1.0))[1],
                                  _laws(target, again, SamplingConfig(1.0))[1])
    other = load_head(target, CharTok(V), HeadConfig(**{**CFG.__dict__, "seed": 1}), corpus=_corpus(tmp_path),
                      cache=tmp_path / "c3", progress=False)
    assert not np.array_equal(_laws(target, head, SamplingConfig(1.0))[1], _laws(target, other, SamplingConfig(1.0))[1])
    assert head.weights == sum(p.numel() for p in head.head.parameters()) + 5 * 32


def test_the_head_learns_the_target_better_than_its_floor(target, head):
    """Training is not a no-op: at 30 random contexts the head's root law (fed the true feature) accepts more
    of the target's mass, sum min(p, q), than the floor law b it falls back to."""
    rng = np.random.default_rng(1)
    got, floor = [], []
    for _ in range(30):
        ctx = [int(t) for t in rng.integers(0, V, 8)]
        p, q = _laws(target, head, SamplingConfig(1.0), ctx)[:2]
        got.append(np.minimum(p, q).sum())
        floor.append(np.minimum(p, head.base).sum())
    assert np.mean(got) > np.mean(floor) + 0.015


@pytest.mark.parametrize("name", available_verifiers())
@pytest.mark.parametrize("depth", [1, 2])
def test_exact_joint_law_with_the_head_draft_is_the_targets(target, head, name, depth):
    from exactness.tree import exact_pair_law

    p0, q0, p1, q1 = _laws(target, head, SamplingConfig(1.0))
    assert 0.5 * np.abs(p0 - q0).sum() > 0.02  # the head really differs from the target
    joint = exact_pair_law(get_verifier(name), p0, q0, p1, q1, k=2, depth=depth)
    np.testing.assert_allclose(joint, p0[:, None] * p1, rtol=0, atol=1e-12)


def test_engine_feeds_the_head_the_targets_feature_at_the_right_position(target, head):
    sampling = SamplingConfig(1.0)
    res = speculative_decode(target, head, PROMPT, get_verifier("resispec"), "2,1", sampling=sampling,
                             max_new_tokens=12, rng=np.random.default_rng(3), record=True)
    roots = [n for n in res.nodes if n["depth"] == 0]
    assert len(roots) == res.target_calls >= 3
    np.testing.assert_allclose(roots[0]["q"], head.base, rtol=0, atol=1e-15)  # no feature before the prefill
    done = 0
    for j, node in enumerate(roots[1:], start=1):
        done += res.tokens_per_call[j - 1]
        ctx = PROMPT + res.tokens[:done]
        q, _ = head.laws(torch.as_tensor(target_features(target, ctx)[-2:-1]), [ctx[-1]])
        np.testing.assert_allclose(node["q"], q[0], rtol=0, atol=1e-5)
    assert len(target.base_model.norm._forward_hooks) == 0  # the feature hook lives for one pass only


def test_engine_samples_the_target_law_with_the_head(target, head):
    sampling = SamplingConfig(1.0)
    p0 = process_logits(full_logits(target, PROMPT)[None], sampling)[0]
    p1 = np.stack([process_logits(full_logits(target, PROMPT + [a])[None], sampling)[0] for a in range(V)])
    law, n = (p0[:, None] * p1).ravel(), 500
    counts = np.zeros(V * V)
    for i in range(n):
        toks = speculative_decode(target, head, PROMPT, get_verifier("resispec"), "2,1", sampling=sampling,
                                  max_new_tokens=2, rng=np.random.default_rng([7, i])).tokens
        counts[toks[0] * V + toks[1]] += 1
    keep = law * n >= 5
    obs, exp = np.append(counts[keep], counts[~keep].sum()), np.append(law[keep], law[~keep].sum()) * n
    assert stats.chisquare(obs[exp > 0], exp[exp > 0]).pvalue > 1e-3


@pytest.mark.parametrize("name", available_verifiers())
def test_greedy_with_the_head_draft_equals_target_greedy(target, head, name):
    g = SamplingConfig(0.0)
    want = autoregressive_decode(target, PROMPT, sampling=g, max_new_tokens=10, rng=np.random.default_rng(0)).tokens
    got = speculative_decode(target, head, PROMPT, get_verifier(name), "2,2", sampling=g, max_new_tokens=10,
                             rng=np.random.default_rng(1))
    assert got.tokens == want and sum(got.tokens_per_call) == 10


def test_build_is_cached_and_checksummed(target, tmp_path, monkeypatch):
    root, cache = _corpus(tmp_path), tmp_path / "cache"
    load_head(target, CharTok(V), CFG, corpus=root, cache=cache, progress=False)
    heads, feats = sorted(cache.glob("head-*.npz")), sorted(cache.glob("features-*.npz"))
    assert len(heads) == len(feats) == 1 and all(feature._load_checked(p) is not None for p in heads + feats)

    def boom(*a, **k):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(feature, "collect_features", boom)
    monkeypatch.setattr(feature, "train_head", boom)
    load_head(target, CharTok(V), CFG, corpus=root, cache=cache, progress=False)
    heads[0].write_bytes(heads[0].read_bytes()[:-9] + b"corrupted")  # checksum mismatch -> retrain, features reused
    monkeypatch.undo()
    monkeypatch.setattr(feature, "collect_features", boom)
    load_head(target, CharTok(V), CFG, corpus=root, cache=cache, progress=False)


@pytest.mark.parametrize("opts,match", [
    ("head:tokens=0", "tokens must be an integer >= 64"),
    ("head:floor=1", r"floor must be a number in \[1e-06, 1\)"),
    ("head:floor=1e-320", "floor must be"),
    ("head:seed=100000000000000000000", r"seed must be an integer in \[0, 4294967295\]"),
    ("head:hidden=99999999999", "hidden must be an integer in"),
    ("head:floor=nan", "floor must be"),
    ("head:lr=-1", "lr must be"),
    ("head:vocab=2.5", "vocab must be an integer"),
    ("head:depth=3", r"unknown option\(s\) \['depth'\]"),
    ("head:corpus=/nonexistent/x", "does not exist"),
    ("head:corpus=", "corpus= is empty"),
])
def test_bad_head_options_are_clear_errors(opts, match):
    with pytest.raises(ValueError, match=match):
        check_draft_spec(opts)


def test_head_needs_target_and_a_corpus_long_enough(target, tmp_path):
    with pytest.raises(ValueError, match="pass target= and tokenizer="):
        make_draft("head")
    short = tmp_path / "short"
    short.mkdir()
    (short / "a.py").write_text("abcdefabcdef")  # 12 tokens < seq_len
    with pytest.raises(ValueError, match="no corpus file holds 16 tokens"):
        load_head(target, CharTok(V), CFG, corpus=short, cache=tmp_path / "c", progress=False)
    assert not list((tmp_path / "c").glob("head-*")) and not list((tmp_path / "c").glob("features-*"))
    with pytest.raises(ValueError, match="vocab=64 exceeds the 6 distinct tokens"):
        load_head(target, CharTok(V), HeadConfig(**{**CFG.__dict__, "vocab": 64}), corpus=_corpus(tmp_path),
                  cache=tmp_path / "c4", progress=False)


def test_features_grow_and_a_killed_build_resumes(target, tmp_path, monkeypatch):
    """A larger build reads a smaller one's chunks; a build killed mid-way keeps every 16 chunks it finished."""
    root, cache = _corpus(tmp_path), tmp_path / "cache"
    calls = []
    real = feature.target_features

    def counted(t, ids):
        calls.append(1)
        if len(calls) > 20 and fail[0]:
            raise KeyboardInterrupt("killed")
        return real(t, ids)

    fail = [True]
    monkeypatch.setattr(feature, "target_features", counted)
    small = HeadConfig(**{**CFG.__dict__, "tokens": 320})            # 20 chunks of 16 tokens
    with pytest.raises(KeyboardInterrupt):
        load_head(target, CharTok(V), HeadConfig(**{**CFG.__dict__, "tokens": 512}), corpus=root, cache=cache,
                  progress=False)
    assert not list(cache.glob("head-*"))                              # no head from a killed build
    fail[0], calls[:] = False, []
    load_head(target, CharTok(V), small, corpus=root, cache=cache, progress=False)
    assert len(calls) == 4                                             # 16 saved before the kill, 4 more
    calls.clear()
    big = load_head(target, CharTok(V), HeadConfig(**{**CFG.__dict__, "tokens": 512}), corpus=root, cache=cache,
                    progress=False)
    assert len(calls) == 12                                            # chunks 20..31 only
    fresh = load_head(target, CharTok(V), HeadConfig(**{**CFG.__dict__, "tokens": 512}), corpus=root,
                      cache=tmp_path / "fresh", progress=False)
    for a, b in zip(big.head.parameters(), fresh.head.parameters()):  # the resumed build = an uninterrupted one
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_a_target_without_a_final_norm_is_a_clear_error(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from resispec.decoding.kv import CachedModel

    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2, n_positions=64)).eval()
    with pytest.raises(ValueError, match="no final norm at .base_model.norm"):
        load_head(gpt, CharTok(V), CFG, corpus=_corpus(tmp_path), cache=tmp_path / "c", progress=False)
    with pytest.raises(ValueError, match="no final norm at .base_model.norm"):
        CachedModel(gpt, keep_features=True)


def test_laws_sum_to_one_in_float64_at_a_large_vocabulary():
    """The sub-vocabulary softmax runs in float64: a float32 one drifts by ~1e-6 at |S| = 8192 (real target)."""
    from resispec.decoding.feature import HeadDraft, _head_module, _parts

    tgt = tiny_model("qwen2", vocab=16384, seed=1)
    _, _, normw, eps = _parts(tgt)
    torch.manual_seed(0)
    state = {k: v.detach().numpy() for k, v in _head_module(32, 16, normw, eps).state_dict().items()}
    state["vocab"] = np.arange(0, 16384, 2)
    d = HeadDraft(tgt, state, np.full(16384, 1 / 16384), CFG)
    q, _ = d.laws(torch.randn(3, 32) * 30, [1, 2, 3])
    assert q.shape == (3, 16384) and np.abs(q.sum(1) - 1).max() < 1e-12 and q.min() > 0


def test_numpy_numbers_are_accepted_as_plain_ones():
    cfg = HeadConfig(tokens=np.int64(256), lr=np.float32(0.01))
    assert type(cfg.tokens) is int and type(cfg.lr) is float


def test_a_head_refuses_another_target_and_a_wrong_feature(target, head):
    other = tiny_model("qwen2", vocab=V, seed=6, scale=3.0)          # same V and H, other weights
    with pytest.raises(ValueError, match="built on another target model"):
        speculative_decode(other, head, PROMPT, get_verifier("rrs"), "1", sampling=SamplingConfig(1.0),
                           max_new_tokens=2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"expected \(32,\)"):
        head.session(SamplingConfig(1.0)).observe_target(np.zeros(16))


def test_seq_len_above_the_targets_context_is_refused(tmp_path):
    short = tiny_model("qwen2", vocab=V, seed=5, ctx=32)
    with pytest.raises(ValueError, match="seq_len=64 exceeds the target's context of 32"):
        load_head(short, CharTok(V), HeadConfig(**{**CFG.__dict__, "seq_len": 64}), corpus=_corpus(tmp_path),
                  cache=tmp_path / "c", progress=False)


def test_a_killed_save_or_a_garbled_sidecar_is_a_cache_miss_never_an_error(target, tmp_path):
    from resispec.decoding import ngram

    root, cache = _corpus(tmp_path), tmp_path / "cache"
    load_head(target, CharTok(V), CFG, corpus=root, cache=cache, progress=False)
    feats = next(cache.glob("features-*.npz"))
    assert feature._load_checked(feats) is not None
    feats.write_bytes(feats.read_bytes()[:1000])                       # a truncated file: a miss
    assert feature._load_checked(feats) is None
    for stamp in cache.glob("*.sha256"):                               # the n-gram counts' sidecar
        stamp.write_bytes(b"\xff\xfe")
    counts = ngram.load_counts(CharTok(V), V, corpus=root, order=1, cache=cache, progress=False)
    assert counts.unigram.sum() > 0
