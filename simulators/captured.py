"""Captured (p, q) laws from real decoding nodes, as the pair family ``captured``.

``resispec capture`` runs the real draft/target pair and stores, at every
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
    """Read and renormalise a capture file (default: ``$RESISPEC_CAPTURE`` or the built-in one).

    Raises
    ------
    FileNotFoundError
        Missing file.
    ValueError
        A file without the expected arrays, or a row with no target or draft mass.
    """
    path = Path(path or os.environ.get("RESISPEC_CAPTURE") or BUILTIN_CAPTURE)
    if not path.is_file():
        raise FileNotFoundError(f"capture file {path} does not exist; record one with `resispec capture`")
    return _load(str(path.resolve()), path.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _load(path: str, _mtime: int) -> Capture:
    with np.load(path, allow_pickle=False) as z:
        missing = {"index", "p", "q", "depth", "meta"} - set(z.files)
        if missing:
            raise ValueError(f"{path} is not a resispec capture (missing arrays {sorted(missing)})")
        index, pr, qr, depth, meta = z["index"], z["p"].astype(np.float64), z["q"].astype(np.float64), z["depth"], \
            json.loads(str(z["meta"]))
    cp, cq = pr.sum(axis=1), qr.sum(axis=1)
    if np.any(cp <= 0) or np.any(cq <= 0):
        raise ValueError(f"{path}: some rows carry no target or draft mass; the file is corrupt")
    return Capture(pr / cp[:, None], qr / cq[:, None], index, depth, cp, cq, meta)


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
                    "renormalised); $RESISPEC_CAPTURE or path= for another `resispec capture` file",
        _captured, {"path": None}, fixed_vocab=vocab))


_register()
