"""Power of the chi-square test against a TV bias, and the sample-size planner.

Under a fixed alternative ``p1`` the Pearson statistic on ``c`` cells is
approximately noncentral chi-square with ``df = c - 1`` and noncentrality
``lambda = n * w^2``, ``w^2 = sum (p1 - p0)^2 / p0`` (Cohen's effect size
squared; Cohen 1988, ch. 7; ``statsmodels.stats.power.GofChisquarePower``
uses the same law).  By Cauchy-Schwarz ``(2 TV)^2 = (sum |p1 - p0|)^2 <=
w^2 * sum p0 = w^2``, with equality for the *hardest* bias (mass moved
between two halves of the law, proportional to ``p0``).  So ``n`` samples
detect every bias of total variation at least

    detectable_tv = sqrt(lambda* / (4 n)),

where ``lambda*`` solves ``P(ncx2(df, lambda*) > chi2.isf(alpha, df)) =
power`` (TV measured on the pooled cells; biases concentrated on
low-probability tokens have larger ``w`` and are detected at smaller TV).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

from ._checks import check_alpha, check_n


def _check_power(power) -> float:
    if isinstance(power, bool) or not isinstance(power, (int, float, np.floating)) or not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power!r}")
    return float(power)


def _check_df(df) -> int:
    if isinstance(df, bool) or not isinstance(df, (int, np.integer)) or df < 1:
        raise ValueError(f"df must be an integer >= 1 (cells - 1), got {df!r}")
    return int(df)


def noncentrality(df: int, alpha: float, power: float) -> float:
    """``lambda*``: noncentrality at which the level-``alpha`` chi-square test has ``power``.

    Parameters
    ----------
    df : int >= 1
    alpha, power : float in (0, 1)

    Returns
    -------
    float
    """
    df, alpha, power = _check_df(df), check_alpha(alpha), _check_power(power)
    crit = stats.chi2.isf(alpha, df)
    if power <= alpha:
        return 0.0
    f = lambda lam: stats.ncx2.sf(crit, df, lam) - power  # noqa: E731
    hi = 1.0
    while f(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(f, 0.0 if f(0.0) >= 0 else 1e-12, hi, xtol=1e-10, rtol=1e-12))


def chi2_power(tv: float, n: int, df: int, alpha: float) -> float:
    """Power of the level-``alpha`` chi-square test against the hardest bias of size ``tv``.

    Parameters
    ----------
    tv : float in [0, 1]
    n : int, samples
    df : int, cells - 1
    alpha : float

    Returns
    -------
    float, the probability of rejecting (asymptotic noncentral chi-square).
    """
    n, df, alpha = check_n(n), _check_df(df), check_alpha(alpha)
    if isinstance(tv, bool) or not isinstance(tv, (int, float, np.integer, np.floating)):
        raise TypeError(f"tv must be a float in [0, 1], got {tv!r}")
    if not 0 <= tv <= 1:  # also rejects NaN
        raise ValueError(f"tv must lie in [0, 1], got {tv}")
    lam = n * 4.0 * float(tv) ** 2
    return float(stats.ncx2.sf(stats.chi2.isf(alpha, df), df, lam))


def detectable_tv(n: int, df: int, *, alpha: float = 1e-3, power: float = 0.99) -> float:
    """Smallest TV bias detected with probability ``power`` by ``n`` samples.

    Parameters
    ----------
    n : int >= 1, samples
    df : int >= 1, degrees of freedom of the pooled test (cells - 1)
    alpha : float, test level
    power : float, required power

    Returns
    -------
    float, ``sqrt(lambda* / (4 n))`` (see module docstring); may exceed 1,
    meaning no bias is reliably detectable.
    """
    n = check_n(n)
    return math.sqrt(noncentrality(df, alpha, power) / (4.0 * n))


def samples_for_tv(tv: float, df: int, *, alpha: float = 1e-3, power: float = 0.99) -> int:
    """Planner: samples needed to detect every TV bias >= ``tv`` with ``power``.

    Parameters
    ----------
    tv : float in (0, 1]
    df : int >= 1, cells - 1 (for a law over V tokens with no pooling, V - 1)
    alpha, power : float

    Returns
    -------
    int, ``ceil(lambda* / (4 tv^2))``; beyond the float range it is
    computed in exact rational arithmetic (``fractions.Fraction``), so a
    tiny ``tv`` gives a huge Python int, never an overflow or a division by zero.

    Raises
    ------
    TypeError
        ``tv`` is not a real number (``bool`` is not a TV).
    ValueError
        ``tv`` outside (0, 1] (or NaN), bad ``df``, ``alpha`` or ``power``.
    """
    if isinstance(tv, bool) or not isinstance(tv, (int, float, np.integer, np.floating)):
        raise TypeError(f"tv must be a float in (0, 1], got {tv!r}")
    if not np.isfinite(tv) or not 0 < tv <= 1:
        raise ValueError(f"tv must lie in (0, 1], got {tv!r}")
    lam = noncentrality(df, alpha, power)
    need = lam / (4.0 * float(tv) ** 2) if float(tv) ** 2 > 0 else math.inf
    if math.isfinite(need):
        return int(math.ceil(need))
    from fractions import Fraction  # beyond float range: exact rational arithmetic

    return int(math.ceil(Fraction(lam) / (4 * Fraction(float(tv)) ** 2)))


class DesignTwins:
    """The design twins of a statistical check, in the manner of TFP's ``statistical_testing``: the smallest TV it
    detects at ``n`` and the ``n`` for a TV (chi-square noncentrality over ``df`` degrees of freedom, power
    ``power`` at ``alpha``); a deterministic check (``deterministic = True``: any disagreement fails) states 0.0
    and 1.  Shared by the check objects of every route (``exactness.node_checks``, ``exactness.decoder_checks``)."""

    #: True: a deterministic comparison (no sampling power to state)
    deterministic: bool = False

    def detectable_tv(self, n: int, df: int, alpha: float = 1e-3, power: float = 0.99) -> float:
        """Smallest TV detected with probability ``power`` at ``alpha`` from ``n`` draws over ``df`` degrees of
        freedom; 0.0 for a deterministic check."""
        return 0.0 if self.deterministic else float(detectable_tv(n, df, alpha=alpha, power=power))

    def n_for_tv(self, tv: float, df: int, alpha: float = 1e-3, power: float = 0.99) -> int:
        """Draws for :meth:`detectable_tv` to reach ``tv``; 1 for a deterministic check."""
        return 1 if self.deterministic else int(samples_for_tv(tv, df, alpha=alpha, power=power))


class EventTwins(DesignTwins):
    """The design twins of an event check (a draw-by-draw comparison that is exact when it fires: a declared step
    that fails its balance, a kernel that disagrees with its reference on the same coins).  A subject whose law is
    TV >= eps from the reference shows an event with probability >= eps per draw (the coupling inequality), so
    ``n`` draws see one with probability ``1 - (1 - eps)^n``; shared by ``exactness.stepwise_checks`` and
    ``exactness.coupled.checks``."""

    def detectable_tv(self, n: int, df: int = 0, alpha: float = 1e-3, power: float = 0.99) -> float:
        """Smallest event probability seen with probability ``power`` in ``n`` draws: ``1 - (1 - power)^(1/n)``."""
        return 1.0 - (1.0 - power) ** (1.0 / n)                      # P(no event in n draws) = (1 - eps)^n

    def n_for_tv(self, tv: float, df: int = 0, alpha: float = 1e-3, power: float = 0.99) -> int:
        """Draws that see an event of probability ``tv`` with probability ``power`` (the inverse of
        :meth:`detectable_tv`)."""
        return int(math.ceil(math.log(1.0 - power) / math.log1p(-tv)))   # (1 - tv)^n <= 1 - power
