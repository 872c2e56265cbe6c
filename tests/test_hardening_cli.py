"""Bad command-line options: one-line error, exit status 2, nothing written."""

import pytest

from resispec.cli import main


@pytest.mark.parametrize("argv, match", [
    (["certify", "--family", "nosuch"], "unknown family"),      # used to run zero cells and PASS
    (["certify", "--seed", "-1"], "--seed"),
    (["certify", "--verifier", "resispec[gamma]"], "option=value"),
    (["certify", "--verifier", "resispec[gamma=-1]"], "gamma must be finite"),
    (["bench-verify", "--device", "nosuch"], "not a torch device"),
    (["bench-verify", "--B", "8", "0"], "--B takes one or two whole numbers >= 1"),   # the flag, not numpy_B
    (["bench", "--trees", "wor:8", "--V", "4", "--nodes", "1", "--families", "softmax_noise", "--temperatures", "1.0",
      "--no-progress"], "draft support"),
])
def test_bad_option_exits_2_with_one_line(argv, match, capsys, tmp_path):
    out = ["--out", str(tmp_path / ("c.md" if argv[0] == "certify" else "v.md" if argv[0] == "bench-verify" else "b"))]
    assert main(argv + out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1 and "Traceback" not in "".join(err)
    assert match in err[-1] and err[-1].startswith(f"resispec {argv[0]}: error:")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_certify_out_is_a_directory(tmp_path, capsys):
    assert main(["certify", "--verifier", "sps", "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bench_from_json_not_a_bench_file(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    assert main(["bench", "--from-json", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "--from-json" in capsys.readouterr().err


def test_verifier_options_are_parsed_as_numbers():
    from exactness.certify_run import load_verifier

    _, v = load_verifier("resispec[gamma=0.5,proxy=coverage]")
    assert v.gamma == 0.5 and v.proxy_name == "coverage"


def test_certify_unwritable_json_fails_before_the_run(tmp_path, capsys):
    """The JSON beside --out is a folder: refused naming --out and the JSON, before any cell runs."""
    (tmp_path / "rep" / "c.json").mkdir(parents=True)
    out = tmp_path / "rep" / "c.md"
    assert main(["certify", "--verifier", "sps", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "c.json" in err
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
