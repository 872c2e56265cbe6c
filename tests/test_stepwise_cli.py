"""resispec certify-stepwise (CLI): exit status per verdict, a user's verifier by module:object, bad input."""

import textwrap

import numpy as np

from resispec.cli import main

BIASED = textwrap.dedent('''
    import numpy as np
    from resispec.verifiers.resispec_wor import ResiSpecWOR
    from resispec.verifiers.step_plan import StepPlan

    class LowM(ResiSpecWOR):
        """Declares an accepted mass 10% below the one verify uses (a defect)."""
        def step_plan(self, p_i, q_i, *, last):
            pl = super().step_plan(p_i, q_i, last=last)
            return pl if pl is None else StepPlan(**{**pl.__dict__, "m": pl.m * 0.9})

    class Undeclared(ResiSpecWOR):
        def step_plan(self, p_i, q_i, *, last):
            return None
''')


def test_pass_fail_inconclusive(capsys, tmp_path, monkeypatch):
    assert main(["certify-stepwise", "--tv", "0.02", "--V", "200"]) == 0
    assert "NO BIAS DETECTED" in capsys.readouterr().out
    (tmp_path / "mine.py").write_text(BIASED)
    monkeypatch.chdir(tmp_path)
    assert main(["certify-stepwise", "--verifier", "mine:LowM", "--tv", "0.02", "--V", "200", "--k", "3"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "replay_state" in out
    assert main(["certify-stepwise", "--verifier", "mine:Undeclared", "--tv", "0.05", "--V", "50"]) == 3
    assert "INCONCLUSIVE" in capsys.readouterr().out


def test_node_file_and_workers(capsys, tmp_path):
    rng = np.random.default_rng(1)
    f = tmp_path / "node.npz"
    np.savez(f, p=rng.dirichlet(np.ones(300)), q=rng.dirichlet(np.ones(300)))
    assert main(["certify-stepwise", "--pq", str(f), "--k", "3", "--n", "400", "--workers", "2"]) == 0
    assert "400 draws" in capsys.readouterr().out


def test_bad_input(capsys, tmp_path):
    for argv in (["--verifier", "rrs"], ["--verifier", "no_such_module:X"], ["--tv", "0"], ["--tv", "1.5"],
                 ["--k", "0"], ["--V", "1"], ["--workers", "0"], ["--pq", str(tmp_path / "none.npz")],
                 ["--pq", "x.npz", "--V", "10"], ["--time-limit", "-1"], ["--alpha", "2"]):
        assert main(["certify-stepwise", *argv]) == 2, argv
    assert "error" in capsys.readouterr().err
