"""bench-gap: a tiny end-to-end run of the command and the library."""

import json

import numpy as np
import pytest

from resispec.bench.gap import bench_gap, wor_pair_acceptance
from resispec.cli import main
import resispec


def test_cli_tiny(tmp_path, capsys):
    out = tmp_path / "gap.md"
    rc = main(["bench-gap", "--families", "zipf", "--T", "1.0", "--k", "2,3", "--V", "12", "5", "--nodes", "2", "2", "--samples", "200", "--no-progress",
               "--out", str(out)])
    assert rc == 0
    text = out.read_text()
    assert "Closing the gap" in text and "resispec_myopic" in text and "seq_opt_wor" in text
    js = json.loads((tmp_path / "gap.json").read_text())
    secs = {c["section"] for c in js["cells"]}
    assert secs == {"iid", "wor", "wor_small"}
    for c in js["cells"]:
        if c["section"] == "iid":
            a = c["acceptance"]
            assert a["resispec"] <= c["bounds"]["seq_opt"] + 1e-8             # the default: the look-ahead
            assert a["resispec"] >= a["resispec_myopic"] - 1e-9
            assert c["bounds"]["seq_opt"] <= c["bounds"]["alpha*"] + 1e-8
    assert "target_iid_k4_8" not in js["summary"]           # k in {2, 3} only
    assert "target_wor_small_gap_to_seq_opt" in js["summary"]


def test_paired_monte_carlo_matches_enumeration():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(7)), rng.dirichlet(np.ones(7))
    vs = {"rrs_wor": resispec.get_verifier("rrs_wor"),
          "resispec": resispec.get_verifier("resispec", drafting="without_replacement")}
    exact, _, how = wor_pair_acceptance(vs, p, q, 3, rng)
    assert how == "enumeration"
    mc, se, how = wor_pair_acceptance(vs, p, q, 3, rng, samples=4000, enum_limit=0)
    assert how == "monte carlo"
    for n in vs:
        assert abs(mc[n] - exact[n]) <= 5 * se[n] + 1e-12


def test_bad_input():
    with pytest.raises(ValueError, match="sections"):
        bench_gap(sections=("nope",), progress=False)
    with pytest.raises(ValueError, match="nodes"):
        bench_gap(nodes=0, progress=False)
    with pytest.raises(ValueError, match="family"):
        bench_gap(families=("nope",), progress=False)
