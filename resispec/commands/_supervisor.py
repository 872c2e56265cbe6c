"""The supervised run: a verdict command in a forked child whose exit status the parent takes from what the child
reports (``resispec.cli`` runs ``resispec certify`` and its kinds through :func:`_supervised`).

A subject runs in the certifying process (``--workers 1``), and one that ends that process -- ``os._exit(0)`` in a
verifier, a kernel or a decoder, at import or in a call, or a crash of its C code -- would otherwise end the run with
ITS status: 0 would read as "no bias detected" to CI.  The child writes the status it returns into a file of a
private folder the parent made, opened only after the run returned; without that file the run ended inside a
subject, a FAIL (exit 1) naming how it ended.  The child leads its own process group.  The parent passes on the
signals that reach it from outside (SIGINT from Ctrl-C, SIGTERM, SIGHUP; SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM when their
default would end it) and the status is then ``128 + signal``; those the caller ignores (``nohup``, a background
job's SIGINT) stay ignored; one that the run's own processes send it is the subject's FAIL (the sender is read with
``sigtimedwait`` where the platform has it).  A group still alive :data:`EXIT_GRACE` seconds after a signal or after
the status was written (a subject ignoring the signal, a non-daemon thread) is killed, and so is a run still going
``hard + max(EXIT_GRACE, hard)`` seconds after :func:`run_started` (a hang the run's own alarm cannot stop), and
anything the subject left running once the child is gone.  POSIX only (``os.fork``).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time

#: Seconds a supervised child may take to exit after it reported its status (a subject's non-daemon thread), and
#: after a signal was passed on to it (a subject ignoring it): then its process group is killed.
EXIT_GRACE = 10.0

#: Where a supervised child says that its timed run began (:func:`run_started`); None outside one.
_STARTED = {"path": None}


def run_started(hard: float | None, what: str | None = None) -> None:
    """A supervised command's timed run (or one limited block of it) begins now, its subject loaded.  ``hard``: the
    seconds after which the run's own alarm stops a call of the subject (``exactness._timeout.hard_limit(
    time_limit)``, or a cell's ``--time-limit``; None or 0: no limit from now on); ``what``: the block, named in the
    FAIL (``"cell mine / zipf / k = 2"``).

    From here the supervisor kills a run still going ``hard + max(EXIT_GRACE, hard)`` seconds later, a FAIL naming
    it: a hang the in-process alarm cannot stop (one long C call, SIGALRM ignored, the alarm swallowed in a loop)
    ends, never runs forever.  Each call starts the clock again (``resispec certify`` calls it as each cell
    begins, and with None as it ends).  Outside a supervised child it does nothing."""
    path = _STARTED["path"]
    if path is None:
        return
    _STARTED["seq"] = _STARTED.get("seq", 0) + 1          # a new block: the supervisor's clock starts again
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{_STARTED['seq']}\n{float(hard or 0)!r}\n{(what or '').splitlines()[0] if what else ''}\n")
    os.replace(tmp, path)


def _supervised(run, command: str) -> int:
    """Run a verdict command (``run()``, returning its exit status) in a forked child; the exit status the parent
    takes from what the child reports, or the FAIL / signal status of how it ended (module docstring)."""
    folder = tempfile.mkdtemp(prefix="resispec-status-")
    begun = tempfile.mkdtemp(prefix="resispec-started-")   # apart: the child knows this path, never the status's
    said_sigint, tell_sigint = os.pipe()                  # written before a SIGINT is passed on: the user's Ctrl-C
    sys.stdout.flush()
    sys.stderr.flush()
    # blocked across the fork: a signal sent between the fork and the parent's handlers would end the parent alone,
    # leaving the child (and the pipes it holds) running; pending here, it is passed on by _Watch.run
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held) if hasattr(signal, "pthread_sigmask") else None
    pid = os.fork()
    if pid == 0:                                          # the child: the command itself, in its own process group
        if before is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        os.setpgid(0, 0)
        os.close(tell_sigint)
        return _child(run, said_sigint, os.path.join(folder, "status"), os.path.join(begun, "started"))
    try:
        os.setpgid(pid, pid)                              # (also here: no race with the first signal)
    except OSError:
        pass
    os.close(said_sigint)
    watch = _Watch(pid, os.path.join(folder, "status"), os.path.join(begun, "started"), tell_sigint)
    try:
        watch.run(before)
    finally:
        os.close(tell_sigint)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(begun, ignore_errors=True)
    return watch.outcome(command)


def _child(run, said_sigint: int, status: str, started: str) -> int:
    """The child's side: the command, then its status written (atomically) once the run returned."""
    from exactness._checks import sigint_source

    sigint_source(said_sigint)                            # a SIGINT the subject sends itself is then its own
    _STARTED["path"] = started
    from exactness import _timeout

    _timeout.WATCHER["fn"] = run_started                 # a cell's --time-limit starts the wall clock (resispec certify)
    code = run()
    tmp = status + ".tmp"
    with open(tmp, "w") as fh:                            # the verdict, written once the run returned
        fh.write(f"{code}\n")
    os.replace(tmp, status)
    return code


class _Watch:
    """The parent's side: waits for the child, passes signals on, kills on the grace and wall limits, and reads
    how the run ended (:meth:`outcome`)."""

    def __init__(self, pid: int, status: str, started: str, tell_sigint: int):
        self.pid, self.status, self.started_path, self.tell_sigint = pid, status, started, tell_sigint
        self.received: list = []                          # (signal, when) passed on from outside
        self.reported = self.started = self.started_said = self.overran = self.own = None
        self.said, self.wstatus = "", 0

    def forward(self, signum, _frame=None) -> None:
        """Pass a signal from outside on to the run (a SIGINT announced on the pipe first: the child reads it as
        the user's)."""
        self.received.append((signum, time.monotonic()))
        if signum == signal.SIGINT:
            try:
                os.write(self.tell_sigint, b"i")
            except OSError:
                pass
        _kill(self.pid, signum)

    def run(self, before=None) -> None:
        """Wait for the child; ``before``: the signal mask to restore at the end (the caller's, from before the fork
        blocked SIGINT / SIGTERM / SIGHUP; None: the mask as found)."""
        # a signal the caller ignores (nohup: SIGHUP; a background job: SIGINT) stays ignored: it never stops the run
        old = {sig: signal.signal(sig, self.forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
               if signal.getsignal(sig) is not signal.SIG_IGN}
        extra = tuple(sig for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)
                      if signal.getsignal(sig) is signal.SIG_DFL)
        waits = (tuple(old) + extra if hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask")
                 else ())                                 # where the sender of a signal can be read
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, waits) if waits else None
        if before is not None:
            if not waits:                                 # no sigtimedwait here: the handlers take what is pending
                signal.pthread_sigmask(signal.SIG_SETMASK, before)
            mask = before
        try:
            while not self._ended():
                self._limits(time.monotonic())
                self._signal(waits, old)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if mask is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _kill(self.pid)                               # whatever the subject left running (a fork of its own)
        try:
            with open(self.status) as fh:
                self.said = fh.read().strip()
        except OSError:
            self.said = ""

    def _ended(self) -> bool:
        done, self.wstatus = os.waitpid(self.pid, os.WNOHANG)
        return bool(done)

    def _limits(self, now: float) -> None:
        """The grace after a signal or after the status (a subject ignoring the one, a thread keeping the process
        alive), and the wall limit after :func:`run_started` (a hang the run's alarm cannot stop)."""
        if self.reported is None and os.path.exists(self.status):
            self.reported = now
        said = _read(self.started_path)
        if said is not None and said != self.started_said:    # run_started again: a new block, a new clock
            self.started_said = said
            self.started = (now, _wall(said), _what(said))
        if ((self.received and now - self.received[0][1] > EXIT_GRACE)
                or (self.reported and now - self.reported > EXIT_GRACE)):
            _kill(self.pid)
        elif (self.started and self.started[1] and not (self.received or self.reported)
              and now - self.started[0] > self.started[1]):
            self.overran = self.started[1:]               # past the run's own hard limit and as long again
            _kill(self.pid)

    def _signal(self, waits: tuple, old: dict) -> None:
        """Wait up to 50 ms for a signal: one from the run's own processes is the subject's (a FAIL), one from
        outside is passed on."""
        try:
            info = signal.sigtimedwait(waits, 0.05) if waits else time.sleep(0.05)
        except InterruptedError:                         # a stop and continue (Ctrl-Z, fg)
            return
        if info is None or info.si_signo not in waits:    # after a Ctrl-Z / fg CPython returns an empty siginfo
            return
        if _in_group(info.si_pid, self.pid):
            self.own = self.own or (info.si_signo, info.si_pid)
            _kill(self.pid)
        elif info.si_signo in old:
            self.forward(info.si_signo)
        else:                                             # SIGQUIT / SIGUSR1 ... from outside: passed on
            self.received.append((info.si_signo, time.monotonic()))
            _kill(self.pid, info.si_signo)

    def outcome(self, command: str) -> int:
        """The exit status, with its one line on stderr where the child could not say it."""
        said = self.said
        if self.own:
            _say(command, f"FAIL: a process of the run (pid {self.own[1]}) sent {signal.Signals(self.own[0]).name} "
                          "to the supervising resispec process: a subject that signals it is a FAIL, not the user's "
                          "Ctrl-C")
            return 1
        if self.received:                                 # stopped from outside (CI's SIGTERM, Ctrl-C)
            sig = self.received[0][0]
            if not said.isdigit():                        # else the child said so itself (Ctrl-C: "interrupted")
                _say(command, "interrupted (Ctrl-C)" if sig == signal.SIGINT else
                     f"terminated ({signal.Signals(sig).name})")
            return 128 + sig
        if said.isdigit():
            return int(said)
        if self.overran:
            wall, what = self.overran
            began = f"{what} began" if what else "its timed run began"
            _say(command, f"FAIL: the run was still going {wall:g} s after {began}, past its limit and a grace as "
                          "long, and was killed: a subject that hangs where the run's alarm cannot stop it (one long C "
                          "call, SIGALRM ignored, the alarm swallowed in a loop, an import that never returns) is a "
                          "FAIL")
            return 1
        w = self.wstatus
        how = (f"was killed by signal {signal.Signals(os.WTERMSIG(w)).name}" if os.WIFSIGNALED(w) else
               f"exited with status {os.WEXITSTATUS(w)} without returning (os._exit, or an error the harness "
               "could not catch)")
        _say(command, f"FAIL: the run {how} before its verdict: a subject (verifier, kernel, decoder or its module) "
                      "that ends or crashes the process is a FAIL")
        return 1


def _say(command: str, line: str) -> None:
    print(f"resispec {command}: {line}", file=sys.stderr)


def _kill(pid: int, sig: int | None = None) -> None:
    """Send ``sig`` (default SIGKILL) to the run's process group ``pid``, and to the child itself when it no longer
    leads that group (it moved: still reached); a process already gone is no error."""
    sig = signal.SIGKILL if sig is None else sig
    try:
        os.killpg(pid, sig)
        led = os.getpgid(pid) == pid                  # the child still leads the group: it got the signal once
    except OSError:
        led = False
    if not led:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _in_group(sender: int, group: int) -> bool:
    """Whether process ``sender`` (a signal's ``si_pid``; 0 for the kernel, a terminal's Ctrl-C) is in the process
    group ``group`` that a supervised run leads (a process gone already cannot be told: False)."""
    if sender <= 0:
        return False
    try:
        return sender == group or os.getpgid(sender) == group
    except OSError:
        return False


def _read(path: str) -> str | None:
    """The text :func:`run_started` last wrote at ``path`` (None: none yet)."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _wall(said: str) -> float | None:
    """Seconds after :func:`run_started` at which the supervisor kills the run: ``hard + max(EXIT_GRACE, hard)``
    for the ``hard`` it wrote (``said``; None if it does not read as a positive number: no limit)."""
    try:
        hard = float(said.split("\n")[1])
    except (IndexError, ValueError):
        return None
    return hard + max(EXIT_GRACE, hard) if hard > 0 and hard == hard else None


def _what(said: str) -> str:
    """The block :func:`run_started` named (``""``: the run's timed run as a whole)."""
    lines = said.split("\n")
    return lines[2].strip() if len(lines) > 2 else ""
