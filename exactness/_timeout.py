"""A wall-clock limit on a block of Python code (``SIGALRM`` / ``setitimer``, POSIX main thread).

Where ``signal.SIGALRM`` is unavailable (Windows) or the code does not run in
the main thread, the limit is OFF: ``time_limit`` then yields ``False`` and
the block runs to completion.  Python delivers the signal between bytecodes,
so a block stuck inside one long C call (a compiled kernel, a blocking
system call that retries) is interrupted only when that call returns.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading
import time
from contextlib import contextmanager


#: Largest limit accepted (about 116 days; far larger values overflow the platform's timer).
MAX_TIMEOUT = 1e7


class TimeLimitExceeded(BaseException):
    """Raised inside the block when its time limit passes.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that a plug-in's
    ``except Exception`` does not swallow it.
    """

    def __init__(self, seconds: float):
        super().__init__(f"timed out after {seconds:g} s")
        self.seconds = seconds

    def __reduce__(self):                    # back from a forked worker (a process pool pickles it) as itself
        return type(self), (self.seconds,), dict(self.__dict__)


class RunOutOfTime(TimeLimitExceeded):
    """Raised before a subject's call once the run's soft deadline (:func:`run_deadline`) has passed: every call
    of the subject so far returned, so the run needs more time than its ``time_limit`` and the subject did not hang
    (the certifiers turn it into a ``BudgetError``: the caller's limit, no verdict)."""


#: Least grace, in seconds, past a run's ``time_limit`` before a call that has not returned is a hang.
HANG_GRACE = 10.0


def hard_limit(time_limit: float) -> float:
    """Seconds after which a run is stopped as hung: ``time_limit + max(HANG_GRACE, time_limit)``.

    The certifiers stop on their own at ``time_limit`` between calls of the subject (:func:`run_deadline`, or
    between batches); the alarm (:func:`time_limit`) fires only this much later, so a call of the subject that was
    running at the limit has been running for at least ``max(HANG_GRACE, time_limit)`` seconds: a slow call is
    never reported as a hang.
    """
    return float(time_limit) + max(HANG_GRACE, float(time_limit))


#: The subject's call in progress (``exactness._checks.subject_call``, ``exactness.pit.running``: ``"decoder.sample(
#: prompts, new_tokens, rng)"``), or None: an alarm of :func:`time_limit` records it on its exception (``.running``).
CALL = {"what": None}
#: The first alarm :func:`time_limit` raised in the innermost block now running (None: none yet).
_FIRED = {"first": None}


@contextmanager
def calling(what: str):
    """Mark ``what`` as the subject's call in progress (restored on exit)."""
    prev, CALL["what"] = CALL["what"], what
    try:
        yield
    finally:
        CALL["what"] = prev


#: Told as a limited block of a subject's calls begins (``fn(seconds, what)``: its alarm's seconds and a name such
#: as ``"cell mine / zipf / k = 2"``) and ends (``fn(None, None)``); None: nobody listens.  The CLI's supervisor
#: sets it (``resispec.commands._supervisor.run_started``) to kill a hang this module's alarm cannot stop.
WATCHER = {"fn": None}


def announce(seconds: float | None, what: str | None = None) -> None:
    """Tell :data:`WATCHER` that a block limited to ``seconds`` begins (None: the block ended)."""
    fn = WATCHER["fn"]
    if fn is not None:
        fn(seconds, what)


#: Least seconds a subject's load (its module's import, its factory) is watched for (:func:`loading`): a slow
#: import is not a hang, whatever a cell's limit.
LOAD_GRACE = 30.0


@contextmanager
def loading(timeout: float | None, what: str):
    """Within the block a subject is loaded (``what``: ``"loading --verifier mine:V"``): announced to
    :data:`WATCHER` with ``max(timeout, LOAD_GRACE)`` seconds, so that under the CLI's supervisor an import that
    never returns ends the run as a FAIL naming it (``timeout`` None / 0: not watched)."""
    if timeout:
        announce(max(float(timeout), LOAD_GRACE), what)
    try:
        yield
    finally:
        if timeout:
            announce(None)


#: The soft deadline of the run in progress (``time.monotonic()`` seconds), or None: see :func:`run_deadline`.
_DEADLINE = {"at": None}


@contextmanager
def run_deadline(seconds: float | None):
    """Within the block, a call of the subject (``exactness._checks.subject_call``) that would START after
    ``seconds`` raises :class:`RunOutOfTime` instead (None / 0: no deadline; an outer deadline due sooner stays).
    Yields whether this block's deadline is the one that governs (False: none asked, or an outer one is sooner)."""
    prev = _DEADLINE["at"]
    ours = False
    if seconds:
        at = time.monotonic() + float(seconds)
        ours = prev is None or at <= prev
        _DEADLINE["at"] = at if ours else prev
    try:
        yield ours
    finally:
        _DEADLINE["at"] = prev


def out_of_time(limit: float, fix: str, name: str = "time_limit") -> str:
    """The message of a run stopped by its own ``time_limit`` with no call of the subject hung (a ``BudgetError``:
    the caller's limit, no verdict); ``fix`` names the knob (``"time_limit / --time-limit"``), ``name`` the limit."""
    return (f"{name} = {limit:g} s passed before the certificate was done, and no call of the subject hung (each "
            f"returned within the grace of {hard_limit(limit) - limit:g} s): the run needs more time than the limit; "
            f"raise {fix}, or ask for fewer draws (n / tv). Nothing was decided about the subject")


def check_deadline() -> None:
    """Raise :class:`RunOutOfTime` if the soft deadline of :func:`run_deadline` has passed."""
    at = _DEADLINE["at"]
    if at is not None and time.monotonic() > at:   # in a forked worker too: the pool brings the exception back
        exc = RunOutOfTime(0.0)
        exc.first = _FIRED["first"]          # a hard alarm a subject swallowed before: it was a hang all the same
        raise exc


def check_timeout(timeout, *, name: str = "timeout") -> float | None:
    """``None`` or ``0`` -> None (no limit); a finite number of seconds > 0 -> float; else ValueError/TypeError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or type(timeout).__name__ == "bool_" or not isinstance(timeout, numbers.Real):
        # (numpy ints and floats are numbers of seconds too; a bool is not)
        raise TypeError(f"{name} must be a number of seconds (0 or None = no limit), got {timeout!r}")
    if not math.isfinite(timeout) or timeout < 0 or timeout > MAX_TIMEOUT:
        raise ValueError(f"{name} must be a number of seconds in [0, {MAX_TIMEOUT:g}] (0 = no limit), got {timeout}")
    return float(timeout) or None


def limit_available() -> bool:
    """Whether ``time_limit`` can enforce a limit here (SIGALRM exists and this is the main thread)."""
    return hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()


def own_limit(seconds: float | None) -> float | None:
    """``seconds``, or None when it would not be this block's limit: none asked (None / 0), no limit available
    here (:func:`limit_available`), or an outer ``SIGALRM`` timer (the caller's own limit, e.g. a ``resispec
    certify`` cell's) is due no later: that one stays in charge and its ``TimeLimitExceeded`` is the caller's."""
    if not seconds or not limit_available():
        return None
    delay, _ = signal.getitimer(signal.ITIMER_REAL)
    return None if 0 < delay <= seconds else seconds


#: Shortest alarm delay and repeat interval (seconds) of :func:`time_limit`.
MIN_ALARM = 1e-3


@contextmanager
def time_limit(seconds: float | None):
    """Raise ``TimeLimitExceeded`` in the block after ``seconds`` (None/0: no limit).

    Yields whether the limit is enforced.  After the limit the alarm repeats
    every ``min(1 s, seconds)`` until the block is left, so code that swallows
    the exception (``except BaseException: pass``) is interrupted again as
    soon as it runs on; code that swallows it forever in a loop cannot be
    stopped from inside the process.  The previous SIGALRM handler is
    restored on exit, and a timer that was already running (an outer limit)
    is re-armed with its remaining time.
    """
    if not seconds or not limit_available():
        yield False
        return

    def _alarm(signum, frame):
        exc = TimeLimitExceeded(seconds)
        exc.running = CALL["what"]                    # the subject's call it stops, if one is running
        if _FIRED["first"] is None:
            _FIRED["first"] = exc
        exc.first = _FIRED["first"]                   # a repeat names the call the first alarm caught
        raise exc

    fired_before, _FIRED["first"] = _FIRED["first"], None
    old_handler = signal.signal(signal.SIGALRM, _alarm)
    # the alarm repeats (every min(1 s, seconds)) until the block is left, so a plug-in that swallows
    # the first TimeLimitExceeded (``except BaseException``) is interrupted again
    # (at least MIN_ALARM apart: an alarm every microsecond outran the handler and the default one killed the process)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, max(seconds, MIN_ALARM),
                                               max(min(1.0, seconds), MIN_ALARM))
    t0 = time.monotonic()
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)     # an alarm already pending is dropped, never the default kill
        signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
        _FIRED["first"] = fired_before
        if old_delay > 0:
            signal.setitimer(signal.ITIMER_REAL, max(old_delay - (time.monotonic() - t0), 1e-3), old_interval)
