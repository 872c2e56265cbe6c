import json

import numpy as np
import pytest

import resispec
from resispec.cli import main
from simulators import get_family
from resispec.bench.trees import BENCH_VERIFIERS, BenchVerifier, register_bench_verifier, run_bench
from simulators.drift import drift_sweep, residual_drift, top_mass_set_mass
from simulators.trees import block_efficiency_iid


@pytest.fixture(scope="module")
def pairs():
    return get_family("softmax_noise").sample(np.random.default_rng(0), n=6, V=200)


@pytest.mark.parametrize("name", ["rrs", "sps", "resispec"])
def test_drift_cumulative_acceptance_is_exact(name, pairs):
    p, q = pairs
    v = resispec.get_verifier(name)
    r = residual_drift(v, p, q, 4)
    exact = np.mean([resispec.acceptance_probability(v, p[b], q[b], 4) for b in range(p.shape[0])])
    assert r.acceptance == pytest.approx(exact, abs=1e-12)
    assert r.method == "exact"
    assert r.tv[0] == pytest.approx(np.mean(0.5 * np.abs(p - q).sum(1)), abs=1e-12)


def test_drift_without_replacement_is_close_to_exact():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(6), size=2), rng.dirichlet(np.ones(6), size=2)
    v = resispec.get_verifier("rrs_wor")
    r = residual_drift(v, p, q, 3, rng=rng, n_samples=4000)
    exact = np.mean([resispec.acceptance_probability(v, p[b], q[b], 3) for b in range(2)])
    assert abs(r.acceptance - exact) < 0.02


def test_drift_gamma_zero_is_rrs_and_resispec_drifts_less(pairs):
    p, q = pairs
    s = drift_sweep(p, q, 6, gammas=(0.0, 1.0), proxies=["draft"], baselines=("rrs",))
    rrs, g0, g1 = s.results
    np.testing.assert_allclose(g0.beta, rrs.beta, atol=1e-12)
    # the shaped residual keeps more mass where the draft is confident, and accepts more
    assert g1.top_mass[-1] > rrs.top_mass[-1]
    assert rrs.acceptance < g1.acceptance <= s.alpha_star + 1e-12


def test_top_mass_set():
    q = np.array([0.5, 0.3, 0.15, 0.05])
    p = np.array([0.1, 0.2, 0.3, 0.4])
    assert top_mass_set_mass(p, q, 0.8) == pytest.approx(0.3)      # {0, 1}
    assert top_mass_set_mass(p, q, 0.81) == pytest.approx(0.6)     # {0, 1, 2}


def test_drift_bad_input(pairs):
    p, q = pairs
    with pytest.raises(TypeError, match="MassVerifier"):
        residual_drift(resispec.get_verifier("kseq"), p, q, 3)
    with pytest.raises(ValueError, match="top_level"):
        residual_drift(resispec.get_verifier("rrs"), p, q, 3, top_level=0)
    with pytest.raises(TypeError, match="Generator"):
        residual_drift(resispec.get_verifier("rrs_wor"), p, q, 3)
    with pytest.raises(ValueError, match="unknown proxy"):
        drift_sweep(p, q, 3, proxies=["nope"])


def test_drift_cli_writes_report(tmp_path, capsys):
    rc = main(["drift", "--V", "50", "--nodes", "3", "--k", "3", "--gammas", "0,1", "--proxies", "draft,topk",
               "--out", str(tmp_path)])
    assert rc == 0
    for f in ("drift.md", "drift.json", "drift_steps.png", "drift_gamma.png"):
        assert (tmp_path / f).stat().st_size > 0
    md = (tmp_path / "drift.md").read_text()
    assert "resispec[topk, gamma=1]" in md and "viability beta_i" in md
    data = json.loads((tmp_path / "drift.json").read_text())
    assert len(data["results"]) == 3 + 2 * 2
    assert not list(tmp_path.glob(".*"))          # no temp files left behind


def test_cli_bad_input(tmp_path, capsys):
    assert main(["drift", "--family", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown family" in capsys.readouterr().err
    assert main(["drift", "--gammas", "a,b", "--out", str(tmp_path)]) == 2
    assert main(["bench", "--trees", "4,0", "--out", str(tmp_path)]) == 2
    assert "depth 1" in capsys.readouterr().err
    assert main(["bench", "--families", "nope", "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_bench_rows_match_tree_recursion():
    rows = run_bench(families=["zipf"], temperatures=[1.0], shapes=["4,2", "1,1,1", "wor:3,2"], V=60, n=4,
                     n_samples=64, progress=False)
    p, q = get_family("zipf").sample(np.random.default_rng([0, 0, 0]), n=4, V=60, temperature=1.0)
    r = rows[0]
    for lab in ("rrs", "kseq", "resispec", "target_only"):
        assert r.efficiency[lab] == pytest.approx(block_efficiency_iid(resispec.get_verifier(lab), "4,2", p, q).block_efficiency)
    assert r.ratio[r.best_baseline] == 1.0
    assert r.efficiency["resispec"] <= r.bound + 1e-12
    chain = rows[1]
    assert chain.ratio["resispec"] == pytest.approx(1.0)          # k = 1 everywhere: no room to gain
    wor = rows[2]
    assert {"rrs_wor", "target_only_wor", "resispec"} <= set(wor.efficiency) and wor.stderr["rrs_wor"] > 0
    assert not {"sps", "rrs", "kseq", "target_only"} & set(wor.efficiency)     # iid baselines stay off wor shapes


def test_bench_verifier_list_is_data():
    entry = BenchVerifier("resispec_g05", "resispec", {"gamma": 0.5}, role="candidate")
    try:
        register_bench_verifier(entry)
        rows = run_bench(families=["zipf"], temperatures=[1.0], shapes=["2,2"], V=40, n=2, progress=False)
        assert "resispec_g05" in rows[0].efficiency
    finally:
        BENCH_VERIFIERS[:] = [e for e in BENCH_VERIFIERS if e.label != "resispec_g05"]
    with pytest.raises(ValueError, match="role"):
        register_bench_verifier(BenchVerifier("x", "rrs", role="judge"))


def test_bench_cli_small(tmp_path, capsys):
    rc = main(["bench", "--families", "zipf", "--temperatures", "1.0", "--trees", "2,2", "wor:2,2", "--V", "40",
               "--nodes", "2", "--n", "16", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "largest resispec / best-baseline ratio" in out
    md = (tmp_path / "bench.md").read_text()
    assert "Largest ratio" in md and "| `zipf` | 1 | `2,2` |" in md
    assert len(json.loads((tmp_path / "bench.json").read_text())["rows"]) == 2


def test_families_cli(tmp_path, capsys):
    out = tmp_path / "fam.md"
    rc = main(["families", "--families", "zipf", "dirichlet", "--temperatures", "1.0", "--V", "50", "--nodes", "4",
               "--dial", "softmax_noise", "noise", "0.5,2", "--out", str(out)])
    assert rc == 0
    md = out.read_text()
    assert "| `dirichlet` | 1 | 50 |" in md and "Dial: `softmax_noise` `noise`" in md
    assert main(["families", "--families", "nope", "--out", str(out)]) == 2
    assert main(["families", "--families", "zipf", "--dial", "zipf", "bogus", "1", "--out", str(out)]) == 2
    assert "no parameter 'bogus'" in capsys.readouterr().err


def test_bench_report_rerenders_from_json(tmp_path):
    args = ["bench", "--families", "zipf", "--temperatures", "1.0", "--trees", "2,2", "1,1", "--V", "30", "--nodes", "2",
            "--out", str(tmp_path), "--no-progress"]
    assert main(args) == 0
    first = (tmp_path / "bench.md").read_text()
    (tmp_path / "bench.md").unlink()
    assert main(["bench", "--from-json", str(tmp_path / "bench.json"), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "bench.md").read_text() == first
    assert "Where it does not gain: `1x2 chain`" in first


def test_bench_without_replacement_candidate_with_max_k():
    entry = BenchVerifier("wor_cand", "rrs_wor", drafting="without_replacement", role="candidate", max_k=2,
                          n_samples=16)
    try:
        register_bench_verifier(entry)
        rows = run_bench(families=["zipf"], temperatures=[1.0], shapes=["2,2", "wor:2,2", "wor:3"], V=40, n=2,
                         progress=False)
    finally:
        BENCH_VERIFIERS[:] = [e for e in BENCH_VERIFIERS if e.label != "wor_cand"]
    iid, wor2, wor3 = rows
    assert "wor_cand" not in iid.efficiency and "wor_cand" in wor2.efficiency and "wor_cand" not in wor3.efficiency
    assert abs(wor2.efficiency["wor_cand"] - wor2.efficiency["rrs_wor"]) < 0.2   # same rule, independent MC
    with pytest.raises(ValueError, match="max_k"):
        register_bench_verifier(BenchVerifier("x", "rrs", max_k=0))
