"""Every verdict right, round 6: nothing hangs in ``resispec certify`` (verifiers) either.

A verifier that swallows the cell's alarm in a loop (``except BaseException: pass``), ignores SIGALRM or sits in one
long C call, and a ``--verifier`` module whose import never returns, ran ``resispec certify`` forever (``timeout 120``
stopped the first).  Each cell's ``--time-limit`` (and each verifier's load) now starts the supervisor's wall clock
(``exactness._timeout.announce`` -> ``resispec.commands._supervisor.run_started``): a run still going ``timeout +
max(10 s, timeout)`` after the cell began is killed, a FAIL naming the cell (exit 1).  The clock starts again with
every cell, so a long run of quick cells is never killed.
"""

import os
import textwrap

import pytest

from _subjects import spawn_cli

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the supervisor forks (POSIX)")

SWALLOWS = textwrap.dedent('''
    import time


    class Swallows:
        """Swallows every alarm in a loop: the cell's own limit cannot stop it."""
        name, drafting = "swallows", "iid"

        def verify(self, p, q, drafts, *args, **kwargs):
            while True:
                try:
                    time.sleep(0.2)
                except BaseException:
                    pass
''')

HANGS_AT_IMPORT = textwrap.dedent('''
    import time

    while True:
        try:
            time.sleep(0.2)
        except BaseException:
            pass
''')

TINY = ["--k", "2", "--families", "zipf", "--no-mutants", "--no-progress", "--time-limit", "1", "--out", "o/c.md"]


def test_a_verifier_swallowing_its_cells_alarm_is_killed_and_fails_naming_the_cell(tmp_path):
    p = spawn_cli(tmp_path, {"r6swallow.py": SWALLOWS}, ["certify", "--verifier", "r6swallow:Swallows", *TINY])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1, (p.returncode, out, err)
    assert "FAIL" in err and "cell r6swallow:Swallows / zipf / k = 2 began" in err and "was killed" in err, err
    assert "NO BIAS" not in out


def test_a_verifier_module_whose_import_hangs_fails_naming_the_load(tmp_path):
    p = spawn_cli(tmp_path, {"r6hangs.py": HANGS_AT_IMPORT}, ["certify", "--verifier", "r6hangs:V", *TINY])
    out, err = p.communicate(timeout=600)
    assert p.returncode == 1, (p.returncode, out, err)
    assert "loading --verifier r6hangs:V began" in err and "was killed" in err, err


def test_a_proxy_module_is_loaded_under_the_watch_too(monkeypatch):
    """Breaker (round 6): `--proxies imphang:X` hung forever (its load was not announced)."""
    from exactness import _timeout
    from resispec.cli import main

    said = []
    monkeypatch.setattr(_timeout, "WATCHER", {"fn": lambda seconds, what: said.append((seconds, what))})
    assert main(["certify", "--proxies", "no_such_module_r6:X", "--time-limit", "5"]) == 2     # cannot load: exit 2
    assert said == [(_timeout.LOAD_GRACE, "loading --proxies no_such_module_r6:X"), (None, None)], said


def test_the_default_budget_is_checked_against_memory_before_anything_runs(capsys):
    """Breaker (round 6): `certify --verifier rrs --k 9999` (the default 200,000 draws, ~30 GiB a cell) was killed
    by the kernel's OOM killer as a FAIL of the exact rrs (exit 1); the same with --n 200000 was exit 2."""
    from resispec.cli import main

    assert main(["certify", "--verifier", "rrs", "--k", "9999", "--time-limit", "0", "--no-mutants"]) == 2
    err = capsys.readouterr().err
    assert "the default --n 200,000" in err and "memory" in err, err


def test_an_unknown_option_is_named_by_the_command_typed(capsys):
    from resispec.cli import main

    assert main(["certify", "coupled", "--verifier", "rrs", "--mc-samples", "5"]) == 2
    assert "resispec certify coupled: error: unrecognized arguments: --mc-samples 5" in capsys.readouterr().err


def test_a_failing_run_names_each_failing_cells_strongest_checks(tmp_path, capsys):
    from exactness.mutants import CATALOGUE  # noqa: F401  (the catalogue's residual_is_p, by name)
    from resispec.cli import main

    (tmp_path / "r6biased.py").write_text("from exactness.mutants import CATALOGUE\nV = CATALOGUE['residual_is_p']\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        rc = main(["certify", "--verifier", "r6biased:V", "--k", "2", "--families", "zipf", "--no-mutants",
                   "--no-progress", "--out", str(tmp_path / "o" / "c.md")])
    finally:
        sys.path.remove(str(tmp_path))
    out = capsys.readouterr().out
    assert rc == 1
    line = next(x for x in out.splitlines() if x.startswith("  r6biased:V / zipf / k = 2: "))
    assert "p = " in line and "marginal" in line, line


def test_each_cell_starts_the_wall_clock_again(tmp_path):
    """The supervisor reads every run_started: a new block, a new clock (a run of many quick cells is never killed),
    and None disarms it (the mutants and the reports after the last cell have no wall)."""
    from resispec.commands import _supervisor as sup

    path = str(tmp_path / "started")
    watch = sup._Watch(os.getpid(), str(tmp_path / "status"), path, -1)
    old = dict(sup._STARTED)
    sup._STARTED.clear()
    sup._STARTED["path"] = path
    try:
        sup.run_started(1.0, "cell a / zipf / k = 2")
        watch._limits(100.0)
        assert watch.started == (100.0, 11.0, "cell a / zipf / k = 2")
        watch._limits(105.0)                      # nothing new: the clock runs on from 100
        assert watch.started[0] == 100.0
        sup.run_started(1.0, "cell b / zipf / k = 2")
        watch._limits(110.0)                      # the next cell: its clock starts at 110, not a kill at 111
        assert watch.started == (110.0, 11.0, "cell b / zipf / k = 2") and watch.overran is None
        sup.run_started(None)
        watch._limits(120.0)
        assert watch.started[1] is None           # disarmed: no wall
        watch._limits(1e9)
        assert watch.overran is None
    finally:
        sup._STARTED.clear()
        sup._STARTED.update(old)


def test_a_slow_exact_verifier_past_its_cells_timeout_is_not_run_never_failed(tmp_path, capsys):
    """Round 6 (breaker): `certify --time-limit 2` FAILed the exact rrs_wor and rejection_proxy at k = 8 (exit 1):
    a cell's --time-limit is the caller's limit, as a decoder's --time-limit is (round 5). Past it no new verify call
    starts and the cell is NOT RUN (exit 2 when nothing else failed); only a call still running timeout + max(10 s,
    timeout) into the cell is a hang (test_hardening_cli_certify.py pins that)."""
    import sys

    from resispec.cli import main

    (tmp_path / "r6slow.py").write_text(textwrap.dedent('''
        import time

        from resispec import get_verifier


        class Slow:
            """Exact (rrs) and slow: 0.3 s a call, so 2,000 draws take longer than --time-limit 1."""
            name, drafting = "slow", "iid"

            def __init__(self):
                self._rrs = get_verifier("rrs")

            def verify(self, p, q, candidates, rng=None, *, uniforms=None):
                time.sleep(0.3)
                return self._rrs.verify(p, q, candidates, rng, uniforms=uniforms)
    '''))
    sys.path.insert(0, str(tmp_path))
    try:
        rc = main(["certify", "--verifier", "r6slow:Slow", "--k", "2", "--families", "zipf", "--no-mutants",
                   "--no-progress", "--time-limit", "1", "--out", str(tmp_path / "o" / "c.md")])
    finally:
        sys.path.remove(str(tmp_path))
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert "NOT RUN cell r6slow:Slow zipf k=2" in captured.out and "raise --time-limit" in captured.err
    assert "NOT RUN (the cell's --time-limit = 1 s passed" in captured.out
    assert not [line for line in captured.out.splitlines() if line.startswith("FAIL")]


def test_certify_verifiers_own_timeout_is_the_callers_too():
    """Round 6 (breaker): `certify_verifier(SlowExact(), ..., timeout=1)` FAILed the exact verifier "did not return
    within 1 s" though every call returned in 0.2 s. Now the API's timeout= is the caller's limit as the CLI's
    --time-limit is: past it no new call starts and a BudgetError says so (nothing decided); a hang is still a FAIL
    (tests/test_verdicts_node.py)."""
    import time

    import numpy as np

    import exactness
    from exactness.budget import BudgetError
    from resispec import get_verifier

    class SlowExact:
        name, drafting = "slow", "iid"

        def __init__(self):
            self._rrs = get_verifier("rrs")

        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            time.sleep(0.2)
            return self._rrs.verify(p, q, candidates, rng, uniforms=uniforms)

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    with pytest.raises(BudgetError, match="timeout = 1 s passed .* no call of the subject hung"):
        exactness.certify_verifier(SlowExact(), p, q, 2, n=20_000, timeout=1)


def test_a_bias_found_before_the_deadline_still_fails():
    """Round 6 (breaker): a biased verifier slow only in the batch-of-one checks (after the main sample had found
    the bias, p = 0) came back NOT RUN (exit 2) under --time-limit 3: what already convicts (below alpha / m, every
    check Holm could count) still FAILs."""
    import time

    import numpy as np

    from exactness.grid import Cell, run_cell
    from resispec import get_verifier

    class BiasedSlowAlone:
        name, drafting = "biased", "iid"

        def __init__(self):
            self._rrs = get_verifier("rrs")

        def verify(self, p, q, candidates, rng=None, *, uniforms=None):
            if np.shape(candidates)[0] == 1:
                time.sleep(0.5)                             # slow only one node at a time
            out = self._rrs.verify(p, q, candidates, rng, uniforms=uniforms)
            t = out.tokens.copy()
            t[(out.accepted < 0) & (t == 0)] = 1            # a residual 0 read as 1: biased
            return type(out)(t, out.accepted)

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    for sequential in (False, True):          # the e-process's p-value holds under its optional stopping
        r = run_cell(Cell("biased", BiasedSlowAlone(), "toy", 2, p, q), n=20_000, alpha=1e-3, seed=0, timeout=3,
                     sequential=sequential)
        cert = r.certificate
        assert cert is not None and not cert.passed and not cert.details.get("refused"), (sequential, cert)
        assert any("time limit stopped the checks" in note for note in cert.notes), (sequential, cert.notes)
