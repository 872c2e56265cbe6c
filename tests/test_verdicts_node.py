"""Issue 37, node level: every verdict right for certify_verifier, certify_sampler, certify_counts,
certify_samples, validate_proxy, assert_exact and ``resispec certify``.

Laws normalised at the door (float32 / float16 get their float64 renormalisation's verdict), impossible tokens
failing at once and named, overflowing / non-integer counts refused naming ``counts``, pipelines that draft their
own candidates certified on what they emit, misbehaving subjects (raise, wrong shape or dtype, out of V, hang)
FAILED with the cause (exit 1), never "bad input" (exit 2).  No test here asserts a wall-clock bound: the hanging
subjects sleep for ever and only the verdict is checked.
"""

from __future__ import annotations

import io
import signal
import textwrap
import time

import numpy as np
import pytest
from _subjects import subject_fail

import exactness
import resispec
from exactness import certify_counts, certify_sampler, certify_samples, certify_verifier, validate_proxy
from resispec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
P0 = np.array([0.5, 0.5, 0.0])          # token 2 impossible
RRS = resispec.get_verifier("rrs")
TINY = ["--family", "zipf", "--k", "1", "--samples", "2000", "--no-mutants", "--no-progress"]


def _subject_error(cert) -> str:
    assert cert.pvalue == 0.0, cert.checks
    return subject_fail(cert)


def _inverse_cdf(law2, u):
    """Row-wise inverse CDF: ``law2`` (B, V), ``u`` (B, m) -> (B, m) int64."""
    cdf = np.cumsum(law2, axis=1)
    out = (u[:, :, None] * cdf[:, None, -1:] >= cdf[:, None, :]).sum(axis=2)
    return np.minimum(out, law2.shape[1] - 1).astype(np.int64)


# --------------------------------------------------------------- item 4: laws normalised once at the door

def _laws(V, seed):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))


def _renormalised(x):
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("V, seed", [(8, 0), (20, 1)])
def test_validate_proxy_on_narrow_floats_gives_the_float64_verdict(dtype, V, seed):
    from exactness.mutants import public_summary_rule
    from resispec.verifiers.rejection_proxy import rrs_residual

    p, q = (x.astype(dtype) for x in _laws(V, seed))
    for rule in (rrs_residual, public_summary_rule):
        narrow = validate_proxy(rule, p, q, 2, certify=False)       # float32 used to read BIASED (TV 6e-9)
        wide = validate_proxy(rule, _renormalised(p), _renormalised(q), 2, certify=False)
        assert narrow.exact == wide.exact and narrow.failing_tokens == wide.failing_tokens
        assert narrow.tv == pytest.approx(wide.tv, abs=1e-12)
    assert validate_proxy(rrs_residual, p, q, 2, certify=False).exact is True


def test_certify_verifier_counts_and_sampler_take_float16_laws():
    p, q = (x.astype(np.float16) for x in _laws(8, 2))
    pn = _renormalised(p)
    cert = certify_verifier(RRS, p, q, 2, n=2_000, tree=False)
    assert cert.passed and cert.details["exact"]["tv"] < 1e-12
    counts = np.bincount(np.random.default_rng(0).choice(8, size=5_000, p=pn), minlength=8)
    assert certify_counts(counts, p).passed
    assert certify_sampler(lambda rng, m: rng.choice(8, size=m, p=pn), p, 5_000).passed


def test_a_float16_law_far_from_one_is_still_refused():
    p, q = _laws(8, 3)
    with pytest.raises(ValueError, match="p row 0 sums to"):
        certify_verifier(RRS, (p * 1.1).astype(np.float16), q, 2, n=500)


def test_validate_proxy_says_when_a_step_runs_long():
    from exactness._progress import Heartbeat

    buf = io.StringIO()
    with Heartbeat("validate_proxy(x, k = 2)", after=0.0, interval=0.0, stream=buf) as beat:
        beat.step("Monte Carlo certificate (200,000 draws)")
        for _ in range(400):                 # until the line appears (no time bound asserted)
            if buf.getvalue():
                break
            time.sleep(0.05)
    assert "validate_proxy(x, k = 2): Monte Carlo certificate (200,000 draws)" in buf.getvalue()
    quiet = io.StringIO()
    with Heartbeat("fast", after=3600.0, stream=quiet):
        pass
    assert quiet.getvalue() == ""


# --------------------------------------------------------------- item 2: impossible tokens fail at once, named

class _ImpossibleOnce:
    """rrs, except that the first row of every batch emits token 2 (target probability 0)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        r = RRS.verify(p, q, candidates, rng)
        t, a = r.tokens.copy(), r.accepted.copy()
        t[0], a[0] = 2, -1
        return resispec.VerifyResult(t, a)


def _named(cert, token, count=None):
    assert not cert.passed and cert.checks["marginal"] == 0.0
    seen = cert.details["marginal"]["impossible_tokens"]
    assert token in seen and (count is None or seen[token] == count)
    assert any(f"token {token} x" in note and "probability 0" in note for note in cert.notes)


def test_impossible_token_fails_certify_verifier():
    _named(certify_verifier(_ImpossibleOnce(), P0, Q, 2, n=2_000), 2)


def test_impossible_token_fails_the_sequential_certificate():
    _named(certify_verifier(_ImpossibleOnce(), P0, Q, 2, n=40_000, sequential=True, tree=False), 2)


def test_impossible_token_fails_certify_sampler_at_any_n():
    def sample(rng, m):
        out = rng.choice(3, size=m, p=P0)
        out[0] = 2
        return out

    _named(certify_sampler(sample, P0, 3), 2, 1)        # n = 3: no degrees of freedom, yet a FAIL, not an error
    _named(certify_sampler(sample, P0, 5_000), 2, 1)


def test_impossible_token_fails_certify_counts_even_with_df_0():
    _named(certify_counts(np.array([1, 0, 1]), P0), 2, 1)
    _named(certify_counts(np.array([400, 400, 3]), P0), 2, 3)
    joint = np.array([[1, 0, 0], [0, 0, 1]])            # (k + 1, V) counts, k = 1
    _named(certify_counts(joint, P0, Q), 2, 1)


def test_impossible_token_fails_certify_samples_even_with_df_0():
    _named(certify_samples(np.array([0, 2]), P0), 2, 1)
    _named(certify_samples(np.array([0, 2]), P0, accepted=np.array([0, -1]), candidates=np.array([[0], [1]]),
                           q=Q), 2, 1)


def test_no_impossible_token_and_df_0_is_still_an_error():
    with pytest.raises(ValueError, match="no degrees of freedom"):
        certify_counts(np.array([1, 1, 0]), P0)


# --------------------------------------------------------------- item 7: counts that overflowed or are not integers

@pytest.mark.parametrize("counts, match", [
    (np.array([2**62, 2**62, 2**62], dtype=np.int64), "overflow"),              # used to wrap to a negative n
    (np.array([2**63 - 1, 2**63 - 1, 10], dtype=np.int64), "overflow"),          # wrapped to ~8: "TV <= 5e-10"
    (np.array([2**63, 1, 1], dtype=np.uint64), "overflow"),                      # astype(int64) wrapped it
    ([2**64, 1, 1], "overflow"),                                                  # a Python int past int64
    (np.array([[2**62, 2**62, 0], [2**62, 0, 0]], dtype=np.int64), "overflow"),  # (k + 1, V) by stop position
])
def test_overflowing_counts_are_a_clear_error_naming_counts(counts, match):
    with pytest.raises(ValueError, match=match) as e:
        certify_counts(counts, P, Q if np.ndim(counts) == 2 else None)
    assert str(e.value).startswith("counts")


@pytest.mark.parametrize("counts", [np.array([1.5, 2.0, 3.0]), np.array([True, False, True]),
                                    np.array([1, "a", 2], dtype=object), np.array([1 + 0j, 2, 3])])
def test_non_integer_counts_are_a_clear_error_naming_counts(counts):
    with pytest.raises(TypeError, match="counts must hold integers"):
        certify_counts(counts, P)


def test_counts_at_the_limit_still_certify():
    big = (np.array([0.5, 0.3, 0.2]) * 2**40).astype(np.int64)
    assert certify_counts(big, P).passed


# --------------------------------------------------------------- item 7: pipelines that draft their own candidates

class SelfDrafting:
    """Draws its OWN candidates (from ``draft``, default ``q``), verifies them with rrs under ``q``, and reports
    accepted indices into its own candidates.  With ``reverse=True`` it drafts from ``q`` reversed while
    verifying as if the drafts came from ``q``: biased (TV 0.2 on ``P, Q`` at k = 2; 0.32 on ``resispec
    certify``'s zipf node at k = 1)."""

    drafting = "iid"

    def __init__(self, reverse: bool = False):
        self.reverse = reverse

    def verify(self, p, q, candidates, rng):
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        draft = q[:, ::-1] if self.reverse else q
        own = _inverse_cdf(draft, rng.random(np.shape(candidates)))
        r = RRS.verify(p, q, own, rng)
        return resispec.VerifyResult(r.tokens, r.accepted)


def _accepted_note(cert):
    assert "do not name" in cert.details["accepted_index"]["error"] or \
        "not a flag" in cert.details["accepted_index"]["error"]
    assert any("certified on the tokens it emits" in note for note in cert.notes)
    for name in ("tree_bonus", "tree_two_level"):
        assert name not in cert.checks and "accepted" in cert.skipped[name]


def test_a_biased_self_drafting_verifier_fails_on_what_it_emits():
    cert = certify_verifier(SelfDrafting(reverse=True), P, Q, 2, n=5_000)   # used to raise ValueError
    assert not cert.passed and "marginal" in cert.failed_checks()
    _accepted_note(cert)


def test_an_exact_self_drafting_verifier_fails_only_its_accepted_index_contract():
    """Its emitted law is right (no statistical check fails), but an accepted index that does not name the
    candidate it was given is a broken contract: FAIL (exit 1), with the cause, never refused."""
    cert = certify_verifier(SelfDrafting(), P, Q, 2, n=5_000)
    assert not cert.passed and set(cert.failed_checks(adjusted=False)) == {"accepted_index"}, cert.report()
    _accepted_note(cert)
    assert "batched_rows" in cert.checks and "small_batches" in cert.checks


class _Tokens:
    def __init__(self, tokens):
        self.tokens = tokens


class TokensOnly(SelfDrafting):
    """The same pipeline reporting only ``.tokens`` (no accepted index): the documented way to certify it."""

    def verify(self, p, q, candidates, rng):
        return _Tokens(super().verify(p, q, candidates, rng).tokens)


def test_an_exact_self_drafting_verifier_reporting_tokens_only_passes():
    cert = certify_verifier(TokensOnly(), P, Q, 2, n=5_000)
    assert cert.passed, cert.report()
    assert "accepted_index" not in cert.checks
    assert not certify_verifier(TokensOnly(reverse=True), P, Q, 2, n=5_000).passed


def test_a_self_drafting_verifier_in_workers_and_sequential():
    cert = certify_verifier(SelfDrafting(reverse=True), P, Q, 2, n=5_000, workers=2, tree=False)
    assert not cert.passed and "accepted_index" in cert.details
    cert = certify_verifier(SelfDrafting(reverse=True), P, Q, 2, n=40_000, sequential=True, tree=False)
    assert not cert.passed and "accepted_index" in cert.details


SELF_DRAFTING = '''
import numpy as np
import resispec

RRS = resispec.get_verifier("rrs")


class Mine:
    drafting = "iid"
    reverse = REVERSE

    def verify(self, p, q, candidates, rng):
        p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        draft = q[:, ::-1] if self.reverse else q
        cdf = np.cumsum(draft, axis=1)
        u = rng.random(np.shape(candidates))
        own = np.minimum((u[:, :, None] * cdf[:, None, -1:] >= cdf[:, None, :]).sum(axis=2), q.shape[1] - 1)
        r = RRS.verify(p, q, own, rng)
        return resispec.VerifyResult(r.tokens, r.accepted)
'''


@pytest.mark.parametrize("reverse, rc", [(True, 1), (False, 1)])
def test_cli_certifies_self_drafting_verifiers_on_what_they_emit(user_dir, capsys, reverse, rc):
    (user_dir / "selfdraft.py").write_text(SELF_DRAFTING.replace("REVERSE", str(reverse)))
    assert main(["certify", "--verifier", "selfdraft:Mine", *TINY, "--out", str(user_dir / "c.md")]) == rc
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err and "error:" not in out.err
    assert "FAILED cell" not in out.out      # certified (a verdict on its tokens), not a cell that errored
    assert "certified on the tokens it emits" in (user_dir / "c.md").read_text()
    if reverse:
        assert "FAIL (marginal" in out.out


def test_certify_samples_with_indices_into_other_candidates_is_certified_on_the_tokens():
    rng = np.random.default_rng(0)
    n, k = 4_000, 2
    tokens = rng.choice(3, size=n, p=P)
    cand = rng.choice(3, size=(n, k), p=Q)
    accepted = np.zeros(n, dtype=np.int64)               # "candidate 0" though it is often another token
    cert = certify_samples(tokens, P, accepted=accepted, candidates=cand, q=Q)   # used to raise ValueError
    assert not cert.passed and set(cert.failed_checks(adjusted=False)) == {"accepted_index"}
    assert "acceptance_bound" in cert.skipped and "candidate_support" in cert.skipped
    assert any("certified on the emitted tokens" in note for note in cert.notes)
    flags = certify_samples(tokens, P, accepted=np.full(n, 5), k=k, q=Q)   # out of [-1, k): also stated
    assert "[-1, 2)" in flags.details["accepted_index"]["error"]


# --------------------------------------------------------------- item 3 / 5: misbehaving subjects FAIL, exit 1

class _Raises:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        raise ZeroDivisionError("verify exploded")


class _Returns:
    drafting = "iid"

    def __init__(self, make):
        self.make = make

    def verify(self, p, q, candidates, rng):
        return self.make(np.shape(candidates)[0])


_BAD_OUTPUTS = {
    "out_of_v": (lambda B: resispec.VerifyResult(np.full(B, 3, dtype=np.int64), np.full(B, -1)),
                 "outside the vocabulary [0, 3)"),
    "negative": (lambda B: resispec.VerifyResult(np.full(B, -1, dtype=np.int64), np.full(B, -1)),
                 "outside the vocabulary"),
    "shape": (lambda B: resispec.VerifyResult(np.zeros((B, 2), dtype=np.int64), np.full(B, -1)), "shape"),
    "dtype": (lambda B: resispec.VerifyResult(np.zeros(B), np.full(B, -1)), "dtype float64"),
    "none": (lambda B: None, "returned NoneType"),
}


@pytest.mark.parametrize("case", sorted(_BAD_OUTPUTS))
def test_a_verifier_with_bad_output_fails_naming_the_cause(case):
    make, match = _BAD_OUTPUTS[case]
    cause = _subject_error(certify_verifier(_Returns(make), P, Q, 2, n=500))
    assert match in cause and "_Returns.verify" in cause


def test_a_raising_verifier_fails_naming_it():
    cause = _subject_error(certify_verifier(_Raises(), P, Q, 2, n=500))
    assert "_Raises.verify raised ZeroDivisionError: verify exploded (in verify" in cause


def test_a_raising_chain_and_draft_law_fail_naming_them():
    class BadChain(type(RRS)):
        def chain(self, p, q, candidates):
            raise KeyError("no chain today")

    cause = _subject_error(certify_verifier(BadChain(), P, Q, 2, n=500))
    assert "BadChain" in cause and "KeyError" in cause

    class BadDraftLaw(_Raises):
        def draft_law(self, q):
            return -q

    assert "draft_law" in _subject_error(certify_verifier(BadDraftLaw(), P, Q, 2, n=500))


def test_assert_exact_reports_the_misbehaving_subject():
    with pytest.raises(AssertionError, match="misbehaved.*ZeroDivisionError: verify exploded"):
        exactness.assert_exact(_Raises(), P, Q, k=1, n=500)
    with pytest.raises(AssertionError, match="sampler misbehaved.*outside"):
        exactness.assert_exact(lambda rng, m: np.full(m, 9), P, n=500)


@pytest.mark.parametrize("sample, match", [
    (lambda rng, m: np.full(m, 3), "outside [0, 3)"),
    (lambda rng, m: np.full(m, -1), "outside [0, 3)"),
    (lambda rng, m: np.zeros(m + 1, dtype=np.int64), "shape"),
    (lambda rng, m: np.zeros(m), "dtype float64"),
    (lambda rng, m: 1 / 0, "ZeroDivisionError"),
])
def test_a_misbehaving_sampler_fails_naming_the_cause(sample, match):
    cause = _subject_error(certify_sampler(sample, P, 500))
    assert match in cause and "(rng, n)" in cause


def test_a_sampler_failing_in_a_worker_fails_naming_it():
    cause = _subject_error(certify_sampler(lambda rng, m: np.full(m, 7), P, 3_000, workers=2))
    assert "outside" in cause


def test_a_misbehaving_proxy_fails_naming_the_cause():
    def raises(R, q, x, *, step):
        raise RuntimeError("proxy exploded")

    def not_a_law(R, q, x, *, step):
        return -R

    for proxy, match in ((raises, "RuntimeError: proxy exploded"), (not_a_law, "negative entries")):
        r = validate_proxy(proxy, P, Q, 2, certify=False)    # used to raise ValueError
        assert r.exact is False and match in r.cause and proxy.__name__ in r.cause
        assert "FAILED" in r.summary() and r.cause in r.summary()
    assert "proxy exploded" in validate_proxy(raises, P, Q, 2).cause


def test_bad_arguments_are_still_caller_errors():
    with pytest.raises(TypeError, match="proxy"):
        validate_proxy("not callable", P, Q, 2)
    with pytest.raises(ValueError, match="timeout"):
        certify_verifier(RRS, P, Q, 2, n=500, timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        certify_sampler(lambda rng, m: rng.choice(3, size=m, p=P), P, 500, timeout=float("nan"))
    with pytest.raises(TypeError, match="drafting"):
        certify_verifier(object.__new__(type("NoDrafting", (), {"verify": lambda *a: None})), P, Q, 2, n=500)


_CLI_SUBJECTS = {
    "raises": ("raise ZeroDivisionError('verify exploded')", "ZeroDivisionError: verify exploded"),
    "out_of_v": ("return resispec.VerifyResult(np.full(len(candidates), 10**6), np.full(len(candidates), -1))",
                 "outside the vocabulary"),
    "dtype": ("return resispec.VerifyResult(np.zeros(len(candidates)), np.full(len(candidates), -1))",
              "dtype float64"),
}   # (wrong shapes: through the function above; each CLI run costs a report)


@pytest.mark.parametrize("case", sorted(_CLI_SUBJECTS))
def test_cli_exit_1_for_a_misbehaving_verifier(user_dir, capsys, case):
    body, expect = _CLI_SUBJECTS[case]
    (user_dir / f"bad_{case}.py").write_text(textwrap.dedent(f"""
        import numpy as np
        import resispec

        class Mine:
            drafting = "iid"

            def verify(self, p, q, candidates, rng):
                {body}
    """))
    rc = main(["certify", "--verifier", f"bad_{case}:Mine", *TINY, "--out", str(user_dir / "c.md")])
    out = capsys.readouterr()
    assert rc == 1 and "Traceback" not in out.out + out.err
    assert "FAILED cell" in out.out and expect in out.out


# --------------------------------------------------------------- item 6: hard time limits, default on

class _Hangs:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        time.sleep(3600)


def _no_alarm_left(before):
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_default_time_limits_exist():
    import inspect

    from exactness.limits import DEFAULT_TIMEOUT, MAX_SECONDS

    assert DEFAULT_TIMEOUT >= MAX_SECONDS
    for fn in (certify_verifier, certify_sampler, validate_proxy, exactness.assert_exact):
        assert inspect.signature(fn).parameters["timeout"].default == DEFAULT_TIMEOUT


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_a_hanging_verify_is_stopped_and_named():
    before = signal.getsignal(signal.SIGALRM)
    cause = _subject_error(certify_verifier(_Hangs(), P, Q, 2, n=500, timeout=1))
    assert cause.startswith("_Hangs.verify did not return within 11 s")   # the call that did not return (1 + 10)
    _no_alarm_left(before)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_a_hanging_sampler_and_proxy_are_stopped_and_named():
    before = signal.getsignal(signal.SIGALRM)

    def sleeps(rng, m):
        time.sleep(3600)

    cause = _subject_error(certify_sampler(sleeps, P, 500, timeout=1))
    assert "sleeps did not return within 11 s" in cause

    def proxy_sleeps(R, q, x, *, step):
        time.sleep(3600)

    r = validate_proxy(proxy_sleeps, P, Q, 2, timeout=1, progress=False)
    assert r.exact is False and "proxy_sleeps did not return within 11 s" in r.cause
    _no_alarm_left(before)


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="SIGALRM")
def test_an_outer_limit_governs_and_passes_through():
    from exactness._timeout import TimeLimitExceeded, time_limit

    with pytest.raises(TimeLimitExceeded):
        with time_limit(1):
            certify_verifier(_Hangs(), P, Q, 2, n=500, timeout=3600)


# --------------------------------------------------------------- every exact rule still passes, 20 seeds

class _BlackBoxRRS:
    """rrs behind a plain ``verify``: the black-box route (batch sizes 9..4096, batched_rows, small_batches)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return RRS.verify(p, q, candidates, rng)


def test_every_exact_rule_passes_in_20_seeds():
    """Every registry verifier and a black-box exact one, 20 seeds each at a small node: the new checks
    (batch_sizes, accepted_index, impossible tokens, the door's renormalisation) never fail an exact rule."""
    from resispec.verifiers.registry import available_verifiers, get_verifier

    rng = np.random.default_rng(37)
    p, q = rng.dirichlet(np.ones(6)), rng.dirichlet(np.ones(6))
    subjects = {name: get_verifier(name) for name in available_verifiers()} | {"black box rrs": _BlackBoxRRS()}
    failed = [(name, seed, cert.summary())
              for name, v in subjects.items() for seed in range(20)
              for cert in [certify_verifier(v, p, q, 2, n=2_000, seed=seed, tree=False)] if not cert.passed]
    assert not failed, failed
