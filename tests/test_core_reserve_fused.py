"""The fused reserve kernel (resispec._reserve_fused): answers, masses, warm starts, float32, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resispec._reserve_fused import solve_reserve_rows
from resispec.verifiers.resispec import solve_reserve
from simulators.families import get_family

from test_core_reserve_newton import cases  # noqa: E402  (ties, zeros, one-hot, p == q, flat pieces)

EPS = np.finfo(float).eps


def _g(p, q, rho, lam, gamma):
    s = np.minimum(q, np.maximum(p - lam[:, None] * rho, 0.0)).sum(axis=1)
    return lam - gamma * (1.0 - s)


@settings(deadline=None, max_examples=300)
@given(cases(), st.floats(0.0, 1.0), st.booleans())
def test_kernel_root_mass_and_warm_start(case, start, warm):
    p, q, rho, gamma = case
    if gamma > 1.0:
        with pytest.raises(ValueError, match="gamma"):
            solve_reserve_rows(p, q, rho, gamma)
        return
    init = np.full(p.shape[0], start * gamma) if warm else None
    lam, m, passes, resid, exact = solve_reserve_rows(p, q, rho, gamma, init=init)
    want = solve_reserve(p, q, rho, gamma, method="sort")
    # one well-defined point, min {l : g(l) >= -tau}, whatever the start: the sort solver's, to 1e-9.
    # 1e-9, not 1e-12: where the crossing is ill-conditioned (g' ~ 0, gamma = 1, almost all proxy mass
    # active; docs/torch.md) round-off in g moves the point by eps / g' (hypothesis found 1e-10 on
    # p = rho = (1e-10, 1 - 1e-10), q one-hot); the root property below is still checked to tau.
    np.testing.assert_allclose(lam, want, rtol=0, atol=1e-9)
    gk = _g(p, q, rho, lam, gamma)
    assert np.all(gk >= -3e-13 * (1 + gamma)) and np.all(gk <= 1e-12)      # a root, to tau
    assert np.all((lam >= 0) & (lam <= gamma))
    np.testing.assert_allclose(m, np.minimum(q, np.maximum(p - lam[:, None] * rho, 0.0)), rtol=0, atol=4 * EPS)
    assert np.all(passes <= 200)


@pytest.mark.parametrize("family", ["softmax_noise", "zipf", "shifted", "dirichlet"])
@pytest.mark.parametrize("gamma", [0.3, 1.0])
@pytest.mark.parametrize("V", [50, 5000])
def test_kernel_matches_sort_on_families(family, gamma, V):
    p, q = get_family(family).sample(np.random.default_rng(V), n=16, V=V)
    want = solve_reserve(p, q, q, gamma, method="sort")
    for init in (None, np.clip(want - 0.05, 0, gamma), np.clip(want + 0.05, 0, gamma)):
        lam, _, _, resid, exact = solve_reserve_rows(p, q, q, gamma, init=init)
        np.testing.assert_allclose(lam, want, rtol=0, atol=1e-12)
        assert exact.all() and np.all(np.abs(resid) <= 1e-12)


def test_kernel_float32_error_bound():
    p, q = get_family("softmax_noise").sample(np.random.default_rng(3), n=8, V=3000)
    want = solve_reserve(p, q, q, 1.0, method="sort")
    lam, m, _, resid, _ = solve_reserve_rows(p.astype(np.float32), q.astype(np.float32), q.astype(np.float32), 1.0)
    assert m.dtype == np.float32
    assert np.all(np.abs(resid) <= 64 * np.finfo(np.float32).eps * 2)
    np.testing.assert_allclose(lam, want, atol=5e-4)


def test_kernel_flat_piece_any_start():
    q = np.array([[0.1, 0.4, 0.2, 0.2, 0.1]])
    p = np.array([[0.156, 0.322, 0.207, 0.207, 0.108]])
    p = p / p.sum()
    left = np.max((p - q) / q)
    for init in (None, 0.0, 0.3, 0.7, 0.9, 1.0):
        lam, m, _, _, _ = solve_reserve_rows(p, q, q, 1.0, init=None if init is None else np.array([init]))
        np.testing.assert_allclose(lam, [left], atol=1e-11)
        np.testing.assert_allclose(m, np.minimum(q, np.maximum(p - lam[:, None] * q, 0.0)), atol=1e-16)


def test_kernel_bad_input():
    p = np.full((2, 4), 0.25)
    with pytest.raises(ValueError, match="gamma"):
        solve_reserve_rows(p, p, p, 1.5)
    with pytest.raises(ValueError, match="shape"):
        solve_reserve_rows(p, p[:1], p, 1.0)
    with pytest.raises(ValueError, match="float64 or all float32"):
        solve_reserve_rows(p, p.astype(np.float32), p, 1.0)
    with pytest.raises(ValueError, match="contiguous"):
        wide = np.full((2, 8), 0.125)
        solve_reserve_rows(wide[:, ::2], p, p, 1.0)
    with pytest.raises(ValueError, match="out"):
        solve_reserve_rows(p, p, p, 1.0, out=np.empty((2, 3)))


def test_gamma_zero_and_empty():
    p = np.array([[0.5, 0.5]])
    q = np.array([[0.9, 0.1]])
    lam, m, _, _, _ = solve_reserve_rows(p, q, q, 0.0)
    assert lam[0] == 0.0
    np.testing.assert_array_equal(m, np.minimum(p, q))
    lam, m, *_ = solve_reserve_rows(np.empty((0, 3)), np.empty((0, 3)), np.empty((0, 3)), 1.0)
    assert lam.shape == (0,) and m.shape == (0, 3)


def test_without_numba_falls_back_with_a_warning(monkeypatch):
    import resispec
    from resispec import _reserve_fused

    monkeypatch.setattr(_reserve_fused, "AVAILABLE", False)
    monkeypatch.setattr(_reserve_fused, "_WARNED", [])
    p, q = get_family("softmax_noise").sample(np.random.default_rng(2), n=4, V=300)
    with pytest.warns(RuntimeWarning, match="numba is not installed"):
        lam = solve_reserve(p, q, q, 1.0)
    np.testing.assert_array_equal(lam, solve_reserve(p, q, q, 1.0, method="sort"))
    with pytest.raises(ImportError, match="numba"):
        solve_reserve_rows(p, q, q, 1.0)
    c = resispec.draw_candidates(q, 3, "iid", np.random.default_rng(0))
    resispec.get_verifier("resispec_myopic").verify(p, q, c, np.random.default_rng(1))   # sort fallback, no error
    torch = pytest.importorskip("torch")
    assert resispec.get_verifier("resispec_myopic", backend="torch").solver_for(torch.zeros(1, 2)) == "sort"


# ---- regressions (found by a fuzzing pass) ---------------------------------------------------

def _fork_worker(args):
    p, q = args
    return solve_reserve(p, q, q, 1.0)


def test_kernel_survives_fork_after_use():
    """Forked workers (e.g. exactness's process pools) may call the kernel after the parent did."""
    import multiprocessing as mp

    p, q = get_family("softmax_noise").sample(np.random.default_rng(0), n=64, V=3000)   # thread-pool path
    want = solve_reserve(p, q, q, 1.0)
    with mp.get_context("fork").Pool(2) as pool:
        got = pool.map(_fork_worker, [(p, q)] * 2, chunksize=1)
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_init_never_changes_the_answer():
    cases = [(np.array([[.4, .6, 0]]), np.array([[.4, .6 - 1e-15, 1e-15]]), [0.5]),          # g ~ -1e-15 flat
             (np.array([[3.16787153e-5, 1 - 3.16787153e-5]]), np.array([[0.00215988, 1 - 0.00215988]]), [0.5012])]
    for p, q, init in cases:
        want = solve_reserve(p, q, q, 1.0, method="sort")
        np.testing.assert_allclose(solve_reserve(p, q, q, 1.0, init=np.array(init)), want, atol=1e-12)
        np.testing.assert_allclose(solve_reserve(p, q, q, 1.0), want, atol=1e-12)


def test_init_and_out_checked():
    p = np.full((3, 2), 0.5)
    q = np.array([[0.9, 0.1]] * 3)
    with pytest.raises(ValueError, match=r"init must have shape \(B,\)"):
        solve_reserve_rows(p, q, q, 1.0, init=np.zeros(1))
    with pytest.raises(ValueError, match=r"init must have shape \(B,\)"):
        solve_reserve_rows(p, q, q, 1.0, init=np.zeros((3, 1)))
    with pytest.raises(ValueError, match="share memory"):
        solve_reserve_rows(p, q, q, 1.0, out=p)
    ro = np.empty_like(p)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        solve_reserve_rows(p, q, q, 1.0, out=ro)
    lam, *_ = solve_reserve_rows(p, q, q, 1.0, init=np.array([np.nan, -3.0, 7.0]))   # NaN / negative: cold
    np.testing.assert_allclose(lam, solve_reserve(p, q, q, 1.0, method="sort"), atol=1e-12)
    with pytest.raises(ValueError, match="gamma"):
        solve_reserve(p, q, q, float("nan"))
    with pytest.raises(ValueError, match="gamma"):
        solve_reserve(p, q, q, -0.5, method="sort")
    with pytest.raises(ValueError, match="2-D"):
        solve_reserve(p[0], q[0], q[0], 1.0)


def test_tokens_with_zero_draft_do_not_block_the_exact_finish():
    p = np.array([[0.2774470937355905, 0.4671163880315757, 0.2554365182328339]])
    q = np.array([[0.0, 0.0, 1.0]])
    rho = np.array([[0.07245199572522489, 0.8648882234353381, 0.06265978083943713]])
    lam, _, passes, _, exact = solve_reserve_rows(p, q, rho, 0.7)
    np.testing.assert_allclose(lam, solve_reserve(p, q, rho, 0.7, method="sort"), atol=1e-12)
    assert exact.all() and passes.max() <= 8


def test_float32_arrays_are_solved_in_float64():
    p = np.array([[0.900166, 0.09983402]], dtype=np.float32)
    q = np.array([[0.900166, 0.09983405]], dtype=np.float32)
    a, b = solve_reserve(p, q, q, 1.0, method="sort"), solve_reserve(p, q, q, 1.0)
    assert a.dtype == np.float64 and np.allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("value", ["0", "-2", "abc"])
def test_bad_thread_count(monkeypatch, value):
    monkeypatch.setenv("RESISPEC_THREADS", value)
    p, q = get_family("softmax_noise").sample(np.random.default_rng(0), n=64, V=3000)
    with pytest.raises(ValueError, match="RESISPEC_THREADS"):
        solve_reserve_rows(p, q, q, 1.0)
