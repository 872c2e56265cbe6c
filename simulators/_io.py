"""Atomic report writing: temp file in the same folder, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _atomic(path, write) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return _atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json(path, obj) -> Path:
    """Write ``obj`` as indented JSON atomically (``inf`` written as ``Infinity``)."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def save_figure(fig, path) -> Path:
    """Save a matplotlib figure as PNG atomically."""
    return _atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=110, bbox_inches="tight"))
