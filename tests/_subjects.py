"""Assertions shared by the verdict tests: a certificate failed because its subject misbehaved."""

from __future__ import annotations


def subject_fail(cert, *words) -> str:
    """Assert ``cert`` is the FAIL of a misbehaving subject (``checks == {"subject": 0.0}``) whose cause holds every
    one of ``words``; return the cause."""
    assert not cert.passed and cert.checks == {"subject": 0.0}, cert.summary()
    cause = cert.details["subject"]["error"]
    for w in words:
        assert w in cause, cause
    return cause


def spawn_cli(folder, modules: dict, args: list, *, paths=(), **kw):
    """``python -m resispec *args`` in a process of its own, cwd ``folder``, after writing each subject module
    (``{"name.py": source}``) there; ``folder``, ``paths`` and the repository root on its PYTHONPATH.  Returns the
    ``subprocess.Popen`` (stdout and stderr piped, text); ``kw`` go to Popen (``preexec_fn=``, ...)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    for name, source in modules.items():
        (Path(folder) / name).write_text(source)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *map(str, paths), str(root)])}
    return subprocess.Popen([sys.executable, "-m", "resispec", *args], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)
