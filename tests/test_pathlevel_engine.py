"""``block`` in the real-model engine (chain trees), on tiny random models (no downloads).

What the checks detect: the spy catches any wrong row handed to the rule (a target or draft law of the
wrong node, stale KV cache, wrong processing) and any emitted token that is not ``drafts[:tau] + [token]``;
with the rule exact by enumeration (``tests/test_pathlevel.py``) that makes the engine's step exact.  The
chi-square of the first two tokens' joint law and of the third token's law then checks the whole loop end to end (n = 200: only gross biases, TV >~ 0.2; marked slow: ``-m slow``).
"""

import numpy as np
import pytest
import torch

from resispec import get_verifier
from resispec.decoding.engine import speculative_decode
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.pathlevel import get_path_verifier
from resispec.pathlevel.block import BlockVerifier

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
V = 4
PROMPT = [1, 2]


@pytest.fixture(scope="module")
def pair():
    return tiny_model("qwen2", vocab=V, seed=21, scale=3.0), tiny_model("qwen2", vocab=V, seed=22, scale=3.0)


class Spy(BlockVerifier):
    def __init__(self):
        self.calls = []

    def verify(self, p, q, drafts, rng=None, *, uniforms=None):
        out = super().verify(p, q, drafts, rng, uniforms=uniforms)
        self.calls.append((np.array(p), np.array(q), np.array(drafts), out))
        return out


def _law(model, ids, sampling):
    return process_logits(full_logits(model, ids)[None], sampling)[0]


def test_engine_hands_block_the_path_rows(pair):
    target, draft = pair
    sampling = SamplingConfig(0.9, top_k=3)
    spy = Spy()
    res = speculative_decode(target, draft, PROMPT, spy, "1,1", sampling=sampling, max_new_tokens=8,
                             rng=np.random.default_rng(3))
    ctx, emitted = list(PROMPT), []
    assert len(spy.calls) == res.target_calls >= 3                  # one path decision per target call
    for p, q, d, out in spy.calls:
        for i in range(3):
            np.testing.assert_allclose(p[i], _law(target, ctx + d[:i].tolist(), sampling), atol=1e-5)
        for i in range(2):
            np.testing.assert_allclose(q[i], _law(draft, ctx + d[:i].tolist(), sampling), atol=1e-5)
        step = out.emitted(d).tolist()
        ctx += step
        emitted += step
    assert res.tokens == emitted[:8]
    assert res.accepted == [c[3].accepted for c in spy.calls]


@pytest.mark.slow   # ~3-6 s each on 2 shared cores; the spy tests below are the fast exact checks of the engine
@pytest.mark.parametrize("name, tree", [("block", "1,1"), ("block_no_full_accept", "1,1"), ("traversal", "2,1"),
                                        ("traversal_resispec", "2,1")])
def test_engine_block_first_three_tokens_follow_the_target(pair, name, tree):
    """block (chain) and traversal (tree) pass; a planted bug (never keeps the whole chain) is flagged."""
    from exactness.path_mutants import PATH_MUTANTS

    target, draft = pair
    sampling = SamplingConfig(1.0)
    law = np.zeros((V, V, V))
    p1 = _law(target, PROMPT, sampling)
    for a in range(V):
        p2 = _law(target, PROMPT + [a], sampling)
        for b in range(V):
            law[a, b] = p1[a] * p2[b] * _law(target, PROMPT + [a, b], sampling)
    law = law.ravel()
    ver = PATH_MUTANTS[name]() if name in PATH_MUTANTS else get_path_verifier(name)
    counts = np.zeros(V ** 3)
    n = 200                                                      # the planted bug: p ~ 1e-300 at n = 500
    for i in range(n):
        t = speculative_decode(target, draft, PROMPT, ver, tree, sampling=sampling, max_new_tokens=3,
                               rng=np.random.default_rng([5, i])).tokens
        counts[(t[0] * V + t[1]) * V + t[2]] += 1
    counts = counts.reshape(V, V, V)
    law = law.reshape(V, V, V)
    # two consequences of exactness, each with enough cells at n = 200: the joint law of the first two
    # tokens (16 cells) and the law of the third token (4 cells); Bonferroni over the two
    pvalues = [_chi2(counts.sum(axis=2).ravel(), law.sum(axis=2).ravel()), _chi2(counts.sum(axis=(0, 1)),
                                                                                 law.sum(axis=(0, 1)))]
    assert (min(pvalues) > 5e-4) == (name not in PATH_MUTANTS), pvalues


def _chi2(counts, law):
    """Pearson chi-square p-value of counts against a law, cells with expected count < 5 pooled."""
    from scipy import stats

    exp = law * counts.sum()
    keep = exp >= 5
    obs, ex = np.append(counts[keep], counts[~keep].sum()), np.append(exp[keep], exp[~keep].sum())
    if ex[-1] == 0:                                              # nothing pooled: no rest cell
        assert obs[-1] == 0
        obs, ex = obs[:-1], ex[:-1]
    assert obs.size >= 4                                         # enough cells for a meaningful test
    pvalue = stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue
    assert np.isfinite(pvalue)
    return float(pvalue)


def test_engine_expected_accepted_for_path_rules(pair):
    """``also=`` records block's E[tau | drafts]; the path rule ``token`` equals ``rrs`` with one candidate."""
    target, draft = pair
    block, token = get_path_verifier("block"), get_path_verifier("token")
    res = speculative_decode(target, draft, PROMPT, block, "1,1,1", sampling=SamplingConfig(1.0), max_new_tokens=10,
                             rng=np.random.default_rng(0), also=[token, get_verifier("rrs")])
    assert set(res.expected) == {"block", "token", "rrs"}
    np.testing.assert_allclose(res.expected["token"], res.expected["rrs"], atol=1e-12)
    assert all(0 <= e <= 3 for e in res.expected["block"])
    # a node-level driver on a non-chain tree skips the path rule instead of failing
    res = speculative_decode(target, draft, PROMPT, get_verifier("rrs"), "2,1", sampling=SamplingConfig(1.0),
                             max_new_tokens=4, rng=np.random.default_rng(0), also=[block])
    assert set(res.expected) == {"rrs"}


def test_engine_runs_traversal_resispec_and_scores_it(pair):
    """traversal_resispec drives a tree decode; ``also=`` records it beside traversal; with the node rule rrs
    its recorded E[accepted] is traversal's on the same trees."""
    target, draft = pair
    trr = get_path_verifier("traversal_resispec")
    res = speculative_decode(target, draft, PROMPT, trr, "2,1", sampling=SamplingConfig(1.0), max_new_tokens=8,
                             rng=np.random.default_rng(0), also=[get_path_verifier("traversal")])
    assert len(res.tokens) == 8 and set(res.expected) == {"traversal_resispec", "traversal"}
    assert all(0 <= e <= 2 + 1e-12 for e in res.expected["traversal_resispec"])
    res = speculative_decode(target, draft, PROMPT, get_verifier("rrs"), "3,1", sampling=SamplingConfig(1.0),
                             max_new_tokens=8, rng=np.random.default_rng(1),
                             also=[get_path_verifier("traversal"), get_path_verifier("traversal_resispec",
                                                                                     node_rule="rrs")])
    np.testing.assert_allclose(res.expected["traversal_resispec"], res.expected["traversal"], atol=1e-12)


def test_engine_rejects_block_on_a_tree(pair):
    target, draft = pair
    with pytest.raises(ValueError, match="not a chain: use a tree like 1,1"):
        speculative_decode(target, draft, PROMPT, get_path_verifier("block"), "2,1", sampling=SamplingConfig(1.0),
                           max_new_tokens=4, rng=np.random.default_rng(0))


class _Tok:
    eos_token_id = None

    def get_vocab(self):
        return {str(i): i for i in range(V)}


def test_bench_decode_runs_block_on_chain_trees_only(pair):
    """``run_bench(verifiers=[..., "block", "traversal"])``: block gets a row on the chain, none on the tree
    (traversal on both), and every run on the chain gets the paired Rao-Blackwellised value of block too."""
    from resispec.bench.decode import format_table, run_bench
    from resispec.decoding.pair import ModelPair

    mp = ModelPair(pair[0], pair[1], _Tok(), "t", "d")
    res = run_bench(mp, [[1, 2], [3]], verifiers=["rrs", "block", "traversal"], trees=["1,1", "2"],
                    sampling=SamplingConfig(1.0), max_new_tokens=5, seeds=[0], progress=False, estimate=False)
    rows = {(r["method"], r["tree"]): r for r in res.table()}
    assert set(rows) == {("autoregressive", "-"), ("rrs", "1,1"), ("block", "1,1"), ("traversal", "1,1"),
                         ("rrs", "2"), ("traversal", "2")}
    assert rows[("block", "1,1")]["tokens"] == 10 and rows[("block", "1,1")]["block_efficiency_rb"] is not None
    assert all("block" in run["rb"] for run in res.runs if run["tree"] == "1,1")
    assert all("block" not in run["rb"] for run in res.runs if run["tree"] == "2")
    assert "block" in format_table(res)


class TreeSpy(type(get_path_verifier("traversal"))):
    def __init__(self):
        self.calls = []

    def verify_tree(self, p, q, parent, tokens, rng):
        out = super().verify_tree(p, q, parent, tokens, rng)
        self.calls.append((np.array(p), np.array(q), np.array(parent), np.array(tokens), out))
        return out


def test_engine_hands_traversal_the_tree_rows(pair):
    """traversal on a 2,1 tree: every target row (root, inner nodes, leaves) and draft row (root, inner nodes)
    matches a cache-free forward along that node's path; emitted = kept path's tokens + the token; the
    recorded E[accepted] of traversal comes back for an rrs-driven run of the same shape."""
    target, draft = pair
    sampling = SamplingConfig(1.0)
    spy = TreeSpy()
    res = speculative_decode(target, draft, PROMPT, spy, "2,1", sampling=sampling, max_new_tokens=8,
                             rng=np.random.default_rng(4))
    ctx, emitted = list(PROMPT), []
    assert len(spy.calls) == res.target_calls
    for p, q, parent, tokens, (kept, token) in spy.calls:
        np.testing.assert_array_equal(parent, [-1, -1, 0, 1])
        paths = [[]] + [[int(tokens[0])], [int(tokens[1])], [int(tokens[0]), int(tokens[2])],
                        [int(tokens[1]), int(tokens[3])]]
        for r, path in enumerate(paths):
            np.testing.assert_allclose(p[r], _law(target, ctx + path, sampling), atol=1e-5)
            if r <= 2:
                np.testing.assert_allclose(q[r], _law(draft, ctx + path, sampling), atol=1e-5)
        step = [int(tokens[n]) for n in kept] + [token]
        ctx += step
        emitted += step
    assert res.tokens == emitted[:8]
    res = speculative_decode(target, draft, PROMPT, get_verifier("rrs"), "2,1", sampling=sampling, max_new_tokens=6,
                             rng=np.random.default_rng(0), also=[get_path_verifier("traversal")])
    assert set(res.expected) == {"rrs", "traversal"} and all(0 <= e <= 2 for e in res.expected["traversal"])
