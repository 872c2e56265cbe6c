"""One parser per verb: ``resispec certify KIND`` and ``resispec bench KIND`` share one option set (issue 39).

A verb's kinds (its subjects: ``certify verifiers | coupled | decoder | stepwise``) each declare their options in
their own module (``add_arguments(parser)``), as any command does; :class:`VerbParser` collects them into ONE parser
in which a name is defined once, with one meaning: a second kind declaring ``--seed`` gets the same option, and a
declaration that differs in what the option takes (its dest, action, type, choices, nargs or item type) is refused
when the parser is built (``tests/test_cli_grammar.py`` builds it).  What stays per kind: its default for an option,
its help text for it, whether it is required, whether it takes ONE value of a shared list option (``one=True``:
``certify coupled``'s ``--k``; several are refused, the one value is handed to its ``run`` unwrapped and its usage
shows ``--k K``), and which options it takes at all.

Parsing with the kind chosen (:meth:`VerbParser.select`): an option of another kind is refused in one line naming
the kinds it belongs to (exit 2); the kind's defaults fill what was not given; ``--help`` shows the kind's options
only, with its own help texts.
"""

from __future__ import annotations

import argparse

from ._args import Parser


class VerbParser(Parser):
    """The parser of a verb with kinds.  ``kinds``: ``{kind: command module}`` (the default kind first)."""

    def __init__(self, *args, kinds: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.kinds = dict(kinds)
        self.default_kind = next(iter(self.kinds))
        self.kind = self.default_kind
        self.owners: dict[str, list[str]] = {}                  # dest -> the kinds that take it
        self.kind_defaults: dict[str, dict] = {k: {} for k in self.kinds}
        self.kind_helps: dict[str, dict] = {k: {} for k in self.kinds}
        self.kind_required: dict[str, set] = {k: set() for k in self.kinds}
        self.kind_one: dict[str, set] = {k: set() for k in self.kinds}      # list options a kind takes once
        self.base_prog = self.prog
        self.verb_description, self.verb_epilog = self.description, self.epilog
        for kind, mod in self.kinds.items():
            mod.add_arguments(_Declare(self, kind, self))

    # ---------------------------------------------------------------------------------------------- the kind
    def select(self, kind: str, prog: str | None = None) -> None:
        """Parse (and show help) as the verb's ``kind``; ``prog``: the program name its messages and usage show
        (the command as the user typed it, ``"resispec certify decoder"``; default ``"resispec VERB KIND"``)."""
        self.kind = kind
        mod = self.kinds[kind]
        self.prog = prog or f"{self.base_prog} {kind}"
        if kind != self.default_kind:
            self.description, self.epilog = mod.__doc__ or mod.HELP, None
        else:
            self.description, self.epilog = self.verb_description, self.verb_epilog

    def finish(self, args: argparse.Namespace) -> argparse.Namespace:
        """The parsed ``args`` of the selected kind: another kind's option refused, the kind's defaults filled,
        its required options checked (``self.error``: one line, exit 2); ``_run`` / ``_supervised`` set."""
        kind, mod = self.kind, self.kinds[self.kind]
        for dest, kinds in self.owners.items():
            if hasattr(args, dest) and kind not in kinds:
                flag = self._flag(dest)
                self.error(f"{flag} is not an option of `{self.base_prog.split(' ', 1)[1]} {kind}`: it belongs to "
                           f"{', '.join(kinds)} ({self.base_prog} {kind} --help lists this kind's options)")
        missing = [self._flag(d) for d in self.kind_required[kind] if not hasattr(args, d)]
        if missing:
            self.error(f"the following arguments are required: {', '.join(missing)}")
        for dest, default in self.kind_defaults[kind].items():
            if not hasattr(args, dest):
                setattr(args, dest, default)
        for dest in self.kind_one[kind]:                 # a shared list option this kind takes one value of
            value = getattr(args, dest, None)
            if isinstance(value, list):
                if len(value) != 1:
                    self.error(f"{self._flag(dest)} takes one value for {self.base_prog.split(' ', 1)[1]} {kind}, got "
                               f"{len(value)} values ({', '.join(map(str, value))}); run it once per value")
                setattr(args, dest, value[0])
        args._run, args._name, args._kind = mod.run, self.base_prog.split(" ", 1)[1], kind
        args._supervised = getattr(mod, "SUPERVISED", False)
        return args

    def _flag(self, dest: str) -> str:
        return next(a.option_strings[0] for a in self._actions if a.dest == dest and a.option_strings)

    def kind_actions(self, kind: str | None = None) -> list:
        """The option actions ``kind`` (default: the selected one) takes."""
        kind = kind or self.kind
        return [a for a in self._actions if a.option_strings and (a.dest == "help" or kind in self.owners.get(a.dest, ()))]

    # ---------------------------------------------------------------------------------------------- help
    def format_help(self) -> str:
        return self._as_kind(super().format_help)

    def format_usage(self) -> str:
        return self._as_kind(super().format_usage)

    def _as_kind(self, render) -> str:
        """``render()`` with the selected kind's options only, each with that kind's help text and default."""
        saved = [(a, a.help, a.default, a.required, a.nargs) for a in self._actions]
        for a in self._actions:                          # the kind's required options shown without brackets, its
            a.required = a.option_strings != [] and a.dest in self.kind_required[self.kind]
            if a.option_strings and a.dest in self.kind_one[self.kind]:
                a.nargs = None                           # one-value list options as one value (--k K)
        usage = self._get_formatter()
        usage.add_usage(None, self.kind_actions(), [])   # the kind's options (argparse's own usage of a shared
        self.usage = usage.format_help().strip().removeprefix("usage: ")    # exclusive group would assert)
        try:
            for a in self._actions:
                if a.option_strings and a.dest != "help":
                    a.help = self.kind_helps[self.kind].get(a.option_strings[0], argparse.SUPPRESS)
                    a.default = self.kind_defaults[self.kind].get(a.dest)     # its "%(default)s"
            return render()
        finally:
            for a, h, d, r, n in saved:
                a.help, a.default, a.required, a.nargs = h, d, r, n
            self.usage = None


def parse_kind(mod, argv: list) -> argparse.Namespace:
    """``argv`` parsed by the options of one kind's module alone (``mod.add_arguments``), with its defaults filled and
    its one-value options unwrapped, as :class:`VerbParser` hands them to ``run``; ``SystemExit`` / ``ValueError``
    for what does not parse (a stored command read back, ``--resume``)."""
    parser = _one_kind(mod)
    args = parser.finish(parser.parse_args(argv))
    return argparse.Namespace(**{k: v for k, v in vars(args).items() if not k.startswith("_")})


def _one_kind(mod) -> VerbParser:
    return VerbParser(prog=f"resispec {mod.NAME}", kinds={mod.NAME: mod}, add_help=False)


def given_options(mod, args: argparse.Namespace, keep=()) -> list:
    """The options of ``mod`` (one kind) that ``args`` holds at other than their defaults, by their names (an
    option whose dest is in ``keep`` left out): what a mode that reads saved results instead (``--from-json``) would
    otherwise ignore."""
    defaults = vars(parse_kind(mod, []))
    flag = _one_kind(mod)._flag
    return [flag(dest) for dest, value in defaults.items() if dest not in keep and getattr(args, dest, value) != value]


class _Declare:
    """What a kind's ``add_arguments`` is handed: adds to the verb's one option set (or checks that the option it
    declares again is the same option), recording the kind's default, help and required options."""

    #: what must agree between two kinds declaring the same option
    SAME = ("dest", "nargs", "const", "type", "choices", "metavar")

    def __init__(self, verb: VerbParser, kind: str, container):
        self.verb, self.kind, self.container = verb, kind, container

    def add_argument(self, *flags, **kwargs):
        verb = self.verb
        spec = verb._get_optional_kwargs(*flags, **kwargs)
        dest = spec["dest"]
        given_default = "default" in kwargs
        default = kwargs.pop("default", None)
        required = kwargs.pop("required", False)
        takes_one = kwargs.pop("one", False)              # a list option shared by the verb that this kind takes once
        help_text = kwargs.get("help")
        probe = argparse.ArgumentParser(add_help=False).add_argument(*flags, **kwargs)
        if not given_default:
            default = probe.default                     # argparse's own: False for store_true, True for store_false
        existing = next((a for a in verb._actions if set(a.option_strings) & set(flags)), None)
        if existing is None:
            clash = [f for f in flags if f in verb._option_string_actions]
            if clash:
                raise ValueError(f"{verb.base_prog} {self.kind}: {clash[0]} is already an option of this verb "
                                 f"under another name; declare it with the same dest")
            kwargs["help"] = help_text
            action = self.container.add_argument(*flags, default=argparse.SUPPRESS, **kwargs)
            verb.owners.setdefault(dest, [])
        else:
            action = existing
            if isinstance(self.container, argparse._MutuallyExclusiveGroup):
                raise ValueError(f"{verb.base_prog} {self.kind}: {flags[0]} is shared with {', '.join(verb.owners[dest])}"
                                 " and cannot join this kind's exclusive group; check the exclusion in its run")
            diff = [f for f in self.SAME if getattr(probe, f, None) != getattr(existing, f, None)]
            diff += ["action"] if type(probe) is not type(existing) else []
            diff += [f for f in ("item_type", "sep", "unique") if getattr(probe, f, None) != getattr(existing, f, None)]
            if set(flags) != set(existing.option_strings):
                diff.append(f"names ({', '.join(flags)} vs {', '.join(existing.option_strings)})")
            if diff:
                raise ValueError(f"{verb.base_prog} {self.kind}: {flags[0]} differs from the option of the same name "
                                 f"in {', '.join(verb.owners[dest])} ({', '.join(diff)}): one name, one meaning "
                                 "(docs/certify.md, 'Option grammar')")
        if isinstance(default, str) and action.type is not None and default is not argparse.SUPPRESS:
            default = action.type(default)
        if self.kind not in verb.owners[dest]:
            verb.owners[dest].append(self.kind)
        verb.kind_defaults[self.kind].setdefault(dest, default)    # two flags, one dest: the first one's (argparse)
        verb.kind_helps[self.kind][flags[0]] = help_text
        if required:
            verb.kind_required[self.kind].add(dest)
        if takes_one:
            verb.kind_one[self.kind].add(dest)
        return action

    def add_argument_group(self, title=None, description=None):
        group = next((g for g in self.verb._action_groups if g.title == title), None)
        if group is None:
            group = self.verb.add_argument_group(title, description)
        return _Declare(self.verb, self.kind, group)

    def add_mutually_exclusive_group(self, required: bool = False):
        if required:
            raise ValueError(f"{self.verb.base_prog} {self.kind}: a required exclusive group cannot be shared "
                             "by a verb's kinds; check it in the kind's run")
        return _Declare(self.verb, self.kind, self.container.add_mutually_exclusive_group())
