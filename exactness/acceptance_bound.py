"""The acceptance-bound check: a verifier that accepts more often than any exact rule can is biased.

At a node (target ``p``, draft ``q``, ``k`` candidates) no exact verifier accepts a candidate with probability
above alpha* (``resispec.analysis.optimal_acceptance``: ``1 - max_H [Q(all k drafts in H) - p(H)]``; Sun et al.
2023, arXiv 2310.15141; Hu et al. 2025, arXiv 2502.18779; ``docs/RESISPEC.md`` section 5), since an accepted
candidate is an emitted token equal to a candidate and a coupling of the candidates with ``p`` puts at most alpha*
on that event.  So the accepted count ``A`` of ``n`` independent draws tests H0: P(accept) <= alpha* one-sided,
``p = P(Binomial(n, alpha*) >= A)``, whatever the histograms look like: the excess is a first moment, its
standard error falls as ``1/sqrt(n)``, where a histogram needs ~1/TV^2 draws over many cells.

One check object (its name, when it applies, how it runs, what it detects at ``n`` and the ``n`` for an excess;
the mutant it must catch, :func:`too_generous`, lives here too) and one frozen result record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import rel_entr

from ._checks import is_int, is_number, passes_through

#: Slack added to alpha* (round-off of the O(V log V) bound; without-replacement k >= 3: the bound's certified
#: error 1e-4, ``resispec.wor_bound.alpha_star_wor``).
BOUND_SLACK = {"iid": 1e-9, "without_replacement": 1e-4}


#: Most draws :meth:`AcceptanceBound.n_for_excess` will plan (beyond it: ValueError, not an endless search).
MAX_PLANNED = 10**12


def _level(x, name: str) -> float:
    """``x`` as a float in (0, 1), else ValueError naming ``name``."""
    if not is_number(x) or not (math.isfinite(float(x)) and 0 < float(x) < 1):
        raise ValueError(f"{name} must be a number in (0, 1), got {x!r}")
    return float(x)


def _bound_value(x) -> float:
    """``bound`` as a float in [0, 1], else ValueError."""
    if not is_number(x) or not (math.isfinite(float(x)) and 0 <= float(x) <= 1):
        raise ValueError(f"bound must be an acceptance in [0, 1] (alpha* or the LP bound), got {x!r}")
    return float(x)


def _count(x, name: str, least: int = 0) -> int:
    """``x`` as an int >= ``least``, else ValueError naming ``name``."""
    if not is_int(x) or int(x) < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {x!r}")
    return int(x)


class _PlanError(ValueError):
    """A declared plan that is not a law."""


class _PlanRaised(Exception):
    """A declared plan that raised (its message: the exception's type and message)."""


#: Slack added to the LP optimum of ``optimal_accepted`` per drafted token: the LP solver (HiGHS, dual simplex)
#: returns optima up to ~4e-8 below block verification's exact E[accepted] on badly scaled pairs (breaker: 51 of
#: 5,791 random pairs), above its reported tolerance; an excess smaller than this is not convicted.
LP_SLACK = 1e-6


def lp_bound(b) -> float:
    """The bound an exact rule's E[accepted] must not exceed, from ``optimal_accepted``'s result ``b``: its optimum
    plus ``max(10 x its tolerance, LP_SLACK x max(1, optimum))``."""
    return float(b.expected_accepted + max(10 * b.tolerance, LP_SLACK * max(1.0, b.expected_accepted)))


#: Largest probability-weighted law error of a declared plan (sum over drafted chains / trees of the chance of the
#: drafts times the plan's largest deviation there from a law): below it the plan's rounding cannot move its
#: E[accepted] across the bound (``LP_SLACK``); traversal's plan is off by 3e-4 on trees of probability 6e-14.
PLAN_WEIGHTED_TOL = 1e-8


def _exact_form(plan_fn, plan_attr: str, rows: int, V: int, where: tuple, analyse, chance) -> dict:
    """The sampling-free bound check: ``analyse(checked)`` (an exact analysis reading ``checked.<plan_attr>``: the
    rule's ``plan_fn``, checked at every draft to be a law of ``rows`` rows over ``V`` tokens by
    ``exactness.plan_check.law_problem``: its structure exactly, its sums and signs up to rounding weighted by the
    drafts' probability ``chance(*args)``, in all at most :data:`PLAN_WEIGHTED_TOL`) against the LP bound at
    ``where`` (:func:`lp_bound` of ``optimal_accepted(*where)``).  Returns the dict of
    :meth:`AcceptanceBound.exact_path`."""
    from resispec.pathlevel.base import PathPlan
    from resispec.pathlevel.bound import optimal_accepted

    from .plan_check import LAW_TOL, law_problem

    try:
        b, no_bound = optimal_accepted(*where), None
    except ValueError as exc:                        # the LP: too large here; the plan's own law is still checked
        b, no_bound = None, f"no bound at this size: {exc}"
    off = {"total": 0.0, "worst": 0.0, "where": ""}

    def checked_plan(*args):                         # the rule's plan, checked to be a law at every draft
        try:
            pl = plan_fn(*args)
        except BaseException as exc:       # the rule's own plan raised: the subject misbehaved
            if passes_through(exc):             # Ctrl-C, the harness's time limit
                raise
            raise _PlanRaised(f"{type(exc).__name__}: {exc}") from exc
        at = np.asarray(args[-1]).tolist()
        stop, laws, why = law_problem(pl, rows, V, tol=math.inf, range_tol=math.inf)   # structure: exact
        if why:
            raise _PlanError(f"{why.removeprefix('not a law: ')} at drafts {at}")
        # sums, signs and range: up to rounding, weighted by the drafts' chance (its effect on any expectation;
        # traversal's own plan has entries of -0.03 and 8.5e4 on trees of chance ~1e-14)
        dev = max(abs(stop.sum() - 1), float(np.abs(laws.sum(axis=1) - 1).max()), -min(stop.min(), laws.min()),
                  max(stop.max(), laws.max()) - 1)
        if dev > LAW_TOL:
            w = chance(*args) * dev
            off["total"] += w
            if w >= off["worst"]:
                off.update(worst=w, where=f"off a law by {dev:.3g} (stop sums to {stop.sum():.9g}) at drafts {at}")
        stop, laws = np.clip(stop, 0, 1), np.clip(laws, 0, 1)                 # analysed as the law it rounds to:
        with np.errstate(invalid="ignore", divide="ignore"):                  # (all-zero rows: nan, an error below)
            return PathPlan(stop / stop.sum(), laws / laws.sum(axis=1, keepdims=True))   # a deflated stop hides nothing

    checked = type("Checked", (), {plan_attr: staticmethod(checked_plan)})()
    try:
        a = analyse(checked)
    except _PlanError as exc:
        return {"error": f"its declared plan is not a law: {exc}"}
    except _PlanRaised as exc:
        return {"error": f"its declared plan raised {exc}"}
    except BaseException as exc:           # the analysis of what the plan returned failed: its failure
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        return {"error": f"its declared plan raised {type(exc).__name__}: {exc}"}
    if off["total"] > PLAN_WEIGHTED_TOL:
        return {"error": f"its declared plan is not a law: off by {off['total']:.3g} in all, weighted by the drafts' "
                         f"probability (over {PLAN_WEIGHTED_TOL:g}; rounding of {LAW_TOL:g} is allowed per draft); "
                         f"the worst: {off['where']}"}
    if not (math.isfinite(a.expected_accepted) and math.isfinite(a.tv)):
        return {"error": f"its declared plan is not a law: its exact analysis gives E[accepted] = "
                         f"{a.expected_accepted}, TV = {a.tv}"}
    if b is None:                                    # exact_law still runs (PathCertificate: "exact_tv" given)
        return {"skipped": no_bound, "expected_accepted": a.expected_accepted, "exact_tv": a.tv}
    bound = lp_bound(b)                              # LP optimum plus its solver slack
    out = {"expected_accepted": a.expected_accepted, "bound": bound, "exact_tv": a.tv,
           "exceeded": bool(a.expected_accepted > bound)}
    out["reason"] = (f"accepts more than any exact rule can: its plan's E[accepted] = {a.expected_accepted:.10g} "
                     f"> bound {bound:.10g}" if out["exceeded"] else
                     f"its plan's E[accepted] = {a.expected_accepted:.10g} <= bound {bound:.10g}")
    return out


def _chain_chance(p, q, drafts) -> float:
    """Probability of iid-drafted chain ``drafts`` (L,) under the draft rows ``q`` (L, V): prod_i q_i(d_i)."""
    q = np.asarray(q, dtype=np.float64)
    d = np.asarray(drafts, dtype=np.int64)
    return float(np.prod(q[np.arange(d.size), d]))


def _tree_chance(p, q, parent, tokens) -> float:
    """Probability of an iid-drafted tree: prod over drafted nodes n of q[row of n's parent](tokens[n]) (``q``
    (N+1, V) by tree row, ``parent`` (N,) the parent node ids, -1 the root)."""
    q = np.asarray(q, dtype=np.float64)
    rows = np.asarray(parent, dtype=np.int64) + 1
    return float(np.prod(q[rows, np.asarray(tokens, dtype=np.int64)]))


@dataclass(frozen=True)
class AcceptanceBoundResult:
    """One run of :class:`AcceptanceBound` (a frozen record, scipy.stats style).

    Attributes
    ----------
    accepted, n : int            draws that accepted a candidate; draws
    acceptance : float           ``accepted / n``
    se : float                   its standard error ``sqrt(a (1 - a) / n)``
    bound : float                alpha* plus :data:`BOUND_SLACK` (the largest acceptance of an exact rule)
    pvalue : float               ``P(Binomial(n, bound) >= accepted)``
    detectable_excess : float    smallest acceptance - bound found with probability ``power`` at level ``alpha``
    alpha, power : float
    """

    accepted: int
    n: int
    acceptance: float
    se: float
    bound: float
    pvalue: float
    detectable_excess: float
    alpha: float
    power: float

    @property
    def exceeded(self) -> bool:
        """The test rejects H0 (acceptance <= bound) at ``alpha``."""
        return self.pvalue < self.alpha

    def line(self) -> str:
        """``accepts more than any exact rule can: E[accepted] = a +- s.e. > bound b`` (or within it)."""
        core = f"E[accepted] = {self.acceptance:.4g} +- {self.se:.2g}"
        if self.exceeded:
            return f"accepts more than any exact rule can: {core} > bound {self.bound:.4g}"
        where = (f"within the bound {self.bound:.4g}" if self.acceptance <= self.bound else
                 f"above the bound {self.bound:.4g} but not significantly (p = {self.pvalue:.3g} >= alpha "
                 f"{self.alpha:g})")
        if not math.isfinite(self.detectable_excess):
            return f"{core} {where} (no excess can be detected at n = {self.n:,}: raise n)"
        return f"{core} {where} (detects an excess >= {self.detectable_excess:.3g} at n = {self.n:,})"

    def as_dict(self) -> dict:
        """The record as ``Certificate.details["acceptance_bound"]`` keeps it (``reason``: :meth:`line`)."""
        return {**asdict(self), "reason": self.line()}


class AcceptanceBound:
    """Check: the sampled acceptance against alpha* (module docstring).

    Applies when the verifier reports which candidate it accepted (``.accepted``) and the bound is computable for
    its drafting; otherwise :meth:`skip_reason` says why.  Detects: any verifier whose acceptance exceeds alpha* by
    at least :meth:`detectable_excess` ``(n, bound)``, with probability ``power`` (a biased rule that accepts no
    more than alpha* is left to the histogram checks).
    """

    name = "acceptance_bound"
    mutant = "too_generous"

    @staticmethod
    def bound(p, q, k: int, drafting: str) -> float:
        """alpha* for ``drafting`` (``"any"`` is certified under iid candidates) plus :data:`BOUND_SLACK`.

        ``p``, ``q``: (V,) float64 laws of one node, or ``p`` a one-node ``resispec._validation.Laws`` (checked
        at the door) and ``q`` None.  Raises ``ValueError`` as ``optimal_acceptance`` does.
        """
        from resispec.analysis import optimal_acceptance

        d = "iid" if drafting == "any" else drafting
        return min(1.0, float(optimal_acceptance(p, q, k, drafting=d)) + BOUND_SLACK[d])  # alpha* + slack

    @staticmethod
    def skip_reason(accepted_known: bool, drafting: str) -> str | None:
        """Why the check cannot run (None: it runs)."""
        if not accepted_known:
            return "needs the accepted index of every draw (verify returned no usable .accepted)"
        if drafting not in ("iid", "any", "without_replacement"):
            return f"no acceptance bound for drafting {drafting!r}"
        return None

    @staticmethod
    def _critical(n: int, bound: float, alpha: float) -> int:
        """Smallest accepted count ``c`` with ``P(Binomial(n, bound) >= c) < alpha`` (``n + 1``: none)."""
        from scipy.stats import binom

        c = int(binom.isf(alpha, n, bound)) + 1                    # sf(c - 1) = P(X >= c) <= alpha
        while c <= n and binom.sf(c - 1, n, bound) >= alpha:       # strict: reject only when p < alpha
            c += 1
        return c

    @classmethod
    def detectable_excess(cls, n: int, bound: float, alpha: float = 1e-3, power: float = 0.99) -> float:
        """Smallest ``a - bound`` such that a verifier accepting with probability ``a`` fails with probability
        ``power`` in ``n`` draws (``inf`` when no count of ``n`` draws can fail the test)."""
        from scipy.optimize import brentq
        from scipy.stats import binom

        n, bound = _count(n, "n", 1), _bound_value(bound)
        alpha, power = _level(alpha, "alpha"), _level(power, "power")
        c = cls._critical(n, bound, alpha)
        if c > n:
            return math.inf
        if binom.sf(c - 1, n, bound) >= power:
            return 0.0
        a = brentq(lambda x: binom.sf(c - 1, n, x) - power, bound, 1.0, xtol=1e-12)  # P(X >= c | a) = power
        return float(a - bound)

    @classmethod
    def n_for_excess(cls, excess: float, bound: float, alpha: float = 1e-3, power: float = 0.99) -> int:
        """Fewest draws at which an excess of ``excess`` over ``bound`` is detected with probability ``power``
        (exact binomial; ValueError when that is more than :data:`MAX_PLANNED` draws)."""
        from scipy.stats import norm

        bound, alpha, power = _bound_value(bound), _level(alpha, "alpha"), _level(power, "power")
        if isinstance(excess, (bool, np.bool_)) or not isinstance(excess, (int, float, np.integer, np.floating)) \
                or not (0 < excess <= 1 - bound):
            raise ValueError(f"excess must lie in (0, 1 - bound = {1 - bound:.4g}], got {excess!r}")
        a = bound + excess
        za, zb = norm.isf(alpha), norm.isf(1 - power)
        start = ((za * math.sqrt(bound * (1 - bound)) + zb * math.sqrt(a * (1 - a))) / excess) ** 2  # normal approx.
        if start > MAX_PLANNED:
            raise ValueError(f"an excess of {excess:g} over {bound:g} needs ~{start:.3g} draws, over "
                             f"MAX_PLANNED = {MAX_PLANNED:.0e}: give a larger excess")
        ok = lambda m: cls.detectable_excess(m, bound, alpha, power) <= excess   # noqa: E731
        hi = max(1, math.ceil(start))
        while not ok(hi):                                   # up from the normal start until it detects
            hi = math.ceil(hi * 1.25) + 1
        lo = max(0, hi // 2)
        while lo > 0 and ok(lo):                            # down until it does not
            hi, lo = lo, lo // 2
        while hi - lo > 1:                                  # the fewest n in (lo, hi] (monotone in n, up to the
            mid = (lo + hi) // 2                            # binomial's discreteness)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    def run(self, accepted: int, n: int, bound: float, alpha: float = 1e-3,
            power: float = 0.99) -> AcceptanceBoundResult:
        """The test on ``accepted`` of ``n`` draws against ``bound`` (from :meth:`bound`)."""
        from scipy.stats import binom

        n = _count(n, "n", 1)
        accepted = _count(accepted, "accepted")
        if accepted > n:
            raise ValueError(f"accepted ({accepted}) cannot exceed n ({n}) draws")
        bound, alpha, power = _bound_value(bound), _level(alpha, "alpha"), _level(power, "power")
        a = accepted / n
        pv = float(binom.sf(accepted - 1, n, bound)) if accepted > 0 else 1.0   # P(Binomial(n, bound) >= A)
        return AcceptanceBoundResult(int(accepted), int(n), float(a), float(math.sqrt(a * (1 - a) / n)),
                                     float(bound), min(1.0, pv), self.detectable_excess(n, bound, alpha, power),
                                     float(alpha), float(power))

    @staticmethod
    def run_mean(accepted: np.ndarray, bound: float, alpha: float = 1e-3, power: float = 0.99, *,
                 top: int) -> AcceptanceBoundResult:
        """The test for a rule keeping several drafts a step (chains, trees): ``accepted`` (n,) int64, the drafts
        kept per step, each in ``[0, top]`` (``top``: L for a chain, the depth for a tree); H0: E[accepted] <=
        ``bound`` (``resispec.pathlevel.optimal_accepted``).

        One-sided Chernoff-Hoeffding test, valid for ANY law on ``[0, top]`` whatever its variance (Hoeffding
        1963, JASA 58, Theorem 1 with the Bernoulli law extremal): ``p = exp(-n KL(mean / top || bound / top))``
        for a sample mean above the bound (KL the Bernoulli relative entropy), else 1.  A z-test on the sample's
        own standard deviation failed exact rules whose draft is close to the target (nearly every step keeps
        all L drafts: sd 0, p 0; breaker).  ``detectable_excess``: the excess over ``bound`` that the test finds
        with probability ``power`` when the drafts kept follow the two-point law on ``{0, top}`` (exact binomial;
        the largest variance a law on ``[0, top]`` with that mean has; laws with less spread are typically found
        at smaller excesses); ``inf`` when even a mean of ``top`` cannot reject at this ``n``.  ``n`` >= 100.
        """
        from scipy.optimize import brentq
        from scipy.stats import binom

        if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, float, np.integer, np.floating)) or \
                not (math.isfinite(float(bound)) and bound >= 0):
            raise ValueError(f"bound must be a finite expected accepted length >= 0, got {bound!r}")
        top = _count(top, "top", 1)
        bound, alpha, power = float(bound), _level(alpha, "alpha"), _level(power, "power")
        x = np.asarray(accepted)
        if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer) or (x.size and (x.min() < 0 or x.max() > top)):
            raise ValueError(f"accepted must be a (n,) array of integers in [0, top = {top}] (drafts kept per step), "
                             f"got dtype {x.dtype}, shape {x.shape}")
        x = x.astype(np.float64)
        n = int(x.size)
        if n < 100:
            raise ValueError(f"the acceptance-bound test on a mean needs n >= 100 steps, got {n}")
        mean, sd = float(x.mean()), float(x.std(ddof=1))
        se = sd / math.sqrt(n)                                                   # standard error of the mean
        b = min(bound / top, 1.0)                                                # the bound as a Bernoulli mean

        def tail(m: float) -> float:                   # Hoeffding: P(mean >= m | E <= bound) <= exp(-n KL(m | b))
            a = m / top
            return math.exp(-n * float(rel_entr(a, b) + rel_entr(1 - a, 1 - b)))   # KL(a || b), Bernoulli

        pv = 1.0 if (mean <= bound or b >= 1) else tail(mean)
        det = math.inf
        if b < 1 and tail(top) < alpha:                 # else not even a mean of top rejects at this n
            # power at the two-point law on {0, top} (the largest variance a law on [0, top] with that mean has):
            # the mean is top K / n, K ~ Binomial(n, mu / top); it rejects from the smallest K with tail < alpha
            k_min = next(k for k in range(int(math.floor(n * b)), n + 1) if tail(top * k / n) < alpha)
            reach = lambda mu: float(binom.sf(k_min - 1, n, mu / top)) - power   # noqa: E731  P(K >= k_min) - power
            if reach(top * (1 - 1e-12)) >= 0:
                det = brentq(reach, bound, top * (1 - 1e-12)) - bound
        return AcceptanceBoundResult(int(x.sum()), n, mean, se, float(bound), pv, float(det), float(alpha),
                                     float(power))

    @staticmethod
    def exact_path(verifier, pair, L: int, context=(), plan_fn=None) -> dict:
        """Sampling-free form for a chain rule that declares its plan (``verifier.plan(p, q, drafts) ->
        PathPlan``): the plan's exact E[accepted] (``resispec.pathlevel.analyse_path``) against the LP bound
        (``resispec.pathlevel.optimal_accepted`` plus its tolerance).

        Returns a dict: ``expected_accepted``, ``bound``, ``exact_tv`` (the plan's horizon TV), ``exceeded``,
        ``reason`` (one line); or ``skipped`` (why: the enumeration or the LP too large at this size); or
        ``error`` (the declared plan is not a law: negative, non-finite, not summing to 1 -- a FAIL).
        ``plan_fn``: the plan to read (default ``verifier.plan``; the certificates pass a shared
        ``exactness.plan_check.PlanMemo``).
        """
        from resispec.pathlevel.analysis import MAX_CELLS, analyse_path, check_pair

        V = check_pair(pair, L)
        if V ** (L + 1) > MAX_CELLS:
            return {"skipped": f"V^(L+1) = {V ** (L + 1):,} outcomes exceed the exact enumeration's {MAX_CELLS:,}"}
        return _exact_form(plan_fn or verifier.plan, "plan", L + 1, V, (pair, (1,) * L, context),
                           lambda checked: analyse_path(checked, pair, L, context), _chain_chance)

    @staticmethod
    def exact_tree(verifier, pair, branching, context=(), plan_fn=None) -> dict:
        """As :meth:`exact_path` for a tree rule that declares ``plan_tree(p (N+1, V), q (N+1, V), parent (N,),
        tokens (N,)) -> PathPlan(stop (N+1,), laws (N+1, V))`` (float64; row ``n + 1`` drafted node ``n``) on
        iid-drafted trees of shape ``branching`` (a tuple of int, ``N`` drafted nodes): the plan's exact
        E[accepted] in tokens (``resispec.pathlevel.analyse_tree``, traversal verification after Weng et al. 2025,
        arXiv 2505.12398) against the LP bound over exact tree rules.  Returns the dict of :meth:`exact_path`.
        Raises TypeError / ValueError for a bad ``pair`` or ``branching`` (``check_pair``)."""
        from resispec.pathlevel.analysis import MAX_CELLS, analyse_tree, check_pair, tree_nodes

        D = len(branching)
        V = check_pair(pair, D)
        N = len(tree_nodes(branching)[0]) - 1
        if V ** (N + D + 1) > 10 * MAX_CELLS:
            return {"skipped": f"V^(N + D + 1) = {V}^{N + D + 1} drafted trees and outcomes exceed the exact "
                               f"enumeration's {10 * MAX_CELLS:,}"}
        return _exact_form(plan_fn or verifier.plan_tree, "plan_tree", N + 1, V, (pair, tuple(branching), context),
                           lambda checked: analyse_tree(checked, pair, tuple(branching), context), _tree_chance)

    def run_node(self, stop_counts: np.ndarray, p, q, k: int, drafting: str, alpha: float = 1e-3,
                 power: float = 0.99) -> AcceptanceBoundResult:
        """From the (stop, token) counts of a node's draws: ``stop_counts`` ((k + 1) V,) or (k + 1, V) int64,
        row ``k`` the residual draws; ``p``, ``q`` as :meth:`bound` takes them."""
        k = _count(k, "k", 1)
        c = np.asarray(stop_counts)
        if not np.issubdtype(c.dtype, np.integer) or (c.size and c.min() < 0) or c.size % (k + 1) or c.size == 0:
            raise ValueError(f"stop_counts must be non-negative integer counts of shape ((k + 1) V,) or (k + 1, V) "
                             f"with k = {k}, got dtype {c.dtype}, shape {c.shape}")
        by_stop = c.reshape(k + 1, -1)
        V = np.asarray(p.p if q is None and hasattr(p, "p") else p).shape[-1]
        if by_stop.shape[1] != V:
            raise ValueError(f"stop_counts have {by_stop.shape[1]} tokens per stop, p has V = {V}")
        n = int(by_stop.sum())
        if n == 0:
            raise ValueError("stop_counts are all zero: no draws to test")
        return self.run(n - int(by_stop[k].sum()), n, self.bound(p, q, k, drafting), alpha, power)


#: The check instance the routes use.
ACCEPTANCE_BOUND = AcceptanceBound()


def _generous_chain(p, q, c, factor):
    """The rrs walk accepting with ``min(1, factor p_i / q)``: ``(a (B, k), residual (B, V))`` float64."""
    from resispec.verifiers.base import reject_update

    B, k = c.shape
    rows, p_i, acc = np.arange(B), p, []
    for i in range(k):
        with np.errstate(divide="ignore", invalid="ignore"):      # q = 0: never a candidate
            ratio = np.clip(factor * p_i / q, 0.0, 1.0)             # min(1, factor p_i / q): factor 1 is rrs
        acc.append(ratio[rows, c[:, i]])
        p_i = reject_update(p_i, ratio * q)                         # norm((p_i - min(factor p_i, q))_+)
    return np.stack(acc, axis=1), p_i


def too_generous(factor: float = 1.1):
    """The mutant this check must catch: recursive rejection (SpecInfer, Miao et al. 2024, arXiv 2305.09781) that
    accepts candidate ``x`` with ``min(1, factor p_i(x) / q(x))`` instead of ``min(1, p_i(x) / q(x))``.

    For ``factor > 1`` it accepts more than alpha* wherever some token has ``p < q`` (at ``k = 1``:
    ``sum min(factor p, q) > sum min(p, q) = alpha*``) and its output law is not ``p``.  Returns a
    ``resispec.Verifier`` (iid drafts, with a chain: the exact checks see the excess without sampling).
    """
    from resispec.verifiers.base import Verifier

    class TooGenerous(Verifier):
        name = "too_generous"
        drafting = "iid"
        bug = f"accept with min(1, {factor:g} p/q) (too generous)"

        def _chain(self, p, q, c):
            return _generous_chain(p, q, c, factor)

        def __repr__(self):
            return f"mutant:too_generous(factor={factor:g})"

    return TooGenerous()


def too_generous_block(factor: float = 1.2):
    """Block verification (Sun et al. 2024, arXiv 2403.10444) whose final acceptance is ``min(1, factor w_L)``
    where block uses ``w_L``: it keeps all L drafts more often than the LP bound over exact rules allows, and its
    horizon law is not the target's.  Returns a ``resispec.pathlevel.PathVerifier`` (with a plan)."""
    from resispec.pathlevel.block import BlockVerifier

    class TooGenerousBlock(BlockVerifier):
        name = "too_generous_block"

        def _hazards(self, w, s):
            h = super()._hazards(w, s)
            h[-1] = min(1.0, factor * w[-1])                        # BUG: h_L = min(1, factor w_L), block: w_L
            return h

    return TooGenerousBlock()
