"""benchmarks/audit_overhead.py: adapter vs bare engine rates and seconds to TV 0.02 (smoke run, no timing asserted)."""

import importlib.util
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")


def _bench():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "audit_overhead.py"
    spec = importlib.util.spec_from_file_location("audit_overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_transformers_off_gives_a_table_with_a_finite_ratio(tmp_path):
    mod = _bench()
    res = mod.run(["transformers"], options={"transformers": ["off"]}, rounds=1, per_round=2, workdir=tmp_path,
                  progress=lambda line: None)
    (row,) = res["rows"]
    assert row["engine"] == "transformers" and row["option"] == "off" and row["note"] == ""
    assert math.isfinite(row["ratio"]) and row["ratio"] > 0
    assert math.isfinite(row["seconds_to_tv"]) and row["default_n"] == row["default_n_per_prompt"] * 2
    md = mod.markdown({**res, "command": "test", "load_start": "-", "load_end": "-", "seconds": 0.0})
    header = next(line for line in md.splitlines() if line.startswith("| engine"))
    assert [c.strip() for c in header.strip("|").split("|")] == list(mod.COLUMNS)
    body = [line for line in md.splitlines() if line.startswith("| transformers")]
    assert len(body) == 1 and len(body[0].strip("|").split("|")) == len(mod.COLUMNS)


def test_bad_input_is_one_clear_error():
    mod = _bench()
    with pytest.raises(ValueError, match="--engines: unknown nope"):
        mod.run(["nope"])
    with pytest.raises(ValueError, match="--rounds must be an integer >= 1"):
        mod.run(["transformers"], rounds=0)
