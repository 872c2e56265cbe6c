"""Input checks for the harness: laws, sample sizes, sampler outputs.

Every check raises ``ValueError`` / ``TypeError`` naming the argument and the
fix; nothing is silently repaired.
"""

from __future__ import annotations

import warnings

import numpy as np

from resispec._validation import SUM_TOL  # noqa: F401  (a law sums to 1 within it; re-exported for exactness)


class ExactnessWarning(UserWarning):
    """The requested power cannot be reached with the given number of samples."""


class SubjectError(RuntimeError):
    """The subject under certification misbehaved: a verdict of FAIL (exit 1), never "bad input" (exit 2).

    The subject is what is being certified: a verifier, a kernel, a decoder, a sampler or an engine.  It
    misbehaves when it raises, hangs past the time limit, returns the wrong shape or dtype, emits a token
    outside ``[0, V)``, reports an accepted index that does not name the emitted candidate, or emits a token
    of target probability 0.  The certify functions catch it and return a failed certificate naming
    ``cause`` (:func:`exactness.certificate.subject_failure`); the CLI prints that cause and exits 1.
    The caller's own malformed arguments stay ``ValueError`` / ``TypeError`` (exit 2).

    Attributes
    ----------
    cause : str
        One line naming the subject's method and what it did, e.g. ``"MyVerifier.verify raised
        ZeroDivisionError: division by zero"``.
    """

    def __init__(self, cause: str):
        super().__init__(cause)
        self.cause = str(cause)


class BudgetError(ValueError):
    """A planned or requested sample count the certificate cannot use -- over the time or memory limit, or too few
    draws for its test to have a degree of freedom: nothing was decided (no verdict on the subject); the message
    gives the estimate and the fixes.  The caller's request, so the CLI exits 2 (``exactness.budget``)."""


def exception_line(exc: BaseException, limit: int = 200) -> str:
    """``"RuntimeError: boom (in verify, mine.py:12)"``: an exception in one line (its message cut to ``limit``
    characters) with its innermost frame; ``SystemExit`` as ``"SystemExit: called sys.exit(0)"``."""
    import traceback

    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, SystemExit):
        msg = f"called sys.exit({exc.code!r})"
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (in {tb[-1].name}, {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return text + where


def subject_cause(what: str, exc: BaseException) -> str:
    """The cause of a FAIL for a subject call ``what`` that raised ``exc``: ``"Mine.verify called sys.exit(2) (in
    verify, mine.py:12)"`` for ``SystemExit``, else ``"Mine.verify raised RuntimeError: boom (in verify,
    mine.py:12)"``."""
    if getattr(exc, "names_itself", False):   # the harness's wrapper already names the subject's own error
        return f"{exc}, inside {what}"
    line = exception_line(exc)
    if isinstance(exc, SystemExit):   # "SystemExit: called sys.exit(2) (in verify, mine.py:12)"
        return f"{what} {line.split(': ', 1)[1]}"
    if isinstance(exc, KeyboardInterrupt):   # raised by the subject itself: no Ctrl-C reached the run
        return f"{what} raised {line}; no Ctrl-C (SIGINT) was received, so it is the subject's own"
    return f"{what} raised {line}"


#: The SIGINTs this process received since :func:`watch_interrupts` (``None``: not watched, as in a library call,
#: where every ``KeyboardInterrupt`` is taken for Ctrl-C).
_INTERRUPTS: list | None = None


def watch_interrupts() -> bool:
    """Record this process's SIGINTs (Ctrl-C), so that a ``KeyboardInterrupt`` that a subject raises ITSELF, with
    no SIGINT received, is the subject's failure (:func:`passes_through`) rather than the user's Ctrl-C.

    The CLI calls it once, in the main thread, before the run (its forked workers and supervised child inherit the
    handler).  Nothing changes where SIGINT is not Python's default handler (ignored, as under ``nohup``, or a
    handler of the caller's own), except that with SIGINT ignored (a background job ``cmd &``, ``trap '' INT``) no
    Ctrl-C can reach the run: every ``KeyboardInterrupt`` is then the subject's own.  Returns whether SIGINT is
    watched now.
    """
    import signal

    global _INTERRUPTS
    try:
        current = signal.getsignal(signal.SIGINT)
        if current is signal.SIG_IGN:            # no Ctrl-C can arrive: nothing to record, none will come
            _INTERRUPTS = []
            return True
        if current is not signal.default_int_handler:
            return _INTERRUPTS is not None
        seen: list = []

        def on_sigint(signum, _frame):
            if _from_outside():              # else the subject signalled its own process: its KeyboardInterrupt
                seen.append(signum)
            raise KeyboardInterrupt          # what Python's default handler does

        signal.signal(signal.SIGINT, on_sigint)
    except ValueError:                       # not the main thread: leave SIGINT as it is
        return False
    _INTERRUPTS = seen
    return True


#: In a supervised run (``resispec.commands._supervisor``), the read end of a pipe the supervisor writes to before it
#: passes a SIGINT on to the child's process group; None elsewhere.  See :func:`sigint_source`.
_SIGINT_FROM: int | None = None


def sigint_source(fd: int | None) -> None:
    """Where a SIGINT must come from to be the user's Ctrl-C: in a supervised child, only the supervisor passes
    one on (Ctrl-C reaches the supervisor, whose process group is the terminal's; the child leads a group of its
    own), and it writes to ``fd`` first.  A SIGINT with ``fd`` not readable was sent by the subject to its own
    process (``os.kill(os.getpid(), SIGINT)``) or group: its ``KeyboardInterrupt`` is then the subject's FAIL."""
    import os

    global _SIGINT_FROM, _SIGINT_PIPE
    _SIGINT_FROM = fd
    st = os.fstat(fd) if fd is not None else None
    _SIGINT_PIPE = None if st is None else (st.st_dev, st.st_ino)


#: (st_dev, st_ino) of the supervisor's pipe: a descriptor the subject closed or replaced (dup2) is not it.
_SIGINT_PIPE: tuple | None = None


def _from_outside() -> bool:
    """Whether the SIGINT being handled may be the user's: no supervisor (nothing to tell it apart by), or the
    supervisor's pipe is readable (it passed one on).  A pipe the subject closed or replaced says no: the subject's
    (a real Ctrl-C reached the supervisor, which returns 130 whatever the child concluded)."""
    if _SIGINT_FROM is None:
        return True
    import os
    import select

    try:
        st = os.fstat(_SIGINT_FROM)
        if (st.st_dev, st.st_ino) != _SIGINT_PIPE:
            return False
        return bool(select.select([_SIGINT_FROM], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's Ctrl-C for certain: a ``KeyboardInterrupt`` after :func:`watch_interrupts`
    saw a SIGINT (where code loading a subject turns every failure, a ``KeyboardInterrupt`` included, into a
    ValueError naming the module, a real Ctrl-C must still stop the run as one)."""
    return isinstance(exc, KeyboardInterrupt) and bool(_INTERRUPTS)


def passes_through(exc: BaseException) -> bool:
    """Whether ``exc``, raised inside a subject's call, is not the subject's failure: Ctrl-C (``KeyboardInterrupt``,
    when :func:`watch_interrupts` saw a SIGINT or is not watching) and the harness's own time limit
    (:class:`exactness._timeout.TimeLimitExceeded`).  Everything else a subject raises -- any ``Exception``,
    ``SystemExit``, ``GeneratorExit``, ``asyncio.CancelledError``, a test framework's outcome exception, a
    ``KeyboardInterrupt`` raised with no SIGINT received, any other ``BaseException`` -- is its failure (a FAIL
    naming it)."""
    from ._timeout import TimeLimitExceeded

    if isinstance(exc, KeyboardInterrupt):
        return _INTERRUPTS is None or bool(_INTERRUPTS)   # watched: only a SIGINT received makes it Ctrl-C
    return isinstance(exc, TimeLimitExceeded)


def subject_call(fn, what: str, *args, **kwargs):
    """Call the subject's ``fn(*args, **kwargs)``; any ``Exception`` it raises, or ``SystemExit`` (a subject that
    calls ``sys.exit``), becomes a :class:`SubjectError` whose cause is :func:`subject_cause`.

    ``what`` names the call in the cause (``"MyVerifier.verify"``).  A ``SubjectError`` raised inside passes
    through unchanged; so do time limits (``exactness._timeout.TimeLimitExceeded``) and Ctrl-C (``KeyboardInterrupt``):
    :func:`passes_through`.  Past the run's soft deadline (``exactness._timeout.run_deadline``) the call is not made:
    ``RunOutOfTime`` (the caller's limit, not the subject's fault).
    """
    from ._timeout import calling, check_deadline

    check_deadline()                        # the run's time_limit passed, every call so far returned: RunOutOfTime
    try:
        with calling(what):                 # an alarm names this call
            return fn(*args, **kwargs)
    except SubjectError:
        raise
    except BaseException as exc:    # a subject that ends the program is a FAIL, never the harness's exit
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause(what, exc)) from exc


def plural(m: int, noun: str) -> str:
    """``"1 sample"``, ``"2,000 samples"``: a count with its noun, singular or plural."""
    return f"{m:,} {noun}{'' if m == 1 else 's'}"


def check_law(law, *, name: str = "law") -> np.ndarray:
    """Validate one law: (V,) float64, finite, non-negative, summing to 1.

    Raises
    ------
    TypeError
        Non-numeric input.
    ValueError
        Wrong shape, NaN/inf, negative entries, or a sum off 1 by more than
        ``SUM_TOL``.
    """
    if isinstance(law, (str, bytes)) or law is None:
        raise TypeError(f"{name} must be a (V,) array of probabilities, got {type(law).__name__}")
    arr = np.asarray(law)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if arr.ndim != 1 or arr.size < 1:
        raise ValueError(f"{name} must have shape (V,) with V >= 1, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; pass finite probabilities")
    if np.any(arr < 0):
        raise ValueError(f"{name} has negative entries (min {arr.min():.3g}); a law must be non-negative")
    s = float(arr.sum())
    if abs(s - 1.0) > SUM_TOL:
        raise ValueError(f"{name} sums to {s!r}, not 1 (tolerance {SUM_TOL}); normalise it first")
    return arr


def is_int(x) -> bool:
    """An int or numpy integer, not a bool (the one test every argument check here uses)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_number(x) -> bool:
    """An int, float or numpy number, not a bool."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def check_n(n, *, name: str = "n") -> int:
    """Validate a sample size (integer >= 1)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an integer number of samples, got {n!r}")
    if n < 1:
        raise ValueError(f"{name} must be >= 1, got {n}")
    return int(n)


def check_alpha(alpha, *, name: str = "alpha") -> float:
    """Validate a significance level in (0, 1)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)):
        raise TypeError(f"{name} must be a float in (0, 1), got {alpha!r}")
    if not (0.0 < float(alpha) < 1.0):
        raise ValueError(f"{name} must lie in (0, 1), got {alpha}")
    return float(alpha)


def check_tokens(tokens, V: int, expected: int, *, name: str = "sample(rng, n)") -> np.ndarray:
    """Validate sampler output: (expected,) integer ids in [0, V).

    Raises
    ------
    TypeError
        Non-integer dtype (floats, bools, objects): the sampler must return
        int64 token ids.
    ValueError
        Wrong shape or ids outside ``[0, V)``.
    """
    t = np.asarray(tokens)
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise TypeError(f"{name} returned dtype {t.dtype}; it must return integer token ids (int64)")
    if t.shape != (expected,):
        raise ValueError(f"{name} returned shape {t.shape}; expected ({expected},), one token id per draw")
    if t.size and (t.min() < 0 or t.max() >= V):
        raise ValueError(f"{name} returned ids in [{t.min()}, {t.max()}], outside [0, {V}) of the law's vocabulary")
    return t.astype(np.int64, copy=False)


def seed_copy(ss: np.random.SeedSequence) -> np.random.SeedSequence:
    """A copy of ``ss`` in its current state: spawning from the copy leaves the caller's object as it was, so the same
    ``SeedSequence`` passed twice gives the same run (as ``numpy.random.default_rng(ss)`` does)."""
    return np.random.SeedSequence(ss.entropy, spawn_key=ss.spawn_key, pool_size=ss.pool_size,
                                  n_children_spawned=ss.n_children_spawned)


def as_seed_sequence(seed, *, name: str = "seed") -> np.random.SeedSequence:
    """``numpy.random.SeedSequence`` from any seed the harness takes.

    Accepted: ``None`` (fresh OS entropy), an int >= 0, a sequence of ints >= 0
    (``[0, i]``, a tuple or a 1-D integer array: the usual way to give run ``i``
    its own stream), a ``SeedSequence`` (a copy: :func:`seed_copy`) or a numpy
    ``Generator`` (one 63-bit integer is drawn from it, so the generator
    advances).  ``as_seed_sequence(s)`` and ``numpy.random.default_rng(s)`` give
    the same stream for an int or a sequence (numpy's own rule,
    ``numpy.random.SeedSequence``).

    Raises
    ------
    TypeError
        Any other type (a float, a string, a bool, a nested or float sequence).
    ValueError
        A negative int, an empty sequence or a sequence with a negative entry.
    """
    if isinstance(seed, np.random.SeedSequence):
        return seed_copy(seed)
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int(seed.integers(2**63)))
    what = (f"{name} must be an int >= 0, a sequence of ints >= 0 such as [0, i], a numpy SeedSequence or a "
            "numpy Generator")
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, bool):
        raise TypeError(f"{what}, got {seed!r}")
    if isinstance(seed, (int, np.integer)):
        if seed < 0:
            raise ValueError(f"{name} must be >= 0, got {seed}")
        return np.random.SeedSequence(int(seed))
    if isinstance(seed, (list, tuple, np.ndarray)):
        arr = np.asarray(seed, dtype=object) if not isinstance(seed, np.ndarray) else seed
        items = list(arr.ravel()) if arr.ndim == 1 else None
        if items is None or not all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
                                    for x in items):
            raise TypeError(f"{what}; got the sequence {seed!r} (every entry must be an int, one level deep)")
        if not items:
            raise ValueError(f"{name} is an empty sequence; give at least one int, e.g. [0, i]")
        if min(items) < 0:
            raise ValueError(f"{name} entries must be >= 0, got {seed!r}")
        return np.random.SeedSequence([int(x) for x in items])
    raise TypeError(f"{what}, got {seed!r}")


def as_generator(seed, *, name: str = "seed") -> np.random.Generator:
    """``numpy.random.Generator`` from a seed (see :func:`as_seed_sequence`) or pass a Generator through.

    ``as_generator(0)``, ``as_generator([0, 3])`` and ``as_generator(SeedSequence([0, 3]))``
    equal ``numpy.random.default_rng`` of the same seed.  Raises as :func:`as_seed_sequence`.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(as_seed_sequence(seed, name=name))


def base_seed(seed):
    """Validate a base seed once: ints, sequences and SeedSequences come back as given (so
    :func:`sub_seed` reproduces the old streams); a Generator or ``None`` becomes one fixed SeedSequence."""
    ss = as_seed_sequence(seed)
    return ss if seed is None or isinstance(seed, np.random.Generator) else seed


def sub_seed(seed, *keys: int) -> np.random.SeedSequence:
    """A child seed for run ``keys`` of a base ``seed``: ``SeedSequence([seed, *keys])`` for an int.

    A sequence seed ``[a, b]`` gives ``SeedSequence([a, b, *keys])``; a ``SeedSequence``
    the child with ``spawn_key`` extended by ``keys``; a Generator a fresh int drawn from it.
    For an int seed this is exactly the stream the harness used before sequences were accepted.
    """
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=tuple(seed.spawn_key) + tuple(int(k) for k in keys),
                                      pool_size=seed.pool_size)
    ss = as_seed_sequence(seed)
    ent = ss.entropy if isinstance(ss.entropy, (list, tuple)) else [ss.entropy]
    return np.random.SeedSequence([int(x) for x in ent] + [int(k) for k in keys])


def check_tv(tv, *, name: str = "tv"):
    """``None`` or a TV in (0, 1] (the smallest bias to detect); TypeError / ValueError otherwise."""
    if tv is None:
        return None
    if isinstance(tv, bool) or not isinstance(tv, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a float in (0, 1] (the smallest TV bias to detect), got {tv!r}")
    if not 0 < float(tv) <= 1:  # also rejects NaN
        raise ValueError(f"{name} must lie in (0, 1] (the smallest TV bias to detect), got {tv!r}")
    return float(tv)


def warn_power(detectable: float, tv: float | None, n: int, needed: int | None, alpha: float, power: float) -> None:
    """Warn when ``n`` samples cannot detect the requested TV at the requested power."""
    if tv is not None and detectable > tv:
        warnings.warn(
            f"too few samples for the requested power: with n = {n:,} the detectable TV at alpha = {alpha:g} "
            f"and power = {power:g} is {detectable:.3g} > requested {tv:.3g}"
            + (f"; about n = {needed:,} samples are needed" if needed else ""),
            ExactnessWarning, stacklevel=3)
