"""Run every notebook top to bottom on small settings (RESISPEC_NOTEBOOK_SMALL=1)."""

import os
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"residual_drift", "custom_proxy", "certify_verifier"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, monkeypatch):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "clear notebook outputs before committing"
    monkeypatch.setenv("RESISPEC_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, "each notebook should draw at least one plot"
