"""ResiSpec for without-replacement drafts certified at V = 151,936 to TV <= 1e-3: ``exactness.certify_stepwise``.

For each node, side by side in one run: ``certify_stepwise(get_verifier("resispec",
drafting="without_replacement"), p, q, 4, tv=1e-3, workers=W)`` for W = 1 and 2 processes -- the verdict,
draws, distinct states checked (each an O(V) ``step_plan`` and balance check; per worker), events, the
largest balance error, the TV bound at confidence 1 - 1e-3, wall seconds, CPU seconds of this process (W = 1),
and the wall time as a fraction of the 5-minute target of issue 12.

Nodes (V = 151,936, Qwen2.5's vocabulary):

- ``zipf``: ``p`` Zipf(1), ``q = 0.7 p + 0.3 perm(p)`` (the node of ``benchmarks/fast_paths.py``);
- ``softmax-T``: ``p = softmax(z / T)``, ``q = softmax((z + e) / T)``, ``z ~ 3 N(0, 1)``, ``e ~ N(0, 1)``
  (seed 0): a draft that disagrees with the target token by token; T = 0.7 is peaked, T = 1.5 flat (more
  rejections, more distinct states).

Usage::

    python benchmarks/stepwise_wor.py [--nodes zipf,softmax-0.7,softmax-1.5] [--workers 1,2] [--tv 1e-3]
                                      [--out reports/stepwise_wor.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exactness.stepwise import certify_stepwise  # noqa: E402
from resispec import get_verifier  # noqa: E402

V = 151_936
K = 4
TARGET_S = 300.0


def zipf_node():
    """The node of ``benchmarks/fast_paths.py``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fast_paths import node

    return node(V)


def softmax_node(T: float):
    """``softmax(z / T)``, ``softmax((z + e) / T)`` (V,) float64 each, seed 0."""
    rng = np.random.default_rng(0)
    z = 3.0 * rng.standard_normal(V)
    e = rng.standard_normal(V)

    def sm(x):
        x = np.exp(x - x.max())
        return x / x.sum()

    return sm(z / T), sm((z + e) / T)


def make_node(name: str):
    if name == "zipf":
        return zipf_node()
    if name.startswith("softmax-"):
        return softmax_node(float(name.split("-", 1)[1]))
    raise ValueError(f"--nodes: unknown node {name!r}; use zipf or softmax-T (e.g. softmax-0.7)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="zipf,softmax-0.7,softmax-1.5", help="comma-separated nodes")
    ap.add_argument("--tv", type=float, default=1e-3, help="TV bound to certify (default 1e-3)")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts, run side by side (default 1,2)")
    ap.add_argument("--out", default=None, help="write the table as Markdown here")
    args = ap.parse_args(argv)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    v = get_verifier("resispec", drafting="without_replacement")
    rows = []
    for name in args.nodes.split(","):
        p, q = make_node(name.strip())
        for w in (int(x) for x in args.workers.split(",")):
            t0, c0 = time.time(), time.process_time()
            c = certify_stepwise(v, p, q, K, tv=args.tv, seed=0, workers=w)
            wall, cpu = time.time() - t0, time.process_time() - c0
            rows.append(f"| {name} | {w} | {c.verdict} | {c.n:,} | {c.states:,} | {c.events} | {c.largest_defect:.1g} | "
                        f"{c.tv_upper:.3g} | {wall:.0f} s | {f'{cpu:.0f} s' if w == 1 else '-'} | {wall / TARGET_S:.2f} |")
            print(rows[-1], flush=True)
    argv_txt = " ".join(sys.argv[1:] if argv is None else argv)
    text = "\n".join([
        f"# ResiSpec WOR at V = {V:,}: stepwise certificate to TV <= {args.tv:g}", "",
        f"Command: `python benchmarks/stepwise_wor.py {argv_txt}`".rstrip() + f" (k = {K}; load average at the start "
        f"{load}).", "",
        "| node | workers | verdict | draws | states checked | events | largest balance error | TV <= (conf. 0.999) | "
        "wall | CPU (this process) | wall / 5 min |", "|---|---|---|---|---|---|---|---|---|---|---|", *rows, ""])
    if args.out:
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
