"""Words a newcomer reads right (issue 37 items 9 and 10): a passing verdict says "no bias detected" with its
detectable TV, never a bare "PASS" that reads as "exact"; every summary fits 120 columns and the details stay
in ``Certificate.report()`` and the reports; the JSON reports are strict JSON; the main job writes into a
git-ignored folder; the exit-code contract is documented once."""

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import exactness
import resispec
from exactness import report
from exactness.certificate import Certificate, subject_failure
from exactness.grid import CellResult, GridResult
from exactness.mutants import CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
WIDTH = 120


@pytest.fixture(scope="module")
def good():
    return exactness.certify_verifier(resispec.get_verifier("resispec"), P, Q, 2, n=20_000)


@pytest.fixture(scope="module")
def bad():
    return exactness.certify_verifier(CATALOGUE["residual_is_p"], P, Q, 2, n=20_000)


def _grid(certs):
    return GridResult([CellResult("v", "fam", 3, 2, c, p_holm=c.pvalue, p_bh=c.pvalue) for c in certs], 1e-3)


# ------------------------------------------------------------------------------------------- the summary line

def test_a_pass_says_no_bias_detected_with_its_detectable_tv(good):
    s = good.summary()
    assert good.passed and len(s) <= WIDTH and "\n" not in s
    assert s.startswith(f"NO BIAS DETECTED (detectable TV {good.detectable_tv:.3g} at power 0.99, alpha 0.001; "
                        f"n = {good.n:,}): TV <= {good.tv_upper:.3g} at confidence 0.999"), s
    assert "PASS" not in s.upper().replace("BIAS", "")


def test_a_failure_names_its_check_and_numbers_and_fits(bad):
    s = bad.summary()
    failed = bad.failing_order()
    assert not bad.passed and len(failed) >= 2
    assert s.startswith(f"FAIL: {bad.describe(failed[0])}") and len(s) <= WIDTH, s
    assert all(name in s for name in failed)                       # the rest are named, at least
    full = bad.report()
    assert all(f"failed: {bad.describe(name)}" in full for name in failed)
    assert f"n = {bad.n:,}" in full and "checks (Holm-adjusted p)" in full


def test_a_misbehaving_subject_is_named_and_long_causes_point_to_the_report():
    short = subject_failure("Mine.verify returned tokens of shape (3,), expected (64,)")
    assert short.summary() == "FAIL: subject: Mine.verify returned tokens of shape (3,), expected (64,)"
    cause = "Mine.verify raised ZeroDivisionError: " + "x" * 300
    long = subject_failure(cause)
    s = long.summary()
    assert len(s) <= WIDTH and s.startswith("FAIL: subject: Mine.verify raised") and s.endswith("(more: .report())")
    assert cause in long.report()


def test_skips_and_notes_never_push_the_line_past_120_columns(good, bad):
    notes = ("the exact TV describes _chain, not verify: " + "y" * 150, "a second note")
    skipped = {f"check_{i}": "reason " * 20 for i in range(12)}
    for cert in (good, bad, subject_failure("z" * 500)):
        for extra in ({}, {"notes": notes}, {"skipped": skipped}, {"notes": notes, "skipped": skipped}):
            c = replace(cert, **extra)
            s = c.summary()
            assert len(s) <= WIDTH and "\n" not in s, (len(s), s)
            full = c.report()
            assert all(f"note: {n}" in full for n in c.notes)
            assert all(f"skipped: {k} ({v})" in full for k, v in c.skipped.items())
    s = replace(good, skipped={"tree_bonus": "tree=False"}).summary()
    assert s.startswith("NO BIAS DETECTED (") and "skipped: tree_bonus" in s


def test_the_main_test_is_labelled_when_it_is_not_the_marginal(good):
    s = replace(good, main="joint").summary()
    assert s.startswith("NO BIAS DETECTED (joint test, detectable TV") and len(s) <= WIDTH
    assert "joint chi2 = " in replace(good, main="joint").report()


def test_summary_width_is_a_class_constant_not_a_field():
    assert Certificate.SUMMARY_WIDTH == WIDTH and "SUMMARY_WIDTH" not in Certificate.__dataclass_fields__


# --------------------------------------------------------------------------------- resispec certify's report

def test_report_cells_say_no_bias_detected_never_pass(good, bad):
    rows = report.cell_rows(_grid([good]))
    assert rows[0][13] == f"no bias detected (detectable TV {good.detectable_tv:.2g})"
    md = report.markdown(_grid([good]))
    assert "ALL PASS" not in md and "**No bias detected** in any cell (detectable TV" in md
    assert "| pass |" not in md
    table = report.terminal_table(_grid([good]))
    assert "no bias detected (detectable TV" in table and "  pass" not in table
    assert report.markdown(_grid([good, bad])).count("**FAILED: v**") == 1
    assert report.cell_rows(_grid([bad]))[0][13].startswith("FAIL (")


def test_json_report_is_strict_even_with_a_failed_cell_of_nan_numbers(good, tmp_path):
    grid = _grid([good, subject_failure("Mine.verify hung")])
    paths = report.write_reports(grid, tmp_path / "c.md")

    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")

    data = json.loads(paths["json"].read_text(), parse_constant=refuse)
    assert data["cells"][1]["tv_estimate"] is None and data["cells"][0]["tv_estimate"] > 0
    assert report.strict_json({"a": np.float32("nan"), "b": [np.inf, np.int64(3)], "c": np.arange(2)}) == \
        {"a": None, "b": [None, 3], "c": [0, 1]}


# ------------------------------------------------------------------------------- the main job on a fresh clone

def test_certify_writes_to_a_git_ignored_folder_by_default():
    from resispec.cli import parse

    out = parse(["certify"])[1].out
    assert out.parts[0] == "certify-out" and out.name == "certify.md"
    assert "certify-out/" in (ROOT / ".gitignore").read_text().splitlines()
    if shutil.which("git") and (ROOT / ".git").exists():
        for name in (out, out.with_suffix(".json"), out.with_name("certify_qq.png")):
            r = subprocess.run(["git", "check-ignore", "-q", str(name)], cwd=ROOT)
            assert r.returncode == 0, f"{name} is not git-ignored"
    readme = (ROOT / "README.md").read_text()
    assert "certify-out/certify.md" in readme and "--out reports/certify.md" in readme


# ----------------------------------------------------------------------------------------------- exit codes

def test_the_exit_code_contract_is_documented_once_and_linked_from_the_readme():
    doc = (ROOT / "docs" / "certify.md").read_text()
    assert doc.count("\n## Exit codes\n") == 1
    section = doc.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    for code, words in (("0", "no bias detected"), ("1", "bias found, or the subject misbehaved"),
                        ("2", "only the caller's own malformed arguments"), ("3", "inconclusive")):
        assert f"| {code} | **{words}**" in section, code
    for cause in ("raises", "hangs", "wrong shape", "outside `[0, V)`", "target probability 0", "accepted index"):
        assert cause in section, cause
    assert "exactness.SubjectError" in section and "subject_failure" in section
    assert "docs/certify.md#exit-codes" in (ROOT / "README.md").read_text()


def test_the_summary_names_the_strongest_failing_check_first(bad):
    """Round 6: the summary named the first failing check in table order (joint[2] at Holm p 1e-3 ahead of
    tile_rows at 1.7e-17); failing checks come strongest first, ties in table order."""
    names = list(bad.failed_checks())
    strong = names[-1]                                              # the last in table order made the strongest
    checks = dict(bad.checks, **{k: bad.alpha / 10 ** 6 for k in names[:-1]}, **{strong: 1e-40})
    flipped = replace(bad, checks=checks)
    assert flipped.failing_order()[0] == strong and flipped.failing_order()[-1] != strong
    assert flipped.summary().startswith(f"FAIL: {flipped.describe(strong)}"[:60]), flipped.summary()


def test_a_cut_summary_ends_after_a_whole_clause():
    from exactness.result import fit_line

    line = "FAIL: tile_rows: p = 5.17e-18, worst: first row of each 512-row tile, joint (217 rows), p = 4.41e-21 " \
           "before Bonferroni over 51 tests (row groups x tokens)"
    cut = fit_line(line)
    assert len(cut) <= WIDTH and cut.endswith("(more: .report())"), cut
    assert "before ..." not in cut and cut.split(" ...")[0] in line and cut.split(" ...")[0][-1] not in ",;(", cut
