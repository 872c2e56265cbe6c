"""The checks of a coupled certificate (:func:`exactness.certify_coupled`) as objects (issue 39, item 3), as
:mod:`exactness.node_checks`, :mod:`exactness.stepwise_checks` and the others are.

Each check is a :class:`CoupledCheck`: its ``name`` (the p-value it records in ``CoupledCertificate.checks``),
what it ``detects``, when it applies (else why it is skipped), how it runs on the shared :class:`CoupledRun`, its
design twins (the smallest TV it detects at ``n``, the ``n`` for a TV) and the planted bug it must catch
(``mutant``, a key of :data:`COUPLED_MUTANTS`; ``tests/test_coupled_checks.py`` certifies every one and asserts
that its check fails it).  ``certify_coupled`` is a short plan: the reference's own law, the coupled pass (kernel
and reference on the same candidates and coins), the :data:`COUPLED_CHECKS` in order, the classification.

Source: the coupling inequality (``TV(kernel, reference) <= P(mismatch)``, with the exact binomial bound) and the
chi-square / G-test of :func:`exactness.gof.gof_test` for the law checks after a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..power import EventTwins
from ..route_check import RouteCheck, run_table


@dataclass
class CoupledRun:
    """What the checks of one coupled certificate share (one direction of data: the route fills the pass; each check
    reads what it needs and writes only its own entries).

    a               the route's checked arguments (``exactness.coupled.certify._Args``: kernel_obj, ref, p2, q2
                    ((R, V) float64), k, rng, convention, copies, drafting, alpha, fallback, fallback_n, seed)
    run             the coupled pass (``_Pass``: done, mism, rows_seen, counts ((R V,) int64 or None), cand_law)
    node            ``(p1 (V,), q1 (V,), candidates (k,))`` of the counterexample node (shrunk where it could be),
                    or None without a mismatch
    law_pvalue      ``(kernel, ref, p1, q1, c1, convention, rng, copies) -> float | None`` and
    marginal_pvalue ``(kernel, p1, q1, cl, k, drafting, convention, rng, copies, m) -> float | None``: the law
                    checks' samplers (``exactness.coupled.certify``)
    as_verifier     ``(kernel, convention, drafting, copies) -> verifier``: the kernel as a plain verifier (fresh
                    coins from ``rng``), for the fallback's node certificate
    checks, skipped, fallback   the certificate's entries (p-values; why a check did not run; the fallback's
                    node certificate)
    """

    a: object
    run: object
    node: tuple | None
    law_pvalue: object
    marginal_pvalue: object
    as_verifier: object
    checks: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    fallback: object = None


class CoupledCheck(RouteCheck):
    """One check of a coupled certificate (module docstring; :class:`exactness.route_check.RouteCheck`)."""


class Coupled(EventTwins, CoupledCheck):
    name = "coupled"
    detects = ("a kernel whose (token, accepted index) differs from the reference's on the same candidates and "
               "coins in any draw; a kernel with TV(kernel, reference) >= detectable_tv mismatches with power 0.99 "
               "(coupling inequality); a mismatch alone is not called biased: the law checks decide")
    mutant = "bf16_ratio"

    def run(self, st):
        st.checks[self.name] = 1.0 if st.run.mism == 0 else 0.0


class Conditional(CoupledCheck):
    name = "conditional"
    detects = ("a kernel that is another rule than the reference: its (stop, token) law given the counterexample "
               "node's candidates (and the first mismatching nodes' while cheap) differs from the reference's "
               "exact law; chi-square over k + V cells, Bonferroni over the nodes")
    mutant = "another_rule"

    def skip(self, st):
        return None if st.run.mism else ""

    def run(self, st):
        a, run = st.a, st.run
        V = a.p2.shape[1]
        sp, sq, sc = st.node
        pvals = [st.law_pvalue(a.kernel_obj, a.ref, sp, sq, sc, a.convention, a.rng, a.copies)]
        if V * a.k <= (1 << 16):            # the original mismatching nodes too, while their law check is cheap
            pvals += [st.law_pvalue(a.kernel_obj, a.ref, a.p2[r], a.q2[r], cr, a.convention, a.rng, a.copies)
                      for r, cr in run.rows_seen]
        pvals = [x for x in pvals if x is not None]
        if pvals:
            st.checks[self.name] = min(1.0, min(pvals) * len(pvals))   # Bonferroni over the nodes tested
        else:
            st.skipped[self.name] = "the kernel could not be run at the counterexample node's candidates alone"


class Fallback(CoupledCheck):
    name = "fallback"
    detects = ("bias of the kernel's own law against p at node row 0 (exactness.certify_verifier of the kernel as "
               "a plain verifier: every node check it runs), when the coupled pass mismatched and fallback=True")
    mutant = "always_accept"

    def skip(self, st):
        return None if st.run.mism and st.a.fallback else ""

    def run(self, st):
        from ..verifier_cert import certify_verifier

        a = st.a
        fb_seed = a.seed if not isinstance(a.seed, np.random.Generator) else 0
        st.fallback = certify_verifier(st.as_verifier(a.kernel_obj, a.convention, a.drafting, a.copies), a.p2[0],
                                       a.q2[0], a.k, alpha=a.alpha, n=a.fallback_n, seed=fb_seed, exact=False,
                                       tree=False)
        st.checks[self.name] = float(st.fallback.pvalue)


class Law(CoupledCheck):
    name = "law"
    detects = ("bias of the kernel's emitted tokens against p (chi-square over R V cells of the coupled pass' "
               "tokens; when those are too few and the other checks found nothing, a fresh pass of "
               "exactness.limits.LAW_DRAWS at node row 0)")
    mutant = "always_accept"

    def skip(self, st):
        return None if st.run.mism else ""

    def run(self, st):
        from .. import limits
        from ..gof import gof_test

        a, run = st.a, st.run
        R, V = a.p2.shape
        level = a.alpha / 3.0
        law_p = None
        if run.counts is not None:
            per_node = np.bincount(np.arange(run.done) % R, minlength=R).astype(float)
            law = (a.p2 * (per_node / run.done)[:, None]).ravel()         # the nodes' p, weighted by their draws
            law_p = gof_test(run.counts, law).pvalue
        cond_p = st.checks.get("conditional")
        if not ((law_p is not None and law_p < level) or (cond_p is not None and cond_p < level)):
            m = min(limits.LAW_DRAWS, (1 << 25) // V)
            if m > run.done:  # too few coupled draws for the law check: a fresh marginal pass at node 0
                law_p = st.marginal_pvalue(a.kernel_obj, a.p2[0], a.q2[0], run.cand_law[0], a.k, a.drafting,
                                           a.convention, a.rng, a.copies, m)
        if law_p is None:
            st.skipped[self.name] = "the kernel could not be run on fresh candidates at node row 0"
        else:
            st.checks[self.name] = float(law_p)


#: The checks of a coupled certificate, in run order (``law`` reads ``conditional``'s p-value to decide whether it
#: needs a fresh pass).
COUPLED_CHECKS = (Coupled(), Conditional(), Fallback(), Law())


def run_checks(st: CoupledRun) -> None:
    """Run :data:`COUPLED_CHECKS` on ``st`` (each writes ``st.checks`` / ``st.skipped``)."""
    run_table(COUPLED_CHECKS, st)


def _mutants() -> dict:
    """``{name: (kernel factory, reference, k)}``: the planted bug each check must catch."""
    from resispec import get_verifier

    from .. import mutants

    return {"bf16_ratio": (lambda: mutants.CATALOGUE["bf16_ratio"], "rrs", 2),
            "another_rule": (lambda: get_verifier("kseq"), "rrs", 2),
            "always_accept": (lambda: mutants.CATALOGUE["always_accept"], "rrs", 1)}


def __getattr__(name):  # PEP 562: the mutant table on first use (its modules import resispec's rules)
    if name == "COUPLED_MUTANTS":
        return _mutants()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
