"""certify_decoder's conditional checks (reported events) and batch-of-B vs B batches of 1 (per-row seeds)."""

import re

import numpy as np
import pytest

import exactness
from exactness.chain import ChainDecoder, per_request, token_chain_kernel
from exactness.decoder_events import DecoderEvents, check_events
from exactness.decoder_mutants import CORRECT, MUTANTS

from _decoder_cases import setup

N = 20000  # per prompt; the mutants' conditional p-values are 0 here (measured), exact decoders pass
COND = ("accepted_count", "after_rejection", "bonus")


@pytest.mark.parametrize("name", ["token_chain", "token_chain_one_hot"])
def test_exact_token_chains_pass_the_conditional_checks(name):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT[name](model), target, prompts, new_tokens=3, n=N)
    assert cert.passed, cert.summary()
    for c in COND:
        assert c in cert.checks and cert.details[c]["n"] > 1000 and cert.details[c]["detectable_tv"] < 0.1
    assert cert.checks["batch_rows"] == 1.0
    assert "conditional" not in cert.skipped


@pytest.mark.parametrize("name, check", [
    ("residual_off_by_one", "after_rejection"),
    ("bonus_from_residual", "bonus"),
    ("target_off_by_one", "accepted_count"),
])
def test_mutants_fail_their_conditional_check(name, check):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(MUTANTS[name](model), target, prompts, new_tokens=3, n=N)
    assert not cert.passed
    assert check in cert.failed_checks(), cert.summary()


def test_block_verification_is_not_per_node():
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT["block_chain"](model), target, prompts, new_tokens=3, n=2000)
    assert cert.passed, cert.summary()
    assert "block verification" in cert.skipped["accepted_count"] and "accepted_count" not in cert.checks
    assert "block verification" in cert.skipped["after_rejection"] and "conditional" not in cert.skipped
    assert "bonus" in cert.checks and cert.details["bonus"]["n"] > 0      # the rule-free bonus check runs


def test_no_events_is_skipped_with_the_reason():
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT["rrs"](model), target, prompts, n=500)
    assert "reports no events" in cert.skipped["conditional"]
    assert "per_row_rng" in cert.skipped["batch_rows"]


def test_unknown_rule_in_a_user_kernel_is_skipped_and_a_bad_rule_is_an_error():
    model, target, prompts = setup()

    def one(tp, dp, d, rng):
        out = token_chain_kernel(tp[None], dp[None], d[None], rng)[0]
        return out[out >= 0]

    cert = exactness.certify_decoder(ChainDecoder(per_request(one), model), target, prompts, n=500)
    assert "decoder.rule is None" in cert.skipped["accepted_count"]   # bonus: none within 2 new tokens
    cert = exactness.certify_decoder(ChainDecoder(per_request(one), model, rule="rrs"), target, prompts, n=3000)
    assert cert.passed and "after_rejection" in cert.checks, cert.summary()
    with pytest.raises(ValueError, match="'token' is not a resispec registry verifier"):
        exactness.certify_decoder(ChainDecoder(token_chain_kernel, model, rule="token"), target, prompts, n=50)


def test_a_user_kernel_without_a_rule_still_has_its_bonus_checked():
    """Issue 40 item 4: the bonus law after a full path is the target's for every exact rule, so a user kernel
    that names no rule (rule None) still gets the bonus check; a bonus drawn from a residual fails it."""
    from exactness.decoder_mutants import bonus_from_residual_kernel

    model, target, prompts = setup()

    def one(tp, dp, d, rng):                         # the planted bug as a per-request user kernel, no rule
        out = bonus_from_residual_kernel(tp[None], dp[None], d[None], rng)[0]
        return out[out >= 0]

    cert = exactness.certify_decoder(ChainDecoder(per_request(one), model), target, prompts, new_tokens=3, n=N)
    assert "bonus" in cert.failed_checks() and cert.checks["bonus"] < 1e-6, cert.summary()
    assert "decoder.rule is None" in cert.skipped["after_rejection"]


def test_rows_mixed_fails_batch_rows_and_reports_the_row():
    model, target, prompts = setup()
    cert = exactness.certify_decoder(MUTANTS["rows_mixed"](model), target, prompts, new_tokens=3, n=300)
    assert "batch_rows" in cert.failed_checks()
    d = cert.details["batch_rows"]
    assert d["first_row"] >= 2 and d["batch"] != d["alone"] and f"row {d['first_row']}" in d["reason"]


def test_per_row_rng_makes_a_row_independent_of_its_batch():
    model, _, _ = setup()
    dec = CORRECT["token_chain"](model)
    pr = np.array([[0], [1], [3], [2], [0]])
    batch = dec.sample(pr, 5, [np.random.default_rng([4, i]) for i in range(5)])
    for i in range(5):
        np.testing.assert_array_equal(batch[i], dec.sample(pr[i:i + 1], 5, [np.random.default_rng([4, i])])[0])
    with pytest.raises(TypeError, match="list of B = 5"):
        dec.sample(pr, 5, [np.random.default_rng(0)])


class _Tamper(ChainDecoder):
    """Token-level chain whose reported events are changed by ``fix(tokens, events)``."""

    def __init__(self, model, fix):
        super().__init__(token_chain_kernel, model, gamma=2)
        self.fix = fix

    def sample_events(self, prompts, new_tokens, rng):
        tokens, ev = super().sample_events(prompts, new_tokens, rng)
        return self.fix(tokens, ev)


def _with(ev, **kw):
    return DecoderEvents(**{f: kw.get(f, getattr(ev, f)) for f in ("row", "position", "candidates", "accepted",
                                                                  "token", "call")})


@pytest.mark.parametrize("fix, match", [
    (lambda t, e: (t, _with(e, token=(e.token + 1) % 4)), "report the token each decision emitted"),
    (lambda t, e: (t, e.take(np.arange(e.row.size) > 0)), "exactly one decision"),
    (lambda t, e: (t, _with(e, accepted=np.where(e.accepted < 0, 0, e.accepted))), "accepted decision emits its "
                                                                                   "candidate|ends the call|"
                                                                                   "one entry per emitted"),
    (lambda t, e: (t, _with(e, call=np.zeros_like(e.call))), "spans several rows"),
    (lambda t, e: (t, _with(e, row=e.row + 100)), r"outside the batch rows"),
    (lambda t, e: (t, object()), "missing"),
])
def test_inconsistent_events_are_an_error_naming_the_fix(fix, match):
    """Events that contradict the tokens: the decoder misbehaved, a FAIL naming the fix (issue 37)."""
    model, target, prompts = setup()
    cert = exactness.certify_decoder(_Tamper(model, fix), target, prompts, n=200)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert re.search(match, cert.details["subject"]["error"]), cert.details["subject"]["error"]


def test_events_from_another_run_than_sample_are_an_error():
    model, target, prompts = setup()

    class Other(ChainDecoder):
        def sample_events(self, prompts, new_tokens, rng):
            return super().sample_events(prompts, new_tokens, np.random.default_rng(rng.integers(2**63)))

    cert = exactness.certify_decoder(Other(token_chain_kernel, model), target, prompts, n=200)
    assert not cert.passed and cert.checks == {"subject": 0.0}
    assert "sample_events and decoder.sample return different tokens" in cert.details["subject"]["error"]


def test_check_events_accepts_the_reference_and_drops_tokens_past_new_tokens():
    model, _, _ = setup()
    dec = CORRECT["token_chain"](model)
    tokens, ev = dec.sample_events(np.array([[0], [1]]), 4, np.random.default_rng(0))
    out = check_events(ev, tokens, 4)
    assert out.row.size == 8 and set(out.position.tolist()) == {0, 1, 2, 3}
    cut = check_events(ev, tokens[:, :2], 4)
    assert cut.row.size == 4 and cut.position.max() == 1


def test_summary_labels_the_main_check_by_its_name(monkeypatch):
    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, n=300)
    assert cert.main == "joint" and "(joint test, " in cert.summary() and "marginal" not in cert.summary()
    assert "joint chi2 = " in cert.report()
    monkeypatch.setattr(exactness.decoder, "JOINT_MAX", 3)      # V = 4: nothing enumerates, PIT is the main test
    cert = exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, n=300)
    assert "(pit[1,id] test, " in cert.summary() and "marginal" not in cert.summary()
    assert "pit[1,id] chi2 = " in cert.report()
