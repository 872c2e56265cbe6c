"""``exactness.certify``: one front door picks the route from what it is given; one Budget / Run on every route;
every certificate reads through the same names (``exactness.result.VOCABULARY``)."""

from __future__ import annotations

import numpy as np
import pytest

import exactness
from exactness import Budget, Run, certify, mutants
from exactness.certificate import Certificate
from exactness.coupled.certify import CoupledCertificate
from exactness.coupled.tree import ReferenceTreeKernel, TreeCertificate
from exactness.front_door import ROUTES, routes_table
from exactness.path_mutants import PATH_MUTANTS
from exactness.pathlevel import PathCertificate
from exactness.result import VOCABULARY, Result, detectable_mismatch_rate
from exactness.stepwise import StepwiseCertificate
from resispec import get_verifier
from resispec.pathlevel import get_path_verifier
from resispec.verifiers.resispec_wor import ResiSpecWOR
from simulators.autoregressive import MarkovPair

rng0 = np.random.default_rng(2)
V, K = 12, 2
P, Q = rng0.dirichlet(np.ones(V)), rng0.dirichlet(np.ones(V))
P1, Q1 = rng0.dirichlet(np.ones(V), size=K), rng0.dirichlet(np.ones(V), size=K)
PAIR = MarkovPair.random(np.random.default_rng(1), 3, noise=2.0, scale=2.0)


def _counts(law, n, seed):
    return np.bincount(np.random.default_rng(seed).choice(len(law), size=n, p=law), minlength=len(law))


class Biased:
    """Always emits token 0: a sampler / counts far from any law with mass elsewhere."""

    def __call__(self, rng, m):
        return np.zeros(m, dtype=np.int64)


def _subjects():
    """(label, certificate type, call) for a passing and a failing subject of every route that can fail cheaply."""
    wrong = np.zeros(V, dtype=np.int64)
    wrong[0] = 2000
    return [
        ("counts pass", Certificate, lambda: certify(counts=_counts(P, 4000, 1), p=P)),
        ("counts fail", Certificate, lambda: certify(counts=wrong, p=P)),
        ("samples pass", Certificate,
         lambda: certify(tokens=np.random.default_rng(3).choice(V, size=4000, p=P), p=P)),
        ("sampler fail", Certificate, lambda: certify(Biased(), law=P, budget=Budget(n=2000))),
        ("coupled pass", CoupledCertificate,
         lambda: certify(get_verifier("rrs"), reference="rrs", p=P, q=Q, k=K, budget=Budget(n=3000))),
        ("coupled fail", CoupledCertificate,
         lambda: certify(mutants.CATALOGUE["batch_broadcast"], reference="rrs", p=np.stack([P, Q, P1[0]]),
                         q=np.stack([Q, P, Q1[0]]), k=K, budget=Budget(n=3000))),
        ("tree pass", TreeCertificate,
         lambda: certify(ReferenceTreeKernel(get_verifier("rrs")), reference="rrs", p=P, q=Q, p_child=P1,
                         q_child=Q1, k=K, budget=Budget(n=2000))),
        ("stepwise pass", StepwiseCertificate,
         lambda: certify(ResiSpecWOR(), p=P, q=Q, k=3, budget=Budget(n=400))),
        ("path pass", PathCertificate,
         lambda: certify(get_path_verifier("block"), pair=PAIR, L=2, budget=Budget(n=600), seed=3)),
        ("path fail", PathCertificate,
         lambda: certify(PATH_MUTANTS[sorted(PATH_MUTANTS)[0]](), pair=PAIR, L=2, budget=Budget(n=4000))),
    ]


@pytest.mark.parametrize("label,kind,call", _subjects(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_route_returns_the_shared_names(label, kind, call):
    cert = call()
    assert isinstance(cert, kind) and isinstance(cert, Result)
    for name in VOCABULARY:
        assert hasattr(cert, name), (label, name)
    assert cert.passed == (cert.outcome == "PASS")
    assert cert.outcome in ("PASS", "FAIL", "INCONCLUSIVE")
    assert 0.0 <= cert.pvalue <= 1.0 and isinstance(cert.checks, dict) and cert.checks
    assert (cert.pvalue >= cert.alpha) if cert.passed else cert.outcome != "FAIL" or cert.pvalue < cert.alpha
    assert cert.tv_estimate is None or 0.0 <= cert.tv_estimate <= 1.0
    assert 0.0 <= cert.tv_upper <= 1.0 and 0.0 < cert.detectable_tv <= 1.0 and cert.n > 0
    assert isinstance(cert.summary(), str) and cert.summary()
    assert ("pass" in label) == cert.passed, (label, cert.summary())


def test_no_alias_on_one_type_only():
    """The old PathCertificate.p_value alias is gone; no certificate type carries a p-value under another name."""
    for cls in (Certificate, StepwiseCertificate, CoupledCertificate, TreeCertificate, PathCertificate):
        assert not hasattr(cls, "p_value")
        for name in VOCABULARY:
            assert hasattr(cls, name) or name in getattr(cls, "__dataclass_fields__", {}), (cls.__name__, name)


def test_detectable_mismatch_rate_is_the_power_of_seeing_one_event():
    n, d = 3000, detectable_mismatch_rate(3000)
    assert (1 - d) ** n == pytest.approx(0.01)           # P(no mismatch at rate d in n draws) = 1 - power
    assert detectable_mismatch_rate(0) == 1.0


def test_routes_pick_by_what_is_given():
    """First match wins: a verifier that declares step_plan goes stepwise, a plain one to certify_verifier."""
    from exactness.front_door import _pick

    names = {r.name for r in ROUTES}
    assert names == {"counts", "samples", "coupled_tree", "coupled", "decoder", "tree_rule", "path", "sampler",
                     "stepwise", "verifier", "engine"}
    assert _pick(ResiSpecWOR(), dict(p=1, q=1, k=1), None).name == "stepwise"
    assert _pick(get_verifier("rrs"), dict(p=1, q=1, k=1), None).name == "verifier"
    assert _pick(get_verifier("rrs"), dict(p=1, q=1, k=1), "verifier").name == "verifier"
    assert _pick(get_verifier("rrs"), dict(p=1, q=1, k=1, reference="rrs"), None).name == "coupled"
    assert _pick(None, dict(counts=1, p=1), None).name == "counts"
    assert _pick("vllm", {}, None).name == "engine"
    assert _pick(lambda rng, m: None, dict(law=1), None).name == "sampler"


def test_node_verifier_route_runs_certify_verifier():
    cert = certify(get_verifier("rrs"), p=P, q=Q, k=2, budget=Budget(n=3000), seed=1)
    assert isinstance(cert, Certificate) and cert.passed and cert.n == 3000
    bad = certify(mutants.CATALOGUE["residual_not_renormalised"], p=P, q=Q, k=2, budget=Budget(tv=0.1), seed=1)
    assert not bad.passed and bad.outcome == "FAIL"


def test_budget_and_run_reach_the_route():
    """Run.time_limit is the route's time_limit or timeout; a field a route cannot honour is refused by name."""
    import exactness.front_door as F

    seen = {}

    def fake(verifier, p, q, k, *, n=None, tv=None, alpha=1e-3, seed=0, power=0.99, sequential=False, workers=1,
             executor="process", timeout=None):
        seen.update(n=n, tv=tv, timeout=timeout, workers=workers, sequential=sequential)
        return "ok"

    route = next(r for r in ROUTES if r.name == "verifier")
    orig = F.Route.load
    F.Route.load = lambda self: fake if self is route else orig(self)
    try:
        assert certify(get_verifier("rrs"), p=P, q=Q, k=2, budget=Budget(tv=0.05, sequential=True),
                       run=Run(workers=2, time_limit=30)) == "ok"
    finally:
        F.Route.load = orig
    assert seen == dict(n=None, tv=0.05, timeout=30, workers=2, sequential=True)
    with pytest.raises(ValueError, match="route 'path'.*takes no Budget.tv"):
        certify(get_path_verifier("block"), pair=PAIR, L=2, budget=Budget(tv=0.05))
    with pytest.raises(ValueError, match="route 'coupled'.*takes no Run.workers"):
        certify(get_verifier("rrs"), reference="rrs", p=P, q=Q, k=K, run=Run(workers=2))


@pytest.mark.parametrize("kwargs,says", [
    (dict(), "nothing to certify"),
    (dict(p=P), "nothing to certify"),
    (dict(p=P, q=Q, k=2, prompts=[[1]]), "does not use prompts"),
    (dict(p=P, q=Q, k=2, colour="red"), "not an input of any route: colour"),
    (dict(p=P, q=Q, k=2, route="nope"), "route='nope' is not a route"),
    (dict(p=P, route="coupled"), "needs reference"),
])
def test_bad_input_names_the_argument(kwargs, says):
    with pytest.raises(ValueError, match=says):
        certify(get_verifier("rrs"), **kwargs)


@pytest.mark.parametrize("make,says", [
    (lambda: Budget(n=0), "Budget.n"), (lambda: Budget(tv=1.5), "Budget.tv"), (lambda: Budget(alpha=0), "alpha"),
    (lambda: Run(workers=0), "Run.workers"), (lambda: Run(executor="gpu"), "Run.executor"),
    (lambda: Run(executor="thread"), "one of \\['local', 'process', 'ray'\\]"),
    (lambda: Run(time_limit=-1), "Run.time_limit"),
])
def test_budget_and_run_refuse_bad_fields(make, says):
    with pytest.raises(ValueError, match=says):
        make()


def test_wrong_budget_type_and_seed_on_a_route_without_draws():
    with pytest.raises(TypeError, match="budget must be an exactness.Budget"):
        certify(get_verifier("rrs"), p=P, q=Q, k=2, budget=1000)
    with pytest.raises(ValueError, match="takes no seed"):
        certify(counts=_counts(P, 100, 0), p=P, seed=5)


def test_routes_table_is_in_the_docs():
    from pathlib import Path

    assert routes_table() in (Path(__file__).resolve().parents[1] / "docs" / "certify.md").read_text()


def test_front_door_is_public():
    assert exactness.certify is certify and "certify" in exactness.__all__


def test_numpy_scalars_are_accepted_and_an_unknown_engine_is_named():
    assert Budget(n=np.int64(100)).n == 100 and type(Budget(n=np.int64(100)).n) is int
    assert Run(workers=np.int64(2), executor="local").workers == 2
    assert certify(counts=_counts(P, 4000, 1), p=P, seed=np.int64(0)).passed
    with pytest.raises(ValueError, match="'nonexistent-engine' is not an engine; engines: "):
        certify("nonexistent-engine")


def test_the_docs_example_runs():
    """docs/certify.md "One front door": the example block runs as written (the engine audit line aside, ~80 s)."""
    import contextlib
    import io
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "certify.md").read_text()
    block = re.search(r"## One front door.*?```python\n(.*?)```", page, flags=re.S).group(1)
    code = "\n".join(line for line in block.splitlines() if "llama-cpp-python" not in line and "report." not in line)
    ns: dict = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(code, "docs/certify.md", "exec"), ns)
    assert ns["cert"].passed and out.getvalue().startswith("PASS")
