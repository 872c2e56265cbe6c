"""The draft interface and the n-gram draft (tiny model, tiny tokenizer, tiny corpus; no downloads).

Exactness does not depend on the draft: with laws taken from the n-gram draft's own session at the tree's
contexts, the exact joint law of the first two emitted tokens (enumeration, ``exactness.tree``) equals the
target's for every registry verifier; the engine draws from exactly those laws; greedy equals target greedy.
"""

import numpy as np
import pytest
import torch
from scipy import stats

from resispec import get_verifier
from resispec.decoding import ngram
from resispec.decoding.drafts import (Draft, DraftSession, ModelDraft, check_draft_spec, make_draft,
                                      parse_draft_spec)
from resispec.decoding.engine import autoregressive_decode, check_pair, speculative_decode
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.decoding.ngram import NgramConfig, NgramCounts, NgramDraft, load_counts
from resispec.decoding.tree import ROOT, DraftTree
from resispec.verifiers.base import Verifier
from resispec.verifiers.registry import available_verifiers

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
ALPHABET = "abcdefghijklmnop"


class CharTok:
    """A character tokenizer over the first ``V`` letters (other characters are dropped)."""

    def __init__(self, V):
        self.V = V

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ALPHABET.index(c) for c in text if c in ALPHABET[:self.V]]}

    def get_vocab(self):
        return {c: i for i, c in enumerate(ALPHABET[:self.V])}


def corpus(tmp_path, texts=("abcabcabd\n", "bacd ddab cab\n", "")):
    root = tmp_path / "corpus"
    (root / "pkg").mkdir(parents=True)
    for i, t in enumerate(texts):
        (root / ("pkg" if i % 2 else "") / f"m{i}.py").write_text(t)
    (root / "test").mkdir()
    (root / "test" / "skipped.py").write_text("dddddddddddddddddddd")  # test folders are left out
    return root


def ngram_draft(tmp_path, V=4, **cfg):
    cfg.setdefault("power", 1.0)
    tok = CharTok(V)
    counts = load_counts(tok, V, corpus=corpus(tmp_path), order=3, cache=tmp_path / "cache", progress=False)
    return NgramDraft(counts, NgramConfig(order=3, **cfg), tok.get_vocab())


# ----------------------------------------------------------------- the n-gram draft's laws
def _brute_law(streams, ctx, V, order, delta, w):
    """Interpolated Witten-Bell by plain Python loops (an independent re-implementation)."""
    def counts(seqs, h):
        c = np.zeros(V)
        for s in seqs:
            for i in range(len(h), len(s)):
                if tuple(s[i - len(h):i]) == tuple(h):
                    c[s[i]] += 1
        return c

    uni = counts(streams, ())
    L = (uni + delta) / (uni.sum() + delta * V)
    for j in range(0, order):
        if len(ctx) < j or (j == 0 and not (w > 0 and ctx)):
            continue
        h = tuple(ctx[len(ctx) - j:]) if j else ()
        c = (counts(streams, h) if j else np.zeros(V)) + (w * counts([ctx], h) if w > 0 else 0)
        T, n = np.count_nonzero(c), c.sum()
        if n:
            L = (c + T * L) / (n + T)
    return L / L.sum()


@pytest.mark.parametrize("w,power", [(0.0, 1.0), (3.0, 1.0), (3.0, 2.5)])
def test_ngram_law_matches_a_brute_force_witten_bell(tmp_path, w, power):
    d = ngram_draft(tmp_path, prompt_weight=w, delta=0.5, power=power)
    streams = [[0, 1, 2, 0, 1, 2, 0, 1, 3], [1, 0, 2, 3, 3, 3, 0, 1, 2, 0, 1]]  # the corpus; test/ is left out
    np.testing.assert_array_equal(d.counts.unigram, [6, 6, 4, 4])
    nxt, cnt = d.counts.lookup(np.array([0]), 1)
    assert dict(zip(nxt.tolist(), cnt.tolist())) == {1: 5.0, 2: 1.0}
    for ctx in ([], [1], [1, 0], [3, 0], [2, 3, 3], [0, 1, 2, 0, 1]):
        want = _brute_law(streams, ctx, 4, 3, 0.5, w) ** power
        np.testing.assert_allclose(d.law(ctx), want / want.sum(), rtol=1e-12)


def test_ngram_laws_are_normalised_cover_v_and_deterministic(tmp_path):
    d = ngram_draft(tmp_path, V=4)
    s = d.session(SamplingConfig(1.0))
    t = DraftTree()
    for tok in range(4):
        t.add(ROOT, tok)
    q = s.level([0, 1, 2], t, [0, 1, 2, 3])
    assert q.shape == (4, 4) and q.dtype == np.float64
    np.testing.assert_allclose(q.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.all(q > 0)  # the add-delta floor covers the whole vocabulary
    assert s.levels == 1 and s.calls == 1 and s.seconds > 0
    d2 = ngram_draft(tmp_path / "again", V=4)  # rebuilt from scratch: identical
    np.testing.assert_array_equal(d2.session(SamplingConfig(1.0)).level([0, 1, 2], t, [0, 1, 2, 3]), q)
    # the rows are the laws of the contexts ids + path
    np.testing.assert_array_equal(q[2], d.law([0, 1, 2, 2]))
    # sampling applies to the draft too: T = 0 is one-hot
    g = d.session(SamplingConfig(0.0)).level([0, 1], t, [ROOT])
    assert g.max() == 1.0 and g.sum() == 1.0


def test_ngram_cache_is_reused_and_checksummed(tmp_path, monkeypatch):
    tok = CharTok(4)
    root, cache = corpus(tmp_path), tmp_path / "cache"
    a = load_counts(tok, 4, corpus=root, order=3, cache=cache, progress=False)
    (npz,) = cache.glob("*.npz")
    assert (cache / (npz.stem + ".sha256")).is_file()

    def boom(*a, **k):
        raise AssertionError("rebuilt")
    monkeypatch.setattr(ngram, "_tokenise", boom)
    b = load_counts(tok, 4, corpus=root, order=3, cache=cache, progress=False)  # read from the cache
    np.testing.assert_array_equal(a.tables[2][3], b.tables[2][3])
    npz.write_bytes(npz.read_bytes()[:-7] + b"garbage")  # corrupted: the checksum forces a rebuild
    with pytest.raises(AssertionError, match="rebuilt"):
        load_counts(tok, 4, corpus=root, order=3, cache=cache, progress=False)
    monkeypatch.undo()
    (root / "m0.py").write_text("abcd")  # a changed corpus file list / size -> a new key
    load_counts(tok, 4, corpus=root, order=3, cache=cache, progress=False)
    assert len(list(cache.glob("*.npz"))) == 2


def test_ngram_prompt_lookup_raises_the_mass_of_a_repeated_continuation(tmp_path):
    plain, look = ngram_draft(tmp_path, prompt_weight=0.0), ngram_draft(tmp_path / "b", prompt_weight=4.0)
    ctx = [3, 3, 2, 3, 3, 2, 3, 3]  # "ddcddcdd": next is c
    assert look.law(ctx)[2] > plain.law(ctx)[2] + 0.2


# ----------------------------------------------------------------- exactness with any draft
V = 4
PROMPT = [1, 2]


@pytest.fixture(scope="module")
def target():
    return tiny_model("qwen2", vocab=V, seed=11, scale=3.0)


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    return ngram_draft(tmp_path_factory.mktemp("ng"), V=V)


def _laws(target, draft, sampling):
    """Target and n-gram laws at the prompt and after each first token (via the draft's session, on a tree)."""
    p0 = process_logits(full_logits(target, PROMPT)[None], sampling)[0]
    p1 = np.stack([process_logits(full_logits(target, PROMPT + [a])[None], sampling)[0] for a in range(V)])
    s, t = draft.session(sampling), DraftTree()
    q0 = s.level(PROMPT, t, [ROOT])[0]
    nodes = [t.add(ROOT, a) for a in range(V)]
    q1 = s.level(PROMPT, t, nodes)
    return p0, q0, p1, q1


@pytest.mark.parametrize("name", available_verifiers())
@pytest.mark.parametrize("depth", [1, 2])
def test_exact_joint_law_with_the_ngram_draft_is_the_targets(target, draft, name, depth):
    from exactness.tree import exact_pair_law

    sampling = SamplingConfig(1.0)
    p0, q0, p1, q1 = _laws(target, draft, sampling)
    assert 0.5 * np.abs(p0 - q0).sum() > 0.1  # the draft really differs from the target
    joint = exact_pair_law(get_verifier(name), p0, q0, p1, q1, k=2, depth=depth)
    np.testing.assert_allclose(joint, p0[:, None] * p1, rtol=0, atol=1e-12)


class _AcceptFirst(Verifier):
    name, drafting = "mutant", "iid"

    def _chain(self, p, q, c):
        a = np.zeros(c.shape)
        a[:, 0] = 1.0
        return a, p


def test_the_exact_check_catches_a_biased_verifier(target, draft):
    from exactness.tree import exact_pair_law

    p0, q0, p1, q1 = _laws(target, draft, SamplingConfig(1.0))
    joint = exact_pair_law(_AcceptFirst(), p0, q0, p1, q1, k=2, depth=1)
    assert 0.5 * np.abs(joint - p0[:, None] * p1).sum() > 0.05


def test_engine_draws_from_the_drafts_laws_and_samples_the_target_law(target, draft):
    sampling = SamplingConfig(1.0)
    res = speculative_decode(target, draft, PROMPT, get_verifier("resispec"), "2,1", sampling=sampling,
                             max_new_tokens=6, rng=np.random.default_rng(3), record=True)
    ctx = list(PROMPT)
    root = res.nodes[0]
    np.testing.assert_array_equal(root["q"], draft.law(ctx))  # the verifier saw the draft's law at the root
    assert res.draft_levels >= res.target_calls and res.draft_seconds > 0
    p0, _, p1, _ = _laws(target, draft, sampling)
    law = (p0[:, None] * p1).ravel()
    counts = np.zeros(V * V)
    for i in range(600):
        toks = speculative_decode(target, draft, PROMPT, get_verifier("rrs_wor"), "2,1", sampling=sampling,
                                  max_new_tokens=2, rng=np.random.default_rng([5, i])).tokens
        counts[toks[0] * V + toks[1]] += 1
    keep = law * 600 >= 5
    obs, exp = np.append(counts[keep], counts[~keep].sum()), np.append(law[keep], law[~keep].sum()) * 600
    assert stats.chisquare(obs[exp > 0], exp[exp > 0]).pvalue > 1e-3


@pytest.mark.parametrize("name", available_verifiers())
def test_greedy_with_the_ngram_draft_equals_target_greedy(tmp_path, name):
    tgt = tiny_model("qwen2", vocab=16, seed=3, scale=2.0)
    d = ngram_draft(tmp_path, V=16)
    prompt = [1, 2, 3, 1, 2]
    g = SamplingConfig(0.0)
    want = autoregressive_decode(tgt, prompt, sampling=g, max_new_tokens=12, rng=np.random.default_rng(0)).tokens
    got = speculative_decode(tgt, d, prompt, get_verifier(name), "2,2", sampling=g, max_new_tokens=12,
                             rng=np.random.default_rng(1))
    assert got.tokens == want
    assert sum(got.tokens_per_call) == len(got.tokens) == 12


# ----------------------------------------------------------------- the interface and registry
def test_model_draft_is_one_implementation(target):
    d = make_draft(target)
    assert isinstance(d, ModelDraft) and d.vocab_size == V
    assert parse_draft_spec("ngram:order=2,delta=0.25") == ("ngram", {"order": 2, "delta": 0.25})
    assert parse_draft_spec("qwen2.5-coder-0.5b") == ("model", {"name": "qwen2.5-coder-0.5b"})
    assert check_draft_spec("ngram") == "ngram"
    # the memory-bound speed-up's draft size: every parameter once (a tied embedding is one tensor)
    assert d.weights == sum(t.numel() for t in target.parameters()) > 0
    assert _BadDraft([1.0, 0, 0, 0]).weights is None                 # unknown for a user's draft


def test_ngram_draft_reads_no_weights(tmp_path):
    assert ngram_draft(tmp_path, V=4).weights == 0


class _BadDraft(Draft):
    vocab_size = V

    def __init__(self, rows):
        self.rows = rows

    def session(self, sampling):
        rows = self.rows

        class S(DraftSession):
            def _level(self, ids, tree, nodes):
                return np.tile(rows, (len(nodes), 1))
        return S(V, sampling)


@pytest.mark.parametrize("rows,match", [
    ([0.5, np.nan, 0.25, 0.25], "NaN"),
    ([0.5, -0.1, 0.3, 0.3], "negative"),
    ([0.5, 0.5, 0.5, 0.5], "normalised"),
    ([0.5, 0.5], "shape"),
])
def test_bad_draft_mass_is_a_clear_error(target, rows, match):
    with pytest.raises(ValueError, match=match):
        speculative_decode(target, _BadDraft(np.array(rows)), PROMPT, get_verifier("rrs"), "2",
                           sampling=SamplingConfig(1.0), max_new_tokens=2, rng=np.random.default_rng(0))


def test_draft_with_another_vocabulary_or_tokenizer_is_refused(tmp_path, target):
    d16 = ngram_draft(tmp_path, V=16)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_decode(target, d16, PROMPT, get_verifier("rrs"), "2", sampling=SamplingConfig(1.0),
                           max_new_tokens=2, rng=np.random.default_rng(0))
    d4 = ngram_draft(tmp_path / "b", V=4)
    check_pair(target, d4, CharTok(4))
    other = CharTok(4)
    other.get_vocab = lambda: {"x": 0, "b": 1, "c": 2, "d": 3}
    with pytest.raises(ValueError, match="tokenizers differ"):
        check_pair(target, d4, other)


def test_empty_missing_or_unreadable_corpus(tmp_path, monkeypatch):
    tok = CharTok(4)
    kw = dict(order=2, cache=tmp_path / "cache", progress=False)
    with pytest.raises(ValueError, match="neither a folder nor a file"):
        load_counts(tok, 4, corpus=tmp_path / "missing", **kw)
    (tmp_path / "nopy").mkdir()
    (tmp_path / "nopy" / "a.txt").write_text("abc")
    with pytest.raises(ValueError, match="holds no .py files"):
        load_counts(tok, 4, corpus=tmp_path / "nopy", **kw)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.py").write_text("xyz\n")  # no token of the vocabulary
    with pytest.raises(ValueError, match="corpus is empty"):
        load_counts(tok, 4, corpus=tmp_path / "empty", **kw)
    root = corpus(tmp_path)
    real = type(root).read_text

    def deny(self, *a, **k):
        if self.name == "m1.py":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **k)
    monkeypatch.setattr(type(root), "read_text", deny)
    with pytest.raises(ValueError, match="m1.py cannot be read"):
        load_counts(tok, 4, corpus=root, **kw)
    assert not list((tmp_path / "cache").glob("*"))  # nothing half-written


def test_bad_ngram_options(tmp_path):
    with pytest.raises(ValueError, match="unknown option"):
        check_draft_spec("ngram:ordr=3")
    with pytest.raises(ValueError, match="order must be"):
        check_draft_spec("ngram:order=0")
    with pytest.raises(ValueError, match="delta"):
        check_draft_spec("ngram:delta=-1")
    with pytest.raises(ValueError, match="power"):
        check_draft_spec("ngram:power=0")
    for name in ("delta", "prompt_weight"):
        with pytest.raises(ValueError, match=f"ngram {name} must be at most"):
            check_draft_spec(f"ngram:{name}=1e305")
    with pytest.raises(ValueError, match="key=value"):
        check_draft_spec("ngram:3")
    with pytest.raises(ValueError, match="does not exist"):
        check_draft_spec(f"ngram:corpus={tmp_path / 'nothing'}")
    with pytest.raises(ValueError, match="too large"):
        NgramCounts.build([np.arange(4)], 2 ** 20, order=5)
    with pytest.raises(ValueError, match="outside the draft vocabulary"):
        NgramCounts.build([np.array([0, 5])], 4, order=2)


@pytest.mark.parametrize("power", [1000.0, 1e5])
def test_an_extreme_power_underflows_to_zeros_never_nan(tmp_path, power):
    """L^power underflows for the smallest entries: the law keeps exact zeros (a valid draft law), and a session with
    a temperature works from the finite logits ``power * log L`` instead of ``log 0``."""
    d = ngram_draft(tmp_path, power=power, delta=1e-9)
    law = d.law([0, 1, 2])
    assert np.all(np.isfinite(law)) and abs(law.sum() - 1) < 1e-12 and np.any(law == 0)
    assert np.all(np.isfinite(d.log_law([0, 1, 2])))
    tree = DraftTree()
    for cfg in (SamplingConfig(), SamplingConfig(temperature=0.7), SamplingConfig(temperature=0.7, top_k=2)):
        rows = d.session(cfg).level([0, 1, 2], tree, [ROOT])
        assert rows.shape == (1, 4) and np.all(np.isfinite(rows)) and abs(rows.sum() - 1) < 1e-12


def test_cli_rejects_a_bad_draft_before_loading(capsys):
    from resispec.cli import main

    assert main(["decode", "--draft", "ngram:ordr=2", "--target", "/nonexistent"]) == 2
    assert "--draft" in capsys.readouterr().err
