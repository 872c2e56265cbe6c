"""Plan and sampler agree (exactness.plan_check, issue 40 item 2): a path-level rule's verify follows its declared
plan, so the exact analysis of the plan (analyse_path / analyse_tree, the sampling-free acceptance bound) is
analysis of the code that runs."""

import numpy as np
import pytest

from exactness.path_mutants import PLAN_MUTANTS
from exactness.pathlevel import certify_path, certify_tree_rule
from exactness.plan_check import PLAN_SAMPLER, PlanSamplerResult
from resispec.pathlevel import analyse_path, analyse_tree, get_path_verifier
from resispec.pathlevel.base import PathResult
from resispec.pathlevel.block import BlockVerifier
from resispec.sampling import _inverse_cdf
from simulators.autoregressive import MarkovPair

PAIR = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0)


@pytest.mark.parametrize("name", ["block", "token"])
def test_exact_chain_rules_follow_their_plan_in_6_seeds(name):
    ver = get_path_verifier(name)
    for seed in range(6):
        c = certify_path(ver, PAIR, 2, n=600, seed=seed)
        ps = c.plan_sampler
        assert ps is not None and ps["pvalue"] >= 1e-3 and ps["impossible"] == 0 and ps["mismatches"] == 0
        assert ps["coupled_n"] == 600 and ps["n"] == 600 and 0 < ps["detectable_tv"] < 1
        assert c.checks["plan_sampler"] == ps["pvalue"] and c.passed


@pytest.mark.parametrize("name", ["traversal", "traversal_resispec"])
def test_exact_tree_rules_follow_their_plan_in_5_seeds(name):
    ver = get_path_verifier(name)
    for seed in range(5):
        c = certify_tree_rule(ver, PAIR, (2, 1), n=500, seed=seed)
        ps = c.plan_sampler
        assert ps["pvalue"] >= 1e-3 and ps["coupled_n"] == 0 and ps["n"] == 500 and c.passed


def test_the_plan_check_does_not_change_the_horizon_draws():
    """The plan check draws from a spawned generator: the horizon counts are those of the same seed without it."""
    class NoPlan:
        def verify(self, p, q, d, rng=None):
            return get_path_verifier("block").verify(p, q, d, rng)

    a = certify_path(get_path_verifier("block"), PAIR, 2, n=400, seed=7)
    b = certify_path(NoPlan(), PAIR, 2, n=400, seed=7)
    assert np.array_equal(a.counts, b.counts)
    assert b.plan_sampler is None and "no declared plan" in b.skipped["plan_sampler"]


@pytest.mark.parametrize("name", sorted(PLAN_MUTANTS))
def test_a_sampler_apart_from_its_plan_fails_the_plan_check(name):
    """The exact analysis of the declared plan sees nothing (TV ~ 0); the plan check flags the sampler."""
    ver = PLAN_MUTANTS[name]()
    if name.startswith("traversal"):
        assert analyse_tree(ver, PAIR, (2, 1)).tv < 1e-12
        c = certify_tree_rule(ver, PAIR, (2, 1), n=300, seed=1)
    else:
        assert analyse_path(ver, PAIR, 2).tv < 1e-12
        c = certify_path(ver, PAIR, 2, n=300, seed=1)
    assert not c.passed and c.checks["plan_sampler"] == 0.0
    assert "plan_sampler" in c.summary() and "its own plan gives probability 0" in c.plan_sampler["reason"]


def test_plan_says_block_passes_the_horizon_test():
    """Token-wise sampling is exact: only the plan check can tell that its declared (block) plan is not what runs."""
    c = certify_path(PLAN_MUTANTS["plan_says_block"](), PAIR, 2, n=1000, seed=1)
    assert c.checks["horizon"] >= 1e-3 and c.checks["plan_sampler"] == 0.0 and not c.passed


class TiltedStop(BlockVerifier):
    """Block's plan; its sampler draws tau from the plan's stop law mixed 30 % with uniform over the same support
    (no outcome the plan gives probability 0: only the law form can see it)."""

    def verify(self, p, q, drafts, rng):
        plan = self.plan(p, q, drafts)
        support = (plan.stop > 0).astype(float)
        stop = 0.7 * plan.stop + 0.3 * support / support.sum()          # BUG: not plan.stop
        u = rng.random(2)
        tau = int(_inverse_cdf(stop[None, :], u[:1])[0])
        return PathResult(tau, int(_inverse_cdf(plan.laws[tau][None, :], u[1:])[0]))


def test_the_law_form_catches_a_tilted_sampler():
    c = certify_path(TiltedStop(), PAIR, 2, n=3000, seed=2)
    ps = c.plan_sampler
    assert ps["impossible"] == 0 and ps["coupled_n"] == 0 and ps["pvalue"] < 1e-3 and not c.passed


class SwappedUniforms(BlockVerifier):
    """Exact in law, but its verify(uniforms=) uses uniforms[1] for tau: it breaks the coupled contract."""

    def verify(self, p, q, drafts, rng=None, *, uniforms=None):
        u = rng.random(2) if uniforms is None else np.asarray(uniforms)[::-1]
        return super().verify(p, q, drafts, uniforms=u)


def test_the_coupled_form_names_the_first_mismatch():
    c = certify_path(SwappedUniforms(), PAIR, 2, n=300, seed=3)
    ps = c.plan_sampler
    assert ps["impossible"] == 0 and ps["mismatches"] > 0 and ps["pvalue"] == 0.0 and not c.passed
    m = ps["first_mismatch"]
    assert set(m) == {"drafts", "uniforms", "sampler", "plan"} and m["sampler"] != m["plan"]
    assert "disagrees with its plan" in ps["reason"]


class NotALaw(BlockVerifier):
    def _plan(self, p, q, d):
        stop, laws = super()._plan(p, q, d)
        return stop * 1.5, laws                                             # BUG: stop sums to 1.5


class PlanRaises(BlockVerifier):
    def plan(self, p, q, drafts):
        raise RuntimeError("no plan today")

    def verify(self, p, q, drafts, rng=None, *, uniforms=None):
        return get_path_verifier("block").verify(p, q, drafts, rng, uniforms=uniforms)


@pytest.mark.parametrize("rule, match", [(NotALaw(), "not a law"), (PlanRaises(), "raised RuntimeError: no plan")])
def test_a_plan_that_is_not_a_law_or_raises_fails(rule, match):
    c = certify_path(rule, PAIR, 2, n=300, seed=0)
    assert not c.passed and c.checks["plan_sampler"] == 0.0 and match in c.plan_sampler["reason"]


def test_the_result_is_a_frozen_record_stating_its_power():
    c = certify_path(get_path_verifier("block"), PAIR, 2, n=500, seed=0)
    r = PlanSamplerResult(**{k: v for k, v in c.plan_sampler.items() if k != "reason"})
    with pytest.raises(Exception):
        r.pvalue = 0.0
    # at Holm's first level; the design twin halves it for the PIT test (its p doubled: Bonferroni with the grouped test)
    assert r.detectable_tv == pytest.approx(PLAN_SAMPLER.detectable_tv(500, alpha=1e-3 / 3))
    from exactness.power import detectable_tv
    assert r.detectable_tv == pytest.approx(detectable_tv(500, 15, alpha=1e-3 / 6, power=0.99))   # PIT_BINS - 1
    assert PLAN_SAMPLER.detectable_tv(5000) < PLAN_SAMPLER.detectable_tv(500)
    assert r.detectable_mismatch_rate == pytest.approx(1 - 0.01 ** (1 / 500))
    assert "0 mismatches in 500" in r.line()


# ------------------------------------------------ the same check on a chain kernel's calls inside a decoder (item 4)

def _kernel_from_path_rule(ver, plan_from=None):
    """A per-request chain kernel running ``ver.verify``, declaring ``plan_from.plan`` (default: its own)."""
    from exactness.chain import per_request

    def kernel(target_probs, draft_probs, draft_ids, rng):
        r = ver.verify(target_probs, draft_probs, draft_ids, rng)
        return np.append(draft_ids[:r.accepted], r.token)

    kernel.plan = (plan_from or ver).plan
    kernel.__name__ = f"{type(ver).__name__}_kernel"
    return per_request(kernel)


def _decoder_cert(kernel, n=1500, seed=0):
    import exactness
    from exactness.chain import chain_decoder, chain_target

    return exactness.certify_decoder(chain_decoder(kernel, PAIR, gamma=2), chain_target(PAIR), [[0], [1], [2]],
                                     new_tokens=3, n=n, seed=seed)


@pytest.mark.parametrize("name", ["block", "token"])
def test_a_kernel_following_its_plan_passes_the_call_level_check(name):
    for seed in range(2):
        c = _decoder_cert(_kernel_from_path_rule(get_path_verifier(name)), n=1000, seed=seed)
        d = c.details["plan_sampler"]
        assert c.passed and c.checks["plan_sampler"] >= 1e-3 and d["n"] > 1000 and d["grouped_df"] > 0, d


def test_a_kernel_departing_from_its_plan_fails_though_its_law_is_exact():
    """Token-wise verification (exact: the joint and PIT checks pass) declaring block's plan: the calls' outcomes
    do not follow the plan, so an exact analysis of that plan says nothing about the code."""
    c = _decoder_cert(_kernel_from_path_rule(get_path_verifier("token"), plan_from=get_path_verifier("block")))
    assert not c.passed and c.checks["plan_sampler"] < 1e-3
    assert all(v >= 1e-3 for k, v in c.checks.items() if k != "plan_sampler"), c.checks


def test_a_kernel_whose_plan_is_no_law_fails_naming_it():
    class Half:
        def plan(self, p, q, drafts):
            pl = get_path_verifier("token").plan(p, q, drafts)
            return type(pl)(pl.stop * 0.5, pl.laws)

        verify = get_path_verifier("token").verify

    c = _decoder_cert(_kernel_from_path_rule(Half()), n=300)
    assert not c.passed and "not a law" in c.details["plan_sampler"]["reason"]


def test_a_kernel_without_a_plan_says_why_the_check_is_skipped():
    from exactness.chain import token_chain_kernel

    c = _decoder_cert(token_chain_kernel, n=300)
    assert "plan_sampler" not in c.checks and "declares no plan" in c.skipped["plan_sampler"]


def test_a_kernel_plan_with_complex_values_fails_and_a_raising_plan_attribute_is_the_kernels_failure():
    token = get_path_verifier("token")

    class Complex:
        def plan(self, p, q, drafts):
            pl = token.plan(p, q, drafts)
            return type(pl)(pl.stop + 0.05j, pl.laws)

        verify = token.verify

    c = _decoder_cert(_kernel_from_path_rule(Complex()), n=300)
    assert not c.passed and "complex" in c.details["plan_sampler"]["reason"]

    from exactness.chain import token_chain_kernel

    class Raising:
        __name__ = "raising_kernel"

        @property
        def plan(self):
            raise RuntimeError("plan unavailable")

        def __call__(self, *a):
            return token_chain_kernel(*a)

    c = _decoder_cert(Raising(), n=300)
    assert not c.passed and "plan unavailable" in c.details["subject"]["error"]


def test_the_stored_groups_are_capped_by_memory(monkeypatch):
    import exactness.plan_check as pc

    monkeypatch.setattr(pc, "MAX_GROUP_ELEMS", 3 * 3 * 3 * 5)     # five groups of rows 3 x V 3
    c = _decoder_cert(_kernel_from_path_rule(get_path_verifier("token")), n=300)
    assert c.details["plan_sampler"]["n"] > 300 and c.passed


def test_a_kernel_plan_that_is_not_callable_fails():
    from exactness.chain import token_chain_kernel

    def kernel(tp, dp, di, rng):
        return token_chain_kernel(tp[None], None if dp is None else dp[None], di[None], rng)[0]

    kernel.plan = 5
    from exactness.chain import per_request

    c = _decoder_cert(per_request(kernel), n=300)
    assert not c.passed and "not callable" in c.details["subject"]["error"]
