"""Coupled certification: drive a kernel and its reference rule with the same coins.

``certify_coupled(kernel, reference, p, q, k, *, n, alpha, seed, convention)``
-> :class:`CoupledCertificate`.  Modules: :mod:`.conventions` (coin layouts),
:mod:`.run` (both sides on shared coins), :mod:`.shrink` (minimal
counterexample), :mod:`.certify`.  See ``docs/coupled.md``.
"""

from .certify import CoupledCertificate, certify_coupled, tv_upper_bound
from .conventions import CONVENTIONS, Coins, SGLangKernel, decisions, draw_coins, reference_kernel
from .run import run_kernel, run_reference

__all__ = ["CONVENTIONS", "Coins", "CoupledCertificate", "certify_coupled", "decisions", "draw_coins",
           "SGLangKernel", "reference_kernel", "run_kernel", "run_reference", "tv_upper_bound"]
