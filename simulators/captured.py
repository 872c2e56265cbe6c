"""Captured (p, q) laws from real decoding nodes, as the pair family ``captured``.

``resispec bench decode --capture FILE.npz`` runs the real draft/target pair and stores, at every
verified tree node, the target law ``p`` and the draft law ``q`` as sparse
rows: the union of the top-N tokens of ``p`` and of ``q`` (at most ``2N``
slots, zero-padded), with the raw probabilities.  Reading renormalises
each row over its stored support in float64, so ``p`` and ``q`` are exact
laws over a compact vocabulary of ``M = 2N`` slots; the mass left outside
(``covered_p``, ``covered_q`` in the file) is reported, not hidden.

File format (``.npz``, numpy only)::

    index    (n, M) int32    token id of each slot (-1 = padding)
    p, q     (n, M) float32  raw target / draft probability of each slot
    depth    (n,)   int16    tree depth of the node (0 = root of a step)
    meta     0-d str         JSON: models, temperature, prompts, top_n, ...

The family ``captured`` samples stored nodes uniformly (with replacement);
a temperature ``T != 1`` is applied as ``p^(1/T)`` renormalised on the
stored support, which equals ``softmax(logits / T)`` restricted to it when
the capture was made at ``T = 1``.  It reads the built-in capture (real
Qwen2.5-Coder 1.5B/0.5B on HumanEval) unless ``$RESISPEC_CAPTURE`` or the
``path=`` parameter names another file.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .families import PairFamily, register_family

#: The capture committed with the package.
BUILTIN_CAPTURE = Path(__file__).with_name("captured_qwen25coder_humaneval.npz")


@dataclass(frozen=True)
class Capture:
    """Captured nodes, renormalised.

    Attributes
    ----------
    p, q : ndarray, shape (n, M), float64
        Target / draft laws over each row's stored slots; rows sum to 1.
    index : ndarray, shape (n, M), int32
        Token id per slot (-1 = padding, zero mass).
    depth : ndarray, shape (n,), int16
    covered_p, covered_q : ndarray, shape (n,), float64
        Raw mass of the stored slots before renormalisation.
    meta : dict
    """

    p: np.ndarray
    q: np.ndarray
    index: np.ndarray
    depth: np.ndarray
    covered_p: np.ndarray
    covered_q: np.ndarray
    meta: dict

    @property
    def vocab(self) -> int:
        return int(self.p.shape[1])

    def __len__(self) -> int:
        return int(self.p.shape[0])


def sparsify(p: np.ndarray, q: np.ndarray, top_n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of the top-``top_n`` tokens of ``p`` and of ``q``, per row.

    Parameters
    ----------
    p, q : ndarray, shape (B, V), float64
    top_n : int >= 1

    Returns
    -------
    index : (B, 2 * top_n) int32, padded with -1
    p_vals, q_vals : (B, 2 * top_n) float32 raw probabilities (0 at padding)
    """
    p = np.atleast_2d(np.asarray(p, dtype=np.float64))
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    if p.shape != q.shape:
        raise ValueError(f"p has shape {p.shape} but q has shape {q.shape}")
    if isinstance(top_n, bool) or not isinstance(top_n, (int, np.integer)) or top_n < 1:
        raise ValueError(f"top_n must be an integer >= 1, got {top_n!r}")
    B, V = p.shape
    n = min(int(top_n), V)
    M = 2 * n
    index = np.full((B, M), -1, dtype=np.int32)
    pv = np.zeros((B, M), dtype=np.float32)
    qv = np.zeros((B, M), dtype=np.float32)
    for b in range(B):
        top = np.union1d(np.argpartition(-p[b], n - 1)[:n], np.argpartition(-q[b], n - 1)[:n])
        index[b, :len(top)] = top
        pv[b, :len(top)] = p[b, top]
        qv[b, :len(top)] = q[b, top]
    return index, pv, qv


def save_capture(path, index, p_vals, q_vals, depth, meta: dict) -> Path:
    """Write a capture file atomically (temp file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem + ".", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez_compressed(tmp, index=np.asarray(index, np.int32), p=np.asarray(p_vals, np.float32),
                            q=np.asarray(q_vals, np.float32), depth=np.asarray(depth, np.int16),
                            meta=np.array(json.dumps(meta)))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def load_capture(path=None) -> Capture:
    """Read, check and renormalise a capture file (default: ``$RESISPEC_CAPTURE`` or the built-in one).

    Returns
    -------
    Capture  (memoised per file path and modification time)

    Raises
    ------
    FileNotFoundError
        Missing file.
    ValueError
        The message names the file, the field and the first bad row: not an
        ``.npz`` file (or truncated), missing or object (pickled) arrays,
        ``index``/``p``/``q`` not all of shape ``(n, M)`` or ``depth`` not of
        shape ``(n,)``, non-integer ``index``/``depth``, NaN, infinite or
        negative probabilities, a row with no target or draft mass, positive
        mass on a padding slot (``index == -1``), a row that does not sum to
        1 after renormalisation, or ``meta`` that is not a JSON object.
    """
    path = Path(path or os.environ.get("RESISPEC_CAPTURE") or BUILTIN_CAPTURE)
    if not path.is_file():
        raise FileNotFoundError(f"capture file {path} does not exist; record one with "
                                "`resispec bench decode --capture FILE.npz`")
    return _load(str(path.resolve()), path.stat().st_mtime_ns)


_FIELDS = ("index", "p", "q", "depth", "meta")


def _read_arrays(path: str) -> dict:
    try:
        z = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"capture file {path} is not a readable .npz file (truncated or another format: "
                         f"{exc}); record one with `resispec bench decode --capture FILE.npz`") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"capture file {path} holds a single array, not a resispec capture (.npz with "
                         f"fields {list(_FIELDS)})")
    with z:
        missing = set(_FIELDS) - set(z.files)
        if missing:
            raise ValueError(f"capture file {path} is not a resispec capture (missing arrays {sorted(missing)})")
        out = {}
        for name in _FIELDS:
            try:
                out[name] = z[name]
            except ValueError as exc:  # object arrays need pickle, which is never allowed
                raise ValueError(f"capture file {path}: field {name!r} cannot be read without pickle ({exc}); "
                                 "a capture holds only numeric arrays and a JSON string") from None
            except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
                raise ValueError(f"capture file {path}: field {name!r} is corrupt or truncated ({exc})") from None
    return out


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _check(path: str, a: dict):
    index, depth = a["index"], a["depth"]
    if a["p"].ndim != 2:
        raise ValueError(f"capture file {path}: field 'p' must have shape (n, M), got {a['p'].shape}")
    n, M = a["p"].shape
    for name in ("q", "index"):
        if a[name].shape != (n, M):
            raise ValueError(f"capture file {path}: field {name!r} has shape {a[name].shape}, but 'p' has "
                             f"{(n, M)}; every row must pair the same node's p, q and token ids")
    if depth.shape != (n,):
        raise ValueError(f"capture file {path}: field 'depth' has shape {depth.shape}, expected ({n},) "
                         "(one tree depth per row)")
    if n == 0 or M == 0:
        raise ValueError(f"capture file {path} holds no nodes (p has shape {(n, M)})")
    for name in ("index", "depth"):
        if a[name].dtype.kind not in "iu":
            raise ValueError(f"capture file {path}: field {name!r} must be integers, got dtype {a[name].dtype}")
    if depth.min() < 0:
        raise ValueError(f"capture file {path}: field 'depth' row {_first_bad(depth < 0)} is negative")
    if index.min() < -1:
        raise ValueError(f"capture file {path}: field 'index' row {_first_bad((index < -1).any(axis=1))} holds "
                         "a token id below -1 (-1 marks padding)")
    if depth.max() > np.iinfo(np.int16).max:
        raise ValueError(f"capture file {path}: field 'depth' row {_first_bad(depth > np.iinfo(np.int16).max)} is "
                         f"larger than {np.iinfo(np.int16).max} (tree depths are int16)")
    if index.max() > np.iinfo(np.int32).max:
        raise ValueError(f"capture file {path}: field 'index' row {_first_bad((index > np.iinfo(np.int32).max).any(axis=1))}"
                         f" holds a token id larger than {np.iinfo(np.int32).max} (token ids are int32)")
    ids = np.where(index >= 0, index, -1 - np.arange(M)[None, :])   # padding slots never collide
    srt = np.sort(ids, axis=1)
    dup = (srt[:, 1:] == srt[:, :-1]).any(axis=1)
    if dup.any():
        raise ValueError(f"capture file {path}: field 'index' row {_first_bad(dup)} lists a token id twice "
                         "(each slot must be a distinct token)")
    laws = {}
    for name in ("p", "q"):
        if a[name].dtype.kind != "f":
            raise ValueError(f"capture file {path}: field {name!r} must be floats, got dtype {a[name].dtype}")
        x = a[name].astype(np.float64)
        bad = ~np.isfinite(x).all(axis=1)
        if bad.any():
            raise ValueError(f"capture file {path}: field {name!r} row {_first_bad(bad)} holds NaN or infinity")
        bad = (x < 0).any(axis=1)
        if bad.any():
            raise ValueError(f"capture file {path}: field {name!r} row {_first_bad(bad)} holds a negative "
                             "probability")
        bad = ((index < 0) & (x > 0)).any(axis=1)
        if bad.any():
            raise ValueError(f"capture file {path}: field {name!r} row {_first_bad(bad)} puts mass on a padding "
                             "slot (index -1)")
        with np.errstate(over="ignore", invalid="ignore"):
            mass = x.sum(axis=1)
        bad = ~(mass > 0)
        if bad.any():
            raise ValueError(f"capture file {path}: field {name!r} row {_first_bad(bad)} carries no mass; the "
                             "file is corrupt")
        with np.errstate(over="ignore", invalid="ignore"):
            law = x / mass[:, None]
            bad = ~(np.abs(law.sum(axis=1) - 1.0) <= 1e-9)
        if bad.any():
            raise ValueError(f"capture file {path}: field {name!r} row {_first_bad(bad)} does not sum to 1 "
                             "after renormalisation (overflow)")
        laws[name] = (law, mass)
    try:
        meta = json.loads(str(a["meta"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"capture file {path}: field 'meta' is not JSON ({exc.msg})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"capture file {path}: field 'meta' must be a JSON object, got {type(meta).__name__}")
    return laws["p"], laws["q"], meta


@lru_cache(maxsize=8)
def _load(path: str, _mtime: int) -> Capture:
    a = _read_arrays(path)
    (p, cp), (q, cq), meta = _check(path, a)
    return Capture(p, q, a["index"].astype(np.int32), a["depth"].astype(np.int16), cp, cq, meta)


def _captured(rng, n, V, T, path=None):
    cap = load_capture(path)
    rows = rng.integers(0, len(cap), size=n)
    p, q = cap.p[rows], cap.q[rows]
    if T != 1.0:
        p, q = _temper(p, T), _temper(q, T)
    return p, q


def _temper(x: np.ndarray, T: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        logx = np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), -np.inf)
    z = logx / T
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _register() -> None:
    try:
        vocab = load_capture().vocab
    except (FileNotFoundError, ValueError):
        vocab = None  # no default capture: pass path= (sampling then fails with a clear error without it)
    register_family(PairFamily(
        "captured", "real (p, q) at Qwen2.5-Coder 1.5B/0.5B decoding nodes on HumanEval (sparse top-N union, "
                    "renormalised); $RESISPEC_CAPTURE or path= for another file of `resispec bench decode --capture`",
        _captured, {"path": None}, fixed_vocab=vocab))


_register()
