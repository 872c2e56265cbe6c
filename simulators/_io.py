"""Atomic report writing: temp file in the same folder, then rename."""

from __future__ import annotations

import json
from pathlib import Path


from resispec._io import atomic_write_with as _atomic  # noqa: E402

def write_text(path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return _atomic(path, lambda fh: fh.write(text.encode("utf-8")))


def write_json(path, obj) -> Path:
    """Write ``obj`` as indented JSON atomically (``inf`` written as ``Infinity``)."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def save_figure(fig, path) -> Path:
    """Save a matplotlib figure as PNG atomically."""
    return _atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=110, bbox_inches="tight"))
