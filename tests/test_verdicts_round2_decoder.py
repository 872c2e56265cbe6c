"""Issue 37, round 2, certify_decoder: what a tester found after round 1.

- a decoder (plain callable, ``sample``, ``sample_events``, ``draft_law``, a ``per_row_rng`` ``sample``, a
  ChainDecoder kernel) that calls ``sys.exit(2)`` escaped as ``SystemExit`` (the CLI exited 2 in silence): now a
  FAIL naming "called sys.exit(2)" (exit 1); Ctrl-C still stops the run;
- an exact decoder that writes into its ``prompts`` buffer after sampling was FAILed with a false cause (the
  harness handed it a view of its own prompts and read the ids back): now it passes, the verdict is on what it
  emits;
- which ``n`` is which: ``n`` / ``--samples`` is per prompt, ``Certificate.n`` (the summary's) the pooled total;
  the first note, the terminal table and the report say so, as docs/decoders.md does;
- docs/decoders.md states the joint check's real rule (the largest m <= 3 with V^m <= JOINT_MAX) and that events
  contradicting the tokens are a FAIL, not a ValueError.
"""

import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _subjects import subject_fail as _subject_fail

import exactness
from exactness.chain import ChainDecoder, chain_decoder, chain_target, token_chain_kernel
from exactness.decoder import JOINT_MAX, joint_tokens, n_text, terminal_table, to_markdown
from resispec.cli import main
from simulators.autoregressive import MarkovPair

DOCS = Path(__file__).resolve().parents[1] / "docs" / "decoders.md"
V = 4


def _law(ctx):
    """Next-token law (V,) after ``ctx``; token 3 is impossible right after token 0 (so a harness that reads a
    scribbled prompt back sees "impossible" tokens)."""
    last, s = int(ctx[-1]), int(np.sum(ctx))
    w = np.array([1.0 + s % 3, 2.0, 1.0 + last, 0.0 if last == 0 else 0.5])
    return w / w.sum()


def target(contexts):
    return np.stack([_law(c) for c in np.asarray(contexts)])


def exact(prompt, new_tokens, rng):
    ctx, out = list(prompt), []
    for _ in range(new_tokens):
        t = int(rng.choice(V, p=_law(np.array(ctx))))
        out.append(t)
        ctx.append(t)
    return np.array(out, dtype=np.int64)


PROMPTS = np.array([[0], [1], [2]])


class Batched:
    def sample(self, prompts, new_tokens, rng):
        return np.stack([exact(p, new_tokens, rng) for p in prompts])




# --------------------------------------------------------------------------- sys.exit inside the subject
def _exiting(prompt, new_tokens, rng):
    sys.exit(2)


class ExitSample:
    def sample(self, prompts, new_tokens, rng):
        sys.exit(2)


class ExitLater(Batched):
    """Exits on its 4th call (after the homogeneous batches have started)."""

    calls = 0

    def sample(self, prompts, new_tokens, rng):
        self.calls += 1
        if self.calls > 3:
            raise SystemExit(2)
        return super().sample(prompts, new_tokens, rng)


class ExitDraftLaw(Batched):
    def draft_law(self, contexts):
        sys.exit(2)


class ExitPerRow(Batched):
    """Exact with one Generator; calls sys.exit when handed its declared list of per-row Generators."""

    per_row_rng = True

    def sample(self, prompts, new_tokens, rng):
        if isinstance(rng, list):
            sys.exit(2)
        return super().sample(prompts, new_tokens, rng)


PAIR = MarkovPair.random(np.random.default_rng(0), V)


class ExitEvents(ChainDecoder):
    def sample_events(self, prompts, new_tokens, rng):
        sys.exit(2)


def _exit_kernel(target_probs, draft_probs, draft_ids, rng):
    sys.exit(2)


@pytest.mark.parametrize("make, words", [
    (lambda: (_exiting, target, PROMPTS), ["decoder(prompt, new_tokens, rng)"]),
    (lambda: (ExitSample(), target, PROMPTS), ["decoder.sample(prompts, new_tokens, rng)"]),
    (lambda: (ExitLater(), target, PROMPTS), ["decoder.sample(prompts, new_tokens, rng)"]),
    (lambda: (ExitDraftLaw(), target, PROMPTS), ["decoder.draft_law(contexts)"]),
    (lambda: (ExitPerRow(), target, PROMPTS), ["per_row_rng"]),
    (lambda: (ExitEvents(token_chain_kernel, PAIR), chain_target(PAIR), PROMPTS), ["decoder.sample_events"]),
    (lambda: (chain_decoder(_exit_kernel, PAIR), chain_target(PAIR), PROMPTS), ["chain kernel _exit_kernel"]),
], ids=["callable", "sample", "sample-later", "draft_law", "per_row_rng", "sample_events", "chain-kernel"])
def test_a_decoder_that_calls_sys_exit_is_a_fail_naming_it(make, words):
    """Escaped as SystemExit from certify_decoder (the CLI exited 2 with nothing printed)."""
    dec, tgt, prompts = make()
    cert = exactness.certify_decoder(dec, tgt, prompts, new_tokens=2, n=200, seed=0)
    _subject_fail(cert, "called sys.exit(2)", *words)


def test_a_chain_kernel_that_calls_sys_exit_raises_a_subject_error_not_system_exit():
    dec = chain_decoder(_exit_kernel, PAIR)
    with pytest.raises(exactness.SubjectError, match=r"chain kernel _exit_kernel called sys\.exit\(2\)"):
        dec.sample(np.array([[0], [1]]), 2, np.random.default_rng(0))


def test_ctrl_c_inside_the_decoder_still_stops_the_run():
    class Interrupted:
        def sample(self, prompts, new_tokens, rng):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        exactness.certify_decoder(Interrupted(), target, PROMPTS, n=100)


MOD = textwrap.dedent("""
    import sys
    import numpy as np

    from test_verdicts_round2_decoder import PROMPTS, Batched, target

    def exiting(prompt, new_tokens, rng):
        sys.exit(2)

    class Scribbles(Batched):
        def sample(self, prompts, new_tokens, rng):
            out = super().sample(prompts, new_tokens, rng)
            prompts[:] = 1
            return out

    def make():
        return exiting, target, PROMPTS

    def scribbles():
        return Scribbles(), target, PROMPTS
""")


@pytest.fixture()
def mod(tmp_path, monkeypatch):
    (tmp_path / "mydec_r2.py").write_text(MOD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    return tmp_path


def test_cli_a_decoder_that_calls_sys_exit_exits_1_naming_it(mod, capsys):
    """`resispec certify-decoder --decoder mydec:make --new-tokens 2 --samples 200` exited 2 in silence."""
    assert main(["certify-decoder", "--decoder", "mydec_r2:make", "--new-tokens", "2", "--samples", "200",
                 "--out", "r/c.md", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "FAIL: " in out and "called sys.exit(2)" in out
    assert "called sys.exit(2)" in (mod / "r" / "c.md").read_text()


# --------------------------------------------------------------------------- a decoder that scribbles on prompts
class Scribbles(Batched):
    """Exact; writes into its prompts buffer after sampling."""

    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        prompts[:] = 1
        return out


class ScribblesBefore(Batched):
    """Samples after overwriting its prompts: emits the law of another context, a real bias."""

    def sample(self, prompts, new_tokens, rng):
        prompts[:] = 1
        return super().sample(prompts, new_tokens, rng)


class ScribblingChain(ChainDecoder):
    """The exact token chain with events; both sample and sample_events scribble on their prompts after."""

    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        prompts[:] = 0
        return out

    def sample_events(self, prompts, new_tokens, rng):
        out = super().sample_events(prompts, new_tokens, rng)
        prompts[:] = 0
        return out


def _scribble_callable(prompt, new_tokens, rng):
    out = exact(prompt, new_tokens, rng)
    prompt[...] = 2
    return out


@pytest.mark.parametrize("dec", [Scribbles(), _scribble_callable], ids=["sample", "callable"])
def test_an_exact_decoder_that_writes_into_its_prompts_passes(dec):
    """Was FAILed with "emitted token 3 of target probability 0 ...": the harness read the scribbled prompt back."""
    cert = exactness.certify_decoder(dec, target, PROMPTS, new_tokens=3, n=300, seed=0)
    assert cert.passed, cert.report()


def test_an_exact_decoder_with_events_that_writes_into_its_prompts_passes():
    """sample_events was handed the prompts sample had just scribbled on: a false "different tokens" FAIL."""
    pair = MarkovPair.random(np.random.default_rng(1), V)
    dec = ScribblingChain(token_chain_kernel, pair, gamma=2)
    cert = exactness.certify_decoder(dec, chain_target(pair), np.array([[1], [2], [3]]), new_tokens=3, n=300,
                                     seed=0)
    assert cert.passed, cert.report()
    assert "accepted_count" in cert.checks


def test_a_decoder_that_overwrites_its_prompts_before_sampling_still_fails():
    cert = exactness.certify_decoder(ScribblesBefore(), target, PROMPTS, new_tokens=2, n=2000, seed=0)
    assert not cert.passed


def test_cli_an_exact_decoder_that_writes_into_its_prompts_exits_0(mod, capsys):
    assert main(["certify-decoder", "--decoder", "mydec_r2:scribbles", "--new-tokens", "2", "--samples", "200",
                 "--out", "r/c.md", "--no-progress"]) == 0


# --------------------------------------------------------------------------- which n is which
def test_the_pooled_and_per_prompt_n_are_both_stated(mod, capsys):
    """The docs said n is per prompt; the summary printed the pooled total (n = 150,000 with 3 prompts x 50,000)."""
    cert = exactness.certify_decoder(Batched(), target, PROMPTS, new_tokens=2, n=300, seed=0)
    assert cert.n == 900 and cert.details["plan"]["n_per_prompt"] == 300
    assert "n = 900" in cert.summary()
    assert cert.notes[0] == "n = 900 continuations (300 per prompt x 3 prompts)" == n_text(300, 3)
    assert terminal_table(cert).splitlines()[0].startswith("n = 900 continuations (300 per prompt x 3 prompts)")
    assert "n = 900 continuations (300 per prompt x 3 prompts)" in to_markdown(cert)
    assert "note: n = 900 continuations (300 per prompt x 3 prompts)" in cert.report()
    one = exactness.certify_decoder(Batched(), target, PROMPTS[:1], new_tokens=2, n=300, seed=0)
    assert one.n == 300 and terminal_table(one).startswith("n = 300 continuations (one prompt)")


# --------------------------------------------------------------------------- docs/decoders.md against the code
def test_joint_tokens_is_the_largest_m_that_enumerates():
    assert [joint_tokens(v, 3) for v in (4, 100, 101, 128, 1000, 1001, JOINT_MAX, JOINT_MAX + 1)] == \
        [3, 3, 2, 2, 2, 1, 1, 0]
    assert joint_tokens(4, 1) == 1 and joint_tokens(4, 2) == 2 and joint_tokens(4, 9) == 3


def test_at_v_128_the_joint_covers_two_tokens():
    """docs said "the first min(new_tokens, 3) tokens (while V^m <= 1e6)"; at V = 128 the run used 2."""
    V128 = 128

    def uniform(contexts):
        return np.full((np.asarray(contexts).shape[0], V128), 1.0 / V128)

    class Uniform:
        def sample(self, prompts, new_tokens, rng):
            return rng.integers(V128, size=(np.asarray(prompts).shape[0], new_tokens))

    cert = exactness.certify_decoder(Uniform(), uniform, np.array([[0]]), new_tokens=3, n=400, seed=0)
    assert cert.details["plan"]["joint_tokens"] == 2 == joint_tokens(V128, 3)
    assert "tokens 1-2 only" in cert.details["scope"]["note"]


def test_docs_decoders_match_the_code():
    text = " ".join(DOCS.read_text().split())
    # stale: events that disagree with the tokens are a FAIL (subject error), not a ValueError
    assert "are a `ValueError` naming the fix" not in text
    assert "are the decoder's misbehaviour: a FAIL certificate naming the cause" in text
    # stale: the joint rule
    assert "`min(new_tokens, 3)` tokens (while `V^m <= 1e6`)" not in text
    assert "m = min(new_tokens, 3)` tokens (while" not in text
    assert "the largest `m <= min(new_tokens, 3)` with `V^m <= JOINT_MAX = 1,000,000`" in text
    assert "joint_tokens(V, new_tokens)" in text
    assert "V = 100 gives 3 tokens, V = 101 to 1,000 gives 2, V = 1,001 to 1,000,000 gives 1" in text
    assert joint_tokens(100, 3) == 3 and joint_tokens(101, 3) == joint_tokens(1000, 3) == 2
    assert joint_tokens(1001, 3) == joint_tokens(1_000_000, 3) == 1 and JOINT_MAX == 1_000_000
    # which n is which, in the words the code prints
    assert n_text(50_000, 3) == "n = 150,000 continuations (50,000 per prompt x 3 prompts)"
    assert f"`{n_text(50_000, 3)}`" in text
    assert "**pooled total**" in text
    # sys.exit inside the decoder
    assert "called sys.exit(2)" in text
