"""The checks of a stepwise certificate (:func:`exactness.certify_stepwise`) as objects (issue 39, item 3), as
:mod:`exactness.node_checks`, :mod:`exactness.path_checks` and :mod:`exactness.decoder_checks` are.

Each check is a :class:`StepwiseCheck`: its ``name`` (the p-value it records in ``StepwiseCertificate.checks``),
what it ``detects``, when it applies (else why it is skipped), how it runs on the shared :class:`StepwiseRun`, its
design twins (the smallest TV it detects at ``n`` draws, the ``n`` for a TV) and the planted bug it must catch
(``mutant``, a key of :data:`exactness.stepwise_mutants.STEPWISE_MUTANTS`; ``tests/test_stepwise_checks.py``
certifies every one and asserts that its check fails it).  ``certify_stepwise`` is then a short plan: the walk
(every visited state checked, ``verify`` run on the same coins: ``exactness.stepwise``), the
:data:`STEPWISE_CHECKS` in order, the verdict.

Source: the sequential lemma of ``docs/RESISPEC.md`` s.2 (a step emits ``p_i`` iff its balance holds) and the
coupling inequality ``TV(law of verify, p) <= P(event) + k TOL``; the law check is the chi-square / G-test of
:func:`exactness.gof.gof_test`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .power import EventTwins
from .route_check import RouteCheck, run_table


@dataclass
class StepwiseRun:
    """What the checks of one stepwise certificate share (one direction of data: the route fills the walk's
    counts; each check reads them and writes only its own entries).

    n               draws walked;  k: candidates;  V: vocabulary;  alpha, power: the certificate's
    defects         draws that visited a state whose declared step fails its check (balance, ranges, laws)
    mismatches      draws where ``verify`` and the declared chain emitted different (token, accepted index)
    mismatched      distinct candidate tuples (k ints each) of the first mismatching draws
    law_pvalue      ``law_pvalue(candidates, i) -> float | None``: p-value of ``verify``'s (stop, token) law at
                    those candidates against the declared chain's exact law (``exactness.stepwise.coupling_pvalue``,
                    seeded by ``i``); None where the walk meets an undeclared or failing state
    checks, skipped the certificate's entries (p-values in table order; why a check did not run)
    """

    n: int
    k: int
    V: int
    alpha: float
    power: float
    defects: int
    mismatches: int
    mismatched: tuple
    law_pvalue: Callable
    checks: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)


class StepwiseCheck(RouteCheck):
    """One check of a stepwise certificate (module docstring; :class:`exactness.route_check.RouteCheck`)."""


class DeclaredSteps(EventTwins, StepwiseCheck):
    """Every state a draw visits is checked exactly, so a failing one is a certain defect; the power is in how
    often a biased rule's draws meet an event: a rule with TV(law, p) >= eps + k TOL shows one (a defect or a
    mismatch) with probability >= eps per draw, so ``n`` draws see it with probability ``1 - (1 - eps)^n``."""

    name = "declared_steps"
    detects = ("a declared step that does not emit p_i at a visited state (balance error above TOL, m outside "
               "[0, q_i], a residual row that is not a law); with the walk's mismatch events, any TV(law of verify, "
               "p) above detectable_tv + k TOL at power 0.99")
    mutant = "wrong_beta"

    def run(self, st):
        st.checks[self.name] = 0.0 if st.defects else 1.0


class Coupling(StepwiseCheck):
    """After a mismatch (and no defect): is ``verify``'s (stop, token) law at the mismatching draws' candidates its
    declared steps' (another coupling of the coins, as for an exact verify that reads them in another convention)
    or not (bias against the declared, exact chain)?  Bonferroni over at most ``LAW_NODES`` candidate tuples."""

    name = "coupling"
    detects = ("a verify whose (stop, token) law given the candidates differs from its declared steps' (a "
               "different rule, or bias), at the candidate tuples of the mismatching draws: chi-square over k + V "
               "cells, TV >= detectable_tv at power 0.99 per tuple")
    mutant = "off_plan_verify"
    #: distinct candidate tuples of mismatching draws whose law is checked
    LAW_NODES = 4

    def skip(self, st):
        return None if st.mismatches and not st.defects else ""

    def run(self, st):
        pv = [st.law_pvalue(t, i) for i, t in enumerate(st.mismatched[:self.LAW_NODES])]
        pv = [x for x in pv if x is not None]
        if pv:
            st.checks[self.name] = min(1.0, min(pv) * len(pv))      # Bonferroni over the tuples checked
        else:
            st.skipped[self.name] = "the declared chain at the mismatching draws' candidates meets an undeclared state"


#: The checks of a stepwise certificate, in run order.
STEPWISE_CHECKS = (DeclaredSteps(), Coupling())
DECLARED_STEPS = STEPWISE_CHECKS[0]


def run_checks(st: StepwiseRun) -> None:
    """Run :data:`STEPWISE_CHECKS` on ``st`` (each writes ``st.checks`` / ``st.skipped``)."""
    run_table(STEPWISE_CHECKS, st)


def __getattr__(name):  # PEP 562: the mutant table on first use (its module imports resispec's rules)
    if name == "STEPWISE_CHECK_MUTANTS":
        from .stepwise_mutants import STEPWISE_MUTANTS

        return STEPWISE_MUTANTS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
