"""Budget by the bias to detect: plan ``n`` from a requested TV, time it with a pilot, refuse what cannot run.

``certify_verifier(..., tv=x)`` with ``n=None`` calls :func:`plan_for_tv` (``n = samples_for_tv(x, df,
alpha, power)`` for the fixed-n chi-square test, or the sequential budget
:func:`exactness.sequential.sequential_samples_for_tv` with ``sequential=True``; ``df`` is the pooled
degrees of freedom of the marginal test at that ``n``), then :func:`check_planned_budget` (a timed
pilot; a plan over the time or memory limit is a ``ValueError`` naming ``tv`` and the fixes).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from . import limits
from ._checks import BudgetError  # noqa: F401  (defined there: the certificate raises it too)
from .certificate import _hours, pilot_seconds
from .gof import MIN_EXPECTED, pool_cells
from .power import samples_for_tv

log = logging.getLogger("exactness.plan")

#: Bytes kept per Monte Carlo draw by ``certify_verifier`` (int64 token and accepted index).
BYTES_PER_DRAW = 16


def pooled_df(law, n: int, min_expected: float = MIN_EXPECTED) -> int:
    """Degrees of freedom (pooled cells - 1) of the marginal test of ``n`` draws against ``law`` (V,) float64."""
    scale = float(min(int(n), 10**300))  # a tiny tv plans a Python int beyond the float range; pooling saturates
    cell = pool_cells(scale * np.asarray(law, dtype=np.float64), min_expected)
    return int(cell.max()) if np.any(cell >= 0) else 0  # cells - 1


def plan_for_tv(law, tv: float, *, alpha: float, power: float, sequential: bool = False) -> tuple[int, int]:
    """``(n, df)``: draws that detect every bias of TV >= ``tv`` with ``power`` at level ``alpha``.

    ``df`` depends on ``n`` through the pooling rule, so ``n`` and ``df`` are iterated to a fixed point
    (starting from ``df = support - 1``; at most 8 rounds, keeping the largest ``n`` seen).

    Parameters
    ----------
    law : ndarray, shape (V,), float64, checked by the caller
    tv : float in (0, 1), checked by the caller
    alpha, power : float in (0, 1)
    sequential : bool
        Plan the sequential e-process's budget instead of the fixed-n chi-square's.

    Returns
    -------
    n, df : int
    """
    from .sequential import sequential_samples_for_tv

    plan = sequential_samples_for_tv if sequential else samples_for_tv
    df = max(1, int(np.count_nonzero(np.asarray(law) > 0)) - 1)
    n = 0
    for _ in range(8):
        n_new = max(n, plan(tv, df, alpha=alpha, power=power))
        df_new = max(1, pooled_df(law, n_new))
        if n_new == n and df_new == df:
            break
        n, df = n_new, df_new
    while np.count_nonzero(np.asarray(law) > 0) > 1 and pooled_df(law, n) == 0:
        n *= 2  # a large tv plans fewer draws than the pooled test needs to have one degree of freedom
    return n, df


def count_text(n: int) -> str:
    """``n`` with thousands separators, or ``~1eK`` from 10^15 on (a tiny tv: not a 300-digit number)."""
    return f"{n:,}" if n < 10**15 else f"~1e{len(str(n)) - 1}"




def check_planned_budget(draw, n: int, *, tv: float, workers: int, max_samples: int,
                         what: str = "the verifier", fixed_seconds: float = 0.0, hint: str = "") -> float:
    """Time a pilot of ``PILOT`` draws and refuse a plan over ``MAX_SECONDS`` or ``max_samples``.

    Parameters
    ----------
    draw : callable ``(rng, m)``, the Monte Carlo draw of ``m`` samples
    n : int, planned draws
    tv : float, the requested TV (named in the error)
    workers : int, processes sharing the draws
    max_samples : int, memory limit in draws
    fixed_seconds : float, seconds added to the pilot's estimate before dividing by ``workers`` (e.g. a fast
        path's per-chunk recheck, :meth:`exactness.sampling.NodeSampler.pilot_sampler`)
    hint : str, appended to the refusal (another route to the same bound)

    Returns
    -------
    float, estimated seconds for the ``n`` draws (also logged on ``exactness.plan``, a WARNING above 10 s).

    Raises
    ------
    ValueError
        The plan exceeds ``max_samples`` draws (memory; fix: a larger ``tv``) or
        ``exactness.limits.MAX_SECONDS`` (fixes: a larger ``tv``, more time by raising
        ``exactness.limits.MAX_SECONDS``, more ``workers=``); the message names ``tv``.
    """
    huge = n > 10**300  # beyond the float range (a tiny tv): refused below, without an OverflowError
    est = math.inf if huge else (pilot_seconds(draw, n) + fixed_seconds) / workers
    gib = math.inf if huge else n * BYTES_PER_DRAW / 2**30
    n_txt = count_text(n)
    over = []
    if n > max_samples:
        over.append(f"{gib:.3g} GiB for {n_txt} draws exceeds the memory limit of {max_samples:,} draws "
                    "(exactness.limits.MAX_SAMPLES when the draws are kept (sequential), MAX_COUNTED "
                    "when they are counted)")
    if est > limits.MAX_SECONDS:
        over.append(f"~{_hours(est)} with {workers} worker(s) exceeds the time limit "
                    f"exactness.limits.MAX_SECONDS = {_hours(limits.MAX_SECONDS)}")
    if over:
        fix = "ask for a larger tv (n grows like 1/tv^2)" + (
            ", allow more time by raising exactness.limits.MAX_SECONDS, or pass workers= (processes)"
            if est > limits.MAX_SECONDS else " (more workers do not reduce the memory)")
        raise BudgetError(f"tv = {tv:g} needs n = {n_txt} draws (timed pilot of {limits.PILOT:,} draws of {what}): "
                         + "; ".join(over) + hint + "; " + ("else " if hint else "") + fix)
    msg = f"tv = {tv:g}: planned n = {n:,} draws, estimated {_hours(est)} on this machine ({workers} worker(s))"
    log.log(logging.WARNING if est > 10 else logging.INFO, msg)
    return est
