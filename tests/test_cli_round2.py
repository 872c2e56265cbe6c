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
    assert "--mutants must be a whole number in [0, 1000]" in capsys.readouterr().err


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
    base = ["bench", "--families", "zipf", "--temperatures", "1", "--trees", "2,1", "--V", "30", "--nodes", "2",
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
    assert main(["bench", "gap", "--families", "zipf", "--temperatures", "1", "--k", "2", "--V", "12", "5", "--nodes", "1", "1", "--n", "50", "--lp-max-V", lp_max_V,
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


def test_audit_summary_takes_the_docs_page_as_its_second_value(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("# x\n<!-- audit-summary -->\nold\n<!-- /audit-summary -->\nend\n")
    (tmp_path / "r").mkdir()
    assert main(["audit", "--summary", str(tmp_path / "r"), str(page)]) == 0
    text = page.read_text()
    assert "old" not in text and "| engine |" in text and text.endswith("end\n")
    assert main(["audit", "--summary", str(tmp_path / "r"), str(page), "x"]) == 2
    assert "at most one PAGE" in capsys.readouterr().err


# ---------------------------------------------------------------- the breaker's round on the new options


@pytest.mark.parametrize("argv, words", [
    (["certify", "--no-mutants", "1"], "--no-mutants takes no value (got 1)"),
    (["certify", "--mutants", "100000000"], "--mutants must be a whole number in [0, 1000]"),
    (["certify", "--out", "", "--verifier", "rrs"], "--out: needs a file path"),
    (["bench", "gap", "--lp-max-V", "-1"], "--lp-max-V must be >= 0"),
    (["bench", "accept", "--lp-max-V", "-5"], "--lp-max-V must be >= 0"),
    (["bench", "--out", ".md"], "names no file before .md"),
    (["bench", "drift", "--nodes", "0"], "--nodes must be >= 1"),
    (["decode", "--prompt", "hi", "--verifier", "resispec[gamma=nan]"], "gamma must be a real number >= 0"),
    (["decode", "--prompt", "hi", "--verifier", "resispec[gamma=0.5,gamma=1]"], "gives gamma twice"),
    (["decode", "--prompt", "hi", "--skip", "1"], "with --prompt TEXT give no --skip"),
    (["certify", "decoder", "--target", "x", "--draft", ""], "--draft is empty"),
    (["audit", "transformers", "--V", "0"], "--V must be >= 2"),
    (["audit", "transformers", "--V", "32", "--target", "x", "--prompts", "1,2"], "drop --V"),
    (["audit", "transformers", "--n", "5"], "--n must be an integer >= 20"),
    (["bench", "--families", "zipf", "--path-rules", "block", "--n", "1"], "--n must be >= 2"),
    (["certify", "--verifier", "rrs,sps"], "repeat the option, one name each"),
], ids=["no-mutants-1", "mutants-huge", "out-empty", "gap-lp", "accept-lp", "bench-out-md", "drift-nodes",
        "decode-gamma-nan", "decode-spec-twice", "decode-skip-prompt", "decoder-draft-empty", "audit-V0",
        "audit-V-target", "audit-n", "bench-n-path-rules", "certify-comma-names"])
def test_bad_input_on_the_new_options_is_exit_2_naming_it(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_a_prompt_file_skip_is_checked_before_the_models(tmp_path, capsys):
    """A wrong --skip on a prompt file said "run resispec models fetch" (a 1.5 GB download) before naming --skip."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("a\nb\n")
    assert main(["decode", "--prompts", str(prompts), "--skip", "5"]) == 2
    assert "--skip 5 leaves no prompt" in capsys.readouterr().err
    assert main(["bench", "decode", "--prompts", str(prompts), "--skip", "5", "--out", str(tmp_path / "b.md")]) == 2
    assert "--skip 5 leaves no prompts" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["folder", "file"])
def test_a_dangling_symbolic_link_in_out_is_refused_before_any_work(tmp_path, capsys, where):
    """It ran the whole certificate, then failed with a raw 'File exists' (a folder), or created the link's target's
    folders and split the report from its JSON (a file)."""
    if where == "folder":
        (tmp_path / "d").symlink_to(tmp_path / "none" / "dir")
        out = tmp_path / "d" / "r.md"
    else:
        out = tmp_path / "link.md"
        out.symlink_to(tmp_path / "tgt" / "sub" / "r.md")
    assert main(["certify", "--verifier", "rrs", "--k", "1", "--families", "zipf", "--n", "2000", "--out",
                 str(out)]) == 2
    assert "is a symbolic link to" in capsys.readouterr().err
    assert not (tmp_path / "tgt").exists() and not (tmp_path / "none").exists()


def test_bench_drift_out_takes_an_upper_case_md_as_a_file(tmp_path):
    assert main(["bench", "drift", "--V", "30", "--nodes", "2", "--k", "2", "--gammas", "0", "--proxies", "draft",
                 "--out", str(tmp_path / "y.MD")]) == 0
    assert (tmp_path / "y.md").is_file() and not (tmp_path / "y.MD").is_dir()


def test_every_bench_subject_takes_no_progress():
    """A script passing --no-progress to every bench subject was refused by bench drift and bench families."""
    for kind in ("trees", "accept", "decode", "drift", "families", "gap", "verify"):
        assert parse(["bench", kind, "--no-progress"])[1].no_progress is True, kind


def test_bench_gap_writes_no_empty_headline_or_monte_carlo_note(tmp_path):
    """--sections iid at k = 2 wrote an empty '## Headline' and a note on Monte Carlo WOR cells that never ran."""
    out = tmp_path / "g.md"
    assert main(["bench", "gap", "--sections", "iid", "--families", "zipf", "--temperatures", "1", "--k", "2",
                 "--V", "12", "--nodes", "1", "--no-progress", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Headline" not in text and "Monte Carlo WOR cells" not in text and "## iid drafts" in text


# ---------------------------------------------------------------- the second breaker's round


@pytest.mark.parametrize("argv, words", [
    (["audit", "--summary", ""], "--summary: an empty path"),
    (["audit", "vllm", "--summary", "."], "--summary runs nothing: drop the engine"),
    (["bench", "accept", "--V", "8", "8"], "--V lists '8' twice; give each item once"),
    (["bench", "gap", "--k", "3", "--V", "16", "2", "--sections", "wor_small"], "the small cases' V = 2"),
    (["certify", "decoder", "--decoder", "exactness.decoder_mutants:demo", "--prompt-ids", "0;1"],
     "drop --target/--prompt-ids"),
])
def test_second_breaker_bad_input_is_exit_2(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "audit.md").exists()


def test_audit_summary_page_cannot_be_the_summary_itself(tmp_path, capsys):
    (tmp_path / "audit.md").write_text("<!-- audit-summary -->\n<!-- /audit-summary -->\n")
    assert main(["audit", "--summary", str(tmp_path), str(tmp_path / "audit.md")]) == 2
    assert "which the summary itself writes" in capsys.readouterr().err


def test_prompt_ids_refuse_an_empty_row_and_add_up_when_repeated():
    from resispec.commands.certify_decoder import parse_prompts

    with pytest.raises(ValueError, match="give at least one prompt"):
        parse_prompts(" ")
    args = parse(["certify", "decoder", "--prompt-ids", "0,1", "--prompt-ids", "2,3"])[1]
    assert parse_prompts(args.prompts) == [[0, 1], [2, 3]]
    args = parse(["audit", "transformers", "--prompt-ids", "1,2", "--prompts", "3,4"])[1]
    assert args.prompts == "1,2;3,4"


def test_bench_gap_takes_equal_main_and_small_vocabularies():
    args = parse(["bench", "gap", "--V", "8", "8"])[1]
    assert args.V == [8, 8]
