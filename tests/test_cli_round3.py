"""Issue 39, the CLI's third round: merged options keep every refusal, and the new user's and the breaker's findings
(a shared option that took different values per subject, an explicit argument ignored with exit 0, an error naming
no option or the wrong one) stay fixed.  Every case is the caller's input: exit 2, one line naming the option."""

from __future__ import annotations


import pytest

from resispec.cli import main, parse


def _err(argv, capsys) -> str:
    assert main(argv) == 2, argv
    return capsys.readouterr().err.strip().splitlines()[-1]


# --- one --time-limit for every certify subject: 0 = no limit, else [1, 5e6] seconds -------------------------

@pytest.mark.parametrize("subject", [
    ["certify", "--verifier", "rrs", "--k", "1", "--families", "zipf", "--n", "500", "--mutants", "0"],
    ["certify", "coupled", "--verifier", "rrs", "--V", "8", "--n", "500"],
    ["certify", "stepwise", "--k", "2", "--V", "8", "--n", "200"],
    ["certify", "decoder", "--decoder", "nosuch_r3c:make"]])
@pytest.mark.parametrize("value", ["0.5", "-1", "6e6"])
def test_every_certify_subject_takes_the_same_time_limits(subject, value, capsys, tmp_path):
    out = ["--out", str(tmp_path / "o.md")] if subject[1] != "stepwise" else []
    err = _err(subject + out + ["--time-limit", value], capsys)
    assert "--time-limit must be 0 (no limit) or a number of seconds in [1, 5e6]" in err, err
    assert not list(tmp_path.iterdir())


def test_a_time_limit_of_zero_is_no_limit_for_coupled_and_stepwise(capsys):
    assert main(["certify", "coupled", "--verifier", "rrs", "--V", "8", "--n", "500", "--time-limit", "0",
                 "--no-progress"]) == 0
    assert main(["certify", "stepwise", "--k", "2", "--V", "8", "--n", "200", "--time-limit", "0",
                 "--no-progress"]) == 0


# --- --executor KIND[address=...] -------------------------------------------------------------------------

@pytest.mark.parametrize("spec, words", [("ray[address=None]", "address must be HOST:PORT"),
                                         ("ray[address=6379]", "address must be HOST:PORT"),
                                         ("process[]", "empty options; write process alone"),
                                         ("ray[,]", "empty options"),
                                         ("ray[address=h:\u00b2]", "--executor 'ray[address=h:\u00b2]': address")])
def test_executor_specs_that_name_no_address_are_refused(spec, words, capsys, tmp_path):
    err = _err(["certify", "--verifier", "rrs", "--k", "1", "--families", "zipf", "--n", "500", "--mutants", "0",
                "--out", str(tmp_path / "c.md"), "--executor", spec], capsys)
    assert words in err and not list(tmp_path.iterdir()), err


# --- bench verify --backends ------------------------------------------------------------------------------

def test_backends_split_at_commas_outside_brackets_and_keep_the_old_spelling():
    from resispec.commands.bench_verify import backends_and_solvers

    def backends(*argv):
        return backends_and_solvers(parse(["bench", "verify", *argv])[1].backends)

    assert backends("--backends", "torch[solver=newton],numpy") == (["torch", "numpy"], ["newton"])
    assert backends("--backends", "torch", "--torch-solvers", "auto,newton") == (["torch"], ["auto", "newton"])
    assert backends("--torch-solvers", "newton") == (["numpy", "torch"], ["auto", "newton"])   # as it meant before
    assert backends() == (["numpy", "torch"], ["auto"])


@pytest.mark.parametrize("argv, words", [
    (["--backends", "torch[solver=newton,x=1]"], "torch takes one option, solver (torch[solver=newton]), not x"),
    (["--backends", "torch[solvr=newton]"], "not solvr"),
    (["--backends", "torch[solver=bogus]"], "solver must be one of auto, fused, newton, sort"),
    (["--backends", "numpy", "--device", "meta"], "--device meta set the torch backend, which --backends leaves out")])
def test_bench_verify_refuses_backends_it_would_ignore_or_misread(argv, words, capsys, tmp_path):
    err = _err(["bench", "verify", "--out", str(tmp_path / "b.md"), *argv], capsys)
    assert words in err and not list(tmp_path.iterdir()), err


# --- bench trees, gap -------------------------------------------------------------------------------------

def test_bench_names_the_option_of_a_bad_tree_and_refuses_options_from_json_would_ignore(capsys, tmp_path):
    assert _err(["bench", "--trees", "2,0", "--out", str(tmp_path)], capsys).endswith(
        "--trees 2,0: branching factor at depth 1 is 0; every depth needs >= 1 child")
    js = tmp_path / "b.json"
    js.write_text("{}")
    assert "--from-json re-renders a finished run's report and takes only --out; drop --V --n" in _err(
        ["bench", "--from-json", str(js), "--n", "7", "--V", "99", "--out", str(tmp_path / "o")], capsys)
    assert "--temperatures must be finite" in _err(["bench", "--temperatures", "0", "--out", str(tmp_path / "o")],
                                                  capsys)
    assert "not enough memory for the sizes asked" in _err(
        ["bench", "--families", "zipf", "--trees", "2", "--temperatures", "1", "--nodes", "1", "--n", "1e19",
         "--no-progress", "--out", str(tmp_path / "o")], capsys)
    assert not (tmp_path / "o").exists()


def test_bench_gap_refuses_small_case_values_its_sections_leave_out(capsys, tmp_path):
    err = _err(["bench", "gap", "--families", "zipf", "--k", "2", "--V", "16", "4", "--nodes", "1", "2",
                "--sections", "iid", "--out", str(tmp_path / "g.md")], capsys)
    assert "--V's second value and --nodes's second value set the small WOR cases, which --sections iid" in err


def test_bench_gap_headline_names_the_k_it_averages(capsys, tmp_path):
    """The headline said 'k in {4, 8}' for a run at k = 2, 4 (only k = 4 was in it); no bar is drawn off a
    terminal (tqdm's carriage returns filled CI logs)."""
    out = tmp_path / "g.md"
    assert main(["bench", "gap", "--families", "zipf", "--temperatures", "1", "--k", "2,4", "--V", "16",
                 "--nodes", "1", "--sections", "iid", "--lp-max-V", "0", "--out", str(out)]) == 0
    text = out.read_text()
    assert "- iid, k in {4}:" in text and "small WOR cases" not in text
    assert "bench-gap" not in capsys.readouterr().err


# --- names: as typed, the option of the kind, a close match ------------------------------------------------

def test_errors_name_the_option_as_typed_and_suggest_a_close_one(capsys, tmp_path):
    assert "argument --shapes: lists '1,1' twice" in _err(["bench", "--shapes", "1,1", "1,1"], capsys)
    assert "argument --trees: lists '1,1' twice" in _err(["bench", "--trees", "1,1", "1,1"], capsys)
    assert "unrecognized arguments: --trees 4,2; did you mean --tree?" in _err(["decode", "--trees", "4,2"], capsys)
    assert "did you mean --nodes?" in _err(["bench", "gap", "--small-nodes", "3"], capsys)


def test_from_json_names_the_options_by_their_names_not_their_dests():
    from resispec.commands import bench_decode
    from resispec.commands._verb import given_options, parse_kind

    args = parse_kind(bench_decode, ["--new-tokens", "5", "--scores", "none"])
    assert given_options(bench_decode, args) == ["--new-tokens", "--scores"]


def test_coupled_and_stepwise_take_no_progress_as_every_certify_subject_does():
    for kind in ("coupled", "stepwise"):
        argv = ["certify", kind, "--no-progress"] + (["--verifier", "rrs"] if kind == "coupled" else [])
        assert parse(argv)[1].no_progress is True


# --- models, decode, certify decoder: an argument the command would ignore --------------------------------

@pytest.mark.parametrize("argv, words", [
    (["models", "list", "--force"], "--force does nothing for `resispec models list`"),
    (["models", "list", "nope"], "`resispec models list` lists every built-in model and takes no names"),
    (["models", "path", "--no-convert"], "--no-convert does nothing for `resispec models path`"),
    (["decode", "--prompt", "hi", "--prompts", "/nonexistent_r3.jsonl"], "--prompt TEXT is the prompt; --prompts"),
    (["decode", "--prompt", "hi", "--tree", "wor:2,1", "--drafting", "iid"], "drafts without replacement and "
                                                                              "--drafting iid says otherwise"),
    (["decode", "--prompt", "hi", "--verifier", "autoregressive", "--tree", "2,1"], "autoregressive decodes the "
                                                                                    "target alone"),
    (["certify", "decoder", "--target", "/nonexistent_r3", "--prompt", "hi", "--prompt-ids", "0,1"],
     "give the prompts once")])
def test_arguments_a_command_would_ignore_are_refused(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert words in _err(argv, capsys)


# --- certify coupled plans its draws from a TV bound, as every route with a Budget ----------------------------

def test_coupled_plans_its_draws_from_tv_in_the_library_the_front_door_and_the_cli(capsys):
    import math

    import numpy as np

    import exactness
    from exactness import Budget
    from exactness.coupled.certify import draws_for_tv
    from resispec import get_verifier

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    n = math.ceil(math.log(1e3) / 1e-3)                 # n = ceil(ln(1/alpha) / tv): 6,908
    assert draws_for_tv(1e-3, 1e-3) == n == 6908
    cert = exactness.certify_coupled("rrs", "rrs", p, q, 2, tv=1e-3)
    assert cert.passed and cert.n == n and cert.tv_upper <= 1e-3
    front = exactness.certify(get_verifier("rrs"), reference="rrs", p=p, q=q, k=2, budget=Budget(tv=1e-3))
    assert front.n == n and front.passed
    with pytest.raises(ValueError, match="give n or tv, not both"):
        exactness.certify_coupled("rrs", "rrs", p, q, 2, n=100, tv=1e-3)
    assert main(["certify", "coupled", "--verifier", "rrs", "--V", "20", "--tv", "1e-3"]) == 0
    assert "0 mismatches in 6,908 coupled draws" in capsys.readouterr().out
    assert "--tv must be a number in (0, 1)" in _err(["certify", "coupled", "--verifier", "rrs", "--tv", "2"], capsys)
    assert "give --n or --tv, not both" in _err(["certify", "coupled", "--verifier", "rrs", "--tv", "0.1", "--n", "5"],
                                                capsys)


# --- breaker, round 2: levels and bounds at the edge of float64 -----------------------------------------------

@pytest.mark.parametrize("argv", [
    ["certify", "--verifier", "rrs", "--families", "zipf", "--k", "1", "--n", "50", "--mutants", "0", "--alpha", "5e-324"],
    ["certify", "coupled", "--verifier", "rrs", "--V", "5", "--tv", "0.1", "--alpha", "1e-17"],
    ["certify", "stepwise", "--tv", "0.1", "--alpha", "1e-300"],
    ["certify", "decoder", "--decoder", "exactness.decoder_mutants:demo", "--alpha", "1e-300"]])
def test_a_level_below_float64_resolution_is_the_callers_error(argv, capsys, tmp_path):
    """--alpha 5e-324 FAILed the exact rrs (Holm's alpha / m underflowed to 0 inside a check), --alpha 1e-17 made a
    coupled pass say TV <= 1 at confidence 1."""
    out = [] if argv[1] == "stepwise" else ["--out", str(tmp_path / "o.md")]
    assert "--alpha must lie in (0, 1) and be at least 1e-12" in _err(argv + out, capsys)
    assert not list(tmp_path.iterdir())


def test_plans_from_a_tv_near_zero_are_refused_not_crashed(capsys, tmp_path):
    """--tv 5e-324 overflowed ceil(ln(1/alpha) / tv) (coupled) and the decoder's pooling (a traceback, exit 1)."""
    assert "needs inf coupled draws, over exactness.limits.MAX_COUNTED" in _err(
        ["certify", "coupled", "--verifier", "rrs", "--V", "5", "--tv", "5e-324"], capsys)
    assert "needs about 10^601 continuations per prompt, over exactness.decoder.MAX_DECODER_TOKENS" in _err(
        ["certify", "decoder", "--decoder", "exactness.decoder_mutants:demo", "--new-tokens", "1", "--tv", "1e-300",
         "--out", str(tmp_path / "d.md")], capsys)
    assert not list(tmp_path.iterdir())


def test_a_coupled_tv_above_what_few_draws_bound_plans_the_fewest_meaningful_draws(capsys):
    from exactness.coupled.certify import draws_for_tv, tv_upper_bound

    assert draws_for_tv(0.999, 1e-3) == 10                 # ceil(ln(1/alpha) / ln 2): 0 mismatches bound TV by 0.5
    assert tv_upper_bound(0, 10, 1e-3) <= 0.5
    assert tv_upper_bound(0, 392, 1e-16) == pytest.approx(1 - 1e-16 ** (1 / 392), rel=1e-9)   # not 1.0
    assert main(["certify", "coupled", "--verifier", "rrs", "--V", "5", "--tv", "0.999"]) == 0


def test_a_close_option_is_suggested_by_its_prefix_first(capsys):
    assert "did you mean --temperature?" in _err(["decode", "--temp", "0.5"], capsys)
    assert "did you mean --temperatures?" in _err(["bench", "--temp", "1"], capsys)


def test_named_path_rules_must_decide_a_tree_and_decoder_inputs_are_checked_before_any_model(capsys, tmp_path):
    """--path-rules block on --trees 2,1 ran without a block row (exit 0); certify decoder --target checked its
    --prompt-ids and --tv only after loading the model."""
    assert "--path-rules block: decides none of --trees 2,1" in _err(
        ["bench", "--families", "zipf", "--trees", "2,1", "--path-rules", "block", "--out", str(tmp_path)], capsys)
    base = ["certify", "decoder", "--target", str(tmp_path / "no_model"), "--out", str(tmp_path / "d.md")]
    assert "--prompt-ids 'a,b': token ids must be integers" in _err(base + ["--prompt-ids", "a,b"], capsys)
    assert "--tv must lie in (0, 1]" in _err(base + ["--prompt", "hi", "--tv", "0"], capsys)
    assert "--prompt: an empty prompt" in _err(base + ["--prompt", ""], capsys)


def test_decode_refuses_a_tree_past_the_node_limit_before_any_model(capsys, tmp_path):
    assert "--tree 100000: 100,000 nodes, over MAX_TREE_NODES" in _err(
        ["decode", "--tree", "100000", "--target", str(tmp_path / "no_model")], capsys)
