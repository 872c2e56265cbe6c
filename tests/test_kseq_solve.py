"""K-SEQ's division factor rho (SpecTr, arXiv 2310.15141) by the bracketing Illinois solve: the smallest rho in
[1, k] with L(rho) <= rho, to 1e-12 relative, the same on numpy and torch, in far fewer (B, V) passes than the
60-step bisection it replaced (exactness: tests/test_torch_exact.py, test_exactness_exact.py enumerate its law)."""

import numpy as np
import pytest
import torch

from resispec.verifiers import kseq as K


def _L(p, q, rho, k):
    beta = np.minimum(q, p / rho[:, None]).sum(axis=1)
    return np.where(beta > 0, (1 - (1 - beta) ** k) / np.where(beta > 0, beta, 1.0), float(k))


def _bisect(p, q, k, steps=200):
    lo, hi = np.ones(len(p)), np.full(len(p), float(k))
    done = _L(p, q, lo, k) <= lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        ok = _L(p, q, mid, k) <= mid
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    return np.where(done, 1.0, hi)


@pytest.mark.parametrize("V", [50, 1000, 20000])
@pytest.mark.parametrize("conc", [0.3, 1.0, 5.0])
@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_rho_is_the_converged_bisection_to_1e_12(V, conc, k):
    rng = np.random.default_rng(V + k)
    p, q = rng.dirichlet(np.full(V, conc), size=16), rng.dirichlet(np.full(V, conc), size=16)
    rho, beta = K.kseq_rho(p, q, k)
    ref = _bisect(p, q, k)
    assert np.all(np.abs(rho - ref) <= 1e-11 * ref), np.max(np.abs(rho - ref) / ref)
    assert np.all(_L(p, q, rho, k) <= rho * (1 + 1e-12))                       # what exactness needs
    assert np.allclose(beta, np.minimum(q, p / rho[:, None]).sum(axis=1), rtol=1e-13)
    rt, bt = K.kseq_rho(torch.from_numpy(p), torch.from_numpy(q), k)
    assert np.allclose(rt.numpy(), rho, rtol=1e-11, atol=0)


def test_the_solve_takes_far_fewer_passes_than_bisection(monkeypatch):
    """One L evaluation is one (B, V) pass (a divide into the buffer): about 15 where bisection took 62."""
    rng = np.random.default_rng(0)
    logits = 3.0 * rng.standard_normal((32, 32000))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(logits + rng.standard_normal(logits.shape))
    q /= q.sum(1, keepdims=True)
    calls = []
    real = K.native

    class Counting:
        def __init__(self, lib):
            self.lib = lib

        def __getattr__(self, name):
            if name == "divide":
                calls.append(1)
            return getattr(self.lib, name)

    monkeypatch.setattr(K, "native", lambda xp: Counting(real(xp)))
    for k in (2, 4, 8):
        calls.clear()
        K.kseq_rho(p, q, k)
        assert len(calls) <= 30, (k, len(calls))
