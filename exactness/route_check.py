"""One check of a certificate route as an object, and the loop that runs a route's table of them (issue 39, item 3).

A route's check (:mod:`exactness.path_checks`, :mod:`exactness.stepwise_checks`, :mod:`exactness.coupled.checks`)
subclasses :class:`RouteCheck`: its ``name`` (the p-value it records in the certificate's ``checks``), what it
``detects``, the planted bug it must catch (``mutant``), when it applies (:meth:`RouteCheck.skip`), how it runs on the
route's shared run record (:meth:`RouteCheck.run`: it reads that record and writes only its own entries of
``checks`` / ``skipped``), and its design twins (:class:`exactness.power.DesignTwins`).
"""

from __future__ import annotations

from .power import DesignTwins


class RouteCheck(DesignTwins):
    """One check of a route (module docstring).  ``st``: the route's run record, with ``checks`` and ``skipped``."""

    name: str = ""
    detects: str = ""
    mutant: str = ""

    def skip(self, st) -> str | None:
        """Why the check does not run on ``st`` (recorded in ``skipped``), ``""`` where it does not apply to this
        run at all (nothing recorded), or None (it runs)."""
        return None

    def run(self, st) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def run_table(table, st) -> None:
    """Run every check of ``table`` (a tuple of :class:`RouteCheck`) on ``st``, in order: a check whose ``skip``
    gives a reason records it in ``st.skipped``; ``""`` records nothing; None runs it."""
    for check in table:
        why = check.skip(st)
        if why is None:
            check.run(st)
        elif why:
            st.skipped[check.name] = why
