"""The benchmark wing: every benchmark driver and its report writer, one module per measurement.

=================  ==================================================  ==============================
module             what it measures                                    CLI (thin wrapper)
=================  ==================================================  ==============================
:mod:`.accept`     exact acceptance of every iid verifier vs alpha*    ``resispec bench accept``
:mod:`.gap`        fraction of the rrs-to-optimum gap closed           ``resispec bench gap``
                   (iid and without-replacement, vs the LP optima)
:mod:`.throughput` nodes verified per second, numpy and torch          ``resispec bench verify``
:mod:`.trees`      block efficiency (tokens per target call) on        ``resispec bench``
                   token-tree shapes x families x temperatures
:mod:`.decode`     real-model tree decoding vs target-only decoding    ``resispec bench decode``
:mod:`.drift`      report (plots, tables) of the residual-drift        ``resispec drift``
                   sweep :func:`simulators.drift.drift_sweep`
:mod:`._report`    the one markdown-table / markdown+JSON writer       (shared)
=================  ==================================================  ==============================

Floors: the wing may import the ``resispec`` core, :mod:`simulators` and
:mod:`exactness`; nothing below it imports the wing (``tests/test_architecture.py``).
A new benchmark: copy :mod:`.accept` (driver returning a dataclass with
``to_json``; ``to_markdown`` built from :mod:`._report`; ``write_reports``),
then a wrapper like ``resispec/commands/bench_accept.py``.  Standalone
device scripts and one-off studies live in ``benchmarks/`` (see its README).

This package imports nothing on its own: import the module you need.
"""
