"""Planted bugs of a verifier that declares its steps (``step_plan``): what the checks of
:func:`exactness.certify_stepwise` (:data:`exactness.stepwise_checks.STEPWISE_CHECKS`) must catch.

``STEPWISE_MUTANTS``: name -> class (instantiate with no arguments).  Each is ResiSpec for without-replacement
drafts (``resispec.verifiers.resispec_wor.ResiSpecWOR``; ResiSpec, arXiv 2608.24411) or ``rrs`` declaring its
steps, with ONE thing changed:

- ``wrong_beta``: declares the shaped rows with beta 30 % too large (rows still laws, the balance
  ``m + sum_x w(x) r^(x) = p_i`` breaks): a defect, ``declared_steps``;
- ``low_m``: declares an accepted mass 10 % below what it uses: a defect, ``declared_steps``;
- ``off_plan_verify``: declares ResiSpec's steps, verifies with ``rrs_wor`` (exact, but not the declared steps:
  its (stop, token) law given the candidates differs): mismatches, and the ``coupling`` law check sees it;
- ``own_coins``: ignores the uniforms it is given (a fixed generator): mismatches, ``coupling``;
- ``bf16_verify``: declares ``rrs``'s steps, verifies with the bf16-rounded ratio (TV ~1e-4: a bias below what
  the law check at a few candidate tuples detects; never a pass).
"""

from __future__ import annotations

import numpy as np

from resispec import get_verifier
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.resispec_wor import ResiSpecWOR
from resispec.verifiers.step_plan import StepPlan


class PlainRRS(RecursiveRejection):
    """``rrs`` (iid drafts; SpecInfer, arXiv 2305.09781) declaring its steps: ``m = min(p_i, q)``, plain residual.
    Exact (not a mutant): the base of ``bf16_verify``."""

    def step_plan(self, p_i, q_i, *, last):
        return StepPlan.plain_step(np.minimum(p_i, q_i))            # m = min(p_i, q_i), residual norm((p_i - q_i)_+)


class WrongBeta(ResiSpecWOR):
    """Declares the shaped rows with beta 30 % too large: rows still laws, the balance breaks."""

    def step_plan(self, p_i, q_i, *, last):
        pl = super().step_plan(p_i, q_i, last=last)
        if pl is None or pl.plain.all():
            return pl
        return StepPlan(**{**pl.__dict__, "beta": pl.beta * 1.3})


class LowM(ResiSpecWOR):
    """Declares an accepted mass 10 % below what it uses."""

    def step_plan(self, p_i, q_i, *, last):
        pl = super().step_plan(p_i, q_i, last=last)
        return pl if pl is None else StepPlan(**{**pl.__dict__, "m": pl.m * 0.9})


class OffPlanVerify(ResiSpecWOR):
    """Declares ResiSpec's steps, verifies with ``rrs_wor``: exact, but not the declared steps."""

    def verify(self, p, q, candidates, *, uniforms=None, rng=None):
        return get_verifier("rrs_wor").verify(p, q, candidates, uniforms=uniforms, rng=rng)


class OwnCoins(ResiSpecWOR):
    """Ignores the uniforms it is given."""

    def verify(self, p, q, candidates, *, uniforms=None, rng=None):
        return super().verify(p, q, candidates, rng=np.random.default_rng(123))


class BiasedVerify(PlainRRS):
    """Declares ``rrs``'s steps; verify uses the bf16-rounded ratio (a precision bug)."""

    def verify(self, p, q, candidates, *, uniforms=None, rng=None):
        from .mutants import CATALOGUE

        return CATALOGUE["bf16_ratio"].verify(p, q, candidates, uniforms=uniforms, rng=rng)


STEPWISE_MUTANTS = {"wrong_beta": WrongBeta, "low_m": LowM, "off_plan_verify": OffPlanVerify, "own_coins": OwnCoins,
                    "bf16_verify": BiasedVerify}
