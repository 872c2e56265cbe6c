"""Atomic file writing shared by every report writer: temp file in the same
folder, then ``os.replace``; nothing half-written is left behind on failure."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, IO


def atomic_write_with(path, write: Callable[[IO[bytes]], object]) -> Path:
    """Create ``path`` atomically from ``write(fh)`` on a binary file handle.

    The file gets the usual permissions (``0o666 & ~umask``; ``mkstemp``
    would leave 0600).  Raises whatever ``write`` or the file system raises,
    after removing the temporary file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write(path, data: bytes | str) -> Path:
    """Write ``data`` (str as UTF-8, or bytes) to ``path`` atomically."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    return atomic_write_with(path, lambda fh: fh.write(payload))


def write_markdown_and_json(out: str, markdown: str, obj) -> tuple[str, str]:
    """Write ``markdown`` to ``out`` and ``obj`` as JSON beside it (same stem, ``.json``).

    Both atomically, JSON first; returns ``(markdown_path, json_path)``.
    """
    import json

    base, ext = os.path.splitext(out)
    js = (base if ext else out) + ".json"
    atomic_write(js, json.dumps(obj, indent=1))
    atomic_write(out, markdown)
    return out, js
