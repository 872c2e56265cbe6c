"""The compiled step kernel of ResiSpec for without-replacement drafts (resispec._wor_fused) and its torch twin.

What these tests can detect: a kernel whose output law is not the target's (enumeration, 1e-12), a kernel
that drifts from the numpy reference's decisions (acceptance and residual, 1e-9, on hypothesis cases with
ties, zeros and one-hot rows, and on families at V = 1000; the Monte Carlo test of both solvers is
tests/test_gap_wor.py), a broken torch twin (tokens must equal numpy's
for the same uniforms), a residual row that is not the rejected candidate's (mutant), and bad options.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import resispec
from resispec import _wor_fused
from resispec.verifiers import base, resispec_wor
from simulators.families import get_family
from test_gap_helpers import law_pairs

pytestmark = pytest.mark.skipif(not _wor_fused.AVAILABLE, reason="numba not installed")

FUSED = resispec.get_verifier("resispec", drafting="without_replacement", solver="fused")
REF = resispec.get_verifier("resispec", drafting="without_replacement", solver="reference")


def test_constants_match_the_reference():
    assert _wor_fused._TINY == resispec_wor._TINY
    assert _wor_fused._RESIDUAL_EPS == base._RESIDUAL_EPS
    from resispec.verifiers import zero_diagonal

    assert _wor_fused._MARGIN_TOL == zero_diagonal._MARGIN_TOL


def test_default_is_fused():
    v = resispec.get_verifier("resispec", drafting="without_replacement")
    assert v.solver == "auto" and v._use_fused()
    assert not resispec.get_verifier("resispec", drafting="without_replacement", scales=(0.5, 1.0))._use_fused()


@settings(deadline=None, max_examples=80)
@given(pq=law_pairs(min_V=2, max_V=7, min_support=3), k=st.integers(1, 4))
def test_exact_law_and_agreement_with_reference(pq, k):
    p, q = pq
    k = min(k, int(np.count_nonzero(q)))
    law = resispec.exact_output_law(FUSED, p, q, k)
    assert np.max(np.abs(law - p)) < 1e-12
    a_f = resispec.acceptance_probability(FUSED, p, q, k)
    a_r = resispec.acceptance_probability(REF, p, q, k)
    assert abs(a_f - a_r) < 1e-9


@pytest.mark.parametrize("family,T", [("softmax_noise", 1.0), ("zipf", 0.7), ("shifted", 1.0), ("softmax_noise", 0.7)])
def test_chain_agrees_with_reference_at_V1000(family, T):
    rng = np.random.default_rng(5)
    p, q = get_family(family).sample(rng, n=16, V=1000, temperature=T)
    c = resispec.draw_candidates(q, 4, "without_replacement", rng)
    # the emitted law given the candidates: branches reached with probability ~1e-16 (a rejection of a
    # candidate whose rejection mass is round-off) may hold different residuals, with no weight in the law
    f, r = FUSED.conditional_law(p, q, c), REF.conditional_law(p, q, c)
    np.testing.assert_allclose(f, r, atol=1e-9)
    np.testing.assert_allclose(f.sum(axis=1), 1.0, atol=1e-12)


def test_statuses_and_fallback_rows():
    """Small peaked nodes need the interval plan: those rows go to the reference and still agree."""
    rng = np.random.default_rng(0)
    p, q = get_family("softmax_noise").sample(rng, n=64, V=8, temperature=0.7)
    x = resispec.draw_candidates(q, 1, "without_replacement", rng)[:, 0]
    a, R, status, passes = _wor_fused.wor_step_rows(p, q, x)
    assert set(np.unique(status)) <= {_wor_fused.OPTION, _wor_fused.PLAIN, _wor_fused.FALLBACK}
    assert np.any(status == _wor_fused.FALLBACK) and np.any(status == _wor_fused.OPTION)
    assert np.all(passes[status != _wor_fused.FALLBACK] >= 1)
    a_ref, R_ref = REF._reference_step(p, q, x)
    ok = status != _wor_fused.FALLBACK
    np.testing.assert_allclose(a[ok], a_ref[ok], atol=1e-12)
    # where the reference's bisection leaves the rank-one margins above 1e-14 it takes the interval plan
    # and the kernel's more accurate root keeps the rank-one one: both exact, residuals within 1e-6
    np.testing.assert_allclose(R[ok], R_ref[ok], atol=1e-6)


def test_shared_rows_computed_once():
    rng = np.random.default_rng(2)
    p, q = get_family("zipf").sample(rng, n=1, V=500, temperature=1.0)
    P, Q = np.tile(p, (32, 1)), np.tile(q, (32, 1))
    x = resispec.draw_candidates(Q, 1, "without_replacement", rng)[:, 0]
    a, R, status, passes = _wor_fused.wor_step_rows(P, Q, x)
    assert passes[0] > 0 and np.all(passes[1:] == 0)
    a1, R1, _, _ = _wor_fused.wor_step_rows(P[:1].copy(), Q[:1].copy(), x[:1])
    for r in range(32):
        if x[r] == x[0]:
            assert a[r] == a1[0] and np.array_equal(R[r], R1[0])


def test_mutant_residual_of_another_token_is_caught(monkeypatch):
    real = _wor_fused.wor_step_rows

    def peeking(P, Q, X, g=1.0):
        a, _, status, passes = real(P, Q, X, g)
        _, R, _, _ = real(P, Q, (X + 1) % P.shape[1], g)   # residual of a different rejected token
        return a, R, status, passes

    monkeypatch.setattr(_wor_fused, "wor_step_rows", peeking)
    p, q = get_family("softmax_noise").sample(np.random.default_rng(4), n=1, V=30, temperature=1.0)
    p, q = p[0], q[0]
    law = resispec.exact_output_law(FUSED, p, q, 2)
    assert np.max(np.abs(law - p)) > 1e-3


def test_torch_twin_same_tokens_and_exact():
    torch = pytest.importorskip("torch")
    vt = resispec.get_verifier("resispec", backend="torch", drafting="without_replacement")
    rng = np.random.default_rng(3)
    p, q = get_family("softmax_noise").sample(rng, n=64, V=300, temperature=1.0)
    c = resispec.draw_candidates(q, 4, "without_replacement", rng)
    u = rng.random((64, 5))
    a = FUSED.verify(p, q, c, uniforms=u)
    b = vt.verify(torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c), uniforms=torch.from_numpy(u))
    assert np.array_equal(a.tokens, b.tokens.numpy()) and np.array_equal(a.accepted, b.accepted.numpy())
    p8, q8 = p[0, :8] / p[0, :8].sum(), q[0, :8] / q[0, :8].sum()
    law = resispec.exact_output_law(vt, p8, q8, 3, drafting="without_replacement")
    assert np.max(np.abs(law - p8)) < 1e-12
    v32 = resispec.get_verifier("resispec", backend="torch", drafting="without_replacement", dtype=torch.float32)
    ch = v32.chain(torch.from_numpy(p).float(), torch.from_numpy(q).float(), torch.from_numpy(c))
    assert ch.accept_probs.dtype == torch.float32 and ch.residual.shape == (64, 300)


def test_bad_options(monkeypatch):
    with pytest.raises(ValueError, match="solver must be one of"):
        resispec.get_verifier("resispec", drafting="without_replacement", solver="gpu")
    with pytest.raises(TypeError, match="drafting='iid' only"):
        resispec.get_verifier("resispec", drafting="without_replacement", gamma=0.5)
    pytest.importorskip("torch")
    with pytest.raises(TypeError, match="drafting='iid' only"):
        resispec.get_verifier("resispec", backend="torch", drafting="without_replacement", proxy="uniform")
    monkeypatch.setattr(_wor_fused, "AVAILABLE", False)
    with pytest.raises(ImportError, match="needs numba"):
        FUSED._use_fused()
    assert not resispec.get_verifier("resispec", drafting="without_replacement")._use_fused()


@pytest.mark.parametrize("p, q, c", [
    ([.5, .5], [1.0, 2.0322308e-313], [0, 1]),                  # 1 - q(top) subnormal: no ZeroDivisionError
    ([.7, .3, 0.0], [0.0, 1e-310, 1.0], [2, 1]),
    ([1e-310, .3, .3, .4], [1e-310, .4, .3, .3], [0, 1, 2]),    # subnormal row total: no inf / NaN residual
])
def test_subnormal_masses(p, q, c):
    """A breaker's findings: subnormal draft masses crashed the kernel or returned NaN residuals."""
    p, q = np.array(p), np.array(q)
    ch = FUSED.chain(p, q, c)
    assert np.all(np.isfinite(ch.accept_probs)) and np.all(np.isfinite(ch.residual))
    law = resispec.exact_output_law(FUSED, p, q, len(c))
    assert np.all(np.isfinite(law)) and np.max(np.abs(law - p)) < 1e-12


@pytest.mark.parametrize("v", [FUSED, REF], ids=["fused", "reference"])
@pytest.mark.parametrize("family,V,k", [("softmax_noise", 50, 4), ("zipf", 300, 3), ("softmax_noise", 40, 2),
                                        ("zipf", 12, 5)])
def test_verify_skips_decided_rows_with_the_same_tokens(v, family, V, k):
    """verify (steps only on undecided rows) = decide on the full chain, bit for bit; chain_until_accept
    equals chain up to each row's first acceptance and on the residual of rows that accept nothing."""
    rng = np.random.default_rng(11)
    p, q = get_family(family).sample(rng, n=24, V=V, temperature=1.0)
    reached = [0]
    for node in (None, 3):                                       # distinct rows, then one node in every row
        P, Q = (p, q) if node is None else (np.broadcast_to(p[node], p.shape), np.broadcast_to(q[node], q.shape))
        c = resispec.draw_candidates(np.ascontiguousarray(Q), k, "without_replacement", rng)
        U = rng.random((P.shape[0], k + 1))
        U[::4, 0] = 0.999999                                     # some rows reject early, some reach the residual
        U[1::4, :k] = 0.999999
        full = v.chain(P, Q, c)
        want = base.decide(full.accept_probs, full.residual, c, U)
        got = v.verify(P, Q, c, uniforms=U)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.accepted, want.accepted)
        cut = v.chain_until_accept(P, Q, c, U)
        acc = U[:, :k] < full.accept_probs
        first = np.where(acc.any(axis=1), np.argmax(acc, axis=1), k)
        for b in range(P.shape[0]):
            np.testing.assert_array_equal(cut.accept_probs[b, :first[b] + 1], full.accept_probs[b, :first[b] + 1])
            assert np.all(cut.accept_probs[b, first[b] + 1:] == 0)
            if first[b] == k:
                np.testing.assert_array_equal(cut.residual[b], full.residual[b])
            else:
                assert not cut.residual[b].any()
        assert (first < k).any() and (first > 0).any()
        reached[0] += int((first == k).sum())
    assert reached[0] > 0 or (family, V) != ("zipf", 300)         # the residual row is compared somewhere


def test_chain_until_accept_default_is_the_chain_cut_and_checks_uniforms():
    p, q = np.tile([0.6, 0.35, 0.05], (3, 1)), np.tile([0.1, 0.3, 0.6], (3, 1))
    rrs = resispec.get_verifier("rrs")
    full = rrs.chain(p, q, [[2, 1]] * 3)                              # a = (1/12, 1/3.3)
    u = [[0.9, 0.95, 0.3], [0.01, 0.0, 0.3], [0.9, 0.0, 0.3]]      # rejects both / accepts 0 / accepts 1
    cut = rrs.chain_until_accept(p, q, [[2, 1]] * 3, u)
    assert 0.01 < full.accept_probs[0, 0] < 0.9 and 0 < full.accept_probs[0, 1] < 0.95
    np.testing.assert_array_equal(cut.accept_probs[0], full.accept_probs[0])
    np.testing.assert_array_equal(cut.residual[0], full.residual[0])
    np.testing.assert_array_equal(cut.accept_probs[1], [full.accept_probs[1, 0], 0.0])
    np.testing.assert_array_equal(cut.accept_probs[2], full.accept_probs[2])
    assert not cut.residual[1:].any() and full.residual[1:].any()
    a = base.decide(full.accept_probs, full.residual, np.array([[2, 1]] * 3), np.asarray(u))
    b = base.decide(cut.accept_probs, cut.residual, np.array([[2, 1]] * 3), np.asarray(u))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(b.accepted, [-1, 0, 1])
    with pytest.raises(ValueError, match="uniforms"):
        FUSED.chain_until_accept(p[0], q[0], [0, 2], [[0.1, 0.2]])


def test_reference_solver_decides_the_same_wherever_a_row_sits():
    """A near-tie node (plain vs shaped step ~1e-13 apart) as row 299 of a batch and as row 0 after the lazy
    chain drops the 299 rows that accept at once: same tokens (a batched searchsorted lost bits by row)."""
    B, V = 300, 5
    p, q = np.full((B, V), 0.2), np.full((B, V), 0.2)
    d1 = 0.12 / (1 + 1e-13)
    p[-1] = (0.2, 0.2 + d1, 0.6 - d1, 0, 0)
    q[-1] = (0.5, 0.2, 0.3 - 2e-15, 1e-15, 1e-15)
    c = np.tile([0, 1, 2], (B, 1))
    c[-1] = [3, 0, 1]
    u = np.zeros((B, 4))
    u[-1] = [0.5, 0.5, 0.99999999999985, 0.5]
    lazy = REF.verify(p, q, c, uniforms=u)
    full = REF.chain(p, q, c)
    eager = base.decide(full.accept_probs, full.residual, c, u)
    np.testing.assert_array_equal(lazy.tokens, eager.tokens)
    np.testing.assert_array_equal(lazy.accepted, eager.accepted)
    np.testing.assert_array_equal(full.accept_probs[-1], REF.chain(p[-1], q[-1], c[-1]).accept_probs[0])


def test_fused_kernel_decides_the_same_for_any_memory_layout():
    """The kernel sums with reassociation: a stride-0 broadcast, a C copy and a Fortran copy of one batch must
    reach it in one layout, or their last bits (and decisions at u == a) differ."""
    rng = np.random.default_rng(0)
    for _ in range(10):
        V = int(rng.integers(50, 3000))
        p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
        P, Q = np.broadcast_to(p, (4, V)), np.broadcast_to(q, (4, V))
        X = rng.integers(0, V, 4)
        a1, r1, s1, _ = _wor_fused.wor_step_rows(P, Q, X)
        ok = s1 != _wor_fused.FALLBACK                        # FALLBACK rows are not written (the caller's)
        for P2, Q2 in ((P.copy(), Q.copy()), (np.asfortranarray(P), np.asfortranarray(Q))):
            a2, r2, s2, _ = _wor_fused.wor_step_rows(P2, Q2, X)
            np.testing.assert_array_equal(s1, s2)
            np.testing.assert_array_equal(a1[ok], a2[ok])
            np.testing.assert_array_equal(r1[ok], r2[ok])


@pytest.mark.parametrize("v", [FUSED, REF], ids=["fused", "reference"])
def test_blocks_of_rows_give_the_same_chain_and_tokens(v, monkeypatch):
    """A batch run in blocks of rows (large B x V) gives the chain and tokens of one block, bit for bit, in numpy
    and in the torch twin (which skips decided rows in float64 too)."""
    rng = np.random.default_rng(5)
    p, q = get_family("softmax_noise").sample(rng, n=23, V=200, temperature=1.0)
    c = resispec.draw_candidates(q, 4, "without_replacement", rng)
    U = rng.random((23, 5))
    U[::3, :4] = 0.999999                                        # some rows reach the residual
    whole_chain, whole = v.chain(p, q, c), v.verify(p, q, c, uniforms=U)
    whole_cut = v.chain_until_accept(p, q, c, U)
    monkeypatch.setattr(resispec_wor, "_BLOCK_BYTES", 8 * 200 * 5)   # blocks of 5 rows: 5 blocks, the last of 3
    ch, res, cut = v.chain(p, q, c), v.verify(p, q, c, uniforms=U), v.chain_until_accept(p, q, c, U)
    np.testing.assert_array_equal(ch.accept_probs, whole_chain.accept_probs)
    np.testing.assert_array_equal(ch.residual, whole_chain.residual)
    np.testing.assert_array_equal(cut.accept_probs, whole_cut.accept_probs)
    np.testing.assert_array_equal(cut.residual, whole_cut.residual)
    np.testing.assert_array_equal(res.tokens, whole.tokens)
    np.testing.assert_array_equal(res.accepted, whole.accepted)
    torch = pytest.importorskip("torch")
    vt = resispec.get_verifier("resispec", backend="torch", drafting="without_replacement", solver=v.solver)
    t = vt.verify(torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c), uniforms=torch.from_numpy(U))
    np.testing.assert_array_equal(t.tokens.numpy(), whole.tokens)
    np.testing.assert_array_equal(t.accepted.numpy(), whole.accepted)


def _tie_batch(B=150, V=64, k=8, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((B, V)) * 2
    p = np.exp(logits / 1.5)
    p /= p.sum(1, keepdims=True)
    q = np.exp((logits + rng.standard_normal((B, V))) / 1.5)
    q /= q.sum(1, keepdims=True)
    return p, q, resispec.draw_candidates(q, k, "without_replacement", rng)


def test_fused_step_is_deterministic_in_the_last_bit():
    """Breaker (session 37): the kernel was compiled with ``reassoc``, so its sums took a vectorised or a scalar
    loop by where the arrays sat in memory; 2-3.5 % of identical small calls differed by an ulp, and at a tie
    (u == a) verify, chain + decide and the torch twin chose different tokens."""
    p, q, c = _tie_batch()
    junk = []
    for b in range(p.shape[0]):
        for s in (slice(b, b + 1), slice(b, b + 2)):
            one = FUSED.chain(p[s], q[s], c[s])
            junk.append(np.empty(17 + b))                         # move the next allocations
            two = FUSED.chain(p[s], q[s], c[s])
            np.testing.assert_array_equal(one.accept_probs, two.accept_probs)
            np.testing.assert_array_equal(one.residual, two.residual)


@pytest.mark.parametrize("name,drafting", [("resispec", "without_replacement"), ("resispec", "iid"),
                                           ("resispec_myopic", "iid"), ("rrs", "iid")])
def test_fortran_ordered_laws_decide_as_c_ordered(name, drafting):
    """Breaker (session 37): Fortran-ordered p, q kept their layout, so the row sums (and the accept
    probabilities) differed in the last bits from C order and tie uniforms chose other tokens."""
    v = resispec.get_verifier(name, **({"drafting": drafting} if drafting != "iid" else {}))
    p, q, c = _tie_batch(B=30, V=300, k=4, seed=1)
    if drafting == "iid":
        c = resispec.draw_candidates(q, 4, "iid", np.random.default_rng(2))
    a = v.chain(p, q, c).accept_probs
    U = np.concatenate([np.minimum(a, np.nextafter(1.0, 0.0)), np.full((30, 1), 0.5)], axis=1)   # u_i = a_i
    pF, qF = np.asfortranarray(p), np.asfortranarray(q)
    np.testing.assert_array_equal(v.chain(pF, qF, c).accept_probs, a)
    r, rF = v.verify(p, q, c, uniforms=U), v.verify(pF, qF, c, uniforms=U)
    np.testing.assert_array_equal(rF.tokens, r.tokens)
    np.testing.assert_array_equal(rF.accepted, r.accepted)
