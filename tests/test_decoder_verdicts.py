"""certify_decoder never passes without testing and is immune to a decoder reusing its output buffer."""

import warnings

import numpy as np
import pytest

import exactness
from exactness.chain import token_chain_kernel, ChainDecoder
from exactness.decoder_mutants import MUTANTS

from _decoder_cases import setup


def test_too_few_continuations_is_an_error_not_a_pass():
    model, target, prompts = setup()
    with pytest.raises(ValueError, match="no degree of freedom"):
        exactness.certify_decoder(MUTANTS["residual_off_by_one"](model, 2), target, prompts, n=1, new_tokens=3)


def test_no_power_is_said(monkeypatch):
    import exactness.decoder as dec

    monkeypatch.setattr(dec, "JOINT_MAX", 1)       # PIT checks only (large V): 12 tokens, df 1
    model, target, prompts = setup()
    with pytest.warns(exactness.ExactnessWarning, match="no power"):
        cert = exactness.certify_decoder(ChainDecoder(token_chain_kernel, model), target, prompts, n=4,
                                         new_tokens=3, seeded=False)
    assert any("no power" in note for note in cert.notes)


@pytest.mark.parametrize("tv", ["0.1", -1, 0, 2.0])
def test_bad_tv_is_refused_before_running(tv):
    model, target, prompts = setup()
    with pytest.raises((TypeError, ValueError), match="tv must"):
        exactness.certify_decoder(ChainDecoder(token_chain_kernel, model), target, prompts, n=50, tv=tv)


class ReusedBuffer(ChainDecoder):
    """Exact, but hands back one output buffer, overwritten on every call."""

    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        buf = getattr(self, "_buf", None)
        if buf is None or buf.shape != out.shape:
            buf = self._buf = np.empty_like(out)
        buf[...] = out
        return buf


def test_a_reused_output_buffer_is_copied():
    model, target, prompts = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        cert = exactness.certify_decoder(ReusedBuffer(token_chain_kernel, model), target, prompts, n=3000,
                                         new_tokens=2, seed=4)
    assert cert.passed, cert.summary()


def test_a_prompt_dependent_bias_past_the_joint_window_fails_by_prompt():
    """Breaker: exact except token 4, where prompt [0] moves mass from each row's likeliest token to its second
    likeliest and prompt [1] moves it back, tuned so the pooled PIT cancels (per-prompt TV 0.16 passed). The PIT
    binned per prompt (chi-squares summed) catches it."""
    from exactness.chain import chain_target
    from simulators.autoregressive import MarkovPair

    pair = MarkovPair.random(np.random.default_rng(0), 4, noise=2)
    P = pair.P
    V = P.shape[0]
    prompts = np.array([[0], [1], [3]])

    def after(start, steps):
        d = np.zeros(V)
        d[start] = 1
        for _ in range(steps):
            d = d @ P
        return d

    wA, wB = after(0, 3), after(1, 3)
    hi, lo = P.argmax(1), np.argsort(P, 1)[:, -2]
    eps = 0.9 * np.minimum(wA, wB) * np.minimum(P.max(1), P[np.arange(V), lo])
    shift = {0: eps / wA, 1: -eps / wB}

    class Cancel:
        def sample(self, pr, new_tokens, rng):
            pr = np.asarray(pr)
            out, last = np.empty((len(pr), new_tokens), np.int64), pr[:, -1].copy()
            for j in range(new_tokens):
                law = P[last].copy()
                if j == 3:
                    for s, dd in shift.items():
                        r = np.flatnonzero(pr[:, 0] == s)
                        law[r, hi[last[r]]] -= dd[last[r]]
                        law[r, lo[last[r]]] += dd[last[r]]
                c = law.cumsum(1)
                t = np.minimum((c < rng.random(len(c))[:, None] * c[:, -1:]).sum(1), V - 1)
                out[:, j], last = t, t
            return out

    cert = exactness.certify_decoder(Cancel(), chain_target(pair), prompts, new_tokens=4, seed=0)
    assert not cert.passed and cert.checks["pit[4,id,by_prompt]"] < 1e-6
    assert cert.checks["pit[4,id]"] > 1e-3                     # the pooled PIT alone is blind to it


def test_a_bias_whose_direction_depends_on_the_previous_token_fails_by_previous():
    """Breaker (session 34): exact for tokens 1-3; at token 4 mass moves from token 2 to 3 after token 0 and back
    after token 1 (tokens 0 and 1 exchangeable), so the pooled and per-prompt PITs see an exact mixture (TV 0.15
    given the context passed). The PIT split by the previous token catches it."""
    from simulators.autoregressive import MarkovPair
    from exactness.chain import chain_target
    from exactness.tree_decoder import TreeDecoder

    rng = np.random.default_rng(0)

    def sym_rows(conc):
        M = rng.dirichlet(np.full(3, conc), size=3)
        R = np.empty((4, 4))
        for a, s in enumerate([0, 0, 1, 2]):
            R[a] = [M[s, 0] / 2, M[s, 0] / 2, M[s, 1], M[s, 2]]
        return R

    P = sym_rows(3.0)
    Q = 0.5 * P + 0.5 * sym_rows(1.0)
    P[[0, 1]] = [[0.15, 0.15, 0.35, 0.35]] * 2
    pair = MarkovPair(P, Q)

    class LateStep(TreeDecoder):
        def sample(self, prompts, new_tokens, rng):
            out = [super().sample(np.asarray(prompts), 3, rng)]
            last = out[0][:, -1]
            p = P[last].copy()
            s = np.where(last == 0, 0.15, np.where(last == 1, -0.15, 0.0))
            p[:, 2] -= s
            p[:, 3] += s
            u = rng.random(len(last))
            out.append((np.cumsum(p, 1) < u[:, None]).sum(1).clip(0, 3)[:, None])
            return np.concatenate(out, 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        cert = exactness.certify_decoder(LateStep(pair, (2, 1), "rrs"), chain_target(pair), np.array([[0], [2], [3]]),
                                         new_tokens=4, seed=1)
    # the pair checks (token 3's PIT bins against token 4's) see it too (issue 37)
    assert not cert.passed and set(cert.failed_checks()) <= {"pit[4,id,by_previous]", "pit[4,id,by_previous2]",
                                                              "pit_pairs[id]", "pit_pairs[argmax]"}, cert.summary()
    assert "pit[4,id,by_previous]" in cert.failed_checks()


def test_too_few_continuations_are_refused_before_any_draw():
    """Breaker (session 34): new_tokens = 2000 at n = 2 sampled 9 s (20,000: minutes) before refusing."""
    model, target, prompts = setup()
    calls = []

    class Counting(ChainDecoder):
        def sample(self, prompts, new_tokens, rng):
            calls.append(1)
            return super().sample(prompts, new_tokens, rng)

    with pytest.raises(ValueError, match="no degree of freedom"):
        exactness.certify_decoder(Counting(token_chain_kernel, model), target, prompts, n=2, new_tokens=2000)
    assert not calls


def test_a_target_that_raises_is_named_without_blaming_the_prompts():
    model, _, prompts = setup()

    def target(contexts):
        raise ZeroDivisionError("division by zero")

    with pytest.raises(ValueError, match=r"target\(contexts\) raised ZeroDivisionError") as err:
        exactness.certify_decoder(ChainDecoder(token_chain_kernel, model), target, prompts, n=100)
    assert "vocabulary" not in str(err.value)


def test_a_bias_set_by_the_token_two_back_fails_by_previous2():
    """Breaker (session 34): i.i.d. uniform target over 4 tokens; at token 4 mass moves from token 3 to token 0 after
    y2 in {0, 1} and back after y2 in {2, 3} (TV 0.2 given the context). Every pooled, per-prompt and
    previous-token PIT sees the exact marginal; the split by the last two tokens does not."""
    V = 4

    def target(contexts):
        return np.full((np.asarray(contexts).shape[0], V), 1.0 / V)

    class TwoBack:
        def sample(self, prompts, new_tokens, rng):
            B = np.asarray(prompts).shape[0]
            out = rng.integers(0, V, size=(B, new_tokens))
            if new_tokens >= 4:
                law = np.full((B, V), 1.0 / V)
                s = np.where(out[:, 1] <= 1, 0.2, -0.2)
                law[:, 0] += s
                law[:, 3] -= s
                u = rng.random(B)
                out[:, 3] = (np.cumsum(law, 1) < u[:, None]).sum(1).clip(0, V - 1)
            return out

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        cert = exactness.certify_decoder(TwoBack(), target, np.array([[0], [1], [3]]), new_tokens=4, seed=0)
    assert not cert.passed and "pit[4,id,by_previous2]" in cert.failed_checks(), cert.summary()
    assert cert.checks["pit[4,id,by_previous]"] >= 1e-3
