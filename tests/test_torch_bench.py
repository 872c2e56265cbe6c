"""bench-verify on a tiny problem: structure, ratios, reports, CLI and bad options."""

import json

import pytest

pytest.importorskip("torch")

from resispec.bench.throughput import bench_verify, write_reports  # noqa: E402
from resispec.cli import main  # noqa: E402


def test_bench_verify_tiny(tmp_path):
    res = bench_verify(B=4, V=300, ks=(2, 3), repeats=1, numpy_B=2, progress=False)
    assert len(res.cells) == 2 * 3 * 2
    for backend in ("numpy", "torch"):
        for k in (2, 3):
            assert res.ratio(backend, k, "rrs") == pytest.approx(1.0)
            assert res.ratio(backend, k) > 0
            assert res.cell(backend, "resispec", k).nodes_per_s > 0
    assert res.cell("numpy", "rrs", 2).B == 2 and res.cell("torch", "rrs", 2).B == 4
    assert "| resispec | 3 |" in res.table()
    md, js = write_reports(res, str(tmp_path / "b.md"), command="resispec bench-verify")
    assert json.load(open(js))["config"]["V"] == 300
    assert "cost / rrs" in open(md).read()


def test_bench_verify_cli(tmp_path, capsys):
    rc = main(["bench-verify", "--B", "3", "2", "--V", "200", "--k", "2", "--no-progress",
               "--dtype", "float32", "--out", str(tmp_path / "r.md")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "torch: resispec / rrs cost k=2" in out and (tmp_path / "r.json").exists()


def test_bench_verify_torch_solvers_side_by_side():
    res = bench_verify(B=3, V=200, ks=(2,), repeats=2, backends=("torch",), progress=False,
                       torch_solvers=("auto", "newton", "sort"))
    for name in ("resispec", "resispec[solver=newton]", "resispec[solver=sort]"):
        assert res.cell("torch", name, 2).cost_vs_rrs > 0
    assert res.cell("numpy", "resispec", 2) is None
    assert "| resispec[solver=newton] | 2 |" in res.table() and "numpy" not in res.table()
    assert res.config["torch_resispec_solver"] == "fused"


@pytest.mark.parametrize("kw, match", [({"backends": ("jax",)}, "backends"), ({"verifiers": ("nope",)}, "unknown"),
                                       ({"B": 0}, "B"), ({"dtype": "float16"}, "dtype"),
                                       ({"torch_solvers": ("auto", "magic")}, "torch_solvers"),
                                       ({"torch_solvers": ("newton",), "backends": ("numpy",)}, "torch backend")])
def test_bench_verify_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        bench_verify(**{"B": 2, "V": 50, "ks": (2,), "progress": False, **kw})


def test_cli_reports_cuda_missing(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert main(["bench-verify", "--device", "cuda", "--B", "2", "--V", "50", "--k", "2", "--no-progress"]) == 2
    assert "cuda" in capsys.readouterr().err


def test_bench_verify_cli_prints_lookahead_next_to_myopic(tmp_path, capsys):
    """One run prints resispec_lookahead / rrs next to resispec (myopic) / rrs, for each backend."""
    rc = main(["bench-verify", "--B", "3", "2", "--V", "200", "--k", "2,3", "--no-progress",
               "--repeats", "1", "--verifiers", "rrs,resispec,resispec_lookahead", "--out", str(tmp_path / "r.md")])
    assert rc == 0
    out = capsys.readouterr().out
    for backend in ("numpy", "torch"):
        mine = out.index(f"{backend}: resispec / rrs cost k=2")
        look = out.index(f"{backend}: resispec_lookahead / rrs cost k=2")
        assert look > mine and "k=3" in out[look:].splitlines()[0]


def test_bench_verify_without_replacement(tmp_path, capsys):
    """The WOR table: base rrs_wor, resispec = the without-replacement rule in both backends."""
    res = bench_verify(B=4, V=300, ks=(2, 3), repeats=1, numpy_B=2, progress=False,
                       verifiers=("rrs_wor", "resispec"), drafting="without_replacement")
    assert res.config["base"] == "rrs_wor" and res.config["drafting"] == "without_replacement"
    for backend in ("numpy", "torch"):
        for k in (2, 3):
            assert res.ratio(backend, k, "rrs_wor") == pytest.approx(1.0)
            assert res.ratio(backend, k, "resispec") > 0
    assert "cost / rrs_wor" in res.table()
    md, _ = write_reports(res, str(tmp_path / "w.md"))
    assert "drafted without replacement" in open(md).read()
    rc = main(["bench-verify", "--drafting", "without_replacement", "--B", "3", "2", "--V", "200", "--k", "2",
               "--no-progress", "--out", str(tmp_path / "c.md")])
    assert rc == 0 and "resispec / rrs_wor cost k=2" in capsys.readouterr().out


@pytest.mark.parametrize("kw, match", [({"verifiers": ("rrs", "resispec")}, "do not draft"),
                                       ({"verifiers": ("resispec",), "torch_solvers": ("auto", "newton")}, "drop them"),
                                       ({"drafting": "poisson"}, "drafting must be one of")])
def test_bench_verify_without_replacement_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        bench_verify(**{"B": 2, "V": 50, "ks": (2,), "progress": False, "drafting": "without_replacement", **kw})
