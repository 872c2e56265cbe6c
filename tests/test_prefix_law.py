"""certify_prefix_law: the rule's output law from its own step arithmetic, Rao-Blackwellised along rejected
prefixes; exact rules pass, biased arithmetic fails, the estimator is unbiased for the chain's law."""

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import resispec
from exactness.budget import BudgetError
from exactness.mutants import bfloat16
from exactness.prefix_law import MIN_PATHS, _paths, _stepper, certify_prefix_law
from resispec.verifiers.baselines import RecursiveRejectionWOR
from resispec.verifiers.resispec_wor import ResiSpecWOR
from simulators.families import get_family

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fast_paths import node  # noqa: E402

WOR = resispec.get_verifier("resispec", drafting="without_replacement")


class WrongRow(ResiSpecWOR):
    """The residual of another rejected token (x + 1): a kernel indexing bug."""

    def step_law(self, p_i, q_i, x, *, last=False, masses=False):
        a, _, m = super().step_law(p_i, q_i, x, last=last, masses=masses)
        return a, super().step_law(p_i, q_i, (x + 1) % p_i.shape[1], last=last)[1], m


class BF16Masses(ResiSpecWOR):
    """The rule run on a bf16-rounded draft while candidates come from the float64 one (precision bug)."""

    def step_law(self, p_i, q_i, x, *, last=False, masses=False):
        qb = bfloat16(q_i)
        qb = qb / qb.sum(axis=1, keepdims=True)
        _, nxt, m = super().step_law(p_i, qb, x, last=last, masses=True)
        m = np.minimum(m, q_i)
        rows = np.arange(x.size)
        return np.clip(m[rows, x] / q_i[rows, x], 0.0, 1.0), nxt, m


class BF16RRS(RecursiveRejectionWOR):
    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
        return np.minimum(p_i, bfloat16(q_i))


def _quiet(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return certify_prefix_law(*args, **kw)


@pytest.mark.parametrize("name,drafting", [("resispec", "without_replacement"), ("rrs_wor", None), ("resispec", None)])
def test_exact_rules_pass_at_a_large_vocabulary(name, drafting):
    v = resispec.get_verifier(name, **({"drafting": drafting} if drafting else {}))
    p, q = node(20_000)
    cert = _quiet(v, p, q, 4, seed=1)
    assert cert.passed, cert.summary()
    assert cert.detectable_tv <= 1e-3 and cert.n >= MIN_PATHS


@pytest.mark.parametrize("bad", [WrongRow, BF16Masses, BF16RRS])
def test_biased_arithmetic_fails(bad):
    """TV of the biased laws at this node: 5.6e-4 (wrong row), 2.9e-4 (bf16 masses), 3.1e-4 (bf16 rrs_wor)."""
    p, q = node(20_000)
    cert = _quiet(bad(), p, q, 4, seed=1)
    assert not cert.passed, cert.summary()


def test_the_paths_average_to_the_chains_law_not_to_p():
    """At V = 6 the exact output law of the wrong-row rule (enumeration) is off p; the mean path converges to
    it (within 5 standard errors per token), so the estimator measures what the chain emits."""
    p, q = get_family("softmax_noise").sample(np.random.default_rng(3), n=1, V=6, temperature=1.0)
    p, q = p[0], q[0]
    bad = WrongRow()
    law = resispec.exact_output_law(bad, p, q, 3)
    assert 0.5 * np.abs(law - p).sum() > 1e-3
    paths = _paths(_stepper(bad), p, q, 3, 20_000, True, np.random.default_rng(0))
    se = paths.std(axis=0) / np.sqrt(paths.shape[0])
    assert np.all(np.abs(paths.mean(axis=0) - law) <= 5 * se + 1e-12)
    good = _paths(_stepper(WOR), p, q, 3, 20_000, True, np.random.default_rng(0))
    assert np.all(np.abs(good.mean(axis=0) - p) <= 5 * good.std(axis=0) / np.sqrt(20_000) + 1e-12)


def test_exact_rules_are_not_called_biased_over_many_seeds():
    """A skewed node (Zipf, V = 300) where raw-path t-tests gave false FAILs: no FAIL in 40 seeds, and the
    Bonferroni p-value is below 0.05 in at most 4 of them."""
    fam = get_family("zipf")
    ps = []
    for s in range(40):
        p, q = fam.sample(np.random.default_rng(100 + s), n=1, V=300, temperature=1.0)
        ps.append(_quiet(WOR, p[0], q[0], 3, n=MIN_PATHS, seed=s).pvalue)
    assert min(ps) >= 1e-3 and sum(x < 0.05 for x in ps) <= 4, sorted(ps)[:5]


def test_bad_input_is_refused_by_name():
    p, q = node(100)

    class Box:
        drafting = "without_replacement"

        def verify(self, p, q, c, rng):
            raise AssertionError

    with pytest.raises(TypeError, match="step_law.*certify_coupled"):
        certify_prefix_law(Box(), p, q, 2)
    with pytest.raises(ValueError, match=f"n >= {MIN_PATHS}"):
        certify_prefix_law(WOR, p, q, 2, n=50)
    with pytest.raises(ValueError, match="k must be"):
        certify_prefix_law(WOR, p, q, 0)
    with pytest.raises(ValueError, match="p contains NaN"):
        certify_prefix_law(WOR, np.full(100, np.nan), q, 2)
    with pytest.raises(ValueError, match="same shape"):
        certify_prefix_law(WOR, p, np.ones(50) / 50, 2)
    with pytest.raises(ValueError, match="tv must"):
        certify_prefix_law(WOR, p, q, 2, tv=2.0)
    with pytest.raises(BudgetError, match="larger tv"):
        certify_prefix_law(WOR, *node(20_000), 4, tv=1e-7)


def test_inconsistent_steps_are_a_defect_never_a_pass():
    class Lies(ResiSpecWOR):
        def step_law(self, p_i, q_i, x, *, last=False, masses=False):
            a, nxt, m = super().step_law(p_i, q_i, x, last=last, masses=masses)
            return np.clip(a * 0.9, 0, 1), nxt, m

    class NaNs(ResiSpecWOR):
        def step_law(self, p_i, q_i, x, *, last=False, masses=False):
            a, nxt, m = super().step_law(p_i, q_i, x, last=last, masses=masses)
            return a, nxt, (None if m is None else m * np.nan)

    p, q = node(500)
    with pytest.raises(RuntimeError, match="own accepted masses"):
        certify_prefix_law(Lies(), p, q, 3, n=MIN_PATHS)
    with pytest.raises(RuntimeError, match="non-finite"):
        certify_prefix_law(NaNs(), p, q, 3, n=MIN_PATHS)
