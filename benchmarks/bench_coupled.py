"""Coupled certification benchmark.

Usage: python benchmarks/bench_coupled.py [--V 50 32000 151936] [--out reports/coupled.md]
"""

import argparse
import json
import sys
from pathlib import Path

from resispec.bench.coupled import run

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--V", type=int, nargs="+", default=[50, 32_000, 151_936])
ap.add_argument("--k", type=int, default=2)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per coupled run")
ap.add_argument("--correct-limit", type=float, default=60.0, help="seconds for the shared-node correct run per V")
ap.add_argument("--per-row-limit", type=float, default=20.0, help="seconds for the O(V)-per-row correct run per V")
ap.add_argument("--out", default="reports/coupled.md")
a = ap.parse_args()
res = run(tuple(a.V), k=a.k, seed=a.seed, time_limit=a.time_limit, correct_limit=a.correct_limit,
          per_row_limit=a.per_row_limit)
md = res.to_markdown(" ".join(["python benchmarks/bench_coupled.py"] + sys.argv[1:]))
print(md)
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
Path(a.out).write_text(md)
Path(a.out).with_suffix(".json").write_text(json.dumps(res.to_json(), indent=1))
