"""The exit-code contract (docs/certify.md#exit-codes) for EVERY command, one class of outcome per row.

0 no bias detected / the command ran; 1 bias found or the subject misbehaved (raises, wrong shape, token outside
V, accepted index that does not name its candidate), named as the cause; 2 only the caller's malformed
arguments; 3 inconclusive.  The per-route detail (hangs, impossible tokens, decoders, coupled references) is
in tests/test_verdicts_*.py; this file pins the contract itself across the whole command set.
"""

from __future__ import annotations

import pytest

from resispec.cli import _discover, main

COMMANDS = sorted(m.NAME for m in _discover())
VERDICT_COMMANDS = ("certify", "certify-coupled", "certify-decoder", "certify-stepwise")

NODE = ["--family", "zipf", "--k", "1", "--samples", "2000", "--no-mutants", "--no-progress"]

SUBJECTS = '''
import numpy as np
import resispec

RRS = resispec.get_verifier("rrs")


class Exact:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return RRS.verify(p, q, candidates, rng)


class Raises:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        raise ZeroDivisionError("boom in verify")


class WrongShape:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        r = RRS.verify(p, q, candidates, rng)
        return resispec.VerifyResult(r.tokens[:1], r.accepted[:1])


class OutsideV:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        r = RRS.verify(p, q, candidates, rng)
        return resispec.VerifyResult(r.tokens + np.asarray(p).shape[1], r.accepted)


class AcceptFlag:
    """Right tokens, but ``accepted`` is a 0/1 flag, not the index of the emitted candidate."""
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        r = RRS.verify(p, q, candidates, rng)
        return resispec.VerifyResult(r.tokens, np.where(r.accepted >= 0, 1, -1))
'''


def test_every_command_is_in_this_file():
    assert set(VERDICT_COMMANDS) <= set(COMMANDS)
    assert len(COMMANDS) >= 10      # discovered, not listed by hand


@pytest.mark.parametrize("command", COMMANDS)
def test_help_exits_0(command, capsys):
    assert main([command, "--help"]) == 0
    assert command in capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_exits_2(command, capsys):
    assert main([command, "--no-such-option-37"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_no_command_exits_2(capsys):
    assert main([]) == 2


@pytest.mark.parametrize("obj, rc, says", [
    ("Exact", 0, "NO BIAS DETECTED"),
    ("Raises", 1, "ZeroDivisionError"),
    ("WrongShape", 1, "shape"),
    ("OutsideV", 1, "outside"),
    ("AcceptFlag", 1, "accepted"),
    ("exactness.mutants:CATALOGUE.residual_is_p", 1, "FAIL"),
])
def test_certify_classes_of_outcome(user_dir, capsys, obj, rc, says):
    (user_dir / "subjects37.py").write_text(SUBJECTS)
    spec = obj if ":" in obj else f"subjects37:{obj}"
    assert main(["certify", "--verifier", spec, *NODE, "--out", str(user_dir / "c.md")]) == rc
    out = capsys.readouterr()
    assert says in out.out + (user_dir / "c.md").read_text()
    assert "Traceback" not in out.err


def test_certify_bad_arguments_exit_2_and_write_nothing(user_dir, capsys):
    for argv in (["--k", "0"], ["--samples", "-5"], ["--verifier", "no_such_module_37:X"], ["--alpha", "2"]):
        assert main(["certify", *NODE, *argv, "--out", str(user_dir / "c.md")]) == 2, argv
        assert capsys.readouterr().err.strip().startswith("resispec certify: error:"), argv
    assert not (user_dir / "c.md").exists()


def test_certify_coupled_classes_of_outcome(user_dir, capsys):
    (user_dir / "subjects37.py").write_text(SUBJECTS)
    small = ["--k", "2", "--V", "20", "--n", "2000"]
    assert main(["certify-coupled", "--verifier", "rrs", "--reference", "rrs", *small]) == 0
    assert main(["certify-coupled", "--verifier", "exactness.mutants:CATALOGUE.residual_is_p", "--reference", "rrs",
                 *small]) == 1
    assert main(["certify-coupled", "--verifier", "subjects37:Raises", "--reference", "rrs", *small]) == 1
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert main(["certify-coupled", "--verifier", "rrs", "--reference", "rrs", "--k", "0", "--V", "20"]) == 2


def test_certify_stepwise_classes_of_outcome(capsys):
    small = ["--k", "3", "--V", "8", "--n", "300"]
    assert main(["certify-stepwise", *small]) == 0
    assert main(["certify-stepwise", "--k", "3", "--V", "8", "--n", "0"]) == 2


def test_the_contract_is_documented_once():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "certify.md").read_text()
    assert doc.count("## Exit codes") == 1
    section = doc.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for cmd in VERDICT_COMMANDS:
        spaced = cmd.replace("-", " ", 1)                 # the docs name the verbs as typed: `certify coupled`
        assert f"`{spaced}`" in section or (cmd == "certify" and "`resispec certify`" in section), cmd
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert code in section
