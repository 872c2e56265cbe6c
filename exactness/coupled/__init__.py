"""Coupled certification: drive a kernel and its reference rule with the same coins.

``certify_coupled(kernel, reference, p, q, k, *, n, alpha, seed, convention)``
-> :class:`CoupledCertificate`.  Modules: :mod:`.conventions` (coin layouts),
:mod:`.run` (both sides on shared coins), :mod:`.shrink` (minimal
counterexample), :mod:`.certify`, :mod:`.tree` (depth-2 trees, one set of coins per node, in the ``resispec`` or ``sglang`` layout).  See ``docs/coupled.md``.
"""

from .certify import CoupledCertificate, certify_coupled, tv_upper_bound
from .conventions import CONVENTIONS, Coins, SGLangKernel, decisions, draw_coins, reference_kernel
from .run import run_kernel, run_reference
from .tree import ReferenceTreeKernel, TreeCertificate, certify_coupled_tree

__all__ = ["CONVENTIONS", "Coins", "CoupledCertificate", "ReferenceTreeKernel", "TreeCertificate", "certify_coupled",
           "certify_coupled_tree", "decisions", "draw_coins",
           "SGLangKernel", "reference_kernel", "run_kernel", "run_reference", "tv_upper_bound"]
