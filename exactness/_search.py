"""Inverse CDF by a guide table: ``np.searchsorted(cdf, t, side="right")``, same ids, O(1) expected a query.

A binary search over a large CDF (V = 151,936: 1.2 MB) misses the cache at almost every one of its ~17
steps; the harness's fast paths make several such searches a draw.  The guide table of Chen and Asau
(1974; Devroye, *Non-Uniform Random Variate Generation*, 1986, section III.2.4) stores, for ``m = 2V``
equal slices of ``[0, cdf[-1]]``, the answer at each slice's left edge; a query starts one slice lower and
walks forward while ``cdf[j] <= t``, which returns exactly the smallest ``j`` with ``cdf[j] > t`` (the
``"right"`` search), because the start is never past the answer and ``cdf`` is non-decreasing.  Compiled
with numba when present (a declared dependency; loaded on first use), else ``np.searchsorted`` itself.
"""

from __future__ import annotations

import numpy as np

from ._fast_kernels import AVAILABLE, _njit  # the one optional-numba shim of the harness


#: Queries below which ``np.searchsorted`` itself is used (the same ids; the compiled loop pays off on long runs).
SMALL = 1 << 12


@_njit(cache=True, nogil=True)
def _guided(cdf, guide, inv_h, t, out):  # pragma: no cover - compiled
    V = cdf.size
    m = guide.size - 1
    for i in range(t.size):
        ti = t[i]
        if not ti >= cdf[0]:            # below the first entry (or NaN): searchsorted gives 0
            out[i] = 0
            continue
        bf = ti * inv_h
        b = m if bf >= m else int(bf)
        b = b - 1 if b > 0 else 0
        j = guide[b]
        while j < V and cdf[j] <= ti:
            j += 1
        out[i] = j


class GuidedCDF:
    """``search(t)`` = ``np.searchsorted(cdf, t, side="right")`` for a non-decreasing ``cdf`` (V,) float64, ``t`` (n,)."""

    def __init__(self, cdf: np.ndarray):
        self.cdf = np.ascontiguousarray(cdf, dtype=np.float64)
        V = self.cdf.size
        m = 2 * V
        total = float(self.cdf[-1]) if V else 0.0
        self.inv_h = m / total if total > 0 else 0.0
        edges = np.arange(m + 1) * (total / m) if total > 0 else np.zeros(m + 1)
        self.guide = np.searchsorted(self.cdf, edges, side="right").astype(np.int64)

    def search(self, t: np.ndarray) -> np.ndarray:
        t = np.ascontiguousarray(t, dtype=np.float64).reshape(-1)
        if not AVAILABLE or self.inv_h == 0.0 or t.size < SMALL:   # the same ids; no compilation for small calls
            return np.searchsorted(self.cdf, t, side="right")
        out = np.empty(t.size, dtype=np.int64)
        _guided(self.cdf, self.guide, self.inv_h, t, out)
        return out
