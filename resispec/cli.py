"""``resispec`` command line.  Each subcommand lives in ``resispec/commands/<name>.py``
and defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``;
they are discovered automatically, so adding one touches one file.

One verb, several subjects: a command named ``VERB-KIND`` (``certify-decoder``) whose ``VERB`` is a command
too is that verb's kind, run as ``resispec VERB KIND ...`` (``resispec certify decoder``); the verb's own
module names its default kind (``KIND = "verifiers"``: ``resispec certify`` = ``resispec certify
verifiers``).  The hyphenated names still parse (committed reports quote them) but are not listed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from functools import lru_cache
from pathlib import Path

from . import commands as _commands


@lru_cache(maxsize=None)
def _discover() -> tuple:
    """The command modules, once per process (``verbs``, ``build_parser`` and ``main`` all read them)."""
    mods = []
    for info in pkgutil.iter_modules(_commands.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{_commands.__name__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return tuple(sorted(mods, key=lambda m: m.NAME))


def verbs(mods=None) -> dict[str, dict[str, str]]:
    """``{verb: {kind: command NAME}}`` for every verb with kinds, its default kind included
    (``{"certify": {"verifiers": "certify", "decoder": "certify-decoder", ...}, "bench": {...}}``)."""
    mods = _discover() if mods is None else mods
    names = {m.NAME: m for m in mods}
    table: dict[str, dict[str, str]] = {}
    for name in names:
        verb, _, kind = name.partition("-")
        if kind and verb in names:
            table.setdefault(verb, {getattr(names[verb], "KIND", verb): verb})[kind] = name
    return table


def build_parser(spaced: bool = False) -> argparse.ArgumentParser:
    """The ``resispec`` argument parser with every discovered subcommand (a verb's kinds parse, unlisted).

    ``spaced``: a kind's usage and help name it ``resispec certify decoder`` (as the user typed it) rather
    than ``resispec certify-decoder``.
    """
    from . import __version__

    parser = argparse.ArgumentParser(prog="resispec", description="Exact multi-candidate speculative sampling.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"resispec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mods = _discover()
    table = verbs(mods)
    kinds = {name: verb for verb, ks in table.items() for name in ks.values() if name != verb}
    helps = {m.NAME: m.HELP for m in mods}
    for mod in mods:
        listed = {} if mod.NAME in kinds else {"help": mod.HELP}      # a kind is listed under its verb's --help
        epilog = None
        if mod.NAME in table:
            listed["help"] += f" [subjects: {', '.join(table[mod.NAME])}]"
            epilog = "subjects (resispec %s KIND ...; each has its own --help):\n" % mod.NAME + "\n".join(
                f"  {kind:10s} {helps[name]}" + (" (the default)" if name == mod.NAME else "")
                for kind, name in table[mod.NAME].items())
        prog = f"resispec {kinds[mod.NAME]} {mod.NAME.partition('-')[2]}" if spaced and mod.NAME in kinds else None
        p = sub.add_parser(mod.NAME, description=getattr(mod, "__doc__", None) or mod.HELP, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter, **({"prog": prog} if prog else {}),
                           allow_abbrev=False, **listed)   # --n is not --nodes, --temperature not --temperatures
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _name=mod.NAME, _supervised=getattr(mod, "SUPERVISED", False))
    return parser


def _subparser(parser, args) -> argparse.ArgumentParser:
    """The parser of the command ``args`` was parsed by."""
    return parser._subparsers._group_actions[0].choices[args._name]


def _name_the_flag(parser, args, msg: str) -> str:
    """A library's refusal of a value that came from a flag, named as the flag: ``"numpy_B must be ..."`` ->
    ``"--numpy-B must be ..."``, ``"time_limit must be ..."`` -> ``"--time-limit must be ..."`` (the library
    names its parameter; the user typed the flag)."""
    for action in _subparser(parser, args)._actions:
        if not action.option_strings or action.dest == "help":
            continue
        for tail in (" must ", " entries must ", " ="):
            if msg.startswith(action.dest + tail):
                return action.option_strings[0] + msg[len(action.dest):]
    return msg


def _below_one(parser, args) -> str | None:
    """The first count option (``type=count``: ``--n``, ``--stop-after``, ...) given below 1, as a message."""
    from .commands._args import count

    for action in _subparser(parser, args)._actions:
        value = getattr(args, action.dest, None)
        if action.type is count and isinstance(value, int) and value < 1:
            return f"{action.option_strings[0]} must be a whole number >= 1 (a count), got {value}"
    return None


def join_verb(argv: list[str], table: dict | None = None) -> list[str]:
    """``["certify", "decoder", ...]`` -> ``["certify-decoder", ...]``; ``["certify", "verifiers", ...]`` ->
    ``["certify", ...]``; anything else unchanged (``table``: :func:`verbs`, computed when not given)."""
    if len(argv) >= 2:
        kinds = (verbs() if table is None else table).get(argv[0], {})
        if argv[1] in kinds:
            return [kinds[argv[1]], *argv[2:]]
    return list(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 with a one-line error for bad input; 130 on Ctrl-C)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:     # Ctrl-C while the commands load or parse: one line, not a traceback
        print("resispec: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    program = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    table = verbs()
    kinds = table.get(argv[0], {}) if argv else {}
    if len(argv) >= 2 and kinds and not argv[1].startswith("-") and argv[1] not in kinds:
        print(f"resispec {argv[0]}: error: unknown subject {argv[1]!r}; choose one of {', '.join(kinds)} "
              f"(resispec {argv[0]} --help)", file=sys.stderr)
        return 2
    typed = " ".join(argv[:2]) if len(argv) >= 2 and argv[1] in kinds else None   # "certify decoder"
    joined = join_verb(argv, table)
    spaced = typed is not None
    parser = build_parser(spaced)
    try:
        args = parser.parse_args(joined)
    except SystemExit as exc:  # argparse: usage error (2) or --help / --version (0), already printed
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    if typed:
        args.command = typed
    low = _below_one(parser, args)
    if low:
        print(f"resispec {args.command}: error: {low}", file=sys.stderr)
        return 2
    args._program = program                 # run as a program (not main([...]) in a test): the audit may supervise
    if getattr(args, "_supervised", False):  # a subject's os.chdir must not move where the verdict is written
        for name, value in vars(args).items():
            if isinstance(value, Path) and not value.is_absolute():
                setattr(args, name, Path(os.path.abspath(value)))
    if program:                             # a subject's own KeyboardInterrupt (no Ctrl-C) is then its FAIL
        from exactness._checks import watch_interrupts

        watch_interrupts()
    if program and args._supervised and hasattr(os, "fork"):
        return _supervised(lambda: _run(parser, args), args.command)
    return _run(parser, args)


#: Where a supervised child says that its timed run began (:func:`run_started`); None outside one.
_STARTED = {"path": None}


def run_started(hard: float | None) -> None:
    """A supervised command's timed run begins now, its subject loaded.  ``hard``: the seconds after which the run's
    own alarm stops a call of the subject (``exactness._timeout.hard_limit(time_limit)``; None: no limit).

    From here the supervisor (:func:`_supervised`) kills a run still going ``hard + max(EXIT_GRACE, hard)`` seconds
    later, a FAIL naming it: a hang the in-process alarm cannot stop (one long C call, SIGALRM ignored, the alarm
    swallowed in a loop) ends, never runs forever.  Outside a supervised child it does nothing."""
    path = _STARTED["path"]
    if path is None or not hard:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{float(hard)!r}\n")
    os.replace(tmp, path)


#: Seconds a supervised child may take to exit after it reported its status (a subject's non-daemon thread), and
#: after a SIGTERM / SIGHUP / SIGINT was passed on to it (a subject ignoring it): then its process group is killed.
EXIT_GRACE = 10.0


def _supervised(run, command: str) -> int:
    """Run a verdict command (``run()``) in a forked child and take its exit status from what the child reports.

    A subject runs in the certifying process (``--workers 1``), and one that ends that process -- ``os._exit(0)`` in
    a verifier, a kernel or a decoder, at import or in a call, or a crash of its C code -- would otherwise end the
    run with ITS status: 0 would read as "no bias detected" to CI.  The child writes the status it returns into a
    file of a private folder the parent made, opened only after the run returned (no descriptor of it is open while
    a subject runs, so none can be written to by accident); without that file the run ended inside a subject, a
    FAIL (exit 1) naming how it ended.  The child leads its own process group: SIGINT (Ctrl-C reaches this process),
    SIGTERM and SIGHUP are passed on to the group (those the caller ignores -- ``nohup``, a background job's SIGINT
    -- stay ignored), and the status is then ``128 + signal``; a group still alive
    :data:`EXIT_GRACE` seconds after a signal or after the status was written (a subject ignoring the signal, a
    non-daemon thread), and anything the subject left running once the child is gone, is killed.
    POSIX only (``os.fork``; elsewhere the command runs unsupervised).
    """
    import shutil
    import signal
    import tempfile
    import time

    folder = tempfile.mkdtemp(prefix="resispec-status-")
    status = os.path.join(folder, "status")
    begun = tempfile.mkdtemp(prefix="resispec-started-")   # apart: the child knows this path, never the status's
    said_sigint, tell_sigint = os.pipe()                  # written before a SIGINT is passed on: the user's Ctrl-C
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:                                          # the child: the command itself, in its own process group
        os.setpgid(0, 0)
        os.close(tell_sigint)
        from exactness._checks import sigint_source

        sigint_source(said_sigint)                        # a SIGINT the subject sends itself is then its own
        _STARTED["path"] = os.path.join(begun, "started")
        code = run()
        tmp = status + ".tmp"
        with open(tmp, "w") as fh:                        # the verdict, written once the run returned
            fh.write(f"{code}\n")
        os.replace(tmp, status)
        return code
    try:
        os.setpgid(pid, pid)                              # (also here: no race with the first signal)
    except OSError:
        pass
    os.close(said_sigint)
    received: list = []

    def forward(signum, _frame):
        received.append((signum, time.monotonic()))
        try:
            if signum == signal.SIGINT:
                os.write(tell_sigint, b"i")               # before the signal: the child reads it as the user's
        except OSError:
            pass
        _kill(pid, signum)

    # a signal the caller ignores (nohup: SIGHUP; a background job: SIGINT) stays ignored: it never stops the run
    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
           if signal.getsignal(sig) is not signal.SIG_IGN}
    # where the platform can say who sent a signal (sigtimedwait), one the run's own processes send here is the
    # subject's: a FAIL, never the user's Ctrl-C or CI's SIGTERM passed on; so are the other signals whose default
    # would end the supervisor and orphan the run (SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM), when not ignored
    extra = tuple(sig for sig in (signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)
                  if signal.getsignal(sig) is signal.SIG_DFL)
    waits = (tuple(old) + extra if hasattr(signal, "sigtimedwait") and hasattr(signal, "pthread_sigmask") else ())
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waits) if waits else None
    reported = started = overran = own = None
    try:
        while True:
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            now = time.monotonic()
            if reported is None and os.path.exists(status):
                reported = now
            if started is None and os.path.exists(os.path.join(begun, "started")):
                started = (now, _wall(os.path.join(begun, "started")))
            if (received and now - received[0][1] > EXIT_GRACE) or (reported and now - reported > EXIT_GRACE):
                _kill(pid)                                # ignoring the signal, or a thread that keeps it alive
            elif started and started[1] and not (received or reported) and now - started[0] > started[1]:
                overran = started[1]                      # past the run's own hard limit and as long again
                _kill(pid)
            try:
                info = signal.sigtimedwait(waits, 0.05) if waits else time.sleep(0.05)
            except InterruptedError:                     # a stop and continue (Ctrl-Z, fg)
                info = None
            if info is None or info.si_signo not in waits:  # (after a Ctrl-Z / fg CPython returns an empty one)
                continue
            if _in_group(info.si_pid, pid):
                own = own or (info.si_signo, info.si_pid)  # the subject signalled its supervisor: a FAIL
                _kill(pid)
            elif info.si_signo in old:
                forward(info.si_signo, None)
            else:                                         # SIGQUIT / SIGUSR1 ... from outside: passed on, and then
                received.append((info.si_signo, time.monotonic()))                   # its status as for the others
                _kill(pid, info.si_signo)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if waits:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _kill(pid)                                        # whatever the subject left running (a fork of its own)
        os.close(tell_sigint)
    try:
        with open(status) as fh:
            said = fh.read().strip()
    except OSError:
        said = ""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(begun, ignore_errors=True)
    if own:
        print(f"resispec {command}: FAIL: a process of the run (pid {own[1]}) sent {signal.Signals(own[0]).name} to "
              "the supervising resispec process: a subject that signals it is a FAIL, not the user's Ctrl-C",
              file=sys.stderr)
        return 1
    if received:                                          # stopped from outside (CI's SIGTERM, Ctrl-C)
        sig = received[0][0]
        if not said.isdigit():                            # else the child said so itself (Ctrl-C: "interrupted")
            print(f"resispec {command}: " + ("interrupted (Ctrl-C)" if sig == signal.SIGINT else
                                             f"terminated ({signal.Signals(sig).name})"), file=sys.stderr)
        return 128 + sig
    if said.isdigit():
        return int(said)
    if overran:
        print(f"resispec {command}: FAIL: the run was still going {overran:g} s after its timed run began, past the "
              "hard limit of its own time limit, and was killed: a subject that hangs where the run's alarm cannot "
              "stop it (one long C call, SIGALRM ignored, the alarm swallowed in a loop) is a FAIL", file=sys.stderr)
        return 1
    how = (f"was killed by signal {signal.Signals(os.WTERMSIG(wstatus)).name}" if os.WIFSIGNALED(wstatus) else
           f"exited with status {os.WEXITSTATUS(wstatus)} without returning (os._exit, or an error the harness "
           "could not catch)")
    print(f"resispec {command}: FAIL: the run {how} before its verdict: a subject (verifier, kernel, decoder or its "
          "module) that ends or crashes the process is a FAIL", file=sys.stderr)
    return 1


def _kill(pid: int, sig: int | None = None) -> None:
    """Send ``sig`` (default SIGKILL) to the run's process group ``pid`` and to the child itself (a child that
    moved to another group is still reached); a process already gone is no error."""
    import signal

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


def _wall(path: str) -> float | None:
    """Seconds after :func:`run_started` at which the supervisor kills the run: ``hard + max(EXIT_GRACE, hard)``
    for the ``hard`` written in ``path`` (None if it does not read as a positive number)."""
    try:
        with open(path) as fh:
            hard = float(fh.read())
    except (OSError, ValueError):
        return None
    return hard + max(EXIT_GRACE, hard) if hard > 0 and hard == hard else None


def _closed_stream() -> str | None:
    """``"standard output"`` / ``"standard error"`` when that stream (or its descriptor) is closed, else None."""
    for name, stream, fd in (("standard output", sys.stdout, 1), ("standard error", sys.stderr, 2)):
        try:
            if stream is None or stream.closed:
                return name
            os.fstat(fd)
        except (OSError, ValueError):
            return name
    return None


def _say(line: str) -> None:
    """``line`` on standard error, or on descriptor 2 itself when the stream object was closed (best effort)."""
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):
        try:
            os.write(2, (line + "\n").encode())
        except OSError:
            pass


def _run(parser, args) -> int:
    """The parsed command run, its exceptions turned into exit statuses (the CLI's contract, docs/certify.md)."""
    from exactness._checks import SubjectError
    from exactness._timeout import TimeLimitExceeded

    try:
        return int(args._run(args) or 0)
    except SubjectError as exc:   # the subject (verifier, kernel, decoder, engine) misbehaved: a FAIL, not bad input
        print(f"resispec {args.command}: FAIL: {exc.cause}", file=sys.stderr)
        return 1
    except TimeLimitExceeded as exc:   # a subject that never returned (time limits are FAILs, docs/certify.md#exit-codes)
        print(f"resispec {args.command}: FAIL: the subject did not return ({exc}); raise --time-limit if it is "
              "merely slow", file=sys.stderr)
        return 1
    except (ValueError, TypeError, OSError) as exc:  # OSError: unwritable --out, missing input file, ...
        closed = _closed_stream()
        if closed and getattr(args, "_supervised", False):   # a subject closed it: not the caller's input
            _say(f"resispec {args.command}: FAIL: {closed} was closed during the run, so the verdict could not be "
                 f"written ({type(exc).__name__}: {exc}); a subject that closes the process's output is a FAIL")
            return 1
        print(f"resispec {args.command}: error: {_name_the_flag(parser, args, str(exc))}", file=sys.stderr)
        return 2
    except MemoryError as exc:    # sizes past this machine's memory (a subject's own is a FAIL, inside the harness)
        print(f"resispec {args.command}: error: not enough memory for the sizes asked ({exc}); give smaller sizes "
              "(--V, --B, --nodes, --n, --shapes)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:     # Ctrl-C: one line, not a traceback
        from exactness._checks import passes_through

        if not passes_through(exc):      # watched, and no SIGINT of the user's came: the subject's own
            print(f"resispec {args.command}: FAIL: the run was interrupted by a KeyboardInterrupt that no Ctrl-C "
                  "(SIGINT from outside) caused: a subject that interrupts its own process is a FAIL", file=sys.stderr)
            return 1
        print(f"resispec {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
