"""The output law of a rule at any vocabulary, Rao-Blackwellised along rejected prefixes: ``certify_prefix_law``.

Why
---
A histogram test of a verifier needs ~1/TV^2 draws: 7.5e8 for a detectable TV of 1e-3.  For rules whose
residual depends on the rejected candidates (ResiSpec for without-replacement drafts, ``docs/RESISPEC.md``
s.4) every distinct rejected prefix costs an O(V) step, and 7.5e8 draws visit ~2.6e7 of them at
V = 151,936 (``benchmarks/wor_prefix_count.py``): no fast path exists.  This check computes the rule's
output law from its own step arithmetic instead of sampling tokens.

The estimator
-------------
At a node ``(p_i, q_i)`` the rule accepts token ``y`` with mass ``m_i(y)`` (candidate ``y`` drafted and
accepted) and, having drafted and rejected ``x`` (mass ``w_i(x) = q_i(x) - m_i(x)``, total ``W_i``),
continues from the residual ``p_{i+1}^(x)``.  Its output law is therefore::

    L = m_1 + sum_x w_1(x) L^(x) = E[ m_1 + W_1 (m_2 + W_2 (m_3 + ... + W_k r_k)) ],   x_i ~ w_i / W_i,

the expectation over one random rejected prefix ``(x_1, .., x_{k-1})`` drawn from the rule's own
rejection law, with the last residual ``r_k`` (the law emitted after ``k`` rejections) kept whole.
Each path ``l = m_1 + W_1 (m_2 + ...)`` is a full (V,) probability vector with mean ``L``: the accept
coins and the residual token are integrated out exactly (Rao-Blackwell), so the paths vary only through
the rejected prefix.  On the Zipf node of ``benchmarks/fast_paths.py`` (V = 151,936, k = 4) one path is
within TV ~4e-4 of ``p``, against 1 for one sampled token: a few hundred paths resolve biases far below
1e-3.  Each path costs ~2k O(V) steps of the rule (the masses at the prefix, then the residual of the
drawn rejected token).

The test
--------
Under exactness ``L = p``.  The paths' mass on cells is compared with ``p``'s: three token orders
(token id; target probability descending; draft-to-target ratio ``q / p`` descending), each cut into
``CELLS`` = 16 cells of equal target mass.  The paths are averaged in ``BATCHES`` = 20 batches (batch
means: one path's cell mass is skewed -- a rare rejected token with a far residual -- and a t-test on
raw paths called an exact rule biased); per cell a one-sample t-test of the batch means against ``p``'s
cell mass (19 df), Bonferroni over the 48 cells.  Detectable TV (power 0.99): a bias of TV ``d``
projected on one order's cells moves at least ``d / 8`` of mass in or out of some cell, so it is
detected once ``d / 8 >= (t_{1 - alpha / 96} + t_{0.99}) se``, ``se`` the largest standard error of a
cell mean in that order (floored at ``ROUNDOFF`` = 1e-12: float64 round-off is not a bias).  As for
every binned test, mass moved within one cell of every order is not seen.

What it checks, and what it does not
------------------------------------
It checks the rule's **arithmetic** as the verifier computes it: its accepted masses and residuals
(``verifier.step_law``, the same solver its ``chain`` and ``verify`` run), the residual of the right
rejected token, round-off at the real vocabulary.  It does not check that ``verify`` samples from that
arithmetic (successive drafting, the coins, the residual draw): ``exactness.certify_coupled`` does,
against the same rule's ``chain``, with a TV bound.  The two together bound the TV between ``verify``'s
output law and ``p``: ``TV <= coupled bound + (not detected above) prefix-law detectable TV``.

Supported: a verifier with ``step_law(p_i (B, V), q_i (B, V), x (B,), *, last, masses) -> (a (B,),
nxt (B, V), m (B, V))`` (ResiSpec for without-replacement drafts) and every
:class:`resispec.verifiers.base.MassVerifier` (``rrs``, ``rrs_wor``, ...: ``accepted_mass`` and the plain
residual).  Sources: Rao-Blackwellisation of Monte Carlo estimators (Casella and Robert 1996,
Biometrika 83(1)); the chain's law as in SpecTr (arXiv 2310.15141) and RSD (arXiv 2402.14160).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ._checks import ExactnessWarning, as_generator, check_alpha, check_law, check_n, check_tv

#: Cells of equal target mass per token order.
CELLS = 16
#: Token orders the cells are cut in.
ORDERS = ("id", "target", "ratio")
#: Paths computed at once (rows of one ``step_law`` call); memory ~6 PATH_BATCH V float64.
PATH_BATCH = 16
#: Paths of the timed pilot that plans ``n`` when it is not given.
PILOT = 48
#: Batches the paths are averaged in before the t-tests (batch means: the paths' cell masses are skewed
#: -- a rare rejected token with a far residual -- and a t-test on raw paths called an exact rule biased at
#: n = 100; batch means are near normal).  The t-tests have BATCHES - 1 df.
BATCHES = 20
#: Fewest paths: BATCHES batches of at least 20 (with 10 a batch an exact rule on a skewed Zipf node,
#: V = 500, k = 3, gave a Bonferroni p < 0.01 in 1.0 % of 1,000 seeds; with 20, 0.8 % and none below 0.001).
MIN_PATHS = 400
#: Longest planned run in seconds.
MAX_SECONDS = 3600.0
#: A step's accept probability must equal ``m(x) / q(x)`` of its own masses to this tolerance.
CONSISTENCY_TOL = 1e-9
#: Power at which the detectable TV is stated.
POWER = 0.99
#: Float64 round-off floor of a cell's standard error: a rule whose residual ignores the rejected token
#: (``rrs``, ``rrs_wor``) gives every path equal to ``p`` up to ~1e-17, and a t-test on that spread would
#: call round-off a bias.  Cell deviations below ~1e-11 are not tested.
ROUNDOFF = 1e-12


@dataclass(frozen=True)
class PrefixLawCertificate:
    """Verdict of :func:`certify_prefix_law`.

    Attributes
    ----------
    passed : bool
        No cell's mean path mass differs from ``p``'s at level ``alpha`` (Bonferroni over the cells).
    pvalue : float
        Bonferroni-adjusted smallest cell p-value.
    detectable_tv : float
        TV (projected on each order's cells) detected with probability ``power``: the largest over the
        orders.
    tv_estimate : float
        ``TV(mean path, p)`` over all V tokens (plug-in; noise makes it a little positive under exactness).
    n : int
        Paths.
    alpha, power : float
    seconds : float
        Wall time of the paths.
    details : dict
        ``orders``: per order its smallest cell p-value, largest standard error and detectable TV;
        ``worst``: the worst cell (order, index, deviation, standard error); ``V``, ``k``.
    """

    passed: bool
    pvalue: float
    detectable_tv: float
    tv_estimate: float
    n: int
    alpha: float
    power: float
    seconds: float
    details: dict = field(default_factory=dict)

    def summary(self) -> str:
        w = self.details.get("worst", {})
        return (f"{'PASS' if self.passed else 'FAIL'}: p = {self.pvalue:.3g} over {CELLS * len(ORDERS)} cells "
                f"({self.n:,} rejected-prefix paths, V = {self.details.get('V', 0):,}, k = {self.details.get('k')}); "
                f"detectable TV {self.detectable_tv:.2g} at alpha {self.alpha:g}, power {self.power:g}; "
                f"TV(mean path, p) = {self.tv_estimate:.2g}; worst cell {w.get('order')}[{w.get('cell')}]: "
                f"{w.get('deviation', 0):+.2g} (s.e. {w.get('se', 0):.2g})")


def _stepper(verifier):
    """``step(i, k, P, Q, q, rejected, x, masses) -> (a, nxt, m)`` for the verifier, or a TypeError."""
    from resispec.verifiers.base import MassVerifier, reject_update

    if callable(getattr(verifier, "step_law", None)):
        def step(i, k, P, Q, q, rejected, x, masses):
            return verifier.step_law(P, Q, x, last=i == k - 1, masses=masses)
        return step
    if isinstance(verifier, MassVerifier):
        def step(i, k, P, Q, q, rejected, x, masses):
            m = verifier.accepted_mass(i, k, P, Q, q=q, rejected=rejected)
            rows = np.arange(x.size)
            qx = Q[rows, x]
            a = np.clip(np.where(qx > 0, m[rows, x] / np.where(qx > 0, qx, 1.0), 0.0), 0.0, 1.0)
            return a, reject_update(P, m), m
        return step
    raise TypeError(f"certify_prefix_law needs a verifier with step_law(p_i, q_i, x, *, last, masses) (ResiSpec for "
                    f"without-replacement drafts) or a resispec MassVerifier (accepted_mass), got "
                    f"{type(verifier).__name__}; certify a black box with exactness.certify_verifier, or its kernel "
                    "against a reference rule with exactness.certify_coupled")


def _paths(step, p, q, k: int, n: int, wor: bool, rng) -> np.ndarray:
    """``n`` rejected-prefix paths: (n, V) float64, each ``m_1 + W_1 (m_2 + W_2 (...))``."""
    V = p.size
    qn = q / q.sum()
    out = np.empty((n, V))
    for s in range(0, n, PATH_BATCH):
        b = min(PATH_BATCH, n - s)
        rows = np.arange(b)
        P, Q = np.tile(p, (b, 1)), np.tile(qn, (b, 1))
        qb = np.tile(q, (b, 1))
        L, wt = np.zeros((b, V)), np.ones(b)
        rejected = np.empty((b, 0), dtype=np.int64)
        for i in range(k):
            x0 = np.argmax(Q, axis=1)
            _, _, m = step(i, k, P, Q, qb, rejected, x0, True)            # the masses at each row's prefix
            m = np.asarray(m, dtype=np.float64)
            if m.shape != (b, V) or not np.all(np.isfinite(m)):
                raise RuntimeError(f"step {i}: the verifier's accepted masses have shape {m.shape} or non-finite "
                                   f"values; expected finite ({b}, {V})")
            L += wt[:, None] * m                                          # accepted here: w_{<i} m_i
            w = np.maximum(Q - m, 0.0)                                    # drafted and rejected: q_i - m_i
            W = w.sum(axis=1)
            live = W > 0
            x = np.array([rng.choice(V, p=w[r] / W[r]) if live[r] else x0[r] for r in rows])
            a, nxt, _ = step(i, k, P, Q, qb, rejected, x, False)
            qx = Q[rows, x]
            a_m = np.clip(np.where(qx > 0, m[rows, x] / np.where(qx > 0, qx, 1.0), 0.0), 0.0, 1.0)
            bad = live & (np.abs(np.asarray(a) - a_m) > CONSISTENCY_TOL)
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                raise RuntimeError(f"step {i}: the verifier accepts candidate {int(x[r])} with probability "
                                   f"{float(a[r])!r} but its own accepted masses give m(x) / q(x) = {float(a_m[r])!r}: "
                                   "step_law's masses are not the ones its chain uses")
            wt = np.where(live, wt * W, 0.0)                              # w_{<=i}: W_1 ... W_i
            nxt = np.asarray(nxt, dtype=np.float64)
            if i == k - 1:
                L += wt[:, None] * nxt                                    # the law after k rejections
                break
            P = nxt
            if wor:
                Q = Q.copy()
                Q[rows, x] = 0.0
                Q = Q / np.where(Q.sum(axis=1, keepdims=True) > 0, Q.sum(axis=1, keepdims=True), 1.0)
            rejected = np.concatenate([rejected, x[:, None]], axis=1)
        out[s:s + b] = L
    return out


def _cells(p, q):
    """Per order: (token order (V,), cell start offsets (CELLS,)) with cells of equal target mass."""
    res = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)
    keys = {"id": None, "target": -p, "ratio": -ratio}
    for name in ORDERS:
        order = np.arange(p.size) if keys[name] is None else np.argsort(keys[name], kind="stable")
        cdf = np.cumsum(p[order])
        starts = np.searchsorted(cdf, np.arange(CELLS) / CELLS * cdf[-1], side="right")
        starts = np.unique(np.concatenate([[0], np.minimum(starts, p.size - 1)]))
        res[name] = (order, starts)
    return res


def certify_prefix_law(verifier, p, q, k: int, *, n: int | None = None, tv: float | None = 1e-3,
                       alpha: float = 1e-3, seed=0) -> PrefixLawCertificate:
    """Test that a rule's output law at node ``(p, q)`` is ``p``, at any V, from its own step arithmetic.

    Parameters
    ----------
    verifier : resispec verifier
        With ``step_law`` (ResiSpec for without-replacement drafts) or a ``MassVerifier``; its
        ``drafting`` decides how the draft is updated after a rejection (``without_replacement``:
        the rejected token removed and ``q`` renormalised; ``iid``: unchanged).
    p, q : array_like, shape (V,), float64
        Target and draft laws (each sums to 1).
    k : int >= 1
        Candidates.
    n : int, optional
        Rejected-prefix paths.  Default: planned from a timed pilot of ``PILOT`` paths so that the
        detectable TV reaches ``tv`` (at least ``MIN_PATHS``).
    tv : float in (0, 1), default 1e-3
        Detectable TV to plan for; warns (``ExactnessWarning``) when ``n`` is too small for it.
    alpha : float, default 1e-3
    seed : int, SeedSequence or Generator

    Returns
    -------
    PrefixLawCertificate

    Raises
    ------
    TypeError
        A verifier without ``step_law`` that is not a ``MassVerifier``.
    ValueError
        Bad ``p`` / ``q`` (not laws of one V), ``k``, ``n``, ``tv``, ``alpha``;
        :class:`exactness.budget.BudgetError` when the planned paths would take over ``MAX_SECONDS``.
    RuntimeError
        The verifier's steps are inconsistent (accept probability not ``m(x) / q(x)`` of its own masses,
        non-finite masses): a defect, never a pass.
    """
    p = check_law(p, name="p")
    q = check_law(q, name="q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape (V,), got {p.shape} and {q.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1 (candidates), got {k!r}")
    k = int(k)
    drafting = getattr(verifier, "drafting", "iid")
    if drafting == "without_replacement" and k > int(np.count_nonzero(q > 0)):
        raise ValueError(f"k = {k} candidates drafted without replacement need at least k tokens with q > 0; "
                         f"q has {int(np.count_nonzero(q > 0))}")
    alpha = check_alpha(alpha)
    tv = check_tv(tv)
    if n is not None:
        n = check_n(n)
    step = _stepper(verifier)
    rng = as_generator(seed)
    wor = drafting == "without_replacement"
    cells = _cells(p, q)
    if n is not None and n < MIN_PATHS:
        raise ValueError(f"n = {n} paths are too few: the t-tests run on {BATCHES} batch means of at least 20 paths; "
                         f"use n >= {MIN_PATHS} (or n=None to plan it)")
    z = stats.t.ppf(1 - alpha / (2 * CELLS * len(ORDERS)), BATCHES - 1) + stats.t.ppf(POWER, BATCHES - 1)
    t0 = time.perf_counter()
    if n is None:
        pilot = _paths(step, p, q, k, PILOT, wor, rng)
        per = (time.perf_counter() - t0) / PILOT
        goal = 1e-3 if tv is None else tv
        sd = max(_cell_devs(pilot, p, cells, o).std(axis=0, ddof=1).max() for o in ORDERS)   # per path
        n = max(MIN_PATHS, math.ceil((CELLS / 2 * z * sd / goal) ** 2))     # goal = (CELLS / 2) z sd / sqrt(n)
        if per * n > MAX_SECONDS:
            from .budget import BudgetError

            raise BudgetError(f"tv = {goal:g} needs ~{n:,} rejected-prefix paths, ~{per * n / 3600:.2g} hours here "
                              f"(pilot: {per:.3g} s a path); ask for a larger tv, or give n")
        rest = _paths(step, p, q, k, max(0, n - PILOT), wor, rng)
        paths = np.concatenate([pilot, rest])[:n]
    else:
        paths = _paths(step, p, q, k, n, wor, rng)
    seconds = time.perf_counter() - t0
    if not np.all(np.isfinite(paths)):
        raise RuntimeError("the rule's paths hold NaN or inf: its masses or residuals are not finite")
    return _verdict(paths, p, cells, z, n, k, alpha, tv, seconds)


def _cell_devs(paths, p, cells, name):
    order, starts = cells[name]
    return np.add.reduceat(paths[:, order], starts, axis=1) - np.add.reduceat(p[order], starts)


def _verdict(paths, p, cells, z, n, k, alpha, tv, seconds) -> PrefixLawCertificate:
    n_cells = sum(cells[o][1].size for o in ORDERS)
    per_order, worst, pmin = {}, None, 1.0
    G = BATCHES
    for name in ORDERS:
        d = _cell_devs(paths, p, cells, name)
        bm = np.stack([b.mean(axis=0) for b in np.array_split(d, G)])     # batch means (G, cells)
        mean = bm.mean(axis=0)
        se = np.maximum(bm.std(axis=0, ddof=1) / math.sqrt(G), ROUNDOFF)  # s.e. of the cell mean, round-off floor
        pv = 2 * stats.t.sf(np.abs(mean / se), df=G - 1)                  # one-sample t-test per cell, G - 1 df
        j = int(np.argmin(pv))
        det = min(1.0, cells[name][1].size / 2 * z * float(se.max()))     # d / (cells / 2) >= z se
        per_order[name] = {"pvalue": float(pv[j]), "se_max": float(se.max()), "detectable_tv": det,
                           "cells": int(cells[name][1].size)}
        if pv[j] <= pmin:
            pmin = float(pv[j])
            worst = {"order": name, "cell": j, "deviation": float(mean[j]), "se": float(se[j])}
    pvalue = min(1.0, n_cells * pmin)                                     # Bonferroni over the cells
    detectable = max(o["detectable_tv"] for o in per_order.values())
    if tv is not None and detectable > tv:
        warnings.warn(f"certify_prefix_law: with n = {n:,} paths the detectable TV is {detectable:.3g} > requested "
                      f"{tv:g}; raise n (or leave n=None to plan it)", ExactnessWarning, stacklevel=3)
    tv_est = 0.5 * float(np.abs(paths.mean(axis=0) - p).sum())
    return PrefixLawCertificate(passed=bool(pvalue >= alpha), pvalue=pvalue, detectable_tv=detectable,
                                tv_estimate=tv_est, n=int(n), alpha=alpha, power=POWER, seconds=seconds,
                                details={"orders": per_order, "worst": worst, "V": int(p.size), "k": k})
