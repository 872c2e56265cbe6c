"""Goodness-of-fit of sampled token counts against a law.

Pearson chi-square and the G-test (likelihood ratio) via
``scipy.stats.power_divergence`` (Cressie & Read 1984), after pooling the
cells with small expected counts.

Pooling rule (documented, deterministic): every token whose expected count
``n * law`` is at least ``min_expected`` (default 5, Cochran 1954) is its own
cell.  The remaining tokens of positive law are sorted by expected count
(ascending, ties by token id) and cut into consecutive groups whose expected
count first reaches ``min_expected``; a last group still short of it joins the
previous group (or the smallest large cell).  Tokens of zero law form no cell:
any sample there is an impossible token, and the test returns statistic
``inf`` and p-value 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: Default smallest expected count per pooled cell (Cochran's rule).
MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class GofResult:
    """Result of a goodness-of-fit test.

    Attributes
    ----------
    statistic, pvalue : float
        Pearson chi-square statistic and its p-value.
    g_statistic, g_pvalue : float
        G-test (log-likelihood ratio) statistic and p-value.
    df : int
        Degrees of freedom (pooled cells - 1).
    cells : int
        Number of pooled cells.
    impossible : int
        Samples that landed on tokens of zero law.
    """

    statistic: float
    pvalue: float
    g_statistic: float
    g_pvalue: float
    df: int
    cells: int
    impossible: int


def pool_cells(expected: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """Cell index per token (-1 for zero-law tokens) under the pooling rule.

    Parameters
    ----------
    expected : ndarray, shape (V,), float64
        Expected counts ``n * law``.
    min_expected : float

    Returns
    -------
    ndarray, shape (V,), int64
        Cell id in ``0..cells-1``; -1 where ``expected == 0``.
    """
    V = expected.size
    cell = np.full(V, -1, dtype=np.int64)
    big = np.flatnonzero(expected >= min_expected)
    cell[big] = np.arange(big.size)
    small = np.flatnonzero((expected > 0) & (expected < min_expected))
    if small.size == 0:
        return cell
    small = small[np.argsort(expected[small], kind="stable")]
    e = expected[small]                               # (S,) float64, ascending
    group = np.empty(small.size, dtype=np.int64)
    g, acc, s = 0, 0.0, 0
    while s < e.size:  # greedy: close a group once its running sum (from 0.0, in order) reaches min_expected
        w = 64
        while True:    # the window grows until it holds the group's end: O(S) in all
            run = np.cumsum(e[s:s + w])               # sequential adds: the same floats as a Python loop's
            hit = np.flatnonzero(run >= min_expected)
            if hit.size or s + w >= e.size:
                break
            w *= 4
        if hit.size:
            group[s:s + hit[0] + 1] = g
            g, acc, s = g + 1, 0.0, s + int(hit[0]) + 1
        else:
            group[s:] = g
            acc, s = float(run[-1]), e.size
    if 0.0 < acc < min_expected:  # a short last group joins its neighbour
        last = group == g
        if g > 0:
            group[last] = g - 1
        elif big.size:
            cell[small] = cell[big[np.argmin(expected[big])]]
            return cell
    cell[small] = big.size + group
    return cell


def gof_test(counts, law, *, min_expected: float = MIN_EXPECTED) -> GofResult:
    """Chi-square and G-test of token counts against a law, with pooling.

    Parameters
    ----------
    counts : array_like, shape (V,), int
        Observed count per token (``numpy.bincount`` of the samples).
    law : array_like, shape (V,), float64
        The law the samples should follow (validated by the caller).
    min_expected : float
        Pooling threshold (see module docstring).

    Returns
    -------
    GofResult
    """
    counts = np.asarray(counts, dtype=np.float64)
    law = np.asarray(law, dtype=np.float64)
    n = counts.sum()
    impossible = int(counts[law <= 0].sum())
    if impossible:
        return GofResult(np.inf, 0.0, np.inf, 0.0, 0, 0, impossible)
    cell = pool_cells(n * law, min_expected)
    ncell = int(cell.max()) + 1 if np.any(cell >= 0) else 0
    if ncell < 2 or n == 0:
        return GofResult(0.0, 1.0, 0.0, 1.0, 0, ncell, 0)
    keep = cell >= 0
    obs = np.bincount(cell[keep], weights=counts[keep], minlength=ncell)
    exp = np.bincount(cell[keep], weights=law[keep], minlength=ncell)
    exp = exp * (n / exp.sum())
    chi = stats.power_divergence(obs, exp, lambda_="pearson")
    g = stats.power_divergence(obs, exp, lambda_="log-likelihood")
    return GofResult(float(chi.statistic), float(chi.pvalue), float(g.statistic), float(g.pvalue),
                     ncell - 1, ncell, 0)


def tv_bounds(counts, law, alpha: float) -> tuple[float, float]:
    """Plug-in TV estimate and a ``1 - alpha`` upper confidence bound.

    The bound uses the Bretagnolle-Huber-Carol inequality
    ``P(||p_hat - p||_1 >= eps) <= 2^S exp(-n eps^2 / 2)`` (van der Vaart &
    Wellner 1996, Prop. A.6.6) on a partition of ``S`` cells fixed before the
    draws: each token of the law's support is a cell and the zero-law tokens
    form one more cell (when there are any).  The TV to ``law`` is unchanged
    by lumping the zero-law tokens (``law`` is 0 on all of them), so with
    probability ``1 - alpha``: ``TV(true, law) <= TV_hat + eps / 2``.

    Returns
    -------
    tv_estimate, tv_upper : float
        ``0.5 * sum |counts / n - law|`` and its upper bound (capped at 1).
    """
    counts = np.asarray(counts, dtype=np.float64)
    law = np.asarray(law, dtype=np.float64)
    n = counts.sum()
    if n == 0:
        return 0.0, 1.0
    tv = 0.5 * float(np.abs(counts / n - law).sum())
    S = int(np.count_nonzero(law > 0)) + int(np.any(law <= 0))  # data-independent cells (docstring)
    eps = np.sqrt(2.0 * (S * np.log(2.0) + np.log(1.0 / alpha)) / n)
    return tv, float(min(1.0, tv + 0.5 * eps))


def pooled_gof_test(counts_list, laws):
    """:func:`gof_test` per group (a prompt, a batch position) and the pooled test over the groups.

    ``counts_list``: G arrays of counts, ``laws``: the G exact laws (each (V,) float64).  Returns
    ``(per-group GofResults, pooled dict)``: the chi-square and G statistics and their df summed over
    the groups (independent samples), ``pvalue`` / ``g_pvalue`` of the sums; any impossible cell
    makes the pooled p-value 0.
    """
    per = [gof_test(c, law) for c, law in zip(counts_list, laws)]
    if any(r.impossible for r in per):
        return per, dict(statistic=math.inf, df=sum(r.df for r in per), pvalue=0.0, g_statistic=math.inf, g_pvalue=0.0)
    df = sum(r.df for r in per)
    chi = sum(r.statistic for r in per)
    g = sum(r.g_statistic for r in per)
    pv = float(stats.chi2.sf(chi, df)) if df else 1.0
    gp = float(stats.chi2.sf(g, df)) if df else 1.0
    return per, dict(statistic=chi, df=df, pvalue=pv, g_statistic=g, g_pvalue=gp)
