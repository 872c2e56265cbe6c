"""One verb, several subjects (issue 39 item 2): ``resispec certify KIND`` and ``resispec bench KIND``."""

from __future__ import annotations

import pytest

from resispec import cli


def test_every_hyphenated_command_is_a_kind_of_its_verb():
    table = cli.verbs()
    assert set(table) == {"certify", "bench"}
    assert table["certify"] == {"verifiers": "certify", "coupled": "certify-coupled", "decoder": "certify-decoder",
                                "stepwise": "certify-stepwise"}
    assert set(table["bench"]) == {"trees", "accept", "decode", "drift", "families", "gap", "verify"}
    choices = cli.build_parser()._subparsers._group_actions[0].choices
    assert not {name for kinds in table.values() for name in kinds.values()} - set(table) & set(choices)
    for verb, kinds in table.items():
        for kind, name in kinds.items():
            assert cli.split_verb([verb, kind, "--help"]) == (verb, kind, f"{verb} {kind}", ["--help"])
            assert cli.split_verb([name, "--n", "5"])[:2] == (verb, kind)        # the hyphenated spelling
            parser, args = cli.parse([verb, kind] + (["--verifier", "m:k"] if kind == "coupled" else []))
            assert args.command == f"{verb} {kind}" and args._kind == kind


def test_split_verb_leaves_everything_else_alone():
    assert cli.split_verb(["certify", "--n", "100"]) == ("certify", "verifiers", "certify", ["--n", "100"])
    assert cli.split_verb(["audit", "vllm"]) == (None, None, None, ["audit", "vllm"])
    assert cli.split_verb([]) == (None, None, None, [])
    with pytest.raises(ValueError, match="unknown subject 'bogus'"):
        cli.split_verb(["certify", "bogus"])


def test_help_lists_verbs_and_their_subjects(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "certify-decoder" not in out and "bench-verify" not in out
    assert "[subjects: verifiers, coupled, decoder, stepwise]" in " ".join(out.split())
    assert cli.main(["certify", "--help"]) == 0
    out = capsys.readouterr().out
    assert "decoder    certify a whole speculative decoder" in out


@pytest.mark.parametrize("argv,who", [(["certify", "stepwise", "--n", "-5"], "resispec certify stepwise"),
                                      (["certify-stepwise", "--n", "-5"], "resispec certify-stepwise")])
def test_both_spellings_run_the_same_command(argv, who, capsys):
    """The message names the command as it was typed, and the flag (was "n must be >= 1", an internal name)."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"{who}: error: --n must be a whole number >= 1 (a count), got -5"


def test_a_count_below_one_is_refused_for_every_command(capsys):
    from resispec.commands._args import count

    from resispec.commands._verb import VerbParser

    parser = cli.build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        for kind in (sub.kinds if isinstance(sub, VerbParser) else [None]):
            actions = sub.kind_actions(kind) if kind else sub._actions
            required = ([a for d in sub.kind_required[kind] for a in (sub._flag(d), "x")] if kind else
                        [a for x in sub._actions if x.required and x.option_strings for a in (x.option_strings[0], "x")])
            for action in actions:
                if action.type is count:
                    flag = action.option_strings[0]
                    argv = [name, *([kind] if kind else []), *required, flag, "0"]
                    assert cli.main(argv) == 2, argv
                    assert capsys.readouterr().err.strip().endswith(f"{flag} must be a whole number >= 1 (a count), "
                                                                    "got 0"), argv


def test_an_unknown_subject_is_named_with_the_choices(capsys):
    assert cli.main(["certify", "bogus"]) == 2
    assert capsys.readouterr().err.strip() == ("resispec certify: error: unknown subject 'bogus'; choose one of "
                                               "verifiers, coupled, decoder, stepwise (resispec certify --help)")
    assert cli.main(["bench", "verify", "--B", "0"]) == 2
    assert capsys.readouterr().err.startswith("resispec bench verify: error:")
    assert cli.main(["certify", "verifiers", "--n", "0"]) == 2
    assert capsys.readouterr().err.startswith("resispec certify verifiers: error: --n")


def test_help_examples_use_the_verbs():
    """The examples in every subcommand's --help are the form the top-level help lists."""
    from resispec.commands._verb import VerbParser

    parser = cli.build_parser()
    helps = []
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        for kind in (sub.kinds if isinstance(sub, VerbParser) else [None]):
            if kind:
                sub.select(kind)
            helps.append((f"{name} {kind or ''}", sub.format_help()))
    for name, text in helps:
        for hyphenated in ("certify-coupled", "certify-decoder", "certify-stepwise", "bench-accept", "bench-gap",
                           "bench-verify", "bench-decode"):
            assert f"resispec {hyphenated}" not in text, (name, hyphenated)


@pytest.mark.parametrize("argv,flag", [(["bench", "verify", "--B", "4", "0"], "--B"),
                                       (["bench", "verify", "--B", "0"], "--B"),
                                       (["certify", "stepwise", "--time-limit", "0.5"], "--time-limit"),
                                       (["bench", "gap", "--V", "0"], "--V"),
                                       (["bench", "accept", "--k", "0"], "--k")])
def test_a_refusal_names_the_flag_not_the_parameter(argv, flag, capsys):
    """The libraries name their parameters (numpy_B, time_limit); the user typed a flag (breaker, issue 39)."""
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"resispec {argv[0]} {argv[1]}: error: {flag} "), err
    assert len(err.splitlines()) == 1
