"""The CLI's grammar (issue 39), checked over every option of every subcommand:

- one name for one thing: a primary option name is a list everywhere or a value everywhere; a count of Monte Carlo
  draws (or continuations) is ``--n``, a count of (p, q) pairs or nodes is ``--nodes``;
- singular for a value, plural for a list: a list option's primary name is plural (math symbols such as ``--k``
  and ``--V`` excepted: one or several values of the symbol), and where both spellings exist (``--temperature``,
  ``--temperatures``) the singular takes one value;
- old names survive only as aliases listed in ``LEGACY`` (a committed report's command line still uses them), never
  as a primary name;
- a verb's kinds share ONE option set (``resispec.commands._verb``): a name they both take is one option with one
  meaning (building the parser refuses a kind that declares it differently), and a kind refuses another's option.

docs/certify.md, "Option grammar", states the same rules.
"""

from __future__ import annotations

import argparse
import re

import pytest

from resispec.cli import build_parser, main, parse
from resispec.commands._args import ListAction

#: legacy option string -> the primary option it aliases (kept for the committed reports' command lines)
LEGACY = {"--T": "--temperatures", "--family": "--families", "--samples": "--n", "--proxy": "--proxies",
          "--score": "--scores", "--n-samples": "--n", "--mc-samples": "--n", "--no-mutants": "--mutants",
          "--model": "--target", "--draft-model": "--draft", "--vocab": "--V", "--prompts": "--prompt-ids",
          "--shapes": "--trees", "--timeout": "--time-limit", "--max-new-tokens": "--new-tokens",
          "--torch-solvers": "--backends"}
#: math symbols: one or several values under the symbol's own name
SYMBOLS = {"--k", "--V", "--B"}
#: names no primary option may have: the concept has a canonical name
NOT_PRIMARY = {"--samples": "--n", "--n-samples": "--n", "--mc-samples": "--n", "--draws": "--n", "--pairs": "--nodes",
               "--T": "--temperatures"}


def _options():
    """``[(subcommand, primary, aliases, action)]`` for every long option of every subcommand."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, sp in sub.choices.items():
        for action in sp._actions:
            longs = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            if longs:
                out.append((name, longs[0], longs[1:], action))
    return out


OPTIONS = _options()


def test_the_scan_sees_every_subcommand():
    assert {s for s, *_ in OPTIONS} >= {"certify", "bench", "audit", "decode", "models"}
    assert len(OPTIONS) > 100


def test_a_verbs_kinds_share_one_option_set():
    from resispec.commands._verb import VerbParser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    verbs = {name: sp for name, sp in sub.choices.items() if isinstance(sp, VerbParser)}
    assert set(verbs) == {"certify", "bench"}
    for sp in verbs.values():
        flags = [a.option_strings[0] for a in sp._actions if a.option_strings]
        assert len(flags) == len(set(flags))                       # each name once in the verb
    shared = {a.option_strings[0] for a in verbs["certify"]._actions if len(verbs["certify"].owners.get(a.dest, ())) == 4}
    assert {"--n", "--seed", "--alpha"} <= shared


def test_a_kind_declaring_a_shared_name_differently_is_refused_when_the_parser_is_built():
    import types

    from resispec.commands._verb import VerbParser

    def kind(declare):
        return types.SimpleNamespace(add_arguments=declare, run=lambda a: 0, HELP="x", __doc__="x")

    a = kind(lambda p: p.add_argument("--k", type=int, default=2))
    b = kind(lambda p: p.add_argument("--k", action=ListAction, item_type=int))
    with pytest.raises(ValueError, match="--k differs from the option of the same name in a .*one name, one meaning"):
        VerbParser(prog="resispec v", kinds={"a": a, "b": b})
    same = kind(lambda p: p.add_argument("--k", type=int, default=4, help="four"))
    vp = VerbParser(prog="resispec v", kinds={"a": a, "same": same})
    vp.select("same")
    assert vp.finish(vp.parse_args([])).k == 4 and vp.finish(vp.parse_args(["--k", "3"])).k == 3
    vp.select("a")
    assert vp.finish(vp.parse_args([])).k == 2


@pytest.mark.parametrize("argv, flag, owners", [
    (["certify", "decoder", "--verifier", "m:k"], "--verifier", "verifiers, coupled, stepwise"),
    (["certify", "--decoder", "m:f"], "--decoder", "decoder"),
    (["certify", "stepwise", "--mutants"], "--mutants", "verifiers"),
    (["bench", "verify", "--trees", "2,1"], "--trees", "trees, decode"),
    (["bench", "gap", "--target", "x"], "--target", "decode")])
def test_another_kinds_option_is_refused_naming_its_kinds(argv, flag, owners, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{flag} is not an option of `{argv[0]} {argv[1] if not argv[1].startswith('-') else 'verifiers'}`" in err
    assert f"it belongs to {owners}" in err


def test_a_kinds_help_shows_its_own_options_with_its_own_defaults(capsys):
    assert main(["certify", "coupled", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--verifier" in out and "--decoder" not in out and "--mutants" not in out and "default 2" in out
    assert main(["bench", "gap", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--nodes N [N ...]" in out and "--trees" not in out and "SUPPRESS" not in out


def test_no_primary_option_has_a_retired_name():
    bad = [f"resispec {s} {p} (use {NOT_PRIMARY[p]})" for s, p, _, _ in OPTIONS if p in NOT_PRIMARY]
    assert not bad, "retired names registered as primary: " + "; ".join(bad)


def test_every_alias_is_a_listed_legacy_name_of_its_primary():
    bad = [f"resispec {s} {a} aliases {p}" for s, p, aliases, _ in OPTIONS for a in aliases if LEGACY.get(a) != p]
    assert not bad, "aliases not in LEGACY (or of another primary): " + "; ".join(bad)


def test_a_name_is_a_list_everywhere_or_a_value_everywhere():
    kinds: dict = {}
    for s, p, _, action in OPTIONS:
        if p not in SYMBOLS:
            kinds.setdefault(p, {}).setdefault(isinstance(action, ListAction), []).append(s)
    mixed = {p: k for p, k in kinds.items() if len(k) > 1}
    assert not mixed, f"options that are a list in some subcommands and a value in others: {mixed}"


@pytest.mark.parametrize("sub, primary, action", [(s, p, a) for s, p, _, a in OPTIONS if isinstance(a, ListAction)],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_a_list_has_a_plural_name(sub, primary, action):
    assert primary in SYMBOLS or primary.endswith("s"), f"resispec {sub} {primary} is a list: name it in the plural"


def test_the_singular_is_a_value_and_the_plural_a_list_where_both_exist():
    """--temperature / --temperatures, --verifier / --verifiers, --seed / --seeds, --family / --families, --proxy /
    --proxies: wherever both spellings are primary names, the singular takes one value and the plural a list."""
    kind = {}
    for s, p, _, action in OPTIONS:
        kind.setdefault(p, set()).add(isinstance(action, ListAction))
    plural = {p: p + "s" for p in kind} | {p: p[:-1] + "ies" for p in kind if p.endswith("y")}
    # --prompts names one prompt set (a file, or rows in one ';'-separated string), beside --prompt (one prompt)
    pairs = [(one, many) for one, many in plural.items() if many in kind and many != "--prompts"]
    assert len(pairs) >= 3, pairs
    for one, many in pairs:
        assert kind[one] == {False} and kind[many] == {True}, (one, kind[one], many, kind[many])


def test_draw_counts_are_n_and_pair_counts_are_nodes():
    for s, p, _, action in OPTIONS:
        text = (action.help or "").lower()
        if p == "--n":
            assert re.search(r"draw|continuation|sample|tuple", text), (s, text)
        if p == "--nodes":
            assert re.search(r"pair|node", text), (s, text)
        if re.search(r"\b(pairs|nodes) per\b|number of \(p, q\) pairs", text):
            assert p != "--n", f"resispec {s} --n: a count of pairs / nodes is --nodes, --n counts draws"


def test_legacy_aliases_still_parse_to_the_same_value():
    for old, new, dest in (
            (["bench-gap", "--T", "0.7,1.5"], ["bench", "gap", "--temperatures", "0.7,1.5"], "temperatures"),
            (["certify", "--family", "zipf"], ["certify", "--families", "zipf"], "family"),
            (["certify", "--samples", "2e5"], ["certify", "--n", "2e5"], "samples"),
            (["certify-decoder", "--decoder", "m:f", "--samples", "300"],
             ["certify-decoder", "--decoder", "m:f", "--n", "300"], "samples"),
            (["certify", "--proxy", "draft"], ["certify", "--proxies", "draft"], "proxy"),
            (["bench", "--n-samples", "64"], ["bench", "--n", "64"], "samples"),
            (["bench-accept", "--mc-samples", "64"], ["bench", "accept", "--n", "64"], "samples"),
            (["bench-decode", "--score", "all"], ["bench", "decode", "--scores", "all"], "score")):
        assert getattr(parse(old)[1], dest) == getattr(parse(new)[1], dest)


def test_no_option_is_reached_by_an_abbreviation():
    """argparse's prefix matching made `families --n 2` mean --nodes and `--temperature` mean --temperatures."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert parser.allow_abbrev is False and all(sp.allow_abbrev is False for sp in sub.choices.values())
    with pytest.raises(SystemExit):
        parser.parse_args(["families", "--n", "2"])


def test_n_takes_a_count_in_every_form_everywhere():
    from resispec.commands._args import count

    for s, p, _, action in OPTIONS:
        if p == "--n":
            assert action.type is count, f"resispec {s} --n: type count (accepts 2e5, 200_000)"
            assert action.metavar == "N", f"resispec {s} --n: metavar N"


def test_a_count_past_any_limit_is_refused_with_exit_2(capsys):
    from resispec.cli import main

    assert main(["certify-stepwise", "--n", "1e400"]) == 2
    assert "MAX_COUNTED" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["certify", "coupled", "--verifier", "rrs", "--k", "2,4"], "--k takes one value for certify coupled, got 2"),
    (["certify", "stepwise", "--verifier", "rrs", "--verifier", "kseq"], "--verifier takes one value for certify "
                                                                        "stepwise"),
    (["certify", "stepwise", "--n", "100", "--tv", "0.1"], "give --n or --tv, not both"),
    (["bench", "gap", "--V", "10,20,30"], "--V takes one or two values for bench gap"),
    (["bench", "trees", "--V", "10,20"], "--V takes one value for bench trees"),
    (["bench", "verify", "--dtype", "float16"], "--dtype float16 is not taken by bench verify"),
    (["certify", "--no-mutants", "3"], "--no-mutants takes no value (got 3); give --mutants N instead")])
def test_a_shared_option_a_kind_takes_once_or_in_part_is_refused(argv, message, capsys):
    """A verb's shared list options (--k, --V, --verifier) take one value for a kind that needs one, a shared
    --dtype only the values the kind takes, and exclusive options stay exclusive: each refused in one line, exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
