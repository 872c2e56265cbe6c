"""Target pass cost vs new tokens, torch's F.linear vs the small-batch linear, side by side in one run.

    python3 benchmarks/cpu_linear.py --out reports/cpu_linear.md

Needs the real target (``resispec models fetch qwen2.5-coder-1.5b``) or ``--model PATH``.  On top of a cached
prompt of ``--prefix`` tokens it times one forward of T new tokens (T = 1, 2, 4, 8, 16; a chain mask) with the
model's linear layers as torch leaves them (``torch``) and rewritten as ``W @ x.T``
(``small-batch``, :mod:`resispec.decoding.cpu_linear`).  Kinds and sizes are interleaved call by call, in a
rotated order, so load drift on a shared machine hits both alike; each cell is the median of ``--repeats``.
Every time is printed as a ratio to the 1-token ``torch`` pass of the same run (what target-only decoding
pays per token); the table also gives the largest logit difference between the two kinds.

Writes the markdown report and a strict JSON beside it (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT_DIR))

SIZES = (1, 2, 4, 8, 16)
KINDS = ("torch", "small-batch")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="built-in name or local path (default the target)")
    ap.add_argument("--prefix", type=int, default=200, help="cached prompt tokens (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per cell (default 5)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    ap.add_argument("--out", type=Path, default=Path("cpu_linear.md"), help="markdown report (JSON beside it)")
    args = ap.parse_args(argv)
    if args.prefix < 1 or args.repeats < 1 or args.threads < 0:
        ap.error("--prefix and --repeats must be >= 1, --threads >= 0")
    from resispec._io import atomic_write, check_output_path

    check_output_path(args.out, "--out")
    check_output_path(args.out.with_suffix(".json"), "--out (its .json)")
    import torch

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    from resispec.decoding import cpu_linear
    from resispec.decoding.kv import CachedModel
    from resispec.decoding.models import load_model

    model, _ = load_model(args.model, device="cpu", linear="torch")
    small_cls = cpu_linear._small_batch_linear_class()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]

    def set_kind(kind):
        for m in linears:
            m.__class__ = torch.nn.Linear if kind == "torch" else small_cls

    prompt = list(range(1000, 1000 + args.prefix))
    P = CachedModel(model)
    P.forward(prompt, np.arange(args.prefix), np.tril(np.ones((args.prefix, args.prefix), dtype=bool)))
    P.commit(range(args.prefix))
    new = list(range(2000, 2000 + max(SIZES)))

    def one(kind, T):
        set_kind(kind)
        t = time.perf_counter()
        logits = P.forward(new[:T], np.arange(args.prefix, args.prefix + T), np.tril(np.ones((T, T), dtype=bool)))
        dt = time.perf_counter() - t
        P.commit([])  # drop the probe tokens again
        return dt, logits

    cells = [(k, T) for T in SIZES for k in KINDS]
    times = {c: [] for c in cells}
    diff = {T: 0.0 for T in SIZES}
    one("torch", 1)  # warm-up
    for r in range(args.repeats):
        order = cells[r % len(cells):] + cells[:r % len(cells)]  # rotated order each round
        out = {}
        for c in order:
            dt, out[c] = one(*c)
            times[c].append(dt)
        for T in SIZES:
            diff[T] = max(diff[T], float((out[("torch", T)] - out[("small-batch", T)]).abs().max()))
        print(f"round {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    base = float(np.median(times[("torch", 1)]))
    rows = []
    for T in SIZES:
        med = {k: float(np.median(times[(k, T)])) for k in KINDS}
        spread = {k: [float(min(times[(k, T)])) / base, float(max(times[(k, T)])) / base] for k in KINDS}
        rows.append({"tokens": T, "torch": med["torch"] / base, "small_batch": med["small-batch"] / base,
                     "torch_range": spread["torch"], "small_batch_range": spread["small-batch"],
                     "speedup": med["torch"] / med["small-batch"], "max_logit_diff": diff[T]})
    load = os.getloadavg()[0]
    head = (f"# Target pass cost vs new tokens: torch F.linear vs the small-batch linear\n\n"
            f"Command: `python3 benchmarks/cpu_linear.py --out {args.out}` (model `{args.model}`, CPU float32, "
            f"{torch.get_num_threads()} thread(s), {args.prefix} cached tokens, median of {args.repeats} interleaved "
            f"calls per cell, load average {load:.1f} at the end).\n\n"
            "Each time is a ratio to the median 1-token `torch` pass of the same run (the cost target-only decoding "
            "pays per token); brackets give min-max over the repeats.\n\n"
            "| new tokens | torch F.linear | small-batch | torch / small-batch | max logit difference |\n|---|---|---|---|---|\n")
    body = "".join(f"| {r['tokens']} | {r['torch']:.2f} [{r['torch_range'][0]:.2f}-{r['torch_range'][1]:.2f}] | "
                   f"{r['small_batch']:.2f} [{r['small_batch_range'][0]:.2f}-{r['small_batch_range'][1]:.2f}] | "
                   f"{r['speedup']:.2f}x | {r['max_logit_diff']:.1e} |\n" for r in rows)
    md = head + body + (f"\nThe 1-token `torch` pass took {base * 1e3:.0f} ms here (absolute times move with load; the "
                        "ratios are what to read). `resispec` uses `small-batch` for 2-64 tokens on CPU float32 and "
                        "torch's GEMV for one token (`--linear auto`, the default).\n")
    atomic_write(args.out, md)
    atomic_write(args.out.with_suffix(".json"), json.dumps(
        {"model": args.model, "threads": torch.get_num_threads(), "prefix": args.prefix, "repeats": args.repeats,
         "one_token_torch_seconds": base, "load_average": load, "rows": rows}, indent=1, allow_nan=False))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
