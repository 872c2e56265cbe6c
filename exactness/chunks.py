"""The Monte Carlo draws of one cell, split into seeded chunks and counted as histograms that merge exactly.

``n`` draws at seed ``seed_seq`` in ``parts`` chunks (:func:`chunk_jobs`): ``parts == 1`` is one chunk drawn
with ``default_rng(seed_seq)``; ``parts = N > 1`` gives chunk ``i`` ``n // N`` draws (the first ``n % N`` chunks
one more) drawn with ``default_rng(seed_seq.spawn(N)[i])`` (numpy ``SeedSequence.spawn``: independent streams).
Each chunk is reduced to a :class:`DrawCounts` (token counts and (stop, token) counts); counts merge by
summation, which is exact and order-free, so the totals depend only on ``seed_seq``, ``n`` and ``parts`` --
never on the executor (``exactness.executors``) or on which machine drew which chunk.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import partial

import numpy as np

from . import limits
from .executors import executor_for
from .sampling import Draws, NodeSampler


@dataclass(frozen=True)
class DrawCounts:
    """Histograms of Monte Carlo draws at one node with ``k`` candidates over a vocabulary of ``V`` tokens.

    Attributes
    ----------
    tokens : ndarray, shape (V,), int64, emitted-token counts
    joint : ndarray, shape ((k + 1) V,), int64, or None
        Counts of ``stop * V + token`` (``stop`` = accepted candidate index, ``k`` for a residual token);
        None when ``verify`` returned no ``.accepted``, or accepted indices that break their contract (then the
        conditional checks are skipped).
    note : str or None
        Why the accepted indices were unusable (:func:`exactness.sampling.emitted_result`), None when they were
        fine or absent.
    by_batch : ndarray, shape (S, V), int64, or None
        Token counts by the batch-size class of the ``verify`` call that emitted them (row ``j``: calls of
        ``NodeSampler.batch_sizes[j]`` rows), on the generic path; None where the draws did not come from
        ``verify`` (table, fast paths).
    """

    tokens: np.ndarray
    joint: np.ndarray | None
    note: str | None = None
    by_batch: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.tokens.sum())

    def __add__(self, other: DrawCounts) -> DrawCounts:
        joint = None if self.joint is None or other.joint is None else self.joint + other.joint
        by_batch = None if self.by_batch is None or other.by_batch is None else self.by_batch + other.by_batch
        return DrawCounts(self.tokens + other.tokens, joint, self.note or other.note, by_batch)


#: Why the accepted indices were unusable when no message came with the draws.
BAD_ACCEPTED_NOTE = ("verify reported accepted indices that do not name the candidates it was given (out of "
                     "[-1, k), or tokens[b] != candidates[b, accepted[b]]): it drafts its own candidates, or "
                     "reports a flag")


def counts_of(draws: Draws, V: int, k: int, note: str | None = None, classes: int = 0) -> DrawCounts:
    """``DrawCounts`` of ``draws`` (tokens (n,) int64 in [0, V), accepted (n,) int64 in [-1, k), -2 = none or -3 =
    broke its contract, ``note`` saying why; ``batch`` (n,) the batch-size class, of ``classes`` classes, or
    None)."""
    from .sampling import BAD_ACCEPTED

    tokens = np.bincount(draws.tokens, minlength=V).astype(np.int64)
    by_batch = None
    if draws.batch is not None and classes:
        by_batch = np.bincount(draws.batch.astype(np.int64) * V + draws.tokens,
                               minlength=classes * V).astype(np.int64).reshape(classes, V)
    if not np.all(draws.accepted >= -1):
        bad = bool(np.any(draws.accepted == BAD_ACCEPTED))
        return DrawCounts(tokens, None, (note or BAD_ACCEPTED_NOTE) if bad else None, by_batch)
    stop = np.where(draws.accepted < 0, k, draws.accepted)
    return DrawCounts(tokens, np.bincount(stop * V + draws.tokens, minlength=(k + 1) * V).astype(np.int64),
                      None, by_batch)


def chunk_jobs(seed_seq: np.random.SeedSequence, n: int, parts: int) -> list[tuple[np.random.SeedSequence, int]]:
    """``[(seed, draws), ...]`` of the chunks (module docstring); chunks of 0 draws are left out.

    Spawns ``parts`` children of ``seed_seq`` when ``parts > 1`` (call once per ``seed_seq``: a second spawn
    gives other children).
    """
    if parts == 1:
        return [(seed_seq, n)]
    sizes = [n // parts + (i < n % parts) for i in range(parts)]
    return [(s, m) for s, m in zip(seed_seq.spawn(parts), sizes) if m]


def check_chunk_results(executor, jobs, results, size) -> list:
    """``results`` (one per job of ``jobs``, ``(seed, m)``) checked against the jobs: a plug-in executor that
    drops, adds or truncates chunks would silently change the draws behind the verdict.

    ``size(result)`` is the number of draws in a result (None: not a chunk result).  Raises RuntimeError naming
    the executor and the first bad chunk.
    """
    results = list(results)
    name = getattr(executor, "kind", type(executor).__name__)
    if len(results) != len(jobs):
        raise RuntimeError(f"executor {name!r} returned {len(results)} chunk results for {len(jobs)} chunks; "
                           "map_chunks must return one result per job, in order")
    for i, ((_, m), r) in enumerate(zip(jobs, results)):
        got = size(r)
        if got != m:
            raise RuntimeError(f"executor {name!r}: chunk {i} came back with "
                               + (f"{got:,} draws" if got is not None else f"a {type(r).__name__}")
                               + f", expected {m:,}; map_chunks must return fn(job) for each job")
    return results


def draw_chunk(sampler: NodeSampler, job) -> Draws:
    """The draws of one chunk ``job = (seed, m)``: ``sampler.draws(default_rng(seed), m)`` on a copy of the
    sampler, so every chunk starts from the same sampler state whichever process draws it."""
    seed, m = job
    return copy.copy(sampler).draws(np.random.default_rng(seed), m)


def count_chunk(sampler: NodeSampler, job) -> DrawCounts:
    """:func:`draw_chunk` reduced to its histograms (what a remote worker sends back: O(k V), not O(m)).

    Drawn and counted ``exactness.limits.CHUNK`` draws at a time (the same random stream as one
    ``draws`` call), so memory is O(CHUNK k + k V) whatever ``m``: the fixed-n certificate keeps no draws.
    """
    from . import sampling

    seed, m = job
    s = copy.copy(sampler)
    rng = np.random.default_rng(seed)
    total = None
    for start in range(0, m, limits.CHUNK):
        c = counts_of(s.draws(rng, min(limits.CHUNK, m - start)), sampler.V, sampler.k, s.accepted_note,
                      len(sampler.batch_sizes))
        total = c if total is None else total + c
    return total


def mc_counts(sampler: NodeSampler, seed_seq: np.random.SeedSequence, n: int, parts: int,
              executor="process", **options) -> DrawCounts:
    """Counts of ``n`` draws of ``sampler`` in ``parts`` chunks run by ``executor`` (a name of
    ``exactness.executors.EXECUTORS`` built with ``workers=parts`` and ``options``, or an ``Executor``).

    The same counts for every executor (module docstring).  A chunk that raises re-raises here; a worker that
    dies (the verifier ended or crashed its process) is an :class:`exactness.SubjectError` naming its ``verify``.
    """
    from .executors import subject_deaths

    jobs = chunk_jobs(seed_seq, n, parts)
    with executor_for(executor, workers=parts, **options) as ex, \
            subject_deaths(f"{type(sampler.verifier).__name__}.verify", parts):
        parts_ = check_chunk_results(ex, jobs, ex.map_chunks(partial(count_chunk, sampler), jobs),
                                     lambda c: c.n if isinstance(c, DrawCounts) else None)
    total = parts_[0]
    for c in parts_[1:]:
        total = total + c
    return total
