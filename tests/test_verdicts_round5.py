"""Every verdict right, round 5: a run's own time_limit is the caller's, not the subject's.

A certificate whose whole-run ``time_limit`` passed while every call of the subject returned (a slow exact decoder,
a limit too short for the budget) was a FAIL naming the subject (exit 1): an exact subject failed.  Now past the limit
no new call starts and the run ends with a ``BudgetError`` (exit 2, "raise time_limit"); a call still running
``time_limit + max(HANG_GRACE, time_limit)`` seconds in is a hang: a FAIL naming it (``tests/test_verdicts_decoder.py``
and ``tests/test_acceptance_bound.py`` pin those).
"""

import textwrap
import time

import numpy as np
import pytest

import exactness
from exactness.budget import BudgetError
from exactness.decoder_mutants import CORRECT
from exactness.pathlevel import certify_path
from resispec.cli import main
from resispec.pathlevel import get_path_verifier
from simulators.autoregressive import MarkovPair

from _decoder_cases import setup
from _subjects import spawn_cli


class Slow:
    """An exact decoder that takes ``delay`` seconds a call."""

    def __init__(self, decoder, delay):
        self.decoder, self.delay = decoder, delay

    def sample(self, prompts, new_tokens, rng):
        time.sleep(self.delay)
        return self.decoder.sample(prompts, new_tokens, rng)


def test_a_slow_exact_decoder_past_the_time_limit_is_the_callers_budget_not_a_fail():
    model, target, prompts = setup()
    with pytest.raises(BudgetError, match=r"time_limit = 1 s passed .* no call of the subject hung"):
        exactness.certify_decoder(Slow(CORRECT["token_chain"](model), 0.2), target, prompts, new_tokens=2, n=3000,
                                  time_limit=1)


def test_a_tiny_time_limit_on_the_api_is_the_callers_budget():
    """The CLI refuses --time-limit under 1 s; the API took 0.01 and FAILed an exact decoder as a hang."""
    model, target, prompts = setup()
    with pytest.raises(BudgetError, match="raise time_limit"):
        exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, new_tokens=2, n=3000,
                                  time_limit=0.01)


def test_the_exact_decoder_within_its_limit_still_passes():
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, new_tokens=2, n=3000,
                                     time_limit=600)
    assert cert.passed, cert.summary()


MOD = textwrap.dedent("""
    import time
    from exactness.decoder_mutants import CORRECT
    from _decoder_cases import setup

    MODEL, TARGET, PROMPTS = setup()
    _DEC = CORRECT["token_chain"](MODEL)

    class Slow:
        def sample(self, prompts, new_tokens, rng):
            time.sleep(0.3)
            return _DEC.sample(prompts, new_tokens, rng)

    def slow():
        return Slow(), TARGET, PROMPTS
""")


def test_cli_a_slow_exact_decoder_past_time_limit_is_exit_2_not_1(tmp_path, monkeypatch, capsys):
    import sys
    from pathlib import Path

    (tmp_path / "myslow5.py").write_text(MOD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert "myslow5" not in sys.modules
    assert main(["certify", "decoder", "--decoder", "myslow5:slow", "--n", "3000", "--time-limit", "1",
                 "--out", "r/c.md", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "time-limit = 1 s passed" in err and "no call of the subject hung" in err and "raise" in err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


class SlowRule:
    """Block verification (exact) taking ``delay`` seconds a call."""

    def __init__(self, delay):
        self.rule, self.delay = get_path_verifier("block"), delay

    def verify(self, p, q, drafts, rng=None):
        time.sleep(self.delay)
        return self.rule.verify(p, q, drafts, rng)


def test_a_slow_exact_path_rule_past_the_time_limit_is_the_callers_budget():
    pair = MarkovPair.random(np.random.default_rng(0), 3)
    with pytest.raises(BudgetError, match="raise time_limit"):
        certify_path(SlowRule(0.05), pair, 2, n=2000, seed=0, time_limit=1)


# --------------------------------------------------------------------------- a SIGINT the subject sends itself
SIGNALS = textwrap.dedent("""
    import os
    import signal
    import threading
    import time

    from resispec import get_verifier

    RRS = get_verifier("rrs")

    class SignalsItself:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)                          # the signal is delivered here
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class SignalsItsSupervisor:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(1)
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class ClosesThePipe:
        '''Closes every descriptor past 2 (the supervisor's pipe among them), then signals itself.'''
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os.closerange(3, 256)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class SignalsItsSupervisorUsr1:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os.kill(os.getppid(), signal.SIGUSR1)       # its default would end the supervisor, orphaning the run
            time.sleep(1)
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class Slow:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            time.sleep(0.002)
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class SignalsLater:
        '''Exact, but a thread of its own sends SIGINT to the process while the harness computes.'''
        drafting = "iid"
        started = False

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            if not SignalsLater.started:
                SignalsLater.started = True
                threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
            return RRS.verify(p, q, c, rng, uniforms=uniforms)
""")
CERTIFY = ["certify", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants", "--no-progress", "--out",
           "o/r.md"]


def _spawn(tmp_path, args):
    return spawn_cli(tmp_path, {"r5sig.py": SIGNALS}, args)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="POSIX signals, supervised run")
@pytest.mark.parametrize("subject, words", [("SignalsItself", "KeyboardInterrupt"),
                                            ("SignalsLater", "KeyboardInterrupt"),
                                            ("SignalsItsSupervisor", "sent SIGINT to the supervising"),
                                            ("ClosesThePipe", "KeyboardInterrupt"),
                                            ("SignalsItsSupervisorUsr1", "sent SIGUSR1 to the supervising")])
def test_a_subject_that_sends_itself_sigint_is_a_fail_not_a_ctrl_c(tmp_path, subject, words):
    """It was exit 130 ("interrupted (Ctrl-C)"), no verdict: the supervised child counts a SIGINT as the user's only
    when the supervisor passed it on, and the supervisor passes on only a signal from outside the run's processes
    (a real Ctrl-C: ``tests/test_verdicts_round3.py`` sends one, still 130)."""
    p = _spawn(tmp_path, CERTIFY + ["--verifier", f"r5sig:{subject}"])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and words in out + err and "(Ctrl-C)\n" not in err, (p.returncode, err)


# --------------------------------------------------------------------------- bench --from-json: numbers no bench writes
@pytest.mark.parametrize("field, value, words", [("efficiency", float("nan"), "not a finite number"),
                                                 ("efficiency", float("inf"), "not a finite number"),
                                                 ("efficiency", 0.5, "below 1"),
                                                 ("stderr", -1.0, "negative"),
                                                 ("ratio", "1.2", "not a finite number")])
def test_bench_from_json_refuses_numbers_no_bench_writes(tmp_path, capsys, field, value, words):
    """A NaN or Infinity efficiency rendered as a report of 'nan' rows, exit 0."""
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).resolve().parents[1] / "reports" / "bench.json").read_text())
    row = data["rows"][3]
    label = next(iter(row[field]))
    row[field][label] = value
    (tmp_path / "b.json").write_text(json.dumps(data))
    assert main(["bench", "--from-json", str(tmp_path / "b.json"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--from-json" in err and "row 3" in err and words in err, err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


# --------------------------------------------------------------------------- list options: an item given twice
@pytest.mark.parametrize("args", [["bench", "--families", "zipf,zipf"], ["bench", "--trees", "4", "--trees", "4"],
                                  ["bench", "--trees", "2,1", "2, 1"],
                                  ["certify", "--k", "2", "--k", "2"], ["bench", "accept", "--V", "8", "8"],
                                  ["bench", "gap", "--T", "1", "1.0"]])
def test_a_list_option_naming_an_item_twice_is_refused(tmp_path, capsys, args):
    """`bench --families zipf,zipf` ran every zipf row twice and counted both in the report's means, exit 0."""
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "twice; give each item once" in err or "are the same shape" in err, err
    assert not (tmp_path / "o").exists()


def test_families_dial_is_checked_before_the_table_is_computed(tmp_path, capsys, monkeypatch):
    """A misspelt --dial parameter was refused only after the whole divergence table had been computed."""
    import simulators

    def table(*a, **k):
        raise AssertionError("the table ran before --dial was checked")

    monkeypatch.setattr(simulators, "divergence_table", table)
    for dial, words in ((["softmax_noise", "nois", "1"], "no parameter 'nois'"),
                        (["softmax_noise", "noise", "1,inf"], "finite numbers")):
        assert main(["families", "--dial", *dial, "--out", str(tmp_path / "f.md")]) == 2
        assert words in capsys.readouterr().err


def test_models_list_calls_a_truncated_or_unstamped_file_what_it_is(tmp_path, monkeypatch, capsys):
    """A truncated GGUF (an interrupted copy) was listed as 'cached'."""
    from resispec.decoding import fetch

    monkeypatch.setenv("RESISPEC_CACHE", str(tmp_path))
    spec = fetch.get_model_spec("smollm2-135m")
    path = fetch.model_dir(spec.name) / spec.filename
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF" + bytes(100))
    assert main(["models", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(spec.name))
    assert "corrupt (104 of" in line and f"models fetch --force {spec.name}" in line and " cached " not in line
    with open(path, "r+b") as fh:                      # the pinned size, never hashed: not 'cached' either
        fh.truncate(spec.nbytes)
    assert main(["models", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(spec.name))
    assert f"unverified (resispec models verify {spec.name})" in line


# --------------------------------------------------------------------------- round-5 breaker: hangs the alarm names
class _Base:
    """An exact batched decoder (token chain) with no events; subclasses hang on their first call."""

    sample_events = None
    per_row_rng = False

    def __init__(self):
        model, _, _ = setup()
        self.inner = CORRECT["token_chain"](model)
        self.calls = 0

    def sample(self, prompts, new_tokens, rng):
        self.calls += 1
        return self.inner.sample(prompts, new_tokens, rng)


class SwallowsOnce(_Base):
    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        if self.calls == 1:              # the first call: no load makes the run's deadline pass before it
            try:
                time.sleep(3600)
            except BaseException:                 # the harness's alarm, swallowed once; then it returns
                pass
        return out


class _HangsOnConversion:
    def __array__(self, dtype=None, copy=None):
        time.sleep(3600)


class HangsInItsOutput(_Base):
    def sample(self, prompts, new_tokens, rng):
        out = super().sample(prompts, new_tokens, rng)
        return _HangsOnConversion() if self.calls == 1 else out


class HangsInAHook(_Base):
    @property
    def per_row_rng(self):
        time.sleep(3600)


@pytest.fixture()
def short_grace(monkeypatch):
    import exactness._timeout as timeout

    monkeypatch.setattr(timeout, "HANG_GRACE", 0.5)


@pytest.mark.parametrize("cls, names", [(SwallowsOnce, "decoder.sample"), (HangsInItsOutput, "__array__"),
                                        (HangsInAHook, "per_row_rng")])
def test_a_decoder_hanging_where_the_alarm_finds_it_is_a_fail_not_the_callers_budget(short_grace, cls, names):
    """Breaker (round 5): each was BudgetError (exit 2, 'no call of the subject hung'): a call that swallowed the
    alarm and returned, the conversion of a returned object (``__array__``) and a hook read outside a marked
    call."""
    model, target, prompts = setup()
    cert = exactness.certify_decoder(cls(), target, prompts, new_tokens=2, n=3000, time_limit=2)
    assert not cert.passed and "did not return" in cert.details["subject"]["error"], cert.summary()
    assert names in cert.details["subject"]["error"], cert.details["subject"]["error"]


def test_a_hanging_target_is_the_callers_input_like_a_raising_one(short_grace):
    model, _, prompts = setup()

    def target(contexts):
        time.sleep(3600)

    with pytest.raises(ValueError, match="target hangs"):
        exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, new_tokens=2, n=3000, time_limit=1)


class SwallowingRule(SlowRule):
    calls = 0

    def verify(self, p, q, drafts, rng=None):
        SwallowingRule.calls += 1
        if SwallowingRule.calls == 1:
            try:
                time.sleep(3600)
            except BaseException:
                pass
        return self.rule.verify(p, q, drafts, rng)


def test_a_path_rule_that_swallows_the_alarm_once_is_a_hang(short_grace):
    pair = MarkovPair.random(np.random.default_rng(0), 3)
    cert = certify_path(SwallowingRule(0.0), pair, 2, n=2000, seed=0, time_limit=3)   # its LP comes first
    assert not cert.passed and "did not return" in cert.summary() and "SwallowingRule.verify" in cert.report()


HANGS_UNSTOPPABLY = textwrap.dedent("""
    import signal
    import time

    from exactness.decoder_mutants import CORRECT
    from _decoder_cases import setup

    MODEL, TARGET, PROMPTS = setup()

    class IgnoresTheAlarm:
        calls = 0

        def __init__(self):
            self.inner = CORRECT["token_chain"](MODEL)

        def sample(self, prompts, new_tokens, rng):
            IgnoresTheAlarm.calls += 1
            if IgnoresTheAlarm.calls == 1:
                signal.signal(signal.SIGALRM, signal.SIG_IGN)    # the run's alarm can no longer stop it
                time.sleep(3600)
            return self.inner.sample(prompts, new_tokens, rng)

    def ignores():
        return IgnoresTheAlarm(), TARGET, PROMPTS
""")


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="the supervisor forks (POSIX)")
def test_a_hang_the_runs_alarm_cannot_stop_is_killed_by_the_supervisor_and_fails(tmp_path):
    """Breaker (round 5): a decoder ignoring SIGALRM (or in one long C call, or swallowing the alarm in a loop) ran
    on past every limit (`timeout 40` stopped it). The supervisor kills a run still going hard + max(10 s, hard)
    after its timed run began (here 11 + 11 s): FAIL, exit 1."""
    from pathlib import Path

    p = spawn_cli(tmp_path, {"r5hang.py": HANGS_UNSTOPPABLY}, ["certify", "decoder", "--decoder", "r5hang:ignores",
                  "--n", "3000", "--time-limit", "1", "--no-progress", "--out", "o/c.md"],
                  paths=[Path(__file__).resolve().parent])
    _, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "was killed" in err and "SIGALRM ignored" in err, (p.returncode, err)


@pytest.mark.skipif(not __import__("pathlib").Path("/proc/self/task").exists(), reason="Linux /proc")
def test_a_stop_and_continue_of_the_supervisor_leaves_the_verdict_alone(tmp_path):
    """Breaker (round 5): Ctrl-Z then fg (SIGTSTP, SIGCONT) made an exact run exit 128 with no message (CPython's
    sigtimedwait returned an empty siginfo after the stop, read as 'signal 0'); a later SIGTERM then gave a
    traceback ('0 is not a valid Signals')."""
    import signal
    from pathlib import Path

    p = _spawn(tmp_path, CERTIFY[:6] + ["20000"] + CERTIFY[7:] + ["--verifier", "r5sig:Slow"])
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    for _ in range(1200):                             # until the supervisor has forked its child (not a time bound)
        if p.poll() is not None or (children.exists() and children.read_text().split()):
            break
        time.sleep(0.05)
    time.sleep(1)
    p.send_signal(signal.SIGTSTP)
    time.sleep(0.3)
    p.send_signal(signal.SIGCONT)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0 and "NO BIAS DETECTED" in out and "Traceback" not in err, (p.returncode, err)
