"""Inputs are checked once at the door (docs/architecture.md).

``as_laws`` is the one place the law rules live; a public entry point runs it
once and hands the trusted ``Laws`` inward.  The counts below pin that: one
``exactness.certify_verifier`` used to run ``as_laws`` 89 times on the same
``p, q`` (NodeSampler, joint_law, certify_exact, the tree checks, every
``verify`` / ``chain`` / ``masses`` call); it must stay at 1.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import exactness
import resispec
import resispec._validation as val
from exactness.exact import certify_exact, joint_law
from exactness.grid import Cell, run_cell
from exactness.sampling import NodeSampler
from exactness.tree import tree_check
from resispec._validation import Laws, as_node


@pytest.fixture
def as_laws_calls(monkeypatch):
    """Count every ``as_laws`` call, wherever the name was imported."""
    calls = []
    orig = val.as_laws

    def counting(*a, **kw):
        calls.append(a)
        return orig(*a, **kw)

    for mod in list(sys.modules.values()):
        if mod is not None and getattr(mod, "as_laws", None) is orig:
            monkeypatch.setattr(mod, "as_laws", counting)
    return calls


def _node(V=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))


@pytest.mark.parametrize("name", ["rrs", "resispec", "kseq", "rrs_wor", "target_only"])
def test_certify_verifier_checks_the_laws_once(as_laws_calls, name):
    p, q = _node()
    cert = exactness.certify_verifier(resispec.get_verifier(name), p, q, 4, n=10_000)
    assert cert.passed
    assert len(as_laws_calls) == 1


def test_run_cell_checks_the_laws_once(as_laws_calls):
    """The ``resispec certify`` cell: certificate plus acceptance, alpha* and the rrs reference."""
    p, q = _node()
    res = run_cell(Cell("rrs", resispec.get_verifier("rrs"), "fam", 4, p, q), n=10_000, alpha=1e-3, seed=0)
    assert res.certificate.passed and res.alpha_star is not None and res.rrs_acceptance is not None
    assert len(as_laws_calls) == 1


@pytest.mark.parametrize("call", [
    lambda v, node, k: NodeSampler(v, node, None, k).draws(np.random.default_rng(0), 2_000),
    lambda v, node, k: joint_law(v, node, None, k),
    lambda v, node, k: certify_exact(v, node, None, k),
    lambda v, node, k: tree_check(v, node, None, k, 1_000, np.random.default_rng(0), depth=2),
    lambda v, node, k: resispec.acceptance_probability(v, node, None, k),
    lambda v, node, k: resispec.exact_output_law(v, node, None, k),
    lambda v, node, k: resispec.optimal_acceptance(node, None, k),
], ids=["NodeSampler", "joint_law", "certify_exact", "tree_check", "acceptance_probability",
        "exact_output_law", "optimal_acceptance"])
@pytest.mark.parametrize("name", ["rrs", "resispec", "rrs_wor"])
def test_a_validated_node_is_never_checked_again(as_laws_calls, call, name):
    p, q = _node(6)
    node = as_node(p, q)
    assert len(as_laws_calls) == 1
    call(resispec.get_verifier(name), node, 2)
    assert len(as_laws_calls) == 1


def test_verifier_methods_take_a_laws_and_give_the_same_answer(as_laws_calls):
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(7), size=5), rng.dirichlet(np.ones(7), size=5)
    c = np.stack([rng.choice(7, size=3, p=row) for row in q])
    u = rng.random((5, 4))
    v = resispec.get_verifier("resispec")
    node = as_node(p, q)
    del as_laws_calls[:]
    a = v.verify(node, None, c, uniforms=u)
    ch = v.chain(node, None, c)
    law = v.conditional_law(node, None, c)
    assert len(as_laws_calls) == 0
    b = v.verify(p, q, c, uniforms=u)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.accepted, b.accepted)
    np.testing.assert_array_equal(ch.accept_probs, v.chain(p, q, c).accept_probs)
    np.testing.assert_array_equal(law, v.conditional_law(p, q, c))


def test_as_node_passes_a_laws_through_and_keeps_the_messages():
    p, q = _node(4)
    node = as_node(p, q)
    assert isinstance(node, Laws) and node.squeeze and node.shape == (1, 4)
    assert as_node(node) is node
    p2, q2, squeeze = node
    assert p2.dtype == np.float64 and squeeze
    with pytest.raises(TypeError, match="already a validated Laws"):
        as_node(node, q)
    with pytest.raises(ValueError, match=r"p row 0 sums to .*normalise it first"):
        as_node(p * 2, q)
    with pytest.raises(TypeError, match="q must be an array of probabilities, got NoneType"):
        as_node(p)


def test_tree_check_names_a_bad_second_level():
    """``p1, q1`` given by the caller are checked at the tree door, by name (they used to read as ``p``)."""
    p, q = _node(4)
    p1 = np.tile(p, (4, 1))
    q1 = np.tile(q, (4, 1))
    with pytest.raises(ValueError, match=r"p1 and q1 must have shape \(V, V\) = \(4, 4\)"):
        tree_check(resispec.get_verifier("rrs"), p, q, 2, 100, np.random.default_rng(0), p1=p1[:3], q1=q1[:3])
    p1[2] *= 2
    with pytest.raises(ValueError, match="p1 row 2 sums to"):
        tree_check(resispec.get_verifier("rrs"), p, q, 2, 100, np.random.default_rng(0), p1=p1, q1=q1)


def test_a_user_override_of_verify_still_gets_plain_arrays():
    """Only resispec's own methods take a ``Laws``; a user ``verify`` is called as a user would call it."""
    seen = []

    class Mine(resispec.Verifier):
        drafting = "iid"

        def _chain(self, p, q, c):
            return resispec.get_verifier("rrs")._chain(p, q, c)

        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            seen.append((type(p), type(q)))
            return super().verify(p, q, candidates, rng, uniforms=uniforms)

    p, q = _node(5)
    exactness.certify_verifier(Mine(), p, q, 2, n=3_000, tree=False)
    assert seen and all(t == (np.ndarray, np.ndarray) for t in seen)
