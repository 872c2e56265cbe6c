"""What a tester found in the decoder, chain and path certificates (issues 39 / 40), each pinned here:

- a subject raising a ``BaseException`` that is not an ``Exception`` (``asyncio.CancelledError``, a test framework's
  outcome, a user's own subclass) escaped every certificate as a raw traceback: now a FAIL naming it, as
  ``SystemExit`` was; Ctrl-C and the harness's own time limit still pass through (``exactness._checks.passes_through``);
- the decoder's ``acceptance_bound`` read ``decoder.gamma`` a second time outside the subject guard (a property
  that changed between reads escaped as RuntimeError / ValueError / TypeError, or 2.7 was cut to 2): read once now;
- a large tree crashed the LP bound with OverflowError (``float`` of a count past 1e308) after sampling, and
  ``certify_tree_rule`` sampled a 1e6-node tree until its time limit blamed the exact rule: a ValueError naming
  the size (``MAX_TREE_NODES``) before any draw;
- the same ``SeedSequence`` object passed twice gave two certificates (it was spawned from): copied now;
- a decoder whose ``acceptance_bound`` FAILs names the check's premise (drafts from ``draft_law`` at every context,
  tested at the prompt only), so a decoder drafting by another law per position is not told it "accepts more than
  any exact rule can" without the condition.
"""

from __future__ import annotations

import asyncio
import textwrap

import numpy as np
import pytest
from _subjects import subject_fail

import exactness
from exactness._checks import SubjectError, passes_through, subject_call
from exactness._timeout import TimeLimitExceeded
from exactness.chain import ChainDecoder, chain_decoder, chain_target, token_chain_kernel
from exactness.decoder_mutants import CHECK_MUTANTS
from exactness.pathlevel import certify_path, certify_tree_rule
from resispec.cli import main
from resispec.pathlevel import get_path_verifier
from resispec.pathlevel.bound import optimal_accepted
from simulators.autoregressive import MarkovPair

PAIR = MarkovPair.random(np.random.default_rng(0), 4)
PROMPTS = np.array([[0], [1], [2]])


class Outcome(BaseException):
    """A test framework's outcome (pytest's ``Failed`` / ``Skipped`` are BaseExceptions too)."""


RAISED = [asyncio.CancelledError, Outcome, GeneratorExit]


# --------------------------------------------------------------------------- BaseExceptions from the subject
@pytest.mark.parametrize("exc", RAISED, ids=lambda e: e.__name__)
def test_subject_call_turns_any_base_exception_of_the_subject_into_a_fail(exc):
    def boom():
        raise exc("from the subject")

    with pytest.raises(SubjectError, match=f"Mine.verify raised {exc.__name__}"):
        subject_call(boom, "Mine.verify")
    assert not passes_through(exc("x"))
    assert passes_through(KeyboardInterrupt()) and passes_through(TimeLimitExceeded(1.0))


class _RaisesIn(ChainDecoder):
    where = "sample_events"
    exc = asyncio.CancelledError

    def sample_events(self, prompts, new_tokens, rng):
        if self.where == "sample_events":
            raise self.exc("no")
        return super().sample_events(prompts, new_tokens, rng)

    def draft_law(self, contexts):
        if self.where == "draft_law":
            raise self.exc("no")
        return super().draft_law(contexts)


def _kernel_raising(exc):
    def kernel(target_probs, draft_probs, draft_ids, rng):
        raise exc("no")
    return kernel


@pytest.mark.parametrize("exc", RAISED, ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["sample_events", "draft_law", "kernel"])
def test_a_decoder_raising_a_base_exception_is_a_fail_naming_it(where, exc):
    if where == "kernel":
        dec = chain_decoder(_kernel_raising(exc), PAIR)
    else:
        dec = _RaisesIn(token_chain_kernel, PAIR)
        dec.where, dec.exc = where, exc
    cert = exactness.certify_decoder(dec, chain_target(PAIR), PROMPTS, new_tokens=2, n=200, seed=0)
    cause = subject_fail(cert)
    assert exc.__name__ in cause, cause


class _VerifyRaises:
    """A chain rule whose ``verify`` raises a BaseException on its 5th step."""

    def __init__(self, exc):
        self.exc, self.calls, self.inner = exc, 0, get_path_verifier("block")

    def verify(self, p, q, drafts, rng):
        self.calls += 1
        if self.calls > 4:
            raise self.exc("no")
        return self.inner.verify(p, q, drafts, rng)


@pytest.mark.parametrize("exc", RAISED, ids=lambda e: e.__name__)
def test_a_path_rule_raising_a_base_exception_is_a_fail_naming_it(exc):
    cert = certify_path(_VerifyRaises(exc), PAIR, 2, n=500, seed=0)
    assert not cert.passed and cert.cause and exc.__name__ in cert.cause, cert.summary()


class _VerifierRaises:
    """A node verifier whose ``verify`` raises asyncio.CancelledError."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, uniforms=None):
        raise asyncio.CancelledError("no")


def test_a_node_verifier_raising_cancelled_error_is_a_fail_naming_it():
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    cert = exactness.certify_verifier(_VerifierRaises(), p, q, 2, n=2_000, seed=0)
    assert not cert.passed and "CancelledError" in cert.summary() + str(cert.details), cert.summary()


def test_ctrl_c_in_a_subject_still_stops_the_run():
    with pytest.raises(KeyboardInterrupt):
        exactness.certify_decoder(chain_decoder(_kernel_raising(KeyboardInterrupt), PAIR), chain_target(PAIR),
                                  PROMPTS, new_tokens=2, n=200, seed=0)


MOD = textwrap.dedent("""
    import asyncio

    import numpy as np

    from exactness.chain import chain_decoder, chain_target
    from simulators.autoregressive import MarkovPair

    PAIR = MarkovPair.random(np.random.default_rng(0), 4)

    def kernel(target_probs, draft_probs, draft_ids, rng):
        raise asyncio.CancelledError("cancelled inside the kernel")

    def make():
        return chain_decoder(kernel, PAIR), chain_target(PAIR), np.array([[0], [1]])
""")


def test_cli_a_decoder_raising_cancelled_error_exits_1_naming_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "mydec_r3.py").write_text(MOD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["certify", "decoder", "--decoder", "mydec_r3:make", "--new-tokens", "2", "--n", "200",
                 "--out", "r/c.md", "--no-progress"]) == 1
    out = capsys.readouterr()
    assert "CancelledError" in out.out + out.err and "Traceback" not in out.err


# --------------------------------------------------------------------------- decoder.gamma read once
class _Shifty:
    """An exact (token-wise) chain decoder whose ``gamma`` is 2 on its first read and ``later`` after (raised if an
    exception class); everything else is the wrapped decoder's."""

    def __init__(self, later):
        self.inner = chain_decoder(token_chain_kernel, PAIR, gamma=2)
        self.later, self.reads = later, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def gamma(self):
        self.reads += 1
        if self.reads == 1:
            return 2
        if isinstance(self.later, type) and issubclass(self.later, BaseException):
            raise self.later("second read")
        return self.later


@pytest.mark.parametrize("later", [RuntimeError, "two", None, 2.7], ids=["raises", "text", "none", "float"])
def test_acceptance_bound_reads_decoder_gamma_once(later):
    dec = _Shifty(later)
    cert = exactness.certify_decoder(dec, chain_target(PAIR), PROMPTS, new_tokens=3, n=400, seed=0)
    assert "acceptance_bound" in cert.checks, (cert.summary(), cert.skipped.get("acceptance_bound"))
    assert cert.details["acceptance_bound"]["gamma"] == 2
    assert cert.passed, cert.summary()


# --------------------------------------------------------------------------- sizes
def test_the_lp_bound_of_a_huge_tree_is_a_value_error_not_an_overflow():
    with pytest.raises(ValueError, match=r"the LP would have ~10\^\d+ variables"):
        optimal_accepted(PAIR, (8, 8, 8))


@pytest.mark.parametrize("branching", [(1000, 1000), (64, 64, 2), "4096,2"])
def test_certify_tree_rule_refuses_a_tree_past_max_tree_nodes_before_any_draw(branching):
    with pytest.raises(ValueError, match="MAX_TREE_NODES"):
        certify_tree_rule(get_path_verifier("traversal"), PAIR, branching, n=300, time_limit=60)


def test_a_tree_at_max_tree_nodes_is_not_refused_for_its_size():
    from exactness.pathlevel import MAX_TREE_NODES, _check_tree_nodes

    assert _check_tree_nodes((MAX_TREE_NODES,)) == MAX_TREE_NODES
    assert _check_tree_nodes((8, 8, 8)) == 8 + 64 + 512


# --------------------------------------------------------------------------- seeds
def test_the_same_seed_sequence_object_twice_gives_the_same_decoder_certificate():
    ss = np.random.SeedSequence(5)
    dec = chain_decoder(token_chain_kernel, PAIR)
    a = exactness.certify_decoder(dec, chain_target(PAIR), PROMPTS, new_tokens=3, n=400, seed=ss)
    b = exactness.certify_decoder(dec, chain_target(PAIR), PROMPTS, new_tokens=3, n=400, seed=ss)
    assert a.checks == b.checks
    assert ss.n_children_spawned == 0                 # the caller's object was not spawned from


def test_as_seed_sequence_copies_a_seed_sequence():
    from exactness._checks import as_seed_sequence

    ss = np.random.SeedSequence(7)
    got = as_seed_sequence(ss)
    got.spawn(3)
    assert ss.n_children_spawned == 0 and got.entropy == ss.entropy


# --------------------------------------------------------------------------- the bound's premise, named
def test_a_failing_decoder_bound_names_its_premise():
    model = MarkovPair.random(np.random.default_rng(0), 4, noise=2.0)
    cert = exactness.certify_decoder(CHECK_MUTANTS["too_generous_chain"](model), chain_target(model),
                                     [[0], [1], [3]], new_tokens=3, n=3000, seed=1)
    assert cert.checks["acceptance_bound"] < 1e-3
    d = cert.details["acceptance_bound"]
    assert "tested at the prompt only" in d["premise"] and "premise:" in d["reason"]


# =========================================================================== the CLI (a second tester's round)
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SUBJECTS = textwrap.dedent("""
    import os
    import time

    import numpy as np

    class Ends:
        '''A verifier that ends the process with status 0 (a pass, to CI, before the supervisor).'''
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            os._exit(0)

    class Slow:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            time.sleep(600)

    def _ends_step():
        from resispec import get_verifier

        inner = get_verifier("resispec", drafting="without_replacement")

        class EndsStep:
            drafting = inner.drafting

            def step_plan(self, *args, **kwargs):
                return inner.step_plan(*args, **kwargs)

            def verify(self, *args, **kwargs):
                os._exit(0)

        return EndsStep()

    def _pipes():
        for fd in range(3, 256):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                    yield fd
            except OSError:
                pass

    class Forges:
        # writes a status of 0 into every pipe it can find, then ends the process with status 0
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            for fd in _pipes():
                try:
                    os.write(fd, b"0\\n" * 32)
                except OSError:
                    pass
            os._exit(0)

    class ForksOn:
        # forks; the parent of the fork ends with status 0, its child goes on as an always-accepting rule
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            from exactness.mutants import CATALOGUE

            if os.fork() != 0:
                os._exit(0)
            return CATALOGUE["always_accept"].verify(p, q, c, rng, uniforms=uniforms)

    class IgnoresTerm:
        drafting = "iid"

        def __init__(self):
            import signal

            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            time.sleep(600)

    def ends_decoder():
        def dec(prompt, new_tokens, rng):
            os._exit(0)
        target = lambda contexts: np.full((len(contexts), 3), 1 / 3)
        return dec, target, np.array([[0], [1]])
""")


def _cli(args, cwd, **kw):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), str(ROOT)])}
    return subprocess.Popen([sys.executable, "-m", "resispec", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


@pytest.fixture()
def subjects_dir(tmp_path):
    (tmp_path / "ends_r3.py").write_text(SUBJECTS)
    return tmp_path


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the supervisor forks (POSIX)")
@pytest.mark.parametrize("args", [
    ["certify", "--verifier", "ends_r3:Ends", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--out", "o/r.md"],
    ["certify", "--verifier", "ends_r3:Ends", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--executor", "local", "--out", "o/r.md"],
    ["certify", "stepwise", "--verifier", "ends_r3:_ends_step", "--V", "8", "--k", "2", "--n", "300"],
    ["certify", "coupled", "--verifier", "ends_r3:Ends", "--V", "8", "--k", "2", "--n", "300"],
    ["certify", "decoder", "--decoder", "ends_r3:ends_decoder", "--new-tokens", "2", "--n", "200", "--out", "o/d.md"],
    ["certify", "--verifier", "ends_r3:Forges", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--out", "o/r.md"],
    ["certify", "--verifier", "ends_r3:ForksOn", "--k", "2", "--families", "zipf", "--n", "3000", "--no-mutants",
     "--out", "o/r.md"],
], ids=["certify", "certify-local", "stepwise", "coupled", "decoder", "forges-the-status", "forks-on"])
def test_a_subject_that_ends_the_process_with_status_0_is_a_fail_not_a_pass(subjects_dir, args):
    """Each exited 0 (NO BIAS to CI) with nothing printed: os._exit(0) inside verify ended the certifying process."""
    p = _cli(args, subjects_dir)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1, (out, err)
    assert "FAIL: the run exited with status 0 without returning (os._exit" in err, err


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/task").exists(), reason="POSIX fork, Linux /proc")
@pytest.mark.parametrize("sig, code, words", [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                              (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_the_supervised_run_passes_signals_on_and_leaves_no_child(subjects_dir, sig, code, words):
    p = _cli(["certify", "--verifier", "ends_r3:Slow", "--k", "2", "--families", "zipf", "--n", "3000",
              "--no-mutants", "--out", "o/r.md"], subjects_dir, start_new_session=True)
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    for _ in range(1200):                             # until the supervisor has forked its child (not a time bound)
        if p.poll() is not None or (children.exists() and children.read_text().split()):
            break
        time.sleep(0.05)
    child = int(children.read_text().split()[0])
    p.send_signal(sig)                                # to the supervisor alone (a SIGINT is passed on after 1 s)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code and words in err, (p.returncode, err)
    for _ in range(100):
        if not Path(f"/proc/{child}").exists():
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


@pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/task").exists(), reason="POSIX fork, Linux /proc")
def test_a_subject_ignoring_sigterm_is_killed_after_the_grace(subjects_dir):
    """It ran to its verdict (exit 0 for an exact rule) although CI had sent SIGTERM."""
    p = _cli(["certify", "--verifier", "ends_r3:IgnoresTerm", "--k", "2", "--families", "zipf", "--n", "3000",
              "--no-mutants", "--out", "o/r.md"], subjects_dir, start_new_session=True)
    children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
    for _ in range(1200):
        if p.poll() is not None or (children.exists() and children.read_text().split()):
            break
        time.sleep(0.05)
    time.sleep(1.0)                                   # let the child install its subject (it ignores SIGTERM)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 143 and "terminated (SIGTERM)" in err, (p.returncode, err)


def test_a_biased_verifier_with_too_few_draws_for_the_marginal_test_is_still_a_fail():
    """`certify --verifier always_accept --n 10` read as bad input (exit 2): its exact law convicts it anyway."""
    from exactness.mutants import CATALOGUE

    p, q = np.full(8, 0.125), np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.05, 0.05])   # n = 4: every cell pooled
    cert = exactness.certify_verifier(CATALOGUE["always_accept"], p, q, 2, n=4, seed=0)
    assert not cert.passed and cert.checks["exact_law"] == 0.0 and "marginal" not in cert.checks
    assert "no degrees of freedom" in cert.skipped["marginal"]
    from resispec import get_verifier

    with pytest.raises(ValueError, match="no degrees of freedom"):     # an exact rule: the caller's n, refused
        exactness.certify_verifier(get_verifier("rrs"), p, q, 2, n=4, seed=0)


def test_a_budget_refused_in_every_failing_cell_is_exit_2_without_a_report(tmp_path, capsys):
    """`resispec certify --verifier rrs --n 10` blamed rrs (FAIL, exit 1) for the caller's too-small --n."""
    out = tmp_path / "o" / "r.md"
    assert main(["certify", "--verifier", "rrs", "--k", "2", "--families", "zipf", "--n", "10", "--no-mutants",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "budget was refused" in err and "no degrees of freedom" in err and "--n" in err
    assert not out.exists()


def test_a_budget_refusal_is_a_value_error_the_harness_raises():
    from exactness.budget import BudgetError
    from exactness.certificate import certificate_from_counts

    with pytest.raises(BudgetError, match="no degrees of freedom"):
        certificate_from_counts(np.array([3, 3, 4]), np.array([0.3, 0.3, 0.4]), alpha=1e-3, power=0.99)
    assert issubclass(BudgetError, ValueError)


def _pid(_job):
    return os.getpid()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers")
def test_the_process_executor_starts_at_most_workers_per_cpu_processes(monkeypatch):
    """`certify stepwise --workers 200 --time-limit 10` on 2 CPUs: 200 forks outlasted the limit, blamed the rule."""
    from exactness import limits
    from exactness.executors import ProcessExecutor

    monkeypatch.setattr(limits, "WORKERS_PER_CPU", 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    pids = ProcessExecutor(200).map_chunks(_pid, list(range(64)))
    assert len(pids) == 64 and len(set(pids)) <= 2


def test_a_coupled_pass_stopped_by_its_time_limit_is_inconclusive_not_a_pass():
    """`certify coupled --verifier rrs --n 1000 --time-limit 5 --V 100000000`: 1 draw, TV <= 0.999, exit 0."""
    from exactness import certify_coupled
    from resispec import get_verifier

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    cert = certify_coupled(get_verifier("rrs"), "rrs", p, q, 2, n=10**8, time_limit=0.2)
    assert cert.inconclusive and not cert.passed and cert.n < 10**8, cert.summary()
    assert "INCONCLUSIVE (stopped by time_limit" in cert.summary()


@pytest.mark.parametrize("args, words", [
    (["drift", "--out", "", "--nodes", "2", "--V", "20"], "--out must be a non-empty path"),
    (["bench", "--out", "", "--families", "zipf"], "--out must be a non-empty path"),
    (["certify", "stepwise", "--pq", "", "--n", "100"], "--pq names no file"),
    (["certify", "stepwise", "--pq", "/dev/null", "--n", "100"], "need an .npz with arrays 'p' and 'q' (EOFError"),
    (["certify", "coupled", "--verifier", "rrs", "--pq", " ", "--n", "100"], "--pq names no file"),
    (["bench", "verify", "--seed", "-1"], "--seed must be >= 0"),
    (["certify", "coupled", "--verifier", "no_such_module_r3:X", "--n", "100"], "--verifier 'no_such_module_r3:X'"),
    (["certify", "coupled", "--verifier", "rrs", "--reference", "no_such_rule", "--n", "100"],
     "--reference: unknown verifier"),
    (["families", "--seed", "x"], "--seed takes an integer"),
    (["bench", "--trees", "9,9,9,9,9,9,9,9", "--families", "zipf"], "MAX_TREE_NODES"),
    (["bench", "verify", "--V", "10000000000", "--B", "256"], "not enough memory for the sizes asked"),
    (["certify", "--verifier", "rrs", "--k", "2", "--n", "3000", "--no-mutants", "--out", "/tmp/\udcff.md"],
     "is not valid UTF-8"),
], ids=["out-empty-drift", "out-empty-bench", "pq-empty-stepwise", "pq-dev-null", "pq-blank-coupled", "seed-negative", "kernel-named", "reference-named", "seed-text", "shape",
        "memory", "out-not-utf8"])
def test_bad_input_is_exit_2_naming_it(args, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    assert words in capsys.readouterr().err


def test_certify_decoder_takes_a_seed_sequence_as_the_other_kinds_do():
    from resispec.cli import parse

    _, args = parse(["certify", "decoder", "--seed", "0,3"])
    assert args.seed == [0, 3]
