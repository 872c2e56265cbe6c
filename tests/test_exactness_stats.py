"""Pooling rule, goodness-of-fit, TV bounds and the power planner (checked against simulation)."""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import GofChisquarePower

import exactness
from exactness.gof import gof_test, pool_cells, tv_bounds
from exactness.power import chi2_power, detectable_tv, noncentrality, samples_for_tv


def test_pooling_rule_groups_small_cells():
    e = np.array([0.0, 1.0, 2.0, 3.0, 10.0, 0.5, 4.6, 20.0])
    cell = pool_cells(e)
    assert cell[0] == -1                       # zero law: no cell
    assert cell[4] != cell[7]                  # large cells stay alone
    pooled = np.bincount(cell[cell >= 0], weights=e[cell >= 0])
    assert np.all(pooled >= 5.0)               # every pooled cell reaches the threshold
    assert pooled.sum() == pytest.approx(e.sum())


def _pool_cells_loop(expected, m=5.0):
    """The pooling rule as a plain loop (the reference the vectorised pool_cells must match cell for cell)."""
    cell = np.full(expected.size, -1, dtype=np.int64)
    big = np.flatnonzero(expected >= m)
    cell[big] = np.arange(big.size)
    small = np.flatnonzero((expected > 0) & (expected < m))
    if small.size == 0:
        return cell
    small = small[np.argsort(expected[small], kind="stable")]
    group, g, acc = np.empty(small.size, dtype=np.int64), 0, 0.0
    for j, e in enumerate(expected[small].tolist()):
        group[j] = g
        acc += e
        if acc >= m:
            g, acc = g + 1, 0.0
    if 0.0 < acc < m:
        if g > 0:
            group[group == g] = g - 1
        elif big.size:
            cell[small] = cell[big[np.argmin(expected[big])]]
            return cell
    cell[small] = big.size + group
    return cell


@pytest.mark.parametrize("seed", range(40))
def test_pooling_matches_the_greedy_loop_exactly(seed):
    """pool_cells runs in O(V) numpy (a V = 60, 3-token horizon pools 216,000 cells); cell for cell the loop's."""
    rng = np.random.default_rng(seed)
    V = int(rng.choice([1, 3, 50, 700, 20_000]))
    n = float(rng.choice([1.0, 30.0, 300.0, 1e4]))
    e = n * rng.dirichlet(np.full(V, float(rng.choice([0.05, 1.0, 20.0]))))
    e[rng.random(V) < 0.1] = 0.0
    if seed % 5 == 0:                                  # ties and exact sums at the threshold
        e = np.round(e * 4) / 4
    np.testing.assert_array_equal(pool_cells(e), _pool_cells_loop(e))


def test_gof_matches_scipy_without_pooling():
    law = np.full(4, 0.25)
    counts = np.array([30, 20, 25, 25])
    res = gof_test(counts, law)
    ref = stats.chisquare(counts, np.full(4, 25.0))
    assert res.statistic == pytest.approx(ref.statistic)
    assert res.pvalue == pytest.approx(ref.pvalue)
    assert res.df == 3


def test_impossible_token_fails():
    res = gof_test(np.array([10, 0, 1]), np.array([0.5, 0.5, 0.0]))
    assert res.pvalue == 0.0 and res.impossible == 1


def test_tv_upper_bound_covers_truth():
    rng = np.random.default_rng(0)
    law = rng.dirichlet(np.ones(20))
    misses = 0
    for _ in range(200):
        counts = rng.multinomial(2000, law)
        tv_hat, tv_up = tv_bounds(counts, law, 0.05)
        misses += tv_up < 0.0  # true TV is 0
        assert tv_hat <= tv_up
    assert misses == 0


def test_power_agrees_with_statsmodels():
    for n, df, w in [(10_000, 7, 0.05), (100_000, 999, 0.02)]:
        ours = chi2_power(w / 2, n, df, 1e-3)
        ref = GofChisquarePower().power(effect_size=w, nobs=n, alpha=1e-3, n_bins=df + 1)
        assert ours == pytest.approx(ref, rel=1e-9)


def test_planner_round_trip():
    n = samples_for_tv(0.01, 7, alpha=1e-3, power=0.99)
    assert detectable_tv(n, 7, alpha=1e-3, power=0.99) <= 0.01
    assert detectable_tv(n - 1, 7, alpha=1e-3, power=0.99) > 0.01 - 1e-9
    assert chi2_power(0.01, n, 7, 1e-3) == pytest.approx(0.99, abs=1e-6)
    assert noncentrality(7, 1e-3, 0.99) > noncentrality(7, 1e-3, 0.5)


def test_planner_agrees_with_simulated_power():
    """Hardest bias (mass moved between two halves of p) at the planned n: simulated power ~ planned."""
    rng = np.random.default_rng(1)
    V, tv, alpha, power = 8, 0.02, 1e-3, 0.8
    p = np.full(V, 1.0 / V)
    biased = p.copy()
    biased[: V // 2] += 2 * tv / V
    biased[V // 2:] -= 2 * tv / V
    assert 0.5 * np.abs(biased - p).sum() == pytest.approx(tv)
    n = samples_for_tv(tv, V - 1, alpha=alpha, power=power)
    reps = 600
    hits = sum(gof_test(rng.multinomial(n, biased), p).pvalue < alpha for _ in range(reps))
    se = np.sqrt(power * (1 - power) / reps)
    assert abs(hits / reps - power) < 4 * se + 0.02, (hits / reps, power)


def test_certify_sampler_detects_planned_bias_and_passes_exact():
    V = 8
    p = np.full(V, 1.0 / V)
    biased = p + np.where(np.arange(V) < 4, 0.03 / 4, -0.03 / 4)   # TV 0.03
    n = samples_for_tv(0.03, V - 1)
    sample_bad = lambda rng, m: rng.choice(V, size=m, p=biased).astype(np.int64)  # noqa: E731
    sample_ok = lambda rng, m: rng.choice(V, size=m, p=p).astype(np.int64)  # noqa: E731
    bad = exactness.certify_sampler(sample_bad, p, n, seed=3)
    ok = exactness.certify_sampler(sample_ok, p, n, seed=3)
    assert not bad.passed and bad.pvalue < 1e-3
    assert ok.passed
    assert ok.detectable_tv <= 0.03 and ok.n == n
    assert 0 <= ok.tv_estimate <= ok.tv_upper <= 1


def test_too_few_samples_warns_with_detectable_tv():
    p = np.full(8, 0.125)
    with pytest.warns(exactness.ExactnessWarning, match="detectable TV"):
        exactness.certify_sampler(lambda rng, m: rng.integers(0, 8, m), p, 1000, tv=1e-3)


def test_workers_give_identical_counts():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    sample = lambda rng, m: rng.choice(4, size=m, p=p)  # noqa: E731  (a closure: not picklable)
    from exactness.certificate import count_samples

    one = count_samples(sample, 4, 5000, np.random.default_rng(3), chunk=1000, workers=1)
    two = count_samples(sample, 4, 5000, np.random.default_rng(3), chunk=1000, workers=2)
    assert np.array_equal(one, two) and one.sum() == 5000
    with pytest.raises(ValueError, match="workers"):
        exactness.certify_sampler(sample, p, 100, workers=0)


@pytest.mark.parametrize("seed", range(20))
def test_holm_matches_statsmodels(seed):
    """The certificates' Holm adjustment is statsmodels' (computed in place: multipletests runs gc.collect per call)."""
    from statsmodels.stats.multitest import multipletests

    from exactness.certificate import holm_adjust

    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 15))
    raw = rng.random(m) ** rng.choice([1, 4, 20])
    raw[rng.random(m) < 0.2] = rng.choice([0.0, 1.0, 0.05])     # ties, zeros and ones
    np.testing.assert_allclose(holm_adjust(raw), multipletests(raw, alpha=0.05, method="holm")[1], rtol=0, atol=1e-15)
