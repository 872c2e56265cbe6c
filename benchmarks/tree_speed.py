"""Exact tree block efficiency vs Monte Carlo tree decoding, 64-node trees at V = 32000.

Prints, side by side per (shape, verifier): the exact expected block
efficiency and its wall time, a Monte Carlo estimate from decoding
``--mc`` sequences and its wall time, and the time ratio MC / exact.  The
speed target (issue 4) is exact < 1 s per 64-node tree at V = 32000.

    python benchmarks/tree_speed.py            # writes reports/tree_speed.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import resispec  # noqa: E402
from resispec.trees import TreeShape  # noqa: E402
from simulators import get_family  # noqa: E402
from simulators._io import write_text  # noqa: E402
from simulators.autoregressive import StaticPair  # noqa: E402
from simulators.trees import block_efficiency, decode_tree  # noqa: E402

SHAPES = ["4,3,4", "8,7", "64", ",".join(["1"] * 64)]
VERIFIERS = ["rrs", "kseq", "target_only", "resispec"]   # closed-form per-token acceptance (iid drafting)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, default=32000)
    ap.add_argument("--mc", type=int, default=50, help="Monte Carlo sequences per configuration")
    ap.add_argument("--family", default="softmax_noise")
    ap.add_argument("--out", default="reports/tree_speed.md")
    ap.add_argument("--solver", default="auto", choices=["auto", "fused", "newton", "sort"],
                    help="ResiSpec reserve solver (both exact; sort = the O(V log V) reference)")
    ap.add_argument("--shapes", default=None, help="';'-separated tree shapes (default: the four below)")
    args = ap.parse_args(argv)
    from resispec._reserve_fused import warmup

    warmup()   # one-time JIT compile / cache load of the reserve kernel, outside the timings
    rng = np.random.default_rng(0)
    p, q = get_family(args.family).sample(rng, n=1, V=args.V)
    pair = StaticPair(p[0], q[0])
    lines = [f"# Tree block efficiency: exact recursion vs Monte Carlo decoding (V = {args.V}, `{args.family}`)", "",
             f"Command: `python benchmarks/tree_speed.py --V {args.V} --mc {args.mc} "
             f"--solver {args.solver}`", "",
             "Exact = `simulators.trees.block_efficiency` on a static pair (the same (p, q) at every node), "
             "closed-form per-token acceptance. "
             f"MC = `decode_tree` with {args.mc} sequences (one block each). Without-replacement verifiers "
             "(`rrs_wor`) have no closed form: at this V their per-node acceptance needs Monte Carlo.", "",
             "| shape | nodes | verifier | exact tokens/call | exact s | MC tokens/call (± se) | MC s | MC s / exact s |",
             "|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for spec in (SHAPES if args.shapes is None else args.shapes.split(";")):
        for name in VERIFIERS:
            v = (resispec.get_verifier(name, solver=args.solver) if name == "resispec"
                 else resispec.get_verifier(name))
            shape = TreeShape.parse(spec, "iid")
            t = time.perf_counter()
            e = block_efficiency(v, shape, pair)
            te = time.perf_counter() - t
            worst = max(worst, te)
            t = time.perf_counter()
            d = decode_tree(v, shape, pair, rng, n=args.mc, n_tokens=1)
            tm = time.perf_counter() - t
            label = "1x64 chain" if spec.count(",") > 10 else spec
            row = (f"| `{label}` | {shape.num_nodes} | `{name}` | {e.block_efficiency:.4f}"
                   f"{' ± %.4f' % e.stderr if e.stderr else ''} | {te:.3f} | {d.block_efficiency:.3f} ± {d.stderr:.3f} | "
                   f"{tm:.2f} | {tm / te:.0f}x |")
            print(row, flush=True)
            lines.append(row)
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines += ["", f"Slowest exact (closed-form) computation: **{worst:.3f} s** (target < 1 s); "
              f"1-minute load average at the end {load:.1f} on {os.cpu_count()} cores.", ""]
    write_text(args.out, "\n".join(lines))
    print(f"slowest exact closed-form: {worst:.3f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
