"""A loaded draft/target pair with one shared tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

from .engine import check_pair
from .fetch import DEFAULT_DRAFT, DEFAULT_TARGET
from .models import check_model_source, load_model, resolve_device


@dataclass
class ModelPair:
    """Target ``p`` and draft ``q`` models sharing a tokenizer.

    Attributes
    ----------
    target : transformers causal LM (eval mode)
    draft : transformers causal LM or :class:`~resispec.decoding.drafts.Draft` (e.g. the n-gram draft)
    tokenizer : the target's tokenizer (identical to the draft's; checked)
    target_name, draft_name : str
    """

    target: object
    draft: object
    tokenizer: object
    target_name: str = DEFAULT_TARGET
    draft_name: str = DEFAULT_DRAFT

    def encode(self, text: str, *, chat: bool = False) -> list[int]:
        """Token ids of a prompt (raw continuation, or the chat template with ``chat=True``)."""
        if not isinstance(text, str) or not text:
            raise ValueError("prompt must be a non-empty string")
        if chat:
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                     tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return [int(t) for t in ids]
        return [int(t) for t in self.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def eos_ids(self) -> set:
        """Token ids that end generation (tokenizer EOS and generation-config EOS)."""
        out = set()
        for src in (getattr(self.tokenizer, "eos_token_id", None),
                    getattr(getattr(self.target, "generation_config", None), "eos_token_id", None)):
            if src is None:
                continue
            out.update([int(src)] if isinstance(src, int) else [int(t) for t in src])
        return out


def load_pair(target: str = DEFAULT_TARGET, draft: str = DEFAULT_DRAFT, *, dtype="float32", device="auto",
              progress: bool = True, wheels_from=None, download: bool = False, linear: str = "auto") -> ModelPair:
    """Load and check a draft/target pair (built-in names or local paths).

    ``linear``: the linear-layer kernel of both models (:func:`~resispec.decoding.models.load_model`).

    ``draft``: a model name/path, or a draft kind of :mod:`.drafts` such as
    ``"ngram"`` / ``"ngram:order=4"`` (built over the target's tokenizer) or ``"head"`` (trained on the
    target's features, :mod:`.feature`).

    Both models are checked to be present (and the device valid) before
    either is loaded; nothing is downloaded unless ``download=True``.

    Raises
    ------
    ValueError
        Different vocabulary sizes or tokenizers; a bad device; a bad draft option or corpus.
    FileNotFoundError, resispec.decoding.fetch.ChecksumError
        Missing or corrupt model files.
    resispec.decoding.fetch.ModelNotFetchedError
        A built-in model not in the cache (run ``resispec models fetch NAME``).
    """
    from .drafts import make_draft, parse_draft_spec

    resolve_device(device)
    kind, _ = parse_draft_spec(draft)
    for name in (target, draft) if kind == "model" else (target,):
        check_model_source(name, download=download)
    kw = dict(dtype=dtype, device=device, progress=progress, wheels_from=wheels_from, download=download,
              linear=linear)
    t_model, t_tok = load_model(target, **kw)
    if kind == "model":
        d_model, d_tok = load_model(draft, **kw)
        check_pair(t_model, d_model, t_tok, d_tok)
        return ModelPair(t_model, d_model, t_tok, str(target), str(draft))
    d = make_draft(draft, target=t_model, tokenizer=t_tok, progress=progress)
    check_pair(t_model, d, t_tok)
    return ModelPair(t_model, d, t_tok, str(target), str(draft))
