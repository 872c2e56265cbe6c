"""Regressions for what an adversarial pass found after the hardening merge: a PASS with nothing
tested, exact verifiers failing on float32 input, bad options blamed on the verifier, output paths
that replaced devices, FIFOs or symlinks, colliding report paths, and an invalid chain reported as a
KeyError."""

import os
import sys

import numpy as np
import pytest

import exactness
import resispec
from exactness.grid import Cell, run_grid
from resispec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


def _certify(tmp_path, *extra):
    return main(["certify", "--family", "zipf", "--no-mutants", "--no-progress", "--samples", "2000",
                 "--out", str(tmp_path / "r" / "c.md"), *extra])


def test_every_cell_skipped_is_never_a_pass(tmp_path, capsys):
    grid = run_grid([Cell("rrs_wor", resispec.get_verifier("rrs_wor"), "toy", 9, P, Q)], n=2000)
    assert grid.cells[0].certificate is None and grid.untested_verifiers() == ["rrs_wor"]
    assert not grid.passed and grid.failed_verifiers() == ["rrs_wor"]
    assert _certify(tmp_path, "--verifier", "rrs_wor", "--k", "9") == 1
    out = capsys.readouterr().out
    assert "NOT TESTED" in out and "NO BIAS DETECTED in any" not in out


@pytest.mark.parametrize("name", ["rrs", "sps", "kseq", "resispec", "target_only"])
def test_exact_verifiers_pass_on_float32_and_off_by_tolerance_input(name):
    v = resispec.get_verifier(name)
    for p, q in ((P.astype(np.float32), Q.astype(np.float32)), (P * (1 + 1e-6), Q)):
        cert = exactness.certify_verifier(v, p, q, 2, n=2000)
        assert cert.passed, cert.summary()


def test_exact_check_still_strict_for_normalised_input():
    from exactness.exact import EXACT_TOL, exact_tol

    assert exact_tol(P, Q) == pytest.approx(EXACT_TOL, abs=1e-15)
    from exactness.certify_run import MUTANT_FAMILY, family_nodes

    (p, q), = family_nodes(0, (MUTANT_FAMILY,))[0].values()   # the panel node where bf16_ratio is biased
    cert = exactness.certify_verifier(exactness.mutants.CATALOGUE["bf16_ratio"], p, q, 1, n=2000)
    assert "exact_law" in cert.failed_checks(), cert.summary()


@pytest.mark.parametrize("extra, match", [
    (["--verifier", "rrs", "--k", "100000"], "--k must lie in"),
    (["--verifier", "rrs", "--k", "1", "--time-limit", "1e300"], "--time-limit"),
])
def test_bad_options_are_exit_2_not_a_failed_verifier(tmp_path, capsys, extra, match):
    assert _certify(tmp_path, *extra) == 2
    assert match in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_out_to_a_fifo_is_refused_and_the_fifo_survives(tmp_path, capsys):
    fifo = tmp_path / "f.md"
    os.mkfifo(fifo)
    assert main(["certify", "--verifier", "rrs", "--k", "1", "--out", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert fifo.exists() and not fifo.is_file()


def test_out_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "c.md"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "c.md"
    link.symlink_to(target)
    assert main(["certify", "--family", "zipf", "--verifier", "rrs", "--k", "1", "--samples", "2000",
                 "--no-mutants", "--no-progress", "--out", str(link)]) == 0
    assert link.is_symlink() and target.read_text().startswith("# resispec certify")


def test_colliding_report_paths_are_refused(tmp_path, capsys):
    """--out c.json would write the Markdown where its own JSON goes."""
    assert main(["certify", "--verifier", "rrs", "--out", str(tmp_path / "c.json")]) == 2
    assert "would both be written to" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_invalid_chain_fails_its_cell_with_the_chain_reason():
    class NaNChain(resispec.Verifier):
        drafting = "iid"

        def _chain(self, p, q, c):
            a = np.full(c.shape, np.nan)
            return a, p.copy()

    grid = run_grid([Cell("nanchain", NaNChain(), "toy", 1, P, Q)], n=2000)
    cert = grid.cells[0].certificate
    assert not grid.passed and "error" not in cert.details
    assert "NaN" in cert.details["exact"]["error"]


@pytest.mark.parametrize("tv", [0, 0.0, -1e-3, 2.0, float("nan")])
def test_tv_outside_the_unit_interval_is_an_error(tv):
    with pytest.raises(ValueError, match="tv must lie"):
        exactness.certify_verifier(resispec.get_verifier("rrs"), P, Q, 1, n=1000, tv=tv)
    with pytest.raises(ValueError, match="tv must lie"):
        exactness.certify_sampler(lambda rng, m: rng.choice(3, m, p=P), P, 1000, tv=tv)


def test_verifier_without_drafting_is_a_bad_argument_before_any_cell(tmp_path, monkeypatch, capsys):
    (tmp_path / "nodraft_mod.py").write_text(
        "class NoDrafting:\n    def verify(self, p, q, candidates, rng):\n        raise AssertionError('never run')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert _certify(tmp_path, "--verifier", "nodraft_mod:NoDrafting", "--k", "1") == 2
    finally:
        sys.modules.pop("nodraft_mod", None)
    err = capsys.readouterr().err
    assert "no 'drafting' attribute" in err and "iid" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_callable_proxy_with_the_wrong_signature_fails_at_get_verifier(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"proxy\(q_i, \*, step, k, p_i\)"):
        resispec.get_verifier("resispec", backend=backend, proxy=lambda q: q)
    resispec.get_verifier("resispec", backend=backend, proxy=lambda q_i, **kw: q_i)   # **kwargs is fine


def test_time_limit_survives_a_plugin_that_swallows_the_first_alarm():
    import time

    class Swallower:
        drafting = "iid"

        def verify(self, p, q, candidates, rng):
            try:
                time.sleep(30)
            except BaseException:   # a plug-in that swallows everything, once
                pass
            time.sleep(30)

    grid = run_grid([Cell("swallow", Swallower(), "toy", 1, P, Q)], n=2000, timeout=1)   # returns at all: stopped
    assert not grid.passed and grid.cells[0].certificate.details["error"] == (
        "Swallower.verify did not return within 11 s (--time-limit 1 s plus a grace of 10 s)")
