"""The ``Certificate`` result object and black-box certification of a sampler."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ._checks import as_generator, check_alpha, check_law, check_n, check_tokens, warn_power, check_tv
from .gof import MIN_EXPECTED, gof_test, tv_bounds
from .power import detectable_tv as _detectable_tv
from .power import samples_for_tv

#: Largest number of draws requested from a sampler in one call.
CHUNK = 1 << 20
#: Above this many draws a timed pilot (``PILOT`` draws, own seed) estimates the run time first.
PILOT_ABOVE = 1 << 24
#: Draws in the timed pilot.
PILOT = 2_000
#: Longest estimated run (seconds) the harness starts: 1 hour (raise it here for longer planned runs).
MAX_SECONDS = 3600.0


def _hours(sec: float) -> str:
    return f"{sec / 3600:.3g} hours" if sec >= 3600 else f"{sec:.3g} s"


def pilot_seconds(draw, n: int) -> float:
    """Estimated seconds for ``n`` draws from a timed pilot ``draw(rng, PILOT)`` on a private seed."""
    t0 = time.perf_counter()
    draw(np.random.default_rng(20260101), PILOT)
    return (time.perf_counter() - t0) * n / PILOT


def check_min_expected(min_expected) -> float:
    """Validate the pooling threshold: a finite real number > 0."""
    if isinstance(min_expected, bool) or not isinstance(min_expected, (int, float, np.integer, np.floating)):
        raise TypeError(f"min_expected must be a positive float (Cochran's rule: 5), got {min_expected!r}")
    if not math.isfinite(min_expected) or min_expected <= 0:
        raise ValueError(f"min_expected must be a finite number > 0 (Cochran's rule: 5), got {min_expected!r}")
    return float(min_expected)


def no_df_message(law: np.ndarray, n: int, min_expected: float, what: str = "the marginal test") -> str:
    """Why a pooled chi-square has no degrees of freedom, and the ``n`` that gives it one."""
    pmax = float(law.max())
    need = math.ceil(min_expected / min(pmax, 1.0 - pmax)) if pmax < 1 else None
    return (f"{what} has no degrees of freedom: n = {n:,} samples with min_expected = {min_expected:g} pool all "
            f"{int(np.count_nonzero(law > 0))} tokens of the law into one cell, so it cannot fail; "
            + (f"use n >= {need:,} or a smaller min_expected" if need else "lower min_expected"))


@dataclass(frozen=True)
class Certificate:
    """Verdict of a statistical certification (scipy-style result object).

    Attributes
    ----------
    passed : bool
        No check rejected exactness at level ``alpha`` (after Holm correction
        over the checks, when there are several).
    statistic : float
        Pearson chi-square statistic of the marginal token test.
    pvalue : float
        Smallest Holm-adjusted p-value over the checks (the marginal test's
        p-value when it is the only check).
    tv_estimate : float
        Plug-in TV between the empirical and the target law.
    tv_upper : float
        ``1 - alpha`` upper confidence bound on that TV (``exactness.gof.tv_bounds``):
        the equivalence statement "TV <= tv_upper at confidence 1 - alpha"
        (:meth:`equivalence`; ``details["equivalence"]``).
    detectable_tv : float
        Smallest TV bias the marginal test detects with probability
        ``power`` at level ``alpha`` with these ``n`` samples.
    n : int
        Samples used by the marginal test.
    alpha, power : float
    df : int
        Degrees of freedom of the marginal test after pooling.
    g_statistic, g_pvalue : float
        G-test on the same cells.
    checks : dict
        Name -> raw p-value of every check that was run (1.0 / 0.0 for
        deterministic checks such as seeded determinism).
    details : dict
        Extra numbers per check: ``details[name]`` holds that check's
        ``statistic``, ``df``, ``tv`` (plug-in TV of its sampled law) and
        ``pvalue`` where it has them; ``details["exact"]`` the exact TV,
        acceptance and alpha*; ``details["chain_consistency"]`` the TV
        between what ``verify`` sampled and the verifier's own chain.
    skipped : dict
        Name -> reason of every check that was not run (or could not
        fail, e.g. df 0 after pooling).  A skipped check is never counted
        as a pass.
    notes : tuple of str
        Warnings that change how to read the numbers (e.g. "the exact TV
        describes ``_chain``, not ``verify``").
    main : str
        Name of the main test whose numbers ``statistic`` .. ``g_pvalue`` are
        (``"marginal"``; ``certify_decoder``: ``"joint"`` or ``"pit[1,id]"``);
        :meth:`summary` labels them with it.

    A law with a single token in its support has df 0 by nature; then the
    marginal check is the impossible-token check (any sample off the
    support fails with p = 0), and it still runs.
    """

    passed: bool
    statistic: float
    pvalue: float
    tv_estimate: float
    tv_upper: float
    detectable_tv: float
    n: int
    alpha: float = 1e-3
    power: float = 0.99
    df: int = 0
    g_statistic: float = 0.0
    g_pvalue: float = 1.0
    checks: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    notes: tuple = ()
    main: str = "marginal"

    def failed_checks(self, adjusted: bool = True) -> dict:
        """Checks whose (Holm-adjusted) p-value is below ``alpha``."""
        pv = holm(self.checks) if adjusted else dict(self.checks)
        return {k: v for k, v in pv.items() if v < self.alpha}

    def describe(self, name: str) -> str:
        """One check's own numbers: its TV, statistic, df and Holm-adjusted p-value (or its failure reason)."""
        d = dict(self.details.get("exact" if name == "exact_law" else name, {}) or {})
        if name == "marginal":
            d.update(statistic=self.statistic, df=self.df, tv=self.tv_estimate)
        parts = []
        if d.get("error"):
            parts.append(str(d["error"]))
        for key, label in (("tv", "exact TV" if name == "exact_law" else "TV"), ("exact_tv", "exact TV"),
                           ("tv_mc", "sampled TV")):
            v = d.get(key)
            if v is not None:
                parts.append(f"{label} {_fmt_num(v)}")
        if name == "exact_law" and d.get("acceptance") is not None and d.get("alpha_star") is not None:
            parts.append(f"acceptance {d['acceptance']:.6g} vs alpha* {d['alpha_star']:.6g}")
        if d.get("statistic") is not None:
            parts.append(f"chi2 = {_fmt_num(d['statistic'], '.4g')} (df {d.get('df', '?')})")
        if d.get("reason") and not d.get("error"):
            parts.append(str(d["reason"]))
        if name in self.checks:
            parts.append(f"p = {holm(self.checks)[name]:.3g}")
        return f"{name}: " + ", ".join(parts)

    def equivalence(self) -> str | None:
        """Positive evidence of exactness: ``"TV <= x at confidence 1 - alpha = c"`` (``None`` when withheld).

        ``x`` is ``tv_upper``, the one-sided ``1 - alpha`` upper confidence bound on the TV between the
        sampled law and the target (Bretagnolle-Huber-Carol, ``exactness.gof.tv_bounds``), valid for a
        fixed number of draws; it is withheld after an early sequential stop (``details["equivalence"]``).
        """
        eq = self.details.get("equivalence")
        return None if eq is None else eq.get("statement")

    def summary(self) -> str:
        """One line: the verdict, the failing checks with THEIR numbers, the main test (labelled by ``main``), skips and notes."""
        marg = (f"{self.main} chi2 = {self.statistic:.4g} (df {self.df}), TV ~ {self.tv_estimate:.3g} "
                f"(<= {self.tv_upper:.3g}), detectable TV {self.detectable_tv:.3g} at alpha {self.alpha:g}, "
                f"power {self.power:g}, n = {self.n:,}")
        if self.passed:
            out = f"PASS: p = {self.pvalue:.3g}; {marg}"
        else:
            bad = self.failed_checks()
            why = "; ".join(self.describe(k) for k in bad) or "no check ran"
            out = f"FAIL [{why}]; {marg}"
        eq = self.equivalence()
        if eq:
            out += f"; equivalence: {eq}"
        seq = self.details.get("sequential")
        if isinstance(seq, dict) and seq.get("statement"):
            out += f"; sequential: {seq['statement']}"
        if self.skipped:
            out += "; skipped: " + "; ".join(f"{k} ({v})" for k, v in self.skipped.items())
        for note in self.notes:
            out += f"; note: {note}"
        return out


def subject_failure(cause: str, *, alpha: float = 1e-3, power: float = 0.99, main: str = "subject",
                    details: dict | None = None, notes=()) -> Certificate:
    """A FAIL certificate for a subject that misbehaved (:class:`exactness._checks.SubjectError`).

    ``passed`` False, ``pvalue`` 0, the single check ``"subject"`` at p = 0 with ``details["subject"]["error"]
    = cause``; no samples were tested, so ``n`` is 0 and every TV field is NaN (nothing is claimed about the
    law).  The summary reads ``FAIL [subject: <cause>]``.
    """
    nan = float("nan")
    return Certificate(passed=False, statistic=nan, pvalue=0.0, tv_estimate=nan, tv_upper=nan, detectable_tv=nan,
                       n=0, alpha=alpha, power=power, df=0, g_statistic=nan, g_pvalue=0.0, checks={"subject": 0.0},
                       details={"subject": {"error": str(cause)}, **(details or {})}, notes=tuple(notes), main=main)


def _fmt_num(x, spec=".3g") -> str:
    x = float(x)
    return format(x, spec) if math.isfinite(x) else str(x)


def holm(pvalues: dict) -> dict:
    """Holm-adjusted p-values (``statsmodels.stats.multitest.multipletests``)."""
    if not pvalues:
        return {}
    from statsmodels.stats.multitest import multipletests

    names = list(pvalues)
    raw = np.clip(np.array([pvalues[k] for k in names], dtype=np.float64), 0.0, 1.0)
    adj = multipletests(raw, alpha=0.05, method="holm")[1]
    return dict(zip(names, adj.tolist()))


def _count_chunk(V: int, m: int, seed: int, sample) -> np.ndarray:
    t = check_tokens(sample(np.random.default_rng(seed), m), V, m)
    return np.bincount(t, minlength=V)


def count_samples(sample, V: int, n: int, rng: np.random.Generator, *, chunk: int = CHUNK,
                  workers: int = 1) -> np.ndarray:
    """Call ``sample(rng_i, m)`` on chunks of at most ``chunk`` draws and return token counts (V,) int64.

    Chunk ``i`` gets its own generator seeded from ``rng``, so the counts are
    the same for any number of ``workers`` (processes, forked on POSIX by
    ``exactness.executors.ProcessExecutor``; ``workers > 1`` falls back to one
    process where fork is unavailable).
    """
    from functools import partial

    from .executors import ProcessExecutor

    sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
    seeds = rng.integers(0, 2**63 - 1, size=len(sizes)).tolist()
    fn = partial(_count_job, V, sample)
    counts = np.zeros(V, dtype=np.int64)
    for c in ProcessExecutor(workers).map_chunks(fn, list(zip(sizes, seeds))):
        counts += c
    return counts


def _count_job(V: int, sample, job) -> np.ndarray:
    return _count_chunk(V, *job, sample)


def certificate_from_counts(counts, law, *, alpha: float, power: float, tv: float | None = None,
                            checks: dict | None = None, details: dict | None = None,
                            min_expected: float = MIN_EXPECTED, skipped: dict | None = None,
                            notes=()) -> Certificate:
    """Build a :class:`Certificate` from marginal counts plus extra check p-values.

    Raises
    ------
    ValueError
        The marginal test has no degrees of freedom although the law has two
        or more tokens (too few samples or too large ``min_expected``): a
        test that cannot fail is an error, not a pass.
    """
    counts = np.asarray(counts)
    n = int(counts.sum())
    min_expected = check_min_expected(min_expected)
    res = gof_test(counts, law, min_expected=min_expected)
    if res.df == 0 and res.impossible == 0 and np.count_nonzero(np.asarray(law) > 0) > 1:
        raise ValueError(no_df_message(np.asarray(law, dtype=np.float64), n, min_expected))
    tv_hat, tv_up = tv_bounds(counts, law, alpha)
    det = _detectable_tv(n, max(1, res.df), alpha=alpha, power=power)
    tv = check_tv(tv)
    needed = samples_for_tv(tv, max(1, res.df), alpha=alpha, power=power) if tv else None
    warn_power(det, tv, n, needed, alpha, power)
    allchecks = {"marginal": res.pvalue, **(checks or {})}
    adj = holm(allchecks)
    pmin = min(adj.values())
    marginal = {"cells": res.cells, "impossible": res.impossible, "statistic": res.statistic, "df": res.df,
                "tv": tv_hat, "pvalue": res.pvalue}
    equivalence = {"tv_upper": tv_up, "confidence": 1.0 - alpha,
                   "statement": f"TV <= {tv_up:.3g} at confidence 1 - alpha = {1 - alpha:g}",
                   "method": "Bretagnolle-Huber-Carol bound on the plug-in TV (exactness.gof.tv_bounds)"}
    return Certificate(passed=bool(pmin >= alpha), statistic=res.statistic, pvalue=float(pmin),
                       tv_estimate=tv_hat, tv_upper=tv_up, detectable_tv=det, n=n, alpha=alpha, power=power,
                       df=res.df, g_statistic=res.g_statistic, g_pvalue=res.g_pvalue, checks=allchecks,
                       details={"marginal": marginal, "equivalence": equivalence, **(details or {})},
                       skipped=dict(skipped or {}),
                       notes=tuple(notes))


def certify_sampler(sample, law, n: int, *, alpha: float = 1e-3, seed=0, power: float = 0.99,
                    tv: float | None = None, min_expected: float = MIN_EXPECTED, workers: int = 1) -> Certificate:
    """Certify a black-box sampler against a law by Monte Carlo.

    Draws ``n`` tokens (in chunks of at most ``CHUNK``) and runs the Pearson
    chi-square and G-tests (``scipy.stats.power_divergence``) after the
    pooling rule of :mod:`exactness.gof`.

    Parameters
    ----------
    sample : callable ``(rng, m) -> (m,) int64``
        Draws ``m`` token ids with the numpy Generator it is given.
    law : array_like, shape (V,), float64
        The law the samples must follow (non-negative, finite, sums to 1).
    n : int >= 1
        Number of samples.
    alpha : float, default 1e-3
        Test level.
    seed : int, SeedSequence or numpy Generator, default 0
    power : float, default 0.99
        Power used for ``detectable_tv``.
    tv : float, optional
        Smallest TV you require to be detected; an :class:`ExactnessWarning`
        states the detectable TV (and the ``n`` needed) when ``n`` is too small.
    min_expected : float > 0, default 5
        Pooling threshold for small expected counts.  A threshold (or an
        ``n``) that pools every token into one cell leaves the test with no
        degrees of freedom: that is a ``ValueError``, never a pass.
    workers : int, default 1
        Processes drawing chunks in parallel (forked; same counts for any
        value, since chunk ``i`` always gets the same seed).

    Returns
    -------
    Certificate

    Raises
    ------
    TypeError
        Sampler output of a non-integer dtype, bad argument types.
    ValueError
        Bad law (negative, non-finite, not summing to 1), ``n < 1``, sampler
        output of the wrong shape or out of ``[0, V)``; ``min_expected``
        not finite and > 0; no degrees of freedom after pooling (law with
        two or more tokens); for ``n > PILOT_ABOVE`` (2**24), a run that a
        timed pilot of ``PILOT`` = 2,000 draws (on a private seed) estimates
        at more than ``MAX_SECONDS`` (1 h).

    Memory is bounded: the sampler is asked for at most ``CHUNK`` (2**20)
    draws per call and only the counts are kept.
    """
    law = check_law(law)
    n = check_n(n)
    alpha = check_alpha(alpha)
    check_tv(tv)
    if not callable(sample):
        raise TypeError(f"sample must be a callable (rng, n) -> (n,) int64, got {type(sample).__name__}")
    rng = as_generator(seed)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    min_expected = check_min_expected(min_expected)
    if n > PILOT_ABOVE:
        est = pilot_seconds(sample, n) / int(workers)
        if est > MAX_SECONDS:
            raise ValueError(f"n = {n:.3g} would take ~{_hours(est)} (timed pilot of {PILOT:,} draws, "
                             f"{int(workers)} worker(s); limit exactness.certificate.MAX_SECONDS = {_hours(MAX_SECONDS)}): "
                             "pass a smaller n, or use tv= / exactness.samples_for_tv to plan the n you need")
    counts = count_samples(sample, law.size, n, rng, workers=int(workers))
    return certificate_from_counts(counts, law, alpha=alpha, power=power, tv=tv, min_expected=min_expected)
