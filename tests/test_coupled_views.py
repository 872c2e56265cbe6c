"""certify_coupled hands the kernel one node as read-only broadcast views (no per-row copies), in large batches."""

import numpy as np
import pytest

from exactness.coupled import certify_coupled
from exactness.sampling import _ELEMS
from resispec import get_verifier

P = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
Q = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])


class Recorder:
    """rrs as a user kernel that records what it is given."""

    drafting = "iid"

    def __init__(self, shared=False, normalise_in_place=False):
        self.rrs, self.seen = get_verifier("rrs"), []
        self.handles_shared_nodes, self.in_place = shared, normalise_in_place

    def verify(self, p, q, candidates, rng=None, *, uniforms):
        self.seen.append((p.shape, p.strides[0], q.strides[0], p.flags.writeable, candidates.flags.writeable))
        if self.in_place:
            p /= p.sum(axis=1, keepdims=True)
        return self.rrs.verify(p, q, candidates, rng, uniforms=uniforms)


def test_kernel_gets_read_only_broadcast_views():
    kern = Recorder()
    assert certify_coupled(kern, "rrs", P, Q, 2, n=3000).passed
    assert all(s0 == 0 and sq == 0 and not w and not wc for _, s0, sq, w, wc in kern.seen)


def test_a_kernel_that_writes_into_its_inputs_is_told_to_pass_copies():
    cert = certify_coupled(Recorder(normalise_in_place=True), "rrs", P, Q, 2, n=3000)   # the subject misbehaved
    assert not cert.passed and cert.outcome == "FAIL" and cert.classification == "subject error"
    assert "wrote into its read-only inputs" in cert.cause and "copies=True" in cert.cause
    kern = Recorder(normalise_in_place=True)
    assert certify_coupled(kern, "rrs", P, Q, 2, n=3000, copies=True).passed
    assert all(s0 > 0 and w for _, s0, _, w, _ in kern.seen)
    with pytest.raises(TypeError, match="copies"):
        certify_coupled(Recorder(), "rrs", P, Q, 2, n=10, copies="yes")


def test_a_torch_style_write_through_the_buffer_is_caught():
    class Sneaky(Recorder):
        def verify(self, p, q, candidates, rng=None, *, uniforms):
            out = super().verify(p, q, candidates, rng, uniforms=uniforms)
            base = p
            while base.base is not None:
                base = base.base
            base.flat[0] += 1e-3                         # writes behind the read-only view (as torch can)
            return out

    cert = certify_coupled(Sneaky(), "rrs", P, Q, 2, n=300)
    assert not cert.passed and cert.classification == "subject error" and "changed during the call" in cert.cause


def test_shared_node_kernels_get_large_batches_at_a_real_vocabulary():
    V = 151_936
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.full(V, 0.1)), rng.dirichlet(np.full(V, 0.1))
    kern = Recorder(shared=True)
    cert = certify_coupled(kern, "rrs", p, q, 2, n=200_000)
    assert cert.passed and cert.n == 200_000
    assert len(kern.seen) <= 12 and max(s[0][0] for s in kern.seen) > 100 * (_ELEMS // V)
    assert get_verifier("rrs").handles_shared_nodes
