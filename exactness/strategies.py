"""Hypothesis strategies for (target p, draft q) pairs and certification cells.

Use ``settings(deadline=None)``.  The pairs include the edge cases where
verifiers break: ties, zeros, one-hot laws, ``p == q``, disjoint supports
(the draft always keeps at least one token of positive mass).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def _normalise(w):
    w = np.asarray(w, dtype=np.float64)
    return w / w.sum()


@st.composite
def laws(draw, V: int | None = None, *, min_V: int = 2, max_V: int = 8, zeros: bool = True,
         ties: bool = True, one_hot: bool = True) -> np.ndarray:
    """A law over ``V`` tokens: (V,) float64, non-negative, sums to 1, at least one positive entry."""
    if V is None:
        V = draw(st.integers(min_V, max_V))
    kind = draw(st.sampled_from(["dirichlet"] + (["one_hot"] if one_hot else []) + (["ties"] if ties else [])))
    if kind == "one_hot":
        w = np.zeros(V)
        w[draw(st.integers(0, V - 1))] = 1.0
        return w
    if kind == "ties":
        levels = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0] if zeros else [1.0, 2.0]), min_size=V, max_size=V))
        w = np.array(levels)
        if w.sum() == 0:
            w[0] = 1.0
        return _normalise(w)
    w = np.array(draw(st.lists(st.floats(1e-3, 1.0), min_size=V, max_size=V)))
    if zeros:
        mask = np.array(draw(st.lists(st.booleans(), min_size=V, max_size=V)))
        if mask.all():
            mask[0] = False
        w[mask] = 0.0
    return _normalise(w)


@st.composite
def distribution_pairs(draw, *, min_V: int = 2, max_V: int = 8, zeros: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(p, q)``: target and draft over the same vocabulary, including ``p == q`` and one-hot cases."""
    V = draw(st.integers(min_V, max_V))
    p = draw(laws(V, zeros=zeros))
    if draw(st.integers(0, 5)) == 0:
        return p, p.copy()
    return p, draw(laws(V, zeros=zeros))


@st.composite
def cells(draw, *, min_V: int = 2, max_V: int = 6, max_k: int = 3, drafting: str = "iid"):
    """``(p, q, k)`` with ``k <= max_k`` (and ``k <=`` draft support for without-replacement drafting)."""
    p, q = draw(distribution_pairs(min_V=min_V, max_V=max_V))
    hi = max_k if drafting != "without_replacement" else min(max_k, int(np.count_nonzero(q > 0)))
    return p, q, draw(st.integers(1, max(1, hi)))
