"""Issue 37, round 2 (node level): findings of a new-user trial and an adversarial tester.

A verifier biased only at some batch sizes fails (the generic path calls ``verify`` on every size class, and
``batch_sizes`` tests each); a verify that kills its worker process, or calls ``sys.exit``, is a FAIL naming it;
collected tokens outside V and accept flags are FAILs, not errors; ``resispec certify``'s last line and table
name a misbehaving subject's cause; a hang names the call that did not return.  No test here asserts a
wall-clock bound: the hanging subjects sleep for ever and only the verdict is checked.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

import exactness
from exactness import SubjectError, certify_samples, certify_verifier
from exactness._checks import plural, subject_call
from exactness.sampling import MAIN_SIZES, NodeSampler, batch_cycle
from resispec.cli import main

P5 = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
Q5 = np.array([0.1, 0.2, 0.3, 0.2, 0.2])
P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
PARENT = os.getpid()


def rrs_verify(p, q, c, rng):
    """Recursive rejection on a batch (B, V), exact: the tester's black box."""
    B, k = c.shape
    rows = np.arange(B)
    acc, tok, p_i = np.full(B, -1), np.full(B, -1), p.copy()
    for i in range(k):
        m = np.minimum(p_i, q)
        a = m[rows, c[:, i]] / q[rows, c[:, i]]
        hit = (acc < 0) & (rng.random(B) < a)
        acc[hit], tok[hit] = i, c[hit, i]
        r = np.maximum(p_i - m, 0)
        z = r.sum(1, keepdims=True)
        p_i = np.where(z > 1e-13, r / np.where(z > 1e-13, z, 1), p_i)
    cdf = p_i.cumsum(1)
    res = np.minimum((cdf <= rng.random(B)[:, None] * cdf[:, -1:]).sum(1), p.shape[1] - 1)
    return NS(tokens=np.where(acc >= 0, tok, res).astype(np.int64), accepted=acc.astype(np.int64))


class Box:
    drafting = "iid"

    def verify(self, p, q, c, rng):
        return rrs_verify(p, q, c, rng)


class Recorder(Box):
    def __init__(self):
        self.sizes = []

    def verify(self, p, q, c, rng):
        self.sizes.append(len(c))
        return super().verify(p, q, c, rng)


class SizeBias(Box):
    """Exact except on batches of 9 to 150 rows, where token 3 (p = 0.1) becomes token 0: TV 0.1 there."""

    def verify(self, p, q, c, rng):
        o = rrs_verify(p, q, c, rng)
        if not 9 <= len(c) <= 150:
            return o
        t = o.tokens.copy()
        t[t == 3] = 0
        a = o.accepted.copy()
        a[t != o.tokens] = -1
        return NS(tokens=t, accepted=a)


class PowerOfTwoBias(SizeBias):
    """Biased only on batches of exactly 64 rows."""

    def verify(self, p, q, c, rng):
        return SizeBias.verify(self, p, q, c, rng) if len(c) == 64 else rrs_verify(p, q, c, rng)


# --------------------------------------------------------------- finding 1: every batch size range is called

def test_the_generic_path_calls_verify_on_the_sizes_engines_use():
    r = Recorder()
    cert = certify_verifier(r, P5, Q5, 2, n=20_000)
    assert cert.passed
    seen = set(r.sizes)
    for size in (9, 16, 31, 32, 64, 127, 128, 256, 509, 512, 1024, 1531, 2048, 4096):
        assert size in seen, size     # used to be 1..8, 16 (batched_rows) and the whole sample in one call
    assert set(cert.details["batch_sizes"]["classes"][j]["rows"] for j in range(3)) == {9, 16, 31}


def test_batch_cycle_covers_every_range_and_respects_the_row_cap():
    sizes, cycle = batch_cycle(1 << 21)
    assert sizes == tuple(sorted(MAIN_SIZES)) and {16, 32, 64, 128, 256} <= set(sizes)
    assert all(b / a <= 2.0 for a, b in zip(sizes, sizes[1:]))     # no size range in 9..4096 wider than 2x
    small, _ = batch_cycle(41)                  # V = 51,150: at most 41 rows a call
    assert small == (9, 16, 31, 32, 41)
    shared, _ = batch_cycle(1 << 16, shared=True)   # a box declaring handles_shared_nodes keeps its large calls
    assert shared[-1] == 1 << 16 and shared[:-1] == tuple(sorted(MAIN_SIZES))
    assert batch_cycle(1) == ((1,), (0,) * 256)


@pytest.mark.parametrize("bad", [SizeBias, PowerOfTwoBias])
def test_a_verifier_biased_only_at_some_batch_sizes_fails(bad):
    cert = certify_verifier(bad(), P5, Q5, 2, n=20_000)   # SizeBias passed before (tester's t14.py)
    assert not cert.passed
    assert "batch_sizes" in cert.failed_checks()
    if bad is PowerOfTwoBias:
        assert "batches of 64 rows" in cert.details["batch_sizes"]["reason"]


def test_batch_sizes_is_reproducible_across_workers_and_executors():
    one = certify_verifier(Box(), P5, Q5, 2, n=30_000, seed=3, workers=2, executor="local")
    two = certify_verifier(Box(), P5, Q5, 2, n=30_000, seed=3, workers=2, executor="process")
    assert one.checks == two.checks and one.details["batch_sizes"] == two.details["batch_sizes"]
    again = certify_verifier(Box(), P5, Q5, 2, n=30_000, seed=3, workers=1)
    assert again.details["batch_sizes"] == certify_verifier(Box(), P5, Q5, 2, n=30_000, seed=3).details[
        "batch_sizes"]


def test_sequential_runs_keep_the_batch_sizes_check():
    cert = certify_verifier(SizeBias(), P5, Q5, 2, n=40_000, sequential=True)
    assert not cert.passed and "batch_sizes" in cert.details


def test_the_table_path_draws_without_verify_and_has_no_batch_sizes_check():
    import resispec

    cert = certify_verifier(resispec.get_verifier("rrs"), P, Q, 2, n=20_000)
    assert cert.passed and cert.details["path"] == "table"
    assert "batch_sizes" not in cert.checks and "batch_sizes" not in cert.skipped


def test_node_sampler_labels_each_draw_with_its_call_class():
    s = NodeSampler(Box(), P5, Q5, 2)
    d = s.draws(np.random.default_rng(0), 5_000)
    assert d.batch is not None and d.batch.shape == (5_000,)
    sizes = s.batch_sizes
    runs = np.flatnonzero(np.diff(d.batch.astype(int)) != 0) + 1   # the call boundaries where the class changes
    first = np.split(d.batch, runs)
    assert len(first[0]) == 9 * 29 and sizes[first[0][0]] == 9          # 29 calls of 9 rows first


# --------------------------------------------------------------- finding 2: a verify that kills its worker

class DiesInWorker(Box):
    def verify(self, p, q, c, rng):
        if os.getpid() != PARENT:
            os._exit(3)
        return super().verify(p, q, c, rng)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="forked workers")
def test_a_verify_that_kills_its_worker_is_a_fail_naming_it():
    cert = certify_verifier(DiesInWorker(), P5, Q5, 2, n=20_000, workers=2)   # used to raise RuntimeError
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert "DiesInWorker.verify killed its worker process" in cert.details["subject"]["error"]


# --------------------------------------------------------------- finding 3: subject_call and sys.exit

def test_subject_call_names_sys_exit_and_lets_limits_and_ctrl_c_through():
    from exactness._timeout import TimeLimitExceeded

    with pytest.raises(SubjectError, match=r"Mine\.verify called sys\.exit\(2\)"):
        subject_call(lambda: sys.exit(2), "Mine.verify")
    with pytest.raises(SubjectError, match=r"called sys\.exit\(None\)"):
        subject_call(sys.exit, "Mine.verify")
    with pytest.raises(SubjectError, match="raised ZeroDivisionError"):
        subject_call(lambda: 1 / 0, "Mine.verify")

    def ctrl_c():
        raise KeyboardInterrupt

    def limit():
        raise TimeLimitExceeded(1.0)

    with pytest.raises(KeyboardInterrupt):
        subject_call(ctrl_c, "Mine.verify")
    with pytest.raises(TimeLimitExceeded):
        subject_call(limit, "Mine.verify")


# --------------------------------------------------------------- finding 4: collected outputs

@pytest.mark.parametrize("bad", [3, -1, 10])
def test_collected_tokens_outside_v_fail_naming_them(bad):
    tokens = np.random.default_rng(0).choice(3, size=2_000, p=P)
    tokens[7] = bad
    cert = certify_samples(tokens, P)                   # used to raise ValueError
    assert not cert.passed and cert.checks == {"subject": 0.0}
    cause = cert.details["subject"]["error"]
    assert f"tokens[7] = {bad}" in cause and "outside [0, 3)" in cause


def test_collected_candidates_outside_v_fail_naming_them():
    rng = np.random.default_rng(0)
    tokens = rng.choice(3, size=2_000, p=P)
    cand = rng.choice(3, size=(2_000, 2), p=Q)
    cand[5, 1] = 4
    cert = certify_samples(tokens, P, candidates=cand, q=Q)
    assert cert.checks == {"subject": 0.0} and "candidates[5, 1] = 4" in cert.details["subject"]["error"]


def test_accept_flags_as_bools_fail_accepted_index_like_int_flags():
    rng = np.random.default_rng(0)
    n, k = 4_000, 2
    tokens = rng.choice(3, size=n, p=P)
    cand = rng.choice(3, size=(n, k), p=Q)
    flags = rng.random(n) < 0.5
    as_bool = certify_samples(tokens, P, accepted=flags, candidates=cand, q=Q)    # used to raise TypeError
    as_int = certify_samples(tokens, P, accepted=flags.astype(np.int64), candidates=cand, q=Q)
    for cert in (as_bool, as_int):
        assert not cert.passed and set(cert.failed_checks(adjusted=False)) == {"accepted_index"}
    assert "accept flags (dtype bool)" in as_bool.details["accepted_index"]["error"]
    assert certify_samples(tokens, P, accepted=list(flags), k=k, q=Q).checks["accepted_index"] == 0.0


def test_collected_caller_errors_stay_errors():
    with pytest.raises(TypeError, match="tokens must hold integers"):
        certify_samples(np.array([0.0, 1.0]), P)
    with pytest.raises(ValueError, match="accepted needs k"):
        certify_samples(np.array([0, 1, 3]), P, accepted=np.array([True, False, True]))
    with pytest.raises(ValueError, match="negative"):
        exactness.certify_counts(np.array([5, -1, 3]), P)


# --------------------------------------------------------------- finding 5: the CLI names a subject's cause

@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _write(d: Path, name: str, body: str) -> None:
    (d / f"{name}.py").write_text(textwrap.dedent(body))
    sys.modules.pop(name, None)


TINY = ["--family", "zipf", "--k", "1", "--samples", "2000", "--no-mutants", "--no-progress"]


def test_certify_last_line_and_table_name_the_subjects_cause(user_dir, capsys):
    _write(user_dir, "r2_raises", """
        class Raises:
            drafting = "iid"

            def verify(self, p, q, candidates, rng):
                raise RuntimeError("my kernel exploded")
    """)
    rc = main(["certify", "--verifier", "r2_raises:Raises", *TINY, "--out", str(user_dir / "c.md")])
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    assert rc == 1
    assert last.startswith("FAIL: r2_raises:Raises: Raises.verify raised RuntimeError: my kernel exploded")
    assert last.endswith("(subject misbehaved)") and "Holm" not in last
    row = next(line for line in out.splitlines() if line.startswith("r2_raises:Raises"))
    assert "subject error: Raises.verify raised" in row and "nan" not in row and "p = 0" not in row
    assert "subject error" in (user_dir / "c.md").read_text()


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_certify_names_the_call_that_did_not_return(user_dir, capsys):
    _write(user_dir, "r2_hangs", """
        import time

        class Hangs:
            drafting = "iid"

            def verify(self, p, q, candidates, rng):
                time.sleep(3600)
    """)
    rc = main(["certify", "--verifier", "r2_hangs:Hangs", *TINY, "--time-limit", "1", "--out", str(user_dir / "c.md")])
    out = capsys.readouterr().out
    assert rc == 1
    assert out.strip().splitlines()[-1] == ("FAIL: r2_hangs:Hangs: Hangs.verify did not return within 11 s (--time-limit "
                                            "1 s plus a grace of 10 s) (subject misbehaved)")


def test_fail_line_lists_biased_verifiers_with_holm_and_subjects_with_their_cause():
    from exactness.grid import Cell, run_grid
    from resispec.commands.certify import fail_line

    class Raises(Box):
        def verify(self, p, q, c, rng):
            raise ValueError("bad")

    cells = [Cell("biased", SizeBias(), "node", 2, P5, Q5), Cell("raises", Raises(), "node", 2, P5, Q5)]
    line = fail_line(run_grid(cells, n=20_000), 1e-3)
    assert line.startswith("FAIL: biased (family-wise alpha 0.001, Holm); raises: Raises.verify")
    assert line.endswith("(subject misbehaved)")


# --------------------------------------------------------------- finding 6: a hang names the call

class Hangs(Box):
    def verify(self, p, q, c, rng):
        time.sleep(3600)


class HangsInDraftLaw(Box):
    def draft_law(self, q):
        time.sleep(3600)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
@pytest.mark.parametrize("subject, call", [(Hangs, "Hangs.verify"), (HangsInDraftLaw, "HangsInDraftLaw.draft_law")])
def test_a_hang_names_the_call_that_did_not_return(subject, call):
    cert = certify_verifier(subject(), P5, Q5, 2, n=2_000, timeout=1)
    assert cert.checks == {"subject": 0.0}
    assert cert.details["subject"]["error"].startswith(f"{call} did not return within 11 s (timeout = 1 plus a grace")


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_a_hanging_sampler_is_named_by_its_function():
    def sleeper(rng, m):
        time.sleep(3600)

    cert = exactness.certify_sampler(sleeper, P, 1_000, timeout=1)
    assert "sleeper did not return within 11 s" in cert.details["subject"]["error"]


def test_hung_call_ignores_the_harness_and_names_only_the_subject():
    from exactness.certificate import hung_call
    from exactness._timeout import TimeLimitExceeded

    class Mine:
        def verify(self):
            helper()

    def helper():
        raise TimeLimitExceeded(1.0)

    m = Mine()
    try:
        m.verify()
    except TimeLimitExceeded as exc:
        assert hung_call(exc, m) == "Mine.verify"       # the subject's outermost frame, not its helper
        assert hung_call(exc, object()) is None         # not in the traceback: the caller falls back


# --------------------------------------------------------------- findings 7, 8: docs and words

def test_docs_state_the_timeout_keyword_and_its_default():
    text = (Path(__file__).resolve().parents[1] / "docs" / "certify.md").read_text()
    assert "### Time limits: `timeout=`" in text and "7,200 s (2 h" in text
    for route in ("certify_decoder", "certify_coupled", "certify_stepwise"):
        assert route in text.split("### Time limits: `timeout=`")[1].split("###")[0]
    assert "a ValueError naming the row" not in text and "`ValueError` naming the row" not in text


def test_counts_in_words_are_singular_or_plural():
    assert plural(1, "sample") == "1 sample" and plural(2_000, "sample") == "2,000 samples"
    assert plural(0, "draw") == "0 draws"
