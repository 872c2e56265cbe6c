"""Executors of certification work, by name: chunks of Monte Carlo draws and whole grid cells as tasks.

An executor maps a function over a list of jobs and returns the results in the order of the jobs::

    with get_executor("ray", workers=4) as ex:
        parts = ex.map_chunks(fn, jobs)      # == [fn(job) for job in jobs]

Kinds (``EXECUTORS``, filled by :func:`register_executor`):

``local``
    Every job in this process, in order.
``process``
    A forked ``concurrent.futures.ProcessPoolExecutor`` of ``workers`` processes (POSIX; ``fn`` need not be
    picklable: the children inherit it).  Where fork is missing the jobs run here, in order.
``ray``
    One Ray task per job (``pip install "resispec[ray]"``).  ``address=None`` starts a local cluster
    (``ray.init()``, ``num_cpus=workers``); ``address="auto"`` or ``"HOST:PORT"`` joins a running one
    (``ray start --head``).  ``fn`` is shipped once with ``ray.put`` (cloudpickle): the verifier's module must be
    importable on every node.  A cluster started here is shut down by :meth:`RayExecutor.close`; one that was
    already running (``ray.init`` called by the caller, or joined by address) is left running; when ``ray.init``
    was already called, that cluster is used whatever ``address`` says (an unreachable ``address`` is still refused).

What makes the results the same on every executor is the caller's job list, never the executor: the Monte
Carlo draws of a cell are split into the ``SeedSequence.spawn`` children of its seed (``exactness.chunks``),
so one seed gives the same counts with any executor.  A job that raises re-raises its original exception in
the caller; a worker that dies is a :class:`WorkerDied` (a ``RuntimeError``; a FAIL naming the subject where the
jobs run one: :func:`subject_deaths`); a time limit or Ctrl-C in the caller stops the workers.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager

class WorkerDied(RuntimeError):
    """A worker process (or Ray worker) died while running a job.  Where the jobs run a subject's code (a
    verifier's ``verify``, a sampler), the caller turns it into :class:`exactness.SubjectError` naming that code
    (:func:`subject_deaths`): a subject that ends or crashes its process FAILS, it is never a pass."""


@contextmanager
def subject_deaths(what: str, workers: int):
    """Inside the block, a :class:`WorkerDied` becomes :class:`exactness.SubjectError` naming ``what`` (the subject
    whose code the workers were running, e.g. ``"Mine.verify"``): the subject ended its worker process
    (``os._exit``), crashed it (native code) or ran it out of memory."""
    try:
        yield
    except WorkerDied as e:
        from ._checks import SubjectError

        detail = (str(e.__cause__ or "").strip().splitlines() or [""])[0][:120]
        raise SubjectError(f"{what} killed its worker process (workers = {workers}): it ended or crashed the "
                           "process (os._exit, a crash in native code, out of memory)"
                           + (f"; {type(e.__cause__).__name__}: {detail}" if detail else "")) from e


#: Executor kinds by name (see :func:`register_executor`).
EXECUTORS: dict[str, type] = {}
#: Seconds allowed to reach a Ray cluster's address before giving up (``ray.init`` itself retries ~2 min).
RAY_CONNECT_TIMEOUT = 5.0
#: The install line named when ray is missing.
RAY_INSTALL = 'pip install "resispec[ray]"'


def register_executor(name: str):
    """Class decorator: register an executor kind under ``name`` (``get_executor(name)``)."""
    def deco(cls):
        cls.kind = name
        EXECUTORS[name] = cls
        return cls
    return deco


class Executor:
    """Base executor: ``map_chunks(fn, jobs) -> [fn(job) for job in jobs]``; a context manager (``close``)."""

    kind = "base"

    def __init__(self, workers: int = 1, **options):
        if options:
            raise TypeError(f"executor {self.kind!r} takes no options {sorted(options)} (only 'ray' takes address)")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1 (processes, or CPUs of a local Ray cluster), got "
                             f"{workers!r}")
        self.workers = workers

    #: Whether whole grid cells should run as tasks of this executor (``exactness.grid.run_grid``); else the
    #: cells run here, one after another, and only their chunks go to the executor.
    cell_tasks = False

    def map_chunks(self, fn: Callable, jobs: Sequence, *, on_done: Callable | None = None,
                   on_error: Callable | None = None) -> list:
        """``[fn(job) for job in jobs]``, in the order of ``jobs``.

        ``on_done(i)`` is called as job ``i`` finishes (progress); ``on_error(job, exc)``, when given, is called
        for a job that raised an ``Exception`` (or whose worker died, as a ``RuntimeError``) and its return value
        stands for that job's result; without it the first failure is raised.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Release what this executor started (nothing for local / process)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@register_executor("local")
class LocalExecutor(Executor):
    """Every job in this process, in order."""

    def map_chunks(self, fn, jobs, *, on_done=None, on_error=None):
        out = []
        for i, job in enumerate(jobs):
            try:
                out.append(fn(job))
            except Exception as e:
                if on_error is None:
                    raise
                out.append(on_error(job, e))
            if on_done is not None:
                on_done(i)
        return out


_FORKED: Callable | None = None  # the function seen by forked workers (it need not be picklable)


_CATCH = False  # whether forked workers return a job's exception (on_error given) instead of raising it


class _Raised:
    def __init__(self, exc):
        self.exc = exc


def _forked_call(job):
    if not _CATCH:
        return _FORKED(job)
    try:
        return _FORKED(job)
    except Exception as e:
        return _Raised(e)


@register_executor("process")
class ProcessExecutor(Executor):
    """A forked process pool of ``min(workers, len(jobs), WORKERS_PER_CPU x CPUs)`` processes; ``workers == 1``
    runs here.  With ``workers > 1`` even a single job is forked: a subject that ends its process (``os._exit(0)``)
    must end a worker, never the caller (whose exit status 0 would read as a pass).  The cap
    (:data:`exactness.limits.WORKERS_PER_CPU` per CPU of this machine) keeps
    the forks alone from outlasting a short time limit, which would then blame the subject; the jobs' seeds do
    not depend on the number of processes, so the cap changes no result."""

    def map_chunks(self, fn, jobs, *, on_done=None, on_error=None):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        global _FORKED, _CATCH
        jobs = list(jobs)
        if self.workers == 1 or not jobs or "fork" not in mp.get_all_start_methods():
            return LocalExecutor().map_chunks(fn, jobs, on_done=on_done, on_error=on_error)
        _FORKED, _CATCH = fn, on_error is not None
        from . import limits

        cap = limits.WORKERS_PER_CPU * (os.cpu_count() or 1)
        ex = ProcessPoolExecutor(min(self.workers, len(jobs), cap), mp_context=mp.get_context("fork"))
        try:
            out = []
            for i, (job, r) in enumerate(zip(jobs, ex.map(_forked_call, jobs))):
                out.append(on_error(job, r.exc) if isinstance(r, _Raised) else r)
                if on_done is not None:
                    on_done(i)
            return out
        except BrokenProcessPool as e:
            raise WorkerDied(f"a worker process of the process executor died (workers = {self.workers}): {e}; "
                             "no certificate is given") from e
        except BaseException:  # a time limit or Ctrl-C: stop the workers now rather than wait for them
            for proc in list(getattr(ex, "_processes", {}).values()):
                proc.terminate()
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
            _FORKED, _CATCH = None, False


def check_address(address) -> str | None:
    """``None`` (start a local cluster), ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"``; ValueError else."""
    if address is None:
        return None
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"address must be 'auto', HOST:PORT or ray://HOST:PORT of a running Ray cluster "
                         "(resispec certify --executor ray[address=HOST:PORT]), "
                         f"got {address!r}")
    address = address.strip()
    if address == "auto":
        return address
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r}: write HOST:PORT (e.g. 10.0.0.1:6379, the address `ray start "
                         "--head` prints), ray://HOST:PORT, or 'auto'")
    return address


def _probe(address: str, timeout: float) -> None:
    """ValueError naming the address unless a TCP connection to HOST:PORT opens within ``timeout`` s."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise ValueError(f"address {address}: no Ray cluster reachable there within {timeout:g} s ({e}). Start "
                         "one with `ray start --head` on that node and pass the address it prints "
                         "(--executor ray[address=HOST:PORT]), address=auto on a node of a running cluster, or "
                         "--executor ray alone to start a local cluster"
                         ) from e


def _call(fn, job):
    return fn(job)


def _local_error(e: BaseException) -> BaseException:
    """What a local run would have raised: a task's own exception, or RuntimeError for a dead worker / node."""
    from ray.exceptions import RaySystemError, RayTaskError

    cause = getattr(e, "cause", None)
    if isinstance(e, RayTaskError) and isinstance(cause, Exception):
        return cause
    if isinstance(e, RayTaskError):
        return RuntimeError(f"a Ray task failed: {e}; no certificate is given")
    first = (str(e).strip().splitlines() or [""])[0]
    if isinstance(e, RaySystemError):  # e.g. the task's arguments could not be unpickled on the worker
        return RuntimeError(f"a Ray task could not run ({first}): the verifier's module must be importable on "
                            "every Ray node (install it there); no certificate is given")
    return WorkerDied(f"a Ray worker died ({type(e).__name__}: {first}); no certificate is given")


#: Top-level packages whose classes are pickled by reference (installed on every node with resispec).
_PROJECT = ("resispec", "exactness", "simulators")


def _ship_user_modules(objs) -> None:
    """Pickle by value (cloudpickle ``register_pickle_by_value``) the modules of user verifiers in ``objs``.

    A verifier (an object, or the ``.verifier`` of a cell or sampler) whose class lives in a module outside
    the project and outside the installed packages (a ``mine.py`` next to you, a test module) is shipped
    with its code, so the Ray workers need not import that module; installed packages are pickled by
    reference and must be installed on every node.
    """
    import sysconfig

    from ray import cloudpickle

    installed = tuple(os.path.abspath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib"))
    for obj in objs:
        for o in (obj, getattr(obj, "verifier", None)):
            name = type(o).__module__ if o is not None else "builtins"
            mod = sys.modules.get(name)
            path = getattr(mod, "__file__", None)
            if name.split(".")[0] in _PROJECT + ("builtins", "__main__") or not path:
                continue
            if not os.path.abspath(path).startswith(installed):
                cloudpickle.register_pickle_by_value(mod)


def _cancel(ray, refs) -> None:
    for r in refs:
        try:
            ray.cancel(r, force=True)
        except Exception:  # already finished or gone
            pass


@register_executor("ray")
class RayExecutor(Executor):
    """One Ray task per job; see the module docstring.

    Parameters
    ----------
    workers : int, CPUs of the local cluster started here (ignored when joining one)
    address : str or None, ``None`` = local cluster, else ``"auto"`` / ``"HOST:PORT"`` / ``"ray://HOST:PORT"``
    connect_timeout : float, seconds to reach ``address`` (default ``RAY_CONNECT_TIMEOUT``)

    Raises
    ------
    ValueError
        ray not installed (naming ``pip install "resispec[ray]"``); a bad or unreachable ``address`` (naming
        ``address``, within ``connect_timeout``); ``ray.init`` failing.  A cluster this call started is shut
        down before the error is raised.
    """

    def __init__(self, workers: int = 1, address: str | None = None, connect_timeout: float = RAY_CONNECT_TIMEOUT):
        super().__init__(workers)
        address = check_address(address)
        try:
            import ray
        except ImportError as e:
            raise ValueError(f"--executor ray needs the ray package, which is not installed ({e}); install it "
                             f"with {RAY_INSTALL}, or use --executor process") from e
        self._ray, self.address, self._started = ray, address, False
        self._remote = ray.remote(_call)
        if address not in (None, "auto"):
            _probe(address, connect_timeout)
        if ray.is_initialized():
            return  # the caller's cluster (ray.init done before): used as it is, never shut down here
        try:
            if address is None:
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        except (Exception, SystemExit) as e:  # ray exits on a GCS it cannot reach after its own retries
            if ray.is_initialized():
                ray.shutdown()
            where = "a local cluster" if address is None else f"address {address}"
            raise ValueError(f"could not start Ray on {where}: {type(e).__name__}: {e}. Pass address=auto on a "
                             "node of a running cluster (`ray start --head`), HOST:PORT of its head "
                             "(--executor ray[address=HOST:PORT]), or no address for a local cluster") from e
        self._started = True

    cell_tasks = True

    def map_chunks(self, fn, jobs, *, on_done=None, on_error=None):
        ray = self._ray
        jobs, refs = list(jobs), []
        try:
            _ship_user_modules([*getattr(fn, "args", ()), *getattr(fn, "keywords", {}).values(),
                                *(x for job in jobs for x in (job if isinstance(job, tuple) else (job,)))])
            fn_ref = ray.put(fn)
            for job in jobs:
                refs.append(self._remote.remote(fn_ref, job))
        except Exception as e:  # cloudpickle cannot serialise the verifier (a lock, an open file, a C handle)
            _cancel(ray, refs)
            raise TypeError(f"--executor ray cannot ship the work to the Ray workers: {type(e).__name__}: {e}. "
                            "The verifier must be picklable (a module-level class with plain attributes, its "
                            "module importable on every node); or use --executor process") from e
        index = {r: i for i, r in enumerate(refs)}
        out, pending = [None] * len(refs), list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for r in ready:
                    i = index[r]
                    try:
                        out[i] = ray.get(r)
                    except ray.exceptions.RayError as e:
                        exc = _local_error(e)
                        if on_error is None:
                            raise exc from (None if exc is getattr(e, "cause", None) else e)
                        out[i] = on_error(jobs[i], exc)
                    if on_done is not None:
                        on_done(i)
        except BaseException:  # a failure, a time limit or Ctrl-C: stop the other tasks rather than leave them
            _cancel(ray, pending)
            raise
        return out

    def close(self) -> None:
        """Shut down the cluster if this executor started it."""
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
        self._started = False


def check_executor(executor) -> str | Executor:
    """``executor``: a registered name or an ``Executor`` instance; ValueError listing the kinds otherwise."""
    if isinstance(executor, Executor):
        return executor
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {sorted(EXECUTORS)} (or an exactness.executors.Executor), "
                         f"got {executor!r}")
    return executor


def get_executor(executor="process", *, workers: int = 1, **options) -> Executor:
    """An executor: ``executor`` a name in ``EXECUTORS`` (built with ``workers`` and ``options``, e.g.
    ``address=`` for ray) or an ``Executor`` instance (returned as is; the caller closes it).

    Raises ValueError for an unknown name; the kind's own errors (``RayExecutor``).
    """
    executor = check_executor(executor)
    if isinstance(executor, Executor):
        return executor
    return EXECUTORS[executor](workers, **options)


@contextmanager
def executor_for(executor="process", *, workers: int = 1, **options):
    """``with executor_for(executor, workers=N) as ex``: :func:`get_executor`, closed on exit only when built here
    (an ``Executor`` instance passed in is the caller's to close)."""
    ex = get_executor(executor, workers=workers, **options)
    try:
        yield ex
    finally:
        if ex is not executor:
            ex.close()
