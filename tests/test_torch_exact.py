"""Exactness of every torch verifier: exact enumeration (float64 and float32) and Monte Carlo."""

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

import resispec  # noqa: E402
from resispec.torch_backend import draw_candidates  # noqa: E402

from _torch_cases import CONFIGS, config_id, numpy_options  # noqa: E402

TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


def _pairs(seed, V=5):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V))
    q = rng.dirichlet(np.ones(V))
    p[0] = 0.0           # a token the target never emits
    q[1] = 0.0           # a token the draft never proposes
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_exact_law_by_enumeration(cfg, dtype):
    name, opts = cfg
    v = resispec.get_verifier(name, backend="torch", dtype=dtype, **opts)
    for seed, k in [(0, 1), (1, 2), (2, 3)]:
        p, q = _pairs(seed)
        law = resispec.exact_output_law(v, p, q, k)
        assert np.max(np.abs(law - p)) < TOL[dtype], (name, opts, k)


@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_conditional_law_matches_numpy(cfg):
    name, opts = cfg
    vt = resispec.get_verifier(name, backend="torch", **opts)
    vn = resispec.get_verifier(name, **numpy_options(opts))
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(7), size=6)
    q = rng.dirichlet(np.ones(7), size=6)
    c = resispec.draw_candidates(q, 3, vn.drafting if vn.drafting != "any" else "iid", rng)
    law_t = vt.conditional_law(torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c))
    assert isinstance(law_t, torch.Tensor) and law_t.shape == (6, 7)
    np.testing.assert_allclose(law_t.numpy(), vn.conditional_law(p, q, c), atol=1e-10)
    ch = vt.chain(torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c))
    assert ch.accept_probs.shape == (6, 3) and ch.residual.shape == (6, 7)


def test_rrs_on_without_replacement_drafts_is_caught():
    """The enumeration can fail: rrs is biased on without-replacement drafts."""
    v = resispec.get_verifier("rrs", backend="torch")
    p, q = _pairs(4)
    law = resispec.exact_output_law(v, p, q, 3, drafting="without_replacement")
    assert np.max(np.abs(law - p)) > 1e-3


MC_CASES = [("rrs", {}), ("rrs_wor", {}), ("target_only", {}), ("kseq", {}), ("resispec", {}),
            ("resispec", {"solver": "newton"}), ("resispec", {"proxy": "coverage", "gamma": 0.7})]


def _mc_pvalue(v, p, q, k, drafting, n, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    P = torch.from_numpy(np.tile(p, (n, 1))).to(dtype)
    Q = torch.from_numpy(np.tile(q, (n, 1))).to(dtype)
    c = draw_candidates(Q, k, drafting, gen)
    out = v.verify(P, Q, c, gen)
    counts = np.bincount(out.tokens.numpy(), minlength=p.size)
    keep = p > 0
    assert counts[~keep].sum() == 0, "emitted a token of target probability 0"
    return stats.chisquare(counts[keep], n * p[keep] / p[keep].sum()).pvalue


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("cfg", MC_CASES, ids=config_id)
def test_monte_carlo_chi_square(cfg, dtype):
    name, opts = cfg
    v = resispec.get_verifier(name, backend="torch", **opts)
    p, q = _pairs(5, V=6)
    drafting = "iid" if v.drafting == "any" else v.drafting
    assert _mc_pvalue(v, p, q, 3, drafting, 20_000, 11, dtype) > 1e-3


def test_monte_carlo_detects_biased_mutant():
    """Same test, biased verifier (rrs on without-replacement drafts): tiny p-value."""
    v = resispec.get_verifier("rrs", backend="torch")
    p, q = _pairs(4)
    assert _mc_pvalue(v, p, q, 3, "without_replacement", 20_000, 12, torch.float64) < 1e-6
