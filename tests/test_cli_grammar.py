"""The CLI's grammar: one name for one thing across every subcommand (issue 39).

Old names survive only as aliases listed in ``LEGACY`` (a committed report or old command line still uses them);
no subcommand may register a legacy name as its primary option, and the concepts in ``CANONICAL`` are spelled
the same way wherever they appear.
"""

from __future__ import annotations

import argparse

from resispec.cli import build_parser
from resispec.commands._args import ListAction

#: legacy option string -> the canonical one it is an alias of
LEGACY = {"--T": "--temperatures", "--family": "--families"}
#: concept -> canonical option (a list of temperatures is --temperatures in bench, bench-accept, bench-gap, families)
CANONICAL = {"temperature list": "--temperatures", "family list": "--families"}


def _subparsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_no_primary_option_is_a_legacy_name():
    bad = []
    for name, sp in _subparsers().items():
        for action in sp._actions:
            longs = [o for o in action.option_strings if o.startswith("--")]
            if not longs:
                continue
            primary = longs[0]
            if primary in LEGACY and not (primary == "--family" and not isinstance(action, ListAction)):
                bad.append(f"resispec {name} {primary} (use {LEGACY[primary]})")
            for alias in longs[1:]:
                if alias in LEGACY:
                    assert LEGACY[alias] == primary, f"resispec {name}: {alias} aliases {primary}, not {LEGACY[alias]}"
    assert not bad, "legacy option names registered as primary: " + "; ".join(bad)


def test_lists_of_temperatures_and_families_have_one_name():
    for name, sp in _subparsers().items():
        for action in sp._actions:
            if not isinstance(action, ListAction):
                continue
            primary = next((o for o in action.option_strings if o.startswith("--")), None)
            if primary in ("--T", "--temperature"):
                raise AssertionError(f"resispec {name} {primary}: a list of temperatures is {CANONICAL['temperature list']}")
            if primary == "--family":
                raise AssertionError(f"resispec {name} --family: a list of families is {CANONICAL['family list']}")


def test_legacy_aliases_still_parse():
    parser = build_parser()
    a = parser.parse_args(["bench-gap", "--T", "0.7,1.5"])
    b = parser.parse_args(["bench-gap", "--temperatures", "0.7,1.5"])
    assert a.T == b.T == [0.7, 1.5]
    c = parser.parse_args(["certify", "--family", "zipf"])
    d = parser.parse_args(["certify", "--families", "zipf"])
    assert c.family == d.family == ["zipf"]
