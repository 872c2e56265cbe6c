"""Shared helpers of the gap tests (not a test module itself)."""

import numpy as np
from hypothesis import strategies as st
from scipy import stats


def pooled_chisquare(tokens, p, min_expected=5.0):
    """Chi-square goodness of fit of ``tokens`` against ``p`` (small bins pooled)."""
    counts = np.bincount(tokens, minlength=p.size).astype(float)
    expected = p * tokens.size
    if np.any(counts[expected == 0] > 0):
        return 0.0
    small = expected < min_expected
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return stats.chisquare(obs[keep], exp[keep]).pvalue


@st.composite
def law_pairs(draw, min_V=2, max_V=6, min_support=1):
    """(p, q) with ties, zeros, one-hot rows and p == q among the draws."""
    V = draw(st.integers(min_V, max_V))
    kind = draw(st.sampled_from(["random", "ties", "zeros", "onehot_p", "equal", "onehot_q"]))
    w = st.integers(0, 6)

    def law(allow_zero=True):
        x = np.array(draw(st.lists(w, min_size=V, max_size=V)), dtype=float)
        if not allow_zero:
            x = x + 1.0
        if x.sum() == 0:
            x[draw(st.integers(0, V - 1))] = 1.0
        return x / x.sum()

    p = law()
    q = law(allow_zero=kind != "zeros")
    if kind == "ties":
        p = np.full(V, 1.0 / V)
    elif kind == "onehot_p":
        p = np.zeros(V)
        p[draw(st.integers(0, V - 1))] = 1.0
    elif kind == "equal":
        q = p.copy()
    elif kind == "onehot_q":
        q = np.zeros(V)
        q[draw(st.integers(0, V - 1))] = 1.0
    if np.count_nonzero(q) < min_support:
        q = np.full(V, 1.0 / V) if kind != "zeros" else q
        if np.count_nonzero(q) < min_support:
            q = np.full(V, 1.0 / V)
    return p, q
