"""Assertions shared by the verdict tests: a certificate failed because its subject misbehaved."""

from __future__ import annotations


def subject_fail(cert, *words) -> str:
    """Assert ``cert`` is the FAIL of a misbehaving subject (``checks == {"subject": 0.0}``) whose cause holds every
    one of ``words``; return the cause."""
    assert not cert.passed and cert.checks == {"subject": 0.0}, cert.summary()
    cause = cert.details["subject"]["error"]
    for w in words:
        assert w in cause, cause
    return cause
