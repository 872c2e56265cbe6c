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
from .commands._supervisor import _supervised


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


def build_parser() -> argparse.ArgumentParser:
    """The ``resispec`` argument parser: one subcommand per plain command, and for a verb with kinds ONE parser
    holding all its kinds' options (:class:`resispec.commands._verb.VerbParser`; ``select`` a kind before parsing,
    ``finish`` the parsed namespace: :func:`main` does both)."""
    from . import __version__
    from .commands._args import HelpFormatter, Parser
    from .commands._verb import VerbParser

    parser = argparse.ArgumentParser(prog="resispec", description="Exact multi-candidate speculative sampling.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"resispec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    mods = _discover()
    table = verbs(mods)
    by_name = {m.NAME: m for m in mods}
    kinds = {name for ks in table.values() for name in ks.values() if name not in table}
    for mod in mods:
        if mod.NAME in kinds:                               # a kind: parsed by its verb's parser
            continue
        common = dict(description=getattr(mod, "__doc__", None) or mod.HELP, allow_abbrev=False,
                      formatter_class=HelpFormatter)                        # --n is not --nodes
        if mod.NAME in table:
            ks = table[mod.NAME]
            epilog = "subjects (resispec %s KIND ...; each has its own --help):\n" % mod.NAME + "\n".join(
                f"  {kind:10s} {by_name[name].HELP}" + (" (the default)" if name == mod.NAME else "")
                for kind, name in ks.items())
            sub._parser_class = VerbParser
            try:
                sub.add_parser(mod.NAME, help=f"{getattr(mod, 'VERB_HELP', mod.HELP)} [subjects: {', '.join(ks)}]",
                               epilog=epilog,
                               kinds={kind: by_name[name] for kind, name in ks.items()}, **common)
            finally:
                sub._parser_class = Parser
            continue
        p = sub.add_parser(mod.NAME, help=mod.HELP, **common)
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
    sub = _subparser(parser, args)
    kind = getattr(args, "_kind", None)
    for action in (sub.kind_actions(kind) if kind and hasattr(sub, "kind_actions") else sub._actions):
        if not action.option_strings or action.dest == "help":
            continue
        names = (action.dest, action.dest[:-1]) if action.nargs == "+" and action.dest.endswith("s") else (action.dest,)
        for name in names:                       # a list's entries may be refused one at a time: "temperature must"
            for tail in (" must ", " entries must ", " ="):
                if msg.startswith(name + tail):
                    return action.option_strings[0] + msg[len(name):]
    return msg


def _below_one(parser, args) -> str | None:
    """The first count option (``type=count``: ``--n``, ``--stop-after``, ...) given below 1, as a message."""
    from .commands._args import count

    for action in _subparser(parser, args)._actions:
        value = getattr(args, action.dest, None)
        if action.type is count and isinstance(value, int) and value < 1:
            return f"{action.option_strings[0]} must be a whole number >= 1 (a count), got {value}"
    return None


def split_verb(argv: list[str], table: dict | None = None) -> tuple[str | None, str | None, str | None, list[str]]:
    """``(verb, kind, as typed, rest)`` of a command line: ``["certify", "decoder", ...]`` -> ``("certify",
    "decoder", "certify decoder", [...])``; ``["certify", "--n", "5"]`` -> the verb's default kind, typed
    ``"certify"``; the hyphenated ``["certify-decoder", ...]`` (committed reports quote it) likewise; anything
    else ``(None, None, None, argv)``.  ValueError for a subject the verb does not have."""
    table = verbs() if table is None else table
    if argv and argv[0] in table:
        kinds = table[argv[0]]
        if len(argv) >= 2 and not argv[1].startswith("-"):
            if argv[1] not in kinds:
                raise ValueError(f"unknown subject {argv[1]!r}; choose one of {', '.join(kinds)} "
                                 f"(resispec {argv[0]} --help)")
            return argv[0], argv[1], f"{argv[0]} {argv[1]}", argv[2:]
        return argv[0], next(iter(kinds)), argv[0], argv[1:]
    for verb, kinds in table.items():
        for kind, name in kinds.items():
            if argv and argv[0] == name:
                return verb, kind, name, argv[1:]
    if argv and argv[0] in aliases():
        verb, kind = aliases()[argv[0]]
        return verb, kind, argv[0], argv[1:]
    return None, None, None, list(argv)


def aliases() -> dict[str, tuple[str, str]]:
    """``{old name: (verb, kind)}``: a kind's ``ALIASES`` (``resispec drift`` = ``resispec bench drift``; kept
    because committed reports quote the old name; not listed by ``--help``)."""
    table = verbs()
    out = {}
    for verb, kinds in table.items():
        for kind, name in kinds.items():
            mod = next(m for m in _discover() if m.NAME == name)
            out.update({alias: (verb, kind) for alias in getattr(mod, "ALIASES", ())})
    return out


def parse(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """``(parser, args)`` of a command line, a verb's kind selected and finished (its defaults filled, another
    kind's option refused); ``args.command`` is the command as typed (``"certify decoder"``).  Raises ValueError
    for a verb's unknown subject and SystemExit as argparse does (usage errors: 2, ``--help``: 0)."""
    verb, kind, typed, rest = split_verb(argv)
    parser = build_parser()
    if verb:
        vp = parser._subparsers._group_actions[0].choices[verb]
        vp.select(kind, f"resispec {typed}")
    args, extra = parser.parse_known_args([verb, *rest] if verb else argv)
    if extra:                                 # named by the command typed, not by the bare "resispec"
        (vp if verb else _subparser(parser, args) if getattr(args, "_name", None) else parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    if verb:
        vp.finish(args)
        args.command = typed
    return parser, args


#: what a size past the memory says (numpy's ValueErrors for sizes past any memory are the same case)
_TOO_BIG = "not enough memory for the sizes asked ({exc}); give smaller sizes (--V, --B, --nodes, --n, --trees)"
_NUMPY_TOO_BIG = ("Maximum allowed dimension exceeded",
                  "array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum possible size.")


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
    try:
        parser, args = parse(argv)
    except ValueError as exc:                 # an unknown subject of a verb
        print(f"resispec {argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: usage error (2) or --help / --version (0), already printed
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
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
        if str(exc) in _NUMPY_TOO_BIG:    # numpy: a size past any memory, as a MemoryError below
            print(f"resispec {args.command}: error: {_TOO_BIG.format(exc=f'numpy: {exc}')}", file=sys.stderr)
            return 2
        print(f"resispec {args.command}: error: {_name_the_flag(parser, args, str(exc))}", file=sys.stderr)
        return 2
    except MemoryError as exc:    # sizes past this machine's memory (a subject's own is a FAIL, inside the harness)
        print(f"resispec {args.command}: error: {_TOO_BIG.format(exc=exc)}", file=sys.stderr)
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
