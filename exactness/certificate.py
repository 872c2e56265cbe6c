"""The ``Certificate`` result object and black-box certification of a sampler."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ._checks import BudgetError, SubjectError, as_generator, check_alpha, check_n, check_tokens, check_tv, warn_power
from .gof import MIN_EXPECTED, gof_test, tv_bounds
from .power import detectable_tv as _detectable_tv
from .power import samples_for_tv
from .result import fit_line

from . import limits
from .limits import CHUNK, DEFAULT_TIMEOUT  # keyword defaults below (bound at definition)


def _hours(sec: float) -> str:
    return f"{sec / 3600:.3g} hours" if sec >= 3600 else f"{sec:.3g} s"


def pilot_seconds(draw, n: int) -> float:
    """Estimated seconds for ``n`` draws from a timed pilot ``draw(rng, PILOT)`` on a private seed."""
    t0 = time.perf_counter()
    draw(np.random.default_rng(20260101), limits.PILOT)
    return (time.perf_counter() - t0) * n / limits.PILOT


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

    def failing_order(self) -> list[str]:
        """The failing checks, strongest evidence first: a misbehaving subject, then by Holm-adjusted p-value (ties
        in table order)."""
        bad = self.failed_checks()
        return sorted(bad, key=lambda k: (k != "subject", bad[k]))

    def describe(self, name: str) -> str:
        """One check's own numbers: ``"name: TV .., chi2 = .. (df ..), <its reason>, p = <Holm-adjusted>"`` (a
        misbehaving subject: its cause)."""
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
        if d.get("statistic") is not None and d.get("df") is not None:   # a check with its own line says its df there
            parts.append(f"chi2 = {_fmt_num(d['statistic'], '.4g')} (df {d.get('df', '?')})")
        if d.get("reason") and not d.get("error"):
            parts.append(str(d["reason"]))
        if name in self.checks and name != "subject":   # a misbehaving subject is a cause, not a p-value
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

    #: Widest :meth:`summary` line (columns); longer lines are cut with a pointer to :meth:`report`.
    SUMMARY_WIDTH = 120

    def _bound(self) -> str:
        """``": TV <= u at confidence c"`` from the equivalence statement ('' when withheld or absent)."""
        eq = self.details.get("equivalence") or {}
        if not (eq.get("statement") and eq.get("tv_upper") is not None):
            return ""
        return f": TV <= {_fmt_num(eq['tv_upper'])} at confidence {eq.get('confidence') or 1 - self.alpha:g}"

    def _verdict_head(self, width: int | None = None) -> str:
        """The verdict without skips or notes: ``NO BIAS DETECTED (detectable TV ..): TV <= ..`` or ``FAIL: ..``.

        Failing checks come strongest first (:meth:`failing_order`); with ``width``, those after the first are
        described only while the line fits; the rest are named (``also failed: a, b``).
        """
        if self.passed:
            test = "" if self.main == "marginal" else f"{self.main} test, "
            if isinstance(self.details.get("sequential"), dict):
                test += "sequential, "
            return (f"NO BIAS DETECTED ({test}detectable TV {_fmt_num(self.detectable_tv)} at power {self.power:g}, "
                    f"alpha {self.alpha:g}; n = {self.n:,})" + self._bound())
        bad = self.failing_order()
        if not bad:
            return "FAIL: no check ran"
        out, rest = f"FAIL: {self.describe(bad[0])}", []
        for k in bad[1:]:
            part = f"; {self.describe(k)}"
            if rest or (width is not None and len(out) + len(part) > width):
                rest.append(k)
            else:
                out += part
        if rest:
            out += "; also failed: " + ", ".join(rest)
        return out + (f"; n = {self.n:,}" if self.n else "")

    @property
    def outcome(self) -> str:
        """``"PASS"`` or ``"FAIL"`` (this route has no inconclusive verdict; the shared names: exactness.result)."""
        return "PASS" if self.passed else "FAIL"

    def summary(self) -> str:
        """The verdict in one line of at most :attr:`SUMMARY_WIDTH` (120) columns.

        A pass reads ``NO BIAS DETECTED (detectable TV d at power 0.99, alpha 0.001; n = N): TV <= u at
        confidence 0.999``: no check found a bias, and a bias of TV ``d`` (in the law of the main test, labelled
        when it is not ``"marginal"``) would have been found with probability ``power``; it is not a proof of
        exactness.  A failure reads ``FAIL: <check>: <that check's numbers>`` (:meth:`describe`), a misbehaving
        subject ``FAIL: subject: <cause>``.  Skipped checks and notes follow while they fit; a line that leaves
        anything out (or is cut, ending ``...``) ends with ``(more: .report())``.  Every number, skip and note: :meth:`report` and ``details``.
        """
        width, tail = self.SUMMARY_WIDTH, " (more: .report())"
        extras = []                                   # (full text, short form or ''), most important first
        if self.skipped:
            extras.append(("; skipped: " + ", ".join(self.skipped), f"; {len(self.skipped)} checks skipped"))
        head = self._verdict_head(width - 16 - (len(tail) + 20 if self.skipped or self.notes else 0))
        if self.passed and self._bound():
            head = head[:-len(self._bound())]
            extras.insert(1 if extras else 0, (self._bound(), ""))
        if self.passed and self.detectable_tv >= 1:   # no TV is large enough to be seen: a pass says nothing
            extras.insert(0, ("; no power: detectable TV >= 1, so this pass is no evidence of exactness (raise n)",
                              "; no power (raise n)"))
        extras += [(f"; note: {note}", "") for note in self.notes]
        out = head + "".join(full for full, _ in extras)
        if len(out) <= width:
            return out
        out = head
        if len(out) + len(tail) > width:              # the verdict alone is too long: cut it at a word
            return fit_line(out, width)
        for full, short in extras:
            for part in (full, short):
                if part and len(out) + len(part) + len(tail) <= width:
                    out += part
                    break
        return out + tail

    def report(self) -> str:
        """The whole verdict in plain text, one item per line (what :meth:`summary` shortens).

        Lines: the verdict (uncut; a failure names its failing checks); every failing check with its own
        numbers (:meth:`describe`); the main test's statistic, TV estimate and bound, detectable TV, alpha,
        power and ``n``; every check's Holm-adjusted p-value; the equivalence and sequential statements;
        each skipped check with its reason; each note.
        """
        bad = list(self.failed_checks())
        lines = [self._verdict_head() if self.passed or not bad else f"FAIL: {', '.join(bad)}"]
        for k in bad:
            lines.append(f"failed: {self.describe(k)}")
        if self.n:   # a subject failure tested no samples
            lines.append(f"{self.main} chi2 = {self.statistic:.4g} (df {self.df}), TV ~ {_fmt_num(self.tv_estimate)} "
                         f"(<= {_fmt_num(self.tv_upper)}), detectable TV {_fmt_num(self.detectable_tv)} at alpha "
                         f"{self.alpha:g}, power {self.power:g}, n = {self.n:,}")
        if self.checks:
            lines.append("checks (Holm-adjusted p): " + ", ".join(f"{k} {v:.3g}" for k, v in holm(self.checks).items()))
        eq = self.equivalence()
        if eq:
            lines.append(f"equivalence: {eq}")
        seq = self.details.get("sequential")
        if isinstance(seq, dict) and seq.get("statement"):
            lines.append(f"sequential: {seq['statement']}")
        lines += [f"skipped: {k} ({v})" for k, v in self.skipped.items()]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def subject_failure(cause: str, *, alpha: float = 1e-3, power: float = 0.99, main: str = "subject",
                    details: dict | None = None, notes=()) -> Certificate:
    """A FAIL certificate for a subject that misbehaved (:class:`exactness._checks.SubjectError`).

    ``passed`` False, ``pvalue`` 0, the single check ``"subject"`` at p = 0 with ``details["subject"]["error"]
    = cause``; no samples were tested, so ``n`` is 0 and every TV field is NaN (nothing is claimed about the
    law).  The summary reads ``FAIL: subject: <cause>``.
    """
    nan = float("nan")
    return Certificate(passed=False, statistic=nan, pvalue=0.0, tv_estimate=nan, tv_upper=nan, detectable_tv=nan,
                       n=0, alpha=alpha, power=power, df=0, g_statistic=nan, g_pvalue=0.0, checks={"subject": 0.0},
                       details={"subject": {"error": str(cause)}, **(details or {})}, notes=tuple(notes), main=main)


def _fmt_num(x, spec=".3g") -> str:
    x = float(x)
    return format(x, spec) if math.isfinite(x) else str(x)


def holm_adjust(raw: np.ndarray) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values: (m,) float64 in [0, 1] -> (m,) float64 in [0, 1].

    The values of ``statsmodels.stats.multitest.multipletests(raw, method="holm")[1]`` (a test pins them), computed
    here because that function runs a full ``gc.collect()`` on every call: 40-100 ms per certificate in a process
    holding many objects, most of a small certificate's time.
    """
    m = raw.size
    order = np.argsort(raw, kind="stable")                        # ascending p_(1) <= ... <= p_(m)
    stepped = np.maximum.accumulate(raw[order] * np.arange(m, 0, -1))   # max_{j<=i} (m - j + 1) p_(j)
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def holm(pvalues: dict) -> dict:
    """Holm-adjusted p-values, ``{check: p}`` -> ``{check: adjusted p}`` (:func:`holm_adjust`)."""
    if not pvalues:
        return {}
    names = list(pvalues)
    raw = np.clip(np.array([pvalues[k] for k in names], dtype=np.float64), 0.0, 1.0)
    return dict(zip(names, holm_adjust(raw).tolist()))




def _import_lazy_modules() -> None:
    """Import what the checks import lazily before a time limit is armed (a limit firing mid-import would leave a
    half-initialised module behind)."""
    import scipy.optimize  # noqa: F401
    import scipy.stats  # noqa: F401
    import statsmodels.stats.multitest  # noqa: F401
    import statsmodels.stats.proportion  # noqa: F401


@contextmanager
def subject_time_limit(timeout: float | None):
    """``exactness._timeout.time_limit(timeout)`` unless an outer limit due no later is running here (e.g. a
    ``resispec certify`` cell's: it governs, and its ``TimeLimitExceeded`` passes through;
    :func:`exactness._timeout.own_limit`); yields whether this limit was armed."""
    from ._timeout import own_limit, time_limit

    if own_limit(timeout) is None:
        yield False
        return
    _import_lazy_modules()
    with time_limit(timeout) as armed:
        yield armed


#: Top-level modules whose frames are never "the subject's call" in :func:`hung_call` without a subject (the
#: harness, numerical libraries it calls, the standard library's pools and waits, executors).
_NOT_SUBJECT = ("exactness", "numpy", "scipy", "statsmodels", "concurrent", "threading", "multiprocessing",
                "selectors", "queue", "contextlib", "functools", "signal", "copy", "inspect", "importlib", "ray",
                "_pytest", "pytest", "pluggy")


def hung_call(exc: BaseException, subject=None) -> str | None:
    """The subject's call that a time limit (``exactness._timeout.TimeLimitExceeded``) interrupted, from its
    traceback, named ``"Class.method"`` (``"Hangs.verify"``) or by its function's qualified name.

    With ``subject`` (the verifier, sampler or proxy certified): the outermost frame that is one of its methods
    (``self is subject``) or the function itself; None when none is in the traceback (the limit fell in the
    harness's own code, or the subject ran in a worker process).  Without: the outermost frame outside the
    harness and the libraries it calls (``_NOT_SUBJECT``)."""
    import functools

    while isinstance(subject, functools.partial):
        subject = subject.func
    code_of = getattr(getattr(subject, "__func__", subject), "__code__", None)
    tb = exc.__traceback__
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        code = frame.f_code
        obj = frame.f_locals.get("self") if code.co_argcount else None
        if subject is not None:
            if obj is subject:
                return f"{type(subject).__name__}.{code.co_name}"
            if code_of is not None and code is code_of:
                return getattr(code, "co_qualname", code.co_name)
            continue
        mod = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if mod and mod not in _NOT_SUBJECT:
            return f"{type(obj).__name__}.{code.co_name}" if obj is not None else getattr(code, "co_qualname",
                                                                                            code.co_name)
    return None


def stopped_call(exc: BaseException) -> str | None:
    """The subject's call that a run's hard time limit caught running, or None (the harness's own computation, or
    no alarm fired: a :class:`RunOutOfTime` before the hard limit).

    Read from the FIRST alarm of the limit (``exc.first``): a subject that swallowed it and returned is caught
    all the same.  Its recorded call (``.running``), else the subject's frame in its traceback
    (:func:`hung_call`: a conversion of the subject's output, ``__array__``, outside a marked
    call)."""
    from ._timeout import RunOutOfTime

    first = getattr(exc, "first", None)
    if first is None:
        if isinstance(exc, RunOutOfTime):
            return None
        first = exc
    what = getattr(first, "running", None)
    return hung_call(first) if what is None else what


def timed_out_cause(what: str, timeout: float, exc: BaseException | None = None, subject=None) -> str:
    """The cause of a subject stopped at the hard limit of ``timeout`` (one line): ``"Hangs.verify did not return
    within 20 s (timeout = 10 plus a grace of 10 s; ...)"`` naming the call that was running (:func:`hung_call` of
    ``exc`` and ``subject``), else ``what`` timed out."""
    from ._timeout import hard_limit

    hard = hard_limit(timeout)
    call = hung_call(exc, subject) if exc is not None else None
    if call is not None:
        return (f"{call} did not return within {hard:g} s (timeout = {timeout:g} plus a grace of {hard - timeout:g} "
                "s; pass a larger timeout=, or 0 for none)")
    return (f"{what} timed out after {hard:g} s (timeout = {timeout:g} plus a grace of {hard - timeout:g} s): a call "
            "of the subject that never returned (pass a larger timeout=, or 0 for none)")


def run_subject(body, *, timeout: float | None, what: str, alpha: float, power: float,
                details: dict | None = None, subject=None) -> Certificate:
    """``body()`` (returning a :class:`Certificate`) under the caller's time limit ``timeout`` (seconds; None / 0:
    none): past it no new call of the subject's draws starts and a :class:`exactness.BudgetError` is raised (the
    caller's limit: nothing decided, unless a check done by then already convicts), and a call still running at
    ``hard_limit(timeout) = timeout + max(10 s, timeout)`` is a hang.  A :class:`exactness.SubjectError` raised
    inside, or a hang, is a FAIL certificate naming the cause (:func:`subject_failure`; for a hang, the call of
    ``subject`` that did not return, else ``what``), never an exception.  The caller's own errors (ValueError,
    TypeError) pass through."""
    from ._checks import BudgetError, SubjectError
    from ._timeout import RunOutOfTime, TimeLimitExceeded, hard_limit, out_of_time, run_deadline

    ours = False                               # whether this call's deadline governs (an outer one may be sooner)
    try:
        with run_deadline(timeout) as ours, subject_time_limit(hard_limit(timeout) if timeout else None) as armed:
            return body()
    except SubjectError as exc:
        return subject_failure(exc.cause, alpha=alpha, power=power, details=details)
    except RunOutOfTime as exc:
        if not ours:                           # an outer deadline (a cell's): its owner decides
            raise
        if exc.first is None:                  # every call returned: the run needs more time than the limit
            raise BudgetError(out_of_time(float(timeout), "timeout= (exactness.Run(time_limit=...) at the front door)",
                                          "timeout")) from None
        return subject_failure(timed_out_cause(what, float(timeout), exc.first, subject), alpha=alpha, power=power,
                               details=details)
    except TimeLimitExceeded as exc:
        if not armed:
            raise
        return subject_failure(timed_out_cause(what, float(timeout), exc, subject), alpha=alpha, power=power,
                               details=details)


def sampler_name(sample) -> str:
    """How a sampler is named in a cause: ``"my_sampler(rng, n)"``."""
    name = getattr(sample, "__qualname__", None) or type(sample).__name__
    return f"{name}(rng, n)"


#: A law that arrives in a float type narrower than float64 (float16, float32) is accepted when its rows sum to 1
#: within this many units of that type's machine epsilon (float16: 3.9e-3), or within ``SUM_TOL`` if larger.
NARROW_EPS = 4
#: Rows whose float64 sum is off 1 by more than this are renormalised at the door (far below ``EXACT_TOL``).
RENORM_ABOVE = 1e-13


def _widened(x):
    """``x`` as float64 divided by its row sums when it arrives as float16 / float32 with rows summing to 1 within
    ``NARROW_EPS`` of its epsilon (a float16 softmax is off by ~1e-4); otherwise ``x`` unchanged (the door's own
    checks then speak: non-finite, negative, off by more)."""
    dtype = getattr(x, "dtype", None)
    try:
        narrow = dtype is not None and np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize < 8
    except TypeError:       # a dtype numpy does not know (torch.bfloat16): the door reports it
        return x
    if not narrow:
        return x
    from ._checks import SUM_TOL

    a = np.asarray(x, dtype=np.float64)
    if a.ndim not in (1, 2) or a.size == 0 or not np.all(np.isfinite(a)) or np.any(a < 0):
        return x
    sums = a.sum(axis=-1, keepdims=True)
    tol = max(SUM_TOL, NARROW_EPS * float(np.finfo(np.dtype(dtype)).eps))
    if np.any(sums <= 0) or np.any(np.abs(sums - 1.0) > tol):
        return x
    return a / sums


def _renormalised(a: np.ndarray) -> np.ndarray:
    """Rows of a checked (B, V) float64 law divided by their sums where off 1 by more than ``RENORM_ABOVE``
    (a broadcast view of one row stays one)."""
    if a.ndim == 2 and a.shape[0] > 1 and a.strides[0] == 0:
        return np.broadcast_to(_renormalised(a[:1]), a.shape)
    sums = a.sum(axis=-1, keepdims=True)
    if not np.any(np.abs(sums - 1.0) > RENORM_ABOVE):
        return a
    return np.ascontiguousarray(a / sums)


def door_node(p, q=None, *, names=("p", "q")):
    """The public certify functions' one check of ``p, q`` (:func:`resispec._validation.as_node`), normalised.

    As ``as_node`` (a ``Laws`` comes back as is, trusted), and then every row is divided by its sum, so a law
    accepted within ``SUM_TOL`` of summing to 1 (a float32 softmax) is certified as its float64
    renormalisation is; a float16 / float32 law is accepted within ``NARROW_EPS`` of its type's epsilon.

    Raises
    ------
    TypeError, ValueError
        As ``as_node`` (naming ``names``).
    """
    from resispec._validation import Laws, as_node

    if isinstance(p, Laws):
        return as_node(p, q, names=names)
    node = as_node(_widened(p), _widened(q), names=names)
    return Laws(_renormalised(node.p), _renormalised(node.q), node.squeeze)


def door_law(law, *, name: str = "law") -> np.ndarray:
    """One law (V,) checked (:func:`exactness._checks.check_law`) and normalised as :func:`door_node` does."""
    from ._checks import check_law

    return _renormalised(check_law(_widened(law), name=name)[None])[0]


# one home for a subject's exception as a cause (exactness._checks); the names stay importable from here
from ._checks import subject_call as call_subject  # noqa: E402
from ._checks import subject_cause  # noqa: E402,F401


def _count_chunk(V: int, m: int, seed: int, sample) -> np.ndarray:
    """Counts (V,) of one chunk ``sample(default_rng(seed), m)``; a misbehaving sampler raises SubjectError."""
    name = sampler_name(sample)
    out = call_subject(sample, name, np.random.default_rng(seed), m)
    try:
        t = check_tokens(out, V, m, name=name)
    except (TypeError, ValueError) as exc:   # the sampler's output, not the caller's argument: a FAIL
        raise SubjectError(str(exc)) from None
    return np.bincount(t, minlength=V)


def count_samples(sample, V: int, n: int, rng: np.random.Generator, *, chunk: int = CHUNK,
                  workers: int = 1) -> np.ndarray:
    """Call ``sample(rng_i, m)`` on chunks of at most ``chunk`` draws and return token counts (V,) int64.

    Chunk ``i`` gets its own generator seeded from ``rng``, so the counts are
    the same for any number of ``workers`` (processes, forked on POSIX by
    ``exactness.executors.ProcessExecutor``; ``workers > 1`` falls back to one
    process where fork is unavailable).  A sampler that raises, or returns
    anything but (m,) integer ids in ``[0, V)``, or kills its worker process, raises
    :class:`exactness.SubjectError` naming it.
    """
    from functools import partial

    from .executors import ProcessExecutor, subject_deaths

    sizes = [min(chunk, n - s) for s in range(0, n, chunk)]
    seeds = rng.integers(0, 2**63 - 1, size=len(sizes)).tolist()
    fn = partial(_count_job, V, sample)
    counts = np.zeros(V, dtype=np.int64)
    with subject_deaths(sampler_name(sample), workers):
        for c in ProcessExecutor(workers).map_chunks(fn, list(zip(sizes, seeds))):
            counts += c
    return counts


def _count_job(V: int, sample, job) -> np.ndarray:
    return _count_chunk(V, *job, sample)


def impossible_tokens(counts, law, *, limit: int = 5) -> tuple[dict, str] | None:
    """``({token: count}, reason)`` of the tokens of target probability 0 that were emitted (the first ``limit``
    by count), or None when there are none: one such token fails a certificate at once."""
    counts = np.asarray(counts)
    law = np.asarray(law, dtype=np.float64)
    bad = np.flatnonzero((law <= 0) & (counts > 0))
    if bad.size == 0:
        return None
    order = bad[np.argsort(-counts[bad], kind="stable")][:limit]
    seen = {int(t): int(counts[t]) for t in order}
    total = int(counts[bad].sum())
    listed = ", ".join(f"token {t} x {c:,}" for t, c in seen.items())
    more = f" and {bad.size - len(seen)} more" if bad.size > len(seen) else ""
    reason = (f"impossible token{'s' if bad.size > 1 else ''} emitted: {listed}{more} ({total:,} of "
              f"{int(counts.sum()):,} samples) where the target gives probability 0; one is proof of bias")
    return seen, reason


def certificate_from_counts(counts, law, *, alpha: float, power: float, tv: float | None = None,
                            checks: dict | None = None, details: dict | None = None,
                            min_expected: float = MIN_EXPECTED, skipped: dict | None = None,
                            notes=()) -> Certificate:
    """Build a :class:`Certificate` from marginal counts plus extra check p-values.

    A token of target probability 0 among the counts fails the marginal check at once (p = 0, whatever ``n``
    and the pooling): ``details["marginal"]["impossible_tokens"]`` maps each such token (the first five by
    count) to its count, ``details["marginal"]["reason"]`` and a note name them.

    Raises
    ------
    ValueError
        The marginal test has no degrees of freedom although the law has two
        or more tokens (too few samples or too large ``min_expected``) and no
        impossible token was seen: a test that cannot fail is an error, not a
        pass.
    """
    counts = np.asarray(counts)
    n = int(counts.sum())
    min_expected = check_min_expected(min_expected)
    res = gof_test(counts, law, min_expected=min_expected)
    imp = impossible_tokens(counts, law)
    if imp is None and res.df == 0 and np.count_nonzero(np.asarray(law) > 0) > 1:
        raise BudgetError(no_df_message(np.asarray(law, dtype=np.float64), n, min_expected))
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
    if imp is not None:   # one token of probability 0 is proof of bias: p = 0, named
        allchecks["marginal"] = 0.0
        adj = holm(allchecks)
        pmin = min(adj.values())
        marginal.update(impossible_tokens=imp[0], reason=imp[1])
        notes = (imp[1],) + tuple(notes)
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
                    tv: float | None = None, min_expected: float = MIN_EXPECTED, workers: int = 1,
                    timeout: float | None = DEFAULT_TIMEOUT) -> Certificate:
    """Certify a black-box sampler against a law by Monte Carlo.

    Draws ``n`` tokens (in chunks of at most ``CHUNK``) and runs the Pearson
    chi-square and G-tests (``scipy.stats.power_divergence``) after the
    pooling rule of :mod:`exactness.gof`.

    Parameters
    ----------
    sample : callable ``(rng, m) -> (m,) int64``
        Draws ``m`` token ids with the numpy Generator it is given.
    law : array_like, shape (V,), float64
        The law the samples must follow (non-negative, finite, sums to 1;
        divided by its sum at the door, so a float32 / float16 law is certified
        as its float64 renormalisation, :func:`exactness.sampling.door_law`).
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
    timeout : float or None, default ``DEFAULT_TIMEOUT`` (2 h)
        Hard wall-clock limit in seconds (``0`` / None: none; SIGALRM, main
        thread on POSIX; an outer limit already running governs instead).

    Returns
    -------
    Certificate
        A sampler that misbehaves -- raises, returns the wrong dtype or shape
        or ids outside ``[0, V)``, or runs past ``timeout`` -- gives a FAILED
        certificate naming the cause (``checks == {"subject": 0.0}``,
        ``details["subject"]["error"]``; :func:`subject_failure`).  A token
        of probability 0 under ``law`` fails it at once, named with its count.

    Raises
    ------
    TypeError
        Bad argument types (``sample`` not callable, ...).
    ValueError
        Bad law (negative, non-finite, not summing to 1), ``n < 1``;
        ``min_expected`` not finite and > 0; no degrees of freedom after
        pooling (law with two or more tokens); for ``n > PILOT_ABOVE`` (2**24),
        a run that a timed pilot of ``PILOT`` = 2,000 draws (on a private
        seed) estimates at more than ``MAX_SECONDS`` (1 h).

    Memory is bounded: the sampler is asked for at most ``CHUNK`` (2**20)
    draws per call and only the counts are kept.
    """
    from ._timeout import check_timeout

    law = door_law(law)
    n = check_n(n)
    alpha = check_alpha(alpha)
    check_tv(tv)
    if not callable(sample):
        raise TypeError(f"sample must be a callable (rng, n) -> (n,) int64, got {type(sample).__name__}")
    rng = as_generator(seed)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    min_expected = check_min_expected(min_expected)
    timeout = check_timeout(timeout)

    def body() -> Certificate:
        if n > limits.PILOT_ABOVE:
            est = pilot_seconds(lambda r, m: _count_chunk(law.size, m, int(r.integers(2**63 - 1)), sample), n)
            est /= int(workers)
            if est > limits.MAX_SECONDS:
                raise ValueError(f"n = {n:.3g} would take ~{_hours(est)} (timed pilot of {limits.PILOT:,} draws, "
                                 f"{int(workers)} worker(s); limit exactness.limits.MAX_SECONDS = "
                                 f"{_hours(limits.MAX_SECONDS)}): pass a smaller n, or use tv= / exactness.samples_for_tv "
                                 "to plan the n you need")
        counts = count_samples(sample, law.size, n, rng, workers=int(workers))
        return certificate_from_counts(counts, law, alpha=alpha, power=power, tv=tv, min_expected=min_expected)

    return run_subject(body, timeout=timeout, what=sampler_name(sample), alpha=alpha, power=power, subject=sample)
