"""The acceptance-bound check (issue 40): a verifier accepting more than alpha* is convicted from its acceptance
alone; exact rules never are; the check states its power and the draws it needs."""

from __future__ import annotations

import numpy as np
import pytest

from exactness import certify_verifier
from exactness.acceptance_bound import ACCEPTANCE_BOUND as AB
from exactness.acceptance_bound import AcceptanceBoundResult, too_generous
from exactness.exact import certify_exact
from resispec import available_verifiers, get_verifier
from resispec.analysis import optimal_acceptance

rng0 = np.random.default_rng(40)
V = 8
P = rng0.dirichlet(np.ones(V))
Q = rng0.dirichlet(np.full(V, 0.3))            # a draft confident where the target is not


class BlackBox:
    """A verifier behind a plain ``verify`` (no chain): the Monte Carlo form of the check is all there is."""

    def __init__(self, inner):
        self.inner, self.drafting = inner, inner.drafting

    def verify(self, p, q, candidates, rng):
        return self.inner.verify(p, q, candidates, rng)


def _accepted(verifier, k, n, seed):
    """(stop, token) counts of ``n`` draws at the node (P, Q): candidates iid from Q (WOR for rrs_wor)."""
    rng = np.random.default_rng(seed)
    p, q = np.tile(P, (n, 1)), np.tile(Q, (n, 1))
    if verifier.drafting == "without_replacement":
        c = np.stack([rng.choice(V, size=k, replace=False, p=Q) for _ in range(n)])
    else:
        c = rng.choice(V, size=(n, k), p=Q)
    out = verifier.verify(p, q, c, rng)
    stop = np.where(out.accepted < 0, k, out.accepted)
    return np.bincount(stop * V + out.tokens, minlength=(k + 1) * V)


@pytest.mark.parametrize("name", [n for n in available_verifiers() if n != "target_only"])
def test_exact_rules_never_fail_the_bound_in_20_seeds(name):
    v = get_verifier(name)
    k = 2
    pvals = [AB.run_node(_accepted(v, k, 4000, seed), P, Q, k, v.drafting).pvalue for seed in range(20)]
    assert min(pvals) >= 1e-3, (name, min(pvals))


def test_too_generous_accepts_more_than_alpha_star_exactly():
    """Sampling-free: the mutant's own chain accepts more than alpha*, and the exact check says so."""
    v = too_generous(1.1)
    for k in (1, 2, 3):
        ex = certify_exact(v, P, Q, k)
        assert ex.acceptance > ex.alpha_star + 1e-3 and not ex.passed
    assert ex.alpha_star == pytest.approx(optimal_acceptance(P, Q, 3))


def test_too_generous_is_convicted_by_monte_carlo_from_its_acceptance():
    """Black box (no chain): certify_verifier's acceptance_bound check fails it, naming the excess."""
    v, k = too_generous(1.1), 1
    excess = certify_exact(v, P, Q, k).acceptance - optimal_acceptance(P, Q, k)
    n = AB.n_for_excess(excess, AB.bound(P, Q, k, "iid"), alpha=1e-3 / 10)   # Holm over up to 10 checks
    cert = certify_verifier(BlackBox(v), P, Q, k, n=n, seed=3, tree=False)
    assert not cert.passed and cert.checks["acceptance_bound"] < 1e-4
    assert "accepts more than any exact rule can: E[accepted] = " in cert.report()
    assert "accepts more than any exact rule can" in cert.describe("acceptance_bound")
    rec = cert.details["acceptance_bound"]
    assert rec["acceptance"] > rec["bound"] and rec["detectable_excess"] <= excess


def test_the_bound_needs_fewer_draws_than_the_histogram():
    """Design numbers at 99 % power, alpha 1e-3: the acceptance excess of too_generous(1.1) at k = 1 is found with
    fewer draws than the marginal histogram needs for the TV of its output law."""
    from exactness.power import samples_for_tv

    v, k = too_generous(1.1), 1
    ex = certify_exact(v, P, Q, k)
    excess = ex.acceptance - ex.alpha_star
    n_bound = AB.n_for_excess(excess, AB.bound(P, Q, k, "iid"))
    n_hist = samples_for_tv(ex.tv, V - 1)
    assert n_bound < n_hist, (n_bound, n_hist, excess, ex.tv)


def test_exact_rule_in_certify_verifier_runs_the_check():
    cert = certify_verifier(get_verifier("rrs"), P, Q, 2, n=3000, seed=0)
    assert cert.passed and "acceptance_bound" in cert.checks
    rec = cert.details["acceptance_bound"]
    assert rec["acceptance"] <= rec["bound"] + 4 * rec["se"] and 0 < rec["detectable_excess"] < 0.1


def test_power_design_twins_agree():
    b = 0.6
    for n in (200, 2000, 20_000):
        d = AB.detectable_excess(n, b)
        assert 0 < d < 1 - b
        assert AB.n_for_excess(d, b) <= n * 1.06 + 2           # n_for_excess inverts detectable_excess
    assert AB.detectable_excess(3000, 0.5) > AB.detectable_excess(30_000, 0.5)   # shrinks as 1/sqrt(n)
    assert AB.detectable_excess(5, 0.9999) == float("inf")                      # no count can fail it
    with pytest.raises(ValueError, match="excess must lie"):
        AB.n_for_excess(0.5, 0.6)


def test_the_check_is_skipped_with_its_reason():
    assert "accepted index" in AB.skip_reason(False, "iid")
    assert AB.skip_reason(True, "iid") is None and AB.skip_reason(True, "any") is None

    class TokensOnly:
        drafting = "iid"

        def verify(self, p, q, candidates, rng):
            out = get_verifier("rrs").verify(p, q, candidates, rng)

            class R:
                tokens = out.tokens
            return R()

    cert = certify_verifier(TokensOnly(), P, Q, 2, n=2000, seed=0)
    assert "acceptance_bound" in cert.skipped and "acceptance_bound" not in cert.checks


def test_result_record_is_frozen_and_says_its_line():
    r = AB.run(90, 100, 0.5)
    assert isinstance(r, AcceptanceBoundResult) and r.exceeded and r.pvalue < 1e-9
    assert r.line().startswith("accepts more than any exact rule can: E[accepted] = 0.9 +- 0.03 > bound 0.5")
    with pytest.raises(Exception):
        r.pvalue = 1.0
    assert not AB.run(50, 100, 0.5).exceeded


# ------------------------------------------------------------------ chains and trees: the LP bound over exact rules

from exactness.acceptance_bound import too_generous_block  # noqa: E402
from exactness.pathlevel import certify_path, certify_tree_rule, sample_horizon, sample_tree_horizon  # noqa: E402
from resispec.pathlevel import get_path_verifier, optimal_accepted  # noqa: E402
from simulators.autoregressive import MarkovPair  # noqa: E402

PAIR = MarkovPair.random(np.random.default_rng(1), 3, noise=2.0, scale=2.0)


@pytest.mark.parametrize("name,shape", [("block", (1, 1)), ("token", (1, 1)), ("traversal", (2, 1)),
                                        ("traversal_resispec", (2, 1))])
def test_exact_path_rules_never_fail_the_bound_in_20_seeds(name, shape):
    """Block attains the chain bound (Sun et al., Theorem 2), so this is the test at its boundary."""
    v = get_path_verifier(name)
    bound = optimal_accepted(PAIR, shape)
    b = bound.expected_accepted + 10 * bound.tolerance
    pvals = []
    for seed in range(20):
        acc = np.zeros(1000, dtype=np.int64)
        rng = np.random.default_rng(seed)
        if shape == (1, 1):
            sample_horizon(v, PAIR, 2, 1000, rng, (), acc)
        else:
            sample_tree_horizon(v, PAIR, shape, 1000, rng, (), acc)
        pvals.append(AB.run_mean(acc, b).pvalue)
    assert min(pvals) >= 1e-3, (name, min(pvals))


def test_block_passes_both_bound_checks_in_certify_path():
    cert = certify_path(get_path_verifier("block"), PAIR, 2, n=2000, seed=0)
    assert cert.passed and set(cert.checks) == {"horizon", "acceptance_bound", "exact_bound", "plan_sampler"}
    e = cert.exact_bound
    assert not e["exceeded"] and e["expected_accepted"] == pytest.approx(e["bound"], abs=1e-6)   # block attains it


def test_too_generous_block_is_convicted_without_sampling():
    v = too_generous_block(1.2)
    e = AB.exact_path(v, PAIR, 2)
    assert e["exceeded"] and e["exact_tv"] > 1e-3 and "accepts more than any exact rule can" in e["reason"]
    cert = certify_path(v, PAIR, 2, n=200, seed=0)            # too few draws for the histogram: the plan convicts
    assert not cert.passed and cert.checks["exact_bound"] == 0.0
    assert "exact_bound: accepts more than any exact rule can" in cert.summary()


class PathBlackBox:
    """A chain rule behind ``verify`` only (no plan): the Monte Carlo form is all there is."""

    def __init__(self, inner):
        self.inner = inner

    def verify(self, p, q, d, rng):
        return self.inner.verify(p, q, d, rng)


def test_too_generous_block_is_convicted_by_monte_carlo_with_fewer_draws_than_the_histogram():
    from exactness.power import samples_for_tv

    v = too_generous_block(1.2)
    e = AB.exact_path(v, PAIR, 2)
    acc = np.zeros(4000, dtype=np.int64)
    sample_horizon(v, PAIR, 2, 4000, np.random.default_rng(9), (), acc)
    sd = acc.std(ddof=1)
    excess = e["expected_accepted"] - e["bound"]
    from scipy.stats import norm

    n_bound = int(np.ceil(((norm.isf(1e-3) + norm.isf(0.01)) * sd / excess) ** 2))
    n_hist = samples_for_tv(e["exact_tv"], 3 ** 3 - 1)
    assert n_bound < n_hist, (n_bound, n_hist)
    cert = certify_path(PathBlackBox(v), PAIR, 2, n=max(n_bound, 200), seed=4)
    assert "exact_bound" not in cert.checks and cert.checks["acceptance_bound"] < 1e-3 and not cert.passed


def test_a_plan_that_is_not_a_law_fails():
    from resispec.pathlevel.block import BlockVerifier

    class Broken(BlockVerifier):
        def _plan(self, p, q, d):
            stop, laws = super()._plan(p, q, d)
            return stop * 1.5, laws                                   # stop law sums to 1.5

    cert = certify_path(Broken(), PAIR, 2, n=300, seed=0)
    assert not cert.passed and "not a law" in cert.exact_bound["error"] and "not a law" in cert.summary()


def test_bound_too_large_is_a_skip_with_its_reason():
    big = MarkovPair.random(np.random.default_rng(0), 60, noise=1.0, scale=1.0)
    cert = certify_path(get_path_verifier("block"), big, 3, n=300, seed=0)
    assert "exact_bound" in cert.skipped and "acceptance_bound" in cert.skipped
    assert "exact_bound" not in cert.checks


@pytest.mark.parametrize("call,says", [
    (lambda: AB.run(150, 100, 0.5), "cannot exceed n"), (lambda: AB.run(0, 0, 0.5), "n must be an integer >= 1"),
    (lambda: AB.run(50, 100, 1.5), "bound must be"), (lambda: AB.run(50.7, 100, 0.5), "accepted must be"),
    (lambda: AB.run(50, 100, 0.5, alpha=0), "alpha must be"),
    (lambda: AB.run_node(np.zeros(3 * V, int), P, Q, 2, "iid"), "all zero"),
    (lambda: AB.run_node(np.full(3 * V, 0.5), P, Q, 2, "iid"), "non-negative integer counts"),
    (lambda: AB.run_node(np.ones((3, 4), int), P, Q, 2, "iid"), "p has V = 8"),
    (lambda: AB.run_mean(np.r_[np.ones(200), np.nan], 0.5), "non-negative integers"),
    (lambda: AB.run_mean(np.ones(200, int), float("nan")), "bound must be"),
    (lambda: AB.n_for_excess(1e-9, 0.5), "MAX_PLANNED"), (lambda: AB.n_for_excess(0.1, 0.5, power=1), "power"),
])
def test_bad_arguments_are_named(call, says):
    """A breaker's findings: each bad argument is a ValueError naming it (no math domain error, no hang, no NaN)."""
    with pytest.raises(ValueError, match=says):
        call()


def test_n_for_excess_is_the_fewest():
    n = AB.n_for_excess(0.01, 0.5)
    assert AB.detectable_excess(n, 0.5) <= 0.01 < AB.detectable_excess(n - 1, 0.5)


def test_a_horizon_too_large_is_refused_before_allocating():
    with pytest.raises(ValueError, match="MAX_OUTCOMES"):
        certify_path(get_path_verifier("block"), PAIR, 30, n=2000)
