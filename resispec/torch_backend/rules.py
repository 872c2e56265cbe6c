"""The rules written once (:mod:`resispec._xp`) registered for ``backend="torch"``: no twin code.

``sps``, ``rrs``, ``rrs_wor``, ``target_only`` (:mod:`resispec.verifiers.baselines`), ``kseq``
(:mod:`resispec.verifiers.kseq`), ``rejection_proxy`` (:mod:`resispec.verifiers.rejection_proxy`) and the
ResiSpec rules ``resispec``, ``resispec_myopic``, ``resispec_lookahead`` (:mod:`resispec.verifiers.resispec`)
run their numpy module's own lines on tensors through :class:`resispec.torch_backend.base.TorchRule`
(``resispec`` with ``drafting="without_replacement"``, a compiled host kernel, on the host in float64).
"""

from __future__ import annotations

from ..verifiers import baselines, kseq, rejection_proxy, resispec  # noqa: F401  (the numpy registry holds the rules)
from .base import on_torch

#: Rules whose one definition runs on both backends.
WRITTEN_ONCE = ("sps", "rrs", "rrs_wor", "target_only", "kseq", "rejection_proxy", "resispec", "resispec_myopic",
                "resispec_lookahead")

for _name in WRITTEN_ONCE:
    on_torch(_name)
