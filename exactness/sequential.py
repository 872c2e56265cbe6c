"""Anytime-valid sequential test of "token counts ~ law": a Dirichlet-multinomial mixture e-process.

The draws are pooled into cells fixed before any draw (:func:`exactness.gof.pool_cells` at the
planned maximum ``n_max``, so the cells are the fixed-n test's at that budget).  With ``x`` the cell
counts after ``n`` draws, ``p0`` the cell law and a Dirichlet(``c0 * p0``) prior on the cell law,

    E_n = B(c0 p0 + x) / B(c0 p0) / prod_c p0_c^{x_c}

(``B`` the multivariate beta function, computed with ``scipy.special.gammaln``) is the Bayes factor of
the Dirichlet mixture against the null.  Under the null it is a nonnegative martingale with ``E_0 = 1``
(a test martingale), so by Ville's inequality (Ville 1939) ``P(sup_n E_n >= 1/alpha) <= alpha``: the
test that rejects as soon as ``E_n >= 1/alpha`` at any look -- after every chunk, or after every
draw -- has level ``alpha`` under optional stopping, and ``min(1, 1 / max E)`` is an anytime-valid
p-value (Ramdas, Grünwald, Vovk & Shafer 2023, "Game-theoretic statistics and safe anytime-valid
inference", arXiv 2210.01948; Grünwald, de Heide & Koolen 2019, "Safe testing", arXiv 1906.07801).
A draw on a token of zero law makes ``E`` infinite: rejected at once, p-value 0.

What it detects.  Any cell law other than ``p0`` makes ``log E_n`` grow like ``n KL(p1 || p0)``, so
every such bias is eventually rejected (the test is consistent); biases inside one pooled cell are
invisible, as for the chi-square test on the same cells.  The prior concentration ``c0`` is tuned to
the planned budget (:func:`concentration`): with ``r = n / (c0 + 1)`` the Gaussian approximation of
the mixture is ``log E ~ chi2 / 2 * r / (1 + r) - df / 2 * log(1 + r)`` (the mixture SPRT of Robbins
1970), so at ``n_max`` the test rejects when the Pearson chi-square exceeds :func:`chi2_threshold`,
which ``c0`` minimises.  Its power against the hardest bias of size ``tv`` (the one
:mod:`exactness.power` plans for) at ``n_max`` is then about ``P(ncx2(df, 4 n tv^2) > threshold)``
(:func:`sequential_power`), and :func:`sequential_samples_for_tv` plans the ``n_max`` that reaches
``power``.  The threshold exceeds the fixed-n critical value, so the sequential budget is larger than
:func:`exactness.power.samples_for_tv` (about 1.3x to 1.6x); the gain is that a bias well above
``tv`` stops the run early.  Only the level is exact (Ville); the power is the asymptotic
approximation above, checked by simulation in ``tests/test_sequential.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, special, stats

from ._checks import check_alpha, check_n
from .gof import MIN_EXPECTED, pool_cells
from .power import _check_df, _check_power

#: Looks (chunk ends) planned over the budget: the run is tested after every ``n_max / LOOKS`` draws.
LOOKS = 128
#: Smallest chunk between looks.
MIN_CHUNK = 1 << 14


def _log_threshold(r: float, df: int, alpha: float) -> float:
    """Pearson chi-square at which ``log E = log(1/alpha)`` when ``n = r (c0 + 1)`` (Gaussian approximation)."""
    return (1.0 + 1.0 / r) * (2.0 * math.log(1.0 / alpha) + df * math.log1p(r))


def _best_r(df: int, alpha: float) -> float:
    res = optimize.minimize_scalar(lambda lr: _log_threshold(math.exp(lr), df, alpha), bounds=(-5.0, 12.0),
                                   method="bounded", options={"xatol": 1e-6})
    return math.exp(float(res.x))


def chi2_threshold(df: int, alpha: float) -> float:
    """Pearson chi-square at which the tuned e-process reaches ``1/alpha`` at the planned budget.

    Parameters
    ----------
    df : int >= 1, pooled cells - 1
    alpha : float in (0, 1)

    Returns
    -------
    float, ``min_r (1 + 1/r) (2 log(1/alpha) + df log(1 + r))`` (Gaussian approximation, module docstring).
    """
    df, alpha = _check_df(df), check_alpha(alpha)
    return _log_threshold(_best_r(df, alpha), df, alpha)


def concentration(n_max: int, df: int, alpha: float) -> float:
    """Dirichlet prior concentration ``c0 = n_max / r* - 1`` (at least 1) tuned to the budget ``n_max``."""
    n_max, df, alpha = check_n(n_max, name="n_max"), _check_df(df), check_alpha(alpha)
    return max(1.0, n_max / _best_r(df, alpha) - 1.0)


def sequential_power(tv: float, n_max: int, df: int, alpha: float) -> float:
    """Approximate power by ``n_max`` against the hardest bias of size ``tv``: ``P(ncx2(df, 4 n tv^2) > threshold)``.

    A lower bound in the sense that an earlier look can also reject (asymptotic; see the module docstring).
    """
    n_max, df, alpha = check_n(n_max, name="n_max"), _check_df(df), check_alpha(alpha)
    return float(stats.ncx2.sf(chi2_threshold(df, alpha), df, 4.0 * n_max * float(tv) ** 2))


def sequential_samples_for_tv(tv: float, df: int, *, alpha: float = 1e-3, power: float = 0.99) -> int:
    """Planner of the sequential budget: ``n_max`` at which the e-process detects the hardest TV-``tv`` bias with ``power``.

    Parameters
    ----------
    tv : float in (0, 1]
    df : int >= 1, pooled cells - 1
    alpha, power : float in (0, 1)

    Returns
    -------
    int, ``ceil(lambda_s / (4 tv^2))`` with ``P(ncx2(df, lambda_s) > chi2_threshold(df, alpha)) = power``.

    Raises
    ------
    TypeError, ValueError
        As :func:`exactness.power.samples_for_tv` for bad ``tv``, ``df``, ``alpha`` or ``power``.
    """
    from ._checks import check_tv

    tv = check_tv(tv)
    if tv is None:
        raise TypeError("tv must be a float in (0, 1] (the smallest TV bias to detect), got None")
    df, alpha, power = _check_df(df), check_alpha(alpha), _check_power(power)
    lam = _lambda_seq(df, alpha, power)
    need = lam / (4.0 * tv * tv) if tv * tv > 0 else math.inf
    if math.isfinite(need):
        return max(1, int(math.ceil(need)))
    from fractions import Fraction  # beyond float range (tiny tv): exact rational arithmetic, as samples_for_tv

    return max(1, int(math.ceil(Fraction(lam) / (4 * Fraction(tv) ** 2))))


def _lambda_seq(df: int, alpha: float, power: float) -> float:
    """Noncentrality at which ``P(ncx2(df, lam) > chi2_threshold(df, alpha)) = power`` (0 if reached at 0)."""
    thr = chi2_threshold(df, alpha)
    f = lambda lam: stats.ncx2.sf(thr, df, lam) - power  # noqa: E731
    if stats.chi2.sf(thr, df) >= power:
        return 0.0
    hi = 1.0
    while f(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(f, 1e-12 if f(1e-12) < 0 else 0.0, hi, xtol=1e-10, rtol=1e-12))


def log_e_value(cell_counts, cell_law, c0: float) -> float:
    """``log E``: log Bayes factor of the Dirichlet(``c0 * cell_law``) mixture against ``cell_law``.

    Parameters
    ----------
    cell_counts : array_like, shape (C,), int
    cell_law : array_like, shape (C,), float64, positive, sums to 1
    c0 : float > 0

    Returns
    -------
    float, ``gammaln(c0) - gammaln(c0 + n) + sum(gammaln(a + x) - gammaln(a)) - sum(x log p0)``, ``a = c0 p0``.
    """
    x = np.asarray(cell_counts, dtype=np.float64)
    p0 = np.asarray(cell_law, dtype=np.float64)
    a = c0 * p0
    n = float(x.sum())
    return float(special.gammaln(c0) - special.gammaln(c0 + n) + np.sum(special.gammaln(a + x) - special.gammaln(a))
                 - np.sum(x * np.log(p0)))


@dataclass
class SequentialTest:
    """Anytime-valid test of token draws against ``law``, fed count increments (module docstring).

    Parameters
    ----------
    law : ndarray, shape (V,), float64
        The null law (checked by the caller).
    n_max : int
        Planned budget: fixes the pooled cells (``pool_cells(n_max * law)``) and the prior (``concentration``).
    alpha : float
        Level: reject once ``E >= 1/alpha``.

    Use ``update(token_counts)`` after each chunk (``(V,)`` counts of that chunk's draws); ``rejected``,
    ``pvalue`` (``min(1, 1 / max E)``), ``n`` (draws seen), ``n_reject`` (draws when rejected), ``looks``.
    """

    law: np.ndarray
    n_max: int
    alpha: float
    min_expected: float = MIN_EXPECTED
    n: int = 0
    looks: int = 0
    max_log_e: float = 0.0
    n_reject: int | None = None
    impossible: int = 0
    cell: np.ndarray = field(init=False, repr=False)
    cell_law: np.ndarray = field(init=False, repr=False)
    counts: np.ndarray = field(init=False, repr=False)
    c0: float = field(init=False)
    df: int = field(init=False)

    def __post_init__(self):
        self.law = np.asarray(self.law, dtype=np.float64)
        self.n_max = check_n(self.n_max, name="n_max")
        self.alpha = check_alpha(self.alpha)
        self.cell = pool_cells(self.n_max * self.law, self.min_expected)
        ncell = int(self.cell.max()) + 1 if np.any(self.cell >= 0) else 0
        keep = self.cell >= 0
        self.cell_law = np.bincount(self.cell[keep], weights=self.law[keep], minlength=ncell)
        self.cell_law = self.cell_law / self.cell_law.sum()
        self.df = max(0, ncell - 1)
        self.c0 = concentration(self.n_max, max(1, self.df), self.alpha)
        self.counts = np.zeros(ncell, dtype=np.int64)

    @property
    def rejected(self) -> bool:
        return self.n_reject is not None

    @property
    def pvalue(self) -> float:
        return float(min(1.0, math.exp(-self.max_log_e))) if math.isfinite(self.max_log_e) else 0.0

    def update(self, token_counts) -> bool:
        """Add one chunk's token counts (V,) and look; returns ``rejected``."""
        tc = np.asarray(token_counts, dtype=np.int64)
        self.n += int(tc.sum())
        self.looks += 1
        bad = int(tc[self.cell < 0].sum())
        self.impossible += bad
        self.counts += np.bincount(self.cell[self.cell >= 0], weights=tc[self.cell >= 0],
                                   minlength=self.counts.size).astype(np.int64)
        le = math.inf if self.impossible else (log_e_value(self.counts, self.cell_law, self.c0) if self.df else 0.0)
        self.max_log_e = max(self.max_log_e, le)
        if self.n_reject is None and self.max_log_e >= math.log(1.0 / self.alpha):
            self.n_reject = self.n
        return self.rejected

    def to_dict(self) -> dict:
        return {"method": "Dirichlet-multinomial mixture e-process (Ville's inequality)", "level": self.alpha,
                "n_max": self.n_max,
                "n": self.n, "looks": self.looks, "df": self.df, "concentration": self.c0,
                "log_e_max": self.max_log_e, "pvalue": self.pvalue, "rejected": self.rejected,
                "n_reject": self.n_reject, "fraction_of_budget": self.n / self.n_max}


def chunk_size(n_max: int) -> int:
    """Draws between looks: ``max(MIN_CHUNK, ceil(n_max / LOOKS))``."""
    return int(max(MIN_CHUNK, -(-int(n_max) // LOOKS)))


def sequential_detectable_tv(n_max: int, df: int, *, alpha: float = 1e-3, power: float = 0.99) -> float:
    """Smallest hardest-bias TV the e-process detects with ``power`` by ``n_max`` draws (inverse of the planner)."""
    n_max, df, alpha, power = check_n(n_max, name="n_max"), _check_df(df), check_alpha(alpha), _check_power(power)
    return math.sqrt(_lambda_seq(df, alpha, power) / (4.0 * n_max))


def sequential_draws(draw, seed_seq: np.random.SeedSequence, law, n_max: int, alpha: float):
    """Draw in chunks until the e-process rejects or ``n_max`` draws are made.

    Parameters
    ----------
    draw : callable ``(seed_seq, m) -> Draws`` (``.tokens`` (m,) int64 in ``[0, V)``, ``.accepted`` (m,) int64)
    seed_seq : numpy SeedSequence; chunk ``i`` is drawn with its ``i``-th ``spawn`` child
    law : ndarray, shape (V,), float64, the null law of the tokens
    n_max : int, the budget
    alpha : float, level

    Returns
    -------
    (Draws, SequentialTest)
        The draws made (concatenated, at most ``n_max``) and the test's state.
    """
    from .sampling import Draws

    test = SequentialTest(law, n_max, alpha)
    m = chunk_size(test.n_max)
    kids = seed_seq.spawn(-(-test.n_max // m))
    toks, accs = [], []
    for i, kid in enumerate(kids):
        d = draw(kid, min(m, test.n_max - i * m))
        toks.append(d.tokens)
        accs.append(d.accepted)
        if test.update(np.bincount(d.tokens, minlength=test.law.size)):
            break
    return Draws(np.concatenate(toks), np.concatenate(accs)), test


def sequential_certificate(counts, law, seq: SequentialTest, *, alpha: float, power: float, tv, checks: dict,
                           details: dict, skipped: dict):
    """A :class:`exactness.certificate.Certificate` whose marginal check is the sequential test ``seq``.

    The chi-square / G numbers (``statistic``, ``g_pvalue``, ``details["marginal"]["pvalue_fixed_n"]``) are
    the fixed-n tests on the draws made, for information; the verdict uses the anytime-valid p-value
    (Holm over the checks at ``alpha`` as usual; ``seq.alpha`` is ``alpha / m`` with ``m`` at least the
    number of checks, so a rejection by ``seq`` fails the certificate).  ``detectable_tv`` is :func:`sequential_detectable_tv` at the budget.
    After an early stop the equivalence bound is withheld (a fixed-n bound is not valid at a stopping time).
    """
    from dataclasses import replace

    from ._checks import warn_power
    from .certificate import certificate_from_counts, holm

    cert = certificate_from_counts(counts, law, alpha=alpha, power=power, tv=None, checks=checks,
                                   details={**details, "sequential": seq.to_dict()}, skipped=skipped)
    allchecks = dict(cert.checks)
    marg = dict(cert.details["marginal"], pvalue_fixed_n=cert.details["marginal"]["pvalue"], pvalue=seq.pvalue)
    allchecks["marginal"] = seq.pvalue
    if len(allchecks) * seq.alpha > alpha * (1 + 1e-12):  # the level must leave a stop failing after Holm
        raise RuntimeError(f"sequential level {seq.alpha:.3g} with {len(allchecks)} checks exceeds alpha {alpha:g} "
                           "after Holm; no certificate is given (please report this)")
    pmin = min(holm(allchecks).values())
    det = sequential_detectable_tv(seq.n_max, max(1, seq.df), alpha=seq.alpha, power=power)
    if tv is not None:
        warn_power(det, float(tv), seq.n_max, sequential_samples_for_tv(float(tv), max(1, seq.df), alpha=seq.alpha,
                                                                        power=power), alpha, power)
    new = dict(cert.details, marginal=marg)
    early = seq.n < seq.n_max
    if early:
        new["equivalence"] = {"tv_upper": None, "confidence": None, "statement": None,
                              "reason": "the sequential test stopped early: a fixed-n TV bound is not valid at a "
                                        "stopping time"}
    if seq.rejected:
        note = (f"the marginal test is the anytime-valid e-process (level {seq.alpha:.3g}); it rejected after {seq.n_reject:,} "
                f"of {seq.n_max:,} planned draws ({seq.n_reject / seq.n_max:.1%} of the budget), p <= "
                f"{seq.pvalue:.3g}; the other checks used the {seq.n:,} draws made")
    else:
        note = (f"the marginal test is the anytime-valid e-process (level {seq.alpha:.3g}); no rejection over all "
                f"{seq.n:,} planned draws (max log E = {seq.max_log_e:.3g}, p = {seq.pvalue:.3g})")
    new["sequential"] = dict(new["sequential"], statement=note)
    return replace(cert, checks=allchecks, pvalue=float(pmin), passed=bool(pmin >= alpha), detectable_tv=det,
                   details=new)
