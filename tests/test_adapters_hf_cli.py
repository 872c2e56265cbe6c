"""resispec certify-decoder --target FOLDER / --draft FOLDER: transformers generate on saved tiny random models."""

import json

import numpy as np
import pytest
import torch

from resispec.cli import main

from _decoding_tiny import tiny_model

torch.set_num_threads(1)
V = 4


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("hf")
    tiny_model("llama", vocab=V, seed=31, scale=10.0).save_pretrained(root / "target")
    tiny_model("qwen2", vocab=V, seed=32, scale=10.0).save_pretrained(root / "draft")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate("abcd")}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="a").save_pretrained(root / "target")
    return root


def test_assisted_generation_passes_with_a_png_report(saved, tmp_path, capsys):
    out = tmp_path / "r" / "hf.md"
    argv = ["certify-decoder", "--target", str(saved / "target"), "--draft", str(saved / "draft"),
            "--top-k", "3", "--temperature", "0.8", "--num-assistant-tokens", "2", "--prompt", "b c d",
            "--prompt", "d a b", "--samples", "60", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr()
    text = capsys.readouterr().out
    assert "joint" in text and "NO BIAS DETECTED" in text
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["passed"] and data["details"]["plan"]["prompts"] == 2 and data["figure"] == "hf.png"
    assert "generate does not expose" in data["skipped"]["conditional"]
    png = out.with_suffix(".png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "![per-position" in out.read_text()


def test_ids_prompts_and_plain_sampling(saved, tmp_path):
    out = tmp_path / "p.md"
    assert main(["certify-decoder", "--target", str(saved / "target"), "--prompts", "1,2,3", "--samples", "40",
                 "--top-p", "0.9", "--out", str(out)]) == 0
    assert out.exists() and out.with_suffix(".png").exists()


@pytest.mark.parametrize("extra, match", [
    (["--num-assistant-tokens", "2", "--prompts", "1,2"], "also give --draft"),
    (["--temperature", "0", "--prompts", "1,2"], "--temperature must be > 0"),
    (["--top-p", "1.5", "--prompts", "1,2"], "--top-p must lie in (0, 1]"),
    ([], "--prompt-ids ("),
    (["--prompt", "a b", "--prompt", "a"], "unequal lengths"),
    (["--prompts", "1,2", "--decoder", "no_such_module_hf:y"], "--decoder 'no_such_module_hf:y'"),
])
def test_bad_hf_options_exit_2(saved, tmp_path, capsys, extra, match):
    out = tmp_path / "bad" / "x.md"
    assert main(["certify-decoder", "--target", str(saved / "target"), *extra, "--samples", "10",
                 "--out", str(out)]) == 2
    assert match in capsys.readouterr().err
    assert not out.parent.exists()


def test_bad_paths_and_flags_exit_2(saved, tmp_path, capsys):
    out = str(tmp_path / "x.md")
    assert main(["certify-decoder", "--target", str(tmp_path / "nowhere"), "--prompts", "1", "--out", out]) == 2
    assert "--target" in capsys.readouterr().err
    assert main(["certify-decoder", "--target", str(saved / "draft"), "--prompt", "a", "--out", out]) == 2
    assert "--prompt needs the tokenizer" in capsys.readouterr().err
    assert main(["certify-decoder", "--decoder", "exactness.decoder_mutants:demo", "--top-k", "3",
                 "--out", out]) == 2
    assert "--top-k applies to transformers generate (--target FOLDER without --decoder) only" in capsys.readouterr().err
    assert main(["certify-decoder", "--out", out]) == 2
    assert "--target FOLDER" in capsys.readouterr().err
