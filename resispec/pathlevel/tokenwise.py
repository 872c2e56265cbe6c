"""Token-wise chain verification (Leviathan, Kalman, Matias 2023, arXiv 2211.17192; Chen et al. 2023,
arXiv 2302.01318) written as a path-level rule, for side-by-side comparison with ``block``.

Draft ``d_{i+1}`` is accepted with probability ``a_i = min(1, p_i(d_{i+1}) / q_i(d_{i+1}))`` until
the first rejection; after a rejection at node ``i`` the token is drawn from
``norm((p_i - q_i)_+)``, after a full path the bonus from ``p_L``.  It is ``rrs`` / ``sps`` with
one candidate per node, walked along the chain.
"""

from __future__ import annotations

import numpy as np

from .base import PathVerifier, normalise_rows
from .registry import register_path


@register_path("token")
class TokenwiseVerifier(PathVerifier):
    """Token-wise (node-by-node) chain verification (Leviathan et al. 2023, arXiv 2211.17192); exact."""

    def _plan(self, p, q, d):
        L = d.size
        i = np.arange(L)
        a = np.minimum(1.0, p[i, d] / q[i, d])                     # a_i = min(1, p_i(d_{i+1}) / q_i(d_{i+1}))
        reach = np.concatenate([[1.0], np.cumprod(a)])             # A_i = prod_{j < i} a_j
        stop = reach * np.concatenate([1.0 - a, [1.0]])            # P(tau = i) = A_i (1 - a_i), P(tau = L) = A_L
        laws = np.vstack([normalise_rows(np.maximum(p[:-1] - q, 0.0), p[:-1]), p[-1:]])  # norm((p_i - q_i)_+), p_L
        return stop, laws
