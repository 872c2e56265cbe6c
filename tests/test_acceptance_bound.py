"""The acceptance-bound check (issue 40): a verifier accepting more than alpha* is convicted from its acceptance
alone; exact rules never are; the check states its power and the draws it needs."""

from __future__ import annotations

import sys

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
        pvals.append(AB.run_mean(acc, b, top=len(shape)).pvalue)
    assert min(pvals) >= 1e-3, (name, min(pvals))


def test_block_passes_both_bound_checks_in_certify_path():
    cert = certify_path(get_path_verifier("block"), PAIR, 2, n=2000, seed=0)
    assert cert.passed and set(cert.checks) == {"horizon", "acceptance_bound", "exact_bound", "exact_law", "plan_sampler"}
    e = cert.exact_bound
    lp = optimal_accepted(PAIR, (1, 1)).expected_accepted
    assert not e["exceeded"] and e["expected_accepted"] == pytest.approx(lp, abs=1e-6)       # block attains it
    assert e["bound"] - lp == pytest.approx(1e-6 * max(1.0, lp), rel=1e-3)                  # LP_SLACK above it


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
    (lambda: AB.run_mean(np.r_[np.ones(200), np.nan], 0.5, top=2), "integers in \\[0, top"),
    (lambda: AB.run_mean(np.ones(200, int), float("nan"), top=2), "bound must be"),
    (lambda: AB.run_mean(np.full(200, 3), 0.5, top=2), "integers in \\[0, top = 2\\]"),
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


# ------------------------------------------------------------------ trees: the sampling-free form from plan_tree

def test_exact_tree_rules_pass_the_sampling_free_bound_check():
    cert = certify_tree_rule(get_path_verifier("traversal"), PAIR, (2, 1), n=2000, seed=0)
    e = cert.exact_bound
    assert cert.passed and cert.checks["exact_bound"] == 1.0 and not e["exceeded"], e
    assert e["expected_accepted"] <= e["bound"] and e["exact_tv"] < 1e-9


class DeepStop:
    """Traversal whose declared plan moves half of every other kept node's mass to the deepest node: it claims
    more accepted drafts than any exact tree rule can keep."""

    def __init__(self):
        self.inner = get_path_verifier("traversal")

    def plan_tree(self, p, q, parent, tokens):
        pl = self.inner.plan_tree(p, q, parent, tokens)
        stop = np.array(pl.stop, dtype=np.float64)
        moved = 0.5 * stop[:-1].sum()
        stop[:-1] *= 0.5
        stop[-1] += moved
        return type(pl)(stop, pl.laws)

    def verify_tree(self, p, q, parent, tokens, rng):
        return self.inner.verify_tree(p, q, parent, tokens, rng)


def test_a_tree_plan_claiming_too_much_fails_without_sampling():
    e = AB.exact_tree(DeepStop(), PAIR, (2, 1))
    assert e["exceeded"] and "accepts more than any exact rule can" in e["reason"], e
    cert = certify_tree_rule(DeepStop(), PAIR, (2, 1), n=200, seed=0)
    assert not cert.passed and cert.checks["exact_bound"] == 0.0
    assert cert.summary().startswith("FAIL: exact_bound: accepts more than any exact rule can")


def test_a_tree_plan_that_is_not_a_law_fails_naming_it():
    class Half(DeepStop):
        def plan_tree(self, p, q, parent, tokens):
            pl = self.inner.plan_tree(p, q, parent, tokens)
            return type(pl)(np.asarray(pl.stop) * 0.5, pl.laws)

    cert = certify_tree_rule(Half(), PAIR, (2, 1), n=200, seed=0)
    assert not cert.passed and "not a law" in cert.exact_bound["error"]


def test_rules_without_a_plan_say_why_the_sampling_free_check_is_skipped():
    class NoPlan:
        def __init__(self):
            self.inner = get_path_verifier("traversal")

        def verify_tree(self, p, q, parent, tokens, rng):
            return self.inner.verify_tree(p, q, parent, tokens, rng)

    cert = certify_tree_rule(NoPlan(), PAIR, (2, 1), n=500, seed=0)
    assert "declares no plan_tree" in cert.skipped["exact_bound"] and "exact_bound" not in cert.checks
    chain = certify_path(PathBlackBox(get_path_verifier("block")), PAIR, 2, n=500, seed=0)
    assert "declares no plan(p, q, drafts)" in chain.skipped["exact_bound"]


def test_the_benchmark_prints_the_path_rows_side_by_side(monkeypatch):
    """benchmarks/acceptance_bound.py's path section: one row per (factor, n) with both checks' rejections."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "ab_bench", Path(__file__).resolve().parents[1] / "benchmarks" / "acceptance_bound.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "PATH_FACTORS", (1.2,))
    monkeypatch.setattr(bench, "PATH_NS", (400,))
    rows = bench.run_paths(seeds=1, progress=lambda *_: None)
    assert len(rows) == 1 and rows[0]["excess"] > 0.05 and rows[0]["tv"] > 0.01
    md = "\n".join(bench.path_markdown(rows))
    assert "| 1.2 | 0.06" in md and "| 400 |" in md and "rejected: acceptance bound" in md


# ------------------------------------------------------------------ breaker round (issue 40)

def test_an_exact_rule_on_a_draft_equal_to_the_target_never_fails_the_sampled_bound():
    """Nearly every step keeps all drafts: a z-test on the sample's own sd gave p = 0 (12 of 20 seeds failed);
    the Chernoff-Hoeffding test holds at any variance."""
    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1e-3)
    for seed in range(4):
        c = certify_path(get_path_verifier("block"), pair, 1, n=2000, seed=seed)
        assert c.passed and c.checks["acceptance_bound"] >= 1e-3, (seed, c.acceptance_bound)


def test_the_sampled_bound_is_a_valid_test_at_any_variance():
    """Two-point laws on [0, L] with mean exactly at the bound (the extremal case): rejections at most alpha."""
    rng = np.random.default_rng(3)
    for top, b in ((1, 0.9999), (2, 1.999), (2, 0.5), (3, 2.9)):
        x = (rng.random((400, 500)) < b / top).astype(np.int64) * top
        rej = sum(AB.run_mean(row, b, top=top).pvalue < 1e-2 for row in x)
        assert rej <= 4 + 3 * 2, (top, b, rej)                 # at most ~1 % of 400, with room for noise


class TwoFaced:
    """Declares block's plan for the first V^L calls (the enumeration), then the too-generous plan it samples."""

    def __init__(self):
        self.gen, self.block, self.calls = too_generous_block(1.05), get_path_verifier("block"), 0

    def plan(self, p, q, drafts):
        self.calls += 1
        return (self.block if self.calls <= 9 else self.gen).plan(p, q, drafts)

    def verify(self, p, q, drafts, rng=None, *, uniforms=None):
        return self.gen.verify(p, q, drafts, rng, uniforms=uniforms)


def test_a_plan_that_answers_differently_later_is_read_once():
    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    cert = certify_path(TwoFaced(), pair, 2, n=4000, seed=0)
    assert not cert.passed and cert.checks["plan_sampler"] < 1e-3, cert.checks


@pytest.mark.parametrize("bad, match", [
    (lambda pl: type(pl)(pl.stop + 0.05j, pl.laws), "complex"),
    (lambda pl: sys.exit(3), "SystemExit"),
])
def test_complex_plans_and_plans_calling_exit_fail_naming_it(bad, match):
    block = get_path_verifier("block")

    class Bad:
        def plan(self, p, q, drafts):
            return bad(block.plan(p, q, drafts))

        def verify(self, p, q, drafts, rng=None, *, uniforms=None):
            return block.verify(p, q, drafts, rng, uniforms=uniforms)

    cert = certify_path(Bad(), PAIR, 2, n=300, seed=0)
    assert not cert.passed and match in (cert.exact_bound.get("error") or ""), cert.exact_bound


def test_a_plan_property_that_raises_fails_and_a_non_callable_plan_is_named():
    block = get_path_verifier("block")

    class Raises:
        @property
        def plan(self):
            raise RuntimeError("no plan today")

        def verify(self, p, q, drafts, rng=None):
            return block.verify(p, q, drafts, rng)

    cert = certify_path(Raises(), PAIR, 2, n=300, seed=0)
    assert not cert.passed and "no plan today" in cert.exact_bound["error"]

    class Five(Raises):
        plan = 5

    cert = certify_path(Five(), PAIR, 2, n=300, seed=0)          # a plan declared wrong: a FAIL naming it
    assert not cert.passed and "not callable (it is int)" in cert.exact_bound["error"]


def test_a_verify_needing_its_rng_runs_in_the_coupled_check():
    block = get_path_verifier("block")

    class NeedsRng:
        plan = block.plan

        def verify(self, p, q, drafts, rng, uniforms=None):
            return block.verify(p, q, drafts, rng, uniforms=uniforms)

    cert = certify_path(NeedsRng(), PAIR, 2, n=500, seed=0)
    assert cert.passed and cert.plan_sampler["coupled_n"] > 0, cert.summary()


def test_the_lp_refuses_sizes_whose_constraints_would_not_fit():
    with pytest.raises(ValueError, match="MAX_NONZEROS"):
        optimal_accepted(MarkovPair.random(np.random.default_rng(0), 30, noise=1.0), (1, 1))


def test_run_node_names_a_bad_k():
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        AB.run_node(np.ones(4, dtype=np.int64), np.full(2, 0.5), np.full(2, 0.5), -1, "iid")


def test_a_plan_that_hangs_is_a_fail_past_the_time_limit(monkeypatch):
    import time as _time

    block = get_path_verifier("block")

    class Hangs:
        def plan(self, p, q, drafts):
            _time.sleep(60)

        def verify(self, p, q, drafts, rng=None):
            return block.verify(p, q, drafts, rng)

    import exactness._timeout as timeout

    monkeypatch.setattr(timeout, "HANG_GRACE", 0.5)         # stopped soon after the limit (default grace 10 s)
    cert = certify_path(Hangs(), PAIR, 2, n=300, seed=0, time_limit=1)
    assert not cert.passed and "time_limit = 1 s passed" in cert.cause
    cert = certify_tree_rule(get_path_verifier("traversal"), PAIR, (2, 1), n=300, seed=0, time_limit=None)
    assert cert.passed


# ------------------------------------------------------------------ breaker round 2 (issue 40)

def test_exact_tree_rules_pass_where_their_plan_rounds_on_trees_that_are_never_drawn():
    """traversal's plan is off by 3e-4 on a tree of probability 6e-14: weighted by the drafts' probability it is a
    law (the check failed 6 of 1,200 exact rule / pair / shape cases)."""
    pair = MarkovPair.random(np.random.default_rng(14), 3)
    cert = certify_tree_rule(get_path_verifier("traversal"), pair, (3,), n=2000, seed=0)
    assert cert.passed and cert.checks["exact_bound"] == 1.0, cert.summary()


def test_a_float32_plan_of_an_exact_rule_passes():
    block = get_path_verifier("block")

    class F32:
        def plan(self, p, q, drafts):
            pl = block.plan(p, q, drafts)
            stop = np.asarray(pl.stop, dtype=np.float32)
            laws = np.asarray(pl.laws, dtype=np.float32)
            return type(pl)(stop / stop.sum(), laws / laws.sum(axis=1, keepdims=True))

        def verify(self, p, q, drafts, rng=None, *, uniforms=None):
            return block.verify(p, q, drafts, rng, uniforms=uniforms)

    cert = certify_path(F32(), PAIR, 2, n=1000, seed=0)
    assert cert.passed and cert.checks["exact_bound"] == 1.0, cert.summary()


def test_a_plan_object_whose_fields_change_between_reads_is_read_once():
    gen, block = too_generous_block(1.01), get_path_verifier("block")
    phase = {"sampling": False}

    class Shifty:
        def __init__(self, honest, claimed):
            self.h, self.c = honest, claimed

        stop = property(lambda s: (s.h if phase["sampling"] else s.c).stop)
        laws = property(lambda s: (s.h if phase["sampling"] else s.c).laws)

    class Rule:
        def plan(self, p, q, drafts):
            return Shifty(gen.plan(p, q, drafts), block.plan(p, q, drafts))

        def verify(self, p, q, drafts, rng=None, *, uniforms=None):
            phase["sampling"] = True
            return gen.verify(p, q, drafts, rng, uniforms=uniforms)

    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    cert = certify_path(Rule(), pair, 2, n=4000, seed=0)
    assert not cert.passed, cert.summary()


def test_tiny_time_limits_are_the_callers_budget_never_a_fail_nor_a_killed_process():
    """An exact rule under a limit too short for its run FAILed (round 5): the limit is the caller's."""
    from exactness.budget import BudgetError

    for t in (1e-9, 1e-6, 1e-5):
        with pytest.raises(BudgetError, match=f"time_limit = {t:g} s passed .* no call of the subject hung"):
            certify_path(get_path_verifier("block"), PAIR, 2, n=2000, seed=0, time_limit=t)


def test_an_outer_time_limit_due_sooner_governs():
    import time as _time

    from exactness._timeout import TimeLimitExceeded, time_limit

    block = get_path_verifier("block")

    class HangVerify:
        plan = block.plan

        def verify(self, p, q, drafts, rng=None, *, uniforms=None):
            _time.sleep(30)

    with pytest.raises(TimeLimitExceeded):           # the outer limit's own exception, not a FAIL of the inner one
        with time_limit(1):
            certify_path(HangVerify(), PAIR, 2, n=300, seed=0)


def test_the_stated_detectable_excess_is_found_with_the_stated_power():
    rng = np.random.default_rng(0)
    for n, top, b in ((1000, 1, 0.99), (100, 1, 0.8), (3000, 2, 1.756)):
        x = np.zeros(n, dtype=np.int64)
        det = AB.run_mean(x, b, top=top).detectable_excess
        mu = b + det
        hits = np.mean([AB.run_mean((rng.random(n) < mu / top).astype(np.int64) * top, b, top=top).pvalue < 1e-3
                        for _ in range(300)])
        assert hits >= 0.97, (n, top, b, det, hits)                     # 0.99 stated; 300 draws of noise


# ------------------------------------------------------------------ breaker round 3 (issue 40)

class _Plan:
    def __init__(self, stop, laws):
        self.stop, self.laws = stop, laws


def test_huge_entries_on_a_chain_of_tiny_chance_are_not_a_law():
    """Entries of 1e308 on a chain of chance ~1e-318 weigh ~1e-10 and overflowed E[accepted] to nan, which passed."""
    gen = too_generous_block(1.05)

    class NanGenerous:
        def plan(self, p, q, d):
            pl = gen.plan(p, q, d)
            if np.prod(np.asarray(q)[np.arange(len(d)), d]) < 1e-300:
                return _Plan(np.array([0.0, 1e308, -1e308, 1e308]), pl.laws)
            return pl

        def verify(self, p, q, d, rng=None, *, uniforms=None):
            return gen.verify(p, q, d, rng, uniforms=uniforms)

    pair = MarkovPair.random(np.random.default_rng(14), 5, scale=100, noise=3.0)
    e = AB.exact_path(NanGenerous(), pair, 3)
    assert "error" in e and "not a law" in e["error"] and "weighted by the drafts' probability" in e["error"], e


def test_a_plan_that_is_not_exact_fails_exact_law_though_it_accepts_within_the_bound():
    token = get_path_verifier("token")

    class Mixed:
        def plan(self, p, q, d):
            pl = token.plan(p, q, d)
            laws = np.array(pl.laws, dtype=np.float64)
            laws[-1] = 0.995 * laws[-1] + 0.005 * np.asarray(q)[-1]        # the bonus row 0.5 % draft
            return _Plan(np.asarray(pl.stop), laws)

        def verify(self, p, q, d, rng=None):
            r = np.random.default_rng(rng.integers(2**63)) if rng is not None else np.random.default_rng()
            pl = self.plan(p, q, d)
            row = int(r.choice(len(pl.stop), p=pl.stop / pl.stop.sum()))
            return type(token.verify(p, q, d, r))(row, int(r.choice(pl.laws.shape[1], p=pl.laws[row])))

    cert = certify_path(Mixed(), PAIR, 2, n=500, seed=0)
    assert not cert.passed and cert.checks["exact_law"] == 0.0 and cert.checks["exact_bound"] == 1.0
    assert "exact_law: its declared plan's horizon law is TV" in cert.summary()


def test_a_deflated_plan_cannot_hide_an_excess_within_the_rounding_tolerance():
    gen = too_generous_block(1.0000265)

    class Deflated:
        def plan(self, p, q, d):
            pl = gen.plan(p, q, d)
            stop = np.array(pl.stop, dtype=np.float64)
            stop[-1] -= 9e-6                                               # within LAW_TOL: rounding, not a law error
            return _Plan(stop, pl.laws)

        def verify(self, p, q, d, rng=None, *, uniforms=None):
            return gen.verify(p, q, d, rng, uniforms=uniforms)

    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    honest = AB.exact_path(gen, pair, 2)
    e = AB.exact_path(Deflated(), pair, 2)
    assert honest["exceeded"] and e["exceeded"], (honest, e)


def test_a_passing_certificate_never_says_more_than_any_exact_rule_can():
    cert = certify_path(get_path_verifier("block"), PAIR, 2, n=2000, seed=0)
    assert cert.passed and "more than any exact rule" not in cert.acceptance_bound["reason"]
    assert cert.acceptance_bound["alpha"] == pytest.approx(cert.alpha / 3)     # stated at Holm's first level


# ------------------------------------------------------------------ fourth breaker round (issue 40)

def test_a_biased_plan_fails_exact_law_where_the_lp_is_too_large():
    """The LP's size refusal dropped exact_law with exact_bound: too_generous_block(1.2) at V = 6, L = 4 (plan TV
    0.05) passed 5 of 5 seeds on horizon and plan_sampler alone."""
    from exactness.pathlevel import certify_path

    pair = MarkovPair.random(np.random.default_rng(0), 6, noise=1.0)
    c = certify_path(too_generous_block(1.2), pair, 4, n=600, seed=0)
    assert not c.passed and c.checks["exact_law"] == 0.0, c.summary()
    assert c.skipped["exact_bound"].startswith("no bound at this size")
    assert c.summary().startswith("FAIL: exact_law:")
    ok = certify_path(get_path_verifier("block"), pair, 4, n=600, seed=0)
    assert ok.checks["exact_law"] == 1.0 and ok.passed


def test_traversals_own_plan_is_a_law_where_it_matters():
    """Traversal's plan_tree has entries of -0.034 (and up to 8.5e4) on trees of chance ~1e-14; the unweighted
    range check FAILed this exact rule (27 of 3,000 random V = 2 pairs at shape (3, 1))."""
    from resispec.pathlevel import analyse_tree

    P = np.array([[5.2225851229503884e-08, 9.9999994777414891e-01], [9.9999799330637051e-01, 2.0066936294537067e-06]])
    Q = np.array([[6.957470666953055e-08, 9.999999304252933e-01], [9.999978690037677e-01, 2.130996232270852e-06]])
    pair = MarkovPair(P, Q, np.array([0.05180794773897724, 0.9481920522610227]),
                      np.array([0.03942743418659624, 0.9605725658134038]))
    tr = get_path_verifier("traversal")
    assert analyse_tree(tr, pair, (2, 2)).tv < 1e-12
    e = AB.exact_tree(tr, pair, (2, 2))
    assert "error" not in e and not e["exceeded"] and e["exact_tv"] < 1e-12, e


def test_a_rule_raising_from_its_result_or_attribute_is_a_fail():
    """Raising from .accepted, from the verify attribute itself, or from the kept ids of a tree escaped as the
    caller's ValueError / a traceback."""
    from exactness.pathlevel import certify_path, certify_tree_rule

    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    blk, tr = get_path_verifier("block"), get_path_verifier("traversal")

    class R:
        def __init__(self, r):
            self.r = r

        @property
        def accepted(self):
            raise ValueError("lazy tensor on another device")

        token = property(lambda self: self.r.token)

    class A:
        def verify(self, p, q, d, rng):
            return R(blk.verify(p, q, d, rng))

    class B:
        @property
        def verify(self):
            raise ValueError("verify not ready")

    class T:
        def verify_tree(self, p, q, par, tok, rng):
            kept, token = tr.verify_tree(p, q, par, tok, rng)

            def ids():
                yield from kept
                raise RuntimeError("boom")
            return ids(), token

    for cert, what in ((certify_path(A(), pair, 2, n=300), "lazy tensor"), (certify_path(B(), pair, 2, n=300),
                       "verify not ready"), (certify_tree_rule(T(), pair, "2,1", n=300), "boom")):
        assert not cert.passed and what in cert.summary(), cert.summary()


def test_a_bad_context_is_refused_naming_it():
    from exactness.pathlevel import certify_path

    pair = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)
    blk = get_path_verifier("block")
    for bad, err in ((None, TypeError), ("ab", TypeError), ([1.7], TypeError), ([5], ValueError)):
        with pytest.raises(err, match="context"):
            certify_path(blk, pair, 2, n=300, context=bad)
    assert certify_path(blk, pair, 2, n=300, context=[np.int64(1)], time_limit=np.int64(600)).passed


# ---- the decoder form: the first target call of each continuation against the LP at its prompt --------------------

def _decoder_case(V=4):
    from exactness.chain import chain_target

    model = MarkovPair.random(np.random.default_rng(0), V, noise=2.0)
    return model, chain_target(model), np.array([[0], [1], [3 % V]], dtype=np.int64)


def test_first_call_kept_counts_the_first_call_only():
    from exactness.decoder_checks import first_call_kept
    from exactness.decoder_events import DecoderEvents

    # row 0: call 7 keeps 2 then a bonus, call 8 keeps 1; row 1: call 3 rejects at once; row 2: no entry at all
    ev = DecoderEvents(row=np.array([0, 0, 0, 0, 1]), position=np.array([0, 1, 2, 3, 0]),
                       candidates=np.array([[5], [6], [-1], [2], [4]]), accepted=np.array([0, 0, -1, 0, -1]),
                       token=np.array([5, 6, 1, 2, 0]), call=np.array([7, 7, 7, 8, 3]))
    kept, first = first_call_kept(ev, 3, gamma=2, m=4)
    assert kept.tolist() == [2, 0, 0] and first.tolist() == [5, 4, -1]


def _first_call_errors(gamma, call):
    from exactness._checks import SubjectError
    from exactness.decoder_checks import first_call_kept
    from exactness.decoder_events import DecoderEvents

    ev = DecoderEvents(row=np.zeros(3, dtype=np.int64), position=np.arange(3), candidates=np.array([[5], [6], [-1]]),
                       accepted=np.array([0, 0, -1]), token=np.array([5, 6, 1]), call=np.asarray(call))
    with pytest.raises(SubjectError) as info:
        first_call_kept(ev, 1, gamma=gamma, m=3)
    return str(info.value)


def test_a_first_call_that_breaks_its_declared_chain_is_a_fail():
    """Breaker: a declared gamma above the drafts made, or one call a decision, made the bound miss; below them a
    traceback."""
    assert "more than decoder.gamma = 1" in _first_call_errors(1, [7, 7, 7])
    assert "bonus token after 2 kept drafts, fewer than decoder.gamma = 3" in _first_call_errors(3, [7, 7, 7])
    assert "ends on an accepted draft" in _first_call_errors(2, [7, 8, 9])


@pytest.mark.parametrize("name", ["token_chain", "block_chain"])
def test_exact_chain_decoders_never_fail_the_decoder_bound_in_20_seeds(name):
    from exactness.acceptance_bound import lp_bound
    from exactness.decoder import _Target
    from exactness.decoder_checks import _ReportedPair, first_call_kept
    from exactness.decoder_mutants import CORRECT
    from resispec.pathlevel.bound import optimal_accepted

    model, target, prompts = _decoder_case()
    dec = CORRECT[name](model)
    tgt = _Target(target)
    tgt(prompts)
    pair = _ReportedPair(tgt, dec, 4)
    bounds = np.array([lp_bound(optimal_accepted(pair, (1,) * dec.gamma, context=tuple(p))) for p in prompts])
    rows = np.repeat(np.arange(3), 1000)
    for seed in range(20):
        _, ev = dec.sample_events(prompts[rows], 3, np.random.default_rng(seed))
        res = AB.run_mean(first_call_kept(ev, rows.size)[0], float(bounds[rows].mean()), 1e-3, 0.99, top=dec.gamma)
        assert not res.exceeded, (seed, res.line())


def test_too_generous_chain_fails_the_decoder_bound_by_its_acceptance():
    import exactness
    from exactness.decoder_mutants import too_generous_chain

    model, target, prompts = _decoder_case()
    cert = exactness.certify_decoder(too_generous_chain(model), target, prompts, new_tokens=3, n=3000, seed=1)
    assert not cert.passed and cert.checks["acceptance_bound"] < 1e-3
    assert cert.details["acceptance_bound"]["reason"].startswith("accepts more than any exact rule can")


def test_decoder_bound_skipped_with_its_reason_or_a_fail_for_a_bad_draft_law():
    import exactness
    from exactness.chain import ChainDecoder, token_chain_kernel
    from exactness.decoder_mutants import RRSDecoder

    model, target, prompts = _decoder_case()
    cert = exactness.certify_decoder(RRSDecoder(model), target, prompts, new_tokens=2, n=300, seed=0)
    assert "acceptance_bound" in cert.skipped                     # no sample_events, no gamma: why, not a pass

    class Unnormalised(ChainDecoder):                             # reports a draft law that is not a law
        def draft_law(self, contexts):
            return 1.1 * super().draft_law(contexts)

    cert = exactness.certify_decoder(Unnormalised(token_chain_kernel, model, gamma=2), target, prompts,
                                     new_tokens=3, n=1000, seed=0)
    assert not cert.passed and "draft_law" in cert.summary() and "summing to" in cert.summary(), cert.summary()

    big, tbig, pbig = _decoder_case(V=40)
    cert = exactness.certify_decoder(ChainDecoder(token_chain_kernel, big, gamma=3), tbig, pbig[:1], new_tokens=3,
                                     n=200, seed=0)
    assert "no LP bound at this size" in cert.skipped["acceptance_bound"], cert.skipped
    cert = exactness.certify_decoder(ChainDecoder(token_chain_kernel, model, gamma=3), target, prompts, new_tokens=2,
                                     n=200, seed=0)
    assert "needs new_tokens >= decoder.gamma" in cert.skipped["acceptance_bound"], cert.skipped


def test_decoder_bound_breaker_cases():
    """Breaker (decoder bound round): a greedy (one-hot) exact decoder failed the bound; a huge or raising gamma, or
    a target raising only at the LP's contexts, escaped or passed; a misreported draft_law passed."""
    import exactness
    from exactness.chain import ChainDecoder, token_chain_kernel

    model, target, prompts = _decoder_case()

    class Greedy(ChainDecoder):                                   # exact: verified against the point mass drafted
        def draft(self, q, u):
            return np.argmax(q, axis=1).astype(np.int64)

    cert = exactness.certify_decoder(Greedy(token_chain_kernel, model, gamma=2, one_hot=True), target, prompts,
                                     new_tokens=3, n=1000, seed=1)
    assert "one_hot" in cert.skipped["acceptance_bound"] and "acceptance_bound" not in cert.checks

    inner = ChainDecoder(token_chain_kernel, model, gamma=2)

    class Declares:                                               # a chain decoder that declares another gamma
        per_row_rng, rule, events_q = True, inner.rule, "draft_law"

        def __init__(self, g):
            self._g = g

        @property
        def gamma(self):
            if self._g is None:
                raise RuntimeError("no gamma")
            return self._g

        def sample(self, *a):
            return inner.sample(*a)

        def sample_events(self, *a):
            return inner.sample_events(*a)

        def draft_law(self, c):
            return inner.draft_law(c)

    for g in (10**7, 2**70):
        cert = exactness.certify_decoder(Declares(g), target, prompts, new_tokens=3, n=300, seed=0)
        assert "acceptance_bound" in cert.skipped or not cert.passed, cert.summary()
    cert = exactness.certify_decoder(Declares(None), target, prompts, new_tokens=3, n=300, seed=0)
    assert not cert.passed and "gamma" in cert.summary()

    def partial_target(c):
        c = np.asarray(c)
        if c.shape[1] > 2:
            raise RuntimeError("broken")
        return target(c)

    with pytest.raises(ValueError, match="target"):
        exactness.certify_decoder(ChainDecoder(token_chain_kernel, model, gamma=3), partial_target, prompts,
                                  new_tokens=3, n=400, seed=0)

    class Misreports(ChainDecoder):                               # drafts from q, reports (q + p) / 2
        def draft_law(self, contexts):
            p, q = model.laws([list(r) for r in np.asarray(contexts)])
            return 0.5 * (np.asarray(p) + np.asarray(q))

    cert = exactness.certify_decoder(Misreports(token_chain_kernel, model, gamma=2), target, prompts, new_tokens=3,
                                     n=3000, seed=1)
    assert cert.checks["draft_law"] < 1e-3, cert.checks


def test_decoder_draft_law_as_a_float32_tensor_is_not_a_false_fail():
    """Breaker (second decoder round): the float32 tolerance applied to numpy arrays only; a torch float32 tensor
    summing to 1 + 3e-6 was a FAIL."""
    torch = pytest.importorskip("torch")
    import exactness
    from exactness.chain import ChainDecoder, token_chain_kernel

    model, target, prompts = _decoder_case()

    class T32(ChainDecoder):
        def draft_law(self, c):
            return torch.tensor(super().draft_law(c), dtype=torch.float32) * (1 + 3e-6)

    cert = exactness.certify_decoder(T32(token_chain_kernel, model, gamma=2), target, prompts[:2], new_tokens=3,
                                     n=1000, seed=0)
    assert cert.passed, cert.summary()


def test_the_lp_bound_solves_pairs_whose_draft_has_exact_zeros():
    """Breaker: HiGHS dropped continuation coefficients below 1e-9 and called this LP infeasible (the point
    Q(T) p(y) is feasible to 1e-16); rows scaled by their largest entry solve it, and block attains it."""
    from resispec.pathlevel import analyse_path
    from resispec.pathlevel.bound import optimal_accepted

    s, V = 17, 4
    r = np.random.default_rng(s)
    r.integers(2, 6)
    b = MarkovPair.random(np.random.default_rng(s), V, noise=1.5)
    Q = b.Q.copy()
    Q[r.random(Q.shape) < 0.3] = 0
    Q[np.arange(V), r.integers(0, V, V)] += 0.5
    Q /= Q.sum(1, keepdims=True)
    model = MarkovPair(b.P, Q, b.p0, b.q0)
    lp = optimal_accepted(model, (1, 1, 1), context=(0,)).expected_accepted
    blk = analyse_path(get_path_verifier("block"), model, 3, (0,)).expected_accepted
    assert blk <= lp + 1e-9 and lp - blk < 1e-6, (lp, blk)
