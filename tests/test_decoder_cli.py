"""resispec certify-decoder: factory or decoder + target + prompts; reports; exit 0 / 1 / 2."""

import json
import textwrap

import pytest

from resispec.cli import main

MOD = textwrap.dedent("""
    import numpy as np
    from exactness.decoder_mutants import demo

    def good():
        return demo(V=4, name="token_chain")

    def bad():
        return demo(V=4, name="argmax_draft_raw_q")

    DEC, TARGET, _ = demo(V=4, name="block_chain")

    def broken():
        raise RuntimeError("no model file")
""")


@pytest.fixture()
def mod(tmp_path, monkeypatch):
    (tmp_path / "mydec.py").write_text(MOD)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_factory_passes_and_writes_reports(mod, capsys):
    assert main(["certify-decoder", "--decoder", "mydec:good", "--samples", "3000", "--out", "r/c.md"]) == 0
    out = capsys.readouterr().out
    assert "joint" in out and "pit[2,ratio]" in out and "NO BIAS DETECTED" in out
    data = json.loads((mod / "r" / "c.json").read_text())
    assert data["passed"] is True and "joint" in data["checks"]
    assert "| check | p |" in (mod / "r" / "c.md").read_text()


def test_biased_decoder_exits_1(mod, capsys):
    assert main(["certify-decoder", "--decoder", "mydec:bad", "--out", "r/c.md"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_decoder_with_target_and_prompts(mod):
    assert main(["certify-decoder", "--decoder", "mydec:DEC", "--target", "mydec:TARGET", "--prompts", "0;1;3",
                 "--samples", "2000", "--out", "r/c.md"]) == 0


@pytest.mark.parametrize("argv, match", [
    (["--decoder", "mydec:broken"], "the factory failed: RuntimeError: no model file"),
    (["--decoder", "nosuchmod:x"], "cannot import module 'nosuchmod'"),
    (["--decoder", "mydec:DEC"], "also give --target"),
    (["--decoder", "mydec:DEC", "--target", "mydec:TARGET", "--prompts", "0,1;2"], "unequal lengths"),
    (["--decoder", "mydec:DEC", "--target", "mydec:TARGET", "--prompts", "a"], "--prompt-ids"),
    (["--decoder", "mydec:good", "--alpha", "2"], "--alpha"),
])
def test_bad_input_exits_2(mod, capsys, argv, match):
    assert main(["certify-decoder", *argv, "--samples", "100", "--out", "r/c.md"]) == 2
    assert match in capsys.readouterr().err
    assert not (mod / "r").exists()
