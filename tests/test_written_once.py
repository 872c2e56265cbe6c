"""Each rule once (issue 39 item 1): the rules of ``WRITTEN_ONCE`` run their numpy module's own lines on torch.

The exact-enumeration, Monte Carlo and decision-parity tests of these rules on torch (float64 and float32) are
``tests/test_torch_exact.py``, ``tests/test_torch_certify.py`` and ``tests/test_torch_parity.py``; this file pins
that no torch twin exists for them and that the shared pieces (``resispec._xp``) give the numpy indexing's values.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import resispec  # noqa: E402
from resispec import _xp  # noqa: E402
from resispec.torch_backend.base import TorchRule  # noqa: E402
from resispec.torch_backend.rules import WRITTEN_ONCE  # noqa: E402
from resispec.verifiers.registry import _REGISTRY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", WRITTEN_ONCE)
def test_torch_runs_the_numpy_rule(name):
    v = resispec.get_verifier(name, backend="torch")
    assert isinstance(v, TorchRule)
    assert type(v).rule_class is _REGISTRY["numpy"][name]
    assert type(v)._chain_t is TorchRule._chain_t               # no rule code of its own
    assert v.drafting == resispec.get_verifier(name).drafting


def test_no_torch_module_defines_a_written_once_rule():
    """No class in ``resispec/torch_backend/`` is registered under a written-once name by hand."""
    for path in (ROOT / "resispec" / "torch_backend").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "register" and deco.args:
                    assert getattr(deco.args[0], "value", None) not in WRITTEN_ONCE, (path.name, node.name)


@pytest.mark.parametrize("name", ["sps", "rrs", "rrs_wor"])
def test_masses_on_torch_equal_numpy(name):
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(12), size=5), rng.dirichlet(np.ones(12), size=5)
    drafting = resispec.get_verifier(name).drafting
    c = resispec.sampling.draw_candidates(q, 3, drafting, rng)
    want = resispec.get_verifier(name).masses(p, q, c)
    got = resispec.get_verifier(name, backend="torch").masses(*(torch.from_numpy(a) for a in (p, q, c)))
    for w, g in zip(want, got):                                   # sums differ in order: round-off only
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12, atol=1e-15)


def test_masses_of_a_rule_without_masses_is_a_clear_error():
    v = resispec.get_verifier("kseq", backend="torch")
    p = torch.full((1, 4), 0.25, dtype=torch.float64)
    with pytest.raises(TypeError, match="not an accepted-mass rule"):
        v.masses(p, p, torch.zeros((1, 2), dtype=torch.int64))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_row_operations_equal_numpy_indexing(lib):
    rng = np.random.default_rng(0)
    x, idx = rng.random((6, 9)), rng.integers(0, 9, 6)
    rows = np.arange(6)
    zeroed, kept = x.copy(), np.zeros_like(x)
    zeroed[rows, idx] = 0.0
    kept[rows, idx] = x[rows, idx]
    m = 0.5 * x
    m[0] = x[0]                                                   # a row with no mass left keeps p_i
    X, I, M = (x, idx, m) if lib == "numpy" else (torch.from_numpy(x), torch.from_numpy(idx), torch.from_numpy(m))
    as_np = (lambda a: a) if lib == "numpy" else (lambda a: a.numpy())
    np.testing.assert_array_equal(as_np(_xp.at(X, I)), x[rows, idx])
    np.testing.assert_array_equal(as_np(_xp.zero_at(X, I)), zeroed)
    np.testing.assert_array_equal(as_np(_xp.only_at(X, I)), kept)
    resid = np.maximum(x - m, 0.0)
    z = resid.sum(axis=1, keepdims=True)
    want = np.where(z > 1e-13, resid / np.where(z > 1e-13, z, 1.0), x)
    np.testing.assert_array_equal(as_np(_xp.reject_update(X, M)), want)
    np.testing.assert_array_equal(want[0], x[0])


def test_the_walk_hands_its_state_explicitly():
    """A rule's plan lives in the walk's own dict, passed as ``state=`` (was a thread-local ``walk_plan()``):
    one dict for the steps of one walk, a fresh one for the next walk; a rule without ``state`` is not given it."""
    from resispec.verifiers.base import MassVerifier

    seen = []

    class Planned(MassVerifier):
        def accepted_mass(self, i, k, p_i, q_i, *, q, rejected, state=None):
            seen.append(id(state))
            state.setdefault("steps", []).append(i)
            return np.minimum(p_i, q_i)

    class Plain(MassVerifier):
        def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
            return np.minimum(p_i, q_i)

    p, q = np.full((2, 4), 0.25), np.array([[0.7, 0.1, 0.1, 0.1]] * 2)
    c = np.array([[0, 1, 2], [3, 0, 1]])
    for v in (Planned(), Plain()):
        np.testing.assert_array_equal(v.chain(p, q, c).accept_probs, resispec.get_verifier("rrs").chain(p, q, c).accept_probs)
    Planned().chain(p, q, c)
    assert seen[0] == seen[1] == seen[2] and seen[3] == seen[4] == seen[5] and len(seen) == 6
    for path in (ROOT / "resispec").rglob("*.py"):
        assert "threading.local" not in path.read_text(), path


@pytest.mark.parametrize("name", WRITTEN_ONCE)
def test_torch_form_pickles(name):
    """The torch classes are made by on_torch; they must be importable by name (spawned workers, Ray)."""
    import pickle

    from resispec.torch_backend import NumpyFacade

    v = NumpyFacade(resispec.get_verifier(name, backend="torch"))
    assert type(pickle.loads(pickle.dumps(v)).inner) is type(v.inner)


def test_an_accepted_mass_set_on_the_instance_is_called_as_it_is():
    v = resispec.get_verifier("resispec")
    v.accepted_mass = lambda i, k, p_i, q_i, *, q, rejected: np.minimum(p_i, q_i)
    want = resispec.get_verifier("rrs").chain([.5, .3, .2], [.1, .2, .7], [2, 1]).accept_probs
    np.testing.assert_array_equal(v.chain([.5, .3, .2], [.1, .2, .7], [2, 1]).accept_probs, want)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("out,what", [(lambda R: R.astype(complex) if hasattr(R, "astype") else R.to(torch.complex128),
                                       "real floats"),
                                      (lambda R: [[10 ** 400, 0, 0]] * R.shape[0], "floats"),
                                      (lambda R: [["1", "0", "0"]] * R.shape[0], "floats"),
                                      (lambda R: R > 0, "real floats")])
def test_a_proxy_output_of_another_kind_is_refused_naming_the_proxy(backend, out, what):
    """Complex entries lost their imaginary part (a biased proxy passed), 10**400 escaped as OverflowError, text
    was accepted on numpy only."""
    v = resispec.get_verifier("rejection_proxy", backend=backend, proxy=lambda R, q, x, *, step: out(R))
    p, q, c = np.array([[.5, .3, .2]]), np.array([[.1, .2, .7]]), np.array([[2, 1]])
    args = (p, q, c) if backend == "numpy" else tuple(torch.from_numpy(a) for a in (p, q, c))
    with pytest.raises(ValueError, match=f"proxy '.*<lambda>' at step 0 .*{what}"):
        v.chain(*args)


def test_a_torch_proxy_output_that_requires_grad_is_used_for_its_values():
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)

    def proxy(R, q, x, *, step):
        r = (R - q).clamp(min=0)
        return r / r.sum(1, keepdim=True) + 0 * w

    v = resispec.get_verifier("rejection_proxy", backend="torch", proxy=proxy)
    law = resispec.exact_output_law(v, [.5, .3, .2], [.1, .2, .7], 2)
    np.testing.assert_allclose(law, [.5, .3, .2], atol=1e-12)


@pytest.mark.parametrize("name,args,err", [("rejection_proxy", (0, 3), ValueError), ("rrs_wor", ("2",), TypeError),
                                           ("sps", (0, "without_replacement"), ValueError),
                                           ("resispec", (2, "neither"), ValueError)])
def test_closed_form_split_checks_k_and_drafting_even_without_a_closed_form(name, args, err):
    """It returned None (no closed form) for k = 0, k = '2' or drafting = 3 (breaker)."""
    with pytest.raises(err):
        resispec.get_verifier(name).closed_form_split([.5, .3, .2], [.1, .2, .7], *args)
