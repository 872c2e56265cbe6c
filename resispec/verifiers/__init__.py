"""Verifiers: the contract, the registry and every built-in rule."""

from .base import Chain, MassVerifier, Verifier, VerifyResult
from .registry import available_verifiers, get_verifier, register
from . import baselines, kseq, rejection_proxy, resispec  # noqa: F401  (register the built-ins)

__all__ = ["Chain", "MassVerifier", "Verifier", "VerifyResult", "available_verifiers", "get_verifier", "register"]
