"""The ``Certificate`` result object and black-box certification of a sampler."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._checks import as_generator, check_alpha, check_law, check_n, check_tokens, warn_power
from .gof import MIN_EXPECTED, gof_test, tv_bounds
from .power import detectable_tv as _detectable_tv
from .power import samples_for_tv

#: Largest number of draws requested from a sampler in one call.
CHUNK = 1 << 20


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
        ``1 - alpha`` upper confidence bound on that TV.
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
        Extra numbers (exact-law TV, acceptance, counts) per check.
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

    def failed_checks(self, adjusted: bool = True) -> dict:
        """Checks whose (Holm-adjusted) p-value is below ``alpha``."""
        pv = holm(self.checks) if adjusted else dict(self.checks)
        return {k: v for k, v in pv.items() if v < self.alpha}

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{verdict}: chi2 = {self.statistic:.4g} (df {self.df}), p = {self.pvalue:.3g}, "
                f"TV ~ {self.tv_estimate:.3g} (<= {self.tv_upper:.3g}), detectable TV {self.detectable_tv:.3g} "
                f"at alpha {self.alpha:g}, power {self.power:g}, n = {self.n:,}")


def holm(pvalues: dict) -> dict:
    """Holm-adjusted p-values (``statsmodels.stats.multitest.multipletests``)."""
    if not pvalues:
        return {}
    from statsmodels.stats.multitest import multipletests

    names = list(pvalues)
    raw = np.clip(np.array([pvalues[k] for k in names], dtype=np.float64), 0.0, 1.0)
    adj = multipletests(raw, alpha=0.05, method="holm")[1]
    return dict(zip(names, adj.tolist()))


_FORKED_SAMPLER = None  # the sampler seen by forked workers (closures need not be picklable)


def _count_chunk(V: int, m: int, seed: int, sample=None) -> np.ndarray:
    sample = _FORKED_SAMPLER if sample is None else sample
    t = check_tokens(sample(np.random.default_rng(seed), m), V, m)
    return np.bincount(t, minlength=V)


def count_samples(sample, V: int, n: int, rng: np.random.Generator, *, chunk: int = CHUNK,
                  workers: int = 1) -> np.ndarray:
    """Call ``sample(rng_i, m)`` on chunks of at most ``chunk`` draws and return token counts (V,) int64.

    Chunk ``i`` gets its own generator seeded from ``rng``, so the counts are
    the same for any number of ``workers`` (processes, forked on POSIX;
    ``workers > 1`` falls back to one process where fork is unavailable).
    """
    sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
    seeds = rng.integers(0, 2**63 - 1, size=len(sizes)).tolist()
    counts = np.zeros(V, dtype=np.int64)
    if workers > 1 and len(sizes) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        global _FORKED_SAMPLER
        if "fork" in mp.get_all_start_methods():
            _FORKED_SAMPLER = sample
            try:
                with ProcessPoolExecutor(min(workers, len(sizes)), mp_context=mp.get_context("fork")) as ex:
                    for c in ex.map(_count_chunk, [V] * len(sizes), sizes, seeds):
                        counts += c
            finally:
                _FORKED_SAMPLER = None
            return counts
    for m, sd in zip(sizes, seeds):
        counts += _count_chunk(V, m, sd, sample)
    return counts


def certificate_from_counts(counts, law, *, alpha: float, power: float, tv: float | None = None,
                            checks: dict | None = None, details: dict | None = None,
                            min_expected: float = MIN_EXPECTED) -> Certificate:
    """Build a :class:`Certificate` from marginal counts plus extra check p-values."""
    counts = np.asarray(counts)
    n = int(counts.sum())
    res = gof_test(counts, law, min_expected=min_expected)
    tv_hat, tv_up = tv_bounds(counts, law, alpha)
    det = _detectable_tv(n, max(1, res.df), alpha=alpha, power=power)
    needed = samples_for_tv(tv, max(1, res.df), alpha=alpha, power=power) if tv else None
    warn_power(det, tv, n, needed, alpha, power)
    allchecks = {"marginal": res.pvalue, **(checks or {})}
    adj = holm(allchecks)
    pmin = min(adj.values())
    return Certificate(passed=bool(pmin >= alpha), statistic=res.statistic, pvalue=float(pmin),
                       tv_estimate=tv_hat, tv_upper=tv_up, detectable_tv=det, n=n, alpha=alpha, power=power,
                       df=res.df, g_statistic=res.g_statistic, g_pvalue=res.g_pvalue, checks=allchecks,
                       details={"marginal": {"cells": res.cells, "impossible": res.impossible}, **(details or {})})


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
    min_expected : float, default 5
        Pooling threshold for small expected counts.
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
        output of the wrong shape or out of ``[0, V)``.
    """
    law = check_law(law)
    n = check_n(n)
    alpha = check_alpha(alpha)
    if not callable(sample):
        raise TypeError(f"sample must be a callable (rng, n) -> (n,) int64, got {type(sample).__name__}")
    rng = as_generator(seed)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    counts = count_samples(sample, law.size, n, rng, workers=int(workers))
    return certificate_from_counts(counts, law, alpha=alpha, power=power, tv=tv, min_expected=min_expected)
