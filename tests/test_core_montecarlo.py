"""Monte Carlo checks at the declared drafting, the explicit-uniforms path, and
negative controls (biased mutants) that the checks must catch.

Seeds are fixed, so every test is deterministic; thresholds are set so that
an exact verifier passes by a wide margin (p-value > 1e-4, |z| < 4) and the
mutants fail by a wide margin (p-value < 1e-8).
"""

import numpy as np
import pytest
from scipy import stats

import resispec
from resispec.verifiers.base import Verifier
from resispec.verifiers.resispec import ResiSpec, solve_reserve

N = 20000


def pooled_chisquare(tokens, p, min_expected=5.0):
    """Chi-square goodness of fit of ``tokens`` against ``p``; bins with
    expected count < ``min_expected`` are pooled into one bin."""
    counts = np.bincount(tokens, minlength=p.size).astype(float)
    expected = p * tokens.size
    if np.any(counts[expected == 0] > 0):          # a token of zero target mass: impossible under p
        return stats.chisquare([1.0, 0.0], [1e-300, 1.0])._replace(pvalue=0.0)
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep])


def _sample(v, p, q, k, seed, drafting=None):
    rng = np.random.default_rng(seed)
    P, Q = np.tile(p, (N, 1)), np.tile(q, (N, 1))
    d = drafting or (v.drafting if v.drafting != "any" else "iid")
    c = resispec.draw_candidates(Q, k, d, rng)
    return v.verify(P, Q, c, rng)


P8 = np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.08, 0.05, 0.02])
Q8 = np.array([0.05, 0.10, 0.30, 0.05, 0.25, 0.05, 0.15, 0.05])


@pytest.mark.parametrize("name", resispec.available_verifiers())
@pytest.mark.parametrize("k", [1, 4])
def test_chisquare_and_acceptance_rate(name, k):
    v = resispec.get_verifier(name)
    out = _sample(v, P8, Q8, k, seed=k)
    assert pooled_chisquare(out.tokens, P8).pvalue > 1e-4
    A = resispec.acceptance_probability(v, P8, Q8, k)
    se = np.sqrt(A * (1 - A) / N)
    assert abs(out.acceptance_rate - A) <= 4 * se + 1e-12, (out.acceptance_rate, A, se)
    assert np.all((out.accepted >= -1) & (out.accepted < k))


@pytest.mark.parametrize("proxy", ["tempered", "topk", "uniform_mix", "coverage"])
def test_chisquare_resispec_proxies(proxy):
    v = resispec.get_verifier("resispec", proxy=proxy)
    out = _sample(v, P8, Q8, 3, seed=11)
    assert pooled_chisquare(out.tokens, P8).pvalue > 1e-4
    A = resispec.acceptance_probability(v, P8, Q8, 3)
    assert abs(out.acceptance_rate - A) <= 4 * np.sqrt(A * (1 - A) / N)


def test_explicit_uniforms_path():
    """verify(..., uniforms=u) is deterministic in u, agrees with the rng path, and
    accepts candidate i exactly when u[:, i] < accept_probs[:, i] after rejections."""
    rng = np.random.default_rng(3)
    B, k = 4000, 3
    P, Q = np.tile(P8, (B, 1)), np.tile(Q8, (B, 1))
    for name in resispec.available_verifiers():
        v = resispec.get_verifier(name)
        c = resispec.draw_candidates(Q, k, v.drafting if v.drafting != "any" else "iid", rng)
        u = np.random.default_rng(5).random((B, k + 1))
        a = v.verify(P, Q, c, uniforms=u)
        b = v.verify(P, Q, c, uniforms=u.copy())
        np.testing.assert_array_equal(a.tokens, b.tokens)
        r = v.verify(P, Q, c, np.random.default_rng(5))        # rng draws the same (B, k + 1) uniforms
        np.testing.assert_array_equal(a.tokens, r.tokens)
        ch = v.chain(P, Q, c)
        acc = u[:, :k] < ch.accept_probs
        first = np.where(acc.any(1), acc.argmax(1), -1)
        np.testing.assert_array_equal(a.accepted, first)
        hit = first >= 0
        np.testing.assert_array_equal(a.tokens[hit], c[hit, first[hit]])
        # residual token by inverse CDF in token-id order from the last column
        cdf = np.cumsum(ch.residual[~hit], axis=1)
        expect = (cdf <= (u[~hit, k] * cdf[:, -1])[:, None]).sum(1)
        np.testing.assert_array_equal(a.tokens[~hit], expect)
        assert pooled_chisquare(a.tokens, P8).pvalue > 1e-4
    # 1-D uniforms for one node
    v = resispec.get_verifier("rrs")
    # candidate 0 (token 2): accept prob min(.15, .3)/.3 = 0.5 < 0.99 -> rejected;
    # candidate 1 (token 0): p_2(0) = .25/.61 > q(0) = .05 -> accept prob 1 > 0.0 -> accepted
    out = v.verify(P8, Q8, [2, 0], uniforms=[0.99, 0.0, 0.5])
    assert out.accepted.tolist() == [1] and out.tokens.tolist() == [0]
    out = v.verify(P8, Q8, [2, 0], uniforms=[0.4, 0.0, 0.5])
    assert out.accepted.tolist() == [0] and out.tokens.tolist() == [2]


# ---------------------------------------------------------------------------
# negative controls
# ---------------------------------------------------------------------------

class PeekingResiSpec(ResiSpec):
    """MUTANT: the proxy reads the NEXT candidate (one-hot at x_{i+1}).

    Violates the exactness lemma (``m_i`` may not depend on x_i or later
    candidates); must be caught.
    """

    candidate_independent = False

    def _walk(self, p, q, c, *args, **kw):
        self._cands = c
        return super()._walk(p, q, c, *args, **kw)

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
        if i == k - 1:
            return np.minimum(p_i, q_i)
        rho = np.zeros_like(p_i)
        rho[np.arange(p_i.shape[0]), self._cands[:, i + 1]] = 1.0
        lam = solve_reserve(p_i, q_i, rho, self.gamma)
        return np.minimum(q_i, np.maximum(p_i - lam[:, None] * rho, 0.0))


class AlwaysAccept(Verifier):
    """MUTANT: accepts the first candidate always (emits x_1 ~ q)."""

    name = "always_accept"
    drafting = "iid"

    def _chain(self, p, q, c):
        return np.ones(c.shape, dtype=np.float64), p.copy()


P3 = np.array([0.2, 0.7, 0.1])
Q3 = np.array([0.1, 0.05, 0.85])


def _tv(a, b):
    return 0.5 * np.abs(a - b).sum()


def test_rrs_on_without_replacement_drafts_is_caught():
    rrs = resispec.get_verifier("rrs")
    law = resispec.exact_output_law(rrs, P3, Q3, 2, drafting="without_replacement")
    assert _tv(law, P3) > 0.05
    out = _sample(rrs, P3, Q3, 2, seed=1, drafting="without_replacement")
    assert pooled_chisquare(out.tokens, P3).pvalue < 1e-8
    # the same verifier at its declared (iid) drafting passes
    assert pooled_chisquare(_sample(rrs, P3, Q3, 2, seed=1).tokens, P3).pvalue > 1e-4


def test_peeking_proxy_is_caught():
    v = PeekingResiSpec()
    law = resispec.exact_output_law(v, P8, Q8, 3)
    assert _tv(law, P8) > 0.05
    out = _sample(v, P8, Q8, 3, seed=2)
    assert pooled_chisquare(out.tokens, P8).pvalue < 1e-8


def test_always_accept_is_caught():
    v = AlwaysAccept()
    law = resispec.exact_output_law(v, P8, Q8, 2)
    np.testing.assert_allclose(law, Q8, atol=1e-12)                 # it emits the draft law
    A = resispec.acceptance_probability(v, P8, Q8, 2)
    assert A > resispec.optimal_acceptance(P8, Q8, 2) + 0.01         # above the physical limit
    out = _sample(v, P8, Q8, 2, seed=3)
    assert pooled_chisquare(out.tokens, P8).pvalue < 1e-8


def test_chisquare_helper_flags_impossible_tokens():
    p = np.array([0.5, 0.5, 0.0])
    assert pooled_chisquare(np.array([0, 1, 2] * 10), p).pvalue == 0.0
