"""Bench commands check ``--out`` before any work (hardening item 8).

``resispec bench --out <existing file>`` used to compute for about 50 s and
then fail while writing.  Each test replaces the command's driver with one
that fails the test if called, so the check must fire first; each runs in
well under 5 s and leaves no file behind.
"""

import os

import pytest

from resispec.cli import main
from resispec.commands._args import check_out


def _no_work(*args, **kwargs):
    raise AssertionError("the benchmark started before --out was checked")


#: command -> (module, attribute) of the driver it calls first.
DRIVERS = {
    "bench": ("resispec.bench.trees", "run_bench"),
    "bench-accept": ("resispec.bench.accept", "bench_accept"),
    "bench-gap": ("resispec.bench.gap", "bench_gap"),
    "bench-verify": ("resispec.bench.throughput", "bench_verify"),
    "drift": ("simulators.drift", "drift_sweep"),
    "families": ("simulators", "divergence_table"),
}
FOLDER_OUT = ("bench", "drift")


@pytest.fixture
def no_work(monkeypatch):
    import importlib

    for mod, attr in DRIVERS.values():
        monkeypatch.setattr(importlib.import_module(mod), attr, _no_work)


def _bad_outs(tmp_path, command):
    """(path, expected message) pairs that must fail fast for ``command``."""
    a_file = tmp_path / "a_file.txt"
    a_file.write_text("x")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    under_file = a_file / "sub" / ("out" if command in FOLDER_OUT else "out.md")
    if command in FOLDER_OUT:
        return [(a_file, "is a file, not a folder"), (under_file, "is a file, not a folder"),
                (os.devnull + "/x", "is a file, not a folder")]
    return [(a_dir, "is a directory"), (under_file, "is a file, not a folder"),
            (os.devnull + "/x.md", "is a file, not a folder")]


@pytest.mark.parametrize("command", sorted(DRIVERS))
def test_bad_out_fails_before_any_work(command, tmp_path, capsys, no_work):
    for path, match in _bad_outs(tmp_path, command):
        before = sorted(tmp_path.rglob("*"))
        assert main([command, "--out", str(path)]) == 2, path     # no_work: any work would raise
        err = capsys.readouterr().err.strip().splitlines()
        assert err and err[-1].startswith(f"resispec {command}: error: --out"), err
        assert match in err[-1] and "Traceback" not in "\n".join(err)
        assert sorted(tmp_path.rglob("*")) == before          # nothing created


@pytest.mark.parametrize("command", ["bench-accept", "bench-gap", "bench-verify"])
def test_json_beside_the_report_is_a_directory(command, tmp_path, capsys, no_work):
    (tmp_path / "r.json").mkdir()
    assert main([command, "--out", str(tmp_path / "r.md")]) == 2
    assert "r.json" in capsys.readouterr().err


@pytest.mark.parametrize("command, names", [("bench", ["b.md"]), ("drift", ["b_steps.png"])])
def test_report_file_inside_the_folder_is_a_directory(command, names, tmp_path, capsys, no_work):
    for n in names:
        (tmp_path / n).mkdir()
    assert main([command, "--out", str(tmp_path / "b.md")]) == 2
    assert names[0] in capsys.readouterr().err


def test_bench_from_json_checks_out_first(tmp_path, capsys):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    assert main(["bench", "--from-json", str(tmp_path / "missing.json"), "--out", str(a_file)]) == 2
    assert "--out" in capsys.readouterr().err


def test_check_out_accepts_good_paths_and_creates_nothing(tmp_path):
    assert check_out(tmp_path / "new" / "deeper" / "r.md", "--out", json_beside=True) == tmp_path / "new/deeper/r.md"
    assert check_out(tmp_path / "new_folder", "--out", folder=True, files=("x.md",)) == tmp_path / "new_folder"
    assert check_out(tmp_path, "--out", folder=True) == tmp_path
    (tmp_path / "old.md").write_text("kept")
    check_out(tmp_path / "old.md", "--out")                      # overwriting a file is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md"]


@pytest.mark.parametrize("bad", ["", None])
def test_check_out_empty(bad):
    with pytest.raises(ValueError, match="--stem-out must be a non-empty path"):
        check_out(bad, "--stem-out")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes anywhere")
def test_check_out_unwritable_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="not writable"):
            check_out(ro / "r.md", "--out")
    finally:
        ro.chmod(0o700)


def test_every_list_option_takes_commas_spaces_and_repeats():
    """``--k 2,4``, ``--k 2 4`` and ``--k 2 --k 4`` mean the same in every command (tree shapes keep their commas)."""
    from resispec import cli

    def parse(argv):
        return cli.parse(argv)[1]

    for cmd in ("bench-accept", "bench-gap", "bench-verify", "certify"):
        for argv in (["--k", "2,4", "--k", "8"], ["--k", "2", "4", "8"], ["--k", "2", "--k", "4,8"]):
            assert parse([cmd, *argv]).k == [2, 4, 8], (cmd, argv)
    assert parse(["bench", "--trees", "4,2", "wor:8,4", "--trees", "16"]).trees == ["4,2", "wor:8,4", "16"]
    assert parse(["bench", "--temperatures", "0.7,1", "--families", "zipf", "shifted"]).temperatures == [0.7, 1.0]
    assert parse(["bench-decode", "--trees", "2,1", "--trees", "4,1", "--seeds", "0,1"]).trees == ["2,1", "4,1"]
    assert parse(["drift", "--gammas", "0", "0.5,1", "--proxies", "draft,topk"]).gammas == [0.0, 0.5, 1.0]
    assert parse(["families", "--families", "zipf,shifted"]).families == ["zipf", "shifted"]
    assert parse(["bench-accept"]).k == [2, 4, 8]   # defaults untouched
