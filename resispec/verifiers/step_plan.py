"""A verifier's step at one node, declared as data that a checker can verify in O(V).

A sequential verifier (``docs/RESISPEC.md`` s.2) takes, at step ``i`` with
current target ``p_i`` and draft ``q_i``, an accepted mass ``m`` and, for
every token ``x`` it may reject, a residual ``r^(x)`` to continue from.  The
step is exact (emits ``p_i`` when the rest of the chain emits its own
target) iff::

    m + sum_x w(x) r^(x) = p_i,       w = q_i - m >= 0,  m >= 0,  r^(x) laws.

Checking that sum directly costs O(V^2) (one residual row per token).  A
:class:`StepPlan` states the rows in a form whose column sums are O(V):
``r^(x)`` is either the plain residual ``norm((p_i - m)_+)`` (all rows of
``rrs`` / ``rrs_wor``; the last step of every sequential rule) or, off
``x``, ``alpha(x) g + beta(x) h`` normalised, with ``r^(x)(x) = 0`` -- the
rank-two zero-diagonal rows of ResiSpec for without-replacement drafts
(the matched transport part ``w(x) q^(x) theta`` plus the rank-one leftover
plan ``u(x) norm(b`` without ``x)``; :mod:`resispec.verifiers.resispec_wor`).

:func:`exactness.certify_stepwise` checks the identity above at every state a
run visits and compares ``verify`` with the chain the plans define.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepPlan:
    """One step of a sequential verifier at one node (all arrays shape (V,)).

    Attributes
    ----------
    m : ndarray, float64
        Accepted mass: candidate ``x`` is accepted with probability ``m(x) / q_i(x)``.
    plain : ndarray, bool
        ``True`` at ``x``: rejecting ``x`` continues from ``norm((p_i - m)_+)`` (from ``p_i`` when that
        mass is below 1e-13, as :func:`resispec.verifiers.base.reject_update`).
    g, h, alpha, beta : ndarray, float64 >= 0
        Elsewhere rejecting ``x`` continues from ``r^(x)(y) = (alpha(x) g(y) + beta(x) h(y)) / tot(x)`` for
        ``y != x`` and ``r^(x)(x) = 0``, ``tot(x) = alpha(x) sum_{y != x} g(y) + beta(x) sum_{y != x} h(y)``.
        All zeros when every row is plain.
    """

    m: np.ndarray
    plain: np.ndarray
    g: np.ndarray
    h: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray

    @classmethod
    def plain_step(cls, m: np.ndarray) -> "StepPlan":
        """Every rejection continues from the plain residual ``norm((p_i - m)_+)``."""
        z = np.zeros_like(m)
        return cls(m=m, plain=np.ones(m.shape, dtype=bool), g=z, h=z, alpha=z, beta=z)
