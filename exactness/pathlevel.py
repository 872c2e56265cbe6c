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
flagged with probability ``power`` (0.99) at its ``alpha`` (:func:`exactness.power.detectable_tv` on the
pooled df).  Refused up front, never passed: an ``alpha`` outside (0, 1), an ``n`` so small that pooling
leaves the test no degree of freedom (it could not fail); a rule output that is no valid step (``accepted``
outside ``0..L``, a token outside ``[0, V)``, kept nodes that are no root path of the tree) is a ValueError
naming the method that returned it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from resispec.pathlevel.analysis import check_pair, continuation, prefix_laws, tree_nodes
from resispec.sampling import _inverse_cdf

from ._checks import as_generator, check_alpha, check_n
from .certificate import check_min_expected, no_df_message
from .gof import MIN_EXPECTED, gof_test, pool_cells, tv_bounds
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

    @property
    def outcome(self) -> str:
        """``"PASS"`` or ``"FAIL"`` (the shared names: ``exactness.result.VOCABULARY``)."""
        return "PASS" if self.passed else "FAIL"

    @property
    def checks(self) -> dict:
        """Raw p-values: ``horizon`` (the chi-square of the horizon outcomes) and ``acceptance_bound`` (the mean
        drafts kept per step against the LP bound over all exact rules), where it ran."""
        return dict(self.raw_checks) or {"horizon": float(self.pvalue)}

    def summary(self) -> str:
        """One line: verdict, p-value, chi-square (df), TV estimate, detectable TV at alpha and power, n."""
        stat = f"{self.statistic:.4g}" if math.isfinite(self.statistic) else str(self.statistic)
        out = (f"{'NO BIAS DETECTED' if self.passed else 'FAIL'}: p = {self.pvalue:.3g}; horizon chi2 = {stat} (df {self.df}), "
               f"TV ~ {self.tv_estimate:.3g} (<= {self.tv_upper:.3g}), detectable TV {self.detectable_tv:.3g} at "
               f"alpha {self.alpha:g}, power {self.power:g}, n = {self.n:,}")
        b, e = self.acceptance_bound, self.exact_bound or {}
        if e.get("error") or e.get("exceeded"):
            out += f"; exact_bound: {e.get('error') or e['reason']}"
        if b is not None and b["pvalue"] < self.alpha:
            out += f"; acceptance_bound: {b['reason']}"
        if self.passed and self.detectable_tv >= 1:
            out += "; note: no power (detectable TV >= 1): a pass here is no evidence of exactness"
        return out


def _method(verifier, name: str, what: str):
    """``verifier.<name>`` if callable, else a TypeError naming the method the certificate needs."""
    f = getattr(verifier, name, None)
    if not callable(f):
        raise TypeError(f"verifier must have a {name}(...) method ({what}); {type(verifier).__name__} has none")
    return f


def _int_in(x, lo: int, hi: int, what: str) -> int:
    """``x`` as an int in ``[lo, hi]``, else ValueError naming ``what``."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not lo <= x <= hi:
        raise ValueError(f"{what} must be an integer in [{lo}, {hi}], got {x!r}")
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
        raise ValueError("n is too small: " + no_df_message(target, n, min_expected, what))
    return df


#: Most horizon outcomes ``V^(L+1)`` a path / tree certificate tests (the target law and its prefixes are built
#: whole; beyond this a ValueError, not an allocation the machine cannot hold).
MAX_OUTCOMES = 20_000_000


def _check_size(V: int, L: int, what: str) -> None:
    """ValueError naming ``what`` when ``V^(L+1)`` exceeds :data:`MAX_OUTCOMES`."""
    if V ** (L + 1) > MAX_OUTCOMES:
        raise ValueError(f"V^({what} + 1) = {V}^{L + 1} horizon outcomes exceed MAX_OUTCOMES = {MAX_OUTCOMES:,} "
                         f"(exactness.pathlevel): give a smaller {what} or a pair with a smaller vocabulary")


def _bound_check(accepted: np.ndarray, where: tuple, alpha: float,
                 known: float | None = None) -> tuple[dict | None, str | None]:
    """The acceptance-bound check of a chain / tree rule: ``(record, None)`` or ``(None, why it was skipped)``.

    ``where`` = ``(pair, branching, context)``; the bound is ``optimal_accepted`` (the LP over all exact rules)
    plus its solver tolerance, or ``known`` when the exact form already solved that LP (it is not solved twice).
    """
    from resispec.pathlevel.bound import optimal_accepted

    from .acceptance_bound import ACCEPTANCE_BOUND as AB

    if accepted.size < 100:
        return None, f"needs n >= 100 steps for the test on the mean accepted length (n = {accepted.size})"
    if known is None:
        try:
            b = optimal_accepted(*where)
        except ValueError as exc:                     # the LP is too large at this size: the check cannot run
            return None, f"no bound at this size: {exc}"
        known = b.expected_accepted + 10 * b.tolerance                  # LP optimum + its tolerance
    res = AB.run_mean(accepted, known, alpha, POWER)
    return res.as_dict(), None


def _certificate(counts: np.ndarray, target: np.ndarray, n: int, df: int, alpha: float,
                 min_expected: float, accepted: np.ndarray | None = None, where: tuple | None = None,
                 exact: dict | None = None) -> PathCertificate:
    from .certificate import holm

    res = gof_test(counts, target, min_expected=min_expected)
    checks = {"horizon": float(res.pvalue)}
    skipped: dict = {}
    bound = None
    if accepted is not None and where is not None:
        bound, why = _bound_check(accepted, where, alpha, (exact or {}).get("bound"))
        if why is None:
            checks["acceptance_bound"] = bound["pvalue"]
        else:
            skipped["acceptance_bound"] = why
    if exact is not None:
        if "skipped" in exact:
            skipped["exact_bound"] = exact["skipped"]
        else:   # deterministic: 0.0 when the plan accepts more than the bound or is not a law, else 1.0
            checks["exact_bound"] = 0.0 if ("error" in exact or exact["exceeded"]) else 1.0
    pvalue = min(holm(checks).values())               # Holm over the checks (the horizon test alone: its p-value)
    tv_hat, tv_up = tv_bounds(counts, target, alpha)
    det = detectable_tv(n, max(1, df), alpha=alpha, power=POWER)
    return PathCertificate(passed=bool(pvalue >= alpha), pvalue=pvalue, n=int(n), counts=counts,
                           statistic=float(res.statistic), df=int(df), detectable_tv=float(det), alpha=alpha,
                           power=POWER, tv_estimate=float(tv_hat), tv_upper=float(tv_up), raw_checks=checks,
                           acceptance_bound=bound, skipped=skipped, exact_bound=exact)


def sample_horizon(verifier, pair, L: int, n: int, rng: np.random.Generator, context=(),
                   accepted: np.ndarray | None = None) -> np.ndarray:
    """``n`` sampled first-``L+1``-token outcomes, (n,) int64 flat indices into ``V^(L+1)`` (row-major).

    Each: drafts ``d_{i+1} ~ q(. | d_1..d_i)``, ``verifier.verify(p rows (L+1, V), q rows (L, V), d, rng)``,
    then the target continues the emitted tokens to ``L + 1``; ``accepted`` ((n,) int64, optional) receives
    the drafts kept at each step.  ValueError when ``verify`` returns
    ``accepted`` outside ``0..L`` or a token outside ``[0, V)``; TypeError without ``verify``.
    """
    verify = _method(verifier, "verify", "verify(p, q, drafts, rng) -> PathResult(accepted, token), e.g. "
                                         "resispec.pathlevel.get_path_verifier('block')")
    V = check_pair(pair, L)
    n = check_n(n)
    laws = prefix_laws(pair, L, context)
    one = np.empty(1)
    out = np.empty(n, dtype=np.int64)
    for s in range(n):
        d = []
        for i in range(L):
            one[0] = rng.random()
            d.append(int(_inverse_cdf(laws[tuple(d)][1][None, :], one)[0]))
        p = np.stack([laws[tuple(d[:i])][0] for i in range(L + 1)])
        q = np.stack([laws[tuple(d[:i])][1] for i in range(L)])
        r = verify(p, q, np.array(d, dtype=np.int64), rng)
        if not hasattr(r, "accepted") or not hasattr(r, "token"):
            raise TypeError(f"{type(verifier).__name__}.verify must return a PathResult(accepted, token), "
                            f"got {type(r).__name__}")
        acc = _int_in(r.accepted, 0, L, f"{type(verifier).__name__}.verify(...).accepted (drafts kept, L = {L})")
        tok = _int_in(r.token, 0, V - 1, f"{type(verifier).__name__}.verify(...).token (a token id of the "
                                         f"pair's vocabulary, V = {V})")
        if accepted is not None:
            accepted[s] = acc
        z = d[:acc] + [tok]
        while len(z) < L + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (L + 1)))
    return out


def certify_path(verifier, pair, L: int, *, n: int = 4000, alpha: float = 1e-3, seed=0, context=(),
                 min_expected: float = MIN_EXPECTED) -> PathCertificate:
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
    _check_size(V, L, "L")
    rng = as_generator(seed)
    target = continuation(prefix_laws(pair, L, context), V, L + 1)[0].ravel()
    df = _pooled_df(target, n, min_expected, f"the horizon test (V^(L+1) = {V}^{L + 1} outcomes)")
    exact = None
    if callable(getattr(verifier, "plan", None)):     # a declared plan: the bound check without sampling too
        from .acceptance_bound import ACCEPTANCE_BOUND

        exact = ACCEPTANCE_BOUND.exact_path(verifier, pair, L, context)
    acc = np.zeros(n, dtype=np.int64)
    counts = np.bincount(sample_horizon(verifier, pair, L, n, rng, context, acc), minlength=target.size)
    return _certificate(counts, target, n, df, alpha, min_expected, acc, (pair, (1,) * L, context), exact)


def sample_tree_horizon(verifier, pair, branching, n: int, rng: np.random.Generator, context=(),
                        accepted: np.ndarray | None = None) -> np.ndarray:
    """As :func:`sample_horizon` for a tree rule (``verify_tree``) on iid-drafted trees of shape ``branching``
    (``"2,1"`` or (2, 1)): (n,) int64 flat indices into ``V^(D+1)`` of the emitted tokens continued by the target.

    ValueError when ``verify_tree`` returns kept nodes that are not a root path of the tree (ids in ``[0, N)``,
    each the child of the one before) or a token outside ``[0, V)``; TypeError without ``verify_tree``.
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
        res = verify_tree(p, q, par_ids, np.array(toks, dtype=np.int64), rng)
        try:
            kept, token = res
            kept = list(kept)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must return (kept node ids, token), got {res!r}") from None
        if len(kept) > D:
            raise ValueError(f"{name} kept {len(kept)} nodes {kept!r}; a root path of a depth-{D} tree has at most "
                             f"{D}")
        up = -1
        for j, k in enumerate(kept):
            k = _int_in(k, 0, N - 1, f"{name} kept node ids (drafted nodes 0..N-1, N = {N}); entry {j}")
            if par_ids[k] != up:
                raise ValueError(f"{name} kept nodes {kept!r} are not a root path: node {k} is a child of "
                                 f"{int(par_ids[k])}, not of {up} (-1 = root)")
            up = k
        token = _int_in(token, 0, V - 1, f"{name} token (a token id of the pair's vocabulary, V = {V})")
        if accepted is not None:
            accepted[s] = len(kept)
        z = [toks[int(i)] for i in kept] + [token]
        while len(z) < D + 1:
            one[0] = rng.random()
            z.append(int(_inverse_cdf(laws[tuple(z)][0][None, :], one)[0]))
        out[s] = int(np.ravel_multi_index(tuple(z), (V,) * (D + 1)))
    return out


def certify_tree_rule(verifier, pair, branching, *, n: int = 4000, alpha: float = 1e-3, seed=0,
                      context=(), min_expected: float = MIN_EXPECTED) -> PathCertificate:
    """Chi-square test of the first ``D + 1`` output tokens of a tree rule against the target's law.

    Same contract as :func:`certify_path`, for ``verifier.verify_tree`` on iid-drafted trees of shape
    ``branching`` (``"2,1"``, (2, 1), [2, 1] or a ``resispec.trees.TreeShape``; every factor >= 1).  Detects
    biases of the sampled step (drafting, the rule's draws, the continuation) of horizon TV at least
    ``detectable_tv`` (power 0.99 at ``alpha``); the exact check is :func:`resispec.pathlevel.analyse_tree`.
    Raises as :func:`certify_path`, plus TypeError / ValueError for a bad ``branching``, a verifier without
    ``verify_tree`` or kept nodes that are no root path.
    """
    _method(verifier, "verify_tree", "verify_tree(p, q, parent, tokens, rng) -> (kept node ids, token), e.g. "
                                     "resispec.pathlevel.get_path_verifier('traversal')")
    n = check_n(n)
    alpha = check_alpha(alpha)
    min_expected = check_min_expected(min_expected)
    branching = _tree_shape(branching)
    D = len(branching)
    V = check_pair(pair, D)
    _check_size(V, D, "the depth of branching")
    rng = as_generator(seed)
    target = continuation(prefix_laws(pair, D, context), V, D + 1)[0].ravel()
    df = _pooled_df(target, n, min_expected, f"the horizon test (V^(D+1) = {V}^{D + 1} outcomes)")
    acc = np.zeros(n, dtype=np.int64)
    counts = np.bincount(sample_tree_horizon(verifier, pair, branching, n, rng, context, acc),
                         minlength=target.size)
    return _certificate(counts, target, n, df, alpha, min_expected, acc, (pair, branching, context))
