"""Audit the installed transformers' speculative decoding paths for exactness (tiny random models, offline).

One path per candidate generator the installed version can run offline on a
tiny randomly initialised model (vocabulary 8, 1-2 layers, hidden 32, fixed
torch seeds, nothing downloaded).  Each path is wrapped as a ``decoder`` by
``exactness.adapters.hf.HFDecoder`` and compared with the target's own law
(``hf_target``: the target's logits after generate's logits processors):

- with ``exactness.certify_decoder`` when this checkout has it;
- else the exact joint law of the first two new tokens (V**2 = 64 sequences,
  enumerated from the target; three, V**3 = 512, for the generators that
  first need the target's outputs) against ``n`` sampled continuations with
  ``exactness.certify_sampler`` (``exactness.adapters.certify_joint``).

The report states which was used, the verdict, p-value, TV estimate (with
its upper bound) and detectable TV per path, the paths that could not run and
why, and the run time.  It reports whatever it finds: a failing path is a
finding about the installed library, not an error of this script.

    python benchmarks/audit_transformers.py [--n 3000] [--seed 0] [--only PATH ...] [--out OUT.md]
    python benchmarks/audit_transformers.py --combine OLD.json NEW.json --out reports/audit_transformers_generators.md

``--combine`` runs nothing: it writes one report from two earlier runs' JSON,
taking every path NEW ran from NEW and the other paths from OLD (both
commands are stated in the report).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import exactness  # noqa: E402
from exactness.adapters import certify_joint  # noqa: E402
from resispec._io import check_output_path, write_markdown_and_json  # noqa: E402

V = 8
PROMPT = np.array([1, 2, 3, 1, 2], dtype=np.int64)  # repeats, so prompt lookup has an n-gram to match
#: Output-head multiplier: random init gives near-uniform laws (little to find); 3 sharpens them (``--scale``).
SCALE = [3.0]
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, tie_word_embeddings=False)


def _seeded(seed, build):
    import torch

    torch.manual_seed(seed)
    model = build()
    with torch.no_grad():  # sharper logits than the default init: the draft differs visibly from the target
        head = model.get_output_embeddings()
        if head is not None:
            head.weight.mul_(SCALE[0])
    return model.eval()


def _causal(arch, seed, layers=2):
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    cfg = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch](num_hidden_layers=layers, **COMMON)
    return _seeded(seed, lambda: AutoModelForCausalLM.from_config(cfg))


def path_assisted():
    """AssistedCandidateGenerator: Llama target, Qwen2 draft (same vocabulary)."""
    target, draft = _causal("llama", 1), _causal("qwen2", 2, layers=1)
    return target, dict(assistant_model=draft, num_assistant_tokens=3, num_assistant_tokens_schedule="constant")


def path_prompt_lookup():
    """PromptLookupCandidateGenerator: Qwen2 target, n-gram lookup in the prompt."""
    return _causal("qwen2", 3), dict(prompt_lookup_num_tokens=2, max_matching_ngram_size=2)


def path_early_exit():
    """EarlyExitCandidateGenerator: Llama target drafting with its own first layer."""
    return _causal("llama", 4), dict(assistant_early_exit=1, num_assistant_tokens=3)


def path_gemma4_assistant():
    """SinglePositionMultiTokenCandidateGenerator: Gemma 4 target + Gemma4AssistantForCausalLM."""
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig

    text = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                layer_types=["sliding_attention", "full_attention"], sliding_window=16)
    target = _seeded(5, lambda: Gemma4ForCausalLM(Gemma4TextConfig(**text, vocab_size_per_layer_input=V,
                                                                     hidden_size_per_layer_input=8)))
    acfg = Gemma4AssistantConfig(text_config=Gemma4TextConfig(**text, num_kv_shared_layers=2,
                                                              vocab_size_per_layer_input=0,
                                                              hidden_size_per_layer_input=0),
                                 backbone_hidden_size=32)
    assistant = _seeded(6, lambda: Gemma4AssistantForCausalLM(acfg))
    return target, dict(assistant_model=assistant, num_assistant_tokens=3)


def path_dflash():
    """DFlashTokenCandidateGenerator: Llama target + MuseGlimmerAssistantModel block drafter."""
    from transformers import MuseGlimmerAssistantConfig, MuseGlimmerAssistantModel

    target = _causal("llama", 7)
    acfg = MuseGlimmerAssistantConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=8, max_position_embeddings=128, block_size=3,
                                      mask_token_id=V - 1, target_layer_ids=[0, 1], bos_token_id=1, eos_token_id=2,
                                      pad_token_id=0)
    return target, dict(assistant_model=_seeded(8, lambda: MuseGlimmerAssistantModel(acfg)), speculation_type="dflash")


def path_mtp():
    """MTPCandidateGenerator: GLM-4-MoE target with one MTP layer (weights from a saved checkpoint)."""
    from transformers import AutoModelForCausalLM, Glm4MoeConfig

    cfg = Glm4MoeConfig(vocab_size=V, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                        max_position_embeddings=128, num_mtp_layers=1, n_group=1, topk_group=1)
    model = _seeded(9, lambda: AutoModelForCausalLM.from_config(cfg))
    with tempfile.TemporaryDirectory() as d:  # MtpModel.from_pretrained reads the MTP weights from the checkpoint
        model.save_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d).eval()
        from exactness.adapters.hf import HFDecoder

        HFDecoder(model, use_mtp=True)(PROMPT, 2, np.random.default_rng(0))  # the generator loads here
    return model, dict(use_mtp=True)


#: (path, candidate generator, builder, settings, new tokens): settings are extra generation options per row.
#: Generators that skip the first iteration (they need the target's outputs first) draft nothing for the last
#: token (generate caps a draft at ``max_length - len - 1``), so a 2-token check would never see them verify:
#: those rows certify the joint law of 3 new tokens.
PATHS = [
    ("assisted", "AssistedCandidateGenerator", path_assisted,
     [dict(), dict(temperature=0.7), dict(top_k=3), dict(top_p=0.8)], 2),
    ("prompt_lookup", "PromptLookupCandidateGenerator", path_prompt_lookup, [dict(), dict(top_k=3)], 2),
    ("early_exit", "EarlyExitCandidateGenerator", path_early_exit, [dict(), dict(temperature=0.7)], 2),
    ("gemma4_assistant", "SinglePositionMultiTokenCandidateGenerator", path_gemma4_assistant, [dict()], 3),
    ("dflash", "DFlashTokenCandidateGenerator", path_dflash, [dict()], 3),
    ("mtp", "MTPCandidateGenerator", path_mtp, [dict()], 3),
]

#: Candidate generators the installed version has that this audit does not run, and why.
NOT_APPLICABLE = {
    "UniversalSpeculativeDecodingGenerator": "needs two different real tokenizers (target and assistant vocabularies "
                                             "mapped by string); tiny random models have none offline",
    "AssistedCandidateGeneratorDifferentTokenizers": "greedy only (do_sample=False): no sampling law to certify",
}


#: Where to look when a path fails (read from the installed source; printed only for failing rows).
CAUSES = {
    "gemma4_assistant": "`SinglePositionMultiTokenCandidateGenerator.get_candidates` drafts each token by "
                        "`outputs.logits.argmax(dim=-1)` but returns the raw draft logits as `candidate_logits`, "
                        "which `_speculative_sampling` uses as the draft law q; an argmax draft has a one-hot q, so "
                        "the acceptance min(1, p/q) and the residual max(0, p - q) are computed for the wrong q",
}


def _certify(decoder, target, n, seed, m):
    if hasattr(exactness, "certify_decoder"):
        cert = exactness.certify_decoder(decoder, target, PROMPT[None], new_tokens=m, n=n, seed=seed)
        return cert, "exactness.certify_decoder"
    return certify_joint(decoder, target, PROMPT, n, new_tokens=m, seed=seed), \
        "exact joint law of the first new tokens + exactness.certify_sampler"


def run(n: int, seed: int, only=None) -> dict:
    import torch
    import transformers

    from exactness.adapters.hf import HFDecoder, hf_target

    torch.set_num_threads(1)
    rows, skipped = [], dict(NOT_APPLICABLE)
    t_all = time.perf_counter()
    for name, gen, build, settings, m in PATHS:
        if only and name not in only:
            continue
        try:
            model, opts = build()
        except Exception as exc:  # a path the installed version cannot run offline: reported, not hidden
            skipped[gen] = f"could not build/run on a tiny random model: {type(exc).__name__}: {exc}"[:400]
            continue
        for extra in settings:
            t0 = time.perf_counter()
            label = ", ".join(f"{k}={v}" for k, v in extra.items()) or "T=1"
            row = {"path": name, "generator": gen, "setting": label, "new_tokens": m}
            try:
                dec = HFDecoder(model, **opts, **extra)
                cert, method = _certify(dec, hf_target(model, **extra), n, seed, m)
                row.update(method=method, passed=cert.passed, pvalue=cert.pvalue, tv=cert.tv_estimate,
                           tv_upper=cert.tv_upper, detectable_tv=cert.detectable_tv, n=cert.n,
                           summary=cert.summary())
            except Exception as exc:
                row.update(error=f"{type(exc).__name__}: {exc}"[:400], trace=traceback.format_exc()[-800:])
            row["seconds"] = time.perf_counter() - t0
            rows.append(row)
            print(f"{name:17s} {label:16s} " + (("PASS" if row["passed"] else "FAIL") + f" TV {row['tv']:.3f}"
                                                if "passed" in row else "ERROR " + row["error"]), flush=True)
    return {"transformers": transformers.__version__, "torch": torch.__version__, "python": platform.python_version(),
            "n": n, "seed": seed, "vocab": V, "scale": SCALE[0], "prompt": PROMPT.tolist(), "rows": rows,
            "not_run": skipped, "seconds": time.perf_counter() - t_all}


def combine(old: dict, new: dict) -> dict:
    """One result from two runs: NEW's rows for the paths it ran, OLD's rows for the others."""
    ran = {r["path"] for r in new["rows"]} | {p for p, *_ in PATHS if p in new.get("only", [])}
    rows = [r for r in old["rows"] if r["path"] not in ran] + new["rows"]
    order = [p for p, *_ in PATHS]
    rows.sort(key=lambda r: order.index(r["path"]) if r["path"] in order else len(order))
    not_run = {k: v for k, v in old["not_run"].items() if k not in {g for p, g, *_ in PATHS if p in ran}}
    not_run.update(new["not_run"])
    return {**new, "rows": rows, "not_run": not_run, "seconds": old["seconds"] + new["seconds"],
            "runs": [{"command": old.get("command", "?"), "paths": sorted({r["path"] for r in old["rows"]} - ran),
                      "seconds": old["seconds"]},
                     {"command": new.get("command", "?"), "paths": sorted(ran), "seconds": new["seconds"]}]}


def to_markdown(res: dict, argv) -> str:
    methods = sorted({r["method"] for r in res["rows"] if "method" in r})
    out = [
        "# Audit: the installed transformers' speculative decoding paths",
        "",
        f"transformers {res['transformers']}, torch {res['torch']}, Python {res['python']}; CPU, 1 thread. "
        f"Run time {res['seconds']:.0f} s. Command: `python benchmarks/audit_transformers.py {' '.join(argv)}`"
        + "".join(f"; rows of {', '.join(r['paths'])} from `python benchmarks/audit_transformers.py {r['command']}` "
                  f"({r['seconds']:.0f} s)" for r in res.get("runs", [])),
        "",
        f"Tiny randomly initialised models (vocabulary {res['vocab']}, hidden 32, 1-2 layers, fixed torch seeds, "
        f"output head x {res.get('scale', 3.0):g}, no downloads), prompt `{res['prompt']}`, `generate(do_sample=True)` "
        "through `exactness.adapters.hf.HFDecoder` "
        "(batch 1, torch seeded from the harness per call), target law from `hf_target` (the target's logits after the "
        "same logits processors). "
        f"Check used: {', '.join(methods) or 'none'}; {res['n']:,} sampled continuations per row, alpha 1e-3, "
        "power 0.99. A FAIL is a finding about the installed library.",
        "",
        "| path | candidate generator | setting | tokens | verdict | p-value | TV estimate (upper) | detectable TV "
        "| s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if "passed" in r:
            out.append(f"| {r['path']} | `{r['generator']}` | {r['setting']} | {r.get('new_tokens', 2)} "
                       f"| {'PASS' if r['passed'] else '**FAIL**'} "
                       f"| {r['pvalue']:.3g} | {r['tv']:.3f} ({r['tv_upper']:.3f}) | {r['detectable_tv']:.3f} "
                       f"| {r['seconds']:.0f} |")
        else:
            out.append(f"| {r['path']} | `{r['generator']}` | {r['setting']} | {r.get('new_tokens', 2)} | ERROR | "
                       f"| {r['error']} | | "
                       f"{r['seconds']:.0f} |")
    failed = [r for r in res["rows"] if r.get("passed") is False]
    if failed:
        out += ["", "## Failing paths", ""]
        out += [f"- {r['path']} ({r['setting']}): {r['summary']}"
                + (f". Likely cause: {CAUSES[r['path']]}." if r["path"] in CAUSES else "") for r in failed]
    out += ["", "Tokens: the joint law of the first 2 or 3 new tokens is certified (V**2 = 64 or V**3 = 512 "
            "sequences, pooled). Generators that need the target's outputs first (Gemma 4 assistant, DFlash, MTP) "
            "draft nothing in generate's first iteration and nothing for the last token (the draft is capped at "
            "`max_length - len - 1`), so only 3 tokens exercise their verification.",
            "", "The TV estimate is the plug-in TV of the sampled joint law; it is biased upward by sampling "
            "noise (about the detectable TV for an exact sampler), so read it with the verdict and the upper bound.",
            "", "## Not run", ""]
    out += [f"- `{k}`: {v}" for k, v in res["not_run"].items()]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000, help="sampled continuations per row (default 3000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", help="run only these paths (names in the first column)")
    ap.add_argument("--scale", type=float, default=3.0, help="output-head multiplier of the random models (default 3)")
    ap.add_argument("--combine", nargs=2, metavar=("OLD.json", "NEW.json"), help="write one report from two runs")
    ap.add_argument("--out", default="reports/audit_transformers_generators.md")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n must be >= 1")
    check_output_path(args.out, "--out")
    if args.combine:
        import json

        with open(args.combine[0]) as a, open(args.combine[1]) as b:
            res = combine(json.load(a), json.load(b))
        write_markdown_and_json(args.out, to_markdown(res, argv), res)
        print(f"wrote {args.out} and its .json")
        return 0
    SCALE[0] = args.scale
    res = run(args.n, args.seed, args.only)
    res.update(command=" ".join(argv), only=list(args.only or []))
    write_markdown_and_json(args.out, to_markdown(res, argv), res)
    print(f"wrote {args.out} and its .json ({res['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
