"""exactness.pit.pit: the mask form equals the sorted-cumsum definition (ties by token id) and is uniform."""

import numpy as np
import pytest
from scipy import stats

from exactness.pit import pit


def _sorted_reference(p, y, key, u):
    """The definition through a stable sort: cumulative mass of the tokens ordered before y, plus u p(y)."""
    N, V = p.shape
    order = np.broadcast_to(np.arange(V), (N, V)) if key is None else np.argsort(key, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, axis=1)
    rank = np.argsort(order, axis=1)
    r = rank[np.arange(N), y]
    below = np.cumsum(ps, axis=1)[np.arange(N), r] - ps[np.arange(N), r]
    return np.clip(below + u * p[np.arange(N), y], 0, 1)


@pytest.mark.parametrize("keyed", [False, True])
def test_pit_equals_the_sorted_definition_with_ties(keyed):
    rng = np.random.default_rng(0)
    N, V = 500, 37
    p = rng.dirichlet(np.full(V, 0.3), size=N)
    key = rng.integers(0, 5, size=(N, V)).astype(np.float64) if keyed else None   # many ties
    y = np.array([rng.choice(V, p=row) for row in p])
    u = rng.random(N)
    np.testing.assert_allclose(pit(p, y, key, u), _sorted_reference(p, y, key, u), atol=1e-12)


def test_pit_is_uniform_for_tokens_drawn_from_the_law_and_not_otherwise():
    rng = np.random.default_rng(1)
    N, V = 4000, 50
    p = rng.dirichlet(np.full(V, 0.5), size=N)
    key = -p                                                   # descending probability, as the certificates order
    y = (p.cumsum(axis=1) > rng.random((N, 1))).argmax(axis=1)
    assert stats.kstest(pit(p, y, key, rng.random(N)), "uniform").pvalue > 1e-3
    q = np.roll(p, 1, axis=1)                                  # tokens from another law: not uniform
    yq = (q.cumsum(axis=1) > rng.random((N, 1))).argmax(axis=1)
    assert stats.kstest(pit(p, yq, key, rng.random(N)), "uniform").pvalue < 1e-6
