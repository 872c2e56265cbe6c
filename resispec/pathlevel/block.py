"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh 2024, arXiv 2403.10444).

Decides a drafted chain jointly instead of token by token.  The derivation and the exactness
proof are in ``docs/pathlevel.md``; in short, with ``w_0 = 1``:

- weights ``w_i = min(1, w_{i-1} p_{i-1}(d_i) / q_{i-1}(d_i))`` (``i = 1..L``);
- excess ``e_i = (w_i p_i - q_i)_+`` and its mass ``s_i = sum(e_i)`` (``i = 0..L-1``);
- stop hazards ``h_L = w_L``, ``h_i = s_i / (s_i + 1 - w_i)`` (``0 < i < L``), ``h_0 = 1``;
- scanning ``i = L, L-1, ..., 0`` the rule stops at the first ``i`` whose coin (prob. ``h_i``)
  comes up, so ``P(tau = i | d) = h_i prod_{j > i} (1 - h_j)``;
- after ``tau = i < L`` it emits ``y ~ e_i / s_i``; after ``tau = L`` the bonus ``y ~ p_L``.

It is exact for every L and, for a chain with one draft per position, attains the largest
expected accepted length of any exact rule (Sun et al., Theorem 2; checked against the LP of
:mod:`resispec.pathlevel.bound` in ``tests/test_pathlevel.py``).
"""

from __future__ import annotations

import numpy as np

from .base import PathVerifier, normalise_rows
from .registry import register_path


def block_weights(p: np.ndarray, q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Block weights ``w`` (L + 1,) float64 for validated ``p (L+1, V)``, ``q (L, V)``, ``d (L,)``."""
    L = d.size
    w = np.ones(L + 1)
    for i in range(1, L + 1):
        x = d[i - 1]
        w[i] = min(1.0, w[i - 1] * p[i - 1, x] / q[i - 1, x])      # w_i = min(1, w_{i-1} p_{i-1}(d_i) / q_{i-1}(d_i))
    return w


def stop_law(h: np.ndarray) -> np.ndarray:
    """``P(tau = i) = h_i prod_{j > i} (1 - h_j)`` (L + 1,) from backward hazards ``h`` (L + 1,), ``h[0] = 1``."""
    survive = np.concatenate([np.cumprod((1.0 - h)[:0:-1])[::-1], [1.0]])   # prod_{j > i} (1 - h_j)
    return h * survive


@register_path("block")
class BlockVerifier(PathVerifier):
    """Block verification of one drafted chain (Sun et al. 2024, arXiv 2403.10444); exact, optimal for a chain.

    Use through :meth:`verify` / :meth:`plan` / :meth:`block_law` (shapes in
    :class:`resispec.pathlevel.base.PathVerifier`).  The hooks :meth:`_weights`,
    :meth:`_excess`, :meth:`_hazards`, :meth:`_stop` and :meth:`_laws` are the steps of the rule (the planted
    bugs of ``exactness.path_mutants`` override one each).
    """

    def _weights(self, p, q, d):
        return block_weights(p, q, d)

    def _excess(self, p, q, w):
        return np.maximum(w[:-1, None] * p[:-1] - q, 0.0)        # e_i = (w_i p_i - q_i)_+, i = 0..L-1

    def _hazards(self, w, s):
        den = s + 1.0 - w[:-1]
        inner = np.where(den > 0, s / np.where(den > 0, den, 1.0), 1.0)  # h_i = s_i / (s_i + 1 - w_i)
        h = np.concatenate([inner, [w[-1]]])                              # h_L = w_L
        h[0] = 1.0                                                        # tau >= 0 always (h_0 = s_0 / s_0)
        return np.clip(h, 0.0, 1.0)

    def _laws(self, p, q, w, excess):
        return np.vstack([normalise_rows(excess, p[:-1]), p[-1:]])      # y ~ e_tau / s_tau, or p_L after tau = L

    def _stop(self, p, q, d, w, excess):
        return stop_law(self._hazards(w, excess.sum(axis=1)))

    def _plan(self, p, q, d):
        w = self._weights(p, q, d)
        e = self._excess(p, q, w)
        return self._stop(p, q, d, w, e), self._laws(p, q, w, e)
