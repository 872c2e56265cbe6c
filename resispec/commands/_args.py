"""Option parsers shared by the commands.

* ``floats`` / ``ints`` / ``strs``: one comma-separated string -> list (``type=`` functions).
* ``ListAction``: an argparse action for list options that accepts both forms,
  ``--k 2,4``, ``--k 2 --k 4`` and mixes (``--k 2,4 --k 8`` -> ``[2, 4, 8]``).
* ``count``: an integer count that may be written in scientific notation (``1e6``).
* ``folder_and_stem``: ``--out`` as a folder or a Markdown path, for commands writing several files.
* ``check_out``: an output path (or folder and its files) checked before any work.
"""

from __future__ import annotations

import argparse
from decimal import Decimal, InvalidOperation
from typing import Callable


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def strs(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def folder_and_stem(out, default_stem: str) -> tuple:
    """``--out`` of a command writing several files (a report, its JSON, figures): a Markdown path
    (``reports/drift_zipf_k4.md``: the folder and stem of the files) or a folder (``reports``: the files are
    ``default_stem.*`` inside it).  Returns ``(folder, stem: str)``: the folder as given when ``out`` is one
    (an empty ``out`` stays empty, for :func:`check_out` to refuse)."""
    from pathlib import Path

    path = Path(out) if out else None
    if path is not None and path.name.lower().endswith(".md"):        # x.md, x.MD; '.md' alone names no file
        if path.name[:-3] in ("", "."):
            raise ValueError(f"--out {str(out)!r} names no file before .md; give FOLDER/NAME.md or a folder")
        return path.parent, path.name[:-3]
    return out, default_stem


def out_path(text: str):
    """``--out``: a non-empty path (an empty one would mean the current folder), as ``pathlib.Path``."""
    from pathlib import Path

    if not text.strip():
        raise argparse.ArgumentTypeError("needs a file path such as certify-out/report.md, got an empty one")
    return Path(text)


def typed_command(args, fallback: str) -> str:
    """The command line a report quotes: as typed when run as the ``resispec`` program (``args._program``, set by
    :func:`resispec.cli.main`), else ``fallback`` (a call such as ``main([...])`` in a test has no command line)."""
    import shlex
    import sys

    return "resispec " + shlex.join(sys.argv[1:]) if getattr(args, "_program", False) else fallback


def seconds(text: str) -> float:
    """A number of seconds for a time limit (0: none): ``float(text)``, refusing a nonzero number written so small
    that it reads as 0 (``1e-400`` would silently mean "no limit")."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value == 0 and any(ch in "123456789" for ch in text.lower().split("e")[0]):
        raise argparse.ArgumentTypeError(f"{text!r} is below the smallest float and would read as 0 (no limit); "
                                         "give 0 for no limit or a number of seconds >= 1")
    return value


#: Smallest --alpha the CLI takes: below it float64 round-off decides (1 - alpha is 1.0 under 1.1e-16, and Holm's
#: alpha / m of many checks underflows), so a verdict could rest on rounding, not on the draws.
MIN_ALPHA = 1e-12


def alpha(value: float, flag: str = "--alpha") -> float:
    """A ``--alpha`` as every ``certify`` subject takes it: a level in ``[MIN_ALPHA, 1)``; ValueError naming ``flag``."""
    if not MIN_ALPHA <= value < 1:                    # also refuses NaN
        raise ValueError(f"{flag} must lie in (0, 1) and be at least {MIN_ALPHA:g} (float64 round-off decides below "
                         f"it), e.g. 1e-3; got {value}")
    return value


def time_limit(value, flag: str = "--time-limit") -> float | None:
    """A ``--time-limit`` as every ``certify`` subject takes it: ``0`` -> None (no limit), else seconds in
    ``[exactness.limits.MIN_CELL_TIMEOUT, MAX_TIMEOUT / 2]`` = [1, 5e6] (a float: the hang alarm, up to twice the
    limit, stays within ``exactness._timeout.MAX_TIMEOUT``); ValueError naming ``flag`` otherwise."""
    from exactness._timeout import MAX_TIMEOUT
    from exactness.limits import MIN_CELL_TIMEOUT

    if value is None or value == 0:
        return None
    if not MIN_CELL_TIMEOUT <= value <= MAX_TIMEOUT / 2:     # also refuses NaN
        why = (" (a shorter limit stops the run before its first draws and would FAIL an exact subject as a hang: "
               "the limit is yours, not the subject's)" if 0 < value < MIN_CELL_TIMEOUT else "")
        raise ValueError(f"{flag} must be 0 (no limit) or a number of seconds in [{MIN_CELL_TIMEOUT:g}, "
                         f"{MAX_TIMEOUT / 2:.0e}], got {value}{why}".replace("e+0", "e"))
    return float(value)


def seed_int(text: str) -> int:
    """``--seed`` of a command that takes one integer: ``3`` -> 3; anything else (a negative, a sequence, text) is
    refused naming the flag."""
    try:
        val = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed takes an integer >= 0, got {text!r}") from None
    if val < 0:
        raise argparse.ArgumentTypeError(f"--seed must be >= 0, got {text!r}")
    return val


def seed(text: str):
    """``--seed``: ``3`` -> 3, or a sequence ``0,3`` -> [0, 3] (``numpy.random.SeedSequence([0, 3])``, the way
    to give run 3 of a study its own stream); every entry an integer >= 0."""
    parts = [x.strip() for x in text.split(",")]
    try:
        vals = [int(x) for x in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed takes an integer >= 0 or a comma-separated sequence of them "
                                         f"such as 0,3; got {text!r}") from None
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"--seed must be >= 0 (every entry of a sequence), got {text!r}")
    return vals[0] if len(vals) == 1 else vals


def check_out(path, flag: str, *, folder: bool = False, files=(), json_beside: bool = False):
    """Check an output path before any work starts; create nothing.

    A thin wrapper of :func:`resispec._io.check_output_path` for the commands
    that write several files.

    Parameters
    ----------
    path : str or os.PathLike
        The value of ``flag``: a file path (``folder=False``) or an output
        folder (``folder=True``; missing folders are created later by the
        writer, so only the nearest existing ancestor must be a writable folder).
    flag : str
        The option name, e.g. ``"--out"``, quoted in the error.
    files : sequence of str
        With ``folder=True``: the file names the command will write inside it.
    json_beside : bool
        With ``folder=False``: the command also writes the JSON beside the file
        (same stem, ``.json``; :func:`resispec._io.write_markdown_and_json`).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        Empty path; a file path that is a directory (or a folder path that is a
        file); a target file that exists but is not writable; a nearest existing
        ancestor that is a file or not a writable folder.  The message names
        ``flag`` and says what to give instead.
    """
    import os
    from pathlib import Path

    from .._io import check_output_path

    if path is None or str(path) == "":
        raise ValueError(f"{flag} must be a non-empty path")
    p = Path(path)
    if folder:
        if p.exists() and not p.is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a file, not a folder; give an output folder")
        targets = [p / f for f in files] or [p / "report.md"]
    else:
        if p.is_dir() or str(path).endswith(("/", os.sep)):   # a trailing '/' names a folder (Path drops it)
            raise ValueError(f"{flag} {str(path)!r} is a directory; give a file path such as "
                             f"{str(p / 'report.md')!r}")
        stem, ext = os.path.splitext(str(p))
        if json_beside and ext.lower() == ".json":           # the JSON beside it would overwrite the report
            raise ValueError(f"{flag} {str(path)!r} names the Markdown report and the JSON goes beside it with the "
                             f"suffix .json, so both would be {p.name}; give a .md path (e.g. {stem + '.md'!r})")
        targets = [p] + ([Path((stem if ext else str(p)) + ".json")] if json_beside else [])
    for t in targets:
        check_output_path(t, f"{flag} {str(path)!r}:" if t != p else flag)
    return p


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors name an option once, as the user typed it: argparse says ``argument
    --trees/--shapes: ...``, listing every spelling that parses; this says ``argument --shapes: ...`` when the
    command line says ``--shapes``, else ``argument --trees: ...``."""

    _typed: tuple = ()

    def parse_known_args(self, args=None, namespace=None):
        import sys

        self._typed = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        import re

        def one(m):
            names = m.group(1).split("/")
            typed = [n for n in names if any(a == n or a.startswith(n + "=") for a in self._typed)]
            return f"argument {(typed or names)[0]}:"

        message = re.sub(r"^argument (--[\w-]+(?:/-{1,2}[\w-]+)+):", one, message)
        if message.startswith("unrecognized arguments: "):
            message += self._did_you_mean(message.split(": ", 1)[1].split())
        super().error(message)

    def _did_you_mean(self, unknown: list) -> str:
        """``"; did you mean --tree?"`` for the first unknown option close to one this parser (its kind) takes."""
        import difflib

        actions = self.kind_actions() if hasattr(self, "kind_actions") else self._actions
        names = [o for a in actions for o in a.option_strings[:1] if o.startswith("--") and o != "--help"]
        for word in unknown:
            word = word.split("=", 1)[0]
            starts = sorted((n for n in names if n.startswith(word)), key=len)   # --temp: --temperature, not --tree
            close = starts[:1] or difflib.get_close_matches(word, names, n=1, cutoff=0.6)
            if word.startswith("--") and close:
                return f"; did you mean {close[0]}? ({self.prog} --help lists the options)"
        return ""


class ListAction(argparse.Action):
    """Collect a list option given comma-separated, space-separated, repeated, or any mix.

    Usage::

        parser.add_argument("--k", action=ListAction, item_type=int, metavar="K")
        parser.add_argument("--trees", action=ListAction, sep=None)   # items contain commas

    ``--k 2,4``, ``--k 2 4``, ``--k 2 --k 4`` and ``--k 2,4 --k 8`` all give
    ``[2, 4, ...]``.  Each value of an occurrence is split on ``sep`` (default
    ``","``; ``None`` keeps each value whole, for items such as tree shapes
    ``4,2,1`` that contain commas), blank items are dropped, and every item is
    converted by ``item_type`` (default ``str``, items stripped) and appended,
    in order, to ``namespace.<dest>``.  The first occurrence replaces the
    option's ``default`` (a default list is never mutated or extended); later
    occurrences extend.  An item that ``item_type`` rejects
    (``ValueError``/``TypeError``/``argparse.ArgumentTypeError``) or not in
    ``choices`` (when given; checked per item), or an occurrence with no item
    at all, is an argparse error (usage + exit status 2) naming the option
    and the item; so is an item given twice (``--families zipf zipf``: its rows would be run and counted
    twice in the report's means), unless ``unique=False``.  Do not pass ``type=`` (it would convert the whole string):
    pass ``item_type=``.  For values that contain commas AND spaces-as-items
    are unwanted (e.g. ``name[a=1,b=2]`` specs), use ``action="append"``.
    """

    def __init__(self, option_strings, dest, item_type: Callable = str, choices=None, sep: str | None = ",",
                 unique: bool = True, **kwargs):
        if kwargs.get("type") is not None:
            raise ValueError("ListAction: pass item_type= (applied per comma-separated item), not type=")
        if kwargs.get("nargs") not in (None, "+"):
            raise ValueError("ListAction takes one or more values per occurrence (nargs='+'); do not set nargs")
        kwargs["nargs"] = "+"
        super().__init__(option_strings, dest, **kwargs)
        self.item_type = item_type
        self.item_choices = None if choices is None else list(choices)
        self.sep, self.unique = sep, unique

    def __call__(self, parser, namespace, values, option_string=None):
        name = option_string or self.dest
        items = []
        values = [values] if isinstance(values, str) else list(values)
        pieces = [part for v in values for part in (str(v).split(self.sep) if self.sep else [str(v)])]
        for raw in pieces:
            raw = raw.strip()
            if not raw:
                continue
            try:
                item = self.item_type(raw)
            except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
                kind = getattr(self.item_type, "__name__", "value")
                detail = f": {exc}" if isinstance(exc, argparse.ArgumentTypeError) else ""
                raise argparse.ArgumentError(self, f"invalid {kind} item {raw!r}{detail}") from exc
            if self.item_choices is not None and item not in self.item_choices:
                raise argparse.ArgumentError(self, f"invalid choice {raw!r} (choose from "
                                                   f"{', '.join(map(str, self.item_choices))})")
            items.append(item)
        if not items:
            raise argparse.ArgumentError(self, f"expected at least one value, e.g. {name} A,B or {name} A B or {name} A {name} B")
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        seen = list(current)
        for item, raw in zip(items, [p.strip() for p in pieces if p.strip()]):
            if self.unique and item in seen:      # a bench row or a certificate cell would be run and counted twice
                raise argparse.ArgumentError(self, f"lists {raw!r} twice; give each item once")
            seen.append(item)
        setattr(namespace, self.dest, seen)


class Switch(argparse.Action):
    """An option with an optional value and old spellings that each stand for one value: ``--mutants`` (its
    ``bare`` value), ``--mutants 3`` (the value, through ``type``), ``--no-mutants`` (``spellings["--no-mutants"]``,
    which takes no value).  One option, so one name in ``--help`` and in the option grammar; the old spellings
    parse because committed reports quote them."""

    #: what argparse hands ``__call__`` for an occurrence without a value (never a value the user could type)
    BARE = object()

    def __init__(self, option_strings, dest, spellings: dict | None = None, bare=None, **kwargs):
        kwargs.setdefault("nargs", "?")
        super().__init__(option_strings, dest, const=self.BARE, **kwargs)
        self.spellings, self.bare = dict(spellings or {}), bare

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string in self.spellings:
            if values is not self.BARE:
                raise argparse.ArgumentError(self, f"{option_string} takes no value (got {values!r}); give "
                                                   f"{self.option_strings[0]} N instead")
            values = self.spellings[option_string]
        elif values is self.BARE:
            values = self.bare
        setattr(namespace, self.dest, values)


class JoinAction(argparse.Action):
    """A ';'-separated option given again adds its rows: ``--prompt-ids '0,1' --prompt-ids '2,3'`` -> ``'0,1;2,3'``
    (argparse would keep only the last, while the report's command line shows both)."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if current in (None, self.default) else f"{current};{values}")


def count(text: str) -> int:
    """An integer count, in plain or scientific notation: ``"200000"``, ``"200_000"``, ``"1e6"`` -> int.

    For argparse ``type=``.  Exact (no float rounding: ``"1e18"`` ->
    ``10**18``).  Raises ``argparse.ArgumentTypeError`` for a value that is
    not a whole number (``"1.5"``, ``"1e-3"``, ``"nan"``, ``"inf"``, ``"x"``).  A count below 1 is refused
    after parsing by :func:`resispec.cli.main`, in one line naming the flag; upper limits are the command's.
    """
    s = str(text).strip().replace("_", "")
    try:
        d = Decimal(s)
    except InvalidOperation:
        d = None
    if d is None or not d.is_finite() or d != d.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a whole number such as 200000 or 1e6, got {text!r}")
    return int(d)


#: ``--dtype``'s values, one option for the verbs and commands that take it: what each takes (:func:`allowed`)
DTYPES = ("auto", "float64", "float32", "bfloat16", "float16")


def allowed(value, choices, flag: str, kind: str):
    """``value`` if this kind takes it (a shared option's value another kind uses), else ValueError naming both."""
    if value not in choices:
        raise ValueError(f"{flag} {value} is not taken by {kind}; choose one of {', '.join(map(str, choices))}")
    return value


def load_node(args, *, default_V: int):
    """``(p, q)`` of a command's node: the arrays ``p``, ``q`` of ``--pq FILE.npz``, or a random Dirichlet pair
    of ``--V`` tokens (``--concentration``, drawn from ``default_rng(--seed)``).  ValueError naming the flag."""
    import numpy as np

    if args.pq is not None and not str(args.pq).strip():
        raise ValueError("--pq names no file; give an .npz with arrays 'p' and 'q', or leave --pq out for a random "
                         "pair of --V tokens")
    if args.pq and args.V is not None:
        raise ValueError("--V conflicts with --pq: the vocabulary is that of the arrays in --pq; drop --V")
    if args.pq:
        try:
            with np.load(args.pq) as z:
                return z["p"], z["q"]
        except Exception as exc:          # missing, empty (EOFError), truncated, not a zip, no 'p' / 'q', pickled
            raise ValueError(f"--pq {args.pq!r}: need an .npz with arrays 'p' and 'q' ({type(exc).__name__}: "
                             f"{exc})") from exc
    V = default_V if args.V is None else args.V
    if V < 2 or not args.concentration > 0:
        raise ValueError("--V must be >= 2 and --concentration > 0")
    rng = np.random.default_rng(args.seed)
    return rng.dirichlet(np.full(V, args.concentration)), rng.dirichlet(np.full(V, args.concentration))


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every command's ``--help``: an option under its primary name only (the legacy aliases a committed report
    quotes still parse, and are not taught), a metavar for what it takes (``N`` a count, ``X`` a number, ``K`` a
    candidate count; else the dest), and its default when the help text does not state one."""

    def _format_action_invocation(self, action):
        if not action.option_strings:
            return super()._format_action_invocation(action)
        longs = [o for o in action.option_strings if o.startswith("--")]
        names = ", ".join([o for o in action.option_strings if not o.startswith("--")] + longs[:1])
        if action.nargs == 0:
            return names
        return f"{names} {self._format_args(action, self._get_default_metavar_for_optional(action))}"

    def _get_default_metavar_for_optional(self, action):
        item = getattr(action, "item_type", None)
        if action.dest.endswith("k") and int in (action.type, item):
            return "K"
        if action.type in (int, count, seed_int) or item is int:
            return "N"
        if action.type is float or item is float:
            return "X"
        return super()._get_default_metavar_for_optional(action)

    @staticmethod
    def _shown(default, sep: str | None = ",") -> str:
        if isinstance(default, (list, tuple)):      # items that hold commas (tree shapes) apart by spaces
            return (sep or " ").join(HelpFormatter._shown(v) for v in default)
        return f"{default:g}" if isinstance(default, float) else str(default)

    @staticmethod
    def _has_default(action) -> bool:
        d = action.default
        return not (d is None or d is False or d is argparse.SUPPRESS or action.nargs == 0
                    or not action.option_strings or isinstance(d, (list, tuple)) and not d)

    def _format_action(self, action):
        if action.option_strings and not (action.help and action.help.strip()) and self._has_default(action):
            saved, action.help = action.help, "\0"        # no help text: its default is still worth a line
            try:
                return super()._format_action(action)
            finally:
                action.help = saved
        return super()._format_action(action)

    def _get_help_string(self, action):
        text = "" if action.help == "\0" else action.help or ""
        shown = self._shown(action.default, getattr(action, "sep", ",")).replace("%", "%%")
        if "%(default)s" in text:                           # a list default read as 2,4,8, not [2, 4, 8]
            return text.replace("%(default)s", shown)
        if "default" in text.lower() or not self._has_default(action):
            return text
        return (text + " " if text else "") + f"(default {shown})"
