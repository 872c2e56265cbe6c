"""Reproduce a resispec audit finding in mlx-lm 0.32.2, without resispec.

Setting 'top_p=0.9,repetition_penalty=1.3': the law of new token 1 after prompt [2, 3, 4, 2, 3] and prefix [] from
speculative_generate_step (draft model, 2 tokens a round) against generate_step (speculation off), same model,
same sampler and logits processors; a two-sample chi-square test.  Needs mlx[cpu], mlx-lm, torch, transformers,
tokenizers, numpy, scipy.  Usage: python <this script> [N draws per path] (exit 1 when p < 1e-3: bias reproduced)
The audit measured: token 2 observed 0.0538 vs exact 0.0000 (3214 draws with that prefix).
"""


import sys as _sys


def _could_not_run(kind, value, tb):  # an error is not a reproduced bias: exit 2 (1 means p < 1e-3)
    import atexit, os, traceback
    traceback.print_exception(kind, value, tb)
    print("could not run this reproduction (an error, not a reproduced bias): exit 2", file=_sys.stderr)
    atexit._run_exitfuncs()  # the temporary models are removed
    _sys.stdout.flush()
    _sys.stderr.flush()
    os._exit(2)


_sys.excepthook = _could_not_run
import sys

import numpy as np
from scipy import stats

import atexit, json, os, shutil, tempfile

import torch
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM

V, SEED, SCALE = 16, 1, 8.0
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

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.sample_utils import make_logits_processors, make_sampler

PROMPT, PREFIX = [2, 3, 4, 2, 3], []
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
model, _ = load(TARGET)
draft, _ = load(DRAFT)
sampler = make_sampler(**{'temp': 1.0, 'top_p': 0.9, 'min_p': 0.0, 'top_k': 0})
procs = make_logits_processors(**{'logit_bias': None, 'repetition_penalty': 1.3, 'repetition_context_size': 1073741824, 'presence_penalty': None, 'presence_context_size': 1073741824, 'frequency_penalty': None, 'frequency_context_size': 1073741824})


def run(spec, seed):
    mx.random.seed(seed)
    kw = dict(max_tokens=len(PREFIX) + 1, sampler=sampler, logits_processors=procs or None)
    if spec:
        return [int(t) for t, _, _ in speculative_generate_step(mx.array(PROMPT), model, draft,
                                                                 num_draft_tokens=2, **kw)]
    return [int(t) for t, _ in generate_step(mx.array(PROMPT), model, **kw)]


counts = np.zeros((2, V))
for spec in (0, 1):
    for i in range(N):
        out = run(spec, spec * N + i)
        if out[:len(PREFIX)] == PREFIX:
            counts[spec, out[len(PREFIX)]] += 1
keep = counts.sum(axis=0) > 0
p = stats.chi2_contingency(counts[:, keep]).pvalue
freq = counts / counts.sum(axis=1, keepdims=True)
print(f"draws with prefix {PREFIX}: off {int(counts[0].sum())}, speculative {int(counts[1].sum())}; "
      f"TV {0.5 * abs(freq[0] - freq[1]).sum():.4f}, two-sample chi-square p = {p:.3g}")
for t in np.argsort(-abs(freq[0] - freq[1]))[:5]:
    print(f"token {t}: speculation off {freq[0, t]:.4f}  speculative {freq[1, t]:.4f}")
sys.exit(1 if p < 1e-3 else 0)
