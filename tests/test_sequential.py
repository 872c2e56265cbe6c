"""Budget by the bias to detect (``tv=``) and the anytime-valid sequential test (``exactness.sequential``).

Simulations draw multinomial counts straight from the laws with numpy (fast); the verifier tests go
through ``certify_verifier``.  Each test runs in a few seconds on one thread.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from exactness import certify_verifier
from exactness.budget import plan_for_tv
from exactness.gof import tv_bounds
from exactness.mutants import CATALOGUE
from exactness.power import samples_for_tv
from exactness.sequential import (SequentialTest, chunk_size, log_e_value, sequential_detectable_tv,
                                  sequential_power, sequential_samples_for_tv)
from resispec import get_verifier

P = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.05, 0.05])
Q = np.array([0.1, 0.2, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1])


def _hardest(law, tv):
    """The bias the planner plans for: mass ``tv`` moved between two halves of ``law`` (each of mass 1/2)."""
    s = np.r_[np.ones(law.size // 2), -np.ones(law.size - law.size // 2)]
    assert abs(law[s > 0].sum() - 0.5) < 1e-12
    return law * (1 + 2 * tv * s)


def _run(test: SequentialTest, law_true, rng, chunk):
    while test.n < test.n_max and not test.rejected:
        test.update(rng.multinomial(min(chunk, test.n_max - test.n), law_true))
    return test


def test_log_e_is_the_dirichlet_multinomial_bayes_factor():
    """log E against a direct sum over the sequence: the mixture's predictive probabilities, draw by draw."""
    law = np.array([0.5, 0.3, 0.2])
    c0 = 7.0
    seq = [0, 2, 2, 1, 0, 2]
    x = np.zeros(3)
    log_e = 0.0
    for t in seq:  # Polya urn predictive (c0 p0_t + x_t) / (c0 + n) against the null p0_t
        log_e += math.log((c0 * law[t] + x[t]) / (c0 + x.sum())) - math.log(law[t])
        x[t] += 1
    assert log_e_value(x, law, c0) == pytest.approx(log_e, rel=1e-12)


def test_optional_stopping_keeps_the_false_positive_rate_at_alpha():
    """400 null runs at alpha 0.05, tested after every chunk (160 looks): rejections within Binomial(400, 0.05).

    The contrast: re-testing the fixed-n chi-square at the same looks and stopping at the first p < 0.05
    rejects far more often, so the check can fail.
    """
    rng = np.random.default_rng(12)
    law = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    runs, alpha, n_max, chunk = 400, 0.05, 40_000, 250
    rej = sum(_run(SequentialTest(law, n_max, alpha), law, rng, chunk).rejected for _ in range(runs))
    assert rej <= stats.binom.ppf(0.999, runs, alpha), rej  # P(Binomial(400, 0.05) > 34) < 0.001
    naive = 0
    for _ in range(60):
        x = np.zeros(law.size)
        for _look in range(n_max // chunk):
            x += rng.multinomial(chunk, law)
            if stats.chisquare(x, x.sum() * law).pvalue < alpha:
                naive += 1
                break
    assert naive / 60 > 2 * alpha  # peeking at a fixed-n test is not valid; the e-process is


def test_impossible_token_rejects_at_once():
    t = SequentialTest(np.array([0.5, 0.5, 0.0]), 1000, 0.01)
    assert t.update(np.array([10, 9, 1])) and t.pvalue == 0.0 and t.n_reject == 20


@pytest.mark.parametrize("V,tv,alpha", [(8, 0.02, 0.05), (16, 0.02, 0.01)])
def test_planner_agrees_with_measured_power(V, tv, alpha):
    """Hardest bias of size tv: the fixed test at samples_for_tv and the sequential test at its planned n_max
    both reject with frequency close to the planned power 0.8 (300 runs each, +-4 standard errors)."""
    rng = np.random.default_rng(V)
    law = np.full(V, 1.0 / V)
    p1 = _hardest(law, tv)
    runs, power = 300, 0.8
    se = math.sqrt(power * (1 - power) / runs)
    n_fix = samples_for_tv(tv, V - 1, alpha=alpha, power=power)
    fixed = np.mean([stats.chisquare(c, n_fix * law).pvalue < alpha
                     for c in rng.multinomial(n_fix, p1, size=runs)])
    n_seq = sequential_samples_for_tv(tv, V - 1, alpha=alpha, power=power)
    assert sequential_power(tv, n_seq, V - 1, alpha) == pytest.approx(power, abs=1e-3)
    assert sequential_detectable_tv(n_seq, V - 1, alpha=alpha, power=power) == pytest.approx(tv, rel=1e-3)
    seq = np.mean([_run(SequentialTest(law, n_seq, alpha), p1, rng, chunk_size(n_seq)).rejected
                   for _ in range(runs)])
    assert abs(fixed - power) < 4 * se, fixed
    assert abs(seq - power) < 4 * se, seq
    assert n_fix < n_seq < 2 * n_fix  # the price of anytime validity


def test_sequential_stops_a_larger_bias_in_a_fraction_of_the_fixed_budget():
    """A bias 3x the planned tv: always rejected, at a median under a quarter of the fixed-n budget."""
    rng = np.random.default_rng(3)
    V, tv, alpha = 8, 0.01, 1e-3
    law = np.full(V, 1.0 / V)
    n_fix = samples_for_tv(tv, V - 1, alpha=alpha)
    n_seq = sequential_samples_for_tv(tv, V - 1, alpha=alpha)
    used = []
    for _ in range(40):
        t = _run(SequentialTest(law, n_seq, alpha), _hardest(law, 3 * tv), rng, chunk_size(n_seq))
        assert t.rejected
        used.append(t.n_reject / n_fix)
    assert np.median(used) < 0.25, np.median(used)


def test_tv_bound_covers_the_true_tv():
    """The equivalence bound (gof.tv_bounds) covers the true TV in >= 1 - alpha of 2,000 simulations."""
    rng = np.random.default_rng(5)
    law = P
    alpha, n = 0.1, 3_000
    for true in (law, _hardest(np.full(8, 1 / 8), 0.05)):
        tv_true = 0.5 * np.abs(true - law).sum()
        cover = np.mean([tv_bounds(c, law, alpha)[1] >= tv_true for c in rng.multinomial(n, true, size=2000)])
        assert cover >= 1 - alpha, cover


def test_tv_plans_n_and_states_the_time(caplog):
    caplog.set_level("INFO", logger="exactness.plan")
    cert = certify_verifier(get_verifier("rrs"), P, Q, 2, tv=0.02, seed=1, tree=False)
    assert cert.n == samples_for_tv(0.02, cert.df, alpha=1e-3, power=0.99) == cert.details["plan"]["n"]
    assert cert.detectable_tv == pytest.approx(0.02, rel=1e-3)
    assert "planned n = " + f"{cert.n:,}" in caplog.text and "estimated" in caplog.text
    assert cert.passed and cert.details["plan"]["estimated_seconds"] > 0
    eq = cert.equivalence()
    assert eq == f"TV <= {cert.tv_upper:.3g} at confidence 1 - alpha = 0.999" and eq in cert.report()
    assert cert.summary().startswith(f"NO BIAS DETECTED (detectable TV {cert.detectable_tv:.3g} at power 0.99")
    assert cert.details["equivalence"]["tv_upper"] == cert.tv_upper >= cert.tv_estimate


def test_tv_with_n_keeps_the_warning():
    from exactness._checks import ExactnessWarning

    with pytest.warns(ExactnessWarning, match="too few samples"):
        cert = certify_verifier(get_verifier("rrs"), P, Q, 2, n=5_000, tv=0.01, tree=False)
    assert cert.n == 5_000 and "plan" not in cert.details


def test_sequential_correct_verifier_draws_the_whole_plan():
    cert = certify_verifier(get_verifier("rrs"), P, Q, 2, tv=0.03, sequential=True, seed=2, tree=False)
    s = cert.details["sequential"]
    assert s["level"] == pytest.approx(1e-3 / 8)  # marginal, exact_law, joint, accepted, residual, acceptance_bound,
    # determinism, batched
    n_plan, df = plan_for_tv(P, 0.03, alpha=s["level"], power=0.99, sequential=True)
    assert cert.passed and cert.n == n_plan == s["n_max"] and not s["rejected"]
    assert cert.checks["marginal"] == s["pvalue"] and "sequential: " in cert.report()
    assert cert.summary().startswith("NO BIAS DETECTED (sequential, detectable TV")
    assert cert.equivalence() is not None


def test_biased_verifier_flagged_sequentially_before_the_planned_n():
    """The ``residual_not_renormalised`` mutant (k = 2) with a tv far below its bias: caught in the first chunks."""
    cert = certify_verifier(CATALOGUE["residual_not_renormalised"], P, Q, 2, tv=0.002, sequential=True,
                            seed=0, tree=False, exact=False)
    s = cert.details["sequential"]
    n_fix = samples_for_tv(0.002, s["df"], alpha=1e-3, power=0.99)
    assert s["rejected"] and not cert.passed and "marginal" in cert.failed_checks()
    assert cert.n == s["n_reject"] < 0.05 * n_fix
    assert cert.equivalence() is None and "stopped early" in cert.details["equivalence"]["reason"]


@pytest.mark.parametrize("tv", [0, -0.1, 1.5, float("nan")])
def test_bad_tv_is_a_value_error(tv):
    with pytest.raises(ValueError, match="tv must lie in"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=tv)


def test_tv_of_the_wrong_type():
    with pytest.raises(TypeError, match="tv must be a float"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv="0.01")
    with pytest.raises(TypeError, match="sequential must be True or False"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=0.05, sequential="yes")


def test_plan_over_the_memory_limit_is_refused():
    # sequential runs keep their draws (MAX_SAMPLES); fixed-n runs count them chunk by chunk (MAX_COUNTED)
    with pytest.raises(ValueError, match=r"tv = 0.0002 needs n = .*memory limit.*larger tv.*do not reduce the memory"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=2e-4, sequential=True)
    with pytest.raises(ValueError, match=r"tv = 1e-05 needs n = .*memory limit.*time limit.*larger tv.*workers="):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=1e-5)


def test_plan_over_the_time_limit_is_refused(monkeypatch):
    import exactness.limits as limits

    monkeypatch.setattr(limits, "MAX_SECONDS", 1e-6)
    with pytest.raises(ValueError, match=r"tv = 0.01 needs n = .*time limit.*MAX_SECONDS.*larger tv.*workers="):
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=0.01)


def test_cli_tv_and_sequential(tmp_path):
    import json

    from resispec.cli import main

    out = tmp_path / "c.md"
    assert main(["certify", "--verifier", "rrs", "--k", "2", "--family", "zipf", "--tv", "0.03", "--sequential",
                 "--no-mutants", "--no-progress", "--out", str(out)]) == 0
    md = out.read_text()
    assert "requested TV per cell: 0.03" in md and "at confidence 1 - alpha = 0.999" in md
    cell = json.loads(out.with_suffix(".json").read_text())["cells"][0]
    assert cell["plan"]["n"] == cell["n"] and cell["sequential"]["n_max"] == cell["n"]
    assert cell["equivalence"].startswith("TV <= ")
    bad = tmp_path / "bad.md"
    assert main(["certify", "--verifier", "rrs", "--tv", "0", "--no-mutants", "--out", str(bad)]) == 2
    assert not bad.exists()


def test_tv_bound_cells_are_fixed_before_the_draws():
    """The BHC union runs over the cells of a partition fixed in advance: the law's support plus one cell for
    the zero-law tokens.  (It used to count the observed tokens, a data-dependent S, and missed that cell.)"""
    law = np.array([0.5, 0.3, 0.2, 0.0, 0.0])
    n, alpha = 1000, 0.01
    eps = math.sqrt(2 * (4 * math.log(2) + math.log(1 / alpha)) / n)
    clean = np.array([500, 300, 200, 0, 0])
    assert tv_bounds(clean, law, alpha)[1] == pytest.approx(0.5 * eps, rel=1e-12)
    one, two = np.array([500, 300, 199, 1, 0]), np.array([500, 300, 198, 1, 1])
    assert tv_bounds(one, law, alpha)[1] - tv_bounds(one, law, alpha)[0] == pytest.approx(
        tv_bounds(two, law, alpha)[1] - tv_bounds(two, law, alpha)[0], rel=1e-12)


class _Biased:
    """Black box emitting ``p`` tilted by the hardest bias of size ``tv`` (candidates ignored)."""

    drafting = "iid"

    def __init__(self, tv):
        self.tv = tv

    def verify(self, p, q, candidates, rng):
        from types import SimpleNamespace

        s = np.where(np.arange(p.shape[1]) < p.shape[1] // 2, 1.0, -1.0)
        law = p * (1 + 2 * self.tv * s)
        c = np.cumsum(law, axis=1)
        t = (c > rng.random((p.shape[0], 1)) * c[:, -1:]).argmax(axis=1)
        return SimpleNamespace(tokens=t.astype(np.int64), accepted=np.full(p.shape[0], -1, dtype=np.int64))


def test_a_sequential_stop_always_fails_the_certificate():
    """A bias at the planned tv: the e-process stops near its threshold.  Run at alpha it used to stop with
    p just under alpha, which Holm over the other checks (here 5: marginal, determinism, batched_rows,
    small_batches, batch_sizes) then passed: an early stop that PASSED.
    It now runs at alpha / (checks Holm can count), so every stop is a FAIL."""
    law = np.full(8, 1 / 8)
    stops = 0
    for seed in range(4):
        cert = certify_verifier(_Biased(0.01), law, law, 1, tv=0.01, sequential=True, seed=seed, tree=False)
        s = cert.details["sequential"]
        if s["n"] < s["n_max"]:
            stops += 1
            assert not cert.passed and "marginal" in cert.failed_checks(), cert.summary()
        assert s["rejected"] == (not cert.passed)
        assert s["level"] == pytest.approx(1e-3 / 6)
    assert stops >= 2


def test_the_sequential_level_counts_every_check():
    """With a chain and the tree checks (V = 8) all 10 checks run, and the e-process level is alpha / 10."""
    cert = certify_verifier(get_verifier("rrs"), P, Q, 2, n=20_000, sequential=True, seed=4)
    assert len(cert.checks) == 10 and cert.details["sequential"]["level"] == pytest.approx(1e-3 / 10)
    assert cert.passed and cert.n == 20_000


def test_sequential_planner_edges():
    assert sequential_samples_for_tv(0.5, 3, alpha=0.05, power=1e-6) == 1  # reached without any bias
    assert sequential_detectable_tv(100, 3, alpha=0.05, power=1e-6) == 0.0
    for bad in (0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="tv must lie in"):
            sequential_samples_for_tv(bad, 3)
    with pytest.raises(ValueError, match="power must lie in"):
        sequential_samples_for_tv(0.1, 3, power=1.0)
