"""transformers ``generate`` as an audited engine: assisted decoding, prompt lookup, early exit, and plain sampling.

The law is transformers' own: the target's logits after the logits processors ``generate`` builds from the same
``GenerationConfig`` (``exactness.adapters.hf.hf_target``); the decoder is ``exactness.adapters.hf.HFDecoder``
(``generate(do_sample=True)`` with torch's global generator seeded from the harness per request, batch 1: HF's
assisted generation takes one prompt per call).  The documented order of its processors is
``exactness.settings.ORDERS["transformers"]``.
"""

from __future__ import annotations

from .base import Engine, EngineUnavailable, register_engine

#: speculative option -> generate keyword arguments (``draft`` adds ``assistant_model=`` the tiny draft).
OPTION_KWARGS = {
    "off": {},
    "draft": {"num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant"},
    "ngram": {"prompt_lookup_num_tokens": 2, "max_matching_ngram_size": 2},
    "early_exit": {"assistant_early_exit": 1, "num_assistant_tokens": 3},
}


def generation_options(settings) -> dict:
    """``SamplingSettings`` -> ``GenerationConfig`` fields (top-k 0 and top-p 1: off; no EOS stop)."""
    opts = dict(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                min_p=settings.min_p or None, repetition_penalty=settings.repetition_penalty)
    if settings.logit_bias:
        opts["sequence_bias"] = {(t,): b for t, b in settings.logit_bias}  # a one-token sequence bias is a logit bias
    if settings.bad_words:
        opts["bad_words_ids"] = [list(w) for w in settings.bad_words]
    return opts


REPRO = '''"""Reproduce a resispec audit finding in transformers {version}, without resispec.

Setting {setting!r}, option {option!r}: the law of new token {position} after prompt {prompt} and prefix {prefix}
from speculative generate() is compared with the plain sampler's law of that token (the same target and
settings, speculation off).  Needs torch, transformers, numpy, scipy.
Usage: python <this script> [N draws]   (exit 1 when p < 1e-3: the bias is reproduced)
The audit measured: token {token} observed {observed:.4f} vs exact {exact:.4f} ({count} draws with that prefix).
"""
import sys

import numpy as np
import torch
from scipy import stats
from transformers import LlamaForCausalLM

PROMPT, PREFIX = {prompt}, {prefix}
SETTINGS = {settings}
OPTION = {option_kwargs}
N = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
{build}
target = LlamaForCausalLM.from_pretrained(TARGET).eval()
draft = LlamaForCausalLM.from_pretrained(DRAFT).eval()
common = dict(do_sample=True, eos_token_id=[], pad_token_id=0, **SETTINGS)


def generate(ids, new, **kw):
    ids = torch.tensor([ids])
    with torch.inference_mode():
        return target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, **common, **kw)


# exact law of the token: the plain sampler's processed scores at PROMPT + PREFIX
with torch.inference_mode():
    ids = torch.tensor([PROMPT + PREFIX])
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, output_scores=True,
                          return_dict_in_generate=True, **common)
exact = torch.softmax(out.scores[0][0].double(), -1).numpy()

kw = dict(OPTION)
if kw.pop("use_draft", False):
    kw["assistant_model"] = draft
counts = np.zeros(V)
for i in range(N):
    torch.manual_seed(i)
    new = generate(PROMPT, len(PREFIX) + 1, **kw)[0, len(PROMPT):].tolist()
    if new[:len(PREFIX)] == PREFIX:
        counts[new[len(PREFIX)]] += 1
freq = counts / max(counts.sum(), 1)
keep = exact > 0
p = stats.chisquare(counts[keep], exact[keep] / exact[keep].sum() * counts.sum()).pvalue if counts.sum() else 1.0
print(f"{{int(counts.sum())}} draws with prefix {{PREFIX}}; TV {{0.5 * abs(freq - exact).sum():.4f}}, chi-square p = {{p:.3g}}")
for t in np.argsort(-abs(freq - exact))[:5]:
    print(f"token {{t}}: observed {{freq[t]:.4f}}  exact {{exact[t]:.4f}}")
sys.exit(1 if p < 1e-3 else 0)
'''


@register_engine("transformers")
class TransformersEngine(Engine):
    """Hugging Face transformers (``GenerationMixin.generate``), float32 on CPU."""

    distribution = "transformers"
    install = 'pip install torch==2.13.0 -e ".[models]"'
    order = "transformers"
    law_source = ("the target's logits after generate's own logits processors (GenerationMixin._get_logits_processor), "
                  "softmax in float64")
    supported = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "logit_bias",
                           "bad_words"})
    options = {"off": "plain generate(do_sample=True): speculation off (must pass)",
               "draft": "assisted decoding with the 1-layer draft (AssistedCandidateGenerator, 3 tokens a round)",
               "ngram": "prompt lookup (PromptLookupCandidateGenerator, 2 tokens, 2-gram match)",
               "early_exit": "self-speculation from layer 1 (EarlyExitCandidateGenerator)"}

    def prepare(self, models, workdir):
        import torch
        from transformers import AutoModelForCausalLM

        try:
            target = AutoModelForCausalLM.from_pretrained(models.target_dir, dtype=torch.float32).eval()
            draft = AutoModelForCausalLM.from_pretrained(models.draft_dir, dtype=torch.float32).eval()
        except (OSError, ValueError) as exc:
            raise EngineUnavailable(f"transformers cannot load the tiny checkpoints: {exc}") from exc
        if sum(p.numel() for p in target.parameters()) < 10_000_000:
            # a tiny model gains nothing from intra-op threads and loses 3-30x to them on a loaded 2-core machine
            # (benchmarks/audit_overhead.py): one thread, as the benchmark runs it
            torch.set_num_threads(1)
        return {"target": target, "draft": draft}

    def target(self, handle, settings, prompt_len):
        from ..adapters.hf import hf_target

        self.check_settings(settings)
        return hf_target(handle["target"], **generation_options(settings))

    def decoder(self, handle, settings, option):
        from ..adapters.hf import HFDecoder

        self.check_settings(settings)
        if option not in OPTION_KWARGS:
            raise EngineUnavailable(f"transformers has no option {option!r}; options: {', '.join(OPTION_KWARGS)}")
        kw = {**generation_options(settings), **OPTION_KWARGS[option]}
        draft = handle["draft"] if option == "draft" else None
        return HFDecoder(handle["target"], assistant_model=draft, **kw)

    def repro_script(self, models, settings, option, offending, report):
        """A standalone script (torch + transformers + numpy + scipy) reproducing a FAIL of this engine."""
        from .tiny import standalone_build

        opt = dict(OPTION_KWARGS[option])
        if option == "draft":
            opt["use_draft"] = True
        gen = generation_options(settings)
        return REPRO.format(version=self.version(), setting=settings.label(), option=option,
                            position=offending["position"], prompt=list(offending["prompt"]),
                            prefix=list(offending["prefix"]), token=offending.get("token", "-"),
                            observed=offending.get("observed", float("nan")),
                            exact=offending.get("exact", float("nan")),
                            count=offending.get("count", 0), build=standalone_build(models), settings=repr(gen),
                            option_kwargs=repr(opt))
