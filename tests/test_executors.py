"""Executors of certification work (issue 12, item 4): local, process and Ray give the same counts for one seed.

The Ray tests share one local cluster (``num_cpus=2``, no dashboard) started once for the module, and skip
cleanly when ray is not installed (``pip install "resispec[ray]"``; the ``test`` extra includes it).  Under
pytest-xdist the file runs on one worker (``--dist loadfile``, pyproject.toml): one cluster per run, and the
"no cluster reachable" check skips its ``auto`` part when any Ray cluster runs on the machine.  Every run is tiny (V = 3 or 8, a few
thousand draws)."""

from __future__ import annotations

import json
import os
import sys
import threading

import numpy as np
import pytest

import exactness
import resispec
from exactness.chunks import chunk_jobs, mc_counts
from exactness.executors import EXECUTORS, RayExecutor, check_address, get_executor
from exactness.grid import Cell, run_grid
from exactness.sampling import NodeSampler
from resispec.cli import main

P = np.array([0.5, 0.3, 0.2])
Q = np.array([0.2, 0.2, 0.6])
RRS = resispec.get_verifier("rrs")
N = 6000
PARENT = os.getpid()


class Box:
    """A correct black box (no chain, no uniforms)."""

    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return RRS.verify(p, q, candidates, rng)


class RaisesRemotely(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            raise RuntimeError("boom in a worker")
        return super().verify(p, q, candidates, rng)


class DiesRemotely(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            os._exit(3)
        return super().verify(p, q, candidates, rng)


class Unpicklable(Box):
    def __init__(self):
        self.lock = threading.Lock()


def _same(a, b) -> bool:
    return (a.passed, a.statistic, a.pvalue, a.n, a.checks, repr(a.details)) == \
        (b.passed, b.statistic, b.pvalue, b.n, b.checks, repr(b.details))


def _cells():
    rng = np.random.default_rng(5)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    return [Cell(name, resispec.get_verifier(name), "dirichlet", k, p, q) for name in ("rrs", "resispec")
            for k in (1, 2)]


def _grid_key(g):
    return [(c.verifier, c.k, c.certificate.statistic, c.certificate.pvalue, c.p_holm) for c in g.cells], g.passed


# --- without ray -----------------------------------------------------------------------------------------------

def test_kinds_are_registered_by_name():
    assert {"local", "process", "ray"} <= set(EXECUTORS)
    with pytest.raises(ValueError, match="executor must be one of"):
        exactness.certify_verifier(RRS, P, Q, 1, n=500, executor="threads")


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
@pytest.mark.parametrize("workers", [1, 3])
def test_local_and_process_give_identical_certificates(workers):
    a = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=3, workers=workers, executor="local")
    b = exactness.certify_verifier(Box(), P, Q, 2, n=N, seed=3, workers=workers, executor="process")
    assert a.passed and _same(a, b)


def test_chunk_counts_merge_exactly_into_the_one_process_draws():
    """The summed chunk histograms equal the histogram of the concatenated chunk draws (parallel_draws)."""
    from exactness.verifier_cert import parallel_draws

    s = NodeSampler(resispec.get_verifier("resispec"), P, Q, 2)
    c = mc_counts(s, np.random.SeedSequence(4), 5001, 3, "local")
    d = parallel_draws(s, np.random.SeedSequence(4), 5001, 3, executor="local")
    assert c.n == 5001 and np.array_equal(c.tokens, np.bincount(d.tokens, minlength=3))
    stop = np.where(d.accepted < 0, 2, d.accepted)
    assert np.array_equal(c.joint, np.bincount(stop * 3 + d.tokens, minlength=9))
    assert [m for _, m in chunk_jobs(np.random.SeedSequence(0), 5001, 3)] == [1667, 1667, 1667]


def _half(job):
    if job % 2:
        raise ValueError(f"odd {job}")
    return job


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
@pytest.mark.parametrize("kind", ["local", "process"])
def test_on_error_replaces_a_failed_job_and_on_done_sees_each(kind):
    done = []
    out = get_executor(kind, workers=2).map_chunks(_half, [0, 1, 2, 3], on_done=done.append,
                                                   on_error=lambda job, e: str(e))
    assert out == [0, "odd 1", 2, "odd 3"] and sorted(done) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="odd 1"):
        get_executor(kind, workers=2).map_chunks(_half, [0, 1, 2, 3])
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        get_executor(kind, workers=0)


def test_ray_missing_names_the_install_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ValueError, match=r'pip install "resispec\[ray\]"'):
        get_executor("ray")


@pytest.mark.parametrize("address", ["", "nohost", "host:0", "host:port", 5])
def test_malformed_address(address):
    with pytest.raises(ValueError, match="address"):
        check_address(address)


@pytest.mark.parametrize("argv, match", [(["--executor", "threads"], "--executor 'threads': choose one of"),
                                         (["--executor", "process[address=auto]"], "only ray takes an option"),
                                         (["--executor", "ray[port=1]"], "ray takes address only"),
                                         (["--executor", "ray[address=x]"], "address 'x': write HOST:PORT"),
                                         (["--executor", "ray[address"], "malformed options"),
                                         (["--address", "auto"], "unrecognized arguments: --address")])
def test_cli_bad_executor_flags_exit_2(tmp_path, capsys, argv, match):
    out = tmp_path / "c.md"
    rc = main(["certify", "--verifier", "rrs", "--k", "1", "--family", "zipf", "--samples", "500", "--no-mutants",
               "--no-progress", "--out", str(out), *argv])
    assert rc == 2 and match in capsys.readouterr().err and not out.exists()


# --- with a local Ray cluster ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:  # a local single-node cluster, 2 CPUs, 200 MB object store: small beside the suite's other workers
        ray.init(num_cpus=2, object_store_memory=200 * 2**20, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def _ray_running_here() -> bool:
    """Whether any Ray cluster (a GCS server process) runs on this machine, e.g. one another job started."""
    try:
        from ray._private.services import find_gcs_addresses
    except ImportError:
        return False
    return bool(find_gcs_addresses())


def test_unreachable_address_is_a_clear_error_and_starts_nothing(tmp_path, capsys):
    pytest.importorskip("ray")
    import ray

    was = ray.is_initialized()
    with pytest.raises(ValueError, match="address 127.0.0.1:1: no Ray cluster reachable"):
        RayExecutor(address="127.0.0.1:1", connect_timeout=1.0)
    assert ray.is_initialized() == was
    out = tmp_path / "c.md"
    rc = main(["certify", "--verifier", "rrs", "--k", "1", "--family", "zipf", "--samples", "500", "--no-mutants",
               "--no-progress", "--out", str(out), "--executor", "ray[address=127.0.0.1:1]"])
    assert rc == 2 and "start one with `ray start --head`" in capsys.readouterr().err.lower()
    assert not out.exists() and not out.with_suffix(".json").exists()
    assert ray.is_initialized() == was
    if not was and not os.environ.get("RAY_ADDRESS") and not _ray_running_here():
        # no cluster on this node ('auto' would join one another job started): 'auto' finds none, at once
        with pytest.raises(ValueError, match="could not start Ray on address auto"):
            RayExecutor(address="auto")
        assert not ray.is_initialized()


@pytest.mark.parametrize("verifier", ["resispec", "box"])
def test_ray_gives_the_same_certificate_as_local_and_process(ray_cluster, verifier):
    v = resispec.get_verifier("resispec") if verifier == "resispec" else Box()
    certs = [exactness.certify_verifier(v, P, Q, 2, n=N, seed=[7, 1], workers=2, executor=e)
             for e in ("local", "process", "ray")]
    assert certs[0].passed and _same(certs[0], certs[1]) and _same(certs[0], certs[2])


def test_ray_grid_cells_as_tasks_equal_the_process_grid(ray_cluster):
    a = run_grid(_cells(), n=3000, seed=2, workers=2, executor="process")
    b = run_grid(_cells(), n=3000, seed=2, workers=2, executor="ray")
    assert a.passed and _grid_key(a) == _grid_key(b)


def test_a_verifier_failing_in_a_ray_task_is_an_error_or_a_failed_cell(ray_cluster):
    cert = exactness.certify_verifier(RaisesRemotely(), P, Q, 2, n=N, seed=0, workers=2, executor="ray")
    assert not cert.passed and "boom in a worker" in cert.details["subject"]["error"]   # a FAIL, never a pass
    cells = [Cell("raises", RaisesRemotely(), "node", 2, P, Q), Cell("dies", DiesRemotely(), "node", 2, P, Q),
             Cell("box", Box(), "node", 2, P, Q)]
    g = run_grid(cells, n=2000, seed=0, executor="ray")
    by = {c.verifier: c for c in g.cells}
    assert not g.passed and set(g.failed_verifiers()) == {"raises", "dies"}
    assert "boom in a worker" in by["raises"].certificate.details["error"]
    assert "Ray worker died" in by["dies"].certificate.details["error"]
    assert by["box"].certificate.passed


def test_an_unpicklable_verifier_names_the_fix(ray_cluster):
    with pytest.raises(TypeError, match="must be picklable.*--executor process"):
        exactness.certify_verifier(Unpicklable(), P, Q, 2, n=N, seed=0, workers=2, executor="ray")


def test_cli_executor_ray_reports_the_process_verdict(ray_cluster, tmp_path, capsys):
    base = ["certify", "--verifier", "rrs", "--verifier", "resispec", "--k", "1,2", "--family", "zipf",
            "--samples", "2000", "--no-mutants", "--no-progress", "--workers", "2"]
    runs = {}
    for e in ("process", "ray"):
        rc = main(base + ["--executor", e, "--out", str(tmp_path / f"{e}.md")])
        data = json.loads((tmp_path / f"{e}.json").read_text())
        runs[e] = rc, [(c["verifier"], c["k"], c["pvalue"]) for c in data["cells"]]
        assert data["meta"]["executor"] == e
    capsys.readouterr()
    assert runs["process"][0] == 0 and runs["process"] == runs["ray"]


MINE = '''
import resispec

class Mine:
    drafting = "iid"

    def verify(self, p, q, candidates, rng):
        return resispec.get_verifier("rrs").verify(p, q, candidates, rng)
'''


def test_cli_ships_a_user_module_the_workers_cannot_import(ray_cluster, user_dir, capsys):
    """``--verifier mine:Mine`` from a folder the Ray workers do not see: shipped by value, certified, passes."""
    (user_dir / "mine_ray.py").write_text(MINE)
    rc = main(["certify", "--verifier", "mine_ray:Mine", "--k", "1,2", "--family", "zipf", "--samples", "2000",
               "--no-mutants", "--no-progress", "--executor", "ray", "--out", str(user_dir / "c.md")])
    out = capsys.readouterr().out
    assert rc == 0 and "NO BIAS DETECTED" in out and "FAILED cell" not in out


class HangsRemotely(Box):
    def verify(self, p, q, candidates, rng):
        if os.getpid() != PARENT:
            import time

            time.sleep(600)
        return super().verify(p, q, candidates, rng)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGALRM")
def test_a_hanging_verifier_in_a_ray_task_times_out_its_cell(ray_cluster):
    g = run_grid([Cell("hangs", HangsRemotely(), "node", 2, P, Q)], n=2000, seed=0, timeout=2, executor="ray")
    error = g.cells[0].certificate.details["error"]
    assert not g.passed and ("timed out after 12 s" in error or "HangsRemotely.verify did not return within 12 s" in error)
