"""Harness speed and power.

1. Power target: one node at V = 1000 (softmax-noise pair), k = 4: draw the
   number of samples the planner needs for a detectable TV of 1e-3 at
   alpha = 1e-3 and power 0.99, and time ``certify_sampler`` on it (target:
   within 60 s on 2 cores).  Wall and CPU time are both printed (the machine
   may be shared).
2. Throughput (tokens per second) of the harness sampler for ``rrs`` and
   ``resispec`` at V = 32000, k = 4: the table path (per-node accept table,
   O(k log V) per draw) side by side with the generic path (batched
   ``verifier.verify``, O(V) per draw), with their ratio.

Usage::

    python benchmarks/bench_harness.py [--quick] [--out reports/bench_harness.md]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec  # noqa: E402
from exactness import certify_sampler, samples_for_tv  # noqa: E402
from exactness.report import atomic_write  # noqa: E402
from exactness.sampling import NodeSampler  # noqa: E402
from simulators.families import get_family  # noqa: E402


def _node(V, seed=0):
    p, q = get_family("softmax_noise").sample(np.random.default_rng(seed), n=1, V=V)
    return p[0], q[0]


def power_target(name: str, V: int, k: int, tv: float, alpha: float, power: float, workers: int) -> dict:
    p, q = _node(V)
    n = samples_for_tv(tv, V - 1, alpha=alpha, power=power)
    sampler = NodeSampler(resispec.get_verifier(name), p, q, k)
    import resource

    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0, c0 = time.perf_counter(), time.process_time()
    cert = certify_sampler(sampler, p, n, alpha=alpha, seed=0, power=power, workers=workers)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu += (kids.ru_utime - kids0.ru_utime) + (kids.ru_stime - kids0.ru_stime)  # forked workers
    return {"verifier": name, "V": V, "k": k, "n": n, "path": sampler.path, "workers": workers,
            "wall_s": wall, "cpu_s": cpu,
            "detectable_tv": cert.detectable_tv, "df": cert.df, "passed": cert.passed, "pvalue": cert.pvalue,
            "tv_estimate": cert.tv_estimate, "target_tv": tv, "alpha": alpha, "power": power}


def throughput(name: str, V: int, k: int, n_table: int, n_generic: int) -> dict:
    p, q = _node(V)
    v = resispec.get_verifier(name)
    out = {"verifier": name, "V": V, "k": k}
    for path, fast, n in (("table", True, n_table), ("generic", False, n_generic)):
        s = NodeSampler(v, p, q, k, fast=fast)
        s(np.random.default_rng(1), min(n, 256))  # warm-up
        c0 = time.process_time()
        w0 = time.perf_counter()
        s(np.random.default_rng(2), n)
        out[f"{path}_tokens_per_s_cpu"] = n / (time.process_time() - c0)
        out[f"{path}_tokens_per_s_wall"] = n / (time.perf_counter() - w0)
        out[f"{path}_n"] = n
    out["ratio_cpu"] = out["table_tokens_per_s_cpu"] / out["generic_tokens_per_s_cpu"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller runs (TV 1e-2 instead of 1e-3)")
    ap.add_argument("--out", type=Path, default=Path("reports/bench_harness.md"))
    ap.add_argument("--workers", type=int, default=2, help="processes for the power run (default 2 = 2 cores)")
    args = ap.parse_args(argv)
    tv = 1e-2 if args.quick else 1e-3
    pw = [power_target(name, 1000, 4, tv, 1e-3, 0.99, w) for name in ("rrs", "resispec")
          for w in sorted({1, args.workers})]
    tp = [throughput(name, 32000, 4, 200_000 if args.quick else 1_000_000, 100 if args.quick else 500)
          for name in ("rrs", "resispec")]
    L = ["# Harness speed and power", "",
         f"Command: `python benchmarks/bench_harness.py{' --quick' if args.quick else ''}` "
         "(wall time depends on machine load, CPU time much less; the CPU time of a "
         "multi-worker run sums all its processes).", "",
         f"## Detectable TV {tv:g} at alpha 1e-3, power 0.99, one node V = 1000, k = 4 (target: 60 s)", "",
         "| verifier | samples | path | workers | wall s | CPU s | detectable TV reached | df | verdict | p |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in pw:
        L.append(f"| `{r['verifier']}` | {r['n']:,} | {r['path']} | {r['workers']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                 f"{r['detectable_tv']:.2e} | {r['df']} | {'pass' if r['passed'] else 'FAIL'} | {r['pvalue']:.3f} |")
    L += ["", "## Sampling throughput at V = 32000, k = 4 (tokens per CPU second)", "",
          "| verifier | table path | generic path (batched verify) | ratio |", "|---|---|---|---|"]
    for r in tp:
        L.append(f"| `{r['verifier']}` | {r['table_tokens_per_s_cpu']:,.0f} | "
                 f"{r['generic_tokens_per_s_cpu']:,.0f} | {r['ratio_cpu']:,.0f}x |")
    text = "\n".join(L) + "\n"
    print(text)
    atomic_write(args.out, text)
    atomic_write(args.out.with_suffix(".json"), json.dumps({"power": pw, "throughput": tp}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
