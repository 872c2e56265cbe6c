"""The checks of a path / tree certificate (:func:`exactness.pathlevel.certify_path`, ``certify_tree_rule``) as
objects (issue 39, item 3), as :mod:`exactness.node_checks` and :mod:`exactness.decoder_checks` are.

Each check is a :class:`PathCheck`: its ``name`` (the p-value it records in ``PathCertificate.checks``), what it
``detects``, when it applies (else the reason it is skipped, in ``PathCertificate.skipped``), how it runs on the
shared :class:`PathRun`, its design twins (:class:`exactness.power.DesignTwins`: the smallest TV it detects at
``n``, the ``n`` for a TV; 0 and 1 for a deterministic check) and the planted bug it must catch (``mutant``, a key
of :data:`PATH_CHECK_MUTANTS`; ``tests/test_path_checks.py`` certifies every one and asserts that its check fails
it).  The certificate is then a short plan: the declared plan's exact analysis and the horizon sample
(``exactness.pathlevel``), the :data:`PATH_CHECKS` in order, Holm over the sampled ones, a FAIL of a deterministic
one overriding it.

Sources: the horizon law of ``docs/pathlevel.md`` (exactness of a path-level rule: its first ``L + 1`` tokens
follow the target); the LP over exact rules (``resispec.pathlevel.optimal_accepted``, attained on chains by block
verification, Sun et al. 2024, arXiv 2403.10444, Theorem 2) with Hoeffding's test on a bounded mean (1963, JASA
58, Theorem 1); the randomised PIT of each step under the declared plan (:mod:`exactness.plan_check`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .gof import gof_test
from .route_check import RouteCheck, run_table

#: Largest TV of a declared plan's horizon law from the target's that still passes ``exact_law`` (its rounding).
PLAN_TV_TOL = 1e-6


@dataclass
class PathRun:
    """What the checks of one path / tree certificate share (one direction of data: the route fills the inputs;
    each check reads what it needs and writes only its own entries).

    counts          (V^(D+1),) int64 horizon outcome counts;  target: (V^(D+1),) float64 their exact law
    n, df           steps sampled, pooled degrees of freedom;  alpha, min_expected, power: the certificate's
    accepted        (n,) int64 drafts kept per step, or None;  where: ``(pair, branching, context)`` for the LP
    exact           the declared plan's exact analysis (``AcceptanceBound.exact_path`` / ``exact_tree``): a
                    record, ``{"skipped": why}`` or ``{"error": why}``; None: not asked
    plan_sampler    the plan-vs-sampler collector's record, or None and ``plan_skip`` (why it did not run)
    m_max           the most sampled checks Holm counts (horizon, acceptance_bound, plan_sampler that can run)
    checks, skipped, gof, bound   the certificate's entries (raw p-values in table order, skip reasons, the
                    horizon test's result, the acceptance-bound record)
    """

    counts: np.ndarray
    target: np.ndarray
    n: int
    df: int
    alpha: float
    min_expected: float
    power: float
    accepted: np.ndarray | None
    where: tuple | None
    exact: dict | None
    plan_sampler: dict | None
    plan_skip: str | None
    m_max: int
    checks: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    gof: object = None
    bound: dict | None = None


class PathCheck(RouteCheck):
    """One check of a path / tree certificate (module docstring; :class:`exactness.route_check.RouteCheck`)."""


class Horizon(PathCheck):
    name = "horizon"
    detects = ("any bias of the law of the first L + 1 output tokens (in the plan or the sampler) whose pooled "
               "chi-square non-centrality n sum (h - p)^2 / p is large: horizon TV >= detectable_tv at power 0.99")
    mutant = "block_tokenwise_accept"

    def run(self, st):
        st.gof = gof_test(st.counts, st.target, min_expected=st.min_expected)
        st.checks[self.name] = float(st.gof.pvalue)


class AcceptanceBoundPath(PathCheck):
    name = "acceptance_bound"
    detects = ("a rule that keeps more drafts per step on average than any exact rule can (the LP bound at this "
               "pair and shape), whatever its histogram looks like: an excess of at least the record's "
               "detectable_excess at power 0.99 (one-sided Hoeffding test on the mean)")
    mutant = "too_generous_block"

    def skip(self, st):
        return None if st.accepted is not None and st.where is not None else ""

    def run(self, st):
        # its power and verdict line at Holm's first level; the exact form's LP optimum reused (not solved twice)
        bound, why = _bound_check(st.accepted, st.where, st.alpha / st.m_max, st.power, (st.exact or {}).get("bound"))
        if why is None:
            st.bound, st.checks[self.name] = bound, bound["pvalue"]
        else:
            st.skipped[self.name] = why


def _bound_check(accepted: np.ndarray, where: tuple, alpha: float, power: float,
                 known: float | None = None) -> tuple[dict | None, str | None]:
    """The acceptance-bound check of a chain / tree rule: ``(record, None)`` or ``(None, why it was skipped)``.

    ``where`` = ``(pair, branching, context)``; the bound is ``optimal_accepted`` (the LP over all exact rules)
    plus its solver tolerance, or ``known`` when the exact form already solved that LP (it is not solved twice).
    """
    from resispec.pathlevel.bound import optimal_accepted

    from .acceptance_bound import ACCEPTANCE_BOUND as AB
    from .acceptance_bound import lp_bound

    if accepted.size < 100:
        return None, f"needs n >= 100 steps for the test on the mean accepted length (n = {accepted.size})"
    if known is None:
        try:
            b = optimal_accepted(*where)
        except ValueError as exc:                     # the LP is too large at this size: the check cannot run
            return None, f"no bound at this size: {exc}"
        known = lp_bound(b)                                             # LP optimum + its slack
    res = AB.run_mean(accepted, known, alpha, power, top=len(where[1]))   # drafts kept: 0..L (0..D)
    return res.as_dict(), None


class PlanSampler(PathCheck):
    name = "plan_sampler"
    detects = ("a sampler that does not follow the plan the rule declares (plan / plan_tree): the randomised PIT of "
               "every sampled step's (stop row, token) under the plan, and with uniforms= the coupled draw "
               "(exactness.plan_check)")
    mutant = "plan_says_block"

    def skip(self, st):
        return None if st.plan_sampler is not None else (st.plan_skip or "")

    def run(self, st):
        st.checks[self.name] = st.plan_sampler["pvalue"]


class ExactBound(PathCheck):
    name = "exact_bound"
    deterministic = True
    detects = ("a declared plan whose exact E[accepted] exceeds the LP bound over all exact rules, or a plan that is "
               "not a law: without sampling")
    mutant = "too_generous_block"

    def skip(self, st):
        return "" if st.exact is None else st.exact.get("skipped")

    def run(self, st):   # deterministic: 0.0 when the plan accepts more than the bound or is not a law, else 1.0
        st.checks[self.name] = 0.0 if ("error" in st.exact or st.exact["exceeded"]) else 1.0


class ExactLaw(PathCheck):
    name = "exact_law"
    deterministic = True
    detects = (f"a declared plan whose horizon law differs from the target's by more than PLAN_TV_TOL = "
               f"{PLAN_TV_TOL:g} in TV, by enumeration (also where the LP is too large)")
    mutant = "block_same_position_residual"

    def skip(self, st):
        return None if st.exact is not None and "exact_tv" in st.exact else ""

    def run(self, st):
        st.checks[self.name] = 0.0 if st.exact["exact_tv"] > PLAN_TV_TOL else 1.0


#: The checks of a path / tree certificate, in run order: the sampled ones (Holm), then the deterministic ones.
PATH_CHECKS = (Horizon(), AcceptanceBoundPath(), PlanSampler(), ExactBound(), ExactLaw())
_BY_NAME = {c.name: c for c in PATH_CHECKS}


def run_checks(st: PathRun) -> tuple[float, int]:
    """Run :data:`PATH_CHECKS` on ``st``; returns ``(pvalue, sampled)``: the smallest Holm-adjusted p-value of the
    sampled checks that ran (0.0 when a deterministic one failed) and how many sampled checks ran."""
    from .certificate import holm

    run_table(PATH_CHECKS, st)
    sampled = {k: v for k, v in st.checks.items() if not _BY_NAME[k].deterministic}
    pvalue = min(holm(sampled).values())
    if any(st.checks[c.name] == 0.0 for c in PATH_CHECKS if c.deterministic and c.name in st.checks):
        pvalue = 0.0                                  # deterministic: no multiple-testing share
    return pvalue, len(sampled)


def _mutants() -> dict:
    from .acceptance_bound import too_generous_block
    from .path_mutants import PATH_MUTANTS, PLAN_MUTANTS

    return {**PATH_MUTANTS, **PLAN_MUTANTS, "too_generous_block": too_generous_block}


def __getattr__(name):  # PEP 562: the mutant table built on first use (its modules import resispec's rules)
    if name == "PATH_CHECK_MUTANTS":
        return _mutants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
