"""Input checks for the harness: laws, sample sizes, sampler outputs.

Every check raises ``ValueError`` / ``TypeError`` naming the argument and the
fix; nothing is silently repaired.
"""

from __future__ import annotations

import warnings

import numpy as np

#: A law must sum to 1 within this absolute tolerance.
SUM_TOL = 1e-6


class ExactnessWarning(UserWarning):
    """The requested power cannot be reached with the given number of samples."""


def check_law(law, *, name: str = "law") -> np.ndarray:
    """Validate one law: (V,) float64, finite, non-negative, summing to 1.

    Raises
    ------
    TypeError
        Non-numeric input.
    ValueError
        Wrong shape, NaN/inf, negative entries, or a sum off 1 by more than
        ``SUM_TOL``.
    """
    if isinstance(law, (str, bytes)) or law is None:
        raise TypeError(f"{name} must be a (V,) array of probabilities, got {type(law).__name__}")
    arr = np.asarray(law)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim != 1 or arr.size < 1:
        raise ValueError(f"{name} must have shape (V,) with V >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; pass finite probabilities")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries (min {arr.min():.3g}); a law must be non-negative")
    s = float(arr.sum())
    if abs(s - 1.0) > SUM_TOL:
        raise ValueError(f"{name} sums to {s!r}, not 1 (tolerance {SUM_TOL}); normalise it first")
    return arr


def check_n(n, *, name: str = "n") -> int:
    """Validate a sample size (integer >= 1)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an integer number of samples, got {n!r}")
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return int(n)


def check_alpha(alpha, *, name: str = "alpha") -> float:
    """Validate a significance level in (0, 1)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)):
        raise TypeError(f"{name} must be a float in (0, 1), got {alpha!r}")
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"{name} must lie in (0, 1), got {alpha}")
    return float(alpha)


def check_tokens(tokens, V: int, expected: int, *, name: str = "sample(rng, n)") -> np.ndarray:
    """Validate sampler output: (expected,) integer ids in [0, V).

    Raises
    ------
    TypeError
        Non-integer dtype (floats, bools, objects): the sampler must return
        int64 token ids.
    ValueError
        Wrong shape or ids outside ``[0, V)``.
    """
    t = np.asarray(tokens)
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"{name} returned dtype {t.dtype}; it must return integer token ids (int64)")
    if t.shape != (expected,):
        raise ValueError(f"{name} returned shape {t.shape}; expected ({expected},), one token id per draw")
    if t.size and (t.min() < 0 or t.max() >= V):
        raise ValueError(f"{name} returned ids in [{t.min()}, {t.max()}], outside [0, {V}) of the law's vocabulary")
    return t.astype(np.int64, copy=False)


def as_generator(seed) -> np.random.Generator:
    """``numpy.random.Generator`` from a seed (int / SeedSequence) or pass one through."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not (seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence))):
        raise TypeError(f"seed must be an int, a SeedSequence or a numpy Generator, got {seed!r}")
    if isinstance(seed, (int, np.integer)) and seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(seed)


def check_tv(tv, *, name: str = "tv"):
    """``None`` or a TV in (0, 1] (the smallest bias to detect); TypeError / ValueError otherwise."""
    if tv is None:
        return None
    if isinstance(tv, bool) or not isinstance(tv, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float in (0, 1] (the smallest TV bias to detect), got {tv!r}")
    if not 0 < float(tv) <= 1:  # also rejects NaN
        raise ValueError(f"{name} must lie in (0, 1] (the smallest TV bias to detect), got {tv!r}")
    return float(tv)


def warn_power(detectable: float, tv: float | None, n: int, needed: int | None, alpha: float, power: float) -> None:
    """Warn when ``n`` samples cannot detect the requested TV at the requested power."""
    if tv is not None and detectable > tv:
        warnings.warn(
            f"too few samples for the requested power: with n = {n:,} the detectable TV at alpha = {alpha:g} "
            f"and power = {power:g} is {detectable:.3g} > requested {tv:.3g}"
            + (f"; about n = {needed:,} samples are needed" if needed else ""),
            ExactnessWarning, stacklevel=3)
