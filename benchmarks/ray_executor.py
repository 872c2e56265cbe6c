"""Ray executor against the process pool: throughput of the same certification work, and the per-task overhead.

The work: the Monte Carlo draws of one certification cell (``exactness.chunks.mc_counts``), ``resispec`` at one
softmax-noise node (V = 4000 by default, k = 4) on the generic path (a batched ``verify`` call per block of
draws, O(V) per draw), split into ``--workers`` SeedSequence chunks.  Run on

* ``process``: the forked process pool of ``--workers`` processes (what ``--executor process`` does);
* ``ray``: a local Ray cluster of ``--workers`` CPUs (``ray.init(num_cpus=workers)``), started once (its start-up
  time is printed apart, it is paid once per run of ``resispec certify``).

The two alternate (process, ray, process, ray, ...) for ``--repeats`` rounds so that the load of a shared machine
falls on both; each round checks that the two give IDENTICAL counts.  Printed side by side: draws/s of each
(median over rounds), the ratio ray / process (target >= 0.8), and the per-task overhead -- the time of a call
of ``--workers`` empty tasks (latency) and per empty task when many are sent at once (throughput) -- so a user
can size chunks: a chunk should take much longer than the overhead.

Usage (from the repository root; needs ``pip install "resispec[ray]"``)::

    python benchmarks/ray_executor.py [--workers 2] [--n 2000000] [--repeats 4] [--out reports/ray_executor.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec  # noqa: E402
from exactness.chunks import mc_counts  # noqa: E402
from exactness.executors import ProcessExecutor, RayExecutor  # noqa: E402
from resispec._io import atomic_write  # noqa: E402
from exactness.sampling import NodeSampler  # noqa: E402
from simulators.families import get_family  # noqa: E402


def _noop(job):
    return job


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def overhead(ex, workers: int, m: int) -> dict:
    """Seconds of a call of ``workers`` empty tasks (median of ``max(5, m // 4)`` calls) and per task of ``m``."""
    small = list(range(workers))
    ex.map_chunks(_noop, small)  # warm the workers
    call = statistics.median(_timed(lambda: ex.map_chunks(_noop, small))[0] for _ in range(max(5, m // 4)))
    many = _timed(lambda: ex.map_chunks(_noop, list(range(m))))[0] / m
    return {"call_s": call, "per_task_s": many}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--V", type=int, default=4000)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--n", type=int, default=2_000_000, help="draws per certification run")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=200, help="empty tasks for the overhead")
    ap.add_argument("--out", type=Path, default=None, help="Markdown report (JSON next to it)")
    args = ap.parse_args(argv)

    p, q = get_family("softmax_noise").sample(np.random.default_rng(0), n=1, V=args.V)
    sampler = NodeSampler(resispec.get_verifier("resispec"), p[0], q[0], args.k, fast=False)
    sampler.draws(np.random.default_rng(0), 1000)  # compile the kernel before forking
    proc = ProcessExecutor(args.workers)
    t_start, ray_ex = _timed(lambda: RayExecutor(workers=args.workers))
    rounds = {"process": [], "ray": []}
    try:
        # first call of each: a Ray worker imports resispec and compiles the numba kernel once (paid once per run)
        first = {name: _timed(lambda: mc_counts(sampler, np.random.SeedSequence(1), 2 * args.workers, args.workers,
                                                ex))[0] for name, ex in (("process", proc), ("ray", ray_ex))}
        for r in range(args.repeats):
            got = {}
            for name, ex in (("process", proc), ("ray", ray_ex)):
                s, c = _timed(lambda: mc_counts(sampler, np.random.SeedSequence([11, r]), args.n, args.workers, ex))
                rounds[name].append(args.n / s)
                got[name] = c
            assert np.array_equal(got["process"].tokens, got["ray"].tokens), "counts differ between executors"
            assert np.array_equal(got["process"].joint, got["ray"].joint), "joint counts differ between executors"
            print(f"round {r}: process {rounds['process'][-1]:,.0f} draws/s   ray {rounds['ray'][-1]:,.0f} draws/s"
                  "   (identical counts)", flush=True)
        ovh = {"process": overhead(proc, args.workers, args.tasks // 4),
               "ray": overhead(ray_ex, args.workers, args.tasks)}
    finally:
        ray_ex.close()
    med = {k: statistics.median(v) for k, v in rounds.items()}
    res = {"workers": args.workers, "V": args.V, "k": args.k, "n": args.n, "repeats": args.repeats,
           "draws_per_s": med, "rounds": rounds, "ratio_ray_over_process": med["ray"] / med["process"],
           "ray_start_s": t_start, "first_call_s": first, "overhead": ovh, "cpus": os.cpu_count(),
           "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None}
    lines = [
        "# Ray executor vs the process pool (benchmarks/ray_executor.py)",
        "",
        f"Work: the Monte Carlo draws of one certification cell (`exactness.chunks.mc_counts`), `resispec` on the "
        f"generic path at a softmax-noise node, V = {args.V}, k = {args.k}, n = {args.n:,} draws in "
        f"{args.workers} SeedSequence chunks; {args.repeats} interleaved rounds, identical counts checked each "
        f"round. Machine: {os.cpu_count()} CPUs, load average {res['load_avg'][0]:.1f} at the end (shared).",
        "",
        f"| executor | draws/s (median) | rounds | call of {args.workers} empty tasks | per empty task, "
        f"{args.tasks} at once |",
        "|---|---|---|---|---|",
    ]
    for name in ("process", "ray"):
        lines.append(f"| {name} ({args.workers} workers) | {med[name]:,.0f} | "
                     f"{', '.join(f'{x:,.0f}' for x in rounds[name])} | {ovh[name]['call_s'] * 1e3:.2f} ms | "
                     f"{ovh[name]['per_task_s'] * 1e3:.2f} ms |")
    lines += ["", f"Ratio ray / process: **{res['ratio_ray_over_process']:.2f}x** (target >= 0.8x). Local Ray "
              f"cluster start-up: {t_start:.1f} s, then its first call {first['ray']:.1f} s (workers import resispec and "
              f"compile the numba kernel; process pool: {first['process']:.2f} s), both once per run. The process pool is forked anew for every "
              "call, so its empty call is the cost of one pool (fork + teardown); a Ray call reuses the cluster's "
              "workers. Size chunks (--workers, i.e. chunks per cell) so that each takes far longer than the "
              "per-task time.", ""]
    text = "\n".join(lines)
    print()
    print(text)
    if args.out:
        atomic_write(args.out, text + "\n")
        atomic_write(args.out.with_suffix(".json"), json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
