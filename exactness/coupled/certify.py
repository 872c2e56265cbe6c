"""``certify_coupled``: same candidates, same coins, count the draws where kernel and reference differ.

Coupling inequality: run kernel K and reference R on the same inputs and
the same coins; for every event A, ``|P(K in A) - P(R in A)| <= P(K != R)``,
so ``TV(law K, law R) <= P(mismatch)``.  With ``x`` mismatches in ``n``
independent coupled draws, the exact one-sided Clopper-Pearson bound
``beta.ppf(1 - alpha, x + 1, n - x)`` (``1 - alpha**(1/n)`` at x = 0)
bounds ``P(mismatch)`` -- hence the TV -- at confidence ``1 - alpha``.
A registry reference is exact by proof (``docs/RESISPEC.md``) and by the
exact tests, so a pass bounds the kernel's distance from the target law; a
user's reference is trusted only when its own law is checked in the same run
(:func:`check_reference`: enumerated when its candidate tuples fit, else
certified by Monte Carlo); with ``reference_check="none"`` it is not checked
and zero mismatches are INCONCLUSIVE (they bound TV(kernel, reference) only).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import stats

from resispec._validation import check_k

from .. import limits
from ..limits import DEFAULT_TIME_LIMIT
from .._checks import BudgetError, SubjectError, as_generator, check_alpha, check_n, passes_through
from ..certificate import door_node, subject_cause
from .._timeout import TimeLimitExceeded, hard_limit, own_limit
from .._timeout import time_limit as _time_limit
from ..gof import gof_test
from ..result import MORE, fit_line
from ..sampling import (GUARD, _ELEMS, _builtin, as_numpy_verifier, candidate_law, draw_node_candidates,
                        drafting_of, has_chain)
from .conventions import COIN_NAMES, check_convention, draw_coins
from .run import (WRITES_INPUTS, TableReference, check_time_limit, hung_call, joint_law, run_kernel,
                  run_reference, takes_coins)
from .checks import CoupledRun, run_checks
from .shrink import shrink, to_source

#: First chunk of coupled draws (chunks double up to the memory cap), so an early mismatch is found early.
FIRST_CHUNK = 256
#: Most rows per kernel call when the kernel takes one shared node as broadcast views (``handles_shared_nodes``).
SHARED_ROWS = 1 << 16


def check_min_draws(n: int, alpha: float) -> None:
    """Refuse ``n`` coupled draws too few for 0 mismatches to bound TV by 0.5 (a pass that says nothing).

    Raises
    ------
    ValueError
        ``n < log2(1 / alpha)``, naming the smallest ``n``.
    """
    n_min = min_draws(alpha)
    if n < n_min:
        raise ValueError(f"n = {n} draws bound TV only by {1 - alpha ** (1 / n):.3f} even with no mismatch; at "
                         f"alpha = {alpha:g} pass n >= {n_min} (n = ln(1/alpha) / tv draws bound TV by tv)")


def tv_upper_bound(mismatches: int, n: int, alpha: float) -> float:
    """Exact one-sided Clopper-Pearson upper bound on the mismatch probability at confidence ``1 - alpha``.

    ``mismatches`` x in [0, n]; returns ``beta.ppf(1 - alpha, x + 1, n - x)``
    (1.0 when x = n).  Same as ``scipy.stats.binomtest(x, n,
    alternative="less").proportion_ci(1 - alpha).high``.
    """
    n = check_n(n)
    alpha = check_alpha(alpha)
    if isinstance(mismatches, bool) or not isinstance(mismatches, (int, np.integer)) or not 0 <= mismatches <= n:
        raise ValueError(f"mismatches must be an integer in [0, n = {n}], got {mismatches!r}")
    if mismatches >= n:
        return 1.0
    return float(stats.beta.isf(alpha, mismatches + 1, n - mismatches))   # ppf(1 - alpha): 1 - alpha may round to 1


@dataclass(frozen=True)
class CoupledCertificate:
    """Verdict of :func:`certify_coupled` (scipy-style result object).

    Attributes
    ----------
    passed : bool
        No bias detected: zero mismatches in ``n`` coupled draws (the kernel deterministic under fixed coins)
        against a trusted reference (``reference_law`` not ``"unchecked"``); or, on a mismatch classified
        ``"not the same coupling"``, the ``fallback`` certificate (``certify_verifier`` of the kernel) passed.
    inconclusive : bool
        Neither a pass nor a failure (exit 3 in the CLI; ``passed`` is False): ``"not the same coupling"``
        without a ``fallback`` certificate, zero mismatches against a user's reference whose own law was
        not checked (``reference_check="none"``), or zero mismatches in a pass that ``time_limit`` stopped
        before ``n`` draws.
    mismatches, n : int
        Draws where (token, accepted index) differ; coupled draws run.
    tv_upper : float
        ``1 - alpha`` exact binomial upper bound on P(mismatch) >= TV(kernel, reference).
    alpha : float
    seconds : float
        Wall time of the coupled pass (shrinking and law checks excluded).
    first_mismatch : dict or None
        ``draw`` (index), ``node`` (row of p, q), ``candidates``, ``coins``, ``kernel`` and
        ``reference`` (token, accepted) of the first mismatching draw.
    convention : str
    classification : str
        ``"conforms"``; ``"biased"`` (its token law differs from ``p``, or ``certify_verifier``
        fails it); ``"reference biased"`` (a user's reference whose own law is not ``p``);
        ``"subject error"`` (the kernel raised, hung or broke its output contract: ``cause``);
        ``"unclassified"`` (the time limit cut the law checks short); ``"a different rule"`` (its (stop,
        token) law given the candidates differs from
        the reference's, no bias against ``p`` found); ``"not the same coupling"`` (no law differs:
        INCONCLUSIVE, or decided by the ``fallback`` certificate); ``"stopped early"`` (no mismatch, but
        ``time_limit`` stopped the pass before ``n`` draws: INCONCLUSIVE); or ``"kernel ignores the coins"``.
    verdict : str
        One paragraph for people (``str(cert)``, :meth:`report`); :meth:`summary` is one line.
    counterexample : str or None
        Python source reproducing the (shrunk) mismatch against both sides.
    law_pvalue, conditional_pvalue : float or None
        Law checks run on a mismatch: the kernel's coupled tokens against
        ``p`` (chi-square), and its (stop, token) law given the shrunk
        counterexample's candidates against the reference's exact law.
    fallback : exactness.Certificate or None
        ``certify_verifier`` of the kernel (``fallback=True``).
    reference, path : str
        Reference name; ``"table"`` (O(k log V) per draw) or ``"generic"`` reference path.
    seconds_to_first : float or None
        Seconds from the start to the first mismatching batch.
    reference_law : str
        How far the reference's own law is trusted (:func:`check_reference`): ``"registry"`` (a registry
        rule, exact by proof), ``"exact"`` (a user's reference whose law was enumerated in this run),
        ``"no bias detected"`` (certified by Monte Carlo in this run), ``"unchecked"``
        (``reference_check="none"``: zero mismatches bound TV(kernel, reference) only and are INCONCLUSIVE)
        or ``"biased"`` (the certificate fails).
    reference_detail : dict or None
        How it was checked (``method``, ``why``, ``node``, ``tv``, ``certificates``).
    notes : tuple of str
        The convention chosen from the kernel's signature; a stop by ``time_limit``.
    cause : str or None
        Why a run stopped early: the subject's misbehaviour (``classification`` ``"subject error"``).
    """

    passed: bool
    mismatches: int
    n: int
    tv_upper: float
    alpha: float
    seconds: float
    first_mismatch: dict | None
    convention: str
    classification: str
    verdict: str
    counterexample: str | None = None
    law_pvalue: float | None = None
    conditional_pvalue: float | None = None
    fallback: object | None = None
    reference: str = ""
    path: str = "generic"
    seconds_to_first: float | None = None
    reference_law: str = "registry"
    reference_detail: dict | None = None
    notes: tuple = ()
    cause: str | None = None
    inconclusive: bool = False

    #: Most columns of :meth:`summary` (as ``exactness.Certificate.SUMMARY_WIDTH``).
    SUMMARY_WIDTH = 120

    @property
    def outcome(self) -> str:
        """``"PASS"`` (no bias detected), ``"FAIL"`` or ``"INCONCLUSIVE"`` (the CLI's exit 0, 1, 3)."""
        return "PASS" if self.passed else "INCONCLUSIVE" if self.inconclusive else "FAIL"

    @property
    def checks(self) -> dict:
        """Raw p-values of the checks that ran: ``coupled`` (1.0 with zero mismatches, 0.0 with any: a deterministic
        comparison with the reference), ``law`` / ``conditional`` (:attr:`law_pvalue`, :attr:`conditional_pvalue`)
        and ``fallback`` (the ``certify_verifier`` certificate's p-value) where they ran; ``subject`` 0.0 when the
        kernel misbehaved (:attr:`cause`)."""
        out = {"coupled": 1.0 if self.mismatches == 0 else 0.0}
        for name, v in (("law", self.law_pvalue), ("conditional", self.conditional_pvalue),
                        ("fallback", None if self.fallback is None else self.fallback.pvalue)):
            if v is not None:
                out[name] = float(v)
        if self.cause is not None:
            out["subject"] = 0.0                       # the kernel misbehaved (raised, hung, broke its contract)
        return out

    @property
    def pvalue(self) -> float:
        """The p-value the verdict rests on: 1.0 for zero mismatches; the ``fallback``'s where it decided a pass;
        else the smallest law check's (``law``, ``conditional``, ``fallback``) when it is below ``alpha`` or the
        run is INCONCLUSIVE; 0.0 for a FAIL resting on a deterministic finding (the kernel ignores its coins,
        raised, or the reference is biased)."""
        c = self.checks
        if self.passed:
            return c["fallback"] if self.mismatches and "fallback" in c else 1.0
        law = [v for k, v in c.items() if k not in ("coupled", "subject")]
        if self.inconclusive:
            return min(law, default=1.0)
        return min(law) if law and min(law) < self.alpha else 0.0

    @property
    def tv_estimate(self) -> None:
        """None: coupled draws bound TV(kernel, reference) by P(mismatch) (:attr:`tv_upper`); they do not estimate
        a TV."""
        return None

    @property
    def detectable_tv(self) -> float:
        """Smallest TV(kernel, reference) seen as a mismatch with probability 0.99 in :attr:`n` coupled draws
        (``exactness.result.detectable_mismatch_rate``; TV <= P(mismatch))."""
        from ..result import detectable_mismatch_rate

        return detectable_mismatch_rate(self.n)

    def summary(self) -> str:
        """The verdict in one line of at most :attr:`SUMMARY_WIDTH` (120) columns (as ``Certificate.summary``).

        A pass reads ``NO BIAS DETECTED (...): TV(kernel, <reference>) <= u at confidence c``; a pass decided by
        the ``fallback`` certificate ``NO BIAS DETECTED (by certify_verifier, detectable TV x); not the same
        coupling as the reference``; a failure ``FAIL: <classification>: <numbers or cause>``; neither
        ``INCONCLUSIVE: <why>``.  A line cut to fit ends ``(more: .report())``; everything is in
        :meth:`report` (``str(cert)``).
        """
        draws = f"{self.mismatches:,} mismatches in {self.n:,} coupled draws"
        fb = self.fallback
        extra = ""                                     # dropped first when the line does not fit
        if self.passed and self.mismatches and fb is not None:
            line = (f"NO BIAS DETECTED (by certify_verifier, detectable TV {fb.detectable_tv:.3g}); not the same "
                    "coupling as the reference")
            extra = f": {draws}"
        elif self.passed:
            trust = {"registry": "registry", "exact": "enumerated",
                     "no bias detected": "MC-checked"}.get(self.reference_law, "")
            line = f"NO BIAS DETECTED ({draws}; {trust} reference): TV <= {self.tv_upper:.3g} at confidence " \
                   f"{1 - self.alpha:g}"
        elif self.inconclusive and self.classification == "not the same coupling":
            line, extra = "INCONCLUSIVE: not the same coupling, no law differs (certify with --fallback)", f": {draws}"
        elif self.inconclusive and self.classification == "stopped early":
            line = f"INCONCLUSIVE (stopped by time_limit before the n asked): TV(kernel, reference) <= {self.tv_upper:.3g}"
            extra = f"; {draws}"
        elif self.inconclusive:
            line = (f"INCONCLUSIVE: reference not checked (reference_check='none'): TV(kernel, reference) <= "
                    f"{self.tv_upper:.3g}")
            extra = f"; {draws}"
        elif self.classification == "subject error":
            line = f"FAIL: subject: {self.cause}"
        elif self.classification == "reference biased":
            d = self.reference_detail or {}
            where = f" (TV {d['tv']:.3g})" if "tv" in d else ""
            line, extra = f"FAIL: reference biased: the reference's own law is not p{where}", f"; {draws}"
        else:
            laws = ", ".join(f"{name} {x:.3g}" for name, x in (("tokens vs p", self.law_pvalue),
                                                               ("(stop, token) vs reference", self.conditional_pvalue))
                             if x is not None)
            line, extra = f"FAIL: {self.classification}: {draws}", (f"; law p-values: {laws}" if laws else "")
        width, tail = self.SUMMARY_WIDTH, MORE
        if len(line + extra) <= width:
            return line + extra
        if len(line) + len(tail) <= width:
            return line + tail
        return fit_line(line, width)

    def report(self) -> str:
        """Everything for people: the verdict paragraph, the ``fallback`` certificate's summary and the
        counterexample's Python (when there is one)."""
        out = self.verdict
        if self.fallback is not None:
            out += "\n\nfallback (certify_verifier of the kernel): " + self.fallback.summary()
        if self.counterexample:
            out += "\n\ncounterexample (python):\n" + self.counterexample
        return out

    def __str__(self) -> str:
        return self.verdict


def _spec_of(obj, given) -> str:
    if isinstance(given, str):
        return given
    from .. import mutants

    for name, m in mutants.CATALOGUE.items():
        if m is obj:
            return f"exactness.mutants:CATALOGUE.{name}"
    name = getattr(obj, "name", None)
    if _builtin(obj) and isinstance(name, str) and not getattr(obj, "options", dict)():
        return name
    return "KERNEL_MODULE:OBJECT  # how to import your kernel"


def _load(obj, what: str):
    if isinstance(obj, str):
        from ..certify_run import load_verifier

        flag = f"--{what}"                            # the flag that named it (--verifier, --reference)
        try:
            return load_verifier(obj, flag)[1]
        except ValueError as exc:
            if str(exc).startswith(flag):
                raise
            raise ValueError(f"{flag}: {exc}") from exc   # a registry's refusal ("unknown verifier ...")
    return as_numpy_verifier(obj)


#: How a user's reference law is checked (``reference_check=``).
REFERENCE_CHECKS = ("auto", "montecarlo", "none")
#: Largest (candidate tuples x V) summed over the nodes that ``reference_check`` enumerates.
_REF_ELEMS = 1 << 26
#: Modules whose callables a registry rule may hold and still count as the project's own rule.
_OWN = ("resispec", "numpy", "scipy", "numba", "torch", "builtins", "math", "functools")


def registry_rule(ref) -> bool:
    """True when ``ref`` is one of resispec's own rules, exact by its proof: a built-in verifier holding no
    user callable (a ``rejection_proxy`` or ``resispec`` built with a user's proxy is NOT: its law depends on
    code this project does not prove)."""
    if not _builtin(ref):
        return False
    for v in getattr(ref, "__dict__", {}).values():
        if callable(v) and not isinstance(v, type):
            mod = getattr(v, "__module__", None) or getattr(type(v), "__module__", "") or ""
            if not mod.split(".")[0] in _OWN:
                return False
    return True


class _ChainAsVerifier:
    """The reference's chain as a verifier (``verify`` decides with ``resispec`` coins through
    :func:`run_reference`): what :func:`exactness.certify_verifier` certifies when the reference is too large
    to enumerate, the same law the coupling compares the kernel with."""

    def __init__(self, ref):
        self.ref = ref
        self.drafting = drafting_of(ref)
        self.name = f"reference {getattr(ref, 'name', type(ref).__name__)} (its chain)"
        if hasattr(ref, "draft_law"):
            self.draft_law = ref.draft_law

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        from resispec.verifiers.base import VerifyResult

        from .conventions import Coins

        c = np.asarray(candidates, dtype=np.int64)
        B, k = c.shape
        u = rng.random((B, k + 1)) if uniforms is None else np.asarray(uniforms, dtype=np.float64)
        t, a = run_reference(self.ref, np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), c,
                             Coins("resispec", B, k, {"uniforms": u}))
        return VerifyResult(tokens=t, accepted=a)


def check_reference(ref, p2, q2, k: int, how: str, *, alpha: float, seed) -> tuple[str, dict]:
    """How far the reference's own law is trusted: ``(status, detail)``.

    ``status``: ``"registry"`` (resispec's own rule, exact by proof; not checked); ``"exact"`` (its
    (stop, token) law enumerated over every candidate tuple at every node, through its ``chain``, and
    TV(law, p) below :func:`exactness.exact.exact_tol`); ``"biased"`` (that TV is above it at some node, or
    the Monte Carlo certificate failed); ``"no bias detected"`` (``how="auto"`` or ``"montecarlo"``, the
    same: too many tuples to enumerate and :func:`exactness.certify_verifier` of its chain, at its default
    budget, passed at every node); ``"unchecked"`` (``how="none"``).  ``detail``: ``method``, ``why``,
    ``node``, ``tv`` (exact TV), ``detectable_tv``, ``certificates`` as they apply.

    Raises
    ------
    exactness.SubjectError
        The reference's ``chain`` raised or returned an invalid law (NaN, probabilities outside [0, 1]).
    """
    from ..exact import ChainError, enumerable, exact_tol, joint_law

    if registry_rule(ref):
        return "registry", {"method": "proof"}
    if how == "none":
        return "unchecked", {"method": "none", "why": "reference_check='none'"}
    R, V = p2.shape
    name = f"reference {type(ref).__name__}"
    budget = _REF_ELEMS // max(V, 1) // R
    if budget >= 1 and all(enumerable(ref, q2[r], k, limit=min(budget, 300_000)) for r in range(R)):
        worst = 0.0
        for r in range(R):
            try:
                J = joint_law(ref, p2[r], q2[r], k)
            except ChainError as exc:
                raise SubjectError(f"{name}.chain: {exc}") from exc
            except BaseException as exc:      # a user's chain that fails is the subject failing
                if passes_through(exc):             # Ctrl-C, the harness's time limit
                    raise
                raise SubjectError(subject_cause(f"{name}.chain", exc)) from exc
            tv = 0.5 * float(np.abs(J.sum(axis=0) - p2[r]).sum())
            worst = max(worst, tv)
            if not tv < exact_tol(p2[r], q2[r]):
                return "biased", {"method": "exact enumeration", "node": r, "tv": tv}
        return "exact", {"method": "exact enumeration", "tv": worst}
    why = (f"its candidate tuples at V = {V:,}, k = {k} are too many to enumerate"
           + (f" over {R} nodes" if R > 1 else ""))
    if how in ("auto", "montecarlo"):
        from .._checks import sub_seed
        from ..verifier_cert import certify_verifier

        certs = []
        base = seed if not isinstance(seed, np.random.Generator) else 0
        for r in range(R):
            cert = certify_verifier(_ChainAsVerifier(ref), p2[r], q2[r], k, alpha=alpha / R,
                                    seed=sub_seed(base, 7919, r), exact=False, tree=False)
            certs.append(cert)
            if not cert.passed:
                return "biased", {"method": "Monte Carlo (certify_verifier)", "node": r, "why": why,
                                  "certificates": certs}
        return "no bias detected", {"method": "Monte Carlo (certify_verifier)", "why": why, "certificates": certs,
                                    "detectable_tv": max(c.detectable_tv for c in certs)}
    raise ValueError(f"reference_check must be one of {list(REFERENCE_CHECKS)}, got {how!r}")


def _choose_convention(kernel_obj, convention) -> tuple[str, str | None]:
    """``(convention, note)``: ``None`` picks the kernel's own layout from its ``verify`` signature."""
    name = type(kernel_obj).__name__
    if convention is None:
        for conv in ("resispec", "sglang"):
            if takes_coins(kernel_obj, conv) is not False:
                return conv, None
        return "generator", (f"{name}.verify takes no coin arrays (uniforms= or uniform_samples=), so it runs under "
                             "the 'generator' convention: it gets a seeded numpy Generator as rng and the reference "
                             "draws U = default_rng(seed).random((B, k + 1)) from the same seed")
    convention = check_convention(convention)
    if takes_coins(kernel_obj, convention) is False:
        raise ValueError(f"convention={convention!r} passes the coins as {', '.join(COIN_NAMES[convention])}=, "
                         f"which {name}.verify does not take: pass convention='generator' (a kernel called as "
                         "verify(p, q, candidates, rng) with a seeded numpy Generator), or leave convention out "
                         "to pick it from the kernel's signature")
    return convention, None


def min_draws(alpha: float) -> int:
    """Fewest coupled draws whose zero mismatches bound TV by 0.5 at confidence ``1 - alpha``: ``ceil(log2(1 /
    alpha))`` (fewer bound it by more: a pass that says nothing)."""
    return math.ceil(math.log(alpha) / math.log(0.5))     # 1 - alpha^(1/n) <= 0.5  <=>  n >= log2(1/alpha)


def draws_for_tv(tv, alpha: float) -> int:
    """Coupled draws (an int >= :func:`min_draws`) whose zero mismatches bound TV(kernel, reference) by ``tv`` at
    confidence ``1 - alpha``: ``ceil(ln(1 / alpha) / tv)``, since ``1 - alpha ** (1 / n) <= ln(1 / alpha) / n`` is
    above the exact one-sided binomial (Clopper-Pearson, Biometrika 1934) bound of :func:`tv_upper_bound`.

    ``tv``: float in (0, 1), a total variation; ``alpha``: float in (0, 1), already checked by the caller.

    Raises
    ------
    ValueError
        ``tv`` not a number in (0, 1).
    exactness._checks.BudgetError (a ValueError)
        A plan over ``exactness.limits.MAX_COUNTED`` draws (also a ``tv`` so small that the plan is infinite).
    """
    import numbers

    if isinstance(tv, bool) or not isinstance(tv, numbers.Real) or not 0 < tv < 1:
        raise ValueError(f"tv must be a number in (0, 1), the TV bound a pass must establish; got {tv!r}")
    n = -math.log(alpha) / float(tv)                      # n = ln(1/alpha) / tv
    if not n <= limits.MAX_COUNTED:                       # also inf (a tv near the smallest float)
        raise BudgetError(f"tv = {tv:g} at alpha = {alpha:g} needs {n:.3g} coupled draws, over "
                          f"exactness.limits.MAX_COUNTED = {limits.MAX_COUNTED:,}; ask a larger tv")
    return max(math.ceil(n), min_draws(alpha))


#: Coupled draws when neither ``n`` nor ``tv`` is given.
DEFAULT_N = 100_000


def certify_coupled(kernel, reference, p, q, k: int, *, n: int | None = None, alpha: float = 1e-3, seed=0,
                    convention: str | None = None, fallback: bool = False, stop_after: int | None = None,
                    counterexample: bool = True, kernel_spec: str | None = None,
                    time_limit: float | None = DEFAULT_TIME_LIMIT, fallback_n: int | None = None,
                    copies: bool = False, reference_check: str = "auto", tv: float | None = None
                    ) -> CoupledCertificate:
    """Certify that ``kernel`` implements the rule ``reference`` draw by draw under shared coins.

    Candidates are drawn once per draw (per the reference's ``drafting``)
    and the coins once per draw (per ``convention``); both sides see the
    same ones.  Zero mismatches is a pass with ``tv_upper`` (exact binomial
    bound, see :func:`tv_upper_bound`); a mismatch names the first
    mismatching draw, with a shrunk counterexample and a law check that
    tells a biased kernel (FAIL) from one that is exact but coupled
    differently ("not the same coupling": INCONCLUSIVE, ``passed`` False and
    ``inconclusive`` True; with ``fallback=True`` the ``certify_verifier``
    certificate of the kernel decides instead: its pass is a pass, its
    failure a FAIL).

    What a pass says about the target law ``p`` depends on the reference
    (``cert.reference_law``): a registry rule (resispec's own) is exact by
    its proof, and a user's reference is trusted only when its own law is
    checked in the same run (``reference_check``); otherwise the pass bounds
    TV(kernel, reference) only, so zero mismatches are INCONCLUSIVE.  A
    user's reference whose law is found biased fails the certificate
    (``classification`` ``"reference biased"``), whatever the kernel does.

    Parameters
    ----------
    kernel : object with ``verify(p, q, candidates, rng, **coins)``, or a ``module:object`` / registry spec
        Called on batches: ``p, q`` (B, V) float64, ``candidates`` (B, k) int64,
        coins as the convention says (:mod:`exactness.coupled.conventions`);
        returns ``.tokens`` and ``.accepted`` (B,) int64.  Torch verifiers are wrapped in ``NumpyFacade``.
    reference : str or resispec.Verifier
        The rule the kernel claims (registry name, ``name[opt=v]``, ``module:object``, or a verifier with ``chain``).
    p, q : array_like, shape (V,) or (R, V), float64 (float32 / float16 laws are renormalised in float64)
        One node, or R distinct nodes: draw t uses node ``t % R`` (row-mixing bugs show at their row).
        Checked and normalised at the door as every certify function does
        (:func:`exactness.certificate.door_node`).
    k : int >= 1
    n : int, optional
        Coupled draws (chunked: memory O(chunk * V) for the kernel's batch, O(R V) counts); default
        :data:`DEFAULT_N` (100,000), or planned from ``tv``.
    tv : float in (0, 1), optional
        The TV bound a pass must establish: plans ``n = ceil(ln(1 / alpha) / tv)`` (:func:`draws_for_tv`; not
        with ``n``).
    alpha : float in (0, 1)
        1 - confidence of ``tv_upper``; level of the law checks.
    seed : int, SeedSequence or Generator
    convention : {"resispec", "sglang", "generator"} or None
        How the kernel takes its coins.  None (default): from the signature of the kernel's ``verify`` --
        ``resispec`` when it takes ``uniforms=``, ``sglang`` when it takes ``uniform_samples=`` and
        ``uniform_samples_for_final_sampling=``, else ``generator`` (a plain ``verify(p, q, candidates,
        rng)``; the verdict says so).  A convention whose coin keywords the kernel does not take is a
        ValueError naming ``convention='generator'``.
    fallback : bool
        On a mismatch also run ``exactness.certify_verifier`` on the kernel (node 0) and report it; on a
        mismatch classified "not the same coupling" its verdict is the certificate's (its pass: ``passed``,
        "no bias detected (by certify_verifier ...)"; its failure: FAIL).
    fallback_n : int, optional
        Draws for that ``certify_verifier`` run (default: its own budget).
    stop_after : int, optional
        Stop once this many mismatches are seen (``n`` then counts the draws run).
    counterexample : bool
        Shrink the first mismatch and print it as Python (``cert.counterexample``).
    time_limit : float or None, default 3600
        Seconds: the coupled pass stops between batches after this long (``n`` then counts the draws run;
        the bound uses them and the verdict says so; with no mismatch the verdict is INCONCLUSIVE, the bound asked
        for not reached).  A kernel (or reference) call that never returns is
        stopped :func:`exactness._timeout.hard_limit` seconds after the start (``time_limit + max(10 s,
        time_limit)``) and the certificate FAILs naming the hang (``classification`` ``"subject error"``).
        None: no limit.  Enforced with ``SIGALRM`` in the main thread (POSIX); elsewhere only the stop
        between batches applies.
    kernel_spec : str, optional
        How the counterexample imports the kernel (default: found for
        registry rules and mutants, else a placeholder).
    copies : bool, default False
        False: the kernel gets read-only views and nothing is copied per
        row -- with one node, ``p, q`` are that node broadcast to the
        batch, shape (B, V) with row stride 0 (``np.broadcast_to``); a kernel
        that writes into its inputs misbehaves (a FAIL whose cause names this option).
        True: writable (B, V) copies (for kernels that normalise in place).
        Batch size: up to 65,536 rows of views when the kernel sets
        ``handles_shared_nodes = True`` (the built-in verifiers do: their
        ``verify`` does the O(k V) work once per call on such views) and
        the reference has an accept table; else ``2**21 // V`` rows.
    reference_check : {"auto", "montecarlo", "none"}
        For a reference that is not a registry rule: ``"auto"`` enumerates its exact law (through its
        ``chain``) at every node when the candidate tuples fit (:func:`check_reference`), else certifies it
        in the same run with :func:`exactness.certify_verifier` (its default budget per node, level
        ``alpha / R``); ``"montecarlo"`` is the same (kept for existing calls); ``"none"`` never checks it,
        and then zero mismatches bound TV(kernel, reference) only: INCONCLUSIVE, ``passed`` False.

    Returns
    -------
    CoupledCertificate
        ``passed`` False with ``classification`` ``"subject error"`` and the cause in ``cause`` and
        ``verdict`` when the kernel (or a user's reference) misbehaves: raises or calls ``sys.exit``, hangs,
        writes into its read-only inputs (``copies=False``), returns the wrong type, dtype or shape, a result
        whose ``.tokens`` / ``.accepted`` raise, ids outside ``[0, V)``, or an ``accepted`` that does not name
        the emitted candidate.  ``cert.outcome`` is ``"PASS"``, ``"FAIL"`` or ``"INCONCLUSIVE"``.

    Raises
    ------
    TypeError, ValueError
        The caller's arguments: bad laws, k, n, alpha, seed, time_limit, reference_check or convention
        (including one whose coin keywords the kernel does not take); a reference without ``chain``;
        drafting of kernel and reference that disagree.
    """
    t_start = time.perf_counter()
    kernel_obj, ref = _load(kernel, "kernel"), _load(reference, "reference")
    convention, note = _choose_convention(kernel_obj, convention)
    if not has_chain(ref):
        raise TypeError(f"reference must be a registry name or a resispec.Verifier with chain(p, q, candidates); "
                        f"got {type(ref).__name__}")
    if not isinstance(reference_check, str) or reference_check not in REFERENCE_CHECKS:
        raise ValueError(f"reference_check must be one of {list(REFERENCE_CHECKS)}, got {reference_check!r}")
    ref_name = reference if isinstance(reference, str) else getattr(ref, "name", type(ref).__name__)
    p2, q2, _ = door_node(p, q)         # float32 / float16 laws renormalised in float64, as every certify function
    p2, q2 = np.ascontiguousarray(p2), np.ascontiguousarray(q2)
    R, V = p2.shape
    alpha = check_alpha(alpha)
    if tv is not None and n is not None:
        raise ValueError("give n or tv, not both (tv plans the coupled draws: n = ceil(ln(1 / alpha) / tv))")
    n = draws_for_tv(tv, alpha) if tv is not None else DEFAULT_N if n is None else n
    k, n = check_k(k), check_n(n)
    if n > limits.MAX_COUNTED:                  # refused before any draw, as certify_verifier refuses it
        raise BudgetError(f"n = {n:,} coupled draws exceeds exactness.limits.MAX_COUNTED = {limits.MAX_COUNTED:,}; "
                          "ask fewer (a TV bound of tv needs about ln(1 / alpha) / tv)")
    check_min_draws(n, alpha)
    if stop_after is not None:
        stop_after = check_n(stop_after, name="stop_after")
    check_time_limit(time_limit)
    rng = as_generator(seed)
    drafting = drafting_of(ref)
    kd = getattr(kernel_obj, "drafting", drafting)
    if kd != drafting and "any" not in (kd, drafting):
        raise ValueError(f"kernel drafting {kd!r} differs from the reference's {drafting!r}: the same candidates "
                         "cannot be valid for both; pick a reference with the kernel's drafting")
    if drafting == "without_replacement" and np.any((q2 > 0).sum(axis=1) < k):
        raise ValueError(f"k = {k} exceeds the draft support of some node (without-replacement drafting)")
    if not isinstance(copies, bool):
        raise TypeError(f"copies must be True or False, got {copies!r}")
    head = f"kernel vs {ref_name!r} under the {convention!r} coin convention"
    state = {"phase": "reference", "done": 0, "mism": 0, "first": None}
    hard = None if time_limit is None else own_limit(hard_limit(time_limit))
    try:
        with _time_limit(hard):
            return _certify(_Args(kernel_obj, ref, kernel, reference, ref_name, p2, q2, k, n, alpha, seed, rng,
                                  convention, note, fallback, stop_after, counterexample, kernel_spec, time_limit,
                                  fallback_n, copies, reference_check, drafting, head), state, t_start)
    except SubjectError as exc:
        return _failed(state, exc.cause, head, alpha, convention, ref_name, t_start)
    except TimeLimitExceeded as exc:
        if hard is None:
            raise                                  # the caller's own (outer) limit
        who = hung_call(exc, {"run_kernel": f"kernel {type(kernel_obj).__name__}.verify",
                              "run_reference": f"reference {type(ref).__name__}.chain",
                              "check_reference": f"reference {type(ref).__name__} (its law check)"})
        if state["phase"] == "analysis" and who is None:
            cause = None
        else:
            cause = (f"{who or 'the run'} did not return: certify_coupled stopped it at its hard time limit of "
                     f"{hard:g} s (time_limit = {time_limit:g} s plus a grace of {hard - time_limit:g} s)")
        return _failed(state, cause, head, alpha, convention, ref_name, t_start, hard=hard)


def _failed(state, cause, head, alpha, convention, ref_name, t_start, *, hard=None) -> CoupledCertificate:
    """The failed certificate of a run stopped by a misbehaving subject (``cause``), or -- ``cause`` None --
    one whose mismatch analysis the hard time limit cut short."""
    done, mism, first = state["done"], state["mism"], state["first"]
    tv = tv_upper_bound(mism, done, alpha) if done else 1.0
    seconds = time.perf_counter() - t_start
    if cause is None:
        verdict = (f"FAIL: {head}: {mism:,} mismatches in {done:,} coupled draws; the law checks that tell a "
                   f"biased kernel from another coupling were stopped by the hard time limit ({hard:g} s), so "
                   "the mismatch is not classified")
        return CoupledCertificate(False, mism, done, tv, alpha, seconds, first, convention, "unclassified", verdict,
                                  reference=ref_name, cause="time limit during the law checks")
    verdict = f"FAIL (subject error): {head}: {cause}"
    return CoupledCertificate(False, mism, done, tv, alpha, seconds, first, convention, "subject error", verdict,
                              reference=ref_name, cause=cause)


@dataclass(frozen=True)
class _Args:
    """:func:`certify_coupled`'s arguments, checked at its door."""

    kernel_obj: object
    ref: object
    kernel: object
    reference: object
    ref_name: str
    p2: np.ndarray            # (R, V) float64, the nodes
    q2: np.ndarray            # (R, V) float64
    k: int
    n: int
    alpha: float
    seed: object
    rng: np.random.Generator
    convention: str
    note: str | None
    fallback: bool
    stop_after: int | None
    counterexample: bool
    kernel_spec: str | None
    time_limit: float | None
    fallback_n: int | None
    copies: bool
    reference_check: str
    drafting: str
    head: str


@dataclass
class _Pass:
    """What the coupled pass saw: draws run, mismatches, the first one, and how it ended."""

    done: int = 0
    mism: int = 0
    first: dict | None = None
    t_first: float | None = None
    ignores: bool = False              # the first batch gave other outputs the second time: not a function of the coins
    stopped: bool = False              # time_limit stopped it before n draws
    rows_seen: list = None             # (node, candidates) of the first mismatches, for their law checks
    counts: np.ndarray | None = None   # (R * V,) kernel tokens per node, when that fits
    path: str = "generic"              # "table": the reference answered from its accept table
    cand_law: np.ndarray | None = None


def _certify(a: _Args, state: dict, t_start: float) -> CoupledCertificate:
    """The body of :func:`certify_coupled` on checked arguments (run under its hard time limit): the reference's
    own law, the coupled pass, then the verdict (a clean pass, or the mismatch's law checks)."""
    ref_law, ref_detail = check_reference(a.ref, a.p2, a.q2, a.k, a.reference_check, alpha=a.alpha, seed=a.seed)
    state["phase"] = "pass"
    run = _coupled_pass(a, state, t_start)
    state["phase"] = "analysis"
    done, mism, first = run.done, run.mism, run.first
    seconds = time.perf_counter() - t_start
    tv = tv_upper_bound(mism, done, a.alpha)
    notes = ([a.note] if a.note else []) + ([f"time_limit = {a.time_limit:g} s stopped the coupled pass after "
                                             f"{done:,} of {a.n:,} draws; the bound uses the draws run"]
                                            if run.stopped else [])
    tail = "".join(f" Note: {x}." for x in notes)
    kw = dict(reference=a.ref_name, path=run.path, reference_law=ref_law, reference_detail=ref_detail,
              notes=tuple(notes))
    head, ref_name, convention = a.head, a.ref_name, a.convention
    if run.ignores:
        return CoupledCertificate(False, mism, done, tv, a.alpha, seconds, first, convention, "kernel ignores the coins",
                                  f"FAIL: {head}: the kernel returned different outputs for the same inputs and "
                                  "coins (it ignores the coins it is given, or draws its own randomness); coupled "
                                  "certification needs a kernel that is a function of its coins" + tail, None, **kw)
    pair = (f"{mism:,} mismatches in {done:,} coupled draws, so TV(kernel, {ref_name}) <= {tv:.3g} at confidence "
            f"{1 - a.alpha:g} (coupling inequality, exact binomial bound)")
    if ref_law == "biased":
        d = ref_detail
        how = (f"its exact law differs from p by TV {d['tv']:.3g} at node row {d['node']} (enumerated through its "
               "chain in this run)" if d["method"] == "exact enumeration" else
               f"certify_verifier of its chain FAILED at node row {d['node']} ({d['certificates'][-1].summary()})")
        verdict = (f"FAIL (reference biased): {head}: the reference {ref_name!r} is not a registry rule and {how}; "
                   f"a kernel coupled to it is certified against a biased law, so nothing holds for p. Kernel vs "
                   f"reference: {pair}." + tail)
        return CoupledCertificate(False, mism, done, tv, a.alpha, seconds, first, convention, "reference biased",
                                  verdict, **kw)
    if mism == 0:
        claim = _reference_claim(ref_name, ref_law, ref_detail)
        if ref_law == "unchecked":          # reference_check="none": nothing is known of the reference's own law
            verdict = f"INCONCLUSIVE (the reference was not checked): {head}: {pair}. " + claim + tail
            return CoupledCertificate(False, 0, done, tv, a.alpha, seconds, None, convention, "conforms", verdict,
                                      inconclusive=True, **kw)
        if run.stopped:                     # the budget asked for was not reached: no pass on a weaker bound
            verdict = (f"INCONCLUSIVE (stopped by time_limit before n = {a.n:,} draws): {head}: {pair}; raise "
                       "time_limit (CLI: --time-limit) or lower n for the bound asked for. " + claim + tail)
            return CoupledCertificate(False, 0, done, tv, a.alpha, seconds, None, convention, "stopped early",
                                      verdict, inconclusive=True, **kw)
        verdict = f"NO BIAS DETECTED: {head}: {pair}. " + claim + tail
        return CoupledCertificate(True, 0, done, tv, a.alpha, seconds, None, convention, "conforms", verdict, **kw)
    return _mismatch(a, run, ref_law, ref_detail, tv, seconds, tail, kw)


def _coupled_pass(a: _Args, state: dict, t_start: float) -> _Pass:
    """Draw candidates and coins in doubling batches, run the kernel and the reference on the same ones and
    count mismatches (``state`` follows the counts, for a run stopped by its hard time limit)."""
    kernel_obj, ref, p2, q2, k, n, rng, convention = a.kernel_obj, a.ref, a.p2, a.q2, a.k, a.n, a.rng, a.convention
    R, V = p2.shape
    run = _Pass(rows_seen=[], cand_law=candidate_law(ref, q2))
    table = TableReference.build(ref, p2, q2, k)
    shared = R == 1 and not a.copies and table is not None and getattr(kernel_obj, "handles_shared_nodes", False) is True
    cap = SHARED_ROWS if shared else max(1, min(SHARED_ROWS, _ELEMS // V))
    p_k, q_k = p2.copy(), q2.copy()          # what the kernel sees (views of these): checked unchanged after each call
    run.counts = np.zeros(R * V, dtype=np.int64) if R * V <= (1 << 25) else None
    size = min(FIRST_CHUNK, cap)
    run.path = "table" if table is not None else "generic"
    while run.done < n:
        done = run.done
        B = min(size, n - done)
        node = (done + np.arange(B)) % R
        uc = rng.random((B, k))
        c = np.empty((B, k), dtype=np.int64)
        for r in range(R):
            sel = node == r
            if np.any(sel):
                c[sel] = draw_node_candidates(run.cand_law[r], k, a.drafting, uc[sel])
        coins = draw_coins(convention, rng, B, k)
        P = np.broadcast_to(p_k[0], (B, V)) if R == 1 else p_k[node]
        Q = np.broadcast_to(q_k[0], (B, V)) if R == 1 else q_k[node]
        for rep in range(2 if done == 0 else 1):      # the first batch twice: a kernel must be a function of its coins
            out = run_kernel(kernel_obj, P, Q, c, coins, copies=a.copies)
            if not (np.array_equal(p_k, p2) and np.array_equal(q_k, q2)):
                raise SubjectError(WRITES_INPUTS.format(name=type(kernel_obj).__name__,
                                                        exc="p or q changed during the call"))
            if rep == 0:
                kt, ka = out
            else:
                run.ignores = not (np.array_equal(kt, out[0]) and np.array_equal(ka, out[1]))
        P, Q = (np.broadcast_to(p2[0], (B, V)), np.broadcast_to(q2[0], (B, V))) if R == 1 else (p2[node], q2[node])
        if table is not None:
            rt, ra = table(node, c, coins)
            if done == 0:
                g = min(B, GUARD)
                gt, ga = run_reference(ref, P[:g], Q[:g], c[:g], coins.rows(np.arange(g))) \
                    if convention != "generator" else run_reference(ref, P, Q, c, coins)
                if not (np.array_equal(gt[:g], rt[:g]) and np.array_equal(ga[:g], ra[:g])):
                    raise RuntimeError("accept-table path disagrees with the reference's chain; report this bug")
        else:
            rt, ra = run_reference(ref, P, Q, c, coins)
        bad = np.flatnonzero((kt != rt) | (ka != ra))
        if run.counts is not None:
            run.counts += np.bincount(node * V + kt, minlength=R * V)
        for b in bad[:max(0, 3 - len(run.rows_seen))]:
            run.rows_seen.append((int(node[b]), c[b].copy()))
        if bad.size and run.first is None:
            b = int(bad[0])
            run.t_first = time.perf_counter() - t_start
            run.first = {"draw": done + b, "node": int(node[b]), "candidates": c[b].copy(),
                         "coins": coins.rows([b]) if convention != "generator" else coins, "row_in_batch": b,
                         "kernel": (int(kt[b]), int(ka[b])), "reference": (int(rt[b]), int(ra[b]))}
        run.mism += int(bad.size)
        run.done += B
        state.update(done=run.done, mism=run.mism, first=run.first)
        size = min(cap, size * 2)
        if run.ignores or (a.stop_after is not None and run.mism >= a.stop_after):
            break
        if a.time_limit is not None and time.perf_counter() - t_start > a.time_limit and run.done < n:
            run.stopped = True
            break
    return run


def _mismatch(a: _Args, run: _Pass, ref_law, ref_detail, tv, seconds, tail, kw) -> CoupledCertificate:
    """A mismatch: the kernel's token law against p, its (stop, token) law against the reference's at the
    shrunk counterexample node, and ``fallback``'s certify_verifier decide biased / another rule / another
    coupling."""
    kernel_obj, ref, p2, q2, convention = a.kernel_obj, a.ref, a.p2, a.q2, a.convention
    alpha, head, ref_name = a.alpha, a.head, a.ref_name
    R = p2.shape[0]
    done, mism, first = run.done, run.mism, run.first
    # ---- a mismatch: counterexample, then the law checks (exactness.coupled.checks.COUPLED_CHECKS)
    spec_k = a.kernel_spec or _spec_of(kernel_obj, a.kernel)
    spec_r = a.reference if isinstance(a.reference, str) else _spec_of(ref, None)
    cex = None
    fm = first
    shrunk = shrink(kernel_obj, ref, p2[fm["node"]], q2[fm["node"]], fm["candidates"], fm["coins"])
    if shrunk is not None and a.counterexample:   # the shrunk node is also tested in law below
        cex = to_source(spec_k, spec_r, *shrunk)
    node = (shrunk[0], shrunk[1], shrunk[2]) if shrunk is not None else \
        (p2[fm["node"]], q2[fm["node"]], fm["candidates"])
    st = CoupledRun(a, run, node, law_pvalue=_conditional_pvalue, marginal_pvalue=_marginal_pvalue,
                    as_verifier=_Adapter)
    run_checks(st)
    law_p, cond_p, fb = st.checks.get("law"), st.checks.get("conditional"), st.fallback
    level = alpha / 3.0
    # "biased" needs evidence against the TARGET law p (the token law, or certify_verifier); a (stop, token)
    # law that differs from the reference's only shows the kernel is another rule, which may be exact
    biased = (law_p is not None and law_p < level) or (fb is not None and not fb.passed)
    other_rule = not biased and cond_p is not None and cond_p < level
    where = (f"first at draw {fm['draw']:,} (node row {fm['node']}, candidates {fm['candidates'].tolist()}): kernel "
             f"emitted token {fm['kernel'][0]} (accepted {fm['kernel'][1]}), reference token {fm['reference'][0]} "
             f"(accepted {fm['reference'][1]})")
    laws = (f"law checks: kernel tokens vs p p = {_fmt(law_p)}, (stop, token) law at the counterexample node "
            f"p = {_fmt(cond_p)}" + (f", certify_verifier {'passed' if fb.passed else 'FAILED'}" if fb else ""))
    passed = inconclusive = False
    at0 = " at node row 0" if R > 1 else ""
    if biased:
        cls = "biased"
        verdict = (f"FAIL (biased): {head}: {mism:,} mismatches in {done:,} coupled draws, {where}; the kernel's "
                   f"token law differs from the target's ({laws}).")
    elif other_rule:
        cls = "a different rule"
        own = (f"certify_verifier of the kernel{at0} detected no bias in its own law (detectable TV "
               f"{fb.detectable_tv:.3g}): it may be another exact rule" if fb is not None else
               "it may be another exact rule, or biased below what these checks detect -- certify its own law "
               "with exactness.certify_verifier (fallback=True)")
        verdict = (f"FAIL (not rule {ref_name!r}): {head}: {mism:,} mismatches in {done:,} coupled draws, {where}; "
                   f"its (stop, token) law given the candidates differs from {ref_name!r}'s, so the kernel does not "
                   f"implement {ref_name!r} ({laws}). No bias against the target law p was found at this budget: "
                   f"{own}.")
    elif fb is not None:                      # not the same coupling, and certify_verifier of the kernel passed
        cls, passed = "not the same coupling", True
        verdict = (f"NO BIAS DETECTED (by certify_verifier, detectable TV {fb.detectable_tv:.3g}); not the same "
                   f"coupling as the reference: {head}: {mism:,} mismatches in {done:,} coupled draws, {where}; the "
                   f"law checks find no bias ({laws}) and certify_verifier of the kernel{at0} detected none "
                   f"({fb.summary()}). The kernel is certified on its own law, not as {ref_name!r} draw by draw: it "
                   "uses the coins in another way.")
    else:
        cls, inconclusive = "not the same coupling", True
        verdict = (f"INCONCLUSIVE (not the same coupling: fall back to certify_verifier): {head}: {mism:,} "
                   f"mismatches in {done:,} coupled draws, {where}; but the law checks find no bias ({laws}), so "
                   "the kernel may be exact under another coupling of the coins, or biased below what these checks "
                   "detect -- it is not called biased, and nothing is certified: certify its law with "
                   "fallback=True (CLI: --fallback) or exactness.certify_verifier, or use the kernel's own "
                   "convention.")
    if ref_law == "unchecked" and not passed:
        verdict += (f" The reference {ref_name!r} is not a registry rule and its own law was not checked "
                    f"({ref_detail['why']}).")
    return CoupledCertificate(passed, mism, done, tv, alpha, seconds, first, convention, cls, verdict + tail, cex,
                              law_p, cond_p, fb, seconds_to_first=run.t_first, inconclusive=inconclusive, **kw)




def _reference_claim(ref_name, ref_law: str, d: dict) -> str:
    """What a pass says about p, by how far the reference is trusted (:func:`check_reference`)."""
    if ref_law == "registry":
        return ("The reference rule is a registry rule, exact by its proof and its exact-enumeration tests (not by "
                "this run), so the kernel's law is within that TV of p.")
    if ref_law == "exact":
        return (f"The reference {ref_name!r} is not a registry rule; its exact law was enumerated in this run (TV "
                f"from p {d['tv']:.2g}, round-off), so the kernel's law is within that TV of p.")
    if ref_law == "no bias detected":
        return (f"The reference {ref_name!r} is not a registry rule and {d['why']}; certify_verifier of its chain "
                f"detected no bias (detectable TV {d['detectable_tv']:.3g}): the kernel's law is within that TV of "
                "the reference's, whose own distance from p is bounded only by that Monte Carlo certificate.")
    return (f"This bounds TV(kernel, reference) only: the reference {ref_name!r} is not a registry rule and its "
            f"own law was not checked ({d['why']}), so nothing is claimed about the kernel's distance from p "
            "(reference_check='auto', the default, checks the reference in the same run: enumerated when its "
            "candidate tuples fit, else by Monte Carlo).")


def _fmt(x):
    return "n/a" if x is None else f"{x:.3g}"


def _conditional_pvalue(kernel, ref, p1, q1, c1, convention, rng, copies, m: int | None = None):
    """P-value of the kernel's (stop, token) law given one node's candidates vs the reference's exact law."""
    V, k = p1.size, c1.size
    m = max(1000, min(limits.LAW_DRAWS if m is None else m, (1 << 24) // max(V, 1)))
    law = joint_law(ref, p1, q1, c1)
    counts = np.zeros(k + V)
    step = max(1, _ELEMS // V)
    try:
        for s in range(0, m, step):
            B = min(step, m - s)
            coins = draw_coins(convention, rng, B, k)
            t, a = run_kernel(kernel, np.broadcast_to(p1, (B, V)), np.broadcast_to(q1, (B, V)),
                              np.broadcast_to(c1, (B, k)), coins, copies=copies)
            cell = np.where(a >= 0, a, k + t)
            counts += np.bincount(cell, minlength=k + V)
    except (TypeError, ValueError, SubjectError):
        return None
    return gof_test(counts, law).pvalue


def _marginal_pvalue(kernel, p1, q1, cl, k, drafting, convention, rng, copies, m):
    """P-value of the kernel's token law at one node (fresh candidates and coins) against ``p``."""
    V = p1.size
    counts = np.zeros(V)
    step = max(1, _ELEMS // V)
    try:
        for s in range(0, m, step):
            B = min(step, m - s)
            c = draw_node_candidates(cl, k, drafting, rng.random((B, k)))
            t, _ = run_kernel(kernel, np.broadcast_to(p1, (B, V)), np.broadcast_to(q1, (B, V)), c,
                              draw_coins(convention, rng, B, k), copies=copies)
            counts += np.bincount(t, minlength=V)
    except (TypeError, ValueError, SubjectError):
        return None
    return gof_test(counts, p1).pvalue


class _Adapter:
    """A kernel under a coin convention seen as a plain verifier ``verify(p, q, c, rng)`` (fresh coins from rng)."""

    def __init__(self, kernel, convention, drafting, copies):
        self.kernel, self.convention, self.drafting, self.copies = kernel, convention, drafting, copies

    def verify(self, p, q, candidates, rng=None):
        from resispec.verifiers.base import VerifyResult

        c = np.asarray(candidates, dtype=np.int64)
        coins = draw_coins(self.convention, rng, c.shape[0], c.shape[1])
        t, a = run_kernel(self.kernel, np.asarray(p), np.asarray(q), c, coins, copies=self.copies)
        return VerifyResult(tokens=t, accepted=a)
