"""Many cells at once: certify a grid, correct for multiple testing, check calibration.

A *cell* is one (verifier, pair family node, k) configuration.  Each cell's
p-value is its certificate's Holm-adjusted minimum over its checks; across
cells the p-values are corrected with Holm (family-wise, decides the verdict)
and Benjamini-Hochberg (false discovery rate, reported), both from
``statsmodels.stats.multitest.multipletests`` (Holm 1979; Benjamini &
Hochberg 1995).  Calibration: under exact verifiers the raw Monte Carlo
p-values are uniform -- tested with ``scipy.stats.kstest`` -- and the
false-positive rate at a nominal level lies in its Clopper-Pearson interval
(computed over the cells of the verifiers that pass).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from scipy import stats

from .certificate import Certificate
from .executors import check_executor, executor_for
from .sampling import door_node, k_support
from .verifier_cert import certify_verifier, check_workers

#: Checks whose p-values are continuous Monte Carlo p-values (used for calibration).
MC_CHECKS = ("marginal", "joint", "accepted_count", "residual", "batched_rows")


@dataclass(frozen=True)
class Cell:
    """One configuration: ``verifier`` at node ``(p, q)`` with ``k`` candidates."""

    verifier_name: str
    verifier: object
    family: str
    k: int
    p: np.ndarray
    q: np.ndarray


@dataclass
class CellResult:
    """Outcome of one cell (``certificate`` is None when the cell was skipped)."""

    verifier: str
    family: str
    k: int
    V: int
    certificate: Certificate | None
    skipped: str = ""
    acceptance: float | None = None
    alpha_star: float | None = None
    rrs_acceptance: float | None = None
    seconds: float = 0.0
    p_holm: float | None = None
    p_bh: float | None = None

    @property
    def exact_tv(self):
        if self.certificate is None:
            return None
        return self.certificate.details.get("exact", {}).get("tv")

    @property
    def acceptance_ok(self) -> bool:
        return self.acceptance is None or self.alpha_star is None or self.acceptance <= self.alpha_star + 1e-9

    def mc_pvalues(self) -> list[float]:
        """Raw Monte Carlo p-values of tests with df >= 1 (a df-0 test has p = 1 by construction)."""
        if self.certificate is None:
            return []
        c, d = self.certificate.checks, self.certificate.details
        dfs = d.get("mc_df", {})
        out = [c[k] for k in MC_CHECKS if k in c and dfs.get(k, 0) >= 1]
        for t in ("tree_bonus", "tree_two_level"):
            if t in d and dfs.get(t, 0) >= 1:
                out.append(d[t]["pvalue_mc"])
        return out


@dataclass(frozen=True)
class Calibration:
    """Uniformity of p-values under the null.

    Attributes
    ----------
    n : int, number of p-values
    ks_statistic, ks_pvalue : float, ``scipy.stats.kstest`` against U(0, 1)
    level : float, nominal level of the false-positive rate
    fpr : float, fraction of p-values below ``level``
    ci_low, ci_high : float, Clopper-Pearson 95 % interval of ``fpr``
    consistent : bool, ``ci_low <= level <= ci_high``
    """

    n: int
    ks_statistic: float
    ks_pvalue: float
    level: float
    fpr: float
    ci_low: float
    ci_high: float

    @property
    def consistent(self) -> bool:
        return self.ci_low <= self.level <= self.ci_high


def calibration(pvalues, level: float = 0.05) -> Calibration:
    """KS test of p-values against U(0, 1) and the false-positive rate at ``level``.

    Parameters
    ----------
    pvalues : array_like, shape (m,), float in [0, 1]
    level : float in (0, 1)

    Raises
    ------
    ValueError
        Empty input or values outside [0, 1].
    """
    from statsmodels.stats.proportion import proportion_confint

    pv = np.asarray(pvalues, dtype=np.float64)
    if pv.size == 0:
        raise ValueError("calibration needs at least one p-value")
    if not np.all(np.isfinite(pv)) or np.any(pv < 0) or np.any(pv > 1):
        raise ValueError("pvalues must lie in [0, 1]")
    ks = stats.kstest(pv, "uniform")
    hits = int(np.count_nonzero(pv < level))
    lo, hi = proportion_confint(hits, pv.size, alpha=0.05, method="beta")
    return Calibration(int(pv.size), float(ks.statistic), float(ks.pvalue), float(level), hits / pv.size,
                       float(lo), float(hi))


def adjust(pvalues, method: str) -> np.ndarray:
    """Adjusted p-values (``method``: "holm" or "fdr_bh") via statsmodels ``multipletests``."""
    from statsmodels.stats.multitest import multipletests

    pv = np.clip(np.asarray(pvalues, dtype=np.float64), 0.0, 1.0)
    if pv.size == 0:
        return pv
    return multipletests(pv, alpha=0.05, method=method)[1]


@dataclass
class GridResult:
    """All cells of a run with corrected p-values and calibration."""

    cells: list[CellResult]
    alpha: float
    calibration: Calibration | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def failed_cells(self) -> list[CellResult]:
        return [c for c in self.cells if c.certificate is not None
                and ((c.p_holm is not None and c.p_holm < self.alpha) or not c.acceptance_ok)]

    def untested_verifiers(self) -> list[str]:
        """Verifiers none of whose cells was certified (every cell skipped): never a pass."""
        tested = {c.verifier for c in self.cells if c.certificate is not None}
        return sorted({c.verifier for c in self.cells} - tested)

    def failed_verifiers(self) -> list[str]:
        """Verifiers with a failed cell (not one whose budget or --time-limit was refused: NOT RUN decides nothing),
        and those with no certified cell at all (nothing was tested)."""
        return sorted({c.verifier for c in self.failed_cells() if not c.certificate.details.get("refused")}
                      | set(self.untested_verifiers()))

    def not_run_verifiers(self) -> list[str]:
        """Verifiers with a cell NOT RUN (its budget or --time-limit refused) and no failed cell."""
        failed = set(self.failed_verifiers())
        return sorted({c.verifier for c in self.refused_cells()} - failed)

    def subject_causes(self) -> dict[str, tuple[str, int]]:
        """``{verifier: (cause, cells)}`` for the verifiers with cells that failed because the subject misbehaved
        (raised, called ``sys.exit``, emitted a bad token, did not return, reported accepted indices that do not
        name its candidates): the first such cell's cause (its ``details["error"]`` without the ``"error: "``
        prefix, or the ``accepted_index`` check's reason) and how many cells failed so."""
        out: dict[str, tuple[str, int]] = {}
        for c in self.cells:
            d = c.certificate.details if c.certificate is not None else {}
            cause = None
            if d.get("subject_misbehaved"):
                cause = str(d["error"]).removeprefix("error: ")
            elif c.certificate is not None and "accepted_index" in c.certificate.failed_checks(adjusted=False):
                cause = "accepted index breaks the contract: " + str(d["accepted_index"]["error"])
            if cause is not None:
                first, m = out.get(c.verifier, (cause, 0))
                out[c.verifier] = (first, m + 1)
        return out

    def refused_cells(self) -> list:
        """Failed cells whose budget was refused (too few draws for a test, or over the time / memory limit): the
        caller's request, no verdict on the verifier."""
        return [c for c in self.failed_cells() if c.certificate.details.get("refused")]

    @property
    def passed(self) -> bool:
        """True when some cell was certified, no cell failed and every verifier had a certified cell."""
        return bool(self.cells) and not self.failed_cells() and not self.untested_verifiers()


def _acceptances(verifier, p, q, k, known=None):
    from resispec import acceptance_probability, get_verifier, optimal_acceptance

    out = [None, None, None]
    d = getattr(verifier, "drafting", "iid")
    if known is not None:
        out[0] = known
    else:
        try:
            out[0] = float(acceptance_probability(verifier, p, q, k, limit=300_000))
        except (ValueError, TypeError):
            pass
    try:
        if not hasattr(verifier, "draft_law"):
            out[1] = float(optimal_acceptance(p, q, k, drafting="iid" if d == "any" else d))
    except ValueError:
        pass
    out[2] = float(acceptance_probability(get_verifier("rrs"), p, q, k))
    return out


#: How a cell whose budget was refused (``exactness.budget.BudgetError``: the caller's --n / --tv) starts its reason.
REFUSED = "not run: "


def _failure_reason(exc: BaseException) -> str:
    """``"error: RuntimeError: boom (in verify, mine.py:12)"``: the exception and its innermost frame."""
    from .budget import BudgetError

    from ._checks import SubjectError, exception_line

    if isinstance(exc, BudgetError):         # nothing decided: not a verdict on the verifier; the whole fix shown
        return REFUSED + " ".join(str(exc).split())
    if isinstance(exc, SubjectError):        # the cause already names the subject's method
        return f"error: {exc.cause}"
    return "error: " + exception_line(exc, limit=160)


def subject_misbehaved(exc: BaseException) -> bool:
    """Whether a cell's exception is the subject's misbehaviour (a :class:`exactness.SubjectError`, a
    ``sys.exit`` of its code or any other ``BaseException`` it raised, a time limit it ran past, a cell task whose
    worker died), not a budget refusal or another error."""
    from ._checks import SubjectError
    from ._timeout import TimeLimitExceeded
    from .executors import WorkerDied

    # a BaseException that is not an Exception (asyncio.CancelledError, a test framework's outcome) came from the
    # subject too: the harness's own (KeyboardInterrupt) never reaches a cell's result
    return isinstance(exc, (SubjectError, SystemExit, TimeLimitExceeded, WorkerDied)) or not isinstance(exc, Exception)


def _raised_cell(cell: Cell, exc: BaseException, alpha: float, seconds: float) -> CellResult:
    """The failed cell of a run that raised ``exc``: its reason, whether the subject misbehaved, whether the budget
    was refused (``exactness.budget.BudgetError``: the caller's request)."""
    from .budget import BudgetError

    return _failed_cell(cell, _failure_reason(exc), alpha, seconds, subject=subject_misbehaved(exc),
                        refused=isinstance(exc, BudgetError))


def _failed_cell(cell: Cell, reason: str, alpha: float, seconds: float, subject: bool = False,
                 refused: bool = False) -> CellResult:
    """A cell that could not be certified (it raised or timed out): a FAILED certificate, p = 0.

    The certificate's only check is named by ``reason`` (so every report that
    lists the failing checks shows it) and ``details["error"]`` holds it too;
    ``details["subject_misbehaved"]`` says whether the subject misbehaved (raised, called ``sys.exit``,
    emitted a bad token, did not return: the reports say "subject error" and name the cause);
    ``details["refused"]`` whether its budget was refused (``GridResult.refused_cells``).
    """
    nan = float("nan")
    cert = Certificate(passed=False, statistic=nan, pvalue=0.0, tv_estimate=nan, tv_upper=nan, detectable_tv=nan,
                       n=0, alpha=alpha, checks={reason: 0.0},
                       details={"error": reason, "subject_misbehaved": bool(subject),
                                "refused": bool(refused)})
    return CellResult(cell.verifier_name, cell.family, cell.k, cell.p.size, cert, seconds=seconds)


def _import_harness_modules() -> None:
    """Import what the checks import lazily, before a time limit is armed (see ``run_cell``)."""
    import scipy.optimize  # noqa: F401
    import scipy.stats  # noqa: F401
    import statsmodels.stats.multitest  # noqa: F401
    import statsmodels.stats.proportion  # noqa: F401

    import resispec.analysis  # noqa: F401
    import resispec.bounds  # noqa: F401


def run_cell(cell: Cell, *, n: int | None, alpha: float, seed, timeout: float | None = None,
             workers: int = 1, executor="process", tv: float | None = None,
             sequential: bool = False) -> CellResult:
    """Certify one cell; skip (with the reason) when ``k`` exceeds the draft support or the verifier's ``supported_k``.

    Parameters
    ----------
    cell : Cell
    n : int or None, Monte Carlo draws (None = the harness budget)
    alpha : float, level of the cell's certificate
    seed : int or SeedSequence
    timeout : float or None, wall-clock limit in seconds for the cell (None or 0 = none).  Enforced with
        ``SIGALRM`` in the main thread on POSIX (``exactness._timeout``); elsewhere the limit is off.
    workers : int, processes for the cell's Monte Carlo draws (``certify_verifier(..., workers=)``)
    executor : str or Executor, who draws the cell's chunks (``certify_verifier(..., executor=)``)
    tv, sequential : ``certify_verifier(..., tv=, sequential=)``: with ``n`` None, ``tv`` plans the cell's draws;
        a plan over the time or memory limit is a failed cell with the reason

    A verifier whose ``supported_k`` excludes the cell's ``k`` gives a skipped cell (``certificate`` None,
    ``skipped`` = ``"not supported: k = 4 is not supported (Mine.supported_k = (1, 2))"``): neither a pass nor a
    failure (a verifier with no supported cell at all is untested, which fails the run).

    ``timeout`` is the caller's: past it no new ``verify`` call of the cell's draws starts, and a cell stopped so,
    every call having returned, is NOT RUN (``details["refused"]``, like a refused budget: no verdict on the
    verifier; ``resispec certify`` exits 2 when such cells are its only failures).  A call still running
    ``hard_limit(timeout) = timeout + max(10 s, timeout)`` after the cell began is a hang.

    A cell whose verifier (or anything in the cell) raises an ``Exception`` or
    ``SystemExit``, returns tokens of the wrong dtype or shape or outside ``[0, V)``
    (:class:`exactness.SubjectError`), or hangs, is not an error of the run:
    it is returned as a FAILED cell (``certificate.passed`` False, p-value 0)
    whose only check is named by the reason, e.g. ``"Mine.verify did not return within 1200 s (--time-limit 600 s plus
    a grace of 600 s)"`` (the subject's call the limit stopped; ``"timed out after 1200 s"`` when the limit fell in
    the harness's own code)
    or ``"error: Mine.verify raised RuntimeError: boom (in verify, mine.py:12)"`` (also in
    ``certificate.details["error"]``).  ``KeyboardInterrupt`` propagates.  Under the CLI's supervisor a cell still
    running ``hard + max(10 s, hard)`` after it began (``hard = hard_limit(timeout)``; a hang the alarm cannot stop:
    one long C call, the alarm swallowed in a loop) ends the whole run as a FAIL naming the cell
    (``exactness._timeout.announce``).
    """
    from ._timeout import announce, check_timeout, hard_limit

    timeout = check_timeout(timeout)
    if timeout:
        _import_harness_modules()  # a limit that fires mid-import would leave a half-initialised module behind
        announce(hard_limit(timeout), f"cell {cell.verifier_name} / {cell.family} / k = {cell.k}")   # the CLI's wall
    try:
        return _run_cell(cell, n=n, alpha=alpha, seed=seed, timeout=timeout, workers=workers, executor=executor,
                         tv=tv, sequential=sequential)
    finally:
        if timeout:
            announce(None)


def _run_cell(cell: Cell, *, n, alpha, seed, timeout, workers, executor, tv, sequential) -> CellResult:
    """:func:`run_cell` under its limit (``timeout`` checked)."""
    from ._checks import passes_through
    from ._timeout import RunOutOfTime, TimeLimitExceeded, hard_limit, run_deadline, time_limit

    t0 = time.perf_counter()
    V = cell.p.size
    hard = hard_limit(timeout) if timeout else None
    try:
        with run_deadline(timeout), time_limit(hard):     # past timeout no new verify call starts; the alarm later
            d = getattr(cell.verifier, "drafting", "iid")
            if d == "without_replacement" and cell.k > int(np.count_nonzero(cell.q > 0)):
                return CellResult(cell.verifier_name, cell.family, cell.k, V, None,
                                  skipped=f"k = {cell.k} exceeds the draft support")
            why = k_support(cell.verifier, cell.k)  # a supported_k that raises is a failed cell, below
            if why:
                return CellResult(cell.verifier_name, cell.family, cell.k, V, None, skipped=f"not supported: {why}")
            node = door_node(cell.p, cell.q)  # the cell's one check of p, q; the calls below trust it
            # this cell's limit governs (timeout=None): a verifier that misbehaves comes back as a FAIL certificate
            cert = certify_verifier(cell.verifier, node, None, cell.k, n=n, alpha=alpha, seed=seed, workers=workers,
                                    executor=executor, tv=tv, sequential=sequential, timeout=None)
            cause = (cert.details.get("subject") or {}).get("error") if "subject" in cert.checks else None
            if cause is not None:
                return _failed_cell(cell, f"error: {cause}", alpha, time.perf_counter() - t0, subject=True)
            known = cert.details.get("exact", {}).get("acceptance")   # absent when the chain was invalid
            acc, astar, rrs = _acceptances(cell.verifier, node, None, cell.k, known)
    except RunOutOfTime as exc:        # every call returned, the cell needs more time than --time-limit: not its fault
        if exc.first is None:
            from ._timeout import out_of_time

            why = out_of_time(timeout, "--time-limit (timeout=)", "the cell's --time-limit")
            return _failed_cell(cell, REFUSED + why, alpha, time.perf_counter() - t0, refused=True)
        return _hung_cell(cell, exc.first, timeout, alpha, t0, workers)   # an alarm it swallowed before: a hang
    except TimeLimitExceeded as exc:   # name the subject's call that did not return, where the traceback shows it
        return _hung_cell(cell, exc, timeout, alpha, t0, workers)
    except BaseException as exc:  # a plug-in that fails is a failed cell, never a pass or a traceback
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        return _raised_cell(cell, exc, alpha, time.perf_counter() - t0)
    return CellResult(cell.verifier_name, cell.family, cell.k, V, cert, acceptance=acc, alpha_star=astar,
                      rrs_acceptance=rrs, seconds=time.perf_counter() - t0)


def _hung_cell(cell: Cell, exc: BaseException, timeout: float, alpha: float, t0: float,
               workers: int = 1) -> CellResult:
    """The FAILED cell of a call still running at the hard limit: ``"Mine.verify did not return within 11 s
    (--time-limit 1 s plus a grace of 10 s)"`` (the call named where the traceback shows it; with forked workers
    the parent was waiting on them: their ``verify``)."""
    from ._timeout import hard_limit
    from .certificate import hung_call

    call = hung_call(exc, cell.verifier)
    if call is None and workers > 1:
        call = f"{type(cell.verifier).__name__}.verify (in a worker process, workers = {workers})"
    hard = hard_limit(timeout)
    reason = (str(exc) if call is None else
              f"{call} did not return within {hard:g} s (--time-limit {timeout:g} s plus a grace of {hard - timeout:g} s)")
    return _failed_cell(cell, reason, alpha, time.perf_counter() - t0, subject=True)


def _cell_task(job, *, n, alpha, timeout, workers, tv=None, sequential=False) -> CellResult:
    """One cell as a task (``job = (cell, seed)``): ``run_cell`` with its chunks drawn in order in the task."""
    cell, seed = job
    return run_cell(cell, n=n, alpha=alpha, seed=seed, timeout=timeout, workers=workers, executor="local",
                    tv=tv, sequential=sequential)


def run_grid(cells: list[Cell], *, n: int | None = None, alpha: float = 1e-3, seed: int = 0,
             progress: bool | str = False, calibration_level: float = 0.05,
             timeout: float | None = None, workers: int = 1, executor="process",
             address: str | None = None, tv: float | None = None, sequential: bool = False) -> GridResult:
    """Certify every cell, then correct across cells (Holm, BH) and test calibration.

    Parameters
    ----------
    cells : list of Cell
    n : int, optional, Monte Carlo draws per cell (None = default budget)
    alpha : float, family-wise level of the run
    seed : int or sequence of ints or SeedSequence, base seed (cell ``i`` uses
        ``exactness._checks.sub_seed(seed, i)`` = ``SeedSequence([seed, i])`` for an int)
    progress : bool or str, progress on stderr: False = none; True = a tqdm bar when stderr is a terminal,
        else one plain line at the first and last cell and every 10 s (for logs); or a mode of
        ``exactness._progress.Progress`` ("auto", "bar", "lines", "off")
    timeout : float, optional, wall-clock limit per cell in seconds (None or 0 = none; see ``run_cell``)
    workers : int, default 1, processes for each cell's Monte Carlo draws (see ``run_cell``): the number of
        ``SeedSequence`` chunks each cell's draws are split into, whatever the executor
    executor : str or exactness.executors.Executor, default "process"
        ``"process"`` / ``"local"``: cells one after another here, each cell's chunks drawn by that executor.
        ``"ray"`` (or any executor with ``cell_tasks``): every cell is one task (its chunks drawn in order inside
        the task), ``workers`` CPUs for a local cluster; a task that raises or whose worker dies is a FAILED
        cell.  Cell ``i`` has the same seed everywhere, so the counts and verdicts are those of ``"process"``.
    address : str, optional, the Ray cluster to join (``exactness.executors.RayExecutor``; ray only)
    tv, sequential : per cell, see ``run_cell`` and ``certify_verifier``

    Returns
    -------
    GridResult
        A cell that raised or timed out is a failed cell (p = 0): the run does not pass.

    Raises
    ------
    ValueError, TypeError
        Bad ``n``, ``alpha``, ``seed``, ``timeout``, ``workers`` or ``executor`` (checked before any cell runs);
        ray missing or its ``address`` unreachable (ValueError, before any cell runs).
    """
    from ._checks import base_seed, check_alpha, check_n, sub_seed
    from ._progress import Progress, progress_mode
    from ._timeout import check_timeout

    seed = base_seed(seed)  # TypeError / ValueError naming seed, before any cell runs

    if n is not None:
        check_n(n)
    check_alpha(alpha)
    timeout = check_timeout(timeout)
    workers = check_workers(workers)
    check_executor(executor)
    from ._checks import check_tv

    tv = check_tv(tv)
    t0 = time.perf_counter()
    bar = Progress(len(cells), "certify", "cell", mode=progress_mode(progress))
    label = lambda c: f"{c.verifier_name} {c.family} k={c.k}"  # noqa: E731
    with executor_for(executor, workers=workers, **({} if address is None else {"address": address})) as ex:
        if ex.cell_tasks:  # every cell a task; a task that fails (or whose worker dies) is a failed cell
            jobs = [(cell, sub_seed(seed, i)) for i, cell in enumerate(cells)]
            results = ex.map_chunks(partial(_cell_task, n=n, alpha=alpha, timeout=timeout, workers=workers, tv=tv,
                                            sequential=sequential), jobs,
                                    on_done=lambda i: bar.step(label(cells[i])),
                                    on_error=lambda job, exc: _raised_cell(job[0], exc, alpha, 0.0))
        else:
            results = []
            for i, cell in enumerate(cells):
                bar.start(label(cell))
                results.append(run_cell(cell, n=n, alpha=alpha, seed=sub_seed(seed, i), timeout=timeout,
                                        workers=workers, executor=ex, tv=tv, sequential=sequential))
                bar.step(label(cell))
    bar.close()
    done = [r for r in results if r.certificate is not None]
    raw = [r.certificate.pvalue for r in done]
    for r, h, b in zip(done, adjust(raw, "holm"), adjust(raw, "fdr_bh")):
        r.p_holm, r.p_bh = float(h), float(b)
    grid = GridResult(results, alpha, None, time.perf_counter() - t0)
    bad = set(grid.failed_verifiers())
    mc = [p for r in done if r.verifier not in bad for p in r.mc_pvalues()]
    grid.calibration = calibration(mc, calibration_level) if mc else None
    return grid
