"""The decoder certificate's checks as objects (exactness.decoder_checks, issue 39 item 3): every check declares
what it detects, its design twins and the planted bug it must catch, and catches it."""

import warnings

import pytest

import exactness
from exactness.decoder_checks import DECODER_CHECKS, DecoderCheck
from exactness.decoder_mutants import CHECK_MUTANTS

from _decoder_cases import setup


def test_the_table_names_every_check_once_and_each_declares_itself():
    names = [n for c in DECODER_CHECKS for n in c.names]
    assert len(names) == len(set(names))
    for c in DECODER_CHECKS:
        assert isinstance(c, DecoderCheck) and c.detects and c.mutant in CHECK_MUTANTS, c


def _fails(name: str, cert) -> set:
    """The failed checks of ``cert`` (a subject failure counts for the check whose probe raised it)."""
    failed = set(cert.failed_checks())
    err = cert.details.get("subject", {}).get("error", "")
    if "sample_events and decoder.sample return different tokens" in err:
        failed.add("seeded")
    return {f.split("[")[0] + ("[*]" if "[" in f else "") for f in failed} | failed


@pytest.mark.parametrize("check", DECODER_CHECKS, ids=repr)
def test_every_check_catches_its_mutant(check):
    model, target, prompts = setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", exactness.ExactnessWarning)
        cert = exactness.certify_decoder(CHECK_MUTANTS[check.mutant](model), target, prompts, new_tokens=3,
                                         n=3000, seed=1)
    assert not cert.passed and _fails(check.mutant, cert) & set(check.names), (check, cert.checks, cert.skipped)


def test_the_exact_decoders_pass_with_every_check_run_or_skipped_with_a_reason():
    from exactness.decoder_mutants import CORRECT

    model, target, prompts = setup()
    cert = exactness.certify_decoder(CORRECT["token_chain"](model), target, prompts, new_tokens=3, n=3000, seed=1)
    assert cert.passed, cert.summary()
    for c in DECODER_CHECKS:
        for name in c.names:
            head = name.replace("[*]", "")
            ran = any(k == head or k.startswith(head + "[") for k in list(cert.checks) + list(cert.skipped))
            assert ran or c.skip is not DecoderCheck.skip, (name, list(cert.checks), list(cert.skipped))
    assert all(reason for reason in cert.skipped.values())

