"""Plan and sampler agree: a path-level rule's ``verify`` follows the plan it declares (issue 40, item 2).

``resispec.pathlevel.analyse_path`` / ``analyse_tree`` and the sampling-free acceptance bound read a rule's
*declared* plan (``plan(p, q, drafts) -> PathPlan``, ``plan_tree(p, q, parent, tokens) -> PathPlan``: the law of
the stop row and of the emitted token given the drafts).  They say nothing about the code that runs unless its
sampler (``verify`` / ``verify_tree``) draws from that plan.  This check ties the two, on the steps the horizon
certificate already samples:

* **law form (always, when a plan is declared)**, two tests on the outcomes ``o = (stop row, token)`` given
  the drafts, Bonferroni-combined: (a) *grouped*: the steps with the same drafted chain / tree share one plan
  law, so per drafted chain the counts of ``o`` against ``stop[:, None] * laws`` give a Pearson chi-square
  (pooled, ``exactness.gof``), summed over the chains with a degree of freedom (sum of independent
  chi-squares); (b) *PIT*: the randomised PIT of each step's ``o`` under its plan law, ``u = F(o-) + U P(o)``
  in row-major order (Brockwell 2007; exactly uniform when ``o`` is drawn from the plan), binned in
  ``exactness.pit.PIT_BINS``, which still sees drafted chains too rare to group.  An outcome the plan gives
  probability 0 FAILs at once.  Conditioning on the drafts means an exact sampler with a wrong plan (or the
  reverse) fails even when the horizon test passes.  Power is stated as the PIT test's ``detectable_tv``
  at ``n`` (the grouped test is at least as strong on few drafted chains).
* **coupled form (when the sampler takes ``uniforms=``, the ``PathVerifier.verify`` contract)**: ``verify`` with
  two shared uniforms must return exactly the plan's inverse-CDF draw (``uniforms[0]`` the stop row,
  ``uniforms[1]`` the token, index order), as ``exactness.certify_coupled`` couples a kernel to its reference.
  Any disagreement FAILs with the first counterexample; zero mismatches in ``n`` steps bound the mismatch rate by
  ``1 - 0.01^(1/n)`` (detected with probability 0.99 above it).

A plan that raises or is not a law (negative, non-finite, not summing to 1 within 1e-9) is the subject's
misbehaviour: a FAIL naming it.  Node-level plans are checked elsewhere: ``chain`` against ``verify`` by
``certify_verifier``'s ``joint`` check, ``step_plan`` by ``certify_stepwise`` (coupled).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import chi2

from ._checks import passes_through
from .pit import PIT_BINS, POWER
from .gof import gof_test
from .power import detectable_tv

#: Tolerance on a plan's sums (as ``AcceptanceBound.exact_path``).
#: Tolerance of a declared plan's sums and negatives (a float32 plan rounds to ~1e-7 per entry; 1e-5 of mass moves
#: no law by a TV any check here could see).
LAW_TOL = 1e-5
#: Every entry of a declared plan lies in [-RANGE_TOL, 1 + RANGE_TOL], whatever the chance of its drafts.
RANGE_TOL = 1e-3
#: Distinct plan inputs kept for the grouped test (each holds ``rows * V`` floats); later ones enter the PIT only.
MAX_GROUPS = 4096
#: ... and at most this many stored floats in all (3 arrays of rows V per group): V = 2,000 at gamma = 4 took 1.5 GB.
MAX_GROUP_ELEMS = 1 << 24


@dataclass(frozen=True)
class PlanSamplerResult:
    """One run of :class:`PlanSamplerCheck` (frozen).

    Attributes
    ----------
    n : int                  sampled steps whose outcome was scored under the plan
    pvalue : float           0.0 on a deterministic failure (``error``, an impossible outcome, a coupled
                             mismatch), else ``min(1, 2 min(pit_pvalue, grouped_pvalue))`` (Bonferroni)
    statistic : float        the PIT chi-square (``nan`` before any step)
    pit_pvalue : float       its p-value
    grouped_statistic, grouped_df, grouped_pvalue   the per-drafted-chain chi-square summed (df 0, p 1: no
                             chain had enough steps)
    pit_tv : float           TV between the binned PITs and uniform (plug-in)
    detectable_tv : float    smallest PIT TV detected with probability ``power`` at ``alpha`` (df PIT_BINS - 1)
    impossible : int         outcomes the plan gave probability 0
    coupled_n : int          steps run again with shared uniforms (0: the sampler takes none)
    mismatches : int         coupled steps where the sampler and the plan's inverse-CDF draw differ
    detectable_mismatch_rate : float or None   ``1 - 0.01^(1/coupled_n)``
    first_mismatch : dict or None              drafts, uniforms, the sampler's and the plan's outcome
    error : str or None      the plan raised or is not a law
    alpha, power : float
    sampler : str            the call that drew the outcomes (``"Mine.verify"``, a chain kernel's name)
    """

    n: int
    pvalue: float
    statistic: float
    pit_pvalue: float
    grouped_statistic: float
    grouped_df: int
    grouped_pvalue: float
    pit_tv: float
    detectable_tv: float
    impossible: int
    coupled_n: int
    mismatches: int
    detectable_mismatch_rate: float | None
    first_mismatch: dict | None
    error: str | None
    alpha: float
    power: float
    sampler: str = "verify"

    @property
    def failed(self) -> bool:
        return self.pvalue < self.alpha

    def line(self) -> str:
        """One line: why it failed, or what it could detect."""
        if self.error:
            return f"the {self.error}" if self.error.startswith("coupled call") else f"its declared plan {self.error}"
        if self.impossible:
            return f"{self.sampler} emitted {self.impossible} outcome(s) its own plan gives probability 0"
        if self.mismatches:
            m = self.first_mismatch
            return (f"{self.sampler} disagrees with its plan on {self.mismatches} of {self.coupled_n} coupled steps: drafts "
                    f"{m['drafts']}, uniforms {m['uniforms']}: it gave {m['sampler']}, the plan {m['plan']}")
        core = (f"sampler vs plan: p = {self.pvalue:.3g} (per drafted chain chi2 = {self.grouped_statistic:.4g}, "
                f"df {self.grouped_df}; PIT chi2 = {self.statistic:.4g}), n = {self.n:,} "
                f"(detects PIT TV >= {self.detectable_tv:.3g}")
        if self.coupled_n:
            core += f"; coupled: 0 mismatches in {self.coupled_n:,}, rate <= {self.detectable_mismatch_rate:.3g}"
        return core + ")"

    def as_dict(self) -> dict:
        return {**asdict(self), "reason": self.line()}


def law_problem(pl, rows: int, V: int, tol: float = LAW_TOL, range_tol: float = RANGE_TOL
                ) -> tuple[np.ndarray | None, np.ndarray | None, str | None]:
    """A declared plan ``pl`` (``.stop`` (rows,), ``.laws`` (rows, V)) as float64 arrays, or why it is not a law:
    ``(stop, laws, None)`` or ``(None, None, "not a law: ...")``: complex, non-finite, wrong shapes; negative
    beyond ``tol`` or not summing to 1 within ``tol`` (default :data:`LAW_TOL`; ``math.inf``: the structure only);
    entries outside ``[-range_tol, 1 + range_tol]`` (default :data:`RANGE_TOL`; the exact bound form passes
    ``math.inf`` and weighs them by the drafts' probability instead).  One rule for every route (the exact bound
    form and the plan-vs-sampler check)."""
    try:
        raw_stop, raw_laws = pl.stop, pl.laws
    except BaseException as exc:                  # no .stop / .laws (or a property raising): not a PathPlan
        if passes_through(exc):
            raise
        return None, None, f"not a law: returned {type(pl).__name__} without .stop / .laws ({exc})"
    if np.iscomplexobj(raw_stop) or np.iscomplexobj(raw_laws):
        return None, None, "not a law: complex values"
    try:
        stop, laws = np.asarray(raw_stop, dtype=np.float64), np.asarray(raw_laws, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        return None, None, f"not a law: stop / laws are not arrays of numbers ({exc})"
    if stop.shape != (rows,) or laws.shape != (rows, V):
        return None, None, (f"not a law of the right shape: stop {stop.shape}, laws {laws.shape}; expected ({rows},) "
                            f"and ({rows}, {V})")
    if not (np.all(np.isfinite(stop)) and np.all(np.isfinite(laws))):
        return None, None, "not a law: non-finite values"
    lo, hi = min(stop.min(), laws.min()), max(stop.max(), laws.max())
    if lo < -range_tol or hi > 1 + range_tol:     # 1e308 entries overflowed E to nan: never analysed unclipped
        return None, None, f"not a law: entries outside [0, 1] (from {lo:.3g} to {hi:.3g})"
    if stop.min() < -tol or laws.min() < -tol:
        return None, None, f"not a law: negative probabilities (down to {min(stop.min(), laws.min()):.3g})"
    if abs(stop.sum() - 1) > tol:
        return None, None, f"not a law: the stop law sums to {stop.sum():.9g}"
    sums = laws.sum(axis=1)
    if np.abs(sums - 1).max() > tol:
        r = int(np.argmax(np.abs(sums - 1)))
        return None, None, f"not a law: token law {r} sums to {sums[r]:.9g}"
    return stop, laws, None


def declared(obj, attr: str) -> tuple[object, str | None]:
    """``(obj.<attr>, None)`` when it is a callable; ``(None, why)`` otherwise: absent, not callable, or reading it
    raised (a property that raises is the subject's failure: the caller FAILs naming ``why``)."""
    name = f"{type(obj).__name__}.{attr}"
    try:
        fn = getattr(obj, attr, None)
    except BaseException as exc:
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        return None, f"reading {name} raised {type(exc).__name__}: {exc}"
    if fn is None:
        return None, None
    if not callable(fn):
        return None, f"{name} is not callable (it is {type(fn).__name__}): a declared plan must be a method"
    return fn, None


class PlanMemo:
    """A declared plan computed once per drafted chain / tree and shared by every check that reads it (the exact
    bound form's enumeration and the plan-vs-sampler check): a plan that answered one way to the enumeration and
    another way while the sampler ran passed both (breaker).  Each answer is kept as a snapshot, its own copies of
    ``stop`` and ``laws`` (a plan object whose fields change between reads cannot answer twice either).  Keyed by
    the last argument (the drafts; the node laws are a function of them at a fixed pair and context).  Answers are
    stored while :attr:`storing` (the exact form's enumeration, bounded by its size limits); afterwards a stored
    answer is served and any other computed afresh, so memory stays that of the enumeration.  A plan that raises
    raises each time."""

    def __init__(self, fn):
        self.fn, self.cache, self.storing = fn, {}, True

    def __call__(self, *args):
        key = tuple(np.asarray(args[-1]).ravel().tolist())
        got = self.cache.get(key)
        if got is None:
            got = _snapshot(self.fn(*args))
            if self.storing:
                self.cache[key] = got
        return got


def _snapshot(pl):
    """``pl``'s ``stop`` and ``laws`` copied once into a ``PathPlan`` (dtype kept: a complex plan stays complex for
    :func:`law_problem` to name); ``pl`` itself when it has no such fields (``law_problem`` names that)."""
    from resispec.pathlevel.base import PathPlan

    try:
        return PathPlan(np.array(pl.stop, copy=True), np.array(pl.laws, copy=True))
    except Exception:
        return pl


def takes_uniforms(fn) -> bool:
    """Whether ``fn`` accepts a ``uniforms`` keyword (the coupled form applies)."""
    try:
        return "uniforms" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _draw(w: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from weights ``w`` (V,) with uniform ``u``, exactly as ``PathVerifier.verify`` draws."""
    from resispec.sampling import _inverse_cdf

    return int(_inverse_cdf(w[None, :], np.array([u]))[0])


class _Collector:
    """Scores each sampled step; ``result`` makes the record."""

    def __init__(self, plan_fn, verify_fn, rng: np.random.Generator, rows: int, V: int, coupled: bool,
                 plan_name: str, verify_name: str):
        self.plan_fn, self.verify_fn, self.rng = plan_fn, verify_fn, rng
        self.rows, self.V, self.coupled = rows, V, coupled
        self.plan_name, self.verify_name = plan_name, verify_name
        self.u: list[float] = []
        self.impossible = 0
        self.coupled_n = self.mismatches = 0
        self.first_mismatch = None
        self.error: str | None = None
        self.groups: dict = {}                    # drafts key -> [stop, laws, flat law (rows V,), counts]

    def _plan(self, args) -> tuple[np.ndarray, np.ndarray] | None:
        """The plan's ``(stop (rows,), laws (rows, V))`` for these drafts, or None after recording an error."""
        try:
            pl = self.plan_fn(*args)
        except BaseException as exc:            # the subject's plan raised: a FAIL naming it
            if passes_through(exc):             # Ctrl-C, the harness's time limit
                raise
            self.error = f"{self.plan_name} raised {type(exc).__name__}: {exc}"
            return None
        stop, laws, why = law_problem(pl, self.rows, self.V)
        if why:
            self.error = f"{self.plan_name} is {why}"
            return None
        return stop, laws

    def observe(self, args: tuple, row: int, token: int, shown: list, key=None) -> None:
        """One sampled step: ``args`` the plan's arguments, ``(row, token)`` what ``verify`` returned; ``key``
        identifies the plan's inputs (default: the drafts ``shown``, enough where the node laws are fixed)."""
        if self.error:
            return
        key = tuple(shown) if key is None else key
        g = self.groups.get(key)
        if g is None:                             # the plan is a function of its inputs: computed once per key
            plan = self._plan(args)
            if plan is None:
                return
            stop, laws = plan
            flat = (np.clip(stop, 0, None)[:, None] * np.clip(laws, 0, None)).ravel()   # P(row, y | d) (rows V,)
            g = [stop, laws, flat, np.zeros(flat.size, dtype=np.int64)]
            if len(self.groups) < min(MAX_GROUPS, MAX_GROUP_ELEMS // (3 * flat.size)):   # beyond: the PIT only
                self.groups[key] = g
        stop, laws, flat, counts = g
        o = row * self.V + token
        counts[o] += 1
        if flat[o] <= 0:
            self.impossible += 1
        self.u.append(float(flat[:o].sum() + self.rng.random() * flat[o]))   # PIT = F(o-) + U P(o)
        if self.coupled:
            u = self.rng.random(2)
            try:
                got = self.verify_fn(*args, uniforms=u)
                got = (int(got[0]), int(got[1]))
            except BaseException as exc:        # the sampler raised on shared uniforms: a FAIL
                if passes_through(exc):             # Ctrl-C, the harness's time limit
                    raise
                self.error = f"coupled call {self.verify_name}(..., rng, uniforms=) raised {type(exc).__name__}: {exc}"
                return
            r = _draw(stop, u[0])                                       # stop row: inverse CDF of plan.stop
            want = (r, _draw(laws[r], u[1]))                            # token: inverse CDF of plan.laws[r]
            self.coupled_n += 1
            if got != want:
                self.mismatches += 1
                if self.first_mismatch is None:
                    self.first_mismatch = {"drafts": shown, "uniforms": [float(x) for x in u],
                                           "sampler": got, "plan": want}

    def result(self, alpha: float, power: float = POWER) -> PlanSamplerResult:
        n = len(self.u)
        dmr = None if not self.coupled_n else float(1 - 0.01 ** (1 / self.coupled_n))
        det = PlanSamplerCheck.detectable_tv(max(n, 1), alpha, power)   # its PIT test at alpha / 2 (p doubled below)
        if n:
            uv = np.clip(np.asarray(self.u), 0.0, 1.0)
            bins = np.minimum((uv * PIT_BINS).astype(np.int64), PIT_BINS - 1)
            counts = np.bincount(bins, minlength=PIT_BINS)
            g = gof_test(counts, np.full(PIT_BINS, 1.0 / PIT_BINS))
            stat, pv = float(g.statistic), float(g.pvalue)
            tv = float(0.5 * np.abs(counts / n - 1.0 / PIT_BINS).sum())
        else:
            stat, pv, tv = float("nan"), 1.0, float("nan")
        gs, gdf = 0.0, 0
        for _, _, flat, counts in self.groups.values():
            r = gof_test(counts, flat)
            if r.df >= 1 and np.isfinite(r.statistic):
                gs, gdf = gs + float(r.statistic), gdf + int(r.df)   # independent chains: chi-squares add
        gp = float(chi2.sf(gs, gdf)) if gdf else 1.0
        pit_p = pv
        pv = min(1.0, 2 * min(pit_p, gp))                              # Bonferroni over the two law tests
        if self.error or self.impossible or self.mismatches:
            pv = 0.0                                                    # deterministic: the plan is not what runs
        return PlanSamplerResult(n, pv, stat, pit_p, gs, gdf, gp, tv, det, self.impossible, self.coupled_n,
                                 self.mismatches, dmr,
                                 self.first_mismatch, self.error, float(alpha), float(power), self.verify_name)


class PlanSamplerCheck:
    """Check object: does a path-level rule's sampler follow its declared plan (module docstring)?

    ``applies(verifier, kind)`` returns None or the reason it is skipped (no declared plan); ``collector(...)``
    returns the per-step scorer the horizon samplers of :mod:`exactness.pathlevel` feed; its ``result`` is a
    :class:`PlanSamplerResult`.  The mutant it must catch is :func:`exactness.path_mutants.plan_says_block`
    (a token-wise sampler declaring block's plan: exact, so the horizon test passes, yet its plan is false).
    """

    name = "plan_sampler"
    mutant = "plan_says_block"

    @staticmethod
    def applies(verifier, kind: str) -> str | None:
        attr = "plan" if kind == "path" else "plan_tree"
        fn, why = declared(verifier, attr)
        if fn is None:
            return f"no declared plan ({why or attr}): nothing to compare the sampler with"
        return None

    @staticmethod
    def collector(verifier, kind: str, rng: np.random.Generator, rows: int, V: int, plan_fn=None) -> _Collector:
        """``kind`` "path" (``plan`` / ``verify``, rows ``L + 1``) or "tree" (``plan_tree`` / ``verify_tree``,
        rows ``N + 1``)."""
        plan_attr, verify_attr = ("plan", "verify") if kind == "path" else ("plan_tree", "verify_tree")
        name = type(verifier).__name__
        verify = getattr(verifier, verify_attr)
        coupled = kind == "path" and takes_uniforms(verify)
        if coupled:
            def verify_fn(*args, uniforms):           # rng too (never drawn from: the uniforms decide)
                r = verify(*args, np.random.default_rng(0), uniforms=uniforms)
                return r.accepted, r.token
        else:
            verify_fn = None
        return _Collector(plan_fn or getattr(verifier, plan_attr), verify_fn, rng, rows, V, coupled,
                          f"{name}.{plan_attr}", f"{name}.{verify_attr}")

    @staticmethod
    def kernel_collector(plan_fn, name: str, rng: np.random.Generator, rows: int, V: int) -> _Collector:
        """The scorer of a chain kernel's calls inside a decoder (``exactness.chain.ChainDecoder``): ``plan_fn(
        target_probs (L+1, V), draft_probs (L, V), draft_ids (L,)) -> PathPlan`` per request, ``rows = L + 1``;
        law form only (a kernel draws from its own ``rng``: no coupled form)."""
        return _Collector(plan_fn, None, rng, rows, V, False, f"{name}.plan", f"chain kernel {name}")

    @staticmethod
    def detectable_tv(n: int, alpha: float = 1e-3, power: float = POWER) -> float:
        """Smallest PIT TV the law form detects at ``n`` steps when the check runs at ``alpha`` (chi-square, df
        ``PIT_BINS - 1``, at ``alpha / 2``: the check's p-value doubles it, Bonferroni with the grouped test)."""
        return float(detectable_tv(n, PIT_BINS - 1, alpha=alpha / 2, power=power))


#: The check instance the routes use.
PLAN_SAMPLER = PlanSamplerCheck()
