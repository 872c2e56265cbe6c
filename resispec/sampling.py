"""Inverse-CDF sampling and candidate drafting (numpy, float64).

All randomness enters through a ``numpy.random.Generator`` or through explicit
uniforms, so seeding lives in one place.  Sampling is by inverse CDF in
token-id order: token ``min{j : cdf[j] > u * cdf[-1]}``.
"""

from __future__ import annotations

import numpy as np

from ._validation import as_law, check_drafting, check_k, check_rng

# Largest number of (row, token) comparisons done at once by inverse_cdf.
_CHUNK = 1 << 22


def inverse_cdf(law: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Sample one token per row by inverse CDF in token-id order.

    Parameters
    ----------
    law : ndarray, shape (B, V), float64
        Non-negative rows with positive sum (need not be exactly normalised:
        ``u`` is scaled by each row's total).
    u : ndarray, shape (B,) or (B, n), float64 in [0, 1)

    Returns
    -------
    ndarray, shape like ``u``, int64
        Token ids; a token of zero mass is never returned.

    Raises
    ------
    TypeError
        Non-numeric ``law`` or ``u``.
    ValueError
        ``law`` not 2-D, with negative or non-finite entries or an all-zero
        row; ``u`` of the wrong shape or outside [0, 1).
    """
    for name, x in (("law", law), ("u", u)):
        if isinstance(x, (str, bytes)) or x is None:
            raise TypeError(f"{name} must be a float array, got {type(x).__name__}")
        dt = np.asarray(x).dtype
        if dt == object or dt == bool or not (np.issubdtype(dt, np.floating) or np.issubdtype(dt, np.integer)):
            raise TypeError(f"{name} must be a real float array, got dtype {dt}")
    law = np.asarray(law, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    if law.ndim != 2 or law.shape[1] < 1:
        raise ValueError(f"law must have shape (B, V) with V >= 1, got {law.shape}; use law[None, :] for one row")
    if u.ndim not in (1, 2) or u.shape[0] != law.shape[0]:
        raise ValueError(f"u must have shape (B,) or (B, n) with B = {law.shape[0]} (rows of law), got {u.shape}")
    if not np.all(np.isfinite(law)) or np.any(law < 0):
        raise ValueError("law must be finite and non-negative")
    if np.any(law.sum(axis=1) <= 0):
        raise ValueError("law has an all-zero row; every row needs positive mass to sample from")
    if not np.all(np.isfinite(u)) or np.any(u < 0) or np.any(u >= 1):
        raise ValueError("u must be finite and lie in [0, 1)")
    return _inverse_cdf(law, u)


def _inverse_cdf(law: np.ndarray, u: np.ndarray) -> np.ndarray:
    """:func:`inverse_cdf` without input checks (callers pass validated float64)."""
    squeeze = u.ndim == 1
    u2 = u[:, None] if squeeze else u
    B, V = law.shape
    cdf = np.cumsum(law, axis=1)
    target = u2 * cdf[:, -1:]
    out = np.empty(u2.shape, dtype=np.int64)
    step = max(1, _CHUNK // max(1, V * u2.shape[1]))
    for s in range(0, B, step):
        out[s:s + step] = (cdf[s:s + step, None, :] <= target[s:s + step, :, None]).sum(axis=2)
    # Round-off can push u*total past the last cdf value: fall back to the last
    # token with positive mass (never a zero-mass token).
    last = V - 1 - np.argmax(law[:, ::-1] > 0, axis=1)
    out = np.minimum(out, last[:, None])
    return out[:, 0] if squeeze else out


def draw_candidates(q, k: int, drafting: str, rng: np.random.Generator) -> np.ndarray:
    """Pre-sample ``k`` candidate tokens per row from the draft law.

    Parameters
    ----------
    q : array_like, shape (V,) or (B, V), float64
        Draft law(s); rows sum to 1.
    k : int >= 1
        Candidates per node.
    drafting : {"iid", "without_replacement", "any"}
        ``"iid"`` (and ``"any"``) draw with replacement; ``"without_replacement"``
        uses successive sampling (``q_{i+1} = norm(q_i`` with ``x_i`` zeroed)),
        as in RSD (Jeon et al. 2024, arXiv 2402.14160).
    rng : numpy.random.Generator

    Returns
    -------
    ndarray, shape (B, k), int64 (B = 1 for 1-D ``q``)

    Raises
    ------
    ValueError
        Bad law, ``k < 1``, unknown drafting, or ``k`` larger than the
        draft's support under without-replacement drafting.
    """
    q2 = as_law(q, name="q")
    k = check_k(k)
    check_drafting(drafting)
    rng = check_rng(rng)
    B, V = q2.shape
    if drafting != "without_replacement":
        return _inverse_cdf(q2, rng.random((B, k)))
    support = (q2 > 0).sum(axis=1)
    if np.any(support < k):
        raise ValueError(
            f"k = {k} exceeds the draft support ({int(support.min())} tokens with q > 0) in some row; "
            "without-replacement drafting needs k <= support size"
        )
    out = np.empty((B, k), dtype=np.int64)
    qi = q2.copy()
    rows = np.arange(B)
    u = rng.random((B, k))
    for i in range(k):
        x = _inverse_cdf(qi, u[:, i])
        out[:, i] = x
        qi[rows, x] = 0.0
    return out
