"""Bad pairs and shapes for the path-level analysis and LP bound (breaker findings, session 33)."""

import numpy as np
import pytest

from resispec.pathlevel import get_path_verifier
from resispec.pathlevel.analysis import analyse_tree
from resispec.pathlevel.bound import optimal_accepted


class _Pair:
    """The same (p, q) at every context."""

    def __init__(self, p, q, V=3):
        self.p, self.q, self.vocab_size = np.asarray(p, float), np.asarray(q, float), V

    def laws(self, contexts):
        return np.tile(self.p, (len(contexts), 1)), np.tile(self.q, (len(contexts), 1))


P, Q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]


def test_analyse_tree_refuses_without_replacement_shapes():
    """It enumerated iid trees for 'wor:2' and called a rule biased there exact (TV 1e-17)."""
    with pytest.raises(ValueError, match="iid-drafted trees only"):
        analyse_tree(get_path_verifier("traversal"), _Pair(P, Q), "wor:2")
    with pytest.raises(TypeError, match="branching must be a tree shape"):
        analyse_tree(get_path_verifier("traversal"), _Pair(P, Q), None)
    assert analyse_tree(get_path_verifier("traversal"), _Pair(P, Q), "2").tv < 1e-12


@pytest.mark.parametrize("p, q, V, msg", [
    (P, [np.nan, 0.5, 0.5], 3, "q row that is not a probability law"),   # returned 0.75 before
    (P, [0.2, 0.2, 1.2], 3, "q row that is not a probability law"),
    ([0.5, 0.3, np.nan], Q, 3, "p row that is not a probability law"),
    ([0.5, 0.5], [0.5, 0.5], 3, "expected"),
    (P, Q, 2.7, "vocab_size must be an integer"),
    (P, Q, -2, "vocab_size must be an integer"),
])
def test_the_bound_checks_the_pair(p, q, V, msg):
    with pytest.raises(ValueError, match=msg):
        optimal_accepted(_Pair(p, q, V), "1,1")


def test_the_bound_on_a_good_pair():
    b = optimal_accepted(_Pair(P, Q), "1,1")
    assert 0 < b.expected_accepted <= 2
