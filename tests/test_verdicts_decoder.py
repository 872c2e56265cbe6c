"""Issue 37, certify_decoder: every verdict right.

- a long-range bias (token 4 tilted by token 1, every single-token law exact) FAILs at n = 1e5, and the
  certificate says which law its detectable TV is of;
- a token of target probability 0 FAILs at once, naming the token, its context and the count (never "raise n"),
  also for transformers ``generate`` with top-k 3 against a top-k 2 target (tiny local models);
- a decoder that raises, returns the wrong shape / dtype or ids outside [0, V) is a FAIL naming the cause (exit 1),
  a target that raises stays the caller's error (exit 2);
- a decoder that never returns is stopped by ``time_limit`` and is the cause of a FAIL (exit 1);
- slow phases show progress on stderr, never on stdout;
- exact decoders still pass, in 20 seeds.

No test asserts a wall-clock bound; the hanging decoder sleeps for ever under a 2 s limit.
"""

import textwrap
import time
import warnings

import numpy as np
import pytest
from _subjects import subject_fail as _subject_fail

import exactness
from exactness.decoder_mutants import CORRECT
from resispec.cli import main

from _decoder_cases import setup

V = 101


def uniform(contexts):
    return np.full((np.asarray(contexts).shape[0], V), 1.0 / V)


class LongRange:
    """Uniform target law, V = 101; tokens 1-3 exact; token 4 moves TV 0.05 toward ids 0-49 after a token 1 in
    0-49 and toward ids 51-100 after a token 1 in 51-100 (the issue's decoder): every single-token law, pooled
    over contexts, is exactly uniform, and so is token 4's law after any tokens 2-3."""

    def __init__(self, tilt=0.05):
        self.tilt = tilt

    def sample(self, prompts, new_tokens, rng):
        B = np.asarray(prompts).shape[0]
        out = rng.integers(V, size=(B, new_tokens))
        if new_tokens >= 4:
            sign = np.where(out[:, 0] < 50, 1.0, np.where(out[:, 0] > 50, -1.0, 0.0))[:, None]
            law = np.full((B, V), 1.0 / V)
            law[:, :50] += sign * self.tilt / 50
            law[:, 51:] -= sign * self.tilt / 50
            out[:, 3] = np.minimum((rng.random(B)[:, None] > law.cumsum(1)).sum(1), V - 1)
        return out




# --------------------------------------------------------------------------- item 1: long-range bias
def test_long_range_bias_fails_at_its_n_and_the_scope_is_stated():
    """Passed at n = 1e5 with "detectable TV 0.0448" (the joint covered tokens 1-2, the PIT splits pooled the bias
    away) and a note that the PIT checks "cover all 4".  The pair check of binned PITs (token 1 x token 4) fails it."""
    cert = exactness.certify_decoder(LongRange(), uniform, np.array([[0]]), new_tokens=4, n=100_000, seed=0)
    assert not cert.passed
    assert "pit_pairs[id]" in cert.failed_checks(), cert.failed_checks()
    assert cert.details["pit_pairs[id]"]["worst"] == [1, 4]
    assert cert.details["pit_pairs[id]"]["detectable_tv"] < 0.05            # the bias is within the stated power
    # the certificate says which law its detectable TV is of; no "cover all" claim
    assert any("joint law of tokens 1-2 only" in note for note in cert.notes), cert.notes
    assert not any("cover all" in note for note in cert.notes)
    lines = cert.details["scope"]["lines"]
    assert any(line.startswith("pit_pairs[id]") for line in lines) and any("not covered" in x for x in lines)
    report = exactness.decoder.to_markdown(cert)
    assert "What the detectable TV covers" in report and "joint law of tokens 1-2" in report


def test_exact_twin_of_the_long_range_decoder_passes():
    cert = exactness.certify_decoder(LongRange(tilt=0.0), uniform, np.array([[0]]), new_tokens=4, n=20_000,
                                     seed=1)
    assert cert.passed, cert.summary()
    assert {"pit_pairs[id]", "pit_pairs[argmax]", "pit_tuple[id]"} <= set(cert.checks)


class Direct:
    """Exact for any target: each token drawn from ``target`` at the prefix (inverse CDF, batched)."""

    def __init__(self, target):
        self.target = target

    def sample(self, prompts, new_tokens, rng):
        ctx = np.asarray(prompts, dtype=np.int64)
        for _ in range(new_tokens):
            c = self.target(ctx).cumsum(1)
            y = np.minimum((rng.random(ctx.shape[0])[:, None] > c).sum(1), c.shape[1] - 1)
            ctx = np.concatenate([ctx, y[:, None]], axis=1)
        return ctx[:, -new_tokens:]


def test_exact_decoders_pass_in_20_seeds():
    """An exact decoder passes at small n in 20 seeds, with the new pair and tuple checks running."""
    model, target, prompts = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        for seed in range(20):
            cert = exactness.certify_decoder(Direct(target), target, prompts[:2], new_tokens=4, n=120, seed=seed,
                                             seeded=False)
            assert cert.passed, (seed, cert.summary())
            assert {"pit_pairs[id]", "pit_pairs[argmax]", "pit_tuple[id]"} <= set(cert.checks)


@pytest.mark.slow
def test_exact_chain_decoders_pass_in_20_seeds():
    model, target, prompts = setup()
    names = ("token_chain", "block_chain", "rrs", "token_chain_one_hot")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        for seed in range(20):
            name = names[seed % len(names)]
            cert = exactness.certify_decoder(CORRECT[name](model), target, prompts, new_tokens=4, n=150,
                                             seed=seed, seeded=False)
            assert cert.passed, (name, seed, cert.summary())


# --------------------------------------------------------------------------- item 2: impossible tokens
def _truncated(V):
    """Target uniform over ids 0..V-2: id V-1 has target probability 0."""
    def target(contexts):
        p = np.full((np.asarray(contexts).shape[0], V), 1.0 / (V - 1))
        p[:, -1] = 0.0
        return p
    return target


class EmitsTheLastId:
    """Exact for the truncated target, except that token ``at`` (0-based) is id V-1 in one continuation in
    ``every``."""

    def __init__(self, V, at, every=50):
        self.V, self.at, self.every = V, at, every

    def sample(self, prompts, new_tokens, rng):
        B = np.asarray(prompts).shape[0]
        out = rng.integers(self.V - 1, size=(B, new_tokens))
        hit = rng.random(B) < 1.0 / self.every
        out[hit, self.at] = self.V - 1
        return out


@pytest.mark.parametrize("Vt, at, n", [(V, 0, 2_000), (V, 0, 50), (5, 0, None), (V, 3, 500)],
                         ids=["joint-2000", "joint-50", "planned-n", "token4"])
def test_a_token_of_target_probability_0_fails_at_once(Vt, at, n):
    """Raised "n = ... continuations per prompt are too few ... raise n" at every n (the zero cell left the joint
    check no degree of freedom).  One impossible token is enough: FAIL naming token, prompt, prefix and count."""
    cert = exactness.certify_decoder(EmitsTheLastId(Vt, at), _truncated(Vt), np.array([[3], [2]]), new_tokens=4,
                                     n=n, seed=2)
    cause = _subject_fail(cert, f"token {Vt - 1} of target probability 0", f"at new token {at + 1}",
                          "after prompt")
    imp = cert.details["impossible"]
    assert imp["token"] == Vt - 1 and imp["position"] == at + 1 and len(imp["prefix"]) == at
    assert imp["count"] >= 1 and f"{imp['count']:,} such tokens" in cause


def test_transformers_topk3_against_a_topk2_target_fails_naming_the_token():
    """Real case: generate with top_k = 3 certified against the target law processed with top_k = 2 (tiny random
    local models, nothing downloaded)."""
    pytest.importorskip("transformers")
    import torch

    from exactness.adapters.hf import HFDecoder, hf_target
    from _decoding_tiny import tiny_model

    torch.set_num_threads(1)
    model = tiny_model("llama", vocab=6, seed=31, scale=1.0)
    prompt = np.array([[1, 2, 3]], dtype=np.int64)
    cert = exactness.certify_decoder(HFDecoder(model, top_k=3), hf_target(model, top_k=2), prompt, new_tokens=2,
                                     n=60, seed=0, seeded=False)
    _subject_fail(cert, "of target probability 0", "after prompt 0 ([1, 2, 3])")
    assert cert.details["impossible"]["count"] >= 1


# --------------------------------------------------------------------------- item 3: misbehaving decoders
def _exact():
    model, target, prompts = setup()
    return CORRECT["token_chain"](model), target, prompts


class Raises:
    def sample(self, prompts, new_tokens, rng):
        raise ZeroDivisionError("division by zero in the draft loop")


class WrongShape:
    def __init__(self, inner):
        self.inner = inner

    def sample(self, prompts, new_tokens, rng):
        return self.inner.sample(prompts, new_tokens, rng)[:, :1]


class Floats:
    def __init__(self, inner):
        self.inner = inner

    def sample(self, prompts, new_tokens, rng):
        return self.inner.sample(prompts, new_tokens, rng).astype(np.float32)


class OutsideV:
    def __init__(self, inner):
        self.inner = inner

    def sample(self, prompts, new_tokens, rng):
        out = self.inner.sample(prompts, new_tokens, rng)
        out[0, 0] = 4                              # V = 4
        return out


def _misbehaving():
    dec, _, _ = _exact()
    return {"raises": (Raises(), "decoder.sample(prompts, new_tokens, rng) raised ZeroDivisionError"),
            "shape": (WrongShape(dec), "returned shape"),
            "dtype": (Floats(dec), "dtype float32"),
            "outside": (OutsideV(dec), "outside the target's vocabulary [0, 4)")}


@pytest.mark.parametrize("kind", ["raises", "shape", "dtype", "outside"])
def test_a_misbehaving_decoder_is_a_fail_naming_the_cause(kind):
    dec, cause = _misbehaving()[kind]
    _, target, prompts = _exact()
    _subject_fail(exactness.certify_decoder(dec, target, prompts, n=100), cause)


def test_a_plain_callable_decoder_that_raises_is_a_fail():
    _, target, prompts = _exact()

    def dec(prompt, new_tokens, rng):
        raise KeyError("cache slot")

    _subject_fail(exactness.certify_decoder(dec, target, prompts, n=100),
                  "decoder(prompt, new_tokens, rng) raised KeyError")


def test_a_target_that_raises_stays_the_callers_error():
    dec, target, prompts = _exact()
    calls = []

    def bad_target(contexts):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("model file gone")
        return target(contexts)

    with pytest.raises(ValueError, match="target\\(contexts\\) raised RuntimeError"):
        exactness.certify_decoder(dec, bad_target, prompts, n=100)


MOD = textwrap.dedent("""
    import time
    import numpy as np
    from exactness.decoder_mutants import demo

    _DEC, TARGET, PROMPTS = demo(V=4, name="token_chain")

    class Raises:
        def sample(self, prompts, new_tokens, rng):
            raise ZeroDivisionError("division by zero in the draft loop")

    class OutsideV:
        def sample(self, prompts, new_tokens, rng):
            out = _DEC.sample(prompts, new_tokens, rng)
            out[0, 0] = 99
            return out

    class WrongShape:
        def sample(self, prompts, new_tokens, rng):
            return _DEC.sample(prompts, new_tokens, rng)[:, :1]

    class Hangs:
        def sample(self, prompts, new_tokens, rng):
            while True:
                time.sleep(3600)

    def raises():
        return Raises(), TARGET, PROMPTS

    def outside():
        return OutsideV(), TARGET, PROMPTS

    def shape():
        return WrongShape(), TARGET, PROMPTS

    def hangs():
        return Hangs(), TARGET, PROMPTS

    def bad_target():
        def target(contexts):
            raise RuntimeError("model file gone")
        return _DEC, target, PROMPTS

    def good():
        return _DEC, TARGET, PROMPTS
""")


@pytest.fixture()
def mod(tmp_path, monkeypatch):
    (tmp_path / "mydec37.py").write_text(MOD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("factory, cause", [("raises", "raised ZeroDivisionError"),
                                            ("outside", "outside the target's vocabulary"),
                                            ("shape", "returned shape")])
def test_cli_a_misbehaving_decoder_exits_1_naming_the_cause(mod, capsys, factory, cause):
    assert main(["certify-decoder", "--decoder", f"mydec37:{factory}", "--samples", "100",
                 "--out", "r/c.md", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: " in out and cause in out
    assert cause in (mod / "r" / "c.md").read_text()


def test_cli_a_target_that_raises_exits_2(mod, capsys):
    assert main(["certify-decoder", "--decoder", "mydec37:bad_target", "--samples", "100", "--out", "r/c.md"]) == 2
    assert "target(contexts) raised RuntimeError" in capsys.readouterr().err


# --------------------------------------------------------------------------- item 6: time limits
@pytest.fixture()
def short_grace(monkeypatch):
    """A hang is stopped soon after its time limit (the default grace is max(10 s, time_limit))."""
    import exactness._timeout as timeout

    monkeypatch.setattr(timeout, "HANG_GRACE", 0.5)


def test_a_hanging_decoder_is_stopped_and_is_the_cause(short_grace):
    _, target, prompts = _exact()

    class Hangs:
        def sample(self, prompts, new_tokens, rng):
            while True:
                time.sleep(3600)

    _subject_fail(exactness.certify_decoder(Hangs(), target, prompts, n=100, time_limit=2),
                  "time_limit = 2 s passed", "decoder.sample(prompts, new_tokens, rng) did not return")


def test_cli_time_limit_stops_a_hanging_decoder_exit_1(mod, capsys, short_grace):
    assert main(["certify-decoder", "--decoder", "mydec37:hangs", "--samples", "100", "--time-limit", "2",
                 "--out", "r/c.md", "--no-progress"]) == 1
    assert "did not return" in capsys.readouterr().out


def test_time_limit_is_checked(mod, capsys):
    _, target, prompts = _exact()
    with pytest.raises(ValueError, match="time_limit"):
        exactness.certify_decoder(_exact()[0], target, prompts, n=100, time_limit=-1)
    assert main(["certify-decoder", "--decoder", "mydec37:good", "--time-limit", "-3", "--out", "r/c.md"]) == 2
    assert "--time-limit" in capsys.readouterr().err


# --------------------------------------------------------------------------- item 10: progress
def test_progress_goes_to_stderr_only(mod, capsys, monkeypatch):
    monkeypatch.setattr(exactness.decoder, "PROGRESS_AFTER", 0.0)
    assert main(["certify-decoder", "--decoder", "mydec37:good", "--samples", "300", "--out", "r/c.md"]) == 0
    cap = capsys.readouterr()
    assert "certify-decoder: drawing the main sample" in cap.err and "certify-decoder: PIT pass" in cap.err
    assert "certify-decoder:" not in cap.out
