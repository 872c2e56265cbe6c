"""The joint law of the first two emitted tokens equals the target's (chi-square, tiny-vocabulary models)."""

import numpy as np
import pytest
import torch
from scipy import stats

from resispec import get_verifier
from resispec.decoding.engine import speculative_decode
from resispec.decoding.laws import SamplingConfig, process_logits
from resispec.verifiers.base import Verifier

from _decoding_tiny import full_logits, tiny_model

torch.set_num_threads(1)
V = 4
PROMPT = [1, 2]


@pytest.fixture(scope="module")
def pair():
    return tiny_model("qwen2", vocab=V, seed=11, scale=3.0), tiny_model("qwen2", vocab=V, seed=12, scale=3.0)


def exact_two_token_law(target, sampling):
    """P(y1, y2) = p(y1 | prompt) p(y2 | prompt, y1), by cache-free forwards."""
    p1 = process_logits(full_logits(target, PROMPT)[None], sampling)[0]
    law = np.zeros((V, V))
    for a in range(V):
        law[a] = p1[a] * process_logits(full_logits(target, PROMPT + [a])[None], sampling)[0]
    return law.ravel()


def chi_square_pvalue(counts, law):
    """Pearson chi-square of counts against a law, pooling cells with expected count < 5."""
    n = counts.sum()
    exp = law * n
    keep = exp >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    ex = np.append(exp[keep], exp[~keep].sum())
    if ex[-1] == 0:
        obs, ex = obs[:-1], ex[:-1]
    assert obs[-1] == 0 or ex[-1] > 0
    return stats.chisquare(obs, ex).pvalue


def sample_counts(target, draft, verifier, tree, sampling, n, seed):
    counts = np.zeros(V * V, dtype=np.int64)
    for i in range(n):
        toks = speculative_decode(target, draft, PROMPT, verifier, tree, sampling=sampling, max_new_tokens=2,
                                  rng=np.random.default_rng([seed, i])).tokens
        counts[toks[0] * V + toks[1]] += 1
    return counts


@pytest.mark.parametrize("name,tree,sampling,n", [
    ("resispec", "2,1", SamplingConfig(1.0), 1000),
    ("rrs_wor", "2,1", SamplingConfig(0.8, top_k=3), 600),
    ("kseq", "3", SamplingConfig(1.0, top_p=0.9), 600),
    ("target_only", "1,2", SamplingConfig(1.2), 600),
])
def test_first_two_tokens_have_the_target_law(pair, name, tree, sampling, n):
    target, draft = pair
    law = exact_two_token_law(target, sampling)
    q1 = process_logits(full_logits(draft, PROMPT)[None], sampling)[0]
    p1 = law.reshape(V, V).sum(axis=1)
    assert 0.5 * np.abs(p1 - q1).sum() > 0.1  # the draft really differs from the target
    counts = sample_counts(target, draft, get_verifier(name), tree, sampling, n, seed=7)
    assert chi_square_pvalue(counts, law) > 1e-3


class _AlwaysAcceptFirst(Verifier):
    """Biased mutant: emits the first candidate (so the draft's law)."""

    name = "mutant"
    drafting = "iid"

    def _chain(self, p, q, c):
        a = np.zeros(c.shape)
        a[:, 0] = 1.0
        return a, p


def test_the_same_check_rejects_a_biased_verifier(pair):
    target, draft = pair
    sampling = SamplingConfig(1.0)
    counts = sample_counts(target, draft, _AlwaysAcceptFirst(), "2,1", sampling, 300, seed=7)
    assert chi_square_pvalue(counts, exact_two_token_law(target, sampling)) < 1e-3


def test_first_two_tokens_certified_by_the_harness(pair):
    """The same joint law, certified with ``exactness.certify_sampler`` (chi-square + G-test)."""
    certify_sampler = pytest.importorskip("exactness.certificate").certify_sampler
    target, draft = pair
    sampling = SamplingConfig(1.0)
    verifier = get_verifier("resispec")

    def sample(rng, m):
        out = np.empty(m, dtype=np.int64)
        for j in range(m):
            toks = speculative_decode(target, draft, PROMPT, verifier, "3,1", sampling=sampling, max_new_tokens=2,
                                      rng=rng).tokens
            out[j] = toks[0] * V + toks[1]
        return out

    cert = certify_sampler(sample, exact_two_token_law(target, sampling), 800, seed=5)
    assert cert.passed, cert
    assert cert.pvalue > 1e-3
