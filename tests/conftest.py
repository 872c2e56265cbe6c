"""Shared pytest configuration.

Under CI (``CI=true``) hypothesis runs derandomized, so a CI run is
reproducible: the same examples every time.  Locally it explores new random
examples each run (and saves failures in ``.hypothesis/``).

Under pytest-xdist (``PYTEST_XDIST_WORKER`` set; ``-n 2`` in pyproject.toml) every worker uses one torch
thread, so two workers on two cores do not oversubscribe them; a test that needs more sets it itself.
"""

import os
import sys

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    settings.load_profile("ci")

if os.environ.get("PYTEST_XDIST_WORKER"):
    try:
        import torch
    except ImportError:
        pass
    else:
        torch.set_num_threads(1)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """A clean folder as cwd; sys.path and the user modules imported from it are restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        mod = sys.modules.get(name)
        if str(getattr(mod, "__file__", "") or "").startswith(str(tmp_path)):
            del sys.modules[name]
