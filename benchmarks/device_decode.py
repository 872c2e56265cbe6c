"""GPU step-time benchmark for tree verification (one command, < 10 minutes on one GPU).

Measures, for the target and the draft architecture, the wall time of ONE
forward pass over 1 new token versus a token tree of N nodes (tree attention
mask, per-node positions) on top of a cached prefix, and the end-to-end
speed-up of tree speculative decoding over target-only decoding.

Weights: the real pair when its safetensors cache is present
(``resispec models fetch``); otherwise randomly initialised models with the
real configurations (``benchmarks/device_configs``) -- step times are then
real, but block efficiency is not, so the end-to-end figure is PROJECTED
from the block efficiency measured on the real pair (``reports/decode.json``)
and labelled so.  Prints one table; writes reports/device_decode.{md,json}.

    python benchmarks/device_decode.py --device cuda --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from resispec.decoding.fetch import model_dir  # noqa: E402
from resispec.decoding.kv import CachedModel  # noqa: E402
from resispec.decoding.tree import ROOT as TREE_ROOT, DraftTree  # noqa: E402


def load(name: str, dtype, device):
    hf = model_dir(name) / "hf"
    from transformers import AutoConfig, AutoModelForCausalLM

    if (hf / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(str(hf), dtype=dtype).to(device).eval(), True
    cfg = json.loads((ROOT / "benchmarks" / "device_configs" / f"{name}.json").read_text())
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval(), False


def tree_of(n: int, branching: int = 4) -> DraftTree:
    """A tree with n nodes: breadth-first, ``branching`` children per node."""
    t = DraftTree()
    queue = [TREE_ROOT]
    while len(t) < n:
        parent = queue.pop(0)
        for _ in range(min(branching, n - len(t))):
            queue.append(t.add(parent, int(np.random.default_rng(len(t)).integers(1000))))
    return t


def sync(device):
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def step_times(model, device, prefix: int, sizes, repeats: int) -> dict:
    """Median seconds of one forward over N tree nodes on a cached prefix."""
    cm = CachedModel(model)
    ids = list(np.random.default_rng(0).integers(0, 1000, prefix))
    cm.forward(ids, np.arange(prefix), np.tril(np.ones((prefix, prefix), bool)))
    cm.commit(range(prefix))
    out = {}
    for n in sizes:
        t = tree_of(n)
        nodes = list(range(n))
        vis = t.visibility(nodes, nodes)
        pos = [prefix - 1 + t.depth[i] for i in nodes]
        times = []
        for r in range(repeats + 2):
            sync(device)
            t0 = time.perf_counter()
            cm.forward(t.tokens, pos, vis)
            sync(device)
            if r >= 2:  # warm-up
                times.append(time.perf_counter() - t0)
            cm.commit([])  # drop the tree again
        out[n] = float(np.median(times))
    return out


def project(data: dict, tt: dict, td: dict, base: int, measured_draft: str | None = None) -> list:
    """Projected end-to-end speed-up of every speculative row of a bench-decode report.

    ``data``: ``reports/decode.json`` -- a summary of several runs (``bench-decode --from-json``: ``"runs"``,
    one per temperature) or one run's report (``"rows"``); ``tt`` / ``td``: target / draft step seconds by
    node count (``base`` the 1-token entry).  ``speed-up = BE * t_target(1) / (t_target(N) + sum over drafted
    levels of t_draft(width))`` per target call, BE the paired exact value where there is one.  A run whose
    draft has no weights (``config["draft_weights"] == 0``: the n-gram draft, a few vector operations on the
    host per level) is projected with a draft cost of 0.  A run whose draft is not ``measured_draft`` (the model
    whose step times ``td`` holds; None: every draft is) but has weights (the feature head, 1.3 % of the
    target) is costed by weights read: ``t_draft = draft_weights / target_weights * t_target(1)`` per level
    (memory-bound, Jeon et al., arXiv 2402.14160).  Each entry names the run's draft and how its cost was
    obtained (``draft_cost``: "measured", "none", "by weights", or "unknown" when a weight count is missing or
    invalid: then ``projected_speedup`` is None).
    """
    from resispec.trees import TreeShape

    runs = data["runs"] if "runs" in data and "rows" not in data else [{"config": data.get("config", {}),
                                                                      "rows": data["rows"]}]
    proj = []
    for run in runs:
        cfg = run.get("config", {})
        dw, tw = cfg.get("draft_weights"), cfg.get("target_weights")
        counted = all(isinstance(w, int) and not isinstance(w, bool) for w in (dw, tw)) and dw >= 0 and tw > 0
        free = dw == 0 and not isinstance(dw, bool)                  # a weightless draft: no device forward
        measured = measured_draft is None or cfg.get("draft") in (None, measured_draft)
        for r in run["rows"]:
            be = r.get("block_efficiency_rb") or r.get("block_efficiency")  # the paired exact value first
            if r["method"] == "autoregressive" or not be:
                continue
            shape = TreeShape.parse(r["tree"])
            nt = min(tt, key=lambda k: abs(k - shape.num_nodes))
            widths, w = [], 1
            for b in shape.branching[:-1]:
                w *= b
                widths.append(w)
            if free:
                draft, how = 0.0, "none"
            elif measured:
                draft, how = td[base] + sum(td[min(td, key=lambda k: abs(k - x))] for x in widths), "measured"
            elif counted:                                            # t_draft = (draft / target weights) t_target(1)
                draft, how = dw / tw * tt[base] * (1 + len(widths)), "by weights"
            else:                                                    # weights not recorded: no projection
                draft, how = None, "unknown"
            proj.append({"temperature": cfg.get("temperature"), "draft": cfg.get("draft"), "draft_cost": how,
                         "method": r["method"], "tree": r["tree"], "block_efficiency_cpu": be,
                         "projected_speedup": None if draft is None else be * tt[base] / (tt[nt] + draft)})
    return proj


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--prefix", type=int, default=256)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="built-in target name")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b", help="built-in draft name")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "device_decode.md")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    res = {"device": args.device, "dtype": args.dtype,
           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "models": {}}
    for name in dict.fromkeys((args.target, args.draft)):
        model, real = load(name, dtype, args.device)
        t = step_times(model, args.device, args.prefix, args.nodes, args.repeats)
        res["models"][name] = {"real_weights": real, "step_seconds": t}
        print(f"{name} ({'real' if real else 'random'} weights): " +
              ", ".join(f"N={n}: {s * 1e3:.2f} ms ({s / t[args.nodes[0]]:.2f}x)" for n, s in t.items()), flush=True)
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    # End-to-end, PROJECTED from block efficiency measured on the real pair (reports/decode.json):
    # tokens/s ratio = BE * t_target(1) / (t_target(N) + depth * t_draft(width) ) per target call.
    rep = ROOT / "reports" / "decode.json"
    tt = res["models"][args.target]["step_seconds"]
    td = res["models"][args.draft]["step_seconds"]
    proj = project(json.loads(rep.read_text()), tt, td, args.nodes[0], args.draft) if rep.is_file() else []
    res["projected_end_to_end"] = proj
    lines = ["# Device step times (tree verification cost) and projected end-to-end speed-up", "",
             f"Device {res['gpu'] or args.device}, {args.dtype}, cached prefix {args.prefix} tokens.", "",
             "| model | weights | " + " | ".join(f"N={n}" for n in args.nodes) + " |",
             "|---|---|" + "---|" * len(args.nodes)]
    for name, m in res["models"].items():
        base = m["step_seconds"][args.nodes[0]]
        lines.append(f"| {name} | {'real' if m['real_weights'] else 'random'} | " +
                     " | ".join(f"{s * 1e3:.2f} ms ({s / base:.2f}x)" for s in m["step_seconds"].values()) + " |")
    if proj:
        lines += ["", "PROJECTED end-to-end speed-up vs target-only (block efficiency from the CPU runs in "
                  "reports/decode.json, per draft, x measured step times here; draft cost: measured = the draft model's "
                  "own step times, none = the n-gram draft (no device forward), by weights = draft / target weights "
                  "x the target's 1-token step, per level):", "",
                  "| T | draft | draft cost | method | tree | block eff. (CPU) | projected speed-up |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {p['temperature']} | {p['draft']} | {p['draft_cost']} | {p['method']} | {p['tree']} | "
                  f"{p['block_efficiency_cpu']:.3f} | "
                  + ("-" if p["projected_speedup"] is None else f"{p['projected_speedup']:.2f}") + " |" for p in proj]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)
    tmpj = args.out.with_suffix(".json.tmp")
    tmpj.write_text(json.dumps(res, indent=2, default=str))
    tmpj.replace(args.out.with_suffix(".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
