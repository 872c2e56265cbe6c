"""Verdict correctness of the exactness harness (hardening items 2, 6, 11, 13, 14): regression tests."""

import re
import subprocess
import sys

import numpy as np
import pytest

import exactness
import resispec
from exactness import limits, report, sampling
from exactness.grid import CellResult, GridResult
from exactness.mutants import CATALOGUE

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
RRS = type(resispec.get_verifier("rrs"))


def _biased(rng, n):  # TV 0.3 from P
    return rng.choice(3, size=n, p=[0.8, 0.1, 0.1])


def _pq(V, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))


# ---------------------------------------------------------------- item 2: a test that cannot fail is no pass

@pytest.mark.parametrize("me, err", [(1e12, ValueError), (float("nan"), ValueError), (float("inf"), ValueError),
                                     (0.0, ValueError), (-1.0, ValueError), (True, TypeError), ("5", TypeError)])
def test_min_expected_that_pools_everything_is_an_error(me, err):
    with pytest.raises(err, match="min_expected"):
        exactness.certify_sampler(_biased, P, 20_000, min_expected=me)


def test_too_few_samples_for_any_degree_of_freedom_is_an_error():
    with pytest.raises(ValueError, match="no degrees of freedom.*n >= "):
        exactness.certify_sampler(_biased, P, 6)


def test_single_token_law_runs_the_impossible_token_check():
    law = np.array([0.0, 1.0, 0.0])
    ok = exactness.certify_sampler(lambda r, n: np.ones(n, dtype=np.int64), law, 1_000)
    assert ok.passed and ok.df == 0
    bad = exactness.certify_sampler(lambda r, n: np.where(r.random(n) < 0.01, 0, 1), law, 1_000)
    assert not bad.passed and bad.details["marginal"]["impossible"] > 0


def test_sub_check_with_no_degrees_of_freedom_is_listed_as_skipped():
    p = np.array([0.5, 0.3, 0.2])
    q = p + np.array([1e-4, -1e-4, 0.0])  # the residual is reached about once in 10^4 draws
    cert = exactness.certify_verifier(resispec.get_verifier("rrs"), p, q, 1, n=3_000, tree=False)
    assert "residual" in cert.skipped and "residual" not in cert.checks
    assert cert.passed


# ---------------------------------------------------------------- item 11: planner, torch verifiers, reports

def test_samples_for_tv_tiny_tv_and_bool():
    assert exactness.samples_for_tv(1e-200, 7) > 10**400
    with pytest.raises(TypeError, match="tv"):
        exactness.samples_for_tv(True, 7)


def test_torch_verifier_is_wrapped():
    pytest.importorskip("torch")
    p, q = _pq(5)
    cert = exactness.certify_verifier(resispec.get_verifier("rrs", backend="torch"), p, q, 2, n=5_000, tree=False)
    assert cert.passed, cert.summary()


def test_exactness_does_not_import_torch():
    code = ("import sys, numpy as np, exactness, resispec; exactness.certify_verifier(resispec.get_verifier('rrs'), "
            "np.array([.5, .3, .2]), np.array([.2, .2, .6]), 2, n=2000, tree=False); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _grid(certs):
    cells = [CellResult("v", "fam", 3, 2, c, p_holm=c.pvalue, p_bh=c.pvalue) for c in certs]
    return GridResult(cells, 1e-3)


def test_write_reports_leaves_nothing_behind_on_disk_full(tmp_path, monkeypatch):
    cert = exactness.certify_verifier(resispec.get_verifier("rrs"), P, Q, 2, n=2_000, tree=False)
    real, calls = report.atomic_write, []

    def writer(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(report, "atomic_write", writer)
    with pytest.raises(OSError, match="No space"):
        report.write_reports(_grid([cert]), tmp_path / "c.md")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- item 13: black-box verifiers

class _FlagAccepted(RRS):
    """Reports .accepted as an accept flag (1/0), not the candidate index."""

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        r = super().verify(p, q, candidates, rng, uniforms=uniforms)
        return resispec.VerifyResult(r.tokens, np.where(r.accepted >= 0, 1, -1))


def test_accepted_flag_is_no_refusal_the_tokens_are_certified():
    # issue 37 items 3 and 7: accepted indices that do not name the candidate are never refused: the tokens are
    # certified (rrs's, exact: no statistical check fails), the index checks skipped with the reason, and the
    # broken contract is the one failing check (exit 1)
    cert = exactness.certify_verifier(_FlagAccepted(), P, Q, 3, n=2_000, tree=False)
    assert not cert.passed and set(cert.failed_checks(adjusted=False)) == {"accepted_index"}, cert.report()
    why = cert.details["accepted_index"]["error"]
    assert re.search(r"accepted\[\d+\] = 1 but tokens.*index of the emitted candidate", why)
    assert {"joint", "accepted_count", "residual"} <= set(cert.skipped) and "joint" not in cert.checks
    assert any("certified on the tokens it emits" in note for note in cert.notes)


class _OneNode:
    """Written for one node: p of shape (V,)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        x = candidates[0]
        if rng.random() < min(1.0, p[x] / q[x]):
            return resispec.VerifyResult(np.array([x]), np.array([0]))
        return resispec.VerifyResult(np.array([0]), np.array([-1]))


def test_single_node_verify_gets_the_batch_contract():
    cert = exactness.certify_verifier(_OneNode(), P, Q, 1, n=2_000, tree=False)   # a FAIL naming it (issue 37)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert re.search(r"batches: p and q of shape \(B, V\).*candidates of shape \(B, k\)",
                     cert.details["subject"]["error"])


# ---------------------------------------------------------------- item 14: reports that point the right way

class _BiasedVerify(RRS):
    """The chain is rrs's, but verify emits token 0 on every residual."""

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        r = super().verify(p, q, candidates, rng, uniforms=uniforms)
        return resispec.VerifyResult(np.where(r.accepted < 0, 0, r.tokens), r.accepted)


def test_verify_disagreeing_with_its_chain_is_named():
    cert = exactness.certify_verifier(_BiasedVerify(), P, Q, 1, n=20_000, tree=False)
    assert not cert.passed
    assert cert.details["exact"]["tv"] < 1e-9
    assert cert.details["chain_consistency"]["tv_joint"] > 0.05
    assert any("describes _chain, not verify" in n for n in cert.notes)
    assert "describes _chain, not verify" in cert.report()
    row = report.cell_rows(_grid([cert]))[0]
    assert row[4].endswith("*")


def test_bonus_bias_quotes_the_tree_tv_not_the_marginal():
    p, q = _pq(6, 3)
    cert = exactness.certify_verifier(CATALOGUE["bonus_from_residual"], p, q, 2, n=20_000)
    assert "tree_bonus" in cert.failed_checks() and "marginal" not in cert.failed_checks()
    tv_tree = cert.details["tree_bonus"]["exact_tv"]
    assert tv_tree > 0.05
    head = cert.summary()
    assert head.startswith("FAIL: tree_bonus: ") and f"exact TV {tv_tree:.3g}" in head
    verdict = report.cell_rows(_grid([cert]))[0][13]
    assert "tree_bonus" in verdict and f"{tv_tree:.3g}" in verdict


class _BatchBug(RRS):
    """Correct one node at a time; on a batch, every row uses row 0's p."""

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        p = np.asarray(p)
        if p.ndim == 2 and not np.all(p == p[:1]):
            p = np.broadcast_to(p[:1], p.shape)
        return super().verify(p, q, candidates, rng, uniforms=uniforms)


def test_batched_failure_is_named_with_its_reason():
    cert = exactness.certify_verifier(_BatchBug(), P, Q, 2, n=2_000, tree=False)
    assert list(cert.failed_checks()) == ["batched"]
    assert cert.summary().startswith("FAIL: batched: verify on a batch")


class _NanChain(RRS):
    def _chain(self, p, q, c):
        a, r = super()._chain(p, q, c)
        a = np.array(a, dtype=np.float64)
        a[:, -1] = np.nan
        return a, r


def test_chain_returning_nan_is_a_clear_failure():
    cert = exactness.certify_verifier(_NanChain(), P, Q, 2, n=2_000, tree=False)
    assert not cert.passed and "exact_law" in cert.failed_checks()
    assert "chain returned NaN or inf" in cert.summary() and "at candidates" in cert.report()
    assert report.cell_rows(_grid([cert]))[0][4] == "invalid"


class _UserRRS(RRS):
    """A user subclass: no built-in accept table, so the exact check enumerates."""


def test_skipped_checks_are_listed_with_reasons_in_certificate_and_table():
    p, q = _pq(50, 1)
    cert = exactness.certify_verifier(_UserRRS(), p, q, 4, n=3_000)
    assert "candidate tuples" in cert.skipped["exact_law"] and "MAX_TUPLES" in cert.skipped["exact_law"]
    assert "TREE_MAX_V" in cert.skipped["tree_bonus"] and "tree_two_level" in cert.skipped
    assert "exact_law" not in cert.checks
    table = report.terminal_table(_grid([cert]))
    assert "skipped" in table.splitlines()[0] and "Legend:" in table
    assert "exact_law: 6,250,000 candidate tuples" in table
    md = report.markdown(_grid([cert]))
    assert "Skipped checks" in md and "TREE_MAX_V = 16" in md


class _ReadmeStyle(RRS):
    """Overrides verify as the README shows: no uniforms keyword."""

    def verify(self, p, q, candidates, rng=None):
        return super().verify(p, q, candidates, rng)


def test_verify_without_uniforms_is_a_black_box_path():
    cert = exactness.certify_verifier(_ReadmeStyle(), P, Q, 2, n=5_000, tree=False)
    assert cert.passed, cert.summary()
    assert "uniforms" in cert.skipped["batched"]


class _Normalises:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        p /= p.sum(axis=1, keepdims=True)
        return resispec.get_verifier("rrs").verify(p, q, candidates, rng)


def test_in_place_normalisation_works():
    cert = exactness.certify_verifier(_Normalises(), P, Q, 2, n=5_000, tree=False)
    assert cert.passed, cert.summary()


class _NoDrafting:
    def verify(self, p, q, candidates, rng):
        return resispec.get_verifier("rrs").verify(p, q, candidates, rng)


def test_missing_drafting_is_a_clear_error():
    with pytest.raises(TypeError, match="drafting.*'iid', 'without_replacement' or 'any'"):
        exactness.certify_verifier(_NoDrafting(), P, Q, 2, n=2_000)


class _UnrelatedChain(_Normalises):
    chain = ["markov", "chain"]  # nothing to do with resispec.Chain


def test_unrelated_chain_attribute_is_a_black_box():
    cert = exactness.certify_verifier(_UnrelatedChain(), P, Q, 2, n=5_000)
    assert cert.passed, cert.summary()
    assert "black box" in cert.skipped["exact_law"]


# ---------------------------------------------------------------- item 6: huge n

def test_certify_sampler_refuses_a_run_of_days():
    with pytest.raises(ValueError, match=r"would take ~.*hours.*smaller n"):
        exactness.certify_sampler(lambda r, n: r.choice(3, size=n, p=P), P, 10**12)


def test_certify_verifier_refuses_n_beyond_max_samples():
    with pytest.raises(ValueError, match=r"GiB.*MAX_SAMPLES"):
        exactness.certify_verifier(resispec.get_verifier("rrs"), P, Q, 2, n=10**12)


def test_node_sampler_draws_in_chunks_with_the_same_stream_below_a_chunk(monkeypatch):
    s = sampling.NodeSampler(resispec.get_verifier("rrs"), P, Q, 2)
    ref = s.draws(np.random.default_rng(5), 300)
    sizes = []
    inner = s._draws
    monkeypatch.setattr(s, "_draws", lambda rng, m: sizes.append(m) or inner(rng, m))
    monkeypatch.setattr(limits, "CHUNK", 300)
    same = s.draws(np.random.default_rng(5), 300)
    assert np.array_equal(ref.tokens, same.tokens) and np.array_equal(ref.accepted, same.accepted)
    monkeypatch.setattr(limits, "CHUNK", 128)
    big = s.draws(np.random.default_rng(5), 1_000)
    assert big.tokens.shape == (1_000,) and max(sizes[1:]) <= 128


# ---------------------------------------------------------------- session 33 breaker: verdicts and bad input
class _SmallBatchBias:
    """A black box right on large batches and wrong (token 0) on batches of at most 8 rows."""
    drafting = "iid"

    def __init__(self, wrong=True):
        self.v, self.wrong = resispec.get_verifier("rrs"), wrong

    def verify(self, p, q, c, rng):
        r = self.v.verify(p, q, c, rng)
        if self.wrong and c.shape[0] <= 8:
            r.tokens[:], r.accepted[:] = 0, -1
        return r


def test_a_black_box_wrong_only_on_small_batches_fails_by_the_small_batches_check():
    p, q = _pq(50, 3)
    bad = exactness.certify_verifier(_SmallBatchBias(), p, q, 2, tree=False)
    assert not bad.passed and bad.checks["small_batches"] == 0.0
    good = exactness.certify_verifier(_SmallBatchBias(wrong=False), p, q, 2, tree=False)
    assert good.passed and "small_batches" in good.checks and good.details["small_batches"]["n"] == 2_000


def test_drafting_any_says_without_replacement_drafts_were_not_drawn():
    class AnyRRS(_SmallBatchBias):
        drafting = "any"
    cert = exactness.certify_verifier(AnyRRS(wrong=False), P, Q, 2, tree=False)
    assert "without_replacement_drafts" in cert.skipped and "iid only" in cert.skipped["without_replacement_drafts"]


def test_a_budget_refusal_is_a_failed_cell_that_says_not_run_and_keeps_the_whole_fix():
    from exactness.budget import BudgetError
    from exactness.grid import _failure_reason

    msg = "tv = 1e-09 needs n = ~1e18 draws (timed pilot of 2,000 draws of rrs): " + "x" * 300 + "; ask for a larger tv"
    why = _failure_reason(BudgetError(msg))
    assert why.startswith("not run: tv = 1e-09") and why.endswith("ask for a larger tv")
    with pytest.raises(BudgetError, match="larger tv"):
        exactness.certify_verifier(resispec.get_verifier("rrs"), *_pq(50), 2, tv=1e-9)


def test_certify_refuses_an_astronomical_samples_and_coupled_a_vacuous_n(capsys):
    from resispec.cli import main

    assert main(["certify", "--samples", "1e400"]) == 2
    assert "~1e400 exceeds the limit" in capsys.readouterr().err
    with pytest.raises(ValueError, match="pass n >= 10"):
        exactness.certify_coupled(resispec.get_verifier("rrs"), "rrs", P, Q, 2, n=1)


def test_ctrl_c_in_a_command_is_one_line_and_rc_130(monkeypatch, capsys):
    from resispec import cli
    from resispec.commands import certify

    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(certify, "run", stop)
    rc = cli.main(["certify"])
    err = capsys.readouterr().err
    assert rc == 130 and err.strip() == "resispec certify: interrupted (Ctrl-C)"
