"""The reserve solvers (written once, resispec.verifiers.reserve) on tensors against numpy (float64 and float32
error bounds)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from resispec.verifiers.reserve import reserve_and_mass, solve_reserve  # noqa: E402
from simulators.families import get_family  # noqa: E402


def solve_reserve_newton(p, q, rho, gamma, init=None):
    """``(lam, info)`` of the array-op Newton on tensors (checked like every solver)."""
    if gamma > 1:
        return solve_reserve(p, q, rho, gamma, method="newton")
    solve_reserve(p, q, rho, gamma, method="sort", init=init)          # the shared input checks
    lam, _, info = reserve_and_mass(p.detach(), q.detach(), rho.detach(), gamma, "newton", init=init)
    return lam, info


def solve_reserve_sort(p, q, rho, gamma):
    return solve_reserve(p, q, rho, gamma, method="sort")


def solve_reserve_fused(p, q, rho, gamma, init=None, out=None):
    solve_reserve(p, q, rho, gamma, method="fused")                    # the shared input checks and device rule
    if init is not None:
        init = torch.as_tensor(init, dtype=p.dtype)
    return reserve_and_mass(p, q, rho, gamma, "fused", init=init, out=out)


@pytest.mark.parametrize("family", ["softmax_noise", "zipf", "shifted"])
@pytest.mark.parametrize("gamma", [0.3, 0.8, 1.0])
def test_solvers_agree_with_numpy(family, gamma):
    rng = np.random.default_rng(0)
    p, q = get_family(family).sample(rng, n=16, V=3000, temperature=1.5)
    want = solve_reserve(p, q, q, gamma)
    P, Q = torch.from_numpy(p), torch.from_numpy(q)
    lam, info = solve_reserve_newton(P, Q, Q, gamma)
    assert info.max_residual <= 64 * np.finfo(float).eps * (1 + gamma)
    np.testing.assert_allclose(lam.numpy(), want, atol=1e-11)
    np.testing.assert_allclose(solve_reserve_sort(P, Q, Q, gamma).numpy(), want, atol=1e-13)
    lam32, info32 = solve_reserve_newton(P.float(), Q.float(), Q.float(), gamma)
    assert info32.max_residual <= 64 * np.finfo(np.float32).eps * (1 + gamma)
    np.testing.assert_allclose(lam32.double().numpy(), want, atol=5e-4)


def test_flat_piece_resolves_to_smallest_root():
    """gamma = 1 and every token active on an interval: g == 0 there; the left end is returned."""
    q = np.array([[0.1, 0.4, 0.2, 0.2, 0.1]])
    p = np.array([[0.156, 0.322, 0.207, 0.207, 0.108]])
    p = p / p.sum()
    left = np.max((p - q) / q)
    want = solve_reserve(p, q, q, 1.0)
    np.testing.assert_allclose(want, [left], atol=1e-11)
    P, Q = torch.from_numpy(p), torch.from_numpy(q)
    for init in [None, 0.3, 0.7, 0.9]:
        x0 = None if init is None else torch.tensor([init], dtype=torch.float64)
        lam, _ = solve_reserve_newton(P, Q, Q, 1.0, init=x0)
        np.testing.assert_allclose(lam.numpy(), [left], atol=1e-11)
    np.testing.assert_allclose(solve_reserve_sort(P, Q, Q, 1.0).numpy(), [left], atol=1e-11)


def test_newton_rejects_gamma_above_one():
    P = torch.full((1, 4), 0.25, dtype=torch.float64)
    with pytest.raises(ValueError, match="sort"):
        solve_reserve_newton(P, P, P, 1.5)


@pytest.mark.parametrize("gamma", [0.5, 1.0])
@pytest.mark.parametrize("warm", [False, True])
def test_mass_from_last_evaluation_and_tail_compaction(gamma, warm):
    """The solver's returned mass is min(q, (p - lam rho)_+) at the returned lam, rows compacted or not."""
    rng = np.random.default_rng(7)
    p, q = get_family("softmax_noise").sample(rng, n=32, V=4000, temperature=1.0)
    rho = get_family("zipf").sample(rng, n=32, V=4000)[1]
    P, Q, R = (torch.from_numpy(a) for a in (p, q, rho))
    init = torch.from_numpy(rng.uniform(0, gamma, 32)) if warm else None
    lam, m, info = reserve_and_mass(P, Q, R, gamma, "newton", init=init)
    np.testing.assert_allclose(lam.numpy(), solve_reserve(p, q, rho, gamma, method="sort"), atol=1e-11)
    want = np.minimum(q, np.maximum(p - lam.numpy()[:, None] * rho, 0.0))
    np.testing.assert_allclose(m.numpy(), want, rtol=0, atol=1e-15)   # addcmul may fuse: round-off only
    assert info.max_residual <= 64 * np.finfo(float).eps * (1 + gamma)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_fused_solver_matches_sort_and_returns_its_mass(dtype, gamma):
    rng = np.random.default_rng(11)
    p, q = get_family("softmax_noise").sample(rng, n=8, V=5000, temperature=1.0)
    rho = get_family("zipf").sample(rng, n=8, V=5000)[1]
    P, Q, R = (torch.from_numpy(a).to(dtype) for a in (p, q, rho))
    lam, m, info = solve_reserve_fused(P, Q, R, gamma, init=torch.full((8,), 0.5 * gamma))
    want = solve_reserve(P.double().numpy(), Q.double().numpy(), R.double().numpy(), gamma, method="sort")
    np.testing.assert_allclose(lam.numpy(), want, atol=1e-12 if dtype == torch.float64 else 5e-4)
    assert m.dtype == dtype and info.max_residual <= 64 * torch.finfo(dtype).eps * (1 + gamma) + 1e-15
    mass = torch.minimum(Q.double(), (P.double() - lam.unsqueeze(1) * R.double()).clamp(min=0)).to(dtype)
    torch.testing.assert_close(m, mass, rtol=0, atol=4 * torch.finfo(dtype).eps)


def test_fused_solver_refuses_other_devices_and_auto_resolves():
    import resispec
    P = torch.full((1, 4), 0.25, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match="meta tensors"):
        solve_reserve_fused(P, P, P, 1.0)
    from resispec.verifiers.reserve import solver_for
    with pytest.raises(ValueError, match="solver='newton'"):                # off the host: the kernel refuses
        solver_for("fused", 1.0, P)
    v = resispec.get_verifier("resispec_myopic", backend="torch")
    assert v.solver == "auto" and "solver" not in v.options()
    assert v.solver_for(torch.zeros(1, 2)) == "fused"
    assert v.solver_for(P) == "newton"
    assert resispec.get_verifier("resispec_myopic", backend="torch", gamma=1.5).solver_for(torch.zeros(1, 2)) == "sort"


def test_fused_and_tensor_newton_verifiers_decide_alike():
    """Same uniforms: the CPU default (fused kernel) and the tensor-op Newton make the same decisions."""
    import resispec

    rng = np.random.default_rng(5)
    p, q = get_family("softmax_noise").sample(rng, n=64, V=2000)
    c = resispec.draw_candidates(q, 4, "iid", rng)
    u = rng.random((64, 5))
    a = resispec.get_verifier("resispec_myopic", backend="torch").verify(torch.from_numpy(p), torch.from_numpy(q),
                                                                  torch.from_numpy(c), uniforms=u)
    b = resispec.get_verifier("resispec_myopic", backend="torch", solver="newton").verify(
        torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c), uniforms=u)
    n = resispec.get_verifier("resispec_myopic").verify(p, q, c, uniforms=u)
    assert torch.equal(a.tokens, b.tokens) and np.array_equal(a.tokens.numpy(), n.tokens)


def test_all_solvers_agree_where_g_is_nearly_flat():
    """p ~ q (TV 3e-14): every solver and backend reserves 0 and accepts alike (was: newton 0, sort 1)."""
    import resispec

    p, q, c = np.array([1 - 3e-14, 3e-14]), np.array([1.0, 0.0]), np.array([0, 0, 0])
    probs = [resispec.get_verifier("resispec", solver=m).chain(p, q, c).accept_probs for m in ("fused", "newton", "sort")]
    probs += [resispec.get_verifier("resispec_myopic", backend="torch", solver=s).chain(p, q, c).accept_probs.numpy()
              for s in ("auto", "fused", "newton", "sort")]
    for a in probs:
        np.testing.assert_allclose(a, probs[0], atol=1e-12)


def test_torch_solver_inputs_checked():
    P = torch.full((2, 4), 0.25, dtype=torch.float64)
    for fn in (solve_reserve_newton, solve_reserve_sort, solve_reserve_fused):
        with pytest.raises(ValueError, match="float32 or all float64"):
            fn(P.half(), P.half(), P.half(), 1.0)
        with pytest.raises(ValueError, match="shape"):
            fn(P, P[:1], P, 1.0)
    with pytest.raises(ValueError, match="init"):
        solve_reserve_newton(P, P, P, 1.0, init=torch.zeros(1))
    # a non-contiguous p_i and a numpy init are fine; lam comes back in the working dtype
    wide = torch.full((2, 8), 0.125, dtype=torch.float32)
    lam, m, _ = solve_reserve_fused((wide * 2)[:, ::2], P.float(), P.float(), 1.0, init=np.zeros(2))
    assert lam.dtype == torch.float32 and m.is_contiguous()
    with pytest.raises(ValueError, match="share memory"):
        solve_reserve_fused(P, P.clone(), P.clone(), 1.0, out=P)


def test_proxy_output_requiring_grad_works_with_every_solver():
    import resispec

    rng = np.random.default_rng(0)
    p, q = get_family("softmax_noise").sample(rng, n=3, V=20)
    c = resispec.draw_candidates(q, 3, "iid", rng)
    w = torch.ones((), dtype=torch.float64, requires_grad=True)

    def proxy(q_i, *, step, k, p_i):
        return q_i * w

    probs = [resispec.get_verifier("resispec_myopic", backend="torch", proxy=proxy, solver=s).chain(p, q, c)
             .accept_probs.detach().numpy() for s in ("fused", "newton", "sort")]
    for a in probs[1:]:
        np.testing.assert_allclose(a, probs[0], atol=1e-10)


def test_meta_tensors_rejected_clearly():
    import resispec

    P = torch.full((2, 4), 0.25, dtype=torch.float64, device="meta")
    with pytest.raises(ValueError, match="meta tensors"):
        resispec.get_verifier("resispec_myopic", backend="torch").verify(P, P, torch.zeros((2, 2), dtype=torch.long,
                                                                                     device="meta"), torch.Generator())


def test_tensor_newton_never_stops_on_a_flat_piece_of_roots():
    """float32 + warm start landing on g's flat piece of roots (h = tau there): must still go left."""
    P = torch.tensor([[4 / 9, 4 / 9, 1 / 9]], dtype=torch.float32)
    Q = torch.tensor([[0.375, 0.375, 0.25]], dtype=torch.float32)
    R = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float32)
    want = solve_reserve(P.double().numpy(), Q.double().numpy(), R.double().numpy(), 1.0, method="sort")
    for init in (None, torch.tensor([0.75])):
        lam, _ = solve_reserve_newton(P, Q, R, 1.0, init=init)
        np.testing.assert_allclose(lam.double().numpy(), want, atol=1e-4)


def test_tensor_newton_on_a_flat_piece_just_below_zero():
    """TV ~ tau: h is flat and slightly negative up to the last knot; the answer is that knot."""
    p = np.array([[1 - 2.09e-13, 2.09e-13, 0.0]])
    q = np.array([[1.0, 0.0, 0.0]])
    want = solve_reserve(p, q, q, 1.0, method="sort")
    P, Q = torch.from_numpy(p), torch.from_numpy(q)
    np.testing.assert_allclose(solve_reserve_newton(P, Q, Q, 1.0)[0].numpy(), want, atol=1e-9)
    np.testing.assert_allclose(solve_reserve(p, q, q, 1.0), want, atol=1e-12)


def test_float32_verifiers_decide_alike_on_small_vocabularies():
    import resispec

    rng = np.random.default_rng(3)
    n, V, k = 400, 3, 3
    p, q = rng.dirichlet(np.ones(V), n), rng.dirichlet(np.ones(V), n)
    c = resispec.draw_candidates(q, k, "iid", rng)
    u = rng.random((n, k + 1))
    outs = [resispec.get_verifier("resispec_myopic", backend="torch", solver=s, dtype=torch.float32)
            .verify(p.astype(np.float32), q.astype(np.float32), c, uniforms=u).tokens.numpy()
            for s in ("fused", "newton", "sort")]
    ref = resispec.get_verifier("resispec_myopic").verify(p, q, c, uniforms=u).tokens
    for o in outs:
        assert (o != ref).mean() <= 0.01      # float32 near-ties only (was 7-11% for newton + warm start)


def test_torch_rule_options_set_on_the_verifier_reach_the_rule_and_tensors_are_guarded():
    """Breaker (written-once round): ``v.gamma = 0`` on a torch verifier changed nothing; a proxy writing through
    ``.numpy()`` corrupted the caller's q; a numpy verifier refused a proxy returning a CPU tensor."""
    import resispec

    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(5) * .5, 4), rng.dirichlet(np.ones(5) * .5, 4)
    P, Q, C = torch.tensor(p), torch.tensor(q), torch.tensor([[0, 1, 2]] * 4)
    v = resispec.get_verifier("resispec_myopic", backend="torch")
    v.gamma = 0.0
    rrs = resispec.get_verifier("rrs", backend="torch")
    torch.testing.assert_close(v.chain(P, Q, C).accept_probs, rrs.chain(P, Q, C).accept_probs)
    assert "gamma=0.0" in repr(v)

    def writes(q_i, *, step, k, p_i):
        q_i.numpy()[0, 0] *= 2                                         # no version bump: lands in the copy
        return q_i

    Q0 = Q.clone()
    resispec.get_verifier("resispec", backend="torch", proxy=writes).verify(P, Q, C, uniforms=rng.random((4, 4)))
    assert torch.equal(Q, Q0)

    def tensor_out(q_i, *, step, k, p_i):
        return torch.tensor(q_i)

    out = resispec.get_verifier("resispec", proxy=tensor_out).verify(p, q, C.numpy(), uniforms=rng.random((4, 4)))
    assert out.tokens.shape == (4,)
    with pytest.raises(ValueError, match="meta"):
        resispec.get_verifier("resispec", backend="torch", device="meta")
