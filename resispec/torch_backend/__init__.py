"""Batched torch backend: every verifier on tensors, on any device.

``resispec.get_verifier(name, backend="torch", **options)`` runs a registered
rule on tensors: every rule is written once against the array namespace
(:mod:`resispec._xp`), so these are the numpy module's own lines (same names and
options, plus ``dtype=``/``device=`` for numpy inputs).  ``resispec`` with
``drafting="without_replacement"`` runs the numpy rule's compiled step kernel on the host.  Verification is batched
over the ``B`` nodes and the ``V`` tokens; the only Python loop runs over the
``k`` candidates.

Decisions and the tie rule
--------------------------
``verify(p, q, candidates, rng=None, *, uniforms=None)``: column ``i`` of the
(B, k + 1) float64 uniforms decides candidate ``i`` (accept when
``u < m_i(x_i) / q_i(x_i)``, compared in float64), column ``k`` draws the
residual token by inverse CDF in token-id order (float64 cumulative sum,
sequential on CPU, exactly as :func:`resispec.sampling.inverse_cdf`).  Same
uniforms, same decisions as the numpy backend, except at *near-ties*: the two
backends compute ``m_i`` and the residual with sums in different orders (on
CPU ResiSpec's reserve comes from the same compiled kernel as in numpy; on a
GPU, or with ``solver="newton"``, from tensor ops), so a threshold may differ by
round-off (float64: below 1e-12 on the cases we test); a uniform closer than
that to an acceptance threshold or to a CDF boundary may then resolve
differently.  The parity tests assert identical decisions on every row that
is not such a near-tie.  Both backends are exact either way.

Randomness comes from a ``torch.Generator`` on the laws' device.
Verification is not differentiable: tensors that require grad are detached
on entry.  A custom proxy must not modify its inputs in place (a ValueError
says so when it does).

Modules: :mod:`._validation` (input rules: devices, dtypes and half-precision
up-casting, contiguity, shapes), :mod:`.sampling` (inverse CDF,
``draw_candidates``), :mod:`.base` (``TorchVerifier``, ``decide``, ``TorchRule``: a rule written once
against the array namespace, :mod:`resispec._xp`, run on tensors), :mod:`.rules` (the list of rules
registered for torch: every one, no twin; the reserve solvers are :mod:`resispec.verifiers.reserve` and
:mod:`resispec.verifiers.lookahead`), :mod:`.numpy_facade` (``NumpyFacade``: a numpy-facing view
for harnesses such as ``exactness.certify_verifier``).  Throughput:
``resispec bench verify`` (:mod:`resispec.bench.throughput`) and
``benchmarks/device_verify.sh`` on a GPU.
"""

from __future__ import annotations

import torch  # noqa: F401  (ImportError here tells the registry torch is missing)

from . import rules  # noqa: F401  (register the torch verifiers)
from .numpy_facade import NumpyFacade
from .base import TorchChain, TorchMassVerifier, TorchRule, TorchVerifier, TorchVerifyResult, decide, law_from_chain
from .sampling import draw_candidates, inverse_cdf

__all__ = ["NumpyFacade", "TorchChain", "TorchMassVerifier", "TorchRule", "TorchVerifier", "TorchVerifyResult", "decide",
           "draw_candidates", "inverse_cdf", "law_from_chain"]
