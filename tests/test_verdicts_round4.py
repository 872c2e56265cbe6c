"""Verdicts, round 4: what the round-3 breakers left, each pinned here.

- a subject that raises ``KeyboardInterrupt`` ITSELF (no Ctrl-C) was read as the user's Ctrl-C (exit 130, no
  verdict): under the CLI, which watches SIGINT (``exactness._checks.watch_interrupts``), it is the subject's FAIL
  naming it; a real Ctrl-C still stops the run (``tests/test_verdicts_round3.py`` sends one: 130);
- ``certify stepwise`` let a ``BaseException`` that is not an ``Exception`` (``asyncio.CancelledError``) escape
  from ``verify`` and ``step_plan`` as a traceback; a depth-2 tree kernel (``certify_coupled_tree``) that raised or
  returned the wrong shape was a TypeError / ValueError (bad input), not a FAIL; a decoder's output or target whose
  conversion raised a ``BaseException`` escaped;
- ``resispec certify --time-limit 1e-9`` FAILed an exact verifier (every cell stopped before its first draw): a limit
  under ``exactness.limits.MIN_CELL_TIMEOUT`` is refused (exit 2, the caller's number);
- the first ``certify stepwise --time-limit 10`` after an install spent its 10 s compiling (448 of 6,905 draws,
  INCONCLUSIVE): the clock now starts once the first batch returned (every draw still checked: a first try with
  an unchecked warm-up draw let a verifier wrong on its first call pass, a breaker found);
- with SIGINT ignored by the caller (``cmd &``, ``trap '' INT``) a subject's own KeyboardInterrupt was exit 130;
  under ``nohup`` a SIGHUP replaced the finished verdict by 129: ignored signals stay ignored.
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

from _subjects import spawn_cli

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
    ["certify", "coupled", "--verifier", "ki_r4:Interrupts", "--V", "8", "--k", "2", "--n", "300"],
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
    rc = main(["certify", "--verifier", "rrs", "--k", "2", "--families", "zipf", "--no-mutants", "--time-limit",
               timeout, "--out", str(tmp_path / "r.md")])
    err = capsys.readouterr().err
    assert rc == 2 and "--time-limit must be 0 (no limit) or a number of seconds in [1, 5e6]" in err, err
    assert not (tmp_path / "r.md").exists()


def _first_call(behaviour):
    """A declared-steps verifier (ResiSpec WOR) whose FIRST verify call does ``behaviour(p, q, c, inner)``."""
    inner = get_verifier("resispec", drafting="without_replacement")
    calls: list = []

    class FirstCall:
        drafting = inner.drafting

        def step_plan(self, *args, **kwargs):
            return inner.step_plan(*args, **kwargs)

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            calls.append(len(c))
            if len(calls) == 1:
                out = behaviour(p, q, c, inner)
                if out is not None:
                    return out
            return inner.verify(p, q, c, rng, uniforms=uniforms)

    return FirstCall(), calls


def test_stepwise_checks_its_first_batch_whatever_the_clock():
    """A warm-up draw ran uncounted and unchecked before the clock (round 4, first try): a verifier wrong on its
    first call only passed with one worker and failed with two (a breaker).  Every draw is checked now."""
    from resispec import VerifyResult

    def candidate_zero(p, q, c, inner):                  # a cold-path bug: the first call emits candidate 0
        return VerifyResult(np.asarray(c[:, 0], dtype=np.int64), np.zeros(len(c), dtype=np.int64))

    for workers in (1, 2):
        verifier, _ = _first_call(candidate_zero)
        cert = certify_stepwise(verifier, RNG.dirichlet(np.ones(50)), RNG.dirichlet(np.ones(50)), 2, n=2000,
                                workers=workers, executor="local")
        # its law at the mismatch is rrs-exact afterwards (later calls): FAIL or INCONCLUSIVE, never a pass
        assert cert.verdict != "PASS" and cert.mismatches > 0 and cert.first_event["draw"] == 0, cert.summary()


def test_stepwise_starts_its_time_limit_once_the_first_batch_returned(monkeypatch):
    """The first calls compile (numba, ~9 s on a fresh install): a 10 s --time-limit stopped a fresh install's run
    after 448 of 6,905 draws.  A clock that the first call moves by 1,000 s (a stand-in for the compile) no longer
    stops the run."""
    import types

    import exactness.stepwise as stepwise

    clock = [0.0]
    monkeypatch.setattr(stepwise, "time", types.SimpleNamespace(monotonic=lambda: clock[0],
                                                                perf_counter=lambda: clock[0]))

    def compiles(p, q, c, inner):
        clock[0] += 1000.0
        return None

    verifier, calls = _first_call(compiles)
    cert = certify_stepwise(verifier, P, Q, 2, n=300, seed=5, time_limit=10.0)
    assert cert.n == 300 and sum(calls) == 300 and cert.verdict == "PASS", cert.summary()


def test_the_calibration_line_says_when_its_p_values_are_too_few(capsys, tmp_path):
    """A one-cell run printed 'false-positive rate 0.000 (95% CI [0.000, 0.459])' from 6 p-values as if it meant
    something (a new user read it as a finding)."""
    from resispec.commands.certify import CALIBRATION_FEW

    rc = main(["certify", "--verifier", "rrs", "--k", "2", "--families", "zipf", "--no-mutants", "--n", "20000",
               "--no-progress", "--out", str(tmp_path / "r.md")])
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("calibration:"))
    count = int(line.split()[1])
    assert rc == 0 and count < CALIBRATION_FEW and f"only {count} p-values: too few to judge" in line, line


# --------------------------------------------------------------------------- round-4 breaker (the CLI)
SUBJECTS_2 = textwrap.dedent("""
    import os
    import time

    from resispec import get_verifier

    RRS = get_verifier("rrs")

    class Interrupts:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            raise KeyboardInterrupt("its own")

    class Slow:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            time.sleep(0.002)
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class ClosesStdout:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            try:
                os.close(1)
            except OSError:
                pass
            return RRS.verify(p, q, c, rng, uniforms=uniforms)

    class MovesAway:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "elsewhere"))
            return RRS.verify(p, q, c, rng, uniforms=uniforms)
""")
CERTIFY = ["certify", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants", "--no-progress", "--out",
           "o/r.md"]


def _spawn(tmp_path, args, **kw):
    return spawn_cli(tmp_path, {"r4b.py": SUBJECTS_2}, args, **kw)


def _ignoring(*sigs):
    import signal

    def pre():
        for sig in sigs:
            signal.signal(sig, signal.SIG_IGN)
    return pre


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX signals")
def test_with_sigint_ignored_a_subjects_own_keyboard_interrupt_is_still_a_fail(tmp_path):
    """A background job (`cmd &`) or `trap '' INT` ignores SIGINT: no Ctrl-C can reach the run; it was exit 130."""
    import signal

    p = _spawn(tmp_path, CERTIFY + ["--verifier", "r4b:Interrupts"], preexec_fn=_ignoring(signal.SIGINT))
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "KeyboardInterrupt" in out + err and "Ctrl-C)" not in err, (p.returncode, err)


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/task").exists(), reason="POSIX fork, Linux /proc")
def test_under_nohup_a_hangup_does_not_replace_the_verdict(tmp_path):
    """`nohup resispec certify ...` and a SIGHUP mid-run: the run finished, wrote NO BIAS, and exited 129."""
    import signal
    import time

    p = _spawn(tmp_path, CERTIFY[:6] + ["20000"] + CERTIFY[7:] + ["--verifier", "r4b:Slow"],
               preexec_fn=_ignoring(signal.SIGHUP))
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    for _ in range(1200):                             # until the supervisor has forked its child (not a time bound)
        if p.poll() is not None or (children.exists() and children.read_text().split()):
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGHUP)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0 and "NO BIAS DETECTED" in out, (p.returncode, err[-2000:])


def test_a_subject_closing_stdout_is_a_fail_not_bad_input(tmp_path):
    p = _spawn(tmp_path, CERTIFY + ["--verifier", "r4b:ClosesStdout"])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and "standard output was closed during the run" in err, (p.returncode, err[-2000:])


def test_a_subject_changing_directory_does_not_move_the_report(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    p = _spawn(tmp_path, CERTIFY + ["--verifier", "r4b:MovesAway", "--executor", "local"])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0 and (tmp_path / "o" / "r.md").exists(), (p.returncode, err[-2000:])
    assert not (tmp_path / "elsewhere" / "o").exists()


@pytest.mark.parametrize("args, words", [
    (["certify", "--verifier", "rrs", "--time-limit", "1e-400"], "is below the smallest float"),
    (["certify", "--verifier", "rrs", "--time-limit", "1e10"], "--time-limit must be 0 (no limit)"),
    (["certify", "decoder", "--decoder", "exactness.decoder_mutants:demo", "--time-limit", "0.5"],
     "--time-limit must be 0 (no limit) or a number of seconds in [1, 5e6], got 0.5"),
    (["certify", "decoder", "--decoder", "exactness.decoder_mutants:demo", "--time-limit", "1e-400"],
     "is below the smallest float"),
])
def test_limits_too_short_for_any_draw_are_the_callers_error(args, words, capsys, tmp_path):
    """`certify decoder --time-limit 0.5` FAILed an exact decoder; `--time-limit 1e-400` read as 0 (no limit)."""
    assert main(args + ["--out", str(tmp_path / "r.md")]) == 2
    assert words in capsys.readouterr().err


def test_bench_decode_refuses_a_capture_over_its_own_report(tmp_path, capsys):
    same = str(tmp_path / "same.npz")
    assert main(["bench-decode", "--capture", same, "--out", same]) == 2
    assert "is where the report goes" in capsys.readouterr().err
    assert not (tmp_path / "same.npz").exists()


# --------------------------------------------------------------------------- round-4 breaker (the Python API)
def test_a_hanging_tree_kernel_is_stopped_and_fails(monkeypatch):
    """certify_coupled_tree had no time limit: a kernel that never returned blocked the caller forever."""
    import time

    import exactness._timeout as timeout
    from exactness.coupled.tree import certify_coupled_tree

    monkeypatch.setattr(timeout, "HANG_GRACE", 0.5)

    class Hangs:
        def verify_tree(self, *args, **coins):
            time.sleep(600)

    pc, qc = RNG.dirichlet(np.ones(8), 2), RNG.dirichlet(np.ones(8), 2)
    cert = certify_coupled_tree(Hangs(), "rrs", P, Q, pc, qc, 2, n=3000, time_limit=0.5)
    assert not cert.passed and "did not return" in cert.verdict, cert.verdict


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers")
def test_a_sampler_ending_its_process_with_workers_fails_in_a_worker_not_the_caller():
    """certify_sampler(workers=2) at n <= CHUNK (one job) ran the sampler in the caller: os._exit(0) ended the
    caller with status 0 (a pass to CI)."""
    code = textwrap.dedent("""
        import os, numpy as np, exactness
        def sample(rng, m):
            os._exit(0)
        cert = exactness.certify_sampler(sample, np.ones(8) / 8, 4000, workers=2)
        print("survived", cert.passed)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "survived False" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


def test_the_front_door_sends_a_step_declaring_rule_without_uniforms_to_the_verifier_route():
    """An exact rule with step_plan but verify(p, q, c, rng) (no uniforms=) went to the stepwise route, which
    replays uniforms: FAIL 'unexpected keyword argument uniforms' for an exact rule."""
    import exactness

    rrs = get_verifier("rrs")

    class NoUniforms:
        drafting = "iid"

        def step_plan(self, p_i, q_i, *, last):
            return rrs.step_plan(p_i, q_i, last=last)

        def verify(self, p, q, candidates, rng):
            return rrs.verify(p, q, candidates, rng)

    cert = exactness.certify(NoUniforms(), p=P, q=Q, k=2, budget=exactness.Budget(n=20_000))
    assert cert.outcome == "PASS", cert.summary()


def test_a_named_route_refuses_a_subject_it_would_drop():
    """certify(biased_verifier, route="counts", counts=exact_counts, p=p) passed: the verifier was never run."""
    import exactness
    from exactness.mutants import CATALOGUE

    with pytest.raises(ValueError, match="route 'counts' .* does not take a"):
        exactness.certify(CATALOGUE["always_accept"], route="counts", counts=np.full(8, 100), p=np.ones(8) / 8)


@pytest.mark.parametrize("kw, error, words", [
    (dict(alpha=0), ValueError, "alpha must lie in"), (dict(alpha="x"), TypeError, "alpha must be"),
    (dict(alpha=2), ValueError, "alpha must lie in"), (dict(n=10), TypeError, "pass tv=, not n="),
    (dict(tv=1e-12), ValueError, "MAX_COUNTED"),
])
def test_assert_coupled_names_the_callers_argument(kw, error, words):
    """alpha=0 was a raw ZeroDivisionError, alpha=2 'n must be >= 1, got -69', n=10 'multiple values for n'."""
    import exactness

    with pytest.raises(error, match=words):
        exactness.assert_coupled(get_verifier("rrs"), "rrs", P, Q, 2, **({"tv": 0.01} | kw))


def test_more_callers_arguments_named_up_front(tmp_path):
    """Breaker (Python API): assert_exact(k=2.0) was "'float' object is not iterable"; validate_proxy(seed='abc',
    certify=False) returned EXACT; certify_coupled(n=10**30) ran an hour before INCONCLUSIVE."""
    import exactness
    from exactness._checks import BudgetError

    rrs = get_verifier("rrs")
    with pytest.raises(TypeError, match="k must be an int or a tuple"):
        exactness.assert_exact(rrs, P, Q, k=2.0)
    with pytest.raises((TypeError, ValueError), match="seed"):
        exactness.validate_proxy(lambda R, q, x, *, step: q, P, Q, 2, seed="abc", certify=False)
    with pytest.raises(BudgetError, match="MAX_COUNTED"):
        exactness.certify_coupled(rrs, "rrs", P, Q, 2, n=10**30)


def test_the_pytest_plugin_refuses_bad_options_as_a_usage_error(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_x(exactness):\n    pass\n")
    for option in (["--exactness-alpha", "2"], ["--exactness-samples", "0"]):
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                            *option, str(tmp_path / "test_one.py")], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert r.returncode == 4 and "error: argument" in r.stderr, (option, r.returncode, r.stderr[-1000:])


def test_a_pass_without_power_says_so():
    """certify_counts([5, 0, 0], [1, 0, 0]) read 'NO BIAS DETECTED (detectable TV 1.26 ...)' with nothing else."""
    import exactness

    cert = exactness.certify_counts([5, 0, 0], [1.0, 0.0, 0.0])
    assert cert.passed and cert.detectable_tv >= 1 and "no power" in cert.summary(), cert.summary()


def test_an_exact_chain_kernel_writing_into_its_inputs_is_not_failed():
    """The harness read draft_ids / target_probs back after the kernel: the exact reference kernel followed by
    draft_ids[:] = out[:, :gamma] FAILed accepted_count and draft_law (p = 2.6e-271).  The kernel gets copies."""
    import exactness
    from exactness.chain import chain_decoder, chain_target, token_chain_kernel
    from simulators.autoregressive import MarkovPair

    pair = MarkovPair.random(np.random.default_rng(0), 4, noise=1.0)

    def writes_back(target_probs, draft_probs, draft_ids, rng):
        out = token_chain_kernel(target_probs, draft_probs, draft_ids, rng)
        draft_ids[:] = out[:, :draft_ids.shape[1]]
        target_probs[...] = 0.0
        return out

    writes_back.rule = "rrs"
    cert = exactness.certify_decoder(chain_decoder(writes_back, pair, gamma=2), chain_target(pair),
                                     np.array([[0], [1], [2]]), new_tokens=3, n=3000)
    assert cert.passed, cert.report()


@pytest.mark.parametrize("hook", ["sample_events", "rule", "draft_law", "events_q", "per_row_rng"])
def test_a_decoder_hook_that_raises_when_read_is_a_fail_naming_it(hook):
    import exactness
    from exactness.decoder_mutants import demo

    decoder, target, prompts = demo()

    class Proxy:
        def __init__(self, inner):
            self.__dict__["_inner"] = inner

        def __getattr__(self, name):
            if name == hook:
                raise RuntimeError(f"{name}: not available on this backend")
            return getattr(self.__dict__["_inner"], name)

    cert = exactness.certify_decoder(Proxy(decoder), target, prompts, new_tokens=2, n=2000)
    assert not cert.passed and f"reading decoder.{hook} raised RuntimeError" in cert.details["subject"]["error"]


# --------------------------------------------------------------------------- round-4 breaker (the other commands)
@pytest.mark.parametrize("args, words", [
    (["bench", "accept", "--families", "zipf", "--V", "10", "--k", "2", "--nodes", "2", "--n", "100"],
     "is a directory"),
    (["bench", "gap", "--families", "zipf", "--k", "2", "--V", "10", "--nodes", "1", "--n", "10"], "is a directory"),
    (["families", "--V", "10", "--nodes", "2"], "is a directory"),
])
def test_an_out_ending_in_a_slash_is_refused_before_any_work(args, words, tmp_path, capsys):
    """bench accept --out DIR/ ran the whole table, then exit 2 ('not a regular file'), leaving DIR/.json."""
    assert main(args + ["--out", str(tmp_path / "d") + "/"]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "d").exists()


def test_a_report_named_json_is_refused_where_the_json_goes_beside_it(tmp_path, capsys):
    """bench accept --out r.json wrote the Markdown and then the JSON into the same r.json, exit 0."""
    assert main(["bench", "accept", "--families", "zipf", "--V", "10", "--k", "2", "--nodes", "2", "--n", "100",
                 "--out", str(tmp_path / "r.json")]) == 2
    assert "give a .md path" in capsys.readouterr().err and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("broken", [{"V": None}, {"stderr": None}, {"best_baseline": "zzz"}])
def test_bench_from_json_with_a_malformed_row_is_exit_2_naming_the_flag(broken, tmp_path, capsys):
    """A bench JSON with a field missing or null was a KeyError / AttributeError traceback, exit 1."""
    import json

    assert main(["bench", "--families", "zipf", "--temperatures", "1", "--trees", "2,1", "--V", "8", "--nodes",
                 "2", "--n", "200", "--no-progress", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench.json").read_text())
    for row in data["rows"]:
        for key, value in broken.items():
            if value is None and key == "V":
                data["settings"].pop("V", None)
            row[key] = value
    (tmp_path / "bad.json").write_text(json.dumps(data))
    capsys.readouterr()
    rc = main(["bench", "--from-json", str(tmp_path / "bad.json"), "--out", str(tmp_path / "re")])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err
    if rc == 2:
        assert "--from-json" in err


@pytest.mark.parametrize("device", ["meta", "xpu"])
def test_bench_verify_refuses_a_device_it_cannot_run_on(device, tmp_path, capsys):
    assert main(["bench", "verify", "--B", "4", "2", "--V", "50", "--k", "2", "--repeats", "1",
                 "--no-progress", "--device", device, "--out", str(tmp_path / "v.md")]) == 2
    assert f"--device '{device}'" in capsys.readouterr().err


def test_bench_gap_refuses_a_wor_k_past_the_vocabulary(tmp_path, capsys):
    """--k 20 at V = 10 dropped every without-replacement cell and exited 0 with a report saying WOR k [20]."""
    assert main(["bench", "gap", "--families", "zipf", "--T", "1", "--k", "20", "--V", "10",
                 "--nodes", "1", "--n", "10", "--no-progress", "--sections", "wor", "--out",
                 str(tmp_path / "g.md")]) == 2
    assert "--k must be <= V = 10" in capsys.readouterr().err


def test_a_deterministic_target_is_refused_without_the_advice_to_raise_n():
    """A greedy (one-hot) target: 'n = 100,000 continuations per prompt are too few ... raise n', whatever n."""
    import exactness
    from exactness.chain import chain_target
    from simulators.autoregressive import MarkovPair

    pair = MarkovPair(np.eye(3)[[1, 2, 0]], np.full((3, 3), 1 / 3), np.eye(3)[0], np.ones(3) / 3)

    def decoder(prompt, new_tokens, rng):
        return np.zeros(new_tokens, np.int64)

    with pytest.raises(ValueError, match="the target is deterministic at every prompt") as info:
        exactness.certify_decoder(decoder, chain_target(pair), np.array([[0], [1]]), new_tokens=3, n=100_000)
    assert "raise n" not in str(info.value)
