"""Input checks shared by every verifier and analysis function.

Every check raises ``ValueError`` / ``TypeError`` naming the argument and the
fix; nothing is silently repaired except documented up-casting to float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Rows of ``p`` and ``q`` must sum to 1 within this absolute tolerance.
SUM_TOL = 1e-6

DRAFTINGS = ("iid", "without_replacement", "any")

#: Largest candidate count ``k`` any function accepts (a guard against
#: ``k = 10**9`` hanging a per-candidate loop or allocating terabytes).
MAX_K = 1 << 16


def as_laws(p, q, *, names=("p", "q")) -> tuple[np.ndarray, np.ndarray, bool]:
    """Validate a target/draft pair and return them as 2-D float64 arrays.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (B, V)
        Target and draft laws; rows non-negative, finite, summing to 1
        (tolerance ``SUM_TOL``).

    Returns
    -------
    p2, q2 : ndarray, shape (B, V), float64
    squeeze : bool
        True when the inputs were 1-D (one node, B = 1).

    Raises
    ------
    TypeError
        Non-numeric input.
    ValueError
        Shape mismatch, negative, non-finite or non-normalised rows.
    """
    p2 = as_law(p, name=names[0])
    q2 = as_law(q, name=names[1])
    squeeze = np.ndim(p) == 1 and np.ndim(q) == 1
    if p2.shape != q2.shape:
        if p2.shape[0] == 1 and q2.shape[1] == p2.shape[1]:
            p2 = np.broadcast_to(p2, q2.shape)
        elif q2.shape[0] == 1 and q2.shape[1] == p2.shape[1]:
            q2 = np.broadcast_to(q2, p2.shape)
        else:
            raise ValueError(
                f"{names[0]} has shape {np.shape(p)} but {names[1]} has shape {np.shape(q)}; "
                "target and draft must both be (V,) or (B, V) over the same vocabulary"
            )
    return p2, q2, squeeze


@dataclass(frozen=True, eq=False)
class Laws:
    """A target/draft pair already checked at the door: the one validated type inner code trusts.

    Made by :func:`as_node` (which runs :func:`as_laws` once); never build one
    from unchecked arrays.  Public functions that take ``p, q`` also take a
    ``Laws`` as ``p`` with ``q=None`` and do not re-validate it.

    Attributes
    ----------
    p, q : ndarray, shape (B, V), float64
        Rows non-negative, finite, summing to 1 within ``SUM_TOL``.
    squeeze : bool
        True when the caller passed 1-D laws (one node): results come back 1-D.
    """

    p: np.ndarray
    q: np.ndarray
    squeeze: bool = False

    def __iter__(self):
        """``p2, q2, squeeze = laws`` (the tuple :func:`as_laws` returns)."""
        return iter((self.p, self.q, self.squeeze))

    @property
    def shape(self) -> tuple[int, int]:
        """``(B, V)``."""
        return self.p.shape

    def row(self, b: int) -> "Laws":
        """Node ``b`` alone: a one-row ``Laws`` (shape (1, V), ``squeeze=True``), still trusted."""
        return Laws(self.p[b:b + 1], self.q[b:b + 1], True)


def as_node(p, q=None, *, names=("p", "q")) -> Laws:
    """Check ``p, q`` once at the door and return them as a trusted :class:`Laws`.

    Parameters
    ----------
    p : array_like, shape (V,) or (B, V), or Laws
        Target law(s); a ``Laws`` (from an earlier ``as_node``) is returned
        unchanged, not re-validated, and then ``q`` must be None.
    q : array_like, shape (V,) or (B, V)
        Draft law(s).
    names : (str, str)
        Argument names used in error messages.

    Returns
    -------
    Laws
        ``p, q`` of shape (B, V), float64 (see :func:`as_laws`).

    Raises
    ------
    TypeError, ValueError
        As :func:`as_laws` (the only place the rules live); TypeError when a
        ``Laws`` comes with a ``q``.
    """
    if isinstance(p, Laws):
        if q is not None:
            raise TypeError(f"{names[0]} is already a validated Laws (target and draft); pass {names[1]}=None")
        return p
    return Laws(*as_laws(p, q, names=names))


def c_writable(a) -> np.ndarray:
    """``a`` (array_like) as a writable C-contiguous float64 array, copied unless it already is one (what torch
    wraps without its read-only warning).  The compiled kernels keep their own copy
    (``resispec._wor_fused._c_writable``): they import only the kernel floor (``tests/test_architecture.py``)."""
    a = np.asarray(a)
    if a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable:
        return a
    return np.array(a, dtype=np.float64, order="C")


def shares_one_row(x) -> bool:
    """True when the (B, V) array ``x`` (B > 1) repeats one row without copies (row stride 0, ``np.broadcast_to``)."""
    return isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[0] > 1 and x.strides[0] == 0


def as_law(x, *, name: str) -> np.ndarray:
    """Validate one law (or a batch of laws); return (B, V) float64.

    A batch that repeats one node -- a (B, V) array with row stride 0
    (``np.broadcast_to``), or a list / tuple holding the same 1-D array
    object B times -- is checked once and returned as a read-only (B, V)
    broadcast view of that row (O(V) work and memory, not O(B V)).
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be an array of probabilities, got {type(x).__name__}")
    if isinstance(x, (list, tuple)) and len(x) > 1 and isinstance(x[0], np.ndarray) and x[0].ndim == 1 \
            and all(row is x[0] for row in x):
        x = np.broadcast_to(x[0], (len(x), x[0].size))
    if shares_one_row(x):
        return np.broadcast_to(as_law(x[0], name=name)[0], x.shape)
    try:
        arr = np.asarray(x)
    except Exception as exc:  # pragma: no cover - exotic objects
        raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
                                   or arr.dtype == bool):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    in_dtype = arr.dtype
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (V,) or (B, V), got shape {arr.shape}")
    if arr.shape[1] < 1 or arr.shape[0] < 1:
        raise ValueError(f"{name} must have at least one row and one token, got shape {arr.shape}")
    # float64 in C order (a copy only where needed): row sums along axis 1 round by layout, and a verifier must
    # decide the same whatever the layout
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; pass finite probabilities")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries (min {arr.min():.3g}); laws must be non-negative")
    sums = arr.sum(axis=1)
    bad = np.abs(sums - 1.0) > SUM_TOL
    if np.any(bad):
        i = int(np.argmax(bad))
        hint = "" if in_dtype == np.float64 else (
            f" (it arrived as {in_dtype}: cast to float64 and renormalise, "
            f"{name} = {name}.astype(np.float64); {name} /= {name}.sum(-1, keepdims=True))")
        raise ValueError(
            f"{name} row {i} sums to {float(sums[i])!r}, not 1 (tolerance {SUM_TOL}); normalise it first{hint}"
        )
    return arr


def check_k(k) -> int:
    """Validate a candidate count ``k`` (int, 1 <= k <= ``MAX_K`` = 65536).

    Raises TypeError for a non-integer (``2.0``, ``True``), ValueError for
    ``k < 1`` or ``k > MAX_K`` (a guard against hangs and huge allocations).
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if k > MAX_K:
        raise ValueError(f"k = {k} is larger than MAX_K = {MAX_K} candidates per node; use a smaller k")
    return int(k)


def check_drafting(drafting: str) -> str:
    """Validate a drafting name (``"iid"``, ``"without_replacement"``, ``"any"``); ValueError otherwise."""
    if drafting not in DRAFTINGS:
        raise ValueError(f"drafting must be one of {DRAFTINGS}, got {drafting!r}")
    return drafting


def as_candidates(candidates, q2: np.ndarray, *, drafting: str | None = None) -> np.ndarray:
    """Validate candidate ids against the draft law.

    Parameters
    ----------
    candidates : array_like of int, shape (k,) or (B, k)
    q2 : ndarray, shape (B, V), float64
    drafting : {"iid", "without_replacement", "any"}, optional
        With "without_replacement", repeated ids in a row are an error.

    Returns
    -------
    ndarray, shape (B, k), int64

    Raises
    ------
    TypeError
        Non-integer ids.
    ValueError
        Wrong shape, more than ``MAX_K`` candidates per row, ids out of ``[0, V)``, a candidate whose draft
        probability is 0 (it cannot have been drafted), or repeats under
        without-replacement drafting.
    """
    c = np.asarray(candidates)
    if c.dtype == bool or not np.issubdtype(c.dtype, np.integer):
        if np.issubdtype(c.dtype, np.floating) and c.size and np.all(np.mod(c, 1) == 0):
            raise TypeError("candidates must be an integer array (int64 token ids), got floats; cast with .astype(np.int64)")
        raise TypeError(f"candidates must be an integer array of token ids, got dtype {c.dtype}")
    c = c.astype(np.int64, copy=False)
    B, V = q2.shape
    if c.ndim == 1:
        c = c[None, :]
    if c.ndim != 2 or c.shape[1] < 1:
        raise ValueError(f"candidates must have shape (k,) or (B, k) with k >= 1, got {np.shape(candidates)}")
    if c.shape[1] > MAX_K:
        raise ValueError(f"candidates has k = {c.shape[1]} columns, more than MAX_K = {MAX_K} candidates per node; "
                         "verify fewer candidates")
    if c.shape[0] != B:
        if B == 1:
            raise ValueError(f"candidates has {c.shape[0]} rows but p/q have 1; pass (B, V) laws for a batch")
        raise ValueError(f"candidates has {c.shape[0]} rows but p/q have B = {B}; one row of candidates per node")
    if np.any(c < 0) or np.any(c >= V):
        raise ValueError(f"candidates contains ids outside [0, {V}); token ids must index the vocabulary")
    qc = np.take_along_axis(q2, c, axis=1)
    if np.any(qc <= 0):
        b, j = np.argwhere(qc <= 0)[0]
        raise ValueError(
            f"candidates[{b}, {j}] = {c[b, j]} has draft probability q = 0, so it cannot have been drafted; "
            "candidates must be sampled from q"
        )
    if drafting == "without_replacement" and c.shape[1] > 1:
        s = np.sort(c, axis=1)
        if np.any(s[:, 1:] == s[:, :-1]):
            raise ValueError("candidates repeat a token within a row, but drafting='without_replacement' requires distinct ids")
    return c


def as_uniforms(uniforms, B: int, k: int) -> np.ndarray:
    """Validate explicit uniforms: shape (B, k + 1), float64 in [0, 1)."""
    if isinstance(uniforms, (str, bytes)):
        raise TypeError(f"uniforms must be a float array of shape (B, k + 1), got {type(uniforms).__name__}")
    try:
        raw = np.asarray(uniforms)
    except ValueError as e:                      # ragged nested lists
        raise ValueError(f"uniforms must be a rectangular float array of shape (B, k + 1) = ({B}, {k + 1}); "
                         f"numpy could not make one of it ({e})") from None
    if raw.dtype == object or raw.dtype == bool or not (np.issubdtype(raw.dtype, np.floating)
                                                        or np.issubdtype(raw.dtype, np.integer)):
        raise TypeError(f"uniforms must be a real float array of shape (B, k + 1), got dtype {raw.dtype}")
    u = raw.astype(np.float64, copy=False)
    if u is not raw and np.all(raw < 1) and np.any(u >= 1):
        raise ValueError(f"uniforms must lie in [0, 1) in float64: a {raw.dtype} value below 1 rounds to 1.0; "
                         "draw them as float64 (numpy.random.Generator.random)")
    if u.ndim == 1 and B == 1:
        u = u[None, :]
    if u.shape != (B, k + 1):
        raise ValueError(f"uniforms must have shape (B, k + 1) = ({B}, {k + 1}), got {u.shape}")
    if not np.all(np.isfinite(u)) or np.any(u < 0) or np.any(u >= 1):
        raise ValueError("uniforms must be finite and lie in [0, 1)")
    return u


def check_rng(rng) -> np.random.Generator:
    """Require a ``numpy.random.Generator``; TypeError naming ``rng`` otherwise."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. numpy.random.default_rng(0)), got {type(rng).__name__}"
        )
    return rng
