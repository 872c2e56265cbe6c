"""Verifiers on a batch whose rows share one node (row stride 0): O(k V) once, then O(k log V) per row, same tokens."""

import numpy as np
import pytest

from exactness import mutants
from resispec import available_verifiers, get_verifier
from resispec._validation import as_law

SHARED = [n for n in available_verifiers() if get_verifier(n).handles_shared_nodes]
MUTANTS = ["bf16_ratio", "residual_not_renormalised", "residual_is_p", "always_accept"]


def _batch(V, B, k, seed):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    cdf = np.cumsum(q)
    c = np.minimum(np.searchsorted(cdf, rng.random((B, k)) * cdf[-1], side="right"), V - 1)
    u = rng.random((B, k + 1))
    u[::2, :k] = 1 - 1e-12                        # half the rows reject every candidate: residual draws
    return p, q, c, u


def test_the_shared_path_covers_rrs_and_the_benchmark_mutants():
    assert {"rrs", "sps", "resispec"} <= set(SHARED)
    assert all(mutants.CATALOGUE[n].handles_shared_nodes for n in MUTANTS)
    assert not mutants.CATALOGUE["batch_broadcast"].handles_shared_nodes
    assert not get_verifier("rrs_wor").handles_shared_nodes


@pytest.mark.parametrize("name", SHARED + MUTANTS)
@pytest.mark.parametrize("V,k", [(2, 1), (50, 3), (3000, 2)])
def test_shared_node_path_equals_per_row_path_token_for_token(name, V, k):
    ver = mutants.CATALOGUE[name] if name in mutants.CATALOGUE else get_verifier(name)
    p, q, c, u = _batch(V, 64, k, V + k)
    shared = ver.verify(np.broadcast_to(p, (64, V)), np.broadcast_to(q, (64, V)), c, uniforms=u)
    rows = ver.verify(np.tile(p, (64, 1)), np.tile(q, (64, 1)), c, uniforms=u)       # contiguous: per-row path
    assert np.array_equal(shared.tokens, rows.tokens) and np.array_equal(shared.accepted, rows.accepted)
    if V >= 50:                                   # both branches exercised (at V = 2 a candidate may have a = 1)
        assert np.any(shared.accepted >= 0) and (name == "always_accept" or np.any(shared.accepted < 0))


def test_shared_node_path_at_a_real_vocabulary():
    p, q, c, u = _batch(151_936, 24, 2, 1)
    ver = get_verifier("rrs")
    shared = ver.verify(np.broadcast_to(p, (24, p.size)), np.broadcast_to(q, (24, p.size)), c, uniforms=u)
    rows = ver.verify(np.tile(p, (24, 1)), np.tile(q, (24, 1)), c, uniforms=u)
    assert np.array_equal(shared.tokens, rows.tokens) and np.array_equal(shared.accepted, rows.accepted)


def test_shared_rows_never_run_the_per_row_chain(monkeypatch):
    ver = get_verifier("rrs")
    p, q, c, u = _batch(500, 1000, 2, 0)

    def per_row(*a, **kw):
        raise AssertionError("per-row chain called on rows that share one node")

    monkeypatch.setattr(ver, "_chain", per_row)
    ver.verify(np.broadcast_to(p, (1000, 500)), np.broadcast_to(q, (1000, 500)), c, uniforms=u)
    ver.verify([p] * 1000, [q] * 1000, c, uniforms=u)                 # the same row object repeated
    with pytest.raises(AssertionError, match="per-row"):
        ver.verify(np.tile(p, (1000, 1)), np.tile(q, (1000, 1)), c, uniforms=u)


def test_a_user_mass_rule_keeps_the_per_row_path():
    from resispec.verifiers.base import MassVerifier

    class Mine(MassVerifier):                    # candidate_independent defaults to True: not trusted
        def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
            return np.minimum(p_i, q_i)

    assert not Mine().handles_shared_nodes


def test_shared_rows_are_validated_once_and_stay_views():
    p = np.full(7, 1 / 7)
    for x in (np.broadcast_to(p, (5, 7)), [p] * 5):
        out = as_law(x, name="p")
        assert out.shape == (5, 7) and out.strides[0] == 0 and not out.flags.writeable
    with pytest.raises(ValueError, match="p row 0 sums to"):
        as_law(np.broadcast_to(p * 2, (5, 7)), name="p")
    with pytest.raises(ValueError, match="NaN"):
        as_law([np.full(3, np.nan)] * 4, name="p")
