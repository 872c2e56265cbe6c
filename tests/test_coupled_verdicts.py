"""Coupled verdicts are never wrong: another exact rule is not 'biased'; writing into the coins cannot pass."""

import numpy as np
import torch

from exactness.coupled import certify_coupled
from resispec import get_verifier

P = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
Q = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])


def test_another_exact_rule_is_a_different_rule_not_biased():
    cert = certify_coupled(get_verifier("kseq"), "rrs", P, Q, 2, n=5000, fallback=True, fallback_n=20_000)
    assert not cert.passed
    assert cert.classification == "a different rule", cert.verdict
    assert "not rule 'rrs'" in cert.verdict and "biased)" not in cert.verdict


class CoinWriter:
    """Biased (emits candidate 0 always) and zeroes the coins it is handed, through torch."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms):
        from resispec.verifiers.base import VerifyResult

        torch.as_tensor(uniforms)[:, 0] = 0.0        # torch ignores numpy's read-only flag
        return VerifyResult(np.asarray(candidates)[:, 0].astype(np.int64), np.zeros(len(candidates), np.int64))


def test_a_kernel_writing_into_its_coins_cannot_pass():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # torch: "The given NumPy array is not writable"
        cert = certify_coupled(CoinWriter(), "rrs", P, Q, 2, n=20_000)
    assert not cert.passed and cert.mismatches > 0
