"""A verifier is a function of (p, q, candidates, uniforms): the same bits whatever the layout of the batch or the
threads that share the verifier (breaker findings, session 37).  Uniforms placed exactly at the accept
probabilities turn any last-bit difference into a different token."""

import threading

import numpy as np
import pytest

import resispec


def _ties(v, p, q, c, rng):
    a = v.chain(p, q, c).accept_probs
    return np.concatenate([np.minimum(a, np.nextafter(1.0, 0.0)), rng.random((p.shape[0], 1))], axis=1)


@pytest.mark.parametrize("name", ["target_only", "rrs", "kseq", "resispec", "resispec_myopic"])
def test_shared_node_rows_decide_as_copies(name):
    """target_only built its accepted mass with zeros_like of a broadcast batch (Fortran-strided), so its
    residual summed in another order and tie uniforms chose other tokens (3 of 5 rows at V = 64)."""
    v = resispec.get_verifier(name)
    rng = np.random.default_rng(0)
    V, B, k = 64, 5, 4
    p, q = rng.dirichlet(np.full(V, 0.3)), rng.dirichlet(np.full(V, 0.3))
    pC, qC = np.tile(p, (B, 1)), np.tile(q, (B, 1))
    c = resispec.draw_candidates(qC, k, "iid", rng)
    U = _ties(v, pC, qC, c, rng)
    want = v.verify(pC, qC, c, uniforms=U)
    for pp, qq in [(np.broadcast_to(p, (B, V)), np.broadcast_to(q, (B, V))), ([p] * B, [q] * B), (p, qC)]:
        got = v.verify(pp, qq, c, uniforms=U)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.accepted, want.accepted)
    np.testing.assert_array_equal(v.chain(np.broadcast_to(p, (B, V)), np.broadcast_to(q, (B, V)), c).residual,
                                  v.chain(pC, qC, c).residual)


def test_a_verifier_shared_by_threads_decides_as_one_thread():
    """resispec_myopic kept its Newton warm start on the instance: a call in another thread read it, and the
    warm start moves lambda's last bit, so ~70 % of concurrent calls chose other tokens at ties."""
    v = resispec.get_verifier("resispec_myopic")
    rng = np.random.default_rng(3)
    B, V, k = 64, 1000, 4
    jobs = []
    for _ in range(2):
        p, q = rng.dirichlet(np.full(V, 0.3), B), rng.dirichlet(np.full(V, 0.3), B)
        c = resispec.draw_candidates(q, k, "iid", rng)
        U = _ties(v, p, q, c, rng)
        jobs.append((p, q, c, U, v.verify(p, q, c, uniforms=U).tokens))
    bad = [0, 0]

    def worker(j):
        p, q, c, U, ref = jobs[j]
        for _ in range(12):
            bad[j] += not np.array_equal(v.verify(p, q, c, uniforms=U).tokens, ref)

    ts = [threading.Thread(target=worker, args=(j,)) for j in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert bad == [0, 0]
