"""exactness.certify_stepwise: declared steps checked in O(V), verify coupled to them.

Exact enumeration: the O(V) balance of ``check_plan`` equals the O(V^2) sum of the declared rows, and the
law of the declared chain (enumerated over every candidate tuple) is ``p`` wherever every state balances.
Monte Carlo: exact rules PASS; planted bugs (a wrong declared step, a verify off its declared steps, a verify
that ignores the uniforms, a biased verify) FAIL with a replayable state; unverified states never PASS.
"""

from __future__ import annotations


import numpy as np
import pytest

from exactness import certify_stepwise
from exactness.stepwise import TOL, check_plan, draws_for_tv, next_target, replay_state
from exactness.stepwise_mutants import BiasedVerify, LowM, OffPlanVerify, OwnCoins, PlainRRS, WrongBeta
from resispec import get_verifier
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.resispec_wor import ResiSpecWOR
from resispec.verifiers.step_plan import StepPlan

SOLVERS = ["fused", "reference"]


def _node(V, seed, conc=0.7):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


# nodes (V = 8, seeds) whose every state the WOR rule declares (no interval plan) and where it shapes rows
SHAPED = [(8, 0), (8, 2), (12, 1)]


def _shaped_node(seed=0):
    V, s = SHAPED[seed]
    rng = np.random.default_rng(0)
    for _ in range(s + 1):
        p, q = rng.dirichlet(np.full(V, 0.7)), rng.dirichlet(np.full(V, 0.7))
    return p, q


def _wor(solver="fused"):
    return get_verifier("resispec", drafting="without_replacement", solver=solver)


def _rows(plan: StepPlan, p_i):
    """The declared rows r^(x) as a (V, V) matrix: O(V^2), the brute force."""
    return np.stack([next_target(plan, p_i, x) for x in range(p_i.size)])


def _declared_law(v, p_i, q_i, k, i=0):
    """Exact law of the declared chain from a state (enumerates every candidate; small V only)."""
    plan = v.step_plan(p_i, q_i, last=i == k - 1)
    assert plan is not None
    assert check_plan(plan, p_i, q_i)[1] is None
    out = np.zeros_like(p_i)
    for x in np.flatnonzero(q_i > 0):
        a = min(plan.m[x] / q_i[x], 1.0)
        out[x] += q_i[x] * a                                                   # accept x
        r = next_target(plan, p_i, x)
        if i == k - 1:
            out += q_i[x] * (1 - a) * r                                        # last: draw from the residual
        else:
            nq = q_i.copy()
            if v.drafting == "without_replacement":
                nq[x] = 0.0
                nq /= nq.sum()
            out += q_i[x] * (1 - a) * _declared_law(v, r, nq, k, i + 1)
    return out


# ---------------------------------------------------------------- exact enumeration


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("case", range(len(SHAPED)))
def test_balance_equals_brute_force_rows(solver, case):
    """check_plan's O(V) balance is the O(V^2) m + sum_x w(x) r^(x) - p_i, on exact and perturbed plans."""
    p, q = _shaped_node(case)
    plan = _wor(solver).step_plan(p, q, last=False)
    assert plan is not None and not plan.plain.all(), "the node must exercise the shaped rows"
    for bad in (None, "beta", "alpha", "m"):
        pl = plan
        if bad is not None:
            arr = getattr(plan, bad).copy()
            arr *= np.linspace(0.6, 1.0, arr.size)
            pl = StepPlan(**{**plan.__dict__, bad: arr})
        err, why = check_plan(pl, p, q)
        w = np.maximum(q - pl.m, 0)
        brute = np.abs(pl.m + w @ _rows(pl, p) - p).sum()                     # m + sum_x w(x) r^(x) - p_i
        assert err == pytest.approx(brute, abs=1e-12)
        assert (why is None) == (bad is None), (bad, err)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("k", [2, 3])
def test_declared_chain_law_is_p(solver, k):
    """Enumerating every candidate tuple, the chain the WOR rule declares emits exactly p."""
    p, q = _shaped_node(0)
    law = _declared_law(_wor(solver), p, q / q.sum(), k)
    np.testing.assert_allclose(law, p, atol=1e-12)


def test_declared_chain_law_iid():
    p, q = _node(6, 3)
    np.testing.assert_allclose(_declared_law(PlainRRS(), p, q, 3), p, atol=1e-12)


def test_draws_for_tv_planner():
    n = draws_for_tv(1e-3, 1e-3, 0.99)
    assert (1 - 1e-3) ** n <= 1e-3 < (1 - 1e-3) ** (n - 1)                    # 0 events in n: P <= alpha at TV 1e-3
    assert draws_for_tv(1e-3, 0.05, 0.999) == draws_for_tv(1e-3, 1e-3, 0.95)


# ---------------------------------------------------------------- Monte Carlo: exact rules pass


@pytest.mark.parametrize("solver", SOLVERS)
def test_wor_rule_passes(solver):
    p, q = _shaped_node(0)
    c = certify_stepwise(_wor(solver), p, q, 3, tv=0.02, seed=1)
    assert c.verdict == "PASS" and c.passed and c.events == 0
    assert c.n == draws_for_tv(0.02, 1e-3, 0.99)
    assert c.tv_upper <= 0.02 and c.detectable_tv <= 0.02
    assert c.states > 3 and c.largest_defect < 1e-12
    assert "NO BIAS DETECTED" in str(c) and "TV(law of verify, p) <=" in str(c)


def test_iid_verifier_passes():
    p, q = _node(10, 4)
    c = certify_stepwise(PlainRRS(), p, q, 3, n=800, seed=0)
    assert c.verdict == "PASS" and c.n == 800 and c.states >= 3


def test_default_plans_tv_1e3():
    p, q = _node(5, 1)
    c = certify_stepwise(PlainRRS(), p, q, 2, seed=0)
    assert c.tv == 1e-3 and c.n == draws_for_tv(1e-3, 1e-3, 0.99) and c.passed


# ---------------------------------------------------------------- planted bugs fail


@pytest.mark.parametrize("cls,kind", [(WrongBeta, "defect"), (LowM, "defect"),
                                      (OffPlanVerify, "mismatch"), (OwnCoins, "mismatch")])
def test_planted_bugs_fail(cls, kind):
    p, q = _shaped_node(0)
    c = certify_stepwise(cls(), p, q, 3, tv=0.02, seed=0)
    assert c.verdict == "FAIL" and not c.passed
    assert c.first_event["kind"] == kind
    assert c.n < draws_for_tv(0.02, 1e-3, 0.99), "stops at the first defect or mismatch"
    assert "Replay" in str(c)


def test_defect_replays():
    p, q = _shaped_node(0)
    v = WrongBeta()
    c = certify_stepwise(v, p, q, 3, tv=0.02, seed=0)
    fe = c.first_event
    p_i, q_i, plan, defect, why = replay_state(v, p, q, fe["rejected"], 3)
    assert why is not None and defect > TOL
    assert why in fe["detail"]
    assert len(fe["rejected"]) == fe["step"] and len(fe["candidates"]) == 3 and len(fe["uniforms"]) == 4


def test_small_bias_caught_with_power():
    """bf16-rounded ratio, TV 1.6e-4 (exact): P(mismatch) >= TV, so the n planned for TV 3e-4 catches it."""
    from exactness.exact import joint_law
    from exactness.mutants import CATALOGUE

    p, q = _node(8, 5)
    tv = 0.5 * np.abs(joint_law(CATALOGUE["bf16_ratio"], p, q, 2).sum(0) - p).sum()
    assert 1e-4 < tv < 3e-4
    for s in range(3):
        c = certify_stepwise(BiasedVerify(), p, q, 2, tv=3e-4, seed=s)
        # never a pass; FAIL when the law check at the mismatching candidates sees the bias, else INCONCLUSIVE
        # ("not the same coupling": a bias this small is below what that check detects)
        assert not c.passed and c.verdict in ("FAIL", "INCONCLUSIVE") and c.first_event["kind"] == "mismatch"


def test_exact_rule_false_alarm_rate():
    """Many seeds of an exact rule: never a FAIL (events are impossible up to round-off)."""
    p, q = _shaped_node(1)
    for s in range(10):
        assert certify_stepwise(_wor(), p, q, 3, n=200, seed=s).verdict == "PASS"


# ---------------------------------------------------------------- unverified states never pass


class Undeclared(ResiSpecWOR):
    def step_plan(self, p_i, q_i, *, last):
        return None


def test_unverified_is_not_a_pass():
    p, q = _shaped_node(0)
    v = Undeclared()
    c = certify_stepwise(v, p, q, 3, tv=0.05, seed=0)
    assert c.verdict == "INCONCLUSIVE" and not c.passed and c.unverified == c.n and c.tv_upper == 1.0
    c = certify_stepwise(v, p, q, 3, n=300, seed=0)
    assert c.verdict == "INCONCLUSIVE" and not c.passed


def test_time_limit_is_inconclusive_for_asked_tv():
    p, q = _shaped_node(0)
    c = certify_stepwise(_wor(), p, q, 3, tv=1e-5, seed=0, time_limit=0.2)
    assert c.verdict == "INCONCLUSIVE" and c.n < draws_for_tv(1e-5, 1e-3, 0.99)
    assert "time_limit" in str(c)
    # a stop after the bound is already below tv (power above 1 - alpha plans more draws than the bound needs)
    c = certify_stepwise(_wor(), p, q, 3, tv=0.05, power=1 - 1e-12, seed=0, time_limit=1e-9)
    assert c.n < draws_for_tv(0.05, 1e-3, 1 - 1e-12)
    assert c.verdict == ("PASS" if c.tv_upper <= 0.05 else "INCONCLUSIVE")


# ---------------------------------------------------------------- bad plans and plug-ins


def _with_plan(make):
    class Bad(ResiSpecWOR):
        def step_plan(self, p_i, q_i, *, last):
            return make(super().step_plan(p_i, q_i, last=last), p_i)
    return Bad()


@pytest.mark.parametrize("make,msg", [
    (lambda pl, p: StepPlan(**{**pl.__dict__, "m": np.where(np.arange(p.size) == 0, np.nan, pl.m)}), "finite"),
    (lambda pl, p: StepPlan(**{**pl.__dict__, "g": pl.g - 1.0}), "non-negative"),
    (lambda pl, p: StepPlan(**{**pl.__dict__, "m": pl.m + 1.0}), "above the draft"),
])
def test_bad_plan_values_are_defects(make, msg):
    p, q = _shaped_node(0)
    c = certify_stepwise(_with_plan(make), p, q, 3, n=100, seed=0)
    assert c.verdict == "FAIL" and c.first_event["kind"] == "defect" and msg in c.first_event["detail"]


@pytest.mark.parametrize("make,msg", [
    (lambda pl, p: StepPlan(**{**pl.__dict__, "m": pl.m[:-1]}), "shape"),
    (lambda pl, p: StepPlan(**{**pl.__dict__, "plain": pl.plain.astype(int)}), "bool"),
    (lambda pl, p: StepPlan(**{**pl.__dict__, "m": pl.m.astype(np.float32)}), "float64"),
    (lambda pl, p: "a plan", "not a StepPlan"),
])
def test_malformed_plans_are_plugin_errors(make, msg):
    """A plan of the wrong type, shape or dtype: the subject misbehaved, a FAIL naming the cause (exit 1)."""
    p, q = _shaped_node(0)
    c = certify_stepwise(_with_plan(make), p, q, 3, n=100, seed=0)
    assert c.verdict == "FAIL" and not c.passed and msg in c.cause and "step_plan" in c.cause


def test_subnormal_row_scale_is_not_trusted():
    """alpha(x) g formed token by token in the subnormal range changes the row's shape: the chain forms the rows
    the balance checked, so a verify built on the rounded rows mismatches (exact TV 0.047), and a row whose scale
    is lost to round-off is a defect."""
    from exactness.exact import joint_law
    from resispec.verifiers.base import Verifier

    q = np.array([0.5, 0.25, 0.125, 0.125])
    m = np.array([0.125, 0.25, 0.125, 0.125])
    p = np.array([0.125, 0.25, 0.265625, 0.359375])
    plan = StepPlan(m=m, plain=np.zeros(4, bool), g=np.array([0.0, 0.0, 1.5, 2.5]) * 2.0**-14, h=np.zeros(4),
                    alpha=np.full(4, 2.0**-1060), beta=np.zeros(4))

    class SubnormalRow(Verifier):
        name, drafting = "subnormal_row", "iid"

        def step_plan(self, p_i, q_i, *, last):
            return plan

        def _chain(self, P, Q, c):
            rows = np.arange(c.shape[0])
            r = plan.alpha[c[:, -1], None] * plan.g + plan.beta[c[:, -1], None] * plan.h    # rounded per token
            r[rows, c[:, -1]] = 0
            return m[c] / Q[rows[:, None], c], r / r.sum(1, keepdims=True)

    v = SubnormalRow()
    assert 0.5 * np.abs(joint_law(v, p, q, 1).sum(0) - p).sum() > 0.04
    assert certify_stepwise(v, p, q, 1, tv=1e-3).verdict == "FAIL"
    lost = StepPlan(**{**plan.__dict__, "alpha": np.full(4, 2.0**-1070)})            # alpha g underflows to 0
    assert "empty" in check_plan(lost, p, q)[1]
    tiny = StepPlan(**{**plan.__dict__, "alpha": np.ones(4), "g": np.array([0.0, 0.0, 3.0, 2.0]) * 2.0**-1074})
    assert "mass" in check_plan(tiny, p, q)[1]                                    # 1 / tot overflows


def test_near_greedy_draft_with_subnormal_masses_passes():
    """1 / (1 - q(x)) overflows when 1 - q(x) is subnormal: the fused rule still declares its (exact) step."""
    lg = np.array([3.0, 1.5, 1.0, 0.5, -0.2, -1.0])

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    p, q = softmax(lg), softmax(lg / 0.0021)
    assert 0 < q[1] < 1e-300
    for solver in SOLVERS:
        assert certify_stepwise(_wor(solver), p, q, 2, tv=0.02).verdict == "PASS"


def test_raising_plugins_are_errors():
    p, q = _shaped_node(0)

    class RaisePlan(ResiSpecWOR):
        def step_plan(self, p_i, q_i, *, last):
            raise ZeroDivisionError("boom")

    class RaiseVerify(ResiSpecWOR):
        def verify(self, *a, **kw):
            raise KeyError("bang")

    class WrongShape(ResiSpecWOR):
        def verify(self, p, q, candidates, *, uniforms=None, rng=None):
            r = super().verify(p, q, candidates, uniforms=uniforms)
            return type(r)(tokens=r.tokens[:-1], accepted=r.accepted[:-1]) if hasattr(r, "tokens") else r

    for cls, match in [(RaisePlan, "step_plan raised"), (RaiseVerify, "verify raised"), (WrongShape, "shape")]:
        c = certify_stepwise(cls(), p, q, 3, n=100)
        assert c.verdict == "FAIL" and not c.passed and match in c.cause and match in c.summary()


def test_bad_input():
    p, q = _shaped_node(0)
    v = _wor()
    with pytest.raises(TypeError, match="step_plan"):
        certify_stepwise(get_verifier("rrs_wor"), p, q, 2, n=100)
    with pytest.raises(ValueError, match="not both"):
        certify_stepwise(v, p, q, 2, n=100, tv=0.1)
    for tv in (0, 1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="tv"):
            certify_stepwise(v, p, q, 2, tv=tv)
    with pytest.raises(ValueError, match="one node"):
        certify_stepwise(v, np.stack([p, p]), np.stack([q, q]), 2, n=100)
    with pytest.raises(ValueError, match="draft support"):
        certify_stepwise(v, p, np.where(np.arange(p.size) < 2, q, 0) / q[:2].sum(), 3, n=100)
    for bad in (dict(power=1.0), dict(power=True), dict(alpha=0), dict(time_limit=-1), dict(time_limit="1")):
        with pytest.raises((TypeError, ValueError)):
            certify_stepwise(v, p, q, 2, n=100, **bad)
    with pytest.raises(ValueError):
        certify_stepwise(v, p, q, 0, n=100)
    with pytest.raises(ValueError):
        certify_stepwise(v, p, q, 2, n=1)                                     # too few draws to bound TV < 0.5
    with pytest.raises(ValueError):
        certify_stepwise(v, -p, q, 2, n=100)


def test_budget_refusal_points_to_stepwise(monkeypatch):
    """certify_verifier refusing a plan for a verifier that declares its steps names certify_stepwise."""
    import exactness.limits as cert
    from exactness import certify_verifier
    from exactness.budget import BudgetError

    monkeypatch.setattr(cert, "MAX_SECONDS", 1e-9)
    p, q = _shaped_node(0)
    with pytest.raises(BudgetError, match="certify_stepwise"):
        certify_verifier(_wor(), p, q, 3, tv=0.01)
    with pytest.raises(BudgetError) as e:
        certify_verifier(get_verifier("rrs_wor"), p, q, 3, tv=0.01)
    assert "certify_stepwise" not in str(e.value)


def test_compiled_balance_matches_reference():
    """exactness._stepwise_kernel.balance and the numpy _balance_reference agree on exact, perturbed and bad plans."""
    from exactness import _stepwise_kernel as kern
    from exactness.stepwise import _RESIDUAL_EPS, _balance_reference

    if not kern.AVAILABLE:
        pytest.skip("numba not installed")
    seen = set()
    for case in range(len(SHAPED)):
        p, q = _shaped_node(case)
        for last in (False, True):
            pl = _wor().step_plan(p, q, last=last)
            variants = [pl, StepPlan(**{**pl.__dict__, "beta": pl.beta * 1.2}),
                        StepPlan(**{**pl.__dict__, "m": pl.m + np.where(np.arange(p.size) == 3, 0.5, 0.0)}),
                        StepPlan(**{**pl.__dict__, "h": np.where(np.arange(p.size) == 2, -1.0, pl.h)}),
                        StepPlan(**{**pl.__dict__, "alpha": pl.alpha * 0, "beta": pl.beta * 0}),
                        StepPlan(**{**pl.__dict__, "g": pl.g * 2.0**-1074 / max(pl.g.max(), 1e-300),
                                    "h": pl.h * 2.0**-1074 / max(pl.h.max(), 1e-300),
                                    "alpha": np.where(pl.alpha > 0, 1.0, 0.0),
                                    "beta": np.where(pl.beta > 0, 1.0, 0.0)})]
            for v in variants:
                args = (p, q, v.m, v.plain, v.g, v.h, v.alpha, v.beta, TOL, _RESIDUAL_EPS)
                got, ref = kern.balance(*args), _balance_reference(*args)
                assert got[:3] == ref[:3]
                np.testing.assert_allclose(got[3:], ref[3:], rtol=1e-9, atol=1e-12)
                seen.add(got[0])
    assert seen == {kern.OK, kern.BAD_VALUE, kern.ABOVE_DRAFT, kern.EMPTY_ROW, kern.UNBALANCED, kern.ROW_MASS}


# ---------------------------------------------------------------- side channels (a breaker's findings)


class _Plain:
    """Mixin: declare rrs's steps (m = min(p_i, q_i), plain residual)."""

    def step_plan(self, p_i, q_i, *, last):
        return StepPlan.plain_step(np.minimum(p_i, q_i))


def test_draft_law_support_and_mass_are_checked():
    class TopTwo(PlainRRS):
        drafting = "without_replacement"

        def draft_law(self, q):
            return np.where(q >= np.sort(q, axis=1)[:, -2:-1], q, 0.0)

    class NoMass(PlainRRS):
        def draft_law(self, q):
            return np.zeros_like(q)

    p, q = _node(8, 0)
    with pytest.raises(ValueError, match="support"):
        certify_stepwise(TopTwo(), p, q, 3, n=100)
    c = certify_stepwise(NoMass(), p, q, 2, n=100)               # the subject's hook misbehaved: a FAIL
    assert c.verdict == "FAIL" and "draft_law" in c.cause


def test_draft_law_hook_is_the_checked_draft():
    """Candidates drawn from draft_law's law: the chain is checked against it, so a top-k draft FAILs."""
    from exactness.exact import joint_law
    from exactness.mutants import TopKDraft

    class TopKWithPlan(_Plain, TopKDraft):
        pass

    p, q = _node(8, 0)
    v = TopKWithPlan("topk", top_k=2)
    assert 0.5 * np.abs(joint_law(v, p, q, 2).sum(0) - p).sum() > 0.1
    assert certify_stepwise(v, p, q, 2, tv=0.01).verdict == "FAIL"


def test_verify_writing_its_inputs_cannot_steer_the_chain():
    from resispec._validation import as_laws, as_uniforms
    from resispec.verifiers.base import decide

    class ReuseUniformInPlace(_Plain, RecursiveRejection):
        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            p2, q2, _ = as_laws(p, q)
            c = np.asarray(candidates)
            u = as_uniforms(uniforms, *c.shape)
            u[:, -1] = u[:, -2]                                                  # the bug, written in place
            return decide(*self._chain(p2, q2, c), c, u)

    class SortInPlace(_Plain, RecursiveRejection):
        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            candidates.sort(axis=1)
            return super().verify(p, q, candidates, rng, uniforms=uniforms)

    p, q = _node(5, 0, conc=1.0)
    assert certify_stepwise(ReuseUniformInPlace(), p, q, 1, tv=0.01).verdict == "FAIL"
    assert certify_stepwise(SortInPlace(), p, q, 2, tv=0.01).verdict == "FAIL"


def test_step_plan_gets_read_only_states_and_plans_are_kept_as_checked():
    class Truncating(RecursiveRejection):
        def step_plan(self, p_i, q_i, *, last):
            p_i[p_i < np.sort(p_i)[-2]] = 0.0                                    # writes the state in place
            return StepPlan.plain_step(np.minimum(p_i, q_i))

    class Buffered(_Plain, RecursiveRejection):
        """Exact rrs whose plans are views of one reused buffer."""

        def step_plan(self, p_i, q_i, *, last):
            self.buf = getattr(self, "buf", np.empty_like(p_i))
            np.minimum(p_i, q_i, out=self.buf)
            return StepPlan.plain_step(self.buf)

    p, q = _node(6, 0, conc=1.0)
    keep = p.copy()
    c = certify_stepwise(Truncating(), p, q, 2, tv=0.01)
    assert c.verdict == "FAIL" and "step_plan raised" in c.cause
    assert np.array_equal(p, keep)
    assert certify_stepwise(Buffered(), p, q, 3, n=640, seed=0).verdict == "PASS"


def test_float32_laws_pass():
    """Laws summing to 1 within float32 round-off (accepted by as_laws) are renormalised, not a defect."""
    rng = np.random.default_rng(0)

    def sm(x):
        e = np.exp(x - x.max())
        return (e / e.sum()).astype(np.float32)

    p, q = sm(3 * rng.normal(size=300).astype(np.float32)), sm(3 * rng.normal(size=300).astype(np.float32))
    assert abs(float(p.astype(np.float64).sum()) - 1) > 1e-9
    c = certify_stepwise(_wor(), p, q, 2, n=200, seed=0)
    assert c.defects == 0 and c.mismatches == 0


def test_fused_fallback_states_are_declared_by_the_reference():
    """Where the compiled kernel hands a row to the numpy reference, step_plan declares the reference step."""
    rng = np.random.default_rng(0)
    V = 50
    q = rng.dirichlet(np.full(V, 0.7))
    p = np.zeros(V)
    p[0] = 1.0
    fused = certify_stepwise(_wor("fused"), p, q, 3, tv=0.05, seed=0)
    ref = certify_stepwise(_wor("reference"), p, q, 3, tv=0.05, seed=0)
    assert fused.verdict == ref.verdict == "PASS" and fused.unverified == 0


def test_bad_verify_results_are_errors():
    p, q = _shaped_node(0)

    def make(fn):
        class Bad(ResiSpecWOR):
            def verify(self, p, q, candidates, rng=None, *, uniforms=None):
                return fn(super().verify(p, q, candidates, uniforms=uniforms))
        return Bad()

    from resispec.verifiers.base import VerifyResult

    for fn, msg in [(lambda r: VerifyResult(r.tokens + 0.5, r.accepted), "dtype"),
                    (lambda r: VerifyResult(np.full(r.tokens.shape, np.nan), r.accepted), "dtype"),
                    (lambda r: VerifyResult(r.tokens + 100, r.accepted), "outside"),
                    (lambda r: VerifyResult(r.tokens, r.accepted - 5), "accepted"),
                    (lambda r: (r.tokens, r.accepted), "expected an object")]:
        c = certify_stepwise(make(fn), p, q, 3, n=100)
        assert c.verdict == "FAIL" and not c.passed and msg in c.cause


def test_stops_and_budgets(monkeypatch):
    import exactness.limits as cert
    from exactness.budget import BudgetError

    p, q = _shaped_node(0)
    with pytest.raises(ValueError, match="round-off"):
        certify_stepwise(_wor(), p, q, 4, tv=3e-9)
    c = certify_stepwise(_wor(), p, q, 3, n=10**6, seed=0, time_limit=0.2)
    assert c.verdict == "INCONCLUSIVE" and c.n < 10**6 and "time_limit" in str(c)
    monkeypatch.setattr(cert, "MAX_SECONDS", 1e-6)
    with pytest.raises(BudgetError, match="time_limit"):
        certify_stepwise(_wor(), p, q, 3, n=10**6, seed=0)
    assert certify_stepwise(_wor(), p, q, 3, tv=0.05, power=np.float32(0.9)).passed


def test_helpers_validate_their_input():
    p, q = _shaped_node(0)
    for bad in (dict(tv=0), dict(tv=1), dict(tv=float("nan")), dict(tv=-1), dict(tv=0.1, alpha=0),
                dict(tv=0.1, power=1)):
        with pytest.raises((TypeError, ValueError)):
            draws_for_tv(**bad)
    with pytest.raises(TypeError):
        draws_for_tv("0.1")
    v = _wor()
    for rej, err in [([99], ValueError), ([-1], ValueError), ([1, 1], ValueError), ([1, 2, 3], ValueError),
                     ([1.7], ValueError), ("12", TypeError)]:
        with pytest.raises(err):
            replay_state(v, p, q, rej, 3)
    with pytest.raises(ValueError, match="one node"):
        replay_state(v, np.stack([p, p]), np.stack([q, q]), [1], 3)
    q0 = np.where(np.arange(p.size) == 1, 0.0, q)
    with pytest.raises(ValueError, match="never proposes"):
        replay_state(v, p, q0 / q0.sum(), [1], 3)
    with pytest.raises(TypeError, match="step_plan"):
        replay_state(get_verifier("rrs_wor"), p, q, [1], 3)
    plan = v.step_plan(p, q, last=False)
    assert check_plan(plan, list(p), list(q))[1] is None
    for pi, qi in [(np.stack([p, p]), q), (p, np.where(np.arange(p.size) == 0, np.nan, q)), (-p, q), (p, q[:-1])]:
        with pytest.raises(ValueError):
            check_plan(plan, pi, qi)
    f32 = StepPlan(**{**plan.__dict__, "m": plan.m.astype(np.float32)})
    assert "float64" in check_plan(f32, p, q)[1]


def test_replay_draw_reproduces_a_mismatch():
    from exactness.stepwise import replay_draw

    p, q = _shaped_node(0)
    c = certify_stepwise(OffPlanVerify(), p, q, 3, tv=0.02, seed=0)
    fe = c.first_event
    assert fe["kind"] == "mismatch" and "replay_draw" in c.summary()
    r = replay_draw(OffPlanVerify(), p, q, fe["candidates"], fe["uniforms"])
    assert not r["match"] and r["event"] is None
    ok = replay_draw(_wor(), p, q, fe["candidates"], fe["uniforms"])
    assert ok["match"] and ok["declared"] == r["declared"]
    for cands, us in [([0, 0, 1], fe["uniforms"]), ([0, 1, 99], fe["uniforms"]), (fe["candidates"], [0.5] * 3),
                      (fe["candidates"], [0.5, 0.5, 1.5, 0.1]), ("abc", fe["uniforms"])]:
        with pytest.raises(ValueError):
            replay_draw(_wor(), p, q, cands, us)


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_give_the_same_verdicts(workers):
    p, q = _shaped_node(0)
    ok = certify_stepwise(_wor(), p, q, 3, tv=0.02, seed=5, workers=workers)
    assert ok.verdict == "PASS" and ok.n == draws_for_tv(0.02)
    bad = certify_stepwise(WrongBeta(), p, q, 3, tv=0.02, seed=5, workers=workers)
    assert bad.verdict == "FAIL" and bad.first_event["kind"] == "defect"
    with pytest.raises((TypeError, ValueError)):
        certify_stepwise(_wor(), p, q, 3, tv=0.02, workers=0)
    with pytest.raises(ValueError, match="executor"):
        certify_stepwise(_wor(), p, q, 3, tv=0.02, workers=2, executor="nope")
    c = certify_stepwise(_wor(), p, q, 3, n=200, workers=10**9)       # capped at one chunk a draw, no huge spawn
    assert c.n == 200
