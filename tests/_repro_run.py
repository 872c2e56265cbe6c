"""Run a FAIL's reproduction script as a maintainer would, without this project (the engine adapters' tests)."""


def run_isolated(script, tmp_path, n):
    """Run a reproduction script as a maintainer would without this project: ``python -I`` (no PYTHON* variables,
    no user site, not the script's folder) from another folder, with stub ``resispec`` / ``exactness`` packages that
    raise ImportError first on sys.path (-I ignores PYTHONPATH and this venv's editable install puts the project on
    sys.path, so the stubs go in front through a ``-c`` prelude that then runs the script as ``__main__``)."""
    import subprocess
    import sys

    block, cwd = tmp_path / "block", tmp_path / "elsewhere"
    for pkg in ("resispec", "exactness"):
        (block / pkg).mkdir(parents=True, exist_ok=True)
        (block / pkg / "__init__.py").write_text(f"raise ImportError('{pkg} is blocked: not for the script')\n")
    cwd.mkdir(exist_ok=True)
    prelude = (f"import runpy, sys; sys.path.insert(0, {str(block)!r}); sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    return subprocess.run([sys.executable, "-I", "-c", prelude, str(script), str(n)], capture_output=True, text=True,
                          cwd=cwd, timeout=900)


def temperature_dropped_on_draft(engine_cls):
    """A subclass of an engine adapter with a planted bias: option ``draft`` runs at temperature 1 whatever the
    setting (through the adapter's ``run_settings``; the law keeps the setting's)."""
    import dataclasses

    class TemperatureDroppedOnDraft(engine_cls):
        def run_settings(self, settings, option):
            return dataclasses.replace(settings, temperature=1.0) if option == "draft" else settings

    return TemperatureDroppedOnDraft
