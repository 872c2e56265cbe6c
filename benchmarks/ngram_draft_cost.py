"""A cheap draft on the real target: cost per drafted level vs a target pass, single-draft acceptance at T = 1.

    python3 benchmarks/ngram_draft_cost.py --prompts 3 --max-new-tokens 32 --out reports/ngram_draft.md
    python3 benchmarks/ngram_draft_cost.py --draft head --prompts 3 --max-new-tokens 32 --out reports/head_draft.md

Needs the real target (``resispec models fetch qwen2.5-coder-1.5b``); builds the draft once (cached): the n-gram
(``ngram``) or the feature head (``head``, :mod:`resispec.decoding.feature`, which reads the target's features).
Measured in one run, on this machine:

- target pass time: 1 new token, and a 4-node tree, on top of the cached first prompt (median of 8 each);
- draft level time: the draft's laws for 1 node (the root) and for a 4-node level (median of 20 each);
- single-draft acceptance at T = 1 on the target's own samples (``sps``, tree ``1``): the exact per-node
  acceptance ``sum(min(p, q))`` (mean and s.e. over the visited nodes) and the empirical acceptance rate.

Writes the markdown report and a strict JSON beside it (atomically).  Keep runs short on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT_DIR))


def median_time(fn, n: int) -> float:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="ngram", help="draft spec (default ngram)")
    ap.add_argument("--prompts", type=int, default=3, help="HumanEval prompts (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("ngram_draft.md"), help="markdown report (JSON beside it)")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.max_new_tokens < 1 or args.threads < 1:
        ap.error("--prompts, --max-new-tokens and --threads must be >= 1")
    from resispec._io import atomic_write, check_report_path

    check_report_path(args.out, "--out")
    import torch

    torch.set_num_threads(args.threads)
    from resispec import get_verifier
    from resispec.decoding.engine import speculative_decode
    from resispec.decoding.kv import CachedModel
    from resispec.decoding.laws import SamplingConfig
    from resispec.decoding.pair import load_pair
    from resispec.decoding.prompts import load_prompts
    from resispec.decoding.tree import ROOT, DraftTree

    t0 = time.perf_counter()
    pair = load_pair(draft=args.draft, device="cpu", progress=True)
    print(f"loaded in {time.perf_counter() - t0:.0f} s: {pair.draft.name}", file=sys.stderr)
    texts = load_prompts("humaneval")[:args.prompts]
    S = SamplingConfig(1.0)
    ids = pair.encode(texts[0])
    feats = bool(getattr(pair.draft, "needs_target_features", False))
    P = CachedModel(pair.target, keep_features=feats)
    P.forward(ids, np.arange(len(ids)), np.tril(np.ones((len(ids), len(ids)), dtype=bool)))
    P.commit(range(len(ids)))
    s = pair.draft.session(S)
    if feats:  # a feature-reading draft times its real laws, not its no-feature floor law
        s.observe_target(P.features[-2])

    def target_pass(n):
        P.forward(ids[-n:], [len(ids)] * n, np.eye(n, dtype=bool))
        P.commit([])  # drop the probe tokens again
    tp1, tp4 = median_time(lambda: target_pass(1), 8), median_time(lambda: target_pass(4), 8)
    tree = DraftTree()
    nodes = [tree.add(ROOT, t) for t in ids[-4:]]
    d1, d4 = median_time(lambda: s.level(ids, tree, [ROOT]), 20), median_time(lambda: s.level(ids, tree, nodes), 20)
    acc, emp = [], []
    for i, text in enumerate(texts):
        r = speculative_decode(pair.target, pair.draft, pair.encode(text), get_verifier("sps"), "1", sampling=S,
                               max_new_tokens=args.max_new_tokens, rng=np.random.default_rng([0, i]), record=True)
        acc += [float(np.minimum(n["p"], n["q"]).sum()) for n in r.nodes]
        emp += r.accepted
        print(f"prompt {i}: {r.block_efficiency:.3f} tokens per target call", file=sys.stderr)
    out = {"draft": pair.draft.name, "target": pair.target_name, "threads": args.threads,
           "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "temperature": 1.0,
           "target_ms_1token": 1000 * tp1, "target_ms_4node_tree": 1000 * tp4,
           "draft_ms_level_1node": 1000 * d1, "draft_ms_level_4nodes": 1000 * d4,
           "cost_fraction_1node": d1 / tp1, "cost_fraction_4nodes": d4 / tp4,
           "alpha_exact_mean": float(np.mean(acc)), "alpha_exact_se": float(np.std(acc, ddof=1) / np.sqrt(len(acc)))
           if len(acc) > 1 else None, "nodes": len(acc), "accept_rate_empirical": float(np.mean(emp)),
           "target_calls": len(emp), "command": "python3 " + " ".join(sys.argv)}
    md = "\n".join([
        f"# The draft `{out['draft']}` on the real target: cost per drafted level and single-draft acceptance", "",
        f"Command: `{out['command']}`", "",
        f"Target `{out['target']}` (CPU float32, {args.threads} thread(s), shared machine), draft `{out['draft']}`; "
        f"HumanEval prompts 0-{args.prompts - 1}, {args.max_new_tokens} new tokens, T = 1, `sps`, tree `1`.", "",
        "| quantity | value |", "|---|---|",
        f"| target pass, 1 token (median of 8) | {out['target_ms_1token']:.1f} ms |",
        f"| target pass, 4-node tree (median of 8) | {out['target_ms_4node_tree']:.1f} ms |",
        f"| draft level, 1 node (median of 20) | {out['draft_ms_level_1node']:.2f} ms |",
        f"| draft level, 4 nodes (median of 20) | {out['draft_ms_level_4nodes']:.2f} ms |",
        f"| draft cost / target pass, 1 node | {100 * out['cost_fraction_1node']:.2f} % |",
        f"| draft cost / target pass, 4 nodes | {100 * out['cost_fraction_4nodes']:.2f} % |",
        f"| exact acceptance sum(min(p, q)), mean ± s.e. over {len(acc)} nodes | "
        f"{out['alpha_exact_mean']:.3f} ± {out['alpha_exact_se'] or 0:.3f} |",
        f"| empirical acceptance rate ({len(emp)} target calls) | {out['accept_rate_empirical']:.3f} |", ""])
    atomic_write(args.out.with_suffix(".json"), json.dumps(out, indent=1, allow_nan=False))
    atomic_write(args.out, md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
