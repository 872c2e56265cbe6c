"""Certify this project's engine on the real Qwen pair within a time budget; state the detectable TV reached.

Opt-in (needs ``resispec models fetch``: the real pair and HumanEval in the user cache; nothing is
downloaded here).  The decoder is ``exactness.adapters.engine.EngineDecoder`` (``speculative_decode``
with a registry verifier on a tree) over Qwen2.5-Coder 0.5B -> 1.5B; the target law is
``engine_target`` (the 1.5B model's next-token law after the same ``SamplingConfig``).  At
V = 151,936 nothing enumerates, so ``exactness.certify_decoder`` runs its PIT checks (token-id,
argmax and draft-ratio orders) at every position; the detectable TV per position at power 0.99 is
``exactness.detectable_tv(P * n, df=15)`` for the 16-bin PIT law.

The budget is split: a pilot of ``--pilot`` continuations per prompt measures seconds per
continuation (decoding plus the harness's target calls), then ``n`` per prompt is chosen so the
whole run fits ``--budget`` seconds.  The report states the measured rates and the machine load.

    python benchmarks/decoder_budget_realpair.py [--budget 600] [--prompts 4] [--prompt-len 24]
        [--new-tokens 3] [--verifier rrs] [--tree 2,1] [--out reports/decoder_budget_realpair.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _prompts(pair, P: int, L: int) -> np.ndarray:
    """The last ``L`` tokens of the first ``P`` HumanEval prompts (equal lengths, as the contract asks)."""
    from resispec.decoding.prompts import load_prompts

    rows = []
    for text in load_prompts("humaneval", download=False):
        ids = pair.encode(text)
        if len(ids) >= L:
            rows.append(ids[-L:])
        if len(rows) == P:
            break
    if len(rows) < P:
        raise SystemExit(f"only {len(rows)} HumanEval prompts have >= {L} tokens; lower --prompt-len or --prompts")
    return np.asarray(rows, dtype=np.int64)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=600.0, help="seconds for the whole certification (default 600)")
    ap.add_argument("--pilot", type=int, default=3, help="pilot continuations per prompt (default 3)")
    ap.add_argument("--prompts", type=int, default=4, help="HumanEval prompts (default 4)")
    ap.add_argument("--prompt-len", type=int, default=24, help="tokens kept from the end of each prompt (default 24)")
    ap.add_argument("--new-tokens", type=int, default=3, help="tokens per continuation (default 3)")
    ap.add_argument("--verifier", default="rrs", help="registry verifier (default rrs)")
    ap.add_argument("--tree", default="2,1", help="tree shape, 'wor:' prefix for without replacement (default 2,1)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/decoder_budget_realpair.md")
    a = ap.parse_args(argv)
    if a.budget <= 0 or a.pilot < 1 or a.prompts < 1 or a.prompt_len < 1 or a.new_tokens < 1:
        ap.error("--budget, --pilot, --prompts, --prompt-len and --new-tokens must be positive")
    from resispec._io import check_output_path

    check_output_path(a.out, "--out")

    import torch

    import exactness
    from exactness.adapters.engine import EngineDecoder, engine_target
    from resispec.decoding.laws import SamplingConfig
    from resispec.decoding.pair import load_pair

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    pair = load_pair(progress=True)
    t_load = time.perf_counter() - t0
    sampling = SamplingConfig(a.temperature)
    dec = EngineDecoder(pair.target, pair.draft, a.verifier, a.tree, sampling=sampling)
    tgt = engine_target(pair.target, sampling)
    prompts = _prompts(pair, a.prompts, a.prompt_len)

    start = time.perf_counter()
    try:  # the pilot times the whole certification; at its tiny n it may have no degree of freedom
        exactness.certify_decoder(dec, tgt, prompts, new_tokens=a.new_tokens, n=a.pilot, alpha=1e-3,
                                  seed=2 * a.seed + 1, seeded=False)
    except ValueError as exc:
        if "no degree of freedom" not in str(exc):
            raise
    pilot_s = time.perf_counter() - start
    per = pilot_s / (a.pilot * a.prompts)                        # seconds per continuation, checks included
    left = a.budget - pilot_s
    n = max(a.pilot, int(left / (per * a.prompts)))
    print(f"pilot: {a.pilot * a.prompts} continuations in {pilot_s:.1f} s ({per:.2f} s each, load {load0:.1f}); "
          f"main run: n = {n} per prompt, about {n * a.prompts * per:.0f} s", flush=True)
    t1 = time.perf_counter()
    try:
        cert = exactness.certify_decoder(dec, tgt, prompts, new_tokens=a.new_tokens, n=n, alpha=1e-3,
                                         seed=2 * a.seed + 2, seeded=False)
    except ValueError as exc:
        if "no degree of freedom" not in str(exc):
            raise
        print(f"the budget of {a.budget:g} s buys n = {n} continuations per prompt ({per:.1f} s each): no test has "
              f"a degree of freedom at that n, so nothing is certified; give a larger --budget (nothing written)")
        return 1
    main_s = time.perf_counter() - t1
    load1 = os.getloadavg()[0]
    pos = cert.details["positions"]
    def det(x):  # a detectable TV above 1 means no bias of any size is found with power 0.99 yet
        return f"{x:.3f}" if x <= 1 else "> 1 (no power yet)"

    rows = [f"| {d['position']} | {a.prompts * n:,} | {det(d['detectable_tv'])} | {d['tv']:.3f} | {d['pvalue']:.3g} |"
            for d in pos]
    cmd = (f"python benchmarks/decoder_budget_realpair.py --budget {a.budget:g} --prompts {a.prompts} "
           f"--prompt-len {a.prompt_len} --new-tokens {a.new_tokens} --verifier {a.verifier} --tree {a.tree} "
           f"--temperature {a.temperature:g}")
    md = [
        "# Whole-decoder certification of the real pair within a time budget",
        "",
        f"Command: `{cmd}` (2 CPU cores, no GPU; 1-minute load average {load0:.1f} at the start, "
        f"{load1:.1f} at the end: the rates below are those of a shared machine).",
        "",
        f"Decoder: `EngineDecoder({a.verifier}, tree {a.tree}, T = {a.temperature:g})` over Qwen2.5-Coder "
        f"0.5B -> 1.5B (V = {cert.details['plan']['V']:,}); target law: `engine_target` (1.5B, same sampling). "
        f"Prompts: the last {a.prompt_len} tokens of the first {a.prompts} HumanEval prompts, {a.new_tokens} new "
        "tokens each. Nothing enumerates at this V: the checks are the PIT checks at every position "
        "(token-id, argmax and draft-to-target ratio orders), `impossible`, and `single`.",
        "",
        f"Model load {t_load:.0f} s (not in the budget). Pilot {pilot_s:.0f} s ({per:.2f} s per continuation, "
        f"decoding and the harness's target calls); main run {main_s:.0f} s for n = {n} continuations per "
        f"prompt; total {pilot_s + main_s:.0f} s against a budget of {a.budget:g} s.",
        "",
        f"Verdict: **{'PASS' if cert.passed else 'FAIL'}** (smallest Holm-adjusted p-value {cert.pvalue:.3g}, "
        f"alpha = {cert.alpha:g}).",
        "",
        "| position | tokens tested | detectable TV (PIT law, power 0.99) | TV estimate (PIT bins) | smallest p |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "The detectable TV is that of the 16-bin PIT law of each position (see docs/decoders.md, "
        "\"What a PIT-bin test detects\"); it falls like 1/sqrt(tokens), so a 4x longer budget halves it.",
        "",
    ]
    with open(a.out, "w") as f:
        f.write("\n".join(md))
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump({"command": cmd, "load_start": load0, "load_end": load1, "pilot_s": pilot_s, "main_s": main_s,
                   "n_per_prompt": n, "prompts": a.prompts, "passed": cert.passed, "pvalue": cert.pvalue,
                   "positions": pos}, f, indent=2, allow_nan=False)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
