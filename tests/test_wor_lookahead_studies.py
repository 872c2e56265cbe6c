"""The issue-13 item-3 studies compute what they claim: their chains are the shipped WOR rule's.

``benchmarks/wor_lookahead_lp.py``'s best-scale DP with the single scale 1 must give the shipped rule's exact
acceptance, and with more scales never less; ``benchmarks/wor_reserve_scales.py --k8``'s Rao-Blackwellised chain
averaged over every candidate tuple (weighted by its successive-sampling probability) must give the exact
acceptance of the shipped rule (schedule g = 1) and of ``rrs_wor`` (schedule 0).
"""

import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import resispec  # noqa: E402

pytest.importorskip("numba")
lp = pytest.importorskip("wor_lookahead_lp")
scales = pytest.importorskip("wor_reserve_scales")


def _node(seed, V):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V) * 0.7), rng.dirichlet(np.ones(V) * 0.7)
    return p, q


@pytest.mark.parametrize("seed", range(4))
def test_best_scale_dp_is_the_shipped_rule_at_scale_one(seed):
    p, q = _node(seed, 5)
    shipped = resispec.acceptance_probability(resispec.get_verifier("resispec", drafting="without_replacement"),
                                              p, q, 3)
    one = lp.acceptance_best_scale(p, q, 3, (1.0,))
    assert abs(one - shipped) < 1e-12
    assert lp.acceptance_best_scale(p, q, 3, (0.0, 0.5, 1.0, 2.0)) >= one - 1e-12
    opt = resispec.bounds.sequential_optimum(p, q, 3, "without_replacement")
    assert lp.acceptance_best_scale(p, q, 3, (0.0, 0.5, 1.0, 2.0)) <= opt + 1e-9   # no rule beats the optimum


def _tuples(q, k):
    """Every candidate tuple of k successive draws from q with its probability."""
    for c in itertools.permutations(range(q.size), k):
        pr, left = 1.0, 1.0
        for x in c:
            pr *= q[x] / left
            left -= q[x]
        yield np.array(c), pr


@pytest.mark.parametrize("seed", range(3))
def test_k8_chain_averages_to_the_exact_acceptance(seed):
    p, q = _node(seed + 10, 5)
    k = 3
    cs, prs = zip(*_tuples(q, k))
    c = np.stack(cs).astype(np.int64)
    w = np.array(prs)
    for sched, v in [([1.0] * (k - 1), resispec.get_verifier("resispec", drafting="without_replacement")),
                     ([0.0] * (k - 1), resispec.get_verifier("rrs_wor"))]:
        a = scales.expected_acceptance(p, q, c, sched)
        assert abs(float(w @ a) - resispec.acceptance_probability(v, p, q, k)) < 1e-12
