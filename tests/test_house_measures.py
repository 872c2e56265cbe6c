"""benchmarks/house_measures.py measures two trees side by side (here HEAD against the working tree)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_house_measures_table(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("house_measures", ROOT / "benchmarks" / "house_measures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "m.md"
    assert mod.main(["--base", "HEAD", "--repeat", "1", "--out", str(out)]) == 0
    text = out.read_text()
    for row in ("source lines", "functions over 100 lines", "of which mirror a numpy line", "CLI options",
                "seconds to `import exactness`", "seconds to `resispec --help`"):
        assert row in text
    line = next(l for l in text.splitlines() if l.startswith("| public certify_*"))
    before, after = (int(x) for x in line.split("|")[2:4])
    assert before >= 10 and after >= 10  # the scan found the entry points (certify_verifier, certify_decoder, ...)
    with pytest.raises(SystemExit):
        mod.main(["--repeat", "0"])
