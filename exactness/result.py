"""One result vocabulary: the attributes every certificate of the harness has, whatever route made it.

Every certificate type (:class:`exactness.certificate.Certificate`, :class:`exactness.stepwise.StepwiseCertificate`,
:class:`exactness.coupled.certify.CoupledCertificate`, :class:`exactness.coupled.tree.TreeCertificate`,
:class:`exactness.pathlevel.PathCertificate`) reads the same way through :data:`VOCABULARY`; a route that has no
such number says ``None`` (documented on its class), never a made-up value.  ``tests/test_result_vocabulary.py``
fails when a certificate type lacks a name, or when one type has an alias the others do not.

=================  =========================  ===============================================================
name               type                       meaning
=================  =========================  ===============================================================
``passed``         bool                       no check rejected exactness (``outcome == "PASS"``)
``outcome``        str                        ``"PASS"``, ``"FAIL"`` or ``"INCONCLUSIVE"`` (CLI exit 0, 1, 3)
``pvalue``         float                      the p-value the verdict rests on (1.0 / 0.0 where it rests on a
                                              deterministic check: zero mismatches / a defect found)
``tv_estimate``    float or None              plug-in TV of the sampled law (None: the route bounds, not estimates)
``tv_upper``       float                      ``1 - alpha`` upper confidence bound on that TV
``detectable_tv``  float                      smallest TV found with probability ``power`` at this ``n``
``n``              int                        draws (samples, coupled draws, decoding steps) used
``alpha``          float                      level of the test
``checks``         dict[str, float]           name -> raw p-value of every check that ran
``summary()``      str                        the verdict in one line
=================  =========================  ===============================================================
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

#: The shared names, in the order of the table above.
VOCABULARY = ("passed", "outcome", "pvalue", "tv_estimate", "tv_upper", "detectable_tv", "n", "alpha", "checks",
              "summary")


@runtime_checkable
class Result(Protocol):
    """What every certificate offers (:data:`VOCABULARY`); ``isinstance(cert, Result)`` checks the names."""

    passed: bool
    n: int
    alpha: float

    @property
    def outcome(self) -> str: ...

    @property
    def pvalue(self) -> float: ...

    @property
    def tv_estimate(self) -> float | None: ...

    @property
    def tv_upper(self) -> float: ...

    @property
    def detectable_tv(self) -> float: ...

    @property
    def checks(self) -> dict: ...

    def summary(self) -> str: ...


#: Most columns of a certificate's one-line ``summary()``; and what ends a line cut to fit.
SUMMARY_WIDTH = 120
MORE = " (more: .report())"


def fit_line(line: str, width: int = SUMMARY_WIDTH) -> str:
    """``line`` if it fits in ``width`` columns, else cut after its last whole clause (at ``"; "`` or ``", "``; at a
    word when no clause ends in the last fifth of the room), ``" ... (more: .report())"`` appended."""
    if len(line) <= width:
        return line
    cut = line[:width - len(MORE) - 4]
    clause = max(cut.rfind("; "), cut.rfind(", "))     # after a whole clause, not half a phrase, unless
    stop = clause if clause > 0.8 * len(cut) else max(cut.rfind(" "), cut.rfind(";"))   # that drops much more
    return (cut[:stop] if stop > width // 2 else cut).rstrip(" ;,:") + " ..." + MORE


def detectable_mismatch_rate(n: int, power: float = 0.99) -> float:
    """Smallest P(event) seen at least once with probability ``power`` in ``n`` independent draws.

    ``1 - (1 - power)^(1/n)`` (P(no event in n) = (1 - d)^n <= 1 - power).  A coupled or stepwise route detects a
    subject whose TV to the reference (or the target) is at least this, since TV <= P(mismatch).  ``n`` 0 gives 1.
    """
    if n <= 0:
        return 1.0
    return float(1.0 - (1.0 - power) ** (1.0 / n))  # 1 - (1 - power)^(1/n)
