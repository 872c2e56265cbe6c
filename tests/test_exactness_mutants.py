"""Every mutant is flagged by the default budget; every correct verifier passes the same grid,
with a false-positive rate consistent with alpha."""

import numpy as np
import pytest

import resispec
from exactness import certify_verifier
from exactness.certify_run import MUTANT_FAMILY, MUTANT_KS, family_nodes, run_mutants
from exactness.exact import certify_exact
from exactness.grid import calibration
from exactness.mutants import CATALOGUE, MIN_K


def test_catalogue_has_ten_biased_mutants():
    assert len(CATALOGUE) >= 10
    for name, v in CATALOGUE.items():
        assert hasattr(v, "verify") and hasattr(v, "drafting"), name


@pytest.mark.slow  # the same panel `resispec certify` runs (README command 1 exits 3 if a mutant escapes)
def test_every_mutant_flagged_by_default_budget():
    results = run_mutants(seeds=1, seed=0)
    missed = [r.name for r in results if r.flagged != r.runs]
    assert not missed, f"mutants not flagged: {missed}"


@pytest.mark.parametrize("name", ["rrs_on_wor", "residual_not_renormalised", "topk_draft_raw_ratio",
                                  "greedy_draft_softmax_ratio", "always_accept", "residual_is_p",
                                  "peeking_proxy", "bf16_ratio"])
def test_biased_mutants_have_exact_bias(name):
    (p, q), = family_nodes(0, (MUTANT_FAMILY,))[0].values()
    k = max(2, MIN_K.get(name, 1))
    assert certify_exact(CATALOGUE[name], p, q, k).tv > 1e-6


@pytest.mark.slow  # every verifier x k x 2 seeds at n = 40,000: ~1 min; `python -m pytest -m slow`
def test_correct_verifiers_pass_same_grid_with_calibrated_false_positives():
    (p, q), = family_nodes(0, (MUTANT_FAMILY,))[0].values()
    pvals = []
    for name in resispec.available_verifiers():
        v = resispec.get_verifier(name)
        for k in MUTANT_KS:
            for s in range(2):
                c = certify_verifier(v, p, q, k, n=40_000, seed=np.random.SeedSequence([7, s, k]))
                assert c.passed, (name, k, s, c.checks)
                assert c.checks["exact_law"] == 1.0
                dfs = c.details["mc_df"]
                pvals += [c.checks[x] for x in ("marginal", "joint", "accepted_count", "residual")
                          if x in c.checks and dfs.get(x, 0) >= 1]
    cal = calibration(pvals, 0.05)
    assert cal.n >= 100
    assert cal.ci_low <= 0.05 <= cal.ci_high, cal
    assert cal.ks_pvalue > 1e-3, cal
