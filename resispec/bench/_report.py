"""The one report helper of the benchmark wing: markdown tables, number cells, the writers.

Every report of :mod:`resispec.bench` is built from these pieces, so a table
looks the same in every report (``| a | b |`` rows under a ``|---|---|``
rule, GitHub-flavoured markdown) and every file is written atomically
(:mod:`resispec._io`: temp file in the same folder, then ``os.replace``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._io import write_markdown_and_json

__all__ = ["command_lines", "fmt", "md_row", "md_table", "stats_table", "write_markdown_and_json"]


def fmt(x: float | None, nd: int = 4, *, sign: bool = False) -> str:
    """``x`` with ``nd`` decimals (``sign``: with ``+`` / ``-``), ``"-"`` for a missing value (``None``).

    What rounds to zero prints without a sign (``0.000``, never ``-0.000`` or ``+0.000``: a tie).
    """
    if x is None:
        return "-"
    s = f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"
    return s[1:] if s[0] in "+-" and float(s) == 0 else s


def md_row(cells: Iterable[str]) -> str:
    """One markdown table row: ``| c1 | c2 | ... |``."""
    return "| " + " | ".join(cells) + " |"


def md_table(head: Sequence[str], rows: Iterable[Iterable[str]] = ()) -> list[str]:
    """Markdown table lines: header row, ``|---|`` rule, then the rows (cells already formatted)."""
    return [md_row(head), "|" + "---|" * len(head)] + [md_row(r) for r in rows]


def stats_table(label: str, agg: dict, stats: Sequence[str] = ("mean", "min", "max"), *,
                head: Sequence[str] | None = None, nd: int = 3) -> list[str]:
    """Table of summary statistics, one row per entry of ``agg``.

    ``agg``: name -> dict holding every key of ``stats`` (floats) and
    ``"cells"`` (int); columns ``label``, ``head`` (default: ``stats``),
    ``cells``.
    """
    return md_table([label, *(head or stats), "cells"],
                    ([name, *(f"{g[m]:.{nd}f}" for m in stats), str(g["cells"])] for name, g in agg.items()))


def command_lines(command: str | None) -> list[str]:
    """``["Command: `...`", ""]`` when a command is given, else ``[]``."""
    return [f"Command: `{command}`", ""] if command else []
