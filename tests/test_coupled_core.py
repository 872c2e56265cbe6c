"""Coupled certification (exactness.coupled): conventions, mutants, coupling verdicts, bounds, bad input."""

import numpy as np
import pytest
from scipy import stats

import exactness
from exactness import mutants
from exactness.coupled import CONVENTIONS, certify_coupled, reference_kernel, tv_upper_bound
from resispec import available_verifiers, get_verifier
from resispec.verifiers.base import VerifyResult, decide

V = 8
P = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
Q = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])


@pytest.mark.parametrize("convention", CONVENTIONS)
@pytest.mark.parametrize("name", available_verifiers())
def test_every_registry_rule_passes_against_itself(name, convention):
    ver = get_verifier(name)
    cert = certify_coupled(reference_kernel(ver, convention), name, P, Q, 3, n=3000, convention=convention)
    assert cert.passed and cert.mismatches == 0 and cert.classification == "conforms", cert.verdict
    assert cert.tv_upper == pytest.approx(1 - 1e-3 ** (1 / 3000))


def test_tv_bound_is_the_exact_binomial_bound():
    for x, n in [(0, 1000), (3, 1000), (17, 50_000), (999, 1000)]:
        ci = stats.binomtest(x, n, alternative="less").proportion_ci(confidence_level=1 - 1e-3)
        assert tv_upper_bound(x, n, 1e-3) == pytest.approx(ci.high, rel=1e-9)
    assert tv_upper_bound(1000, 1000, 1e-3) == 1.0
    with pytest.raises(ValueError, match="mismatches"):
        tv_upper_bound(5, 3, 1e-3)


#: mutants whose decisions differ from a rule under the same coins, with that rule and a k where they are biased.
DECISION_MUTANTS = {"rrs_on_wor": ("rrs_wor", 2), "residual_not_renormalised": ("rrs", 2),
                    "reused_uniform": ("rrs", 1), "always_accept": ("rrs", 1), "residual_is_p": ("rrs", 1),
                    "peeking_proxy": ("resispec", 2), "bf16_ratio": ("rrs", 2),
                    "accepted_by_match": ("resispec", 2), "public_summary_proxy": ("rrs", 1)}


@pytest.mark.parametrize("name", sorted(DECISION_MUTANTS))
def test_decision_changing_mutants_are_caught_with_a_counterexample(name):
    ref, k = DECISION_MUTANTS[name]
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))
    cert = certify_coupled(mutants.CATALOGUE[name], ref, p, q, k, n=50_000, stop_after=1)
    assert not cert.passed and cert.mismatches >= 1 and cert.first_mismatch is not None
    assert cert.counterexample, cert.verdict
    exec(compile(cert.counterexample, "<counterexample>", "exec"), {})   # reproduces (asserts the mismatch)


def test_catalogue_is_covered():
    """Every mutant is either decision-changing (above) or documented here as not changing decisions at one node."""
    other = {"topk_draft_raw_ratio", "greedy_draft_softmax_ratio"}      # change the drafts, not the decisions
    other |= {"bonus_from_residual"}                                      # the bonus token of a tree
    other |= {"batch_broadcast", "unseeded_residual"}                     # tested below
    assert set(mutants.CATALOGUE) == set(DECISION_MUTANTS) | other


def test_row_mixing_bug_shows_at_its_row():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(V), size=3), rng.dirichlet(np.ones(V), size=3)
    cert = certify_coupled(mutants.CATALOGUE["batch_broadcast"], "rrs", p, q, 2, n=3000)
    assert not cert.passed and cert.first_mismatch["node"] != 0
    assert certify_coupled(get_verifier("rrs"), "rrs", p, q, 2, n=3000).passed


def test_kernel_that_ignores_the_coins_fails():
    cert = certify_coupled(mutants.UnseededResidual("u"), "rrs", P, Q, 1, n=2000)
    assert not cert.passed and cert.classification == "kernel ignores the coins"


class GumbelResidual:
    """Exact rrs whose residual token is a Gumbel race seeded from the residual coin (another coupling)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms):
        ref = get_verifier("rrs")
        ch = ref.chain(p, q, candidates)
        out = decide(ch.accept_probs, ch.residual, np.asarray(candidates), uniforms)
        k = out.tokens.size and np.shape(candidates)[1]
        tokens = out.tokens.copy()
        for b in np.flatnonzero(out.accepted < 0):
            g = np.random.default_rng(int(uniforms[b, k] * 2**53)).gumbel(size=ch.residual.shape[1])
            with np.errstate(divide="ignore"):
                tokens[b] = int(np.argmax(np.log(ch.residual[b]) + g))
        return VerifyResult(tokens=tokens, accepted=out.accepted)


@pytest.fixture
def fewer_law_draws(monkeypatch):
    """The Gumbel kernel loops in Python per row: smaller law checks keep the test short."""
    monkeypatch.setattr("exactness.limits.LAW_DRAWS", 20_000)


def test_differently_coupled_exact_kernel_is_not_called_biased(fewer_law_draws):
    cert = certify_coupled(GumbelResidual(), "rrs", P, Q, 2, n=4000)
    assert not cert.passed and cert.classification == "not the same coupling", cert.verdict
    assert "not the same coupling: fall back to certify_verifier" in cert.verdict
    sg = certify_coupled(reference_kernel(get_verifier("rrs"), "sglang"), "rrs", P, Q, 2, n=4000,
                         convention="sglang")
    assert sg.passed


def test_fallback_runs_certify_verifier(fewer_law_draws):
    cert = certify_coupled(GumbelResidual(), "rrs", P, Q, 2, n=2000, fallback=True, fallback_n=20_000)
    assert cert.fallback.n == 20_000
    assert cert.fallback is not None and cert.fallback.passed and cert.classification == "not the same coupling"


def test_bad_kernels_are_errors_never_passes():
    class Raises:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms):
            raise RuntimeError("boom")

    class WrongShape(Raises):
        def verify(self, p, q, c, rng=None, *, uniforms):
            return VerifyResult(tokens=np.zeros(len(c) + 1, np.int64), accepted=np.zeros(len(c) + 1, np.int64))

    class WrongDtype(Raises):
        def verify(self, p, q, c, rng=None, *, uniforms):
            return VerifyResult(tokens=np.zeros(len(c)), accepted=np.zeros(len(c), np.int64))

    # the subject misbehaved: a FAIL naming the cause (exit 1), never an exception read as bad input
    for kernel, cause in [(Raises(), "raised RuntimeError: boom"), (WrongShape(), "shape"), (WrongDtype(), "dtype")]:
        cert = certify_coupled(kernel, "rrs", P, Q, 2, n=100)
        assert not cert.passed and cert.classification == "subject error" and cause in cert.cause
        assert cause in cert.verdict
    with pytest.raises(ValueError, match="convention"):
        certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=100, convention="vllm")
    with pytest.raises(ValueError, match="drafting"):
        certify_coupled(get_verifier("rrs_wor"), "rrs", P, Q, 2, n=100)
    with pytest.raises(ValueError, match="reference"):
        certify_coupled(get_verifier("rrs"), "no_such_rule", P, Q, 2, n=100)


def test_exported_from_exactness():
    assert exactness.certify_coupled is certify_coupled
