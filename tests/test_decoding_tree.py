"""Tree pass == sequential decoding; greedy equivalence; cache pruning (tiny random models, no downloads)."""

import numpy as np
import pytest
import torch

from resispec import get_verifier
from resispec.decoding.engine import _target_pass, autoregressive_decode, speculative_decode
from resispec.decoding.kv import CachedModel
from resispec.decoding.laws import SamplingConfig
from resispec.decoding.tree import ROOT, DraftTree

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
VERIFIERS = ["rrs", "rrs_wor", "kseq", "target_only", "resispec", "sps"]


def _random_tree(rng, vocab, branching):
    t = DraftTree()
    frontier = [ROOT]
    for k in branching:
        frontier = [t.add(f, int(rng.integers(vocab))) for f in frontier for _ in range(k)]
    return t


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_pass_logits_equal_sequential(arch, attn):
    model = tiny_model(arch, attn=attn, scale=4.0)
    rng = np.random.default_rng(0)
    ids = [int(x) for x in rng.integers(0, 64, 7)]
    P = CachedModel(model)
    worst = 0.0
    for step in range(3):  # several steps: pending tokens, pruned cache, new tree
        t = _random_tree(rng, 64, (3, 2, 1))
        logits = _target_pass(P, ids, t)
        for node in [ROOT] + list(range(len(t))):
            seq = ids + ([] if node == ROOT else [t.tokens[i] for i in t.ancestors(node)])
            worst = max(worst, (logits[node] - full_logits(model, seq)).abs().max().item())
        # accept a random root-to-leaf path and a bonus token, prune like the decoder does
        leaf = int(rng.integers(len(t) - 4, len(t)))
        path = [int(i) for i in t.ancestors(leaf)]
        n_pend = len(ids) - P.length
        P.commit(list(range(n_pend)) + [n_pend + i for i in path])
        ids = ids + [t.tokens[i] for i in path] + [int(rng.integers(64))]
        assert P.length == len(ids) - 1
    assert worst < 1e-5


def test_draft_identical_to_target_accepts_full_paths():
    m = tiny_model("qwen2", scale=1.0)
    res = speculative_decode(m, m, [1, 2, 3], get_verifier("rrs"), "2,2,1", sampling=SamplingConfig(1.0),
                             max_new_tokens=40, rng=np.random.default_rng(0))
    # p == q up to float round-off: every node accepts, so each call emits depth + 1 = 4 tokens
    assert res.accepted == [3] * 10 and res.block_efficiency == 4.0 and len(res.tokens) == 40


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_greedy_speculative_equals_target_greedy(arch):
    target = tiny_model(arch, seed=1, scale=4.0)
    draft = tiny_model(arch, seed=2, scale=4.0)
    prompt = [5, 9, 2, 7]
    greedy = autoregressive_decode(target, prompt, sampling=SamplingConfig(0.0), max_new_tokens=16,
                                   rng=np.random.default_rng(0)).tokens
    # independent reference: cache-free arg-max loop
    ids = list(prompt)
    for _ in range(16):
        ids.append(int(full_logits(target, ids).argmax()))
    assert greedy == ids[len(prompt):]
    for name in VERIFIERS:
        for shape in {"sps": ["1"], "resispec": ["3,2,1", "2,2"], "rrs_wor": ["3,2,1", "2,2"]}.get(name, ["3,2,1"]):
            res = speculative_decode(target, draft, prompt, get_verifier(name), shape,
                                     sampling=SamplingConfig(0.0), max_new_tokens=16, rng=np.random.default_rng(3))
            assert res.tokens == greedy, (name, shape)


def test_greedy_with_a_good_draft_saves_target_calls():
    target = tiny_model("qwen2", seed=1, scale=4.0)
    draft = tiny_model("qwen2", seed=1, scale=4.0)
    with torch.no_grad():  # a close but not identical draft
        draft.lm_head.weight.add_(0.05 * torch.randn_like(draft.lm_head.weight))
    greedy = autoregressive_decode(target, [3, 4], sampling=SamplingConfig(0.0), max_new_tokens=30,
                                   rng=np.random.default_rng(0))
    res = speculative_decode(target, draft, [3, 4], get_verifier("resispec"), "2,1,1",
                             sampling=SamplingConfig(0.0), max_new_tokens=30, rng=np.random.default_rng(0))
    assert res.tokens == greedy.tokens
    assert res.target_calls < greedy.target_calls


def test_eos_stops_and_streaming_sees_every_token():
    target = tiny_model("qwen2", seed=1, scale=4.0)
    greedy = autoregressive_decode(target, [1, 2], sampling=SamplingConfig(0.0), max_new_tokens=10,
                                   rng=np.random.default_rng(0)).tokens
    eos = greedy[4]
    seen = []
    res = speculative_decode(target, tiny_model("qwen2", seed=2), [1, 2], get_verifier("resispec"), "2,1",
                             sampling=SamplingConfig(0.0), max_new_tokens=10, rng=np.random.default_rng(0),
                             eos_token_id=eos, on_tokens=seen.extend)
    assert res.tokens == greedy[:greedy.index(eos) + 1] == seen


def test_without_replacement_drafting_under_topk_smaller_than_branching():
    target, draft = tiny_model("qwen2", seed=1, scale=4.0), tiny_model("qwen2", seed=2, scale=4.0)
    res = speculative_decode(target, draft, [1, 2], get_verifier("rrs_wor"), "4,2",
                             sampling=SamplingConfig(1.0, top_k=2), max_new_tokens=12, rng=np.random.default_rng(0))
    assert len(res.tokens) == 12
