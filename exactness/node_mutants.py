"""The planted bugs the node checks must catch that are not in :mod:`exactness.mutants` (issue 39, item 3).

:mod:`exactness.mutants` plants bugs inside ``resispec.Verifier`` subclasses (their ``chain`` and ``verify``);
the batch checks of a *black box* (only ``drafting`` and ``verify``: no ``chain``, no ``uniforms``) need black
boxes wrong only in some batches.  Each is exact on the calls it does not corrupt, so the marginal test over the
whole sample dilutes its bias and only the check named beside it sees it:

- :class:`RowMixer` -- mixes rows (row ``r`` verified with row ``r - 1``'s laws) in calls of more than two rows:
  ``batched_rows``;
- :class:`SmallBatchBias` -- emits token 0 on every call of at most 8 rows: ``small_batches``;
- :class:`PowerOfTwoBias` -- on calls of exactly 64 rows, verifies against the draft law (target ``p`` replaced by
  ``q``): ``batch_sizes``.

:data:`NODE_MUTANTS` maps every mutant a node check names (``NodeCheck.mutant``) to ``(factory, k)``: a factory
of the biased subject and the smallest number of candidates at which it is biased.
"""

from __future__ import annotations

import numpy as np


def _rrs():
    import resispec

    return resispec.get_verifier("rrs")


class _Box:
    """Recursive rejection sampling (Leviathan et al. 2023, arXiv 2211.17192; k > 1: SpecInfer, arXiv 2305.09781)
    behind a plain ``verify(p (B, V), q (B, V), candidates (B, k), rng) -> result``: the black-box route."""

    drafting = "iid"

    def __init__(self):
        self.v = _rrs()

    def verify(self, p, q, candidates, rng):
        return self.v.verify(p, q, candidates, rng)


class RowMixer(_Box):
    """Correct on calls of one or two rows; in larger calls row ``r`` is verified with row ``r - 1``'s laws."""

    def verify(self, p, q, candidates, rng):
        if np.shape(p)[0] > 2:
            p, q = np.roll(p, 1, axis=0), np.roll(q, 1, axis=0)    # rows mixed: a batch-reorder bug
        return self.v.verify(p, q, candidates, rng)


class SmallBatchBias(_Box):
    """Correct on calls of more than 8 rows; emits token 0 (a residual stop) on every call of at most 8."""

    def verify(self, p, q, candidates, rng):
        r = self.v.verify(p, q, candidates, rng)
        if np.shape(candidates)[0] <= 8:                          # a single-row / padding fast path gone wrong
            r.tokens[:], r.accepted[:] = 0, -1
        return r


class PowerOfTwoBias(_Box):
    """Correct except on calls of exactly 64 rows, which are verified against ``q`` as if it were the target."""

    def verify(self, p, q, candidates, rng):
        if np.shape(candidates)[0] == 64:
            p = q                                                  # the wrong law on one kernel path
        return self.v.verify(p, q, candidates, rng)


def _catalogue(name):
    def make():
        from .mutants import CATALOGUE

        return CATALOGUE[name]
    return make


def _too_generous():
    from .acceptance_bound import too_generous

    return too_generous(1.1)


#: mutant name -> (factory of the biased subject, smallest k at which it is biased).
NODE_MUTANTS = {
    "residual_is_p": (_catalogue("residual_is_p"), 1),
    "accepted_by_match": (_catalogue("accepted_by_match"), 2),
    "unseeded_residual": (_catalogue("unseeded_residual"), 1),
    "batch_broadcast": (_catalogue("batch_broadcast"), 1),
    "bonus_from_residual": (_catalogue("bonus_from_residual"), 1),
    "too_generous": (_too_generous, 1),
    "row_mixer": (RowMixer, 2),
    "small_batch_bias": (SmallBatchBias, 2),
    "power_of_two_bias": (PowerOfTwoBias, 2),
}
