"""False-positive rate of certify_decoder over a grid of correct decoders stays at alpha."""

import numpy as np
from scipy import stats

import exactness
from exactness.decoder_mutants import CORRECT

from _decoder_cases import setup


def test_false_positive_rate_over_a_grid_of_correct_decoders():
    runs, raw, counts = [], [], []
    for seed in range(3):
        model, target, prompts = setup(V=4 + 2 * seed, seed=seed, noise=1.0 + seed)
        for name in ("token_chain", "block_chain", "token_chain_one_hot"):
            cert = exactness.certify_decoder(CORRECT[name](model, 2), target, prompts, n=1500, seed=seed,
                                             new_tokens=3)
            runs.append(cert.pvalue)
            raw += [v for k, v in cert.checks.items() if k.startswith("pit")]
            counts += [cert.checks[k] for k in ("accepted_count",) if k in cert.checks]
    runs = np.array(runs)
    # Holm's min-p is conservative: at level a at most ~a of the runs reject; the bound is binomial(0.999)
    for a in (1e-3, 0.05):
        assert (runs < a).sum() <= stats.binom.ppf(0.999, runs.size, a), runs
    # the raw PIT p-values (continuous tests) are uniform under exactness
    assert stats.kstest(raw, "uniform").pvalue > 1e-3
    # the conditional checks run for the token-level chains (events) and stay calibrated
    assert len(counts) == 6 and min(counts) > 1e-3, counts
