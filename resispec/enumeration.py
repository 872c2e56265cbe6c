"""Enumeration of candidate tuples with their exact draft probabilities."""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

#: Largest number of candidate tuples any exact enumeration will visit.
MAX_TUPLES = 2_000_000


def count_tuples(n_support: int, k: int, drafting: str) -> int:
    """Number of candidate tuples with positive probability."""
    if drafting == "without_replacement":
        return math.perm(n_support, k) if k <= n_support else 0
    return n_support ** k


def candidate_tuples(q: np.ndarray, k: int, drafting: str, *, chunk_rows: int = 65536,
                     limit: int = MAX_TUPLES) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(tuples (n, k) int64, probs (n,) float64)`` covering every draw.

    Parameters
    ----------
    q : ndarray, shape (V,), float64
        Draft law of one node.
    k : int
    drafting : {"iid", "any", "without_replacement"}
        "iid"/"any": independent draws; "without_replacement": successive
        sampling (RSD, arXiv 2402.14160).

    Raises
    ------
    ValueError
        More than ``limit`` tuples (the message says how many), or ``k``
        larger than the draft support under without-replacement drafting.
    """
    support = np.flatnonzero(q > 0)
    n = support.size
    if drafting == "without_replacement" and k > n:
        raise ValueError(f"k = {k} exceeds the draft support ({n} tokens) for without-replacement drafting")
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1 (largest number of candidate tuples), got {limit!r}")
    total = count_tuples(n, k, drafting)
    if total > limit:
        shown = f"{total:,}" if total < 10**30 else f"about 10^{math.log10(n) * k:.0f}" if drafting != "without_replacement" \
            else f"more than 10^30"
        raise ValueError(
            f"exact enumeration needs {shown} candidate tuples (support {n}, k = {k}, {drafting}); "
            f"the limit is {limit:,}: use a smaller vocabulary or k, or Monte Carlo"
        )
    if drafting == "without_replacement":
        it = itertools.permutations(range(n), k)
        while True:
            block = np.fromiter(itertools.chain.from_iterable(itertools.islice(it, chunk_rows)), dtype=np.int64)
            if block.size == 0:
                return
            idx = block.reshape(-1, k)
            tup = support[idx]
            qt = q[tup]
            before = np.concatenate([np.zeros((qt.shape[0], 1)), np.cumsum(qt, axis=1)[:, :-1]], axis=1)
            probs = np.prod(qt / np.maximum(1.0 - before, 1e-300), axis=1)
            yield tup, probs
    else:
        powers = n ** np.arange(k - 1, -1, -1, dtype=np.int64)
        for s in range(0, total, chunk_rows):
            t = np.arange(s, min(total, s + chunk_rows), dtype=np.int64)
            idx = (t[:, None] // powers[None, :]) % n
            tup = support[idx]
            yield tup, np.prod(q[tup], axis=1)
