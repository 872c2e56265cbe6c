"""Round 2 of issue 37 for certify_coupled / certify_stepwise: the testers' findings, one test each.

1. a user's reference too large to enumerate is certified by Monte Carlo in the same run (reference_check
   "auto"); with "none" it is not checked and zero mismatches are INCONCLUSIVE (exit 3), never exit 0;
2. a subject that calls sys.exit is a FAIL naming "called sys.exit(...)" (exit 1), also in a worker;
3. a result whose .tokens / .accepted property raises is a FAIL naming the cause;
4. a verify that kills its worker process (os._exit) is a FAIL naming "a worker died" (exit 1);
5. float16 / float32 laws are renormalised at the door (exactness.certificate.door_node), as certify_verifier does;
6. a kernel that writes into its read-only inputs is a FAIL (exit 1) naming --copies / copies=True;
7. "not the same coupling" is INCONCLUSIVE (exit 3), as certify-stepwise; with fallback the certify_verifier
   certificate decides (its pass: exit 0 "no bias detected (by certify_verifier ...)"; its failure: exit 1);
8. docs/coupled.md says how a plain verify(p, q, candidates, rng) kernel draws its coins;
9. CoupledCertificate.summary(): one line of at most 120 columns, worded as Certificate.summary.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from exactness import certify_coupled, certify_stepwise
from exactness.coupled import reference_kernel
from exactness.mutants import CATALOGUE
from resispec import get_verifier
from resispec.cli import main
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.step_plan import StepPlan

RNG = np.random.default_rng(2037)
P, Q = RNG.dirichlet(np.ones(20)), RNG.dirichlet(np.ones(20))
P8 = np.array([0.3, 0.05, 0.15, 0.1, 0.02, 0.18, 0.12, 0.08])
Q8 = np.array([0.1, 0.2, 0.05, 0.25, 0.1, 0.05, 0.15, 0.1])
BIASED = "exactness.mutants:CATALOGUE.residual_is_p"
WIDTH = 120

SUBJECTS = '''
import os
import sys

import numpy as np
import resispec
from exactness.coupled import reference_kernel
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.step_plan import StepPlan

RRS = resispec.get_verifier("rrs")


class ExitKernel:
    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms):
        sys.exit(2)


class WritesKernel:
    drafting = "iid"

    def verify(self, p, q, candidates, rng=None, *, uniforms):
        p /= p.sum(axis=1, keepdims=True)
        return RRS.verify(p, q, candidates, rng, uniforms=uniforms)


class Crossed:
    """Exact (the sglang layout of resispec) but fed the resispec coins: another coupling of the same law."""
    drafting = "iid"

    def __init__(self):
        self.k = reference_kernel(resispec.get_verifier("resispec"), "sglang")

    def verify(self, p, q, c, rng=None, *, uniforms):
        return self.k.verify(p, q, c, uniform_samples=uniforms, uniform_samples_for_final_sampling=uniforms[:, -1])


class Declared(RecursiveRejection):
    def step_plan(self, p_i, q_i, *, last):
        return StepPlan.plain_step(np.minimum(p_i, q_i))


class ExitVerify(Declared):
    def verify(self, *a, **kw):
        sys.exit(2)


class DieVerify(Declared):
    def verify(self, *a, **kw):
        os._exit(3)
'''


@pytest.fixture
def subjects(tmp_path, monkeypatch):
    (tmp_path / "subjects_r2c.py").write_text(textwrap.dedent(SUBJECTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    return importlib.import_module("subjects_r2c")


class Declared(RecursiveRejection):
    """rrs declaring its steps (certify_stepwise's subject)."""

    def step_plan(self, p_i, q_i, *, last):
        return StepPlan.plain_step(np.minimum(p_i, q_i))


class UserRRS(RecursiveRejection):
    """rrs defined outside resispec: a user's reference (exact, not a registry rule)."""


# ---------------------------------------------------------------- 1. a reference too large to enumerate


@pytest.mark.parametrize("k,V", [(4, 50), (2, 1000)])
def test_biased_reference_too_large_to_enumerate_fails_by_monte_carlo(k, V):
    rng = np.random.default_rng(V)
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    m = CATALOGUE["residual_is_p"]
    cert = certify_coupled(m, m, p, q, k, n=2000)                     # reference_check="auto"
    assert not cert.passed and not cert.inconclusive and cert.outcome == "FAIL"
    assert cert.classification == "reference biased" and cert.reference_law == "biased"
    assert cert.reference_detail["method"] == "Monte Carlo (certify_verifier)"
    assert "exact by its proof" not in cert.verdict


def test_biased_reference_cli_exits_1_at_k4(capsys):
    args = ["certify-coupled", "--verifier", BIASED, "--reference", BIASED, "--k", "4", "--V", "50", "--n", "2000"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAIL (reference biased)" in out and "NO BIAS DETECTED" not in out


def test_exact_user_reference_too_large_to_enumerate_passes_by_monte_carlo():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(2000)), rng.dirichlet(np.ones(2000))   # 8e9 candidate tuples
    cert = certify_coupled(get_verifier("rrs"), UserRRS(), p, q, 3, n=2000)
    assert cert.passed and cert.outcome == "PASS" and cert.reference_law == "no bias detected"
    assert "certify_verifier of its chain detected no bias" in cert.verdict
    assert cert.summary().startswith("NO BIAS DETECTED (") and "MC-checked reference" in cert.summary()


def test_unchecked_reference_is_inconclusive_exit_3(capsys):
    m = CATALOGUE["residual_is_p"]
    cert = certify_coupled(m, m, P, Q, 4, n=2000, reference_check="none")
    assert not cert.passed and cert.inconclusive and cert.outcome == "INCONCLUSIVE"
    assert cert.reference_law == "unchecked" and cert.verdict.startswith("INCONCLUSIVE (the reference was not checked)")
    assert cert.summary().startswith("INCONCLUSIVE: reference not checked")
    args = ["certify-coupled", "--verifier", BIASED, "--reference", BIASED, "--k", "4", "--V", "50", "--n", "2000",
            "--reference-check", "none"]
    assert main(args) == 3
    assert "the reference was not checked" in capsys.readouterr().out


def test_registry_reference_under_none_still_passes():
    cert = certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=2000, reference_check="none")
    assert cert.passed and cert.reference_law == "registry"


# ---------------------------------------------------------------- 2. sys.exit is a FAIL


def test_coupled_kernel_calling_sys_exit_fails(subjects, capsys):
    cert = certify_coupled(subjects.ExitKernel(), "rrs", P, Q, 2, n=1000)
    assert not cert.passed and cert.classification == "subject error"
    assert "ExitKernel.verify called sys.exit(2)" in cert.cause
    assert main(["certify-coupled", "--verifier", "subjects_r2c:ExitKernel", "--V", "20", "--n", "1000"]) == 1
    assert "called sys.exit(2)" in capsys.readouterr().out


@pytest.mark.parametrize("workers", [1, 2])
def test_stepwise_verify_calling_sys_exit_fails(subjects, workers):
    cert = certify_stepwise(subjects.ExitVerify(), P, Q, 2, n=500, workers=workers)
    assert cert.verdict == "FAIL" and "ExitVerify.verify called sys.exit(2)" in cert.cause


def test_stepwise_step_plan_calling_sys_exit_fails(capsys):
    class ExitPlan(Declared):
        def step_plan(self, p_i, q_i, *, last):
            raise SystemExit(4)

    cert = certify_stepwise(ExitPlan(), P, Q, 2, n=500)
    assert cert.verdict == "FAIL" and "ExitPlan.step_plan called sys.exit(4)" in cert.cause


def test_stepwise_cli_sys_exit_is_exit_1(subjects, capsys):
    args = ["certify-stepwise", "--verifier", "subjects_r2c:ExitVerify", "--k", "2", "--V", "20", "--n", "500"]
    assert main(args) == 1
    assert "called sys.exit(2)" in capsys.readouterr().out
    assert main(args + ["--workers", "2"]) == 1
    assert "called sys.exit(2)" in capsys.readouterr().out


# ---------------------------------------------------------------- 3. a result whose properties raise


class _Boom:
    @property
    def tokens(self):
        raise RuntimeError("tokens property boom")

    @property
    def accepted(self):
        raise RuntimeError("accepted property boom")


class _AcceptedBoom:
    def __init__(self, res):
        self.tokens = res.tokens

    @property
    def accepted(self):
        raise RuntimeError("accepted property boom")


def test_coupled_result_property_raising_fails():
    class K:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            return _Boom()

    class A:
        drafting = "iid"

        def verify(self, p, q, c, rng=None, *, uniforms=None):
            return _AcceptedBoom(get_verifier("rrs").verify(p, q, c, rng, uniforms=uniforms))

    cert = certify_coupled(K(), "rrs", P, Q, 2, n=1000)
    assert not cert.passed and cert.classification == "subject error"
    assert "whose .tokens raised RuntimeError: tokens property boom" in cert.cause
    cert = certify_coupled(A(), "rrs", P, Q, 2, n=1000)
    assert not cert.passed and "whose .accepted raised RuntimeError: accepted property boom" in cert.cause


def test_stepwise_result_property_raising_fails():
    class D(Declared):
        def verify(self, *a, **kw):
            return _Boom()

    cert = certify_stepwise(D(), P, Q, 2, n=200)
    assert cert.verdict == "FAIL" and "D.verify returned a _Boom whose .tokens raised RuntimeError" in cert.cause


# ---------------------------------------------------------------- 4. a worker that dies


def test_stepwise_worker_killed_by_verify_fails(subjects, capsys):
    cert = certify_stepwise(subjects.DieVerify(), P, Q, 2, n=500, workers=2)
    assert cert.verdict == "FAIL" and cert.cause.startswith("a worker died") and "DieVerify.verify" in cert.cause
    args = ["certify-stepwise", "--verifier", "subjects_r2c:DieVerify", "--k", "2", "--V", "20", "--n", "500",
            "--workers", "2"]
    assert main(args) == 1
    cap = capsys.readouterr()
    assert "a worker died" in cap.out and "Traceback" not in cap.err + cap.out


# ---------------------------------------------------------------- 5. narrow laws at the door


def _f16(seed=3, V=50):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(V)).astype(np.float16), rng.dirichlet(np.ones(V)).astype(np.float16)
    assert abs(float(p.astype(np.float64).sum()) - 1.0) > 1e-6        # off 1 by more than SUM_TOL
    return p, q


def _wide(x):
    x = x.astype(np.float64)
    return x / x.sum()


def test_coupled_renormalises_float16_laws_at_the_door():
    p, q = _f16()
    cert = certify_coupled(get_verifier("rrs"), "rrs", p, q, 2, n=2000)
    wide = certify_coupled(get_verifier("rrs"), "rrs", _wide(p), _wide(q), 2, n=2000)
    assert cert.passed and (cert.mismatches, cert.n, cert.tv_upper) == (wide.mismatches, wide.n, wide.tv_upper)


def test_stepwise_renormalises_float16_laws_at_the_door():
    p, q = _f16()
    cert = certify_stepwise(Declared(), p, q, 2, n=500)
    wide = certify_stepwise(Declared(), _wide(p), _wide(q), 2, n=500)
    assert cert.verdict == wide.verdict == "PASS" and cert.events == wide.events == 0


# ---------------------------------------------------------------- 6. writing into read-only inputs


def test_kernel_writing_into_its_inputs_fails_naming_copies(subjects, capsys):
    cert = certify_coupled(subjects.WritesKernel(), "rrs", P, Q, 2, n=2000)
    assert not cert.passed and cert.outcome == "FAIL" and cert.classification == "subject error"
    assert "wrote into its read-only inputs" in cert.cause and "copies=True" in cert.cause
    assert "--copies" in cert.cause
    args = ["certify-coupled", "--verifier", "subjects_r2c:WritesKernel", "--V", "20", "--n", "2000"]
    assert main(args) == 1
    assert "wrote into its read-only inputs" in capsys.readouterr().out
    assert main(args + ["--copies"]) == 0


# ---------------------------------------------------------------- 7. not the same coupling


def test_not_the_same_coupling_is_inconclusive(subjects, capsys):
    cert = certify_coupled(subjects.Crossed(), "resispec", P8, Q8, 3, n=4000)
    assert cert.classification == "not the same coupling", cert.verdict
    assert not cert.passed and cert.inconclusive and cert.outcome == "INCONCLUSIVE"
    assert cert.verdict.startswith("INCONCLUSIVE (not the same coupling")
    assert cert.summary().startswith("INCONCLUSIVE: not the same coupling")
    np.savez(Path(subjects.__file__).parent / "node8.npz", p=P8, q=Q8)
    args = ["certify-coupled", "--verifier", "subjects_r2c:Crossed", "--reference", "resispec", "--k", "3",
            "--pq", str(Path(subjects.__file__).parent / "node8.npz"), "--n", "4000"]
    assert main(args) == 3
    assert "INCONCLUSIVE (not the same coupling" in capsys.readouterr().out
    assert main(args + ["--fallback"]) == 0                             # certify_verifier of the kernel passes
    out = capsys.readouterr().out
    assert "NO BIAS DETECTED (by certify_verifier, detectable TV" in out
    assert "not the same coupling as the reference" in out


def test_fallback_decides_not_the_same_coupling(subjects):
    cert = certify_coupled(subjects.Crossed(), "resispec", P8, Q8, 3, n=4000, fallback=True, fallback_n=20_000)
    assert cert.classification == "not the same coupling" and cert.fallback.passed
    assert cert.passed and not cert.inconclusive and cert.outcome == "PASS"
    s = cert.summary()
    assert s.startswith("NO BIAS DETECTED (by certify_verifier, detectable TV ") and len(s) <= WIDTH
    assert "not the same coupling as the reference" in s
    assert "fall back to certify_verifier" not in cert.verdict
    assert "fallback (certify_verifier of the kernel): NO BIAS DETECTED" in cert.report()


def test_failing_fallback_fails_a_mismatch(subjects, monkeypatch):
    failed = SimpleNamespace(passed=False, pvalue=0.0, detectable_tv=0.01, n=1, summary=lambda: "FAIL: marginal: stub")
    monkeypatch.setattr("exactness.verifier_cert.certify_verifier", lambda *a, **kw: failed)
    cert = certify_coupled(subjects.Crossed(), "resispec", P8, Q8, 3, n=4000, fallback=True)
    assert not cert.passed and not cert.inconclusive and cert.outcome == "FAIL"
    assert cert.classification == "biased" and "certify_verifier FAILED" in cert.verdict


def test_assert_coupled_does_not_accept_a_fallback_pass(subjects):
    from exactness.assertions import assert_coupled

    with pytest.raises(AssertionError, match="not the same coupling"):
        assert_coupled(subjects.Crossed(), "resispec", P8, Q8, 3, tv=2e-3, fallback=True, fallback_n=20_000)


# ---------------------------------------------------------------- 8. docs: how a plain kernel draws its coins


def test_docs_say_how_a_plain_kernel_draws_its_coins():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "coupled.md").read_text()
    head = doc[:doc.index("## The coupling inequality")]          # near the top, before the theory
    assert "`generator` convention" in head and "rng.random((B, k + 1))" in head
    assert "column `i` for candidate `i`" in head and "column `k`" in head and "token-id order" in head
    assert "not the same coupling" in head and "--fallback" in head


# ---------------------------------------------------------------- 9. summary()


def test_summary_is_one_line_like_certificate_summary(subjects):
    ok = certify_coupled(get_verifier("rrs"), "rrs", P, Q, 2, n=2000)
    bad = certify_coupled(CATALOGUE["residual_is_p"], "rrs", P, Q, 2, n=4000)
    err = certify_coupled(subjects.ExitKernel(), "rrs", P, Q, 2, n=1000)
    for cert, head in ((ok, "NO BIAS DETECTED ("), (bad, "FAIL: biased: "), (err, "FAIL: subject: ")):
        s = cert.summary()
        assert s.startswith(head) and "\n" not in s and len(s) <= WIDTH, s
        assert cert.verdict in cert.report() and str(cert) == cert.verdict
    assert "TV <= " in ok.summary() and "registry reference" in ok.summary()
    assert ok.outcome == "PASS" and bad.outcome == "FAIL"
