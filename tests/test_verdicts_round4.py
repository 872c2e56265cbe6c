"""Verdicts, round 4: what the round-3 breakers left, each pinned here.

- a subject that raises ``KeyboardInterrupt`` ITSELF (no Ctrl-C) was read as the user's Ctrl-C (exit 130, no
  verdict): under the CLI, which watches SIGINT (``exactness._checks.watch_interrupts``), it is the subject's FAIL
  naming it; a real Ctrl-C still stops the run (``tests/test_verdicts_round3.py`` sends one: 130);
- ``certify stepwise`` let a ``BaseException`` that is not an ``Exception`` (``asyncio.CancelledError``) escape
  from ``verify`` and ``step_plan`` as a traceback; a depth-2 tree kernel (``certify_coupled_tree``) that raised or
  returned the wrong shape was a TypeError / ValueError (bad input), not a FAIL; a decoder's output or target whose
  conversion raised a ``BaseException`` escaped;
- ``resispec certify --timeout 1e-9`` FAILed an exact verifier (every cell stopped before its first draw): a limit
  under ``exactness.limits.MIN_CELL_TIMEOUT`` is refused (exit 2, the caller's number);
- the first ``certify stepwise --time-limit 10`` after an install spent its 10 s compiling (448 of 6,905 draws,
  INCONCLUSIVE): one uncounted warm-up draw now runs before the clock starts.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import exactness._checks as checks
from exactness._checks import SubjectError, passes_through, subject_call
from exactness import certify_decoder
from exactness.stepwise import certify_stepwise
from resispec import get_verifier
from resispec.cli import main

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(4)
P, Q = RNG.dirichlet(np.ones(8)), RNG.dirichlet(np.ones(8))


# --------------------------------------------------------------------------- a KeyboardInterrupt of the subject's own
def test_a_keyboard_interrupt_is_ctrl_c_only_when_a_sigint_came_while_watched(monkeypatch):
    monkeypatch.setattr(checks, "_INTERRUPTS", None)          # a library call: not watched, taken for Ctrl-C
    assert passes_through(KeyboardInterrupt())
    monkeypatch.setattr(checks, "_INTERRUPTS", [])            # watched, no SIGINT received: the subject's own
    assert not passes_through(KeyboardInterrupt())

    def interrupts():
        raise KeyboardInterrupt

    with pytest.raises(SubjectError, match=r"Mine.verify raised KeyboardInterrupt.*no Ctrl-C \(SIGINT\)"):
        subject_call(interrupts, "Mine.verify")
    monkeypatch.setattr(checks, "_INTERRUPTS", [2])           # a SIGINT came: Ctrl-C, it passes through
    assert passes_through(KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        subject_call(interrupts, "Mine.verify")


SUBJECTS = textwrap.dedent("""
    import asyncio

    from resispec import get_verifier

    class Interrupts:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            raise KeyboardInterrupt

    def _stepwise(where, exc):
        inner = get_verifier("resispec", drafting="without_replacement")

        class Step:
            drafting = inner.drafting

            def step_plan(self, *args, **kwargs):
                if where == "step_plan":
                    raise exc
                return inner.step_plan(*args, **kwargs)

            def verify(self, *args, **kwargs):
                if where == "verify":
                    raise exc
                return inner.verify(*args, **kwargs)

        return Step()

    interrupts_in_verify = lambda: _stepwise("verify", KeyboardInterrupt())
    interrupts_in_step_plan = lambda: _stepwise("step_plan", KeyboardInterrupt())
""")


@pytest.mark.parametrize("args", [
    ["certify", "--verifier", "ki_r4:Interrupts", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--out", "o/r.md"],
    ["certify", "--verifier", "ki_r4:Interrupts", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--executor", "local", "--out", "o/r.md"],
    ["certify", "stepwise", "--verifier", "ki_r4:interrupts_in_verify", "--V", "8", "--k", "2", "--n", "300"],
    ["certify", "stepwise", "--verifier", "ki_r4:interrupts_in_step_plan", "--V", "8", "--k", "2", "--n", "300"],
    ["certify", "coupled", "--kernel", "ki_r4:Interrupts", "--V", "8", "--k", "2", "--n", "300"],
], ids=["certify", "certify-local", "stepwise-verify", "stepwise-step-plan", "coupled"])
def test_cli_a_subject_raising_keyboard_interrupt_itself_is_a_fail_not_ctrl_c(tmp_path, args):
    """Each exited 130 ("interrupted (Ctrl-C)") with no verdict, although nobody pressed Ctrl-C."""
    (tmp_path / "ki_r4.py").write_text(SUBJECTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    r = subprocess.run([sys.executable, "-m", "resispec", *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "KeyboardInterrupt" in r.stdout + r.stderr and "interrupted (Ctrl-C)" not in r.stderr


# --------------------------------------------------------------------------- BaseExceptions at the sites round 3 missed
@pytest.mark.parametrize("where", ["verify", "step_plan"])
def test_certify_stepwise_turns_a_cancelled_error_of_the_subject_into_a_fail(where):
    inner = get_verifier("resispec", drafting="without_replacement")

    class Step:
        drafting = inner.drafting

        def step_plan(self, *args, **kwargs):
            if where == "step_plan":
                raise asyncio.CancelledError("from step_plan")
            return inner.step_plan(*args, **kwargs)

        def verify(self, *args, **kwargs):
            if where == "verify":
                raise asyncio.CancelledError("from verify")
            return inner.verify(*args, **kwargs)

    cert = certify_stepwise(Step(), P, Q, 2, n=300)
    assert cert.verdict == "FAIL" and f"Step.{where}" in cert.cause and "CancelledError" in cert.cause, cert.cause


class _Unconvertible:
    """A decoder output whose conversion to an array raises a BaseException."""

    def __array__(self, *args, **kwargs):
        raise asyncio.CancelledError("from __array__")


def test_a_decoder_output_whose_conversion_raises_a_base_exception_is_a_fail():
    def decoder(prompt, new_tokens, rng):
        return _Unconvertible()

    cert = certify_decoder(decoder, lambda contexts: np.full((len(contexts), 3), 1 / 3), np.array([[0], [1]]),
                           new_tokens=2, n=200)
    assert not cert.passed and "CancelledError: from __array__" in cert.details["subject"]["error"], cert.details


def test_a_target_raising_a_base_exception_is_the_callers_error_naming_it():
    """The target is the reference law the caller supplies: a failing one is an error (as a raising one was)."""
    def target(contexts):
        raise asyncio.CancelledError("from the target")

    def decoder(prompt, new_tokens, rng):
        return np.zeros(new_tokens, dtype=np.int64)

    with pytest.raises(ValueError, match="target.contexts. raised CancelledError"):
        certify_decoder(decoder, target, np.array([[0], [1]]), new_tokens=2, n=200)


# --------------------------------------------------------------------------- the caller's limits
@pytest.mark.parametrize("timeout", ["1e-9", "0.5"])
def test_certify_refuses_a_cell_timeout_too_short_for_any_draw(timeout, capsys, tmp_path):
    rc = main(["certify", "--verifier", "rrs", "--k", "2", "--families", "zipf", "--no-mutants", "--timeout",
               timeout, "--out", str(tmp_path / "r.md")])
    err = capsys.readouterr().err
    assert rc == 2 and "--timeout must be 0 (no limit) or a number of seconds in [1, 1e7]" in err, err
    assert not (tmp_path / "r.md").exists()


def test_stepwise_warms_up_before_its_clock_with_its_own_draws(monkeypatch):
    """The warm-up verifies one uncounted draw before the deadline; the certificate's draws are unchanged."""
    import exactness.stepwise as stepwise

    inner = get_verifier("resispec", drafting="without_replacement")
    calls: list = []

    class Counted:
        drafting = inner.drafting

        def step_plan(self, *args, **kwargs):
            return inner.step_plan(*args, **kwargs)

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            calls.append(len(c))
            return inner.verify(p, q, c, rng, uniforms=uniforms)

    a = certify_stepwise(Counted(), P, Q, 2, n=300, seed=5)
    assert calls[0] == 1 and sum(calls[1:]) == 300             # one warm-up row, then the 300 counted draws
    monkeypatch.setattr(stepwise, "_warm_up", lambda *args: None)
    b = certify_stepwise(inner, P, Q, 2, n=300, seed=5)
    assert (a.n, a.events, a.states) == (b.n, b.events, b.states)


def test_the_calibration_line_says_when_its_p_values_are_too_few(capsys, tmp_path):
    """A one-cell run printed 'false-positive rate 0.000 (95% CI [0.000, 0.459])' from 6 p-values as if it meant
    something (a new user read it as a finding)."""
    from resispec.commands.certify import CALIBRATION_FEW

    rc = main(["certify", "--verifier", "rrs", "--k", "2", "--families", "zipf", "--no-mutants", "--n", "20000",
               "--no-progress", "--out", str(tmp_path / "r.md")])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("calibration:"))
    count = int(line.split()[1])
    assert rc == 0 and count < CALIBRATION_FEW and f"only {count} p-values: too few to judge" in line, line
