"""Black-box node checks (issue 11, item 3): certify_verifier on objects with only ``verify``.

Batches of heterogeneous rows, the verifier's own bonus draws, outputs collected elsewhere
(``certify_counts`` / ``certify_samples``), seeds given as sequences, parallel workers, and a
verifier's declared ``supported_k``.  Every run is tiny (V = 3, a few thousand draws)."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest

import exactness
import resispec
from exactness._checks import as_generator, as_seed_sequence, sub_seed
from exactness.sampling import UnsupportedK, k_support
from resispec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
RRS = resispec.get_verifier("rrs")
N = 6000


class Box:
    """A correct black box: only ``drafting`` and ``verify`` (no chain, no uniforms)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return RRS.verify(p, q, candidates, rng)


class RowMixer(Box):
    """Correct for batches of one or two rows; mixes rows (uses the next row's laws) in larger batches."""

    def verify(self, p, q, candidates, rng):
        if p.shape[0] > 2:
            p, q = np.roll(p, 1, axis=0), np.roll(q, 1, axis=0)
        return RRS.verify(p, q, candidates, rng)


def _inverse_cdf(law, rng):
    u = rng.random(law.shape[0])
    return np.minimum((np.cumsum(law, axis=1) < u[:, None]).sum(axis=1), law.shape[1] - 1).astype(np.int64)


class OwnBonus(Box):
    """Draws its own bonus token from the next node's target: correct."""

    def sample_bonus(self, p, q, rng):
        return _inverse_cdf(p, rng)


class ResidualBonus(Box):
    """Draws its own bonus token from the residual max(p - q, 0): the production bug."""

    def sample_bonus(self, p, q, rng):
        r = np.maximum(p - q, 0.0)
        return _inverse_cdf(r / r.sum(axis=1, keepdims=True), rng)


# --- item 1: heterogeneous rows in one batch; the verifier's own bonus draws -------------------------------

def test_black_box_rows_mixed_in_a_batch_fail_batched_rows():
    good = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=0)
    assert good.passed and "batched_rows" in good.checks and "batched" in good.skipped
    assert good.details["batched_rows"]["df"] >= 1
    bad = exactness.certify_verifier(RowMixer(), P, Q, 2, n=N, seed=0)
    assert not bad.passed and "batched_rows" in bad.failed_checks()  # the tiled main Monte Carlo cannot see it
    assert "marginal" not in bad.failed_checks()


def test_batched_rows_is_calibrated_for_a_correct_black_box():
    from scipy import stats

    from exactness.verifier_cert import _batched_rows

    pv = [_batched_rows(Box(), P, Q, 2, 2000, np.random.default_rng(s))[0] for s in range(60)]
    assert stats.kstest(pv, "uniform").pvalue > 1e-3


def test_batched_rows_runs_only_where_batched_cannot():
    cert = exactness.certify_verifier(RRS, P, Q, 2, n=N, seed=0)
    assert "batched" in cert.checks and "batched_rows" not in cert.checks and "batched_rows" not in cert.skipped


def test_black_box_own_bonus_draws_are_tested():
    good = exactness.certify_verifier(OwnBonus(), P, Q, 2, n=N, seed=0)
    assert good.passed and "tree_bonus" in good.checks
    bad = exactness.certify_verifier(ResidualBonus(), P, Q, 2, n=N, seed=0)
    assert not bad.passed and "tree_bonus" in bad.failed_checks()


class StaleBonus(Box):
    """Breaker (session 34): its own bonus sampler is right on its first call only (a stale cache: every later
    call draws from the first call's first node law). One call drew every bonus token, so it passed."""

    def sample_bonus(self, p, q, rng):
        if getattr(self, "_cache", None) is None:
            self._cache = np.array(p[0])
            return _inverse_cdf(p, rng)
        return _inverse_cdf(np.broadcast_to(self._cache, p.shape).copy(), rng)


def test_a_bonus_sampler_right_only_on_its_first_call_fails():
    from exactness.tree import BONUS_CALLS

    bad = exactness.certify_verifier(StaleBonus(), P, Q, 2, n=N, seed=0)
    assert not bad.passed and "tree_bonus" in bad.failed_checks(), bad.summary()
    assert BONUS_CALLS >= 2


def test_sample_bonus_returning_floats_fails_naming_it():
    class FloatBonus(Box):
        def sample_bonus(self, p, q, rng):
            return np.zeros(p.shape[0])

    # the subject misbehaved: a FAIL naming the cause, not "bad input" (issue 37 item 3)
    cert = exactness.certify_verifier(FloatBonus(), P, Q, 2, n=N, seed=0)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert "sample_bonus" in cert.details["subject"]["error"]


# --- item 2: outputs already collected ----------------------------------------------------------------------

def _collected(n=20_000, k=2, seed=0, drafts=None):
    rng = np.random.default_rng(seed)
    c = rng.choice(P.size, size=(n, k), p=Q) if drafts is None else drafts
    r = RRS.verify(np.tile(P, (n, 1)), np.tile(Q, (n, 1)), c, rng)
    return r.tokens, r.accepted, c


def test_certify_samples_of_a_correct_run_passes_every_chain_free_check():
    t, a, c = _collected()
    cert = exactness.certify_samples(t, P, accepted=a, candidates=c, q=Q)
    assert cert.passed and cert.n == t.size
    assert {"marginal", "acceptance_bound", "candidate_support", "candidates"} <= set(cert.checks)
    assert 0 < cert.detectable_tv < 0.05
    assert "residual" in cert.skipped and "joint" in cert.skipped  # need the verifier's rule: said, not passed
    assert cert.details["acceptance_bound"]["alpha_star"] == pytest.approx(resispec.optimal_acceptance(P, Q, 2))


def test_certify_samples_flags_argmax_drafts_handed_raw_q():
    n, k = 20_000, 2
    t, a, c = _collected(drafts=np.full((n, k), int(np.argmax(Q))))
    assert "candidates" in exactness.certify_samples(t, P, accepted=a, candidates=c, q=Q).failed_checks()


def test_certify_samples_flags_acceptance_above_alpha_star():
    n = 20_000
    c = np.random.default_rng(1).choice(3, size=(n, 2), p=Q)
    cert = exactness.certify_samples(c[:, 0], P, accepted=np.zeros(n, dtype=np.int64), k=2, q=Q)
    assert "acceptance_bound" in cert.failed_checks()


def test_certify_counts_both_shapes():
    t, a, _ = _collected()
    marg = exactness.certify_counts(np.bincount(t, minlength=3), P)
    assert marg.passed and set(marg.checks) == {"marginal"} and "acceptance_bound" in marg.skipped
    stop = np.where(a < 0, 2, a)
    joint = np.bincount(stop * 3 + t, minlength=9).reshape(3, 3)
    cert = exactness.certify_counts(joint, P, Q, k=2)
    assert cert.passed and "acceptance_bound" in cert.checks and cert.statistic == pytest.approx(marg.statistic)
    biased = exactness.certify_counts(np.bincount(np.zeros(5000, dtype=np.int64), minlength=3), P)
    assert not biased.passed


def test_certify_counts_flags_an_accepted_token_outside_the_draft_support():
    q = np.array([0.5, 0.5, 0.0])
    joint = np.array([[400, 300, 200], [0, 0, 0], [100, 0, 0]])  # token 2 "accepted" though q(2) = 0
    cert = exactness.certify_counts(joint, P, q)
    assert "candidate_support" in cert.failed_checks()


@pytest.mark.parametrize("call, err, match", [
    (lambda: exactness.certify_counts(np.array([1.0, 2.0, 3.0]), P), TypeError, "counts must hold integers"),
    (lambda: exactness.certify_counts(np.array([5, -1, 3]), P), ValueError, "negative"),
    (lambda: exactness.certify_counts(np.array([5, 1]), P), ValueError, r"shape \(V,\)"),
    (lambda: exactness.certify_counts(np.zeros(3, dtype=np.int64), P), ValueError, "no samples"),
    (lambda: exactness.certify_counts(np.ones((3, 3), dtype=np.int64), P, Q, k=4), ValueError, "k = 4"),
    (lambda: exactness.certify_counts(np.ones(3, dtype=np.int64) * 100, P, np.ones(4) / 4), ValueError, "same vocab"),
    (lambda: exactness.certify_counts(np.ones(3, dtype=np.int64) * 100, np.array([0.5, 0.6, 0.1])), ValueError,
     "sums to"),
    (lambda: exactness.certify_samples(np.array([0.0, 1.0]), P), TypeError, "tokens must hold integers"),
    (lambda: exactness.certify_samples(np.array([[0, 1]]), P), ValueError, r"shape \(n,\)"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P, accepted=np.array([0, -1])), ValueError, "needs k"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P, accepted=np.array([0]), k=2), ValueError, "accepted must"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P, candidates=np.array([[0, 1]])), ValueError, "candidates must"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P, candidates=np.array([[0, 1], [1, 1]]), k=3), ValueError,
     "k = 3"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P, drafting="top-k"), ValueError, "drafting"),
    (lambda: exactness.certify_samples(np.array([0, 1]), P), ValueError, "no degrees of freedom"),
])
def test_collected_bad_input_is_a_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call()


# --- item 3: seeds given as sequences --------------------------------------------------------------------

def test_as_generator_takes_sequences_and_seed_sequences():
    ref = np.random.default_rng([0, 3]).random(4)
    assert np.array_equal(as_generator([0, 3]).random(4), ref)
    assert np.array_equal(as_generator((0, 3)).random(4), ref)
    assert np.array_equal(as_generator(np.array([0, 3])).random(4), ref)
    assert np.array_equal(as_generator(np.random.SeedSequence([0, 3])).random(4), ref)
    assert np.array_equal(as_generator(5).random(4), np.random.default_rng(5).random(4))  # ints unchanged


def test_sub_seed_keeps_the_old_streams_for_int_seeds():
    assert np.array_equal(np.random.default_rng(sub_seed(7, 2, 1)).random(3),
                          np.random.default_rng(np.random.SeedSequence([7, 2, 1])).random(3))


@pytest.mark.parametrize("seed, err", [([0, -1], ValueError), ([], ValueError), ([0.5], TypeError),
                                       ([[0, 1]], TypeError), ("x", TypeError), (True, TypeError),
                                       ([0, True], TypeError), (-2, ValueError), (1.5, TypeError)])
def test_bad_seed_sequences_are_clear_errors(seed, err):
    with pytest.raises(err, match="seed"):
        as_seed_sequence(seed)
    with pytest.raises(err, match="seed"):
        exactness.certify_verifier(RRS, P, Q, 1, n=500, seed=seed)


def test_sequence_seeds_everywhere():
    a = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=[0, 4])
    b = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=np.random.SeedSequence([0, 4]))
    assert a.statistic == b.statistic and a.checks == b.checks
    s = exactness.certify_sampler(lambda r, m: r.choice(3, size=m, p=P), P, 2000, seed=[1, 2])
    assert s.statistic == exactness.certify_sampler(lambda r, m: r.choice(3, size=m, p=P), P, 2000,
                                                    seed=np.random.SeedSequence([1, 2])).statistic
    assert len(exactness.assert_exact(RRS, P, Q, k=1, n=2000, seed=[0, 2])) == 1


# --- item 4: parallel workers ---------------------------------------------------------------------------------

PARENT = os.getpid()


class RaisesInWorker(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            raise RuntimeError("boom in a worker")
        return super().verify(p, q, candidates, rng)


class DiesInWorker(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            os._exit(3)
        return super().verify(p, q, candidates, rng)


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_workers_split_the_draws_reproducibly():
    a = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=3, workers=2)
    b = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=3, workers=2)
    assert a.passed and a.n == N
    assert a.statistic == b.statistic and a.checks == b.checks


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_a_verify_raising_in_a_worker_fails_naming_it():
    cert = exactness.certify_verifier(RaisesInWorker(), P, Q, 2, n=N, seed=0, workers=2)
    assert not cert.passed and "RuntimeError: boom in a worker" in cert.details["subject"]["error"]


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_a_dying_worker_is_a_fail_never_a_pass():
    cert = exactness.certify_verifier(DiesInWorker(), P, Q, 2, n=N, seed=0, workers=2)   # was a RuntimeError
    assert not cert.passed and "DiesInWorker.verify killed its worker process" in cert.details["subject"]["error"]


class HangsInWorker(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            import time

            time.sleep(600)
        return super().verify(p, q, candidates, rng)


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method and SIGALRM")
def test_a_hanging_worker_times_out_the_cell_and_is_stopped():
    import multiprocessing as mp

    from exactness.grid import Cell, run_cell

    r = run_cell(Cell("hangs", HangsInWorker(), "node", 2, P, Q), n=N, alpha=1e-3, seed=0, timeout=2, workers=2)
    assert not r.certificate.passed and "did not return within 12 s" in r.certificate.details["error"]   # 2 + 10
    assert not mp.active_children()  # the workers were terminated, not left sleeping


@pytest.mark.parametrize("workers, err", [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_bad_workers(workers, err):
    with pytest.raises(err, match="workers must be"):
        exactness.certify_verifier(RRS, P, Q, 1, n=500, workers=workers)


# --- item 5: declared supported k -----------------------------------------------------------------------------

class OnlyK12(Box):
    supported_k = (1, 2)


class OnlyK1Method(Box):
    def supported_k(self, k):
        return k == 1


def test_supported_k_declaration():
    assert exactness.certify_verifier(OnlyK12(), P, Q, 2, n=N, seed=0).passed
    with pytest.raises(UnsupportedK, match=r"k = 4 is not supported \(OnlyK12.supported_k = \(1, 2\)\)"):
        exactness.certify_verifier(OnlyK12(), P, Q, 4, n=N)
    with pytest.raises(ValueError, match="not supported"):
        exactness.certify_verifier(OnlyK1Method(), P, Q, 2, n=N)
    assert k_support(OnlyK1Method(), 1) is None


@pytest.mark.parametrize("decl", ["12", (), (0, 1), (1.0,), lambda k: "yes"])
def test_malformed_supported_k_is_a_type_error(decl):
    class Bad(Box):
        pass

    v = Bad()
    v.supported_k = decl
    with pytest.raises(TypeError, match="supported_k"):
        exactness.certify_verifier(v, P, Q, 1, n=N)


# --- CLI: --seed sequences, --workers, "not supported" cells ------------------------------------------------

TINY = ["--family", "zipf", "--samples", "2000", "--no-mutants", "--no-progress"]

MINE = """
import resispec

class Mine:
    drafting = "iid"
    supported_k = (1,)

    def verify(self, p, q, candidates, rng):
        return resispec.get_verifier("rrs").verify(p, q, candidates, rng)
"""


@pytest.fixture
def mine_dir(user_dir):
    """``user_dir`` (tests/conftest.py) holding the user module ``mine_k``."""
    (user_dir / "mine_k.py").write_text(textwrap.dedent(MINE))
    return user_dir


def test_cli_reports_unsupported_k_as_skipped_not_failed(mine_dir, capsys):
    rc = main(["certify", "--verifier", "mine_k:Mine", "--k", "1,2", *TINY, "--out", str(mine_dir / "c.md"),
               "--seed", "0,3", "--workers", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and "NO BIAS DETECTED" in out and "not supported: k = 2" in out
    data = json.loads((mine_dir / "c.json").read_text())
    cells = {c["k"]: c for c in data["cells"]}
    assert cells[2]["skipped"].startswith("not supported") and cells[1]["skipped"] is None
    assert data["meta"]["seed"] == [0, 3] and data["meta"]["workers"] == 2


def test_cli_with_no_supported_cell_is_never_a_pass(mine_dir, capsys):
    rc = main(["certify", "--verifier", "mine_k:Mine", "--k", "2", *TINY, "--out", str(mine_dir / "c.md")])
    assert rc == 1 and "NOT TESTED" in capsys.readouterr().out


@pytest.mark.parametrize("flag, value, match", [("--seed", "0,-3", "--seed must be >= 0"),
                                                ("--seed", "x", "comma-separated sequence"),
                                                ("--workers", "0", "--workers must be >= 1")])
def test_cli_bad_seed_and_workers_exit_2(mine_dir, capsys, flag, value, match):
    rc = main(["certify", "--verifier", "rrs", "--k", "1", *TINY, "--out", str(mine_dir / "c.md"), flag, value])
    assert rc == 2 and match in capsys.readouterr().err
