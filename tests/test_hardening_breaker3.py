"""Adversarial review (breaker 3) of tv planning, sequential testing, executors, proxies and cpu_linear."""

import warnings

import numpy as np
import pytest

from exactness import certify_verifier
from resispec import get_verifier

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("tv", [1e-160, 1e-300])
def test_tiny_tv_is_refused_naming_tv_not_an_overflow(tv, sequential):
    # was: OverflowError (pooled_df / pilot on a Python int beyond float range) or ZeroDivisionError (sequential)
    with pytest.raises(ValueError, match=r"tv = 1e-\d+ needs n = ~1e\d+ draws .*memory limit") as e:
        certify_verifier(get_verifier("rrs"), P, Q, 2, tv=tv, sequential=sequential)
    assert len(str(e.value)) < 600  # the planned n is written ~1eNNN, not with hundreds of digits


@pytest.mark.parametrize("sequential", [False, True])
def test_tv_one_plans_a_test_that_can_fail(sequential):
    # was: tv=1 planned n = 9 draws, then "no degrees of freedom ... use n >= ..." although the user gave no n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cert = certify_verifier(get_verifier("rrs"), P, Q, 2, tv=1.0, sequential=sequential)
    assert cert.df >= 1 and cert.details["plan"]["n"] == cert.n


@pytest.mark.parametrize("kind", [["auto"], {"auto": 1}])
def test_linear_kind_not_a_string_is_a_type_error_naming_linear(kind):
    torch = pytest.importorskip("torch")
    from resispec.decoding.cpu_linear import apply_linear
    from resispec.decoding.models import load_model

    # was: TypeError "unhashable type: 'list'" (no argument named)
    with pytest.raises(TypeError, match="linear must be a string"):
        apply_linear(torch.nn.Linear(2, 2), kind)
    with pytest.raises(TypeError, match="linear must be a string"):
        load_model("tiny-missing-path-never-read", linear=kind)


def _rrs_then_uniform(R, q, x, *, step):
    """Exact residual at the first rejection (norm((R - q)_+)), a uniform law after: biased at k >= 2."""
    if step == 0:
        r = np.maximum(R - q, 0.0)
        s = r.sum(-1, keepdims=True)
        return np.where(s > 0, r / np.where(s > 0, s, 1.0), R)
    return np.full(R.shape, 1.0 / R.shape[-1])


def test_validate_proxy_without_evidence_after_the_first_rejection_is_not_called_exact():
    from exactness import validate_proxy

    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(16)), rng.dirichlet(np.ones(16))
    small = validate_proxy(_rrs_then_uniform, p[:3] / p[:3].sum(), q[:3] / q[:3].sum(), 2, certify=False)
    assert small.exact is False and small.tv > 1e-3  # enumeration sees the step-1 bias
    # 16^5 tuples > ENUMERATION_LIMIT and certify=False: only the first rejection is checked.
    # was: exact=True ("EXACT") for this biased rule
    r = validate_proxy(_rrs_then_uniform, p, q, 5, certify=False)
    assert r.transport_residual < 1e-12 and r.tv is None
    assert r.exact is None and "UNDECIDED" in r.summary()


def _dropping_executor(mode):
    from exactness.executors import Executor

    class Dropping(Executor):
        kind = "dropping"

        def map_chunks(self, fn, jobs, *, on_done=None, on_error=None):
            out = [fn(j) for j in jobs]
            return out[:-1] if mode == "drop" else out[:-1] + [None]

    return Dropping(1)


@pytest.mark.parametrize("sequential", [False, True])
@pytest.mark.parametrize("mode", ["drop", "none"])
def test_plugin_executor_that_loses_a_chunk_is_an_error(mode, sequential):
    # was: a certificate on fewer draws than asked (drop) or an AttributeError deep in the summing (none)
    with pytest.raises(RuntimeError, match=r"executor 'dropping'"):
        certify_verifier(get_verifier("rrs"), P, Q, 2, n=6000, workers=3, executor=_dropping_executor(mode),
                         sequential=sequential)
