"""The reserve tolerance: the one constant every reserve solver shares.

The floor under the compiled kernel (:mod:`resispec._reserve_fused`), the
numpy verifier (:mod:`resispec.verifiers.resispec`) and the torch backend
(:mod:`resispec.verifiers.reserve`, its solvers on numpy and torch): it imports nothing of the project,
so the kernel does not import the verifier that calls it.
"""

from __future__ import annotations

#: Floor of the reserve tolerance (float64).
ROOT_TOL = 1e-13

#: Below this remaining mass (float64) a rejection is treated as impossible and the residual is kept unchanged
#: (its weight in the output law is < 1e-13): every verifier's residual step, the path-level rules, the compiled
#: without-replacement kernel and the stepwise check (:mod:`resispec._xp`; float32 uses 16 ulp of its own).
RESIDUAL_EPS = 1e-13

#: The without-replacement rule's floors, shared by its numpy reference (:mod:`resispec.verifiers.resispec_wor`,
#: :mod:`resispec.verifiers.zero_diagonal`) and its compiled kernel (:mod:`resispec._wor_fused`): a mass below
#: ``WOR_TINY`` is empty, and the rank-one leftover plan is accepted with a column-sum error up to
#: ``WOR_MARGIN_TOL`` (exactness is checked to 1e-12).
WOR_TINY = 1e-13
WOR_MARGIN_TOL = 1e-14


def reserve_tol(eps: float, gamma: float) -> float:
    """``tau = max(ROOT_TOL, 64 eps) (1 + gamma)`` (dimensionless, like ``lambda``).

    ``eps``: machine epsilon of the working dtype (``np.finfo(dt).eps`` or
    ``torch.finfo(dt).eps``).  Every reserve solver, in both backends,
    returns ``min {l : g(l) >= -tau}`` (:func:`resispec.verifiers.resispec.solve_reserve`):
    for ``gamma = 1`` ``g`` can vanish on a whole interval, where round-off
    must not move the answer away from its left end, and a well-defined point
    makes starts, solvers and backends agree.
    """
    return max(ROOT_TOL, 64.0 * float(eps)) * (1.0 + float(gamma))


#: Tie rule of the look-ahead reserve's bisection on ``t`` (``docs/verifiers.md``): every solver (the numpy
#: and torch references, the fused kernel) returns the smallest ``t`` with ``L_0 - L_1 >= 1 - LOOKAHEAD_TOL``.
#: Where ``L_0 - L_1 = 1`` holds on a whole interval of ``t`` that is its left end, whatever the round-off.
LOOKAHEAD_TOL = 1e-11

#: Tie rule of the without-replacement rule's fixed point (:mod:`resispec.verifiers.resispec_wor`, its kernel
#: :mod:`resispec._wor_fused`): the smallest ``Omega`` with ``Omega - rhs(Omega) >= -OMEGA_TOL``.  The gap can be
#: zero on a whole interval (the next candidate saturated); its round-off noise must not pick the point.
OMEGA_TOL = 1e-13
