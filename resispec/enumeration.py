"""Enumeration of candidate tuples with their exact draft probabilities."""

from __future__ import annotations

import itertools
import math
from typing import Iterator

import numpy as np

#: Largest number of candidate tuples any exact enumeration will visit.
MAX_TUPLES = 2_000_000


def check_limit(limit) -> int:
    """Validate ``limit`` (largest number of candidate tuples, an int >= 1); ValueError otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
        raise ValueError(f"limit must be an integer >= 1 (largest number of candidate tuples), got {limit!r}")
    return int(limit)


def count_tuples(n_support: int, k: int, drafting: str) -> int:
    """Number of candidate tuples with positive probability."""
    if drafting == "without_replacement":
        return math.perm(n_support, k) if k <= n_support else 0
    return n_support ** k


def remaining_mass(q_support: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Draft mass left before each successive draw, without cancellation.

    Parameters
    ----------
    q_support : ndarray, shape (n,), float64
        Draft probabilities of the support tokens (need not sum to exactly 1).
    idx : ndarray, shape (R, k), int64
        Ordered draws (indices into ``q_support``, distinct within a row).

    Returns
    -------
    ndarray, shape (R, k), float64
        ``out[r, j] = sum of q_support over the tokens not in idx[r, :j]`` --
        the normaliser of the j-th successive draw.  ``sum(q) - cumsum`` loses
        every digit when the drawn tokens hold nearly all the mass (a draft
        with ``q_top = 1 - 1e-12``), so rows where it would keep fewer than
        all but two bits are summed over the remaining entries instead.
    """
    R, k = idx.shape
    total = float(q_support.sum())
    out = np.empty((R, k))
    out[:, 0] = total
    if k == 1:
        return out
    out[:, 1:] = total - np.cumsum(q_support[idx[:, :-1]], axis=1)
    # relative error of the subtraction <= ~k eps total / out: exact sums below total / 4
    rows = np.flatnonzero(np.any(out[:, 1:] < 0.25 * total, axis=1))
    step = max(1, (1 << 22) // max(1, q_support.size))
    for s in range(0, rows.size, step):
        r = rows[s:s + step]
        left = np.broadcast_to(q_support, (r.size, q_support.size)).copy()
        sub = np.arange(r.size)
        for j in range(1, k):
            left[sub, idx[r, j - 1]] = 0.0
            out[r, j] = left.sum(axis=1)
    return out


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

    Each weight is the probability of the tuple when drawing from
    ``q / sum(q)`` (as :func:`resispec.sampling.draw_candidates` does; rows
    may be off 1 by ``SUM_TOL``); the successive-sampling normalisers are
    summed over the tokens still left (:func:`remaining_mass`), so drafts
    whose top token rounds to probability 1 keep full precision.

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
    check_limit(limit)
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
            yield tup, np.prod(qt / remaining_mass(q[support], idx), axis=1)
    else:
        total_q = float(q[support].sum())  # the sampler draws q / sum(q) (rows may be off 1 by SUM_TOL)
        powers = n ** np.arange(k - 1, -1, -1, dtype=np.int64)
        for s in range(0, total, chunk_rows):
            t = np.arange(s, min(total, s + chunk_rows), dtype=np.int64)
            idx = (t[:, None] // powers[None, :]) % n
            tup = support[idx]
            yield tup, np.prod(q[tup] / total_q, axis=1)
