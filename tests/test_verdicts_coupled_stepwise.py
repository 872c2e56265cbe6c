"""Issue 37 for the coupled and stepwise routes: every verdict right, every misbehaviour a FAIL naming its cause.

- a reference is trusted only if it is proved: a registry rule, or a user's reference whose exact law is
  enumerated in the same run; a biased user reference FAILs (the self-coupled ``residual_is_p`` of the issue),
  an unchecked one limits a pass to TV(kernel, reference);
- a kernel / verify / step_plan that raises, hangs, or breaks its output contract is a FAIL (exit 1) naming
  the cause, never exit 2;
- hard time limits: subjects that sleep forever are stopped (the verdict is asserted, never the elapsed time);
- stepwise meeting an exact verify that uses the coins in another convention says "not the same coupling"
  (INCONCLUSIVE, exit 3), as coupled does, while a verify off its declared law still FAILs;
- a plain ``verify(p, q, candidates, rng)`` kernel is routed to the generator convention; ``reference_kernel``
  checks its arguments at the door.
"""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pytest

import exactness.stepwise as stepwise
from exactness import certify_coupled, certify_stepwise
from exactness.coupled import reference_kernel
from exactness.coupled.certify import registry_rule
from exactness.mutants import CATALOGUE
from resispec import get_verifier
from resispec.cli import main
from resispec.verifiers.base import VerifyResult
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.resispec_wor import ResiSpecWOR

RNG = np.random.default_rng(37)
P, Q = RNG.dirichlet(np.ones(20)), RNG.dirichlet(np.ones(20))
P8, Q8 = RNG.dirichlet(np.full(8, 0.7)), RNG.dirichlet(np.full(8, 0.7))
ISSUE = ["certify-coupled", "--verifier", "exactness.mutants:CATALOGUE.residual_is_p", "--reference",
         "exactness.mutants:CATALOGUE.residual_is_p", "--k", "2", "--V", "20", "--n", "2000"]


@pytest.fixture
def short_grace(monkeypatch):
    """A hang is stopped soon after its time limit (the default grace is 10 s)."""
    import exactness._timeout as timeout

    monkeypatch.setattr(timeout, "HANG_GRACE", 0.2)


# ---------------------------------------------------------------- subjects


class UserRRS(RecursiveRejection):
    """rrs defined outside resispec: a user's reference (exact, but not a registry rule)."""


class Hang:
    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        time.sleep(1e6)


class Raises:
    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        raise ZeroDivisionError("boom")


class AcceptedNotAnIndex:
    """rrs's tokens, but ``accepted`` a flag (1 = accepted) instead of the index of the emitted candidate."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        r = get_verifier("rrs").verify(p, q, candidates, uniforms=uniforms)
        return VerifyResult(tokens=r.tokens, accepted=np.where(r.accepted >= 0, 1, -1).astype(np.int64))


class PlainKernel:
    """A kernel without coin arguments: verify(p, q, candidates, rng)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return get_verifier("rrs").verify(p, q, candidates, rng=rng)


class HangVerify(ResiSpecWOR):
    def verify(self, *args, **kwargs):
        time.sleep(1e6)


class HangPlan(ResiSpecWOR):
    def step_plan(self, p_i, q_i, *, last):
        time.sleep(1e6)


class OtherCoins(ResiSpecWOR):
    """Exact, with the coins in another exact convention: accept candidate i when 1 - u_i < a_i."""

    def verify(self, p, q, candidates, *, uniforms=None, rng=None):
        u = np.array(uniforms, dtype=np.float64)
        u[:, :-1] = np.minimum(1.0 - u[:, :-1], np.nextafter(1.0, 0.0))
        return super().verify(p, q, candidates, uniforms=u, rng=rng)


class OverAccepts(ResiSpecWOR):
    """Biased: accepts with 1.6 a_i (reads u_i / 1.6), so its law given the candidates is not its declared one."""

    def verify(self, p, q, candidates, *, uniforms=None, rng=None):
        u = np.array(uniforms, dtype=np.float64)
        u[:, :-1] = u[:, :-1] / 1.6
        return super().verify(p, q, candidates, uniforms=u, rng=rng)


# ---------------------------------------------------------------- 1. a reference is trusted only if proved


def test_self_coupled_biased_reference_fails():
    m = CATALOGUE["residual_is_p"]
    cert = certify_coupled(m, m, P, Q, 2, n=2000)
    assert not cert.passed and cert.mismatches == 0                     # the coupling itself is perfect ...
    assert cert.classification == "reference biased" and cert.reference_law == "biased"
    assert cert.reference_detail["tv"] > 0.1                              # ... the reference's own law is not p
    assert "exact by its proof" not in cert.verdict and "biased" in cert.verdict


def test_self_coupled_biased_reference_cli_exits_1(capsys):
    assert main(ISSUE) == 1
    out = capsys.readouterr().out
    assert "exact by its proof" not in out and "reference biased" in out


def test_user_reference_is_trusted_when_its_law_is_enumerated():
    assert not registry_rule(UserRRS())
    cert = certify_coupled(get_verifier("rrs"), UserRRS(), P, Q, 2, n=2000)
    assert cert.passed and cert.reference_law == "exact" and cert.reference_detail["tv"] < 1e-9
    assert "enumerated in this run" in cert.verdict and "exact by its proof" not in cert.verdict


def test_unchecked_reference_bounds_tv_to_the_reference_only():
    # round 2: reference_check="auto" certifies a reference too large to enumerate by Monte Carlo
    # (tests/test_verdicts_round2_coupled.py); only "none" leaves it unchecked, and then a pass is INCONCLUSIVE
    cert = certify_coupled(get_verifier("rrs"), UserRRS(), P, Q, 2, n=2000, reference_check="none")
    assert not cert.passed and cert.inconclusive and cert.reference_law == "unchecked"
    assert "TV(kernel, reference) only" in cert.verdict and "nothing is claimed" in cert.verdict
    assert "exact by its proof" not in cert.verdict


def test_registry_rules_are_trusted_and_a_user_proxy_is_not():
    from resispec.verifiers.rejection_proxy import rrs_residual

    def my_proxy(R, q, x, *, step):
        return rrs_residual(R, q, x, step=step)

    assert registry_rule(get_verifier("rrs")) and registry_rule(get_verifier("resispec"))
    assert registry_rule(get_verifier("rejection_proxy"))
    user = get_verifier("rejection_proxy", proxy=my_proxy)
    assert not registry_rule(user)
    cert = certify_coupled(get_verifier("rrs"), user, P, Q, 2, n=2000)
    assert cert.passed and cert.reference_law == "exact"                   # checked in the run, not assumed
    with pytest.raises(ValueError, match="reference_check"):
        certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=100, reference_check="trust me")


# ---------------------------------------------------------------- 2. misbehaving kernels are FAILs


@pytest.mark.parametrize("kernel,cause", [(Raises(), "Raises.verify raised ZeroDivisionError: boom"),
                                          (AcceptedNotAnIndex(), "accepted")])
def test_misbehaving_kernel_is_a_fail_naming_the_cause(kernel, cause):
    cert = certify_coupled(kernel, "rrs", P, Q, 2, n=1000)
    assert not cert.passed and cert.classification == "subject error"
    assert cause in cert.cause and cause in cert.verdict


def test_hanging_kernel_under_certify_coupled_fails(short_grace):
    cert = certify_coupled(Hang(), "rrs", P, Q, 2, n=1000, time_limit=0.5)
    assert not cert.passed and cert.classification == "subject error"
    assert "Hang.verify did not return" in cert.cause and "hard time limit" in cert.cause


def test_certify_coupled_time_limit_is_checked():
    for bad in (-1, 0, float("nan"), "60", True):
        with pytest.raises((TypeError, ValueError), match="time_limit"):
            certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=100, time_limit=bad)


# ---------------------------------------------------------------- 3. stepwise: FAILs, hangs, couplings


@pytest.mark.parametrize("cls,who", [(HangVerify, "HangVerify.verify"), (HangPlan, "HangPlan.step_plan")])
def test_hanging_subject_under_certify_stepwise_fails(short_grace, cls, who):
    cert = certify_stepwise(cls(), P8, Q8, 3, n=200, seed=0, time_limit=0.5)
    assert cert.verdict == "FAIL" and not cert.passed
    assert f"{who} did not return" in cert.cause and cert.cause in cert.summary()


def test_hanging_step_plan_in_a_worker_process_fails(short_grace):
    cert = certify_stepwise(HangPlan(), P8, Q8, 3, n=200, seed=0, time_limit=0.5, workers=2)
    assert cert.verdict == "FAIL" and "did not return" in cert.cause and "step_plan" in cert.cause


def test_other_exact_coin_convention_is_not_the_same_coupling():
    cert = certify_stepwise(OtherCoins(), P8, Q8, 3, tv=0.02, seed=0)
    assert cert.verdict == "INCONCLUSIVE" and not cert.passed and cert.mismatches > 0 and cert.defects == 0
    assert cert.coupling_pvalue is not None and cert.coupling_pvalue >= cert.alpha
    assert "Not the same coupling" in cert.summary() and "No bias is claimed" in cert.summary()


def test_verify_off_its_declared_law_still_fails():
    cert = certify_stepwise(OverAccepts(), P8, Q8, 3, tv=0.02, seed=0)
    assert cert.verdict == "FAIL" and cert.first_event["kind"] == "mismatch"
    assert cert.coupling_pvalue < cert.alpha and "differs from its declared steps'" in cert.summary()


# ---------------------------------------------------------------- 4. conventions and reference_kernel


def test_plain_verify_kernel_is_routed_to_the_generator_convention():
    cert = certify_coupled(PlainKernel(), "rrs", P, Q, 2, n=2000)
    assert cert.passed and cert.convention == "generator"
    assert any("'generator' convention" in note for note in cert.notes) and "generator" in cert.verdict
    with pytest.raises(ValueError, match="convention='generator'"):
        certify_coupled(PlainKernel(), "rrs", P, Q, 2, n=2000, convention="resispec")


def test_reference_kernel_checks_its_arguments_at_the_door():
    kernel = reference_kernel("rrs", "sglang")                  # a registry name is resolved, not kept as a str
    assert certify_coupled(kernel, "rrs", P, Q, 2, n=2000, convention="sglang").passed
    with pytest.raises(TypeError, match="verifier must be a registry name"):
        reference_kernel(42, "sglang")
    with pytest.raises(ValueError, match="verifier 'no_such_rule'"):
        reference_kernel("no_such_rule", "sglang")
    with pytest.raises(ValueError, match="convention must be one of"):
        reference_kernel("rrs", "vllm")


# ---------------------------------------------------------------- 5. CLI exit codes


KERNELS = textwrap.dedent('''
    import time

    import numpy as np

    from resispec import get_verifier
    from resispec.verifiers.resispec_wor import ResiSpecWOR


    class Hang:
        drafting = "iid"

        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            time.sleep(1e6)


    class Raises:
        drafting = "iid"

        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            raise ZeroDivisionError("boom")


    class Plain:
        drafting = "iid"

        def verify(self, p, q, candidates, rng):
            return get_verifier("rrs").verify(p, q, candidates, rng=rng)


    class HangVerify(ResiSpecWOR):
        def verify(self, *args, **kwargs):
            time.sleep(1e6)


    class RaisePlan(ResiSpecWOR):
        def step_plan(self, p_i, q_i, *, last):
            raise KeyError("bang")


    class OtherCoins(ResiSpecWOR):
        def verify(self, p, q, candidates, *, uniforms=None, rng=None):
            u = np.array(uniforms, dtype=np.float64)
            u[:, :-1] = np.minimum(1.0 - u[:, :-1], np.nextafter(1.0, 0.0))
            return super().verify(p, q, candidates, uniforms=u, rng=rng)
''')


def test_certify_coupled_exit_codes(user_dir, short_grace, capsys):
    (user_dir / "cs_kernels.py").write_text(KERNELS)
    small = ["--k", "2", "--V", "20", "--n", "1000"]
    assert main(["certify-coupled", "--verifier", "rrs", "--reference", "rrs"] + small) == 0
    assert main(["certify-coupled", "--verifier", "cs_kernels:Plain"] + small) == 0
    assert "'generator' convention" in capsys.readouterr().out
    assert main(["certify-coupled", "--verifier", "cs_kernels:Raises"] + small) == 1
    assert "ZeroDivisionError: boom" in capsys.readouterr().out
    assert main(["certify-coupled", "--verifier", "cs_kernels:Hang", "--time-limit", "1"] + small) == 1
    assert "Hang.verify did not return" in capsys.readouterr().out
    assert main(["certify-coupled", "--verifier", "rrs", "--time-limit", "-1"] + small) == 2
    assert main(["certify-coupled", "--verifier", "cs_kernels:Plain", "--convention", "resispec"] + small) == 2
    assert "convention='generator'" in capsys.readouterr().err


def test_certify_stepwise_exit_codes(user_dir, short_grace, monkeypatch, capsys):
    (user_dir / "cs_kernels.py").write_text(KERNELS)
    monkeypatch.setattr("exactness.limits.LAW_DRAWS", 20_000)
    small = ["--k", "3", "--V", "8", "--n", "300"]
    assert main(["certify-stepwise"] + small) == 0
    assert main(["certify-stepwise", "--verifier", "cs_kernels:RaisePlan"] + small) == 1
    assert "RaisePlan.step_plan raised" in capsys.readouterr().out
    assert main(["certify-stepwise", "--verifier", "cs_kernels:HangVerify", "--time-limit", "1"] + small) == 1
    assert "HangVerify.verify did not return" in capsys.readouterr().out
    assert main(["certify-stepwise", "--verifier", "cs_kernels:OtherCoins"] + small) == 3
    assert "Not the same coupling" in capsys.readouterr().out
    assert main(["certify-stepwise", "--k", "0", "--V", "8", "--n", "300"]) == 2
