"""Target pass cost vs new tokens, by linear kernel and weight dtype, side by side in one run.

    python3 benchmarks/cpu_linear.py --out reports/cpu_linear.md

Needs the real target (``resispec models fetch qwen2.5-coder-1.5b``) or ``--model PATH``.  On top of a cached
prompt of ``--prefix`` tokens it times one forward of T new tokens (T = 1, 2, 4, 8, 16; a chain mask) with the
model's linear layers as torch leaves them (``torch``), rewritten as ``W @ x.T``
(``small-batch``, :mod:`resispec.decoding.cpu_linear`), by the compiled kernel that reads each weight block once
(``streamed``) and with bfloat16 weights (``bf16``; ``--kinds``).  Kinds and sizes are interleaved call by call, in a
rotated order, so load drift on a shared machine hits both alike; each cell is the median of ``--repeats``.
Every time is printed as a ratio to the 1-token ``torch`` pass of the same run (what target-only decoding
pays per token) and to the kind's own 1-token pass; the report also gives the largest logit difference to
the reference kind and, per kind, the batch invariance: the TV between a position's law inside an 8-token
pass and in a 1-token pass.

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
#: kind -> (weight dtype, linear kernel, description)
KINDS = {
    "torch": ("float32", "torch", "float32 weights, torch's F.linear"),
    "small-batch": ("float32", "small-batch", "float32 weights, W @ x.T for 2-64 rows"),
    "streamed": ("float32", "streamed", "float32 weights, the compiled kernel reading each weight block once for "
                 "1-12 rows (resispec's default on CPU float32)"),
    "bf16": ("bfloat16", "torch", "bfloat16 weights and activations, torch's kernels (oneDNN)"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b", help="built-in name or local path (default the target)")
    ap.add_argument("--prefix", type=int, default=200, help="cached prompt tokens (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per cell (default 5)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = all cores)")
    ap.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS),
                    help="kernels / dtypes to compare; the first is the reference (default: all)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                    help=f"new tokens per pass to time, 1 first (default {' '.join(map(str, SIZES))})")
    ap.add_argument("--out", type=Path, default=Path("cpu_linear.md"), help="markdown report (JSON beside it)")
    args = ap.parse_args(argv)
    if sorted(set(args.sizes)) != args.sizes or args.sizes[0] != 1:
        ap.error("--sizes must be increasing distinct token counts starting at 1, e.g. --sizes 1 2 3 4 8")
    sizes = tuple(args.sizes)
    if args.prefix < 1 or args.repeats < 1 or args.threads < 0:
        ap.error("--prefix and --repeats must be >= 1, --threads >= 0")
    from resispec._io import atomic_write, check_report_path

    check_report_path(args.out, "--out")
    import torch

    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    from resispec.decoding import cpu_linear
    from resispec.decoding.kv import CachedModel
    from resispec.decoding.models import load_model

    kinds = list(dict.fromkeys(args.kinds))
    small_cls = cpu_linear._small_batch_linear_class()
    streamed_cls = cpu_linear._streamed_linear_class()
    classes = {"torch": torch.nn.Linear, "small-batch": small_cls, "streamed": streamed_cls}
    prompt = list(range(1000, 1000 + args.prefix))
    new = list(range(2000, 2000 + max(max(sizes), 8)))  # 8: the batch-invariance probe
    fp32, P = None, {}
    for k in kinds:
        if KINDS[k][0] == "float32" and fp32 is not None:
            P[k] = fp32  # the float32 kinds share one model (the class is switched)
            continue
        model, _ = load_model(args.model, device="cpu", dtype=KINDS[k][0], linear="torch")
        P[k] = CachedModel(model)
        P[k].forward(prompt, np.arange(args.prefix), np.tril(np.ones((args.prefix, args.prefix), dtype=bool)))
        P[k].commit(range(args.prefix))
        if KINDS[k][0] == "float32":
            fp32 = P[k]
    linears = {id(m): [x for x in m.model.modules() if type(x) in tuple(classes.values())] for m in P.values()}

    def set_kind(kind):
        for m in linears[id(P[kind])]:
            m.__class__ = classes[KINDS[kind][1]]

    def one(kind, T):
        set_kind(kind)
        t = time.perf_counter()
        logits = P[kind].forward(new[:T], np.arange(args.prefix, args.prefix + T), np.tril(np.ones((T, T), dtype=bool)))
        dt = time.perf_counter() - t
        P[kind].commit([])  # drop the probe tokens again
        return dt, logits

    def batch_tv(kind, T=8):
        """Largest TV between the laws of one T-token pass and of T sequential 1-token passes (same contexts)."""
        _, big = one(kind, T)
        seq = []
        for i in range(T):
            set_kind(kind)
            seq.append(P[kind].forward([new[i]], np.arange(args.prefix + i, args.prefix + i + 1),
                                       np.ones((1, 1), dtype=bool))[-1])
            P[kind].commit([0])  # keep it: the next position sees it
        P[kind].commit([])
        P[kind].length = args.prefix
        P[kind].commit([])
        pb, ps = torch.softmax(big.double(), -1), torch.softmax(torch.stack(seq).double(), -1)
        return float(0.5 * (pb - ps).abs().sum(-1).max())  # TV = 1/2 sum |p - p'| per position, max over positions

    cells = [(k, T) for T in sizes for k in kinds]
    times = {c: [] for c in cells}
    ref = kinds[0]
    diff = {(k, T): 0.0 for k in kinds for T in sizes}
    for k in kinds:
        one(k, 1)  # warm-up
    for r in range(args.repeats):
        order = cells[r % len(cells):] + cells[:r % len(cells)]  # rotated order each round
        out = {}
        for c in order:
            dt, out[c] = one(*c)
            times[c].append(dt)
        for k, T in cells:
            diff[(k, T)] = max(diff[(k, T)], float((out[(k, T)].float() - out[(ref, T)].float()).abs().max()))
        print(f"round {r + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    tvs = {k: batch_tv(k) for k in kinds}
    base = float(np.median(times[(ref, 1)]))
    rows = []
    for T in sizes:
        row = {"tokens": T}
        for k in kinds:
            ts = times[(k, T)]
            row[k] = {"ratio": float(np.median(ts)) / base, "range": [float(min(ts)) / base, float(max(ts)) / base],
                      "per_own_1_token": float(np.median(ts)) / float(np.median(times[(k, 1)])),
                      "max_logit_diff_vs_" + ref: diff[(k, T)]}
        rows.append(row)
    load = os.getloadavg()[0]
    head = (f"# Target pass cost vs new tokens, by kernel and weight dtype\n\n"
            f"Command: `python3 benchmarks/cpu_linear.py --kinds {' '.join(kinds)} --threads {args.threads} "
            f"--repeats {args.repeats} --prefix {args.prefix} --sizes {' '.join(map(str, sizes))} --out {args.out}` (model "
            f"`{args.model}`, CPU, {torch.get_num_threads()} thread(s), {args.prefix} cached tokens, median of "
            f"{args.repeats} interleaved calls per cell, load average {load:.1f} at the end).\n\n"
            f"Each time is a ratio to the median 1-token `{ref}` pass of the same run (the cost target-only decoding "
            "pays per token); brackets give min-max over the repeats; `(xN)` is the ratio to the kind's OWN 1-token "
            "pass (what a tree of N-1 drafted nodes costs that kind's speculative decoding per call).\n\n"
            "Kinds: " + "; ".join(f"`{k}` = {KINDS[k][2]}" for k in kinds) + ".\n\n"
            "| new tokens | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds) + "\n")
    body = "".join(f"| {r['tokens']} | " + " | ".join(
        f"{r[k]['ratio']:.2f} [{r[k]['range'][0]:.2f}-{r[k]['range'][1]:.2f}] (x{r[k]['per_own_1_token']:.2f})"
        for k in kinds) + " |\n" for r in rows)
    md = head + body + ("\nBatch invariance: the largest TV between a position's law computed inside one 8-token pass "
                        "and in a 1-token pass (same context): " + "; ".join(f"`{k}` {tvs[k]:.1e}" for k in kinds)
                        + ". Speculative decoding samples from the laws of its tree passes, target-only decoding from "
                        "1-token passes; in float32 the two agree to ~1e-6, in bfloat16 they differ by bf16 rounding "
                        "(each run is exact for the laws it computes; docs/decoding.md).\n"
                        + f"\nLargest logit difference to `{ref}` over every pass size: "
                        + "; ".join(f"`{k}` {max(diff[(k, T)] for T in sizes):.1e}" for k in kinds)
                        + f". The 1-token `{ref}` pass took {base * 1e3:.0f} ms here (absolute times move with load; "
                        "the ratios are what to read). `resispec` uses `streamed` for 1-12 tokens on CPU float32 when numba "
                        "is installed (`--linear auto`, the default; `small-batch` without numba); bfloat16 "
                        "(`--dtype bfloat16`) uses torch's kernels.\n")
    atomic_write(args.out, md)
    atomic_write(args.out.with_suffix(".json"), json.dumps(
        {"model": args.model, "threads": torch.get_num_threads(), "prefix": args.prefix, "repeats": args.repeats,
         "kinds": kinds, "reference": ref, "one_token_reference_seconds": base, "load_average": load,
         "batch_invariance_tv": tvs, "rows": rows}, indent=1, allow_nan=False))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
