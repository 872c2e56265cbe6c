"""``certify_stepwise``: bound TV(verify's law, p) by checking each step a run takes, in O(V) a state.

For a verifier whose histogram test is out of reach (ResiSpec for
without-replacement drafts at V = 151,936: every distinct rejected prefix
costs O(V), 7.5e8 draws visit ~2.6e7 of them; ``docs/certify.md``).

How.  A sequential verifier (``docs/RESISPEC.md`` s.2) declares, at each
state ``s = (p_i, q_i)`` it reaches, its step as a
:class:`resispec.verifiers.step_plan.StepPlan`: the accepted mass ``m`` and
residual rows ``r^(x)`` in a form whose column sums cost O(V).  Per draw
(candidates by the verifier's drafting, uniforms ``u`` (k + 1,)), this module

1. checks every state the draw visits: ``0 <= m <= q_i``, rows non-negative
   laws, and ``|| m + sum_x w(x) r^(x) - p_i ||_1 <= TOL`` (``w = q_i - m``),
   the condition for the step to emit ``p_i`` (section 2's lemma);
2. follows its own chain ``I``: accept candidate ``x`` iff
   ``u_i < m(x) / q_i(x)``, else continue from the declared ``r^(x)``; at the
   end draw from the last residual by inverse CDF with ``u_k``;
3. runs the verifier's ``verify`` on the same candidates and uniforms.

An *event* is a state whose check fails (a defect), a draw where ``verify``
and ``I`` emit different (token, accepted index) (a mismatch), or a state
the verifier does not declare (unverified).  Define ``I*`` as ``I`` except
that at a state failing its check it emits ``p_i`` directly: ``I*`` is exact
up to ``TOL`` in TV per step (induction from the last step; ``TOL / 2`` from the balance, as much again
from clipping ``m`` to ``q_i``), and it
coincides with ``verify`` on every draw without an event.  Hence
(coupling inequality)::

    TV(law of verify, p) <= P(event) + k TOL,

and ``x`` events in ``n`` independent draws bound ``P(event)`` by the exact
one-sided Clopper-Pearson bound at confidence ``1 - alpha``: 0 events in
``n = ln(1/alpha) / tv`` draws give TV <= tv.  Conversely a verifier with
TV(law, p) >= eps + k TOL has P(event) >= eps, so ``n`` draws see an
event with probability ``1 - (1 - eps)^n`` (the detectable TV at
``power``).  A defect or mismatch is a FAIL naming the state (replay it with
:func:`replay_state`); unverified states only widen the bound.

It checks ``verify`` and the declared steps; it trusts nothing else.  It
assumes the candidates are drawn as the verifier's ``drafting`` says (the
harness draws them, from the ``draft_law`` hook's law when the verifier has
one, and the chain is checked against that law) and that ``verify`` is a
function of its inputs and uniforms (one that ignores them mismatches).
``verify`` gets private copies of the candidates and uniforms and read-only
``p`` (normalised), ``q``; ``step_plan`` gets read-only states, and its plans
are copied when checked.  What it does not see: ``verify`` is only called on
batches of this one node with ``uniforms=`` (a bug that mixes rows of
different nodes, or one only on the ``rng=`` path, is for
:func:`exactness.certify_verifier`'s batched and determinism checks).  Cost: O(V) per visited state
(``step_plan`` plus the check), shared states computed once while cached.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from resispec._validation import check_k
from resispec.verifiers.base import sum_of_others
from resispec.verifiers.step_plan import StepPlan

from . import _stepwise_kernel as _kernel
from . import limits
from ._checks import (SubjectError, as_generator, as_seed_sequence, check_alpha, check_n, check_tv, passes_through,
                      sub_seed, subject_cause)
from ._timeout import TimeLimitExceeded, hard_limit, own_limit
from ._timeout import time_limit as _time_limit
from .chunks import chunk_jobs
from .verifier_cert import check_workers
from .coupled.certify import check_min_draws, tv_upper_bound
from .coupled.run import check_time_limit, hung_call, read_result
from .gof import gof_test
from .power import _check_power
from .sampling import _checked_result, candidate_law, draw_node_candidates, drafting_of
from .stepwise_checks import DECLARED_STEPS, Coupling as _Coupling, StepwiseRun, run_checks

#: Largest L1 error of a state's balance ``m + sum_x w(x) r^(x) = p_i`` (and of a row's mass) taken as
#: round-off; each step adds at most ``TOL`` to the TV bound.
TOL = 1e-9
#: Rows per ``verify`` call (memory: the verifier's (B, V) arrays).
BATCH = 64
#: Draws timed before a run projected over ``exactness.limits.MAX_SECONDS`` is refused (without time_limit).
PILOT = 4 * BATCH
#: Bytes of visited states kept for reuse (a peaked draft revisits the same rejected prefixes).
CACHE_BYTES = 1 << 28
#: Below this remaining mass the plain residual is ``p_i`` itself (as ``reject_update``).
from resispec._reserve_tol import RESIDUAL_EPS as _RESIDUAL_EPS  # noqa: E402  (the one value)
#: Fewest ``verify`` draws of the law check at a mismatching draw's candidates (at most
#: ``exactness.limits.LAW_DRAWS``).
LAW_MIN = 2_000
#: Distinct candidate tuples of mismatching draws whose law is checked (Bonferroni over them).
LAW_NODES = _Coupling.LAW_NODES


@dataclass(frozen=True)
class StepwiseCertificate:
    """Verdict of :func:`certify_stepwise` (scipy-style result object).

    Attributes
    ----------
    passed : bool
        No defect, no mismatch, and ``tv_upper <= tv`` (when ``tv`` was asked) or no unverified state (when
        ``n`` was given).
    verdict : str
        ``"PASS"``; ``"FAIL"`` (a defect; a mismatch where ``verify``'s (stop, token) law at the mismatching
        draw's candidates differs from its declared steps'; or the verifier misbehaved -- raised, hung past the
        hard time limit, returned the wrong shape or an accepted index that does not name the emitted
        candidate: ``cause``); or ``"INCONCLUSIVE"`` (no defect or mismatch, but unverified states or a
        ``time_limit`` stop leave ``tv_upper`` above the asked ``tv``; with ``n`` given, any unverified state;
        or ``"not the same coupling"``: mismatches, but ``verify``'s law at their candidates matches the
        declared steps', as for an exact verify that uses the coins in another convention).
    n : int
        Draws run.
    events, defects, mismatches, unverified : int
        Draws with an event; of them, with a failing state check, with ``verify`` != the declared chain,
        reaching a state the verifier does not declare.
    tv_upper : float
        Bound on TV(law of ``verify``, p) at confidence ``1 - alpha``: Clopper-Pearson on ``events / n``
        plus ``k TOL``.
    detectable_tv : float
        A verifier with TV(law, p) above this (plus ``k TOL``) shows an event with probability >= ``power``.
    alpha, power : float
    tv : float or None
        The asked bound.
    states, seconds : int, float
        States checked (a state evicted from the cache and visited again counts again), wall time.
    largest_defect : float
        Largest L1 balance error of a checked state (round-off on an exact rule: ~1e-15).
    first_event : dict or None
        ``kind`` (``"defect"``, ``"mismatch"``, ``"unverified"``), ``draw``, ``step``, ``rejected`` (the
        candidates rejected before the state), ``candidates``, ``uniforms``, ``detail``; recompute the state
        with :func:`replay_state` (``verifier, p, q, rejected, k``), rerun the draw with :func:`replay_draw`
        (``verifier, p, q, candidates, uniforms``).
    report : str
        One paragraph for people (:meth:`summary`, ``str(cert)``).
    cause : str or None
        The verifier's misbehaviour that failed the run (``verify`` or ``step_plan`` raised, hung, or broke
        its output contract); None otherwise.
    coupling_pvalue : float or None
        On a mismatch: p-value (Bonferroni over up to ``LAW_NODES`` distinct candidate tuples of mismatching
        draws) of ``verify``'s (stop, token) law at those candidates against the declared chain's exact law
        (:func:`coupling_pvalue`; below ``alpha``: FAIL; else INCONCLUSIVE, not the same coupling).
    """

    passed: bool
    verdict: str
    n: int
    events: int
    defects: int
    mismatches: int
    unverified: int
    tv_upper: float
    detectable_tv: float
    alpha: float
    power: float
    tv: float | None
    states: int
    seconds: float
    largest_defect: float
    first_event: dict | None = None
    report: str = field(default="", repr=False)
    cause: str | None = None
    coupling_pvalue: float | None = None
    checked: dict = field(default_factory=dict, repr=False)
    skipped: dict = field(default_factory=dict, repr=False)

    @property
    def outcome(self) -> str:
        """``verdict`` under the shared name (``exactness.result.VOCABULARY``)."""
        return self.verdict

    @property
    def checks(self) -> dict:
        """Raw p-values of the checks that ran (:data:`exactness.stepwise_checks.STEPWISE_CHECKS`, in order):
        ``declared_steps`` (0.0 when a visited state's declared step is not exact, a deterministic check; 1.0
        otherwise) and, on a mismatch, ``coupling`` (:attr:`coupling_pvalue`); ``subject`` 0.0 when the verifier
        misbehaved (:attr:`cause`; then no check ran).  Why a check did not run: :attr:`skipped`."""
        out = dict(self.checked)
        if self.cause is not None:
            out["subject"] = 0.0
        return out

    @property
    def pvalue(self) -> float:
        """The smallest of :attr:`checks` (deterministic checks count 1.0 / 0.0)."""
        return min(self.checks.values())

    @property
    def tv_estimate(self) -> None:
        """None: this route finds events and bounds TV (:attr:`tv_upper`); it does not estimate it."""
        return None

    def summary(self) -> str:
        """The verdict in one paragraph (as ``Certificate.summary()``)."""
        return self.report

    def __str__(self) -> str:
        return self.report


_NAMES = ("m", "g", "h", "alpha", "beta")


def check_plan(plan, p_i: np.ndarray, q_i: np.ndarray) -> tuple[float, str | None]:
    """Check one declared step: returns ``(L1 balance error, reason it is not exact or None)``.

    Parameters
    ----------
    plan : StepPlan
        Arrays of shape (V,) (``plain`` bool, the rest float64).
    p_i, q_i : ndarray, shape (V,), float64
        The state's target and draft.

    The balance is ``m(y) + g(y) sum_{x != y} A(x) + h(y) sum_{x != y} B(x) + W_plain r_plain(y) = p_i(y)``
    with ``A = w alpha / tot``, ``B = w beta / tot`` on the non-plain rows, ``W_plain`` the rejection mass
    of the plain rows and ``r_plain = norm((p_i - m)_+)``: O(V) (compiled in :mod:`exactness._stepwise_kernel`
    when numba is present, else :func:`_balance_reference`).
    """
    p_i, q_i = _state_arrays(p_i, q_i)
    return _check_plan(plan, p_i, q_i)


def _state_arrays(p_i, q_i):
    """``check_plan``'s ``p_i``, ``q_i`` as (V,) float64, finite and >= 0; ValueError naming the argument."""
    out = []
    for name, a in (("p_i", p_i), ("q_i", q_i)):
        a = np.asarray(a)
        if a.ndim != 1 or not np.issubdtype(a.dtype, np.number) or not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"{name} must be a (V,) array of finite, non-negative floats (one state's law), got "
                             f"shape {a.shape}, dtype {a.dtype}")
        out.append(np.asarray(a, dtype=np.float64))
    if out[0].shape != out[1].shape:
        raise ValueError(f"p_i {out[0].shape} and q_i {out[1].shape} must have the same shape")
    return out


def _plan_form(plan, V: int) -> str | None:
    """Why ``plan`` is not a StepPlan of (V,) arrays (``plain`` bool, the rest float64), or None."""
    if not isinstance(plan, StepPlan):
        return f"returned {type(plan).__name__}, not a StepPlan or None"
    for name in _NAMES + ("plain",):
        a = np.asarray(getattr(plan, name))
        if a.shape != (V,):
            return f"StepPlan.{name} has shape {a.shape}, expected ({V},)"
        want = bool if name == "plain" else np.float64
        if a.dtype != want:
            return f"StepPlan.{name} must be a {np.dtype(want).name} array, got dtype {a.dtype}"
    return None


def _check_plan(plan, p_i: np.ndarray, q_i: np.ndarray) -> tuple[float, str | None]:
    """:func:`check_plan` on trusted state arrays (the certifier's own)."""
    why = _plan_form(plan, p_i.size)
    if why is not None:
        return math.inf, why
    return _balance(plan, p_i, q_i)


def _balance(plan: StepPlan, p_i: np.ndarray, q_i: np.ndarray) -> tuple[float, str | None]:
    """The balance of :func:`check_plan` on a plan whose form :func:`_plan_form` has passed."""
    arrs = [np.asarray(getattr(plan, n)) for n in _NAMES]
    plain = np.asarray(plan.plain)
    args = [np.ascontiguousarray(a, dtype=np.float64) for a in (p_i, q_i, arrs[0])]
    args += [np.ascontiguousarray(plain)] + [np.ascontiguousarray(a, dtype=np.float64) for a in arrs[1:]]
    run = _kernel.balance if _kernel.AVAILABLE else _balance_reference
    code, which, y, defect, a, b = run(*args, TOL, _RESIDUAL_EPS)
    if code == _kernel.OK:
        return float(defect), None
    if code == _kernel.BAD_VALUE:
        return math.inf, f"StepPlan.{_NAMES[which]} must be finite, non-negative float64 (token {y}: {a!r})"
    if code == _kernel.ABOVE_DRAFT:
        return float(defect), f"accepted mass above the draft at token {y}: m = {a:.6g} > q_i = {b:.6g}"
    if code == _kernel.EMPTY_ROW:
        return math.inf, f"the residual after rejecting token {y} is empty (alpha g + beta h is 0 off {y})"
    if code == _kernel.ROW_MASS:
        return float(defect), (f"the residual after rejecting token {y}, (alpha g + beta h) / tot, has mass {a:.17g}, "
                               "not 1 (alpha, beta or tot lost to round-off: rescale them)")
    return float(defect), (f"m + sum_x w(x) r^(x) differs from p_i by {defect:.3g} in L1 (largest at token {y}: "
                           f"{a:.6g} vs p_i = {b:.6g})")


def _balance_reference(p_i, q_i, m, plain, g, h, al, be, tol, eps):
    """Numpy twin of :func:`exactness._stepwise_kernel.balance` (same returns)."""
    for j, a in enumerate((m, g, h, al, be)):
        bad = ~(a >= 0) | ~np.isfinite(a)
        if bad.any():
            x = int(np.flatnonzero(bad)[0])
            return _kernel.BAD_VALUE, j, x, math.inf, float(a[x]), 0.0
    over = m - q_i
    yo = int(np.argmax(over))
    if over[yo] > tol:
        return _kernel.ABOVE_DRAFT, 0, yo, float(over[yo]), float(m[yo]), float(q_i[yo])
    w = np.maximum(q_i - m, 0.0)
    g_off, h_off = sum_of_others(g[None])[0], sum_of_others(h[None])[0]      # sum_{y != x} g(y), sum_{y != x} h(y)
    tot = al * g_off + be * h_off                                              # row mass off the diagonal
    shaped = ~plain & (w > 0)
    if np.any(shaped & ~(tot > 0)):
        return _kernel.EMPTY_ROW, 0, int(np.flatnonzero(shaped & ~(tot > 0))[0]), math.inf, 0.0, 0.0
    safe = np.where(shaped, tot, 1.0)
    mass = np.where(shaped, (al / safe) * g_off + (be / safe) * h_off, 1.0)  # (alpha g + beta h)/tot off x: 1
    off = ~(np.abs(mass - 1.0) <= tol)                                         # the chain's row must be a law
    if off.any():
        x = int(np.flatnonzero(off)[0])
        return _kernel.ROW_MASS, 0, x, float(abs(mass[x] - 1.0)), float(mass[x]), 0.0
    A = np.where(shaped, w * al / safe, 0.0)                                   # w(x) alpha(x) / tot(x)
    B = np.where(shaped, w * be / safe, 0.0)                                   # w(x) beta(x) / tot(x)
    d = np.maximum(p_i - m, 0.0)
    D = d.sum()
    r_plain = d / D if D > eps else p_i                                        # norm((p_i - m)_+)
    col = g * sum_of_others(A[None])[0] + h * sum_of_others(B[None])[0] + w[plain].sum() * r_plain  # sum_x w r^(x)
    err = np.abs(m + col - p_i)                                                # |m + sum_x w r^(x) - p_i|
    defect = float(err.sum())
    y = int(np.argmax(err))
    if not defect <= tol:
        return _kernel.UNBALANCED, 0, y, defect, float(m[y] + col[y]), float(p_i[y])
    return _kernel.OK, 0, 0, defect, 0.0, 0.0


def _others_at(v: np.ndarray, x: int) -> float:
    """``sum_{y != x} v(y)`` without cancellation (as :func:`resispec.verifiers.base.sum_of_others`)."""
    s = float(v.sum())
    if v[x] >= 0.5 * s:                                                        # x holds most of the row
        return float(v[:x].sum() + v[x + 1:].sum())
    return max(s - float(v[x]), 0.0)


def next_target(plan: StepPlan, p_i: np.ndarray, x: int) -> np.ndarray:
    """``r^(x)`` (V,) float64: the declared target after rejecting token ``x``.

    A shaped row is formed as ``(alpha(x) / tot(x)) g + (beta(x) / tot(x)) h`` with ``tot(x) = alpha(x)
    sum_{y != x} g(y) + beta(x) sum_{y != x} h(y)``: the coefficients the balance of :func:`check_plan` uses
    (``alpha(x) g`` formed token by token would round differently where the product is subnormal).
    """
    if plan.plain[x]:
        d = np.maximum(p_i - plan.m, 0.0)
        z = d.sum()
        return d / z if z > _RESIDUAL_EPS else p_i.copy()
    tot = plan.alpha[x] * _others_at(plan.g, x) + plan.beta[x] * _others_at(plan.h, x)
    r = (plan.alpha[x] / tot) * plan.g + (plan.beta[x] / tot) * plan.h         # (alpha g + beta h) / tot
    r[x] = 0.0                                                                 # r^(x)(x) = 0
    return r / r.sum()


def _next_draft(q_i: np.ndarray, x: int, drafting: str) -> np.ndarray:
    """The draft of the next candidate: ``q_i`` (iid) or ``norm(q_i`` without ``x)`` (as ``verify``)."""
    if drafting != "without_replacement":
        return q_i
    nq = q_i.copy()
    nq[x] = 0.0
    return nq / nq.sum()


def _inverse_cdf(r: np.ndarray, u: float) -> int:
    """Token ``#{y: cdf(y) <= u cdf(V-1)}``, capped at the last token with mass (as ``resispec``'s sampler)."""
    cdf = np.cumsum(r)
    t = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(t, int(np.flatnonzero(r > 0)[-1]))


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only private copy (a plug-in can neither change a checked state nor keep writing into it)."""
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


def _read_only(a: np.ndarray) -> np.ndarray:
    """``a`` (an array this module owns) made read-only in place."""
    a.setflags(write=False)
    return a


def _plan(verifier, p_i, q_i, last: bool, step: int):
    """``verifier.step_plan`` on read-only state arrays; a returned StepPlan is copied and frozen."""
    try:
        plan = verifier.step_plan(p_i, q_i, last=last)
    except SubjectError:
        raise
    except SystemExit as exc:                                  # sys.exit in a plug-in: a FAIL, never a silent exit
        raise SubjectError(f"{type(verifier).__name__}.step_plan called sys.exit({exc.code!r}) at step {step}") from exc
    except Exception as exc:                                   # a plug-in that fails is a FAIL, never a pass
        raise SubjectError(f"{type(verifier).__name__}.step_plan raised at step {step}: "
                           f"{type(exc).__name__}: {exc}") from exc
    except BaseException as exc:                               # CancelledError, its own KeyboardInterrupt, ...
        if passes_through(exc):                                # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause(f"{type(verifier).__name__}.step_plan at step {step}", exc)) from exc
    if plan is None:
        return None
    why = _plan_form(plan, p_i.size)
    if why is not None:                                        # a malformed plan: the subject misbehaved
        raise SubjectError(f"{type(verifier).__name__}.step_plan at step {step}: {why}")
    # checked once, so kept as checked (no shared buffer)
    return StepPlan(**{n: _frozen(getattr(plan, n)) for n in ("m", "plain", "g", "h", "alpha", "beta")})


class _States:
    """Visited states by rejected prefix: ``(p_i, q_i, plan, defect, reason)``, kept up to ``CACHE_BYTES``."""

    def __init__(self, verifier, p, q, k, drafting, V):
        """``p``: the node's target; ``q``: the law the candidates are drawn from (the verifier's ``draft_law``
        hook applied), both normalised here."""
        self.v, self.k, self.drafting = verifier, k, drafting
        self.root = (_frozen(p / p.sum()), _frozen(q / q.sum()))
        self.cache: OrderedDict = OrderedDict()
        self.keep = max(2, CACHE_BYTES // (8 * V * 8))
        self.checked = 0
        self.largest = 0.0

    def get(self, prefix: tuple, parent):
        hit = self.cache.get(prefix)
        if hit is not None:
            self.cache.move_to_end(prefix)
            return hit
        i = len(prefix)
        if i == 0:
            p_i, q_i = self.root
        else:
            pp, pq, pplan = parent[:3]
            x = prefix[-1]
            p_i, q_i = _read_only(next_target(pplan, pp, x)), _read_only(_next_draft(pq, x, self.drafting))
        plan = _plan(self.v, p_i, q_i, i == self.k - 1, i)
        defect, why = (0.0, None) if plan is None else _balance(plan, p_i, q_i)   # _plan checked its form
        self.checked += 1
        if np.isfinite(defect):
            self.largest = max(self.largest, defect)
        out = (p_i, q_i, plan, defect, why)
        self.cache[prefix] = out
        if len(self.cache) > self.keep:
            self.cache.popitem(last=False)
        return out


def _walk(states: _States, c: np.ndarray, u: np.ndarray):
    """Follow the declared chain on one draw: ``(token, accepted, event)`` (event ``(kind, step, detail)``)."""
    k = c.size
    prefix: tuple = ()
    st = states.get(prefix, None)
    for i in range(k):
        p_i, q_i, plan, _, why = st
        if plan is None:
            return None, None, ("unverified", i, "the verifier declares no O(V) plan for this state")
        if why is not None:
            return None, None, ("defect", i, why)
        x = int(c[i])
        qx = q_i[x]
        a = min(max(plan.m[x] / qx, 0.0), 1.0) if qx > 0 else 0.0            # accept with m(x) / q_i(x)
        if u[i] < a:
            return x, i, None
        if i == k - 1:
            return _inverse_cdf(next_target(plan, p_i, x), float(u[k])), -1, None
        prefix = prefix + (x,)
        st = states.get(prefix, st)
    raise AssertionError("unreachable")


def replay_state(verifier, p, q, rejected, k: int):
    """Recompute the state after ``rejected`` candidates: ``(p_i, q_i, plan, defect, reason)``.

    Parameters
    ----------
    verifier : a verifier with ``step_plan`` (as :func:`certify_stepwise`)
    p, q : array_like, shape (V,), float64 -- the node
    rejected : sequence of int token ids in ``[0, V)``, fewer than ``k`` (``first_event["rejected"]``;
        distinct under without-replacement drafting)
    k : int -- the node's candidates

    Raises
    ------
    TypeError, ValueError
        As :func:`certify_stepwise` for the verifier, laws and ``k``; ``rejected`` not a sequence of token ids
        in range, ``k`` or more of them, or a repeat under without-replacement drafting.
    """
    _check_verifier(verifier)
    p2, q2 = _one_node(p, q)
    k = check_k(k)
    V = p2.shape[1]
    if isinstance(rejected, (str, bytes)) or not hasattr(rejected, "__len__"):
        raise TypeError(f"rejected must be a sequence of token ids (first_event['rejected']), got {rejected!r}")
    rej = []
    for x in rejected:
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or not 0 <= x < V:
            raise ValueError(f"rejected must hold token ids in [0, {V}), got {x!r}")
        rej.append(int(x))
    if len(rej) >= k:
        raise ValueError(f"rejected holds {len(rej)} tokens; a state of a k = {k} node follows at most {k - 1}")
    drafting, cl = _drafting_and_law(verifier, q2, k)
    if drafting == "without_replacement" and len(set(rej)) < len(rej):
        raise ValueError(f"rejected repeats a token ({rej}); without-replacement candidates are distinct")
    if any(cl[x] <= 0 for x in rej):
        raise ValueError(f"rejected holds a token the draft never proposes (q = 0): {[x for x in rej if cl[x] <= 0]}")
    states = _States(verifier, p2[0], cl, k, drafting, V)
    st = states.get((), None)
    for j in range(1, len(rej) + 1):
        st = states.get(tuple(rej[:j]), st)
    return st


def replay_draw(verifier, p, q, candidates, uniforms) -> dict:
    """Rerun one draw: what ``verify`` emits and what the declared chain emits on the same coins.

    Parameters
    ----------
    verifier, p, q : as :func:`certify_stepwise` (one node)
    candidates : sequence of k int token ids (``first_event["candidates"]``)
    uniforms : sequence of k + 1 floats in [0, 1) (``first_event["uniforms"]``)

    Returns
    -------
    dict: ``verify`` ``(token, accepted)``; ``declared`` ``(token, accepted)`` of the declared chain (``None``
    where it stopped at an event); ``event`` ``(kind, step, detail)`` of a defect or unverified state, or
    ``None``; ``match`` whether the two agree.

    Raises
    ------
    TypeError, ValueError
        As :func:`certify_stepwise`; candidates not k distinct-as-drafted token ids, uniforms not k + 1 floats
        in [0, 1).
    """
    _check_verifier(verifier)
    p2, q2 = _one_node(p, q)
    V = p2.shape[1]
    c = np.asarray(candidates)
    u = np.asarray(uniforms, dtype=np.float64) if np.asarray(uniforms).dtype.kind in "fiu" else None
    if c.ndim != 1 or c.size < 1 or not np.issubdtype(c.dtype, np.integer) or c.min() < 0 or c.max() >= V:
        raise ValueError(f"candidates must be a sequence of k token ids in [0, {V}), got {candidates!r}")
    k = c.size
    if u is None or u.shape != (k + 1,) or not np.all((u >= 0) & (u < 1)):
        raise ValueError(f"uniforms must be k + 1 = {k + 1} floats in [0, 1), got {uniforms!r}")
    drafting, cl = _drafting_and_law(verifier, q2, k)
    if drafting == "without_replacement" and np.unique(c).size < k:
        raise ValueError(f"candidates repeat a token ({c.tolist()}); without-replacement candidates are distinct")
    states = _States(verifier, p2[0], cl, k, drafting, V)
    vt, va = _run_verify(verifier, states.root[0][None], q2[:1], c[None].astype(np.int64), u[None].copy(), V, k)
    tok, acc, ev = _walk(states, c.astype(np.int64), u)
    declared = None if ev is not None else (tok, acc)
    return {"verify": (int(vt[0]), int(va[0])), "declared": declared, "event": ev,
            "match": declared == (int(vt[0]), int(va[0]))}


def _one_node(p, q):
    """``p``, ``q`` checked as one node at the door (:func:`exactness.certificate.door_node`: float32 / float16
    laws renormalised in float64): (1, V) float64 each; ValueError for more than one row."""
    from .certificate import door_node

    p2, q2, _ = door_node(p, q)
    if p2.shape[0] != 1:
        raise ValueError(f"p and q must be one node of shape (V,), got {p2.shape[0]} rows; certify each node")
    return p2, q2


def _drafting_and_law(verifier, q2: np.ndarray, k: int):
    """``(drafting, law the candidates are drawn from)`` (the ``draft_law`` hook's when defined), checked."""
    drafting = drafting_of(verifier)
    if drafting not in ("iid", "without_replacement"):
        raise ValueError(f"certify_stepwise needs iid or without-replacement drafting, got {drafting!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        cl = candidate_law(verifier, q2)[0]
    if not np.all(np.isfinite(cl)):
        raise ValueError(f"{type(verifier).__name__}.draft_law(q) returned a law with no mass (all zeros)")
    support = int(np.count_nonzero(cl > 0))
    if drafting == "without_replacement" and support < k:
        raise ValueError(f"k = {k} exceeds the draft support ({support} tokens) for without-replacement drafting")
    return drafting, cl


def _check_verifier(verifier):
    if isinstance(verifier, type):
        raise TypeError(f"verifier must be an instance, got the class {verifier.__name__}: pass {verifier.__name__}()")
    sp = getattr(verifier, "step_plan", None)
    if not callable(sp):
        raise TypeError(f"{type(verifier).__name__} declares no step_plan(p_i, q_i, *, last): certify_stepwise needs "
                        "a verifier that declares its steps (ResiSpec for without-replacement drafts does); use "
                        "exactness.certify_verifier (histogram) or exactness.certify_coupled (against a rule)")
    if not callable(getattr(verifier, "verify", None)):
        raise TypeError(f"{type(verifier).__name__} has no verify(p, q, candidates, uniforms=...)")


def _check_tv(tv) -> float:
    tv = check_tv(tv)
    if not tv < 1:
        raise ValueError(f"tv must lie in (0, 1) for certify_stepwise (TV <= 1 holds for every law), got {tv!r}")
    return tv


def draws_for_tv(tv: float, alpha: float = 1e-3, power: float = 0.99) -> int:
    """Draws for which 0 events bound TV by ``tv`` at confidence ``1 - alpha`` and a TV of ``tv`` shows an
    event with probability ``power``: ``ceil(ln(1 / min(alpha, 1 - power)) / -ln(1 - tv))``.

    Raises ValueError / TypeError for ``tv`` outside (0, 1), ``alpha`` or ``power`` outside (0, 1).
    """
    tv, alpha, power = _check_tv(tv), check_alpha(alpha), _check_power(power)
    # 0 events in n draws bound TV <= tv at confidence 1 - alpha iff an event of probability tv shows with
    # probability 1 - alpha: the check's own n at power 1 - alpha, or at the asked power if that is larger
    return max(DECLARED_STEPS.n_for_tv(tv, power=power), DECLARED_STEPS.n_for_tv(tv, power=1.0 - alpha))


def _run_verify(verifier, P, Q, c, u, V: int, k: int):
    """``verify`` on one batch; its tokens (B,) and accepted indices (B,) int64, checked
    (:func:`exactness.sampling._checked_result`); a call that raises or calls ``sys.exit``, or a result outside
    the contract (shape, dtype, a ``.tokens`` / ``.accepted`` that raises, ids outside [0, V), an accepted index
    that does not name the emitted candidate) is a :class:`exactness.SubjectError` naming ``verify``."""

    name = type(verifier).__name__
    try:
        res = verifier.verify(P, Q, c, uniforms=u)
    except SubjectError:
        raise
    except SystemExit as exc:                              # sys.exit in a plug-in: a FAIL, never a silent exit
        raise SubjectError(f"{name}.verify called sys.exit({exc.code!r})") from exc
    except Exception as exc:                               # a plug-in that fails is a FAIL, never a pass
        raise SubjectError(f"{name}.verify raised: {type(exc).__name__}: {exc}") from exc
    except BaseException as exc:                           # CancelledError, a KeyboardInterrupt of its own, ...
        if passes_through(exc):                            # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause(f"{name}.verify", exc)) from exc
    res = read_result(res, f"{name}.verify")               # a .tokens / .accepted property that raises: a FAIL
    if not (hasattr(res, "tokens") and hasattr(res, "accepted")):
        raise SubjectError(f"{name}.verify returned {type(res).__name__}; expected an object with .tokens and "
                           ".accepted (resispec.VerifyResult)")
    try:
        return _checked_result(res, c.shape[0], k, V, verifier, candidates=c)
    except SubjectError:
        raise
    except (TypeError, ValueError) as exc:
        raise SubjectError(f"{name}.verify returned a result outside its contract: {exc}") from exc
    except BaseException as exc:                 # the result's own conversion (np.asarray of it) raised
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause(f"{name}.verify returned a result that", exc)) from exc


def _check_time(est: float, n: int, tv) -> None:
    """Refuse a run projected (``est`` seconds, from a chunk's first ``PILOT`` draws: fresh states, pessimistic)
    over ``exactness.limits.MAX_SECONDS``."""
    from .budget import BudgetError

    if est > limits.MAX_SECONDS:
        asked = f"tv = {tv:g}" if tv is not None else f"n = {n:,}"
        raise BudgetError(f"{asked} needs {n:,} draws, ~{est / 3600:.1f} h at the rate of the first {PILOT:,} "
                          f"(limit exactness.limits.MAX_SECONDS = {limits.MAX_SECONDS / 3600:g} h); ask a larger tv, "
                          "raise MAX_SECONDS, or pass time_limit= (seconds) to run that long and bound TV by the "
                          "draws run")


@dataclass(frozen=True)
class _Chunk:
    """What one chunk of draws saw (merged by :func:`certify_stepwise`)."""

    n: int
    defects: int
    mismatches: int
    unverified: int
    first: dict | None
    states: int
    largest: float
    mismatched: tuple = ()          # distinct candidate tuples of the first mismatching draws (law checks)


def _run_chunk(verifier, p, q, cl, k, drafting, limit, plan, job) -> _Chunk:
    """Draw ``job = (seed or Generator, draws)`` and walk each draw; stops at its first defect or mismatch, ``limit``
    seconds after its first batch returned (``time_limit``; the first calls compile the subject's kernels and the
    harness's -- numba, ~9 s on a fresh install -- which is neither the run's time nor the subject's speed), or
    refuses after ``PILOT`` draws a projection over ``MAX_SECONDS`` (``plan = (tv, total draws, chunks running at
    once)``; timed from the first batch's end too).  Every draw, the first batch's included, is counted and checked."""
    seed, n = job
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    t0, first_batch, deadline = time.monotonic(), 0, None   # t0: the pilot's start (reset after the first batch)
    V = p.size
    states = _States(verifier, p, cl, k, drafting, V)
    P, Q = np.broadcast_to(states.root[0], (BATCH, V)), np.broadcast_to(q, (BATCH, V))
    done = defects = mism = unver = 0
    first = None
    seen: list = []
    while done < n:
        B = min(BATCH, n - done)
        c = draw_node_candidates(cl, k, drafting, rng.random((B, k)))
        u = rng.random((B, k + 1))
        vt, va = _run_verify(verifier, P[:B], Q[:B], c.copy(), u.copy(), V, k)   # copies: verify may write
        for b in range(B):
            tok, acc, ev = _walk(states, c[b], u[b])
            if ev is None and (tok != int(vt[b]) or acc != int(va[b])):
                ev = ("mismatch", acc if acc >= 0 else k,
                      f"verify emitted token {int(vt[b])} (accepted {int(va[b])}), the declared chain token {tok} "
                      f"(accepted {acc}): verify does not take its declared steps (or ignores the uniforms)")
            if ev is None:
                continue
            kind, step, detail = ev
            if kind == "mismatch" and len(seen) < LAW_NODES and tuple(c[b].tolist()) not in seen:
                seen.append(tuple(c[b].tolist()))
            defects += kind == "defect"
            mism += kind == "mismatch"
            unver += kind == "unverified"
            if first is None or (first["kind"] == "unverified" and kind != "unverified"):
                first = {"kind": kind, "draw": done + b, "step": int(step),
                         "rejected": [int(x) for x in c[b, :min(step, k)]],
                         "candidates": c[b].tolist(), "uniforms": u[b].tolist(), "detail": detail}
        done += B
        now = time.monotonic()
        if deadline is None and limit is not None:          # the clock starts once the first batch returned
            deadline = now + limit
        if first_batch == 0:
            t0, first_batch = now, done
        if defects or mism or (deadline is not None and now > deadline):
            break
        if done == PILOT and limit is None and done > first_batch:
            tv, total, parallel = plan
            _check_time((now - t0) / (done - first_batch) * total / parallel, total, tv)
    return _Chunk(done, defects, mism, unver, first, states.checked, states.largest, tuple(seen))


def certify_stepwise(verifier, p, q, k: int, *, n: int | None = None, tv: float | None = None,
                     alpha: float = 1e-3, power: float = 0.99, seed=0, time_limit: float | None = None,
                     workers: int = 1, executor="process") -> StepwiseCertificate:
    """Bound TV(law of ``verifier.verify``, p) at one node by checking the steps it takes (module docstring).

    Parameters
    ----------
    verifier : resispec.Verifier with ``step_plan(p_i, q_i, *, last) -> StepPlan | None``
        and ``verify(p, q, candidates, uniforms=...)`` (``get_verifier("resispec",
        drafting="without_replacement")``).
    p, q : array_like, shape (V,), float64
        Target and draft laws of the node (float32 / float16 laws are renormalised in float64 at the door,
        :func:`exactness.certificate.door_node`, as every certify function does).
    k : int >= 1
        Candidates.
    n : int, optional
        Draws.  Default: planned from ``tv`` (:func:`draws_for_tv`); pass ``n`` or ``tv``, not both.
    tv : float in (0, 1), optional
        The TV bound to certify (default 1e-3 when ``n`` is not given): PASS needs ``tv_upper <= tv``.
    alpha : float in (0, 1)
        1 - confidence of ``tv_upper``.
    power : float in (0, 1)
        Probability of an event when TV(law, p) >= ``tv`` (plans ``n``; states ``detectable_tv``).
    seed : int, SeedSequence or Generator
        Candidates and uniforms.
    time_limit : float, optional
        Stop after this many seconds, between batches; the bound uses the draws run (INCONCLUSIVE if short of
        the plan).  A ``verify`` or ``step_plan`` call that never returns is stopped at the hard limit
        :func:`exactness._timeout.hard_limit` of it (``time_limit + max(10 s, time_limit)``; without
        ``time_limit``, of ``exactness.limits.MAX_SECONDS``) and the run FAILs naming the hang (``cause``);
        worker processes are stopped with it.  Enforced with ``SIGALRM`` in the main thread (POSIX).
    workers : int >= 1
        Processes sharing the draws (chunk ``i`` seeded by ``SeedSequence(seed).spawn(workers)[i]``, as
        ``certify_verifier``; each keeps its own states).  1: in this process, from ``default_rng(seed)``.
    executor : str or Executor
        How the chunks run when ``workers > 1``: ``"process"`` (default), ``"local"`` or ``"ray"``
        (:mod:`exactness.executors`).

    Returns
    -------
    StepwiseCertificate

    Raises
    ------
    TypeError
        A verifier without ``step_plan`` or ``verify``.
    ValueError
        Bad laws, k, n, tv, alpha, power or time_limit; both ``n`` and ``tv``; ``n`` too small to bound TV
        below 0.5; more than one node; k above the draft support (without-replacement drafting).

    A ``verify`` or ``step_plan`` that raises or calls ``sys.exit``, hangs, returns the wrong shape or type, a
    result whose ``.tokens`` / ``.accepted`` raise, or an accepted index that does not name the emitted
    candidate, or a worker process that dies (``workers > 1``: ``os._exit``, a crash), is not an error of the
    call: the certificate FAILs with the cause in ``cause`` and its report (exit 1 in the CLI).  A mismatch of ``verify`` with its declared chain is FAIL when
    ``verify``'s law at the mismatching draws' candidates differs from the declared steps'
    (:func:`coupling_pvalue` below ``alpha``), else INCONCLUSIVE ("not the same coupling").

    Source: the sequential lemma of ``docs/RESISPEC.md`` s.2 and the coupling inequality; the rule certified
    here is ResiSpec for without-replacement drafts (ResiSpec, arXiv 2608.24411; RSD, arXiv 2402.14160).
    """
    t0 = time.perf_counter()
    _check_verifier(verifier)
    p2, q2 = _one_node(p, q)
    k = check_k(k)
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if n is not None and tv is not None:
        raise ValueError("pass n (draws) or tv (the bound to certify; n is planned from it), not both")
    if n is None:
        tv = _check_tv(1e-3 if tv is None else tv)
        if not tv > k * TOL:
            raise ValueError(f"tv = {tv:g} is not above the round-off term k * TOL = {k * TOL:g} of the bound: no "
                             "number of draws certifies it; ask a larger tv")
        n = draws_for_tv(tv, alpha, power)
    else:
        n = check_n(n)
    from .limits import MAX_COUNTED

    if n > MAX_COUNTED:                                    # refused before its time estimate overflows a float
        from .budget import BudgetError, count_text

        raise BudgetError(f"n = {count_text(n)} draws exceeds exactness.limits.MAX_COUNTED = {MAX_COUNTED:,} (counted chunk "
                          "by chunk); ask a larger tv or a smaller n")
    check_min_draws(n, alpha)
    workers = check_workers(workers)
    check_time_limit(time_limit)
    workers = min(workers, n)                              # a chunk per worker, none empty
    if workers > 1:
        from .executors import check_executor

        check_executor(executor)
    name = getattr(verifier, "name", None)
    if "name" not in vars(type(verifier)) and "name" not in getattr(verifier, "__dict__", {}):
        name = type(verifier).__name__            # a subclass of a registry rule is the user's rule, not the parent
    name = name or type(verifier).__name__
    cls = type(verifier).__name__
    drafting = drafting_of(verifier)

    hard = own_limit(hard_limit(float(time_limit) if time_limit is not None else limits.MAX_SECONDS))
    try:
        with _time_limit(hard):
            drafting, cl = _drafting_and_law(verifier, q2, k)   # a draft_law hook that fails: the subject's
            return _certify(verifier, p2, q2, k, n, tv, alpha, power, seed, time_limit, workers, executor,
                            drafting, cl, name, t0)
    except SubjectError as exc:
        cause = exc.cause
    except TimeLimitExceeded as exc:
        if hard is None:
            raise                                      # the caller's own (outer) limit
        who = hung_call(exc, {"_run_verify": f"{cls}.verify", "_plan": f"{cls}.step_plan",
                              "map_chunks": f"a worker's {cls}.verify or {cls}.step_plan"})
        limit = (f"time_limit = {time_limit:g} s" if time_limit is not None else
                 f"exactness.limits.MAX_SECONDS = {limits.MAX_SECONDS:g} s, no time_limit given")
        cause = (f"{who or 'the run'} did not return: certify_stepwise stopped it at its hard time limit of "
                 f"{hard:g} s ({limit}, plus a grace of {hard - (time_limit or limits.MAX_SECONDS):g} s)")
    secs = time.perf_counter() - t0
    report = (f"FAIL: {name} ({drafting} drafting), V = {p2.shape[1]:,}, k = {k}: the verifier misbehaved: {cause}. "
              "Nothing is certified about its law.")
    return StepwiseCertificate(passed=False, verdict="FAIL", n=0, events=0, defects=0, mismatches=0, unverified=0,
                               tv_upper=1.0, detectable_tv=float("nan"), alpha=alpha, power=float(power),
                               tv=None if tv is None else float(tv), states=0, seconds=secs,
                               largest_defect=float("nan"), first_event=None, report=report, cause=cause)


def _declared_joint(states: _States, c: np.ndarray) -> np.ndarray | None:
    """Exact law (k + V,) of the declared chain's (stop, token) given candidates ``c`` (k,): cell ``i`` candidate
    ``i`` accepted, cell ``k + y`` residual token ``y``; None where the walk meets an undeclared or failing state."""
    k, V = c.size, states.root[0].size
    out = np.zeros(k + V)
    reach = 1.0
    prefix: tuple = ()
    st = states.get(prefix, None)
    for i in range(k):
        p_i, q_i, plan, _, why = st
        if plan is None or why is not None:
            return None
        x = int(c[i])
        a = min(max(plan.m[x] / q_i[x], 0.0), 1.0) if q_i[x] > 0 else 0.0
        out[i] = reach * a
        reach *= 1.0 - a
        if i == k - 1:
            out[k:] = reach * next_target(plan, p_i, x)
            break
        prefix = prefix + (x,)
        st = states.get(prefix, st)
    return out


def coupling_pvalue(verifier, p, q, candidates, *, draws: int | None = None, seed=0) -> float | None:
    """P-value of ``verify``'s (stop, token) law given ``candidates`` against its declared steps' exact law.

    ``verify`` is called on ``draws`` rows of these candidates with fresh uniforms (default
    ``exactness.limits.LAW_DRAWS``, at most ``2**25 // V``, at least ``LAW_MIN``); the declared chain's law given
    the candidates is exact (its accept probabilities ``m(x) / q_i(x)`` along the visited states and its last
    residual row).  A small p-value: ``verify`` does not emit its declared steps' law (bias against them); a large
    one after a draw-by-draw mismatch: the same law under another coupling of the coins.  None when the walk meets an
    undeclared or failing state (that is an event of its own).

    Parameters
    ----------
    verifier, p, q : as :func:`certify_stepwise` (one node)
    candidates : sequence of k int token ids (``first_event["candidates"]``)

    Raises
    ------
    exactness.SubjectError
        ``verify`` or ``step_plan`` raised or broke its output contract.
    """
    _check_verifier(verifier)
    p2, q2 = _one_node(p, q)
    V = p2.shape[1]
    c = np.asarray(candidates, dtype=np.int64).ravel()
    k = c.size
    drafting, cl = _drafting_and_law(verifier, q2, k)
    states = _States(verifier, p2[0], cl, k, drafting, V)
    law = _declared_joint(states, c)
    if law is None:
        return None
    m = draws if draws is not None else max(LAW_MIN, min(limits.LAW_DRAWS, (1 << 25) // V))
    rows = max(1, min(4096, (1 << 23) // V))
    rng = as_generator(seed)
    P, Q = np.broadcast_to(states.root[0], (rows, V)), np.broadcast_to(q2[0], (rows, V))
    counts = np.zeros(k + V)
    for s in range(0, m, rows):
        B = min(rows, m - s)
        C = np.broadcast_to(c, (B, k)).copy()
        t, a = _run_verify(verifier, P[:B], Q[:B], C, rng.random((B, k + 1)), V, k)
        counts += np.bincount(np.where(a >= 0, a, k + t), minlength=k + V)
    return float(gof_test(counts, law).pvalue)


def _certify(verifier, p2, q2, k, n, tv, alpha, power, seed, time_limit, workers, executor, drafting, cl, name, t0):
    """The body of :func:`certify_stepwise` on checked arguments (run under its hard time limit)."""
    V = p2.shape[1]
    parallel = 1 if workers == 1 or executor == "local" else workers   # chunks running at once
    limit = None if time_limit is None else float(time_limit)
    run = partial(_run_chunk, verifier, p2[0], q2[0], cl, k, drafting, limit, (tv, n, parallel))
    if workers == 1:
        jobs = [(as_generator(seed), n)]
        parts = [run(jobs[0])]
    else:
        from .executors import executor_for

        jobs = chunk_jobs(as_seed_sequence(seed), n, workers)
        try:
            with executor_for(executor, workers=workers) as ex:
                parts = ex.map_chunks(run, jobs)
        except RuntimeError as exc:                        # exactness.executors: a worker process died
            from . import executors as _executors

            died = isinstance(exc, getattr(_executors, "WorkerDied", ())) or "died" in str(exc)
            if isinstance(exc, SubjectError) or not died:
                raise
            cls = type(verifier).__name__
            raise SubjectError(f"a worker died while running {cls}.verify or {cls}.step_plan (workers = {workers}): "
                               "its process ended (os._exit, a crash or the out-of-memory killer)") from exc
        if len(parts) != len(jobs) or not all(isinstance(r, _Chunk) and r.n <= m for r, (_, m) in zip(parts, jobs)):
            raise RuntimeError(f"executor {executor!r} returned {len(parts)} results for {len(jobs)} chunks, or not "
                               "the chunks' own: map_chunks must return fn(job) for each job, in order")
    done = sum(r.n for r in parts)
    defects, mism, unver = (sum(getattr(r, a) for r in parts) for a in ("defects", "mismatches", "unverified"))
    first, offset = None, 0
    for r, (_, m) in zip(parts, jobs):                     # the first event in draw order, unverified ones last
        if r.first is not None and (first is None or (first["kind"] == "unverified" and r.first["kind"] != "unverified")):
            first = {**r.first, "draw": r.first["draw"] + offset}
        offset += m
    checked, largest = sum(r.states for r in parts), max(r.largest for r in parts)
    events = defects + mism + unver
    stopped = done < n and not (defects or mism)
    tol_term = k * TOL
    tv_up = min(1.0, tv_upper_bound(events, done, alpha) + tol_term)
    base = seed if not isinstance(seed, np.random.Generator) else 0
    st = StepwiseRun(n=done, k=k, V=V, alpha=alpha, power=power, defects=defects, mismatches=mism,
                     mismatched=tuple(dict.fromkeys(t for r in parts for t in r.mismatched)),
                     law_pvalue=lambda t, i: coupling_pvalue(verifier, p2[0], q2[0], t,
                                                             seed=sub_seed(base, 104_729, i)))
    run_checks(st)                                         # exactness.stepwise_checks.STEPWISE_CHECKS, in order
    detect = DECLARED_STEPS.detectable_tv(done, power=power)
    coupling_p = st.checks.get("coupling")
    other_coupling = mism and not defects and coupling_p is not None and not coupling_p < alpha
    if (defects or mism) and not other_coupling:
        verdict = "FAIL"
    elif other_coupling:
        verdict = "INCONCLUSIVE"
    elif (tv_up > tv) if tv is not None else (stopped or unver > 0):   # n given: PASS only with every draw clean
        verdict = "INCONCLUSIVE"
    else:
        verdict = "PASS"
    secs = time.perf_counter() - t0
    shown = {"PASS": "NO BIAS DETECTED"}.get(verdict, verdict)   # a pass is evidence at a stated TV, not "exact"
    head = (f"{shown}: {name} ({drafting} drafting), V = {V:,}, k = {k}: {done:,} draws, {checked:,} "
            f"states checked (largest balance error {largest:.2g}), {events} event(s) "
            f"({defects} defect, {mism} mismatch, {unver} unverified), {secs:.1f} s.")
    fe = first
    if fe is not None and fe["kind"] != "unverified":
        replay = (f"exactness.stepwise.replay_state(verifier, p, q, {fe['rejected']}, {k}) recomputes the state"
                  if fe["kind"] == "defect" else
                  "exactness.stepwise.replay_draw(verifier, p, q, cert.first_event['candidates'], "
                  "cert.first_event['uniforms']) reruns the draw")
        where = f"a {fe['kind']} at draw {fe['draw']:,}, step {fe['step']} after rejecting {fe['rejected']}"
    if other_coupling:
        tail = (f" Not the same coupling: {where}: {fe['detail']}; but verify's (stop, token) law at the "
                f"mismatching draws' candidates matches its declared steps' (p = {coupling_p:.3g}), as for an exact "
                "verify that uses the coins in another convention (e.g. accept when 1 - u < a). No bias is "
                "claimed and no bound holds: the stepwise bound needs verify to take its declared steps on the "
                "uniforms it is given (accept candidate i iff u_i < m(x) / q_i(x), residual token by inverse CDF "
                f"with u_k). Certify its law with exactness.certify_verifier instead. Replay: {replay}.")
    elif verdict == "FAIL":
        law = (f" verify's (stop, token) law at the mismatching draws' candidates differs from its declared "
               f"steps' (p = {coupling_p:.3g}), so it does not emit what it declares." if coupling_p is not None else "")
        tail = f" First: {where}: {fe['detail']}.{law} Replay: {replay}."
    else:
        tail = (f" TV(law of verify, p) <= {tv_up:.3g} at confidence {1 - alpha:g} (coupling to the declared "
                f"chain, exact binomial bound, + k TOL = {tol_term:.1g}); a TV above {detect:.3g} shows an "
                f"event with probability >= {power:g}.")
        if verdict == "INCONCLUSIVE":
            why = (f"time_limit stopped it after {done:,} of {n:,} draws" if stopped else
                   f"{unver} draw(s) reached states the verifier does not declare")
            goal = (f"the asked tv = {tv:g}" if tv is not None else
                    f"the asked n = {n:,}" if stopped else "a bound from checked states only")
            tail += f" Not {goal}: {why}."
    return StepwiseCertificate(passed=verdict == "PASS", verdict=verdict, n=done, events=events, defects=defects,
                               mismatches=mism, unverified=unver, tv_upper=tv_up, detectable_tv=detect, alpha=alpha,
                               power=float(power), tv=None if tv is None else float(tv), states=checked,
                               seconds=secs, largest_defect=largest, first_event=first,
                               report=head + tail, coupling_pvalue=coupling_p, checked=dict(st.checks),
                               skipped=dict(st.skipped))
