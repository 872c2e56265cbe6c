"""Fast paths of the harness (exactness.fast_paths): bit for bit with verify, exact law, bugs still caught."""

from __future__ import annotations

import types

import numpy as np
import pytest

import exactness
from exactness import chunks, fast_paths, limits, sampling
from exactness._search import GuidedCDF
from exactness.fast_paths import _RRSWORPath, _TargetOnlyPath
from exactness.sampling import NodeSampler
from resispec import get_verifier
from resispec.enumeration import candidate_tuples
from resispec.verifiers.base import law_from_chain

FAST = {"target_only": "target_only_closed_form", "rrs_wor": "rrs_wor_threshold",
        "rejection_proxy": "rejection_proxy_table"}


def _laws(V, seed, conc=0.3):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


@pytest.mark.parametrize("name", sorted(FAST))
@pytest.mark.parametrize("V, k, conc", [(300, 3, 0.3), (120, 8, 0.05), (64, 4, 5.0)])
def test_fast_path_draws_equal_verify_bit_for_bit(name, V, k, conc):
    p, q = _laws(V, V + k, conc)
    for qq in (q, 0.5 * (p + q)):
        v = get_verifier(name)
        fast, slow = NodeSampler(v, p, qq, k), NodeSampler(v, p, qq, k, fast=False)
        assert fast.path == FAST[name] and slow.path == "generic"
        a, b = fast.draws(np.random.default_rng(1), 1_500), slow.draws(np.random.default_rng(1), 1_500)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)
        g = fast.guard
        assert g["verify_draws"] == sampling.GUARD and g["chain_tuples"] == sampling.GUARD
        assert g["chain_max_diff"] < 1e-12


@pytest.mark.parametrize("name", sorted(FAST))
def test_peaked_and_one_hot_laws(name):
    V, k = 80, 4
    p = np.full(V, 1e-14)
    p[5], p[11:11 + k] = 1.0, 1e-3
    p /= p.sum()
    q = np.full(V, 1.0 / V)
    for pp, qq in ((p, q), (q, p), (p, p)):
        v = get_verifier(name)
        a = NodeSampler(v, pp, qq, k).draws(np.random.default_rng(2), 800)
        b = NodeSampler(v, pp, qq, k, fast=False).draws(np.random.default_rng(2), 800)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)


@pytest.mark.parametrize("name, drafting", [("target_only", "iid"), ("rrs_wor", "without_replacement")])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_fast_path_chain_gives_p_exactly_by_enumeration(name, drafting, k):
    p, q = _laws(6, k)
    path = _TargetOnlyPath(p, k) if name == "target_only" else _RRSWORPath(p, q, k)
    law = np.zeros(6)
    for tup, w in candidate_tuples(q, k, drafting):
        a, r = path.chain(tup)
        law += w @ law_from_chain(a, r, tup)
    assert 0.5 * np.abs(law - p).sum() < 1e-12


@pytest.mark.parametrize("name", sorted(FAST))
def test_fast_path_monte_carlo_against_p(name):
    p, q = _laws(400, 7)
    cert = exactness.certify_verifier(get_verifier(name), p, q, 4, n=30_000, tree=False, seed=3)  # numpy loops
    assert cert.details["path"] == FAST[name]
    assert cert.details["fast_path_check"]["chain_tuples"] >= sampling.GUARD
    assert cert.pvalue > 1e-4, cert.summary()


def test_certificate_at_large_v_names_the_path_and_is_not_capped():
    p, q = _laws(4096, 0)
    for name in FAST:
        s = NodeSampler(get_verifier(name), p, q, 4)
        assert s.path == FAST[name]
        assert exactness.verifier_cert.default_n(s) == exactness.verifier_cert.DEFAULT_N   # was 2,441
    cert = exactness.certify_verifier(get_verifier("rrs_wor"), p, q, 4, n=20_000, tree=False)
    assert cert.details["path"] == "rrs_wor_threshold" and cert.n == 20_000


def test_small_v_keeps_the_generic_path():
    p, q = _laws(8, 1)
    assert NodeSampler(get_verifier("target_only"), p, q, 8).path == "generic"   # V k = 64 <= FAST_MIN_ELEMS


def _rrs_on_wor(v):
    """Graft the ``rrs_on_wor`` mutant's chain (``exactness.mutants.RRSOnWOR``) into a built-in rrs_wor."""
    from exactness.mutants import RRSOnWOR

    v._chain = types.MethodType(RRSOnWOR._chain, v)
    return v


def test_a_replaced_method_sends_a_built_in_to_the_generic_path():
    """A built-in whose sampling methods were replaced (on the instance, by patching the class, even with
    functools.wraps keeping the name and module) is sampled through its own verify, never a table or fast path
    that mirrors the built-in rule (a breaker's class-level patch of rrs' verify passed every cell before)."""
    import functools

    from exactness.fast_paths import pristine
    from resispec.verifiers.baselines import RecursiveRejection

    p, q = _laws(300, 4)
    assert all(pristine(get_verifier(n)) for n in ("rrs", "sps", "kseq", "rrs_wor", "target_only", "resispec"))
    v = _rrs_on_wor(get_verifier("rrs_wor"))
    assert not pristine(v) and NodeSampler(v, p, q, 4).path == "generic"
    orig = RecursiveRejection.verify

    @functools.wraps(orig)
    def verify(self, P, Q, c, rng=None, **kw):
        res = orig(self, P, Q, c, rng, **kw)
        if c.shape[0] > 1024:                  # wrong only on large batches: the 64 guard draws would not see it
            res.tokens[:], res.accepted[:] = 0, -1
        return res

    had = "verify" in vars(RecursiveRejection)
    RecursiveRejection.verify = verify
    try:
        w = get_verifier("rrs")
        assert not pristine(w) and NodeSampler(w, p, q, 2).path == "generic"
        assert not exactness.certify_verifier(w, p, q, 2, n=20_000, tree=False).passed
    finally:
        if had:
            RecursiveRejection.verify = orig
        else:
            del RecursiveRejection.verify
    assert pristine(get_verifier("rrs"))


def test_a_biased_chain_is_caught_through_the_fast_path(monkeypatch):
    """The run-time recheck (for a bug inside this project's own code, where ``pristine`` holds)."""
    from exactness import fast_paths

    monkeypatch.setattr(fast_paths, "pristine", lambda v: True)
    p, q = _laws(300, 4)
    v = _rrs_on_wor(get_verifier("rrs_wor"))
    s = NodeSampler(v, p, q, 4)
    assert s.path == "rrs_wor_threshold"       # the built-in type still selects the fast path ...
    with pytest.raises(RuntimeError, match="disagrees"):  # ... and the recheck against its own code flags it
        exactness.certify_verifier(v, p, q, 4, n=20_000, tree=False)


@pytest.mark.parametrize("name", ["target_only", "rrs"])        # a fast path; the accept table
def test_a_rare_bug_in_verify_is_caught_by_the_per_chunk_recheck(monkeypatch, name):
    from exactness import fast_paths

    monkeypatch.setattr(fast_paths, "pristine", lambda v: True)    # as if the bug were in this project's code
    p, q = _laws(300, 5)
    v = get_verifier(name)
    inner = v.verify
    calls = []

    def late_bug(P, Q, c, rng=None, *, uniforms=None):
        res = inner(P, Q, c, rng, uniforms=uniforms)
        calls.append(1)
        if len(calls) > 3:                     # correct on the first calls (the first GUARD draws)
            res.tokens[:] = (res.tokens + 1) % P.shape[1]
        return res

    v.verify = late_bug
    s = NodeSampler(v, p, q, 3)
    monkeypatch.setattr(limits, "CHUNK", 1_000)
    with pytest.raises((RuntimeError, ValueError), match="disagrees|accepted"):
        s.draws(np.random.default_rng(0), 10_000)


def test_guided_search_equals_searchsorted(monkeypatch):
    from exactness import _search

    monkeypatch.setattr(_search, "SMALL", 0)   # the compiled loop even for these few queries
    rng = np.random.default_rng(0)
    for law in (rng.dirichlet(np.full(500, 0.05)), np.r_[np.zeros(5), rng.random(50), np.zeros(7)], np.ones(1)):
        cdf = np.cumsum(law)
        g = GuidedCDF(cdf)
        t = np.r_[rng.random(5_000) * cdf[-1], 0.0, cdf, cdf[-1] * 1.5, -1.0, np.nextafter(cdf, 0)]
        assert np.array_equal(g.search(t), np.searchsorted(cdf, t, side="right"))


def test_counting_in_chunks_equals_counting_all_draws(monkeypatch):
    p, q = _laws(300, 9)
    s = NodeSampler(get_verifier("rrs_wor"), p, q, 3)
    ss = np.random.SeedSequence(4)
    monkeypatch.setattr(limits, "CHUNK", 700)
    parts = chunks.count_chunk(s, (ss, 5_000))                      # counted 700 draws at a time
    ref = chunks.counts_of(s.draws(np.random.default_rng(ss), 5_000), 300, 3)   # all draws kept, then counted
    assert np.array_equal(ref.tokens, parts.tokens) and np.array_equal(ref.joint, parts.joint)


class _SharedBox:
    """A black box wrapping rrs that declares handles_shared_nodes: it gets read-only views in large batches."""

    drafting = "iid"
    handles_shared_nodes = True

    def __init__(self):
        self.v, self.rows, self.strides = get_verifier("rrs"), [], set()

    def verify(self, p, q, candidates, rng):
        self.rows.append(p.shape[0])
        self.strides.add(p.strides[0])
        return self.v.verify(p, q, candidates, rng)


def test_black_box_declaring_shared_nodes_gets_views_in_large_batches():
    p, q = _laws(4096, 2)
    box = _SharedBox()
    s = NodeSampler(box, p, q, 4)
    assert s.path == "generic"
    s.draws(np.random.default_rng(0), 3 * sampling.SHARED_ROWS // 2)
    assert box.strides == {0} and max(box.rows) == sampling.SHARED_ROWS     # not 2**21 / 4096 = 512 copies
    p, q = _laws(512, 3)
    cert = exactness.certify_verifier(_SharedBox(), p, q, 4, n=100_000, tree=False)
    assert cert.passed, cert.summary()


def test_fast_path_registry_is_exact_type_only():
    class Mine(type(get_verifier("rrs_wor"))):
        pass

    p, q = _laws(300, 3)
    assert fast_paths.fast_path_for(Mine(), p, q, 3) is None
    assert NodeSampler(Mine(), p, q, 3).path == "generic"


def test_rejection_proxy_with_a_user_proxy_keeps_the_generic_path():
    from resispec.verifiers.rejection_proxy import RejectionProxy, rrs_residual

    p, q = _laws(300, 6)
    mine = RejectionProxy(lambda R, q, x, *, step: rrs_residual(R, q, x, step=step))
    assert NodeSampler(mine, p, q, 3).path == "generic"


@pytest.mark.slow  # compiles the numba loops (~10-20 s once); long runs recheck them against verify anyway
def test_compiled_kernels_equal_the_numpy_references(monkeypatch):
    monkeypatch.setattr(fast_paths, "KERNEL_MIN_DRAWS", 0)
    p, q = _laws(500, 8, 0.1)
    rng = np.random.default_rng(0)
    uc, uv = rng.random((3_000, 4)), rng.random((3_000, 5))
    wor = _RRSWORPath(p, q, 4)
    cand = wor.candidates(uc)
    assert np.array_equal(cand, wor.candidates_numpy(uc))
    lazy, ref = wor.draw_lazy(uc, uv), wor.draw_numpy(cand, uv)     # candidates drawn only when reached
    assert np.array_equal(lazy[0], ref[0]) and np.array_equal(lazy[1], ref[1])
    for got, ref in ((wor.draw(cand, uv), wor.draw_numpy(cand, uv)),
                     (_TargetOnlyPath(p, 4).draw(cand, uv), _TargetOnlyPath(p, 4).draw_numpy(cand, uv))):
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])
