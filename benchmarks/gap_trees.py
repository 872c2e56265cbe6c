"""Tree block efficiency with the without-replacement ResiSpec on every `wor:` shape.

`resispec bench` adds `resispec(drafting="without_replacement")` automatically but caps it at 4 candidates
per node (its Monte Carlo acceptance is ~40x `rrs_wor`'s).  This script lifts the cap to 16 and runs the
tree benchmark on the shapes of the issue-6 report:

    python benchmarks/gap_trees.py            # -> reports/bench_gap_trees.md + .json
"""

import sys

from resispec.cli import main
from resispec.bench.trees import BenchVerifier, register_bench_verifier

register_bench_verifier(BenchVerifier("resispec_wor", "resispec", {"drafting": "without_replacement"},
                                      drafting="without_replacement", role="candidate", max_k=16, n_samples=32))
args = sys.argv[1:] or ["--families", "softmax_noise", "zipf", "shifted", "--shapes", "4,2,2,1", "8,4", "16",
                        "wor:4,2,2,1", "wor:8,4", "wor:16", "--n", "8", "--out", "reports/bench_gap_trees.md",
                        "--no-progress"]
sys.exit(main(["bench", *args]))
