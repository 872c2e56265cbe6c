"""Monte Carlo certification of a path-level verifier on a draft/target pair.

:func:`certify_path` runs whole decoding steps -- draft ``L`` tokens from the draft model, verify
them with the rule's own :meth:`~resispec.pathlevel.PathVerifier.verify`, continue the emitted
``tau + 1`` tokens with the target up to ``L + 1`` tokens -- and tests the counts of the
``V^(L+1)`` outcomes against the target's law of ``L + 1`` tokens (chi-square / G-test with
pooling, :func:`exactness.gof.gof_test`).

What it detects: any bias of the law of the first ``L + 1`` output tokens (the exactness
statement of ``docs/pathlevel.md``), in the plan or in the sampler, whose chi-square
non-centrality ``n sum (h - p)^2 / p`` is large; a planted bug of ``exactness.path_mutants``
with horizon TV >= 0.02 on the test pairs is flagged at n = 4000 (``tests/test_pathlevel.py``).
What it cannot: biases that vanish in the law of ``L + 1`` tokens (e.g. a wasted bonus token).
The exact check is :func:`resispec.pathlevel.analyse_path` (TV by enumeration).

Every :class:`PathCertificate` states what it could detect: ``detectable_tv``, the smallest horizon TV
flagged with probability ``power`` (0.99) at ``alpha / sampled``, Holm's first level over the sampled checks that
ran (:func:`exactness.power.detectable_tv` on the pooled df).  Refused up front, never passed: an ``alpha`` outside (0, 1), an ``n`` so small that pooling
leaves the test no degree of freedom (it could not fail).  A rule that misbehaves -- ``verify`` raising, a
result that is no valid step (``accepted`` outside ``0..L``, a token outside ``[0, V)``, kept nodes that are no
root path of the tree) -- is a FAIL certificate whose ``cause`` names the method, never a refusal.  A rule that
declares its plan also has it checked against its sampler (:mod:`exactness.plan_check`) and its plan's
``E[accepted]`` against the LP bound without sampling (:mod:`exactness.acceptance_bound`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from resispec.pathlevel.analysis import check_pair, continuation, prefix_laws, tree_nodes
from resispec.sampling import _inverse_cdf
from resispec.trees import MAX_TREE_NODES

from .limits import DEFAULT_TIME_LIMIT
from ._checks import BudgetError, SubjectError, as_generator, check_alpha, check_n, passes_through, subject_call
from .certificate import check_min_expected, no_df_message
from ._timeout import check_timeout
from .gof import MIN_EXPECTED, pool_cells, tv_bounds
from .path_checks import PLAN_TV_TOL, PathRun, run_checks
from .power import detectable_tv

#: Power at which ``detectable_tv`` is stated (as ``exactness.pit`` / ``exactness.prefix_law``).
POWER = 0.99


@dataclass(frozen=True)
class PathCertificate:
    """Outcome of :func:`certify_path` / :func:`certify_tree_rule` (chi-square of the horizon outcomes).

    Attributes
    ----------
    passed : bool
        ``pvalue >= alpha``.
    pvalue : float
        Smallest Holm-adjusted p-value of :attr:`checks`: the Pearson chi-square of the pooled horizon outcomes
        (0 when an outcome of target probability 0 was sampled) and the acceptance-bound check.
    n : int
        Decoding steps sampled.
    counts : ndarray, (V^(L+1),) int64
        Count per horizon outcome (row-major flat index).
    statistic : float
        Pearson chi-square statistic (``inf`` for an impossible outcome).
    df : int
        Degrees of freedom after pooling (pooled cells - 1; always >= 1 when the target has two or more
        outcomes: a test with none is refused).
    detectable_tv : float
        Smallest horizon TV detected with probability ``power`` at ``alpha`` by ``n`` steps
        (:func:`exactness.power.detectable_tv`); >= 1 means a pass is no evidence.
    alpha, power : float
        Test level and the power ``detectable_tv`` is stated at.
    tv_estimate, tv_upper : float
        Plug-in horizon TV and its ``1 - alpha`` upper bound (:func:`exactness.gof.tv_bounds`).
    acceptance_bound : dict or None
        The acceptance-bound check (``exactness.acceptance_bound``): the mean drafts kept per step, its standard
        error, the bound (``resispec.pathlevel.optimal_accepted``: the LP over all exact rules), p-value,
        detectable excess and ``reason`` (its one line); None where it did not run (``skipped`` says why).
    skipped : dict
        Check name -> why it did not run.
    exact_bound : dict or None
        A rule that declares its plan (``plan``): the plan's exact E[accepted] against the same bound, without
        sampling (``exactness.acceptance_bound.AcceptanceBound.exact_path``: ``expected_accepted``, ``bound``,
        ``exact_tv``, ``exceeded``, ``reason``; ``error`` when the plan is not a law, a FAIL).
    plan_sampler : dict or None
        A rule that declares its plan (``plan`` / ``plan_tree``): does its sampler follow it
        (``exactness.plan_check``: the PIT of each sampled step's outcome under the plan, and with ``uniforms=``
        the coupled draw; ``reason`` its one line)?  None where it did not run (``skipped`` says why).
    cause : str or None
        The rule misbehaved (``verify`` / ``verify_tree`` raised, or returned no valid step): the FAIL's cause,
        naming the method; ``n`` is then the steps completed before it and ``counts`` theirs.
    """

    passed: bool
    pvalue: float
    n: int
    counts: np.ndarray
    statistic: float
    df: int
    detectable_tv: float
    alpha: float
    power: float
    tv_estimate: float
    tv_upper: float
    raw_checks: dict = field(default_factory=dict)
    acceptance_bound: dict | None = None
    skipped: dict = field(default_factory=dict)
    exact_bound: dict | None = None
    plan_sampler: dict | None = None
    cause: str | None = None
    #: Sampled checks Holm combines (horizon, acceptance_bound, plan_sampler that ran): ``detectable_tv`` is stated
    #: at ``alpha / sampled``, Holm's first level (it was stated at ``alpha``: power 0.98, not 0.99, under Holm).
    sampled: int = 1

    @property
    def outcome(self) -> str:
        """``"PASS"`` or ``"FAIL"`` (the shared names: ``exactness.result.VOCABULARY``)."""
        return "PASS" if self.passed else "FAIL"

    @property
    def checks(self) -> dict:
        """Raw p-values: ``horizon`` (the chi-square of the horizon outcomes), ``acceptance_bound`` (the mean
        drafts kept per step against the LP bound over all exact rules), ``plan_sampler``, and the deterministic
        ``exact_bound`` (the plan's E[accepted] against the bound) and ``exact_law`` (the plan's horizon law against
        the target's, TV within ``PLAN_TV_TOL``) where they ran; ``subject`` (0.0) when the rule misbehaved.
        The verdict is Holm over the sampled checks, and a FAIL of a deterministic one."""
        return dict(self.raw_checks) or {"horizon": float(self.pvalue)}

    def summary(self) -> str:
        """The verdict in one line of at most 120 columns (``exactness.result.SUMMARY_WIDTH``): :meth:`report` cut
        at a word to fit, ending ``... (more: .report())``."""
        from .result import fit_line

        return fit_line(self.report())

    def __str__(self) -> str:
        return self.report()

    def report(self) -> str:
        """The whole verdict in one line.  A pass: the Holm-combined p-value over the checks, the horizon
        chi-square (df), TV estimate, detectable TV at alpha and power, n.  A FAIL: ``"FAIL: <check>: <why>"`` for
        each failing check in the order exact_bound, acceptance_bound, plan_sampler, horizon (its chi-square only
        when it failed), and n."""
        if self.cause is not None:
            if self.cause.startswith("time_limit"):
                return f"FAIL: {self.cause}"
            return f"FAIL: subject: {self.cause} (the rule misbehaved after {self.n:,} steps)"
        stat = f"{self.statistic:.4g}" if math.isfinite(self.statistic) else str(self.statistic)
        holm = f" / {self.sampled} (Holm)" if self.sampled > 1 else ""
        horizon = (f"horizon chi2 = {stat} (df {self.df}), TV ~ {self.tv_estimate:.3g} (<= {self.tv_upper:.3g}), "
                   f"detectable TV {self.detectable_tv:.3g} at alpha {self.alpha:g}{holm}, power {self.power:g}")
        if self.passed:                # what a pass is worth first: the summary cuts the rest to 120 columns
            if self.detectable_tv >= 1:
                return (f"NO BIAS DETECTED but no power (detectable TV >= 1: a pass here is no evidence of "
                        f"exactness; raise n = {self.n:,}): p = {self.pvalue:.3g}; {horizon}")
            return (f"NO BIAS DETECTED (detectable TV {self.detectable_tv:.3g} at power {self.power:g}, alpha "
                    f"{self.alpha:g}{holm}; n = {self.n:,}): p = {self.pvalue:.3g} (Holm over the sampled checks), "
                    f"TV ~ {self.tv_estimate:.3g} (<= {self.tv_upper:.3g}), horizon chi2 = {stat} (df {self.df})")
        b, e, ps = self.acceptance_bound, self.exact_bound or {}, self.plan_sampler
        why = []
        if e.get("error") or e.get("exceeded"):
            why.append(f"exact_bound: {e.get('error') or e['reason']}")
        if self.raw_checks.get("exact_law") == 0.0:
            why.append(f"exact_law: its declared plan's horizon law is TV {e['exact_tv']:.3g} from the target's "
                       f"(exact, over {PLAN_TV_TOL:g}): the plan is not exact")
        if b is not None and b["pvalue"] < self.alpha:
            why.append(f"acceptance_bound: {b['reason']}")
        if ps is not None and ps["pvalue"] < self.alpha:
            why.append(f"plan_sampler: {ps['reason']}")
        if self.checks.get("horizon", 1.0) < self.alpha or not why:
            why.append(f"horizon: p = {self.checks.get('horizon', self.pvalue):.3g}, {horizon}")
        return f"FAIL: {'; '.join(why)}; n = {self.n:,}"


def _method(verifier, name: str, what: str):
    """``verifier.<name>`` if callable, else a TypeError naming the method the certificate needs; when reading it
    raises (a property of the rule), a stand-in that raises :class:`SubjectError` naming that when called (a
    FAIL of the rule, never the caller's bad input)."""
    try:
        f = getattr(verifier, name, None)
    except BaseException as exc:
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        cause = f"reading {type(verifier).__name__}.{name} raised {type(exc).__name__}: {exc}"

        def broken(*args, **kwargs):
            raise SubjectError(cause)

        return broken
    if not callable(f):
        raise TypeError(f"verifier must have a {name}(...) method ({what}); {type(verifier).__name__} has none")
    return f


def _context(context, V: int) -> tuple[int, ...]:
    """``context`` (a sequence of token ids in ``[0, V)``) as a tuple of int; TypeError / ValueError naming it."""
    if isinstance(context, (str, bytes)) or not hasattr(context, "__iter__"):
        raise TypeError(f"context must be a sequence of token ids (e.g. () or (3, 1)), got {context!r}")
    ids = list(context)
    for t in ids:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"context must hold integer token ids, got {t!r} in {context!r}")
        if not 0 <= t < V:
            raise ValueError(f"context token {t} is outside the pair's vocabulary [0, {V})")
    return tuple(int(t) for t in ids)


def _int_in(x, lo: int, hi: int, what: str) -> int:
    """``x`` as an int in ``[lo, hi]``, else :class:`SubjectError` naming ``what`` (the rule returned it: a FAIL)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not lo <= x <= hi:
        raise SubjectError(f"{what} must be an integer in [{lo}, {hi}], got {x!r}")
    return int(x)


def _tree_shape(branching) -> tuple[int, ...]:
    """``branching`` (``"2,1"``, (2, 1), [2, 1] or a TreeShape, iid drafting) as a tuple of ints >= 1."""
    from resispec.trees import TreeShape

    if branching is None or not isinstance(branching, (str, tuple, list, TreeShape)):
        raise TypeError(f"branching must be a tree shape such as '2,1' or (2, 1), got {branching!r}")
    try:
        shape = TreeShape.parse(branching if isinstance(branching, (str, TreeShape)) else tuple(branching))
    except (TypeError, ValueError) as e:
        raise type(e)(f"branching {branching!r} is not a tree shape: {e}") from None
    if shape.drafting != "iid":
        raise ValueError(f"branching {branching!r} drafts without replacement; the tree certificate drafts iid "
                         "siblings (the tree rules are exact for iid trees): drop the 'wor:' prefix")
    return shape.branching


def _pooled_df(target: np.ndarray, n: int, min_expected: float, what: str) -> int:
    """Degrees of freedom of :func:`exactness.gof.gof_test` at ``n`` (pooling of ``n * target``); ValueError
    when it is 0 although the target has two or more outcomes (the test could not fail)."""
    cell = pool_cells(n * target, min_expected)
    df = int(cell.max()) if np.any(cell >= 0) else 0
    if df == 0 and np.count_nonzero(target > 0) > 1:
        raise BudgetError("n is too small: " + no_df_message(target, n, min_expected, what))
    return df


#: Why the sampling-free bound check (``exact_bound``) is skipped for a rule without a declared plan.
NO_PLAN = ("the rule declares no {plan}: its E[accepted] is checked against the bound from samples only "
           "(acceptance_bound)")
#: Most horizon outcomes ``V^(L+1)`` a path / tree certificate tests (the target law and its prefixes are built
#: whole; beyond this a ValueError, not an allocation the machine cannot hold).
MAX_OUTCOMES = 20_000_000


def _check_tree_nodes(branching: tuple) -> int:
    """The drafted nodes ``N`` of ``branching``; ValueError naming it above :data:`MAX_TREE_NODES`."""
    N, width = 0, 1
    for b in branching:
        width *= b                                    # nodes at this depth
        N += width                                    # N = sum_d prod(branching[:d + 1])
        if N > MAX_TREE_NODES:
            raise ValueError(f"branching {list(branching)} drafts more than MAX_TREE_NODES = {MAX_TREE_NODES:,} nodes "
                             "(resispec.trees); give a smaller tree")
    return N


def _check_size(V: int, L: int, what: str) -> None:
    """ValueError naming ``what`` when ``V^(L+1)`` exceeds :data:`MAX_OUTCOMES`."""
    if V ** (L + 1) > MAX_OUTCOMES:
        raise ValueError(f"V^({what} + 1) = {V}^{L + 1} horizon outcomes exceed MAX_OUTCOMES = {MAX_OUTCOMES:,} "
                         f"(exactness.pathlevel): give a smaller {what} or a pair with a smaller vocabulary")


def _certificate(counts: np.ndarray, target: np.ndarray, n: int, df: int, alpha: float,
                 min_expected: float, accepted: np.ndarray | None = None, where: tuple | None = None,
                 exact: dict | None = None, plan_sampler: dict | None = None,
                 plan_skip: str | None = None) -> PathCertificate:
    """The certificate of a sampled horizon: the checks of :data:`exactness.path_checks.PATH_CHECKS` in order on one
    :class:`exactness.path_checks.PathRun`, Holm over the sampled ones, the horizon's TV bounds and power."""
    st = PathRun(counts=counts, target=target, n=int(n), df=int(df), alpha=alpha, min_expected=min_expected,
                 power=POWER, accepted=accepted, where=where, exact=exact, plan_sampler=plan_sampler,
                 plan_skip=plan_skip, m_max=_sampled_checks(plan_sampler is not None))
    pvalue, sampled = run_checks(st)                  # horizon's power is stated at Holm's first level, alpha / sampled
    tv_hat, tv_up = tv_bounds(counts, target, alpha)
    det = detectable_tv(n, max(1, df), alpha=alpha / sampled, power=POWER)
    return PathCertificate(passed=bool(pvalue >= alpha), pvalue=pvalue, n=int(n), counts=counts,
                           statistic=float(st.gof.statistic), df=int(df), detectable_tv=float(det), alpha=alpha,
                           power=POWER, tv_estimate=float(tv_hat), tv_upper=float(tv_up), raw_checks=st.checks,
                           sampled=sampled, acceptance_bound=st.bound, skipped=st.skipped, exact_bound=exact,
                           plan_sampler=plan_sampler)


def sample_horizon(verifier, pair, L: int, n: int, rng: np.random.Generator, context=(),
                   accepted: np.ndarray | None = None, observe=None) -> np.ndarray:
    """``n`` sampled first-``L+1``-token outcomes, (n,) int64 flat indices into ``V^(L+1)`` (row-major).

    Each: drafts ``d_{i+1} ~ q(. | d_1..d_i)``, ``verifier.verify(p rows (L+1, V), q rows (L, V), d, rng)``,
    then the target continues the emitted tokens to ``L + 1``; ``accepted`` ((n,) int64, optional) receives
    the drafts kept at each step; ``observe(args, stop_row, token, drafts)`` (optional) sees each step
    (``args = (p, q, d)``, as ``exactness.plan_check`` scores it).  :class:`exactness.SubjectError` (the rule
    misbehaved: a FAIL) when ``verify`` raises or returns ``accepted`` outside ``0..L`` or a token outside
    ``[0, V)`` (its ``steps`` attribute: the steps completed before); TypeError without ``verify``.
    """
    verify = _method(verifier, "verify", "verify(p, q, drafts, rng) -> PathResult(accepted, token), e.g. "
                                         "resispec.pathlevel.get_path_verifier('block')")
    V = check_pair(pair, L)
    n = check_n(n)
    laws = prefix_laws(pair, L, context)
    one = np.empty(1)
    out = np.empty(n, dtype=np.int64)
    name = f"{type(verifier).__name__}.verify"
    for s in range(n):
        d = []
        for i in range(L):
            one[0] = rng.random()
            d.append(int(_inverse_cdf(laws[tuple(d)][1][None, :], one)[0]))
        p = np.stack([laws[tuple(d[:i])][0] for i in range(L + 1)])
        q = np.stack([laws[tuple(d[:i])][1] for i in range(L)])
        try:
            r = subject_call(verify, name, p.copy(), q.copy(), np.array(d, dtype=np.int64), rng)
            try:                                          # a property of the result may raise: the rule's failure
                got = (r.accepted, r.token)
            except AttributeError:
                raise SubjectError(f"{name} must return a PathResult(accepted, token), got {type(r).__name__}") \
                    from None
            except BaseException as e:
                if passes_through(e):             # Ctrl-C, the harness's time limit
                    raise
                raise SubjectError(f"reading {name}(...).accepted / .token raised {type(e).__name__}: {e}") from None
            acc = _int_in(got[0], 0, L, f"{name}(...).accepted (drafts kept, L = {L})")
            tok = _int_in(got[1], 0, V - 1, f"{name}(...).token (a token id of the pair's vocabulary, V = {V})")
        except SubjectError as exc:
            exc.steps = s                                 # steps completed before the misbehaviour
            raise
        if accepted is not None:
            accepted[s] = acc
        if observe is not None:
            observe((p, q, np.array(d, dtype=np.int64)), acc, tok, d)
        z = d[:acc] + [tok]
        while len(z) < L + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (L + 1)))
    return out


def _side_rng(rng: np.random.Generator) -> np.random.Generator:
    """An independent generator for the plan check, spawned so that ``rng``'s own draws are unchanged."""
    try:
        return rng.spawn(1)[0]
    except (AttributeError, TypeError, ValueError):       # a bit generator without a seed sequence
        return np.random.default_rng(np.random.SeedSequence(int(rng.bit_generator.random_raw())))


def _run(sample, n: int, target: np.ndarray, df: int, alpha: float, min_expected: float, where: tuple,
         exact: dict | None, collector, plan_skip: str | None) -> PathCertificate:
    """Sample the horizon (``sample(accepted, observe)``), then the certificate; a misbehaving rule is a FAIL."""
    acc = np.zeros(n, dtype=np.int64)
    try:
        idx = sample(acc, None if collector is None else collector.observe)
    except SubjectError as exc:
        cert = _subject_failure(target, getattr(exc, "steps", 0), alpha, exc.cause, exact)
        return cert if plan_skip is None else replace(cert, skipped={**cert.skipped, "plan_sampler": plan_skip})
    counts = np.bincount(idx, minlength=target.size)
    ps = None if collector is None else collector.result(alpha / _sampled_checks(True), POWER).as_dict()
    return _certificate(counts, target, n, df, alpha, min_expected, acc, where, exact, ps, plan_skip)


def _sampled_checks(with_plan: bool) -> int:
    """The most sampled checks Holm counts in a path / tree certificate (horizon, acceptance_bound, plan_sampler):
    powers are stated at ``alpha`` over this, Holm's first level (the deterministic exact checks take no share)."""
    return 2 + int(with_plan)


def _subject_failure(target: np.ndarray, steps: int, alpha: float, cause: str, exact: dict | None
                     ) -> PathCertificate:
    """The FAIL of a rule that raised or returned no valid step after ``steps`` steps."""
    return PathCertificate(passed=False, pvalue=0.0, n=int(steps), counts=np.zeros(target.size, dtype=np.int64),
                           statistic=float("nan"), df=0, detectable_tv=1.0, alpha=alpha, power=POWER,
                           tv_estimate=float("nan"), tv_upper=1.0, raw_checks={"subject": 0.0},
                           skipped={"horizon": f"the rule misbehaved: {cause}"}, exact_bound=exact, cause=cause)


def certify_path(verifier, pair, L: int, *, n: int = 4000, alpha: float = 1e-3, seed=0, context=(),
                 min_expected: float = MIN_EXPECTED, time_limit: float | None = DEFAULT_TIME_LIMIT) -> PathCertificate:
    """Chi-square test of the first ``L + 1`` output tokens of ``verifier`` against the target's law.

    Parameters
    ----------
    verifier : resispec.pathlevel.PathVerifier
        Anything with ``verify(p, q, drafts, rng) -> PathResult(accepted, token)``.
    pair : object with ``vocab_size`` and ``laws(contexts)`` (e.g. ``MarkovPair``)
    L : int >= 1
        Drafts per step.
    n : int >= 1
        Decoding steps sampled; must leave the pooled test at least one degree of freedom.
    alpha : float in (0, 1)
        False-alarm rate of an exact rule.
    seed : int >= 0, sequence of ints, SeedSequence or numpy.random.Generator
    context : sequence of int
    min_expected : float > 0
        Pooling threshold of the chi-square (:mod:`exactness.gof`, Cochran's 5).
    time_limit : float or None, default ``DEFAULT_TIME_LIMIT`` (3,600 s)
        Wall-clock limit of the run in seconds (0 or None: none; SIGALRM, main thread, POSIX).  Past it no new
        ``verify`` call starts and the run ends with a ``BudgetError`` (the caller's limit: no verdict); a plan or
        ``verify`` call still running ``time_limit + max(10, time_limit)`` seconds in is a hang: a FAIL naming it.

    Returns
    -------
    PathCertificate
        With ``detectable_tv`` (power 0.99 at ``alpha``) and ``summary()``.

    Raises
    ------
    TypeError, ValueError
        Bad pair, L, n, alpha or seed; a verifier without ``verify``; an ``n`` too small for one degree of
        freedom (the test could not fail); a ``verify`` result outside the step (``accepted`` not in
        ``0..L``, a token not in ``[0, V)``); laws the rule rejects.
    """
    _method(verifier, "verify", "verify(p, q, drafts, rng) -> PathResult(accepted, token), e.g. "
                                "resispec.pathlevel.get_path_verifier('block')")
    n = check_n(n)
    alpha = check_alpha(alpha)
    min_expected = check_min_expected(min_expected)
    V = check_pair(pair, L)
    context = _context(context, V)
    _check_size(V, L, "L")
    rng = as_generator(seed)
    target = continuation(prefix_laws(pair, L, context), V, L + 1)[0].ravel()
    df = _pooled_df(target, n, min_expected, f"the horizon test (V^(L+1) = {V}^{L + 1} outcomes)")
    limit = check_timeout(time_limit, name="time_limit")

    return _timed(lambda: _certify_rule(
        verifier, "path", (pair, (1,) * L, context), L + 1, V, rng,
        lambda acc, obs: sample_horizon(verifier, pair, L, n, rng, context, acc, obs), n, target, df, alpha,
        min_expected), limit, target, alpha)


def sample_tree_horizon(verifier, pair, branching, n: int, rng: np.random.Generator, context=(),
                        accepted: np.ndarray | None = None, observe=None) -> np.ndarray:
    """As :func:`sample_horizon` for a tree rule (``verify_tree``) on iid-drafted trees of shape ``branching``
    (``"2,1"`` or (2, 1)): (n,) int64 flat indices into ``V^(D+1)`` of the emitted tokens continued by the target.

    ``observe(args, stop_row, token, tokens)`` (optional) sees each step (``args = (p, q, parent, tokens)``, the
    stop row = the last kept node + 1, 0 for the root).  :class:`exactness.SubjectError` (a FAIL) when
    ``verify_tree`` raises or returns kept nodes that are not a root path of the tree (ids in ``[0, N)``, each the
    child of the one before) or a token outside ``[0, V)``; TypeError without ``verify_tree``.
    """
    verify_tree = _method(verifier, "verify_tree", "verify_tree(p, q, parent, tokens, rng) -> (kept node ids, "
                                                   "token), e.g. resispec.pathlevel.get_path_verifier('traversal')")
    branching = _tree_shape(branching)
    D = len(branching)
    V = check_pair(pair, D)
    n = check_n(n)
    laws = prefix_laws(pair, D, context)
    parent, _ = tree_nodes(branching)
    N = len(parent) - 1
    par_ids = np.array(parent[1:], dtype=np.int64) - 1
    name = f"{type(verifier).__name__}.verify_tree"
    one = np.empty(1)
    out = np.empty(n, dtype=np.int64)
    for s in range(n):
        paths, toks = [()], []
        for r in range(1, N + 1):
            one[0] = rng.random()
            t = int(_inverse_cdf(laws[paths[parent[r]]][1][None, :], one)[0])     # iid child of its parent
            toks.append(t)
            paths.append(paths[parent[r]] + (t,))
        p = np.stack([laws[paths[r]][0] for r in range(N + 1)])
        q = np.stack([laws[paths[r]][1] for r in range(N + 1)])
        tok_arr = np.array(toks, dtype=np.int64)
        try:
            kept, token = _tree_step(subject_call(verify_tree, name, p.copy(), q.copy(), par_ids.copy(),
                                                  tok_arr.copy(), rng), name, par_ids, N, D, V)
        except SubjectError as exc:
            exc.steps = s                                 # steps completed before the misbehaviour
            raise
        if accepted is not None:
            accepted[s] = len(kept)
        if observe is not None:
            observe((p, q, par_ids, tok_arr), kept[-1] + 1 if kept else 0, token, toks)
        z = [toks[int(i)] for i in kept] + [token]
        while len(z) < D + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (D + 1)))
    return out


def _tree_step(res, name: str, par_ids: np.ndarray, N: int, D: int, V: int) -> tuple[list[int], int]:
    """``verify_tree``'s ``(kept, token)`` checked: a root path of at most ``D`` node ids and a token in
    ``[0, V)``; else :class:`SubjectError` naming ``name``."""
    try:
        kept, token = res
        kept = list(kept)
    except (TypeError, ValueError):
        raise SubjectError(f"{name} must return (kept node ids, token), got {res!r}") from None
    except BaseException as e:              # its kept ids raised while read: the rule's failure
        if passes_through(e):             # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(f"reading {name}'s (kept node ids, token) raised {type(e).__name__}: {e}") from None
    if len(kept) > D:
        raise SubjectError(f"{name} kept {len(kept)} nodes {kept!r}; a root path of a depth-{D} tree has at most {D}")
    up = -1
    for j, k in enumerate(kept):
        k = _int_in(k, 0, N - 1, f"{name} kept node ids (drafted nodes 0..N-1, N = {N}); entry {j}")
        if par_ids[k] != up:
            raise SubjectError(f"{name} kept nodes {kept!r} are not a root path: node {k} is a child of "
                               f"{int(par_ids[k])}, not of {up} (-1 = root)")
        up = k
    token = _int_in(token, 0, V - 1, f"{name} token (a token id of the pair's vocabulary, V = {V})")
    return [int(k) for k in kept], token


def certify_tree_rule(verifier, pair, branching, *, n: int = 4000, alpha: float = 1e-3, seed=0,
                      context=(), min_expected: float = MIN_EXPECTED,
                      time_limit: float | None = DEFAULT_TIME_LIMIT) -> PathCertificate:
    """Chi-square test of the first ``D + 1`` output tokens of a tree rule against the target's law.

    Same contract as :func:`certify_path`, for ``verifier.verify_tree`` on iid-drafted trees of shape
    ``branching`` (``"2,1"``, (2, 1), [2, 1] or a ``resispec.trees.TreeShape``; every factor >= 1).  Detects
    biases of the sampled step (drafting, the rule's draws, the continuation) of horizon TV at least
    ``detectable_tv`` (power 0.99 at ``alpha``); the exact check is :func:`resispec.pathlevel.analyse_tree`.
    Raises as :func:`certify_path`, plus TypeError / ValueError for a bad ``branching`` (or one of more than
    ``MAX_TREE_NODES`` = 4,096 drafted nodes), a verifier without
    ``verify_tree`` or kept nodes that are no root path.
    """
    _method(verifier, "verify_tree", "verify_tree(p, q, parent, tokens, rng) -> (kept node ids, token), e.g. "
                                     "resispec.pathlevel.get_path_verifier('traversal')")
    n = check_n(n)
    alpha = check_alpha(alpha)
    min_expected = check_min_expected(min_expected)
    branching = _tree_shape(branching)
    _check_tree_nodes(branching)
    D = len(branching)
    V = check_pair(pair, D)
    context = _context(context, V)
    _check_size(V, D, "the depth of branching")
    rng = as_generator(seed)
    target = continuation(prefix_laws(pair, D, context), V, D + 1)[0].ravel()
    df = _pooled_df(target, n, min_expected, f"the horizon test (V^(D+1) = {V}^{D + 1} outcomes)")
    N = len(tree_nodes(branching)[0]) - 1
    limit = check_timeout(time_limit, name="time_limit")

    return _timed(lambda: _certify_rule(
        verifier, "tree", (pair, branching, context), N + 1, V, rng,
        lambda acc, obs: sample_tree_horizon(verifier, pair, branching, n, rng, context, acc, obs), n, target, df,
        alpha, min_expected), limit, target, alpha)


#: kind -> the exact bound form of ``exactness.acceptance_bound.AcceptanceBound``
_PLAN_FORMS = {"path": "exact_path", "tree": "exact_tree"}


def _certify_rule(verifier, kind: str, where: tuple, rows: int, V: int, rng, sample, n: int, target: np.ndarray,
                  df: int, alpha: float, min_expected: float) -> PathCertificate:
    """The checks of a path (``kind`` "path") or tree rule at ``where`` = ``(pair, branching, context)``: its
    declared plan (read once, :func:`_declared_plan`) through the exact bound form, then the horizon sample
    (``sample(accepted, observe)``) scored by the plan-vs-sampler collector, the certificate."""
    from .acceptance_bound import ACCEPTANCE_BOUND

    pair, branching, context = where
    plan, exact = (_declared_plan(verifier, "plan", "plan(p, q, drafts)") if kind == "path" else
                   _declared_plan(verifier, "plan_tree", "plan_tree(p, q, parent, tokens)"))
    if plan is not None:                              # a declared plan: the bound check without sampling too
        shape = len(branching) if kind == "path" else branching
        exact = getattr(ACCEPTANCE_BOUND, _PLAN_FORMS[kind])(verifier, pair, shape, context, plan_fn=plan)
        plan.storing = False                          # the sampler reads what the enumeration stored, no more
    coll, why = _plan_collector(verifier, kind, rng, rows, V, plan)
    return _run(sample, n, target, df, alpha, min_expected, where, exact, coll, why)


def _timed(body, limit: float | None, target: np.ndarray, alpha: float) -> PathCertificate:
    """``body()`` within ``limit`` seconds.  Past ``limit`` no new call of ``verify`` starts (``RunOutOfTime``:
    a ``BudgetError``, the caller's limit, no verdict); a call of the rule (``verify``, its plan) still running
    ``hard_limit(limit)`` seconds in is stopped (``exactness._timeout.time_limit``: SIGALRM, main thread) and is a
    hang: a FAIL naming it, never a hang of the harness."""
    from ._timeout import RunOutOfTime, TimeLimitExceeded, hard_limit, out_of_time, own_limit, run_deadline
    from .certificate import stopped_call, subject_time_limit

    hard = None if limit is None else hard_limit(limit)
    mine = own_limit(hard) is not None              # else an outer limit due sooner governs: its exception passes
    try:
        with run_deadline(limit), subject_time_limit(hard):
            return body()
    except TimeLimitExceeded as exc:               # RunOutOfTime too: past the limit no new verify call starts
        if not mine and not isinstance(exc, RunOutOfTime):
            raise
        what = stopped_call(exc)
    if what is None:                               # every call of the rule returned: the caller's limit
        raise BudgetError(out_of_time(limit, "time_limit"))
    # the alarm is off here: the FAIL is built outside the limit (a repeating alarm cannot interrupt it)
    return _subject_failure(target, 0, alpha, f"time_limit = {limit:g} s passed: {what} did not return, still "
                            f"running {hard:g} s into the run (the limit plus a grace of {hard - limit:g} s: a plan "
                            "or verify that hangs)", None)


def _declared_plan(verifier, attr: str, signature: str):
    """``(plan, None)``: the rule's declared plan as a :class:`exactness.plan_check.PlanMemo` (computed once per
    drafted chain / tree, shared by the exact bound form and the plan-vs-sampler check); or ``(None, exact)``, the
    ``exact_bound`` entry: skipped with the reason (no plan), or an error (reading the attribute raised, or it is
    not callable: a FAIL naming it)."""
    from .plan_check import PlanMemo, declared

    fn, why = declared(verifier, attr)
    if fn is not None:
        return PlanMemo(fn), None
    if why:                                           # reading it raised, or it is not callable: declared wrong
        return None, {"error": why}
    return None, {"skipped": why or NO_PLAN.format(plan=signature)}


def _plan_collector(verifier, kind: str, rng: np.random.Generator, rows: int, V: int, plan=None):
    """``(collector, None)`` for a rule with a declared plan ``plan`` (``exactness.plan_check``), else
    ``(None, why)``."""
    from .plan_check import PLAN_SAMPLER

    why = PLAN_SAMPLER.applies(verifier, kind) if plan is None else None
    if plan is None:
        return None, why or "no declared plan: nothing to compare the sampler with"
    return PLAN_SAMPLER.collector(verifier, kind, _side_rng(rng), rows, V, plan_fn=plan), None
