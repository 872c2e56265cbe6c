"""The CLI's option set, round two (issue 39): fewer options, one name for one thing.

Each test pins one merge: the old spelling (where committed reports quote it) parses to the same value as the new.
"""

from __future__ import annotations

import json

import pytest

from resispec.cli import main, parse


@pytest.mark.parametrize("argv, mutants", [
    (["certify"], None), (["certify", "--mutants"], 1), (["certify", "--mutants", "3"], 3),
    (["certify", "--mutants", "0"], 0), (["certify", "--no-mutants"], 0)])
def test_mutants_takes_an_optional_count_and_no_mutants_is_its_zero(argv, mutants):
    assert parse(argv)[1].mutants == mutants


def test_mutants_default_is_one_run_without_verifier_and_none_with_one(monkeypatch):
    """--mutants unset: the catalogue runs (1 seed each) when no --verifier is given; not when one is."""
    from resispec.commands import certify as C

    seen = {}

    def fake_run(args):
        seen["do"] = C._check_args(args)[1]
        seen["n"] = args.mutants
        return 0

    for argv, expect in ((["certify", "--k", "1"], (True, 1)), (["certify", "--verifier", "rrs", "--k", "1"], (False, 0))):
        _, args = parse(argv)
        fake_run(args)
        assert (seen["do"], seen["n"]) == expect, argv


def test_a_negative_mutants_count_is_refused(capsys):
    assert main(["certify", "--mutants", "-1", "--verifier", "rrs"]) == 2
    assert "--mutants must be a whole number >= 0" in capsys.readouterr().err


def test_mutant_seeds_run_each_mutant_that_many_times(tmp_path, monkeypatch):
    """--mutants 2: the mutant panel runs every mutant with 2 seeds (its table reads flagged / 2)."""
    from exactness import certify_run

    calls = {}

    def fake_run_mutants(*, seeds, **kw):
        calls["seeds"] = seeds
        return []

    monkeypatch.setattr(certify_run, "run_mutants", fake_run_mutants)
    out = tmp_path / "c.md"
    assert main(["certify", "--verifier", "rrs", "--k", "1", "--families", "zipf", "--n", "2000", "--mutants", "2",
                 "--no-progress", "--out", str(out)]) == 0
    assert calls == {"seeds": 2}


@pytest.mark.parametrize("old, new", [(["drift"], ["bench", "drift"]), (["families"], ["bench", "families"])])
def test_drift_and_families_are_bench_subjects_and_the_old_names_parse(old, new):
    a, b = parse(old + ["--nodes", "3"])[1], parse(new + ["--nodes", "3"])[1]
    assert a._kind == b._kind == new[1] and a.nodes == b.nodes == 3


def test_bench_drift_out_as_a_markdown_path_names_every_file(tmp_path, capsys):
    out = tmp_path / "sub" / "mine.md"
    assert main(["bench", "drift", "--V", "30", "--nodes", "2", "--k", "2", "--gammas", "0,1", "--proxies", "draft",
                 "--out", str(out)]) == 0
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == ["mine.json", "mine.md", "mine_gamma.png", "mine_steps.png"], names
    assert "mine_steps.png" in out.read_text()


def test_bench_trees_out_folder_or_markdown_path(tmp_path):
    base = ["bench", "--families", "zipf", "--temperatures", "1", "--shapes", "2,1", "--V", "30", "--nodes", "2",
            "--path-rules", "none", "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "a")]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["bench.json", "bench.md"]
    assert main(base + ["--out", str(tmp_path / "b" / "small.md")]) == 0
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["small.json", "small.md"]
    assert json.loads((tmp_path / "b" / "small.json").read_text())["rows"]


def test_removed_options_are_refused_not_ignored(capsys):
    """An option folded into another is an error naming it (never silently ignored)."""
    for argv in (["certify", "--json", "x.json"], ["certify", "--mutant-seeds", "2"], ["bench", "--stem", "x"],
                 ["bench", "gap", "--wor-k", "2"], ["bench", "gap", "--no-lp"], ["decode", "--gamma", "1"],
                 ["decode", "--fetch"], ["decode", "--no-stream"], ["audit", "--list"]):
        assert main(argv) == 2, argv
        assert "unrecognized arguments" in capsys.readouterr().err, argv


@pytest.mark.parametrize("lp_max_V, has_lp", [("0", False), ("12", True), ("11", False)])
def test_bench_gap_k_runs_both_sections_and_lp_max_V_gates_the_lp(tmp_path, lp_max_V, has_lp):
    out = tmp_path / "g.md"
    assert main(["bench", "gap", "--families", "zipf", "--temperatures", "1", "--k", "2", "--V", "12", "5", "--nodes", "1", "--small-nodes", "1", "--n", "50", "--lp-max-V", lp_max_V,
                 "--no-progress", "--out", str(out)]) == 0
    cells = json.loads(out.with_suffix(".json").read_text())["cells"]
    assert {c["section"] for c in cells} == {"iid", "wor", "wor_small"}
    assert {c["k"] for c in cells} == {2}
    iid = [c for c in cells if c["section"] == "iid"]
    assert all(("seq_opt" in c["bounds"]) == has_lp for c in iid), iid[0]["bounds"]


@pytest.mark.parametrize("old, new", [("--model", "--target"), ("--draft-model", "--draft"), ("--vocab", "--V")])
def test_audit_old_model_names_parse_as_the_shared_ones(old, new):
    value = "7" if new == "--V" else "x.gguf"
    a, b = parse(["audit", "transformers", old, value])[1], parse(["audit", "transformers", new, value])[1]
    assert vars(a) == vars(b)


def test_audit_settings_add_up_when_repeated_as_options_do():
    """--settings given twice ran only the last one (argparse's keep-the-last) while --options added up."""
    from resispec.commands.audit import _settings

    args = parse(["audit", "transformers", "--settings", "T=1", "--settings", "top_k=3;top_p=0.9"])[1]
    assert _settings(args.settings) == ["T=1", "top_k=3", "top_p=0.9"]


@pytest.mark.parametrize("argv, words", [
    (["audit", "transformers", "--n", "5"], "--n must be an integer >= 20"),
    (["bench", "--families", "zipf", "--path-rules", "block", "--n-trees", "1"], "--n-trees must be an integer >= 2"),
    (["certify", "--verifier", "rrs,sps"], "repeat the option, one name each"),
])
def test_a_refusal_names_the_flag_typed(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_audit_summary_takes_the_docs_page_as_its_second_value(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# x\n<!-- audit-summary -->\nold\n<!-- /audit-summary -->\nend\n")
    (tmp_path / "r").mkdir()
    assert main(["audit", "--summary", str(tmp_path / "r"), str(page)]) == 0
    text = page.read_text()
    assert "old" not in text and "| engine |" in text and text.endswith("end\n")
    assert main(["audit", "--summary", str(tmp_path / "r"), str(page), "x"]) == 2
    assert "at most one PAGE" in capsys.readouterr().err
