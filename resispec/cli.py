"""``resispec`` command line.  Each subcommand lives in ``resispec/commands/<name>.py``
and defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``;
they are discovered automatically, so adding one touches one file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import commands as _commands


def _discover():
    mods = []
    for info in pkgutil.iter_modules(_commands.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{_commands.__name__}.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return sorted(mods, key=lambda m: m.NAME)


def build_parser() -> argparse.ArgumentParser:
    """The ``resispec`` argument parser with every discovered subcommand."""
    from . import __version__

    parser = argparse.ArgumentParser(prog="resispec", description="Exact multi-candidate speculative sampling.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=f"resispec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _discover():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=getattr(mod, "__doc__", None) or mod.HELP,
                           formatter_class=argparse.RawDescriptionHelpFormatter,
                           allow_abbrev=False)   # --n is not --nodes, --temperature not --temperatures
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 with a one-line error for bad input)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage error (2) or --help / --version (0), already printed
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    args._program = argv is None            # run as a program (not main([...]) in a test): the audit may supervise
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
        print(f"resispec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:     # Ctrl-C: one line, not a traceback
        print(f"resispec {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
