"""Atomic file writing shared by every report writer: temp file in the same
folder, then ``os.replace``; nothing half-written is left behind on failure."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, IO

import numpy as np


def atomic_write_with(path, write: Callable[[IO[bytes]], object]) -> Path:
    """Create ``path`` atomically from ``write(fh)`` on a binary file handle.

    The file gets the usual permissions (``0o666 & ~umask``; ``mkstemp``
    would leave 0600).  Raises whatever ``write`` or the file system raises,
    after removing the temporary file.
    """
    path = Path(path)
    if path.is_symlink():  # write through the link (replace its target), never replace the link itself
        path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        raise OSError(f"{path} is not a regular file (a device, FIFO or socket); refusing to replace it")
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


def strict_json(obj):
    """``obj`` with every NaN / inf float (numpy scalars included) replaced by ``None``, arrays as lists.

    The JSON reports are strict JSON (RFC 8259 has no NaN): a failed cell's certificate holds NaN TVs
    (nothing was measured), which ``json.dumps`` would write as a bare ``NaN`` that strict parsers reject.
    """
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return strict_json(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if obj is None or isinstance(obj, str):
        return obj
    return strict_json(float(obj)) if hasattr(obj, "__float__") else str(obj)


def write_markdown_and_json(out: str, markdown: str, obj) -> tuple[str, str]:
    """Write ``markdown`` to ``out`` and ``obj`` as JSON beside it (same stem, ``.json``).

    Both atomically, JSON first; returns ``(markdown_path, json_path)``.  The JSON is strict (RFC 8259):
    NaN / inf are written as ``null`` (:func:`strict_json`).
    """
    import json

    base, ext = os.path.splitext(out)
    js = (base if ext else out) + ".json"
    atomic_write(js, json.dumps(strict_json(obj), indent=1, allow_nan=False))
    atomic_write(out, markdown)
    return out, js


def check_output_path(path, flag: str, *, suffix: str | None = None) -> Path:
    """Check, before any work, that ``path`` can be created or replaced as a file.

    Nothing is created.  The folder need not exist yet (the atomic writers
    create it), but its nearest existing ancestor must be a writable folder.

    Parameters
    ----------
    path : str or os.PathLike
        The output file.
    flag : str
        The option that named it (``"--out"``), used in the message.
    suffix : str, optional
        Required file-name ending, e.g. ``".npz"``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        ``path`` is not UTF-8, is an existing directory, has the wrong suffix, an ancestor
        is a file, an existing file or the folder is not writable (probed with
        a temporary file that is removed at once: ``os.access`` says yes to
        root even on a read-only mount).
    """
    if path is None or str(path) == "":
        raise ValueError(f"{flag} needs a file path, got {path!r}")
    try:
        str(path).encode("utf-8")                     # the reports quote their paths in UTF-8 text
    except UnicodeEncodeError:
        raise ValueError(f"{flag} {str(path)!r} is not valid UTF-8 (bytes the terminal could not decode); give a path "
                         "of UTF-8 characters") from None
    p = Path(path).expanduser()
    if suffix is not None and not p.name.endswith(suffix):
        raise ValueError(f"{flag} must end in {suffix}, got {path}")
    for link in (p, *p.parents):          # a dangling link: the writers would create its target's folders, or fail late
        if link.is_symlink() and not link.exists():
            raise ValueError(f"{flag} {path}: {link} is a symbolic link to {os.readlink(link)}, which does not exist; "
                             "give a path without it, or create its target first")
    if p.exists() and not p.is_dir() and not p.is_file():
        raise ValueError(f"{flag} {path} is not a regular file (a device, FIFO or socket would be replaced); "
                         "give a file path")
    if p.is_dir():
        raise ValueError(f"{flag} {path} is an existing directory; give a file path")
    if p.exists() and not os.access(p, os.W_OK):
        raise ValueError(f"{flag} {path} exists and is not writable")
    parent = p.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: folder {parent} is not writable")
    try:  # os.access says yes to root everywhere; a real probe does not (read-only mounts)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: folder {parent} is not writable ({exc.strerror or exc})") from exc
    return p


def check_report_path(path, flag: str = "--out") -> Path:
    """Check a Markdown report path and the JSON written beside it (``path.with_suffix(".json")``).

    Raises
    ------
    ValueError
        As :func:`check_output_path` for either file, or ``path`` itself ends in ``.json`` (the JSON would
        overwrite the Markdown): the message asks for a ``.md`` path.
    """
    p = check_output_path(path, flag)
    if p.suffix.lower() == ".json":
        raise ValueError(f"{flag} {str(path)!r} names the Markdown report and the JSON goes beside it with the suffix "
                         f".json, so both would be {p.name}; give a .md path (e.g. {p.with_suffix('.md')})")
    check_output_path(p.with_suffix(".json"), f"{flag} (its .json report)")
    return p
