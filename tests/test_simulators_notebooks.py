"""Run every notebook top to bottom on small settings, by the one command docs/simulators.md documents.

The command is read from the docs page (the line starting ``RESISPEC_NOTEBOOK_SMALL=1 jupyter nbconvert``) and
run as written, one notebook at a time, with the output folder moved to a temporary one: what a newcomer
copies is what CI runs.  Its dependencies (nbconvert, ipykernel) come with the ``test`` extra.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbconvert")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOC = ROOT / "docs" / "simulators.md"


def documented_command() -> tuple[dict, list[str]]:
    """(environment assignments, argv) of the notebook command in docs/simulators.md."""
    lines = [x.strip() for x in DOC.read_text().splitlines()
             if x.strip().startswith("RESISPEC_NOTEBOOK_SMALL=1 jupyter nbconvert")]
    assert len(lines) == 1, "docs/simulators.md must show the notebook command exactly once"
    words = shlex.split(lines[0])
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    argv = [w for w in words if not ("=" in w and not w.startswith("-"))]
    return env, argv


def test_there_are_notebooks():
    assert {p.stem for p in NOTEBOOKS} >= {"residual_drift", "custom_proxy", "certify_verifier"}


def test_the_documented_command_runs_every_notebook_with_the_test_extra():
    env, argv = documented_command()
    assert env == {"RESISPEC_NOTEBOOK_SMALL": "1"}
    assert argv[:4] == ["jupyter", "nbconvert", "--to", "notebook"] and "--execute" in argv
    assert argv[-1] == "notebooks/*.ipynb" and "--output-dir" in argv
    test_extra = (ROOT / "pyproject.toml").read_text().split("\ntest = [", 1)[1].split("]", 1)[0]
    for dep in ("nbconvert", "ipykernel"):
        assert f'"{dep}' in test_extra, f"the test extra must install {dep}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "clear notebook outputs before committing"
    env, argv = documented_command()
    argv = [str(path.relative_to(ROOT)) if a == "notebooks/*.ipynb" else a for a in argv]
    argv[argv.index("--output-dir") + 1] = str(tmp_path)
    # the venv's own jupyter (its kernel is this interpreter), found as the shell would find it
    bindir = str(Path(sys.executable).parent)
    full_env = {**os.environ, **env, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    full_env.pop("MPLBACKEND", None)
    out = subprocess.run(argv, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-4000:]
    ran = nbformat.read(tmp_path / path.name, as_version=4)
    images = sum("image/png" in o.get("data", {}) for c in ran.cells if c.cell_type == "code" for o in c.outputs)
    assert images >= 1, "each notebook should draw at least one plot"
