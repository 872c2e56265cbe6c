"""`resispec bench-accept`: the acceptance table on a tiny grid."""

import json

import numpy as np
import pytest

import resispec
from resispec.bench.accept import bench_accept, node_acceptance, write_reports
from resispec.cli import main
from resispec.verifiers.baselines import RecursiveRejection


def test_small_table_is_consistent():
    t = bench_accept(families=["softmax_noise", "zipf"], Vs=[40], ks=[2, 4], Ts=[1.0], nodes=3, seed=1,
                     lp_max_V=100, progress=False)
    assert len(t.cells) == 4
    for c in t.cells:
        assert c.gap_closed["rrs"] == 0.0
        for n in t.verifiers:
            assert c.acceptance[n] <= c.alpha_star + 1e-12
        assert c.acceptance["resispec"] - 1e-9 <= c.seq_opt <= c.alpha_star + 1e-9
        if c.k == 2:
            assert abs(c.seq_opt - c.acceptance["resispec"]) < 1e-8     # k = 2: ResiSpec is the LP optimum
        assert c.method["target_only"] == "closed form" and c.method["resispec"] == "exact"
    s = t.summary()
    assert set(s["gap_closed"]) >= {"resispec", "kseq", "seq_opt"}
    # same nodes for every k: acceptance grows with k
    a = {c.k: c.acceptance["rrs"] for c in t.cells if c.family == "zipf"}
    assert a[4] > a[2]


def test_real_ngram_cell_and_reports(tmp_path):
    t = bench_accept(families=["ngram"], Vs=[1000], ks=[2], Ts=[1.0], nodes=2, seed=0, progress=False)
    (c,) = t.cells
    assert c.V >= 2000 and c.seq_opt is None                      # fixed vocabulary, LP skipped (V > 1000)
    md, js = write_reports(t, str(tmp_path / "acc.md"))
    data = json.loads(open(js).read())
    assert data["cells"][0]["family"] == "ngram" and "gap_closed" in data["summary"]
    assert "| ngram |" in open(md).read()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acc.json", "acc.md"]   # no temp files left


class _Opaque(RecursiveRejection):
    """rrs without the candidate-independent shortcut: forces the fallback paths."""

    candidate_independent = False


def test_monte_carlo_fallback_matches_exact():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(60)), rng.dirichlet(np.ones(60))
    exact = resispec.acceptance_probability(resispec.get_verifier("rrs"), p, q, 5)
    val, se, how = node_acceptance(_Opaque(), p, q, 5, rng, mc_samples=4000)
    assert how == "monte carlo" and 0 < se < 0.01 and abs(val - exact) < 4 * se
    val, se, how = node_acceptance(_Opaque(), p[:10] / p[:10].sum(), q[:10] / q[:10].sum(), 2, rng)
    assert how == "enumeration" and se == 0.0


def test_cli_writes_reports(tmp_path, capsys):
    out = tmp_path / "r" / "b.md"
    rc = main(["bench-accept", "--families", "shifted", "--V", "30", "--k", "2", "--T", "0.7,1.5", "--nodes", "2",
               "--out", str(out), "--no-progress"])
    assert rc == 0 and out.exists() and out.with_suffix(".json").exists()
    text = capsys.readouterr().out
    assert "gap closed" in text and "shifted" in text


@pytest.mark.parametrize("kw,msg", [
    ({"nodes": 0}, "nodes"), ({"Vs": [1]}, "V entries"), ({"ks": [0]}, "k entries"), ({"Ts": [0.0]}, "T entries"),
    ({"families": ["nope"]}, "unknown family"), ({"verifiers": ["rrs_wor"]}, "verifiers"),
    ({"families": []}, "families"), ({"mc_samples": 1}, "mc_samples"),
])
def test_bad_arguments(kw, msg):
    args = dict(families=["softmax_noise"], Vs=[20], ks=[2], Ts=[1.0], nodes=1, progress=False)
    args.update(kw)
    with pytest.raises(ValueError, match=msg):
        bench_accept(**args)


def test_cli_bad_argument_exit_status(capsys):
    assert main(["bench-accept", "--families", "nope", "--no-progress", "--out", "/nonexistent/x.md"]) == 2
    assert "unknown family" in capsys.readouterr().err


def test_verifier_subset_always_has_rrs():
    t = bench_accept(families=["zipf"], Vs=[20], ks=[2], Ts=[1.0], nodes=2, verifiers=["resispec"], progress=False)
    assert t.verifiers == ["rrs", "resispec"]
    o = t.summary()["ordering_resispec_gt_kseq_gt_rrs"]
    assert o["not_run"] == 1 and o["holds"] == 0 and o["saturated"] == 0


def test_monte_carlo_acceptance_is_chunked_and_unbiased(monkeypatch):
    """The Monte Carlo path verifies bounded chunks (a 20,000-draw node at V = 32,000 in one call was OOM-killed)."""
    import resispec.bench.accept as acc

    calls = []
    rp = resispec.get_verifier("rejection_proxy")          # default proxy = rrs's residual, no step formula
    real_chain = rp.chain

    def spy(P, Q, c):
        calls.append(P.shape[0])
        return real_chain(P, Q, c)

    monkeypatch.setattr(rp, "chain", spy)
    monkeypatch.setattr(acc, "MC_CHUNK_ELEMS", 50 * 200)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(200)), rng.dirichlet(np.ones(200))   # 200^4 tuples: past enumeration
    a, se, how = acc.node_acceptance(rp, p, q, 4, rng, mc_samples=2000)
    assert how == "monte carlo" and max(calls) <= 50 and sum(calls) == 2000
    exact = resispec.acceptance_probability(resispec.get_verifier("rrs"), p, q, 4)
    assert abs(a - exact) <= 5 * se + 1e-12
    assert "rejection_proxy" not in acc.iid_verifiers() and "resispec_lookahead" not in acc.iid_verifiers()
