"""Hugging Face transformers ``generate`` as a ``decoder`` / ``target`` pair for ``exactness.certify_decoder``.

:class:`HFDecoder` calls ``model.generate(..., do_sample=True)`` with any of
the installed version's candidate generators (``generation/utils.py``
``_get_candidate_generator`` picks one from the options):

=============================================  =========================================================
options                                        candidate generator (transformers 5.x)
=============================================  =========================================================
``assistant_model=draft``                      ``AssistedCandidateGenerator``
``prompt_lookup_num_tokens=g``                 ``PromptLookupCandidateGenerator``
``assistant_early_exit=layer``                 ``EarlyExitCandidateGenerator``
``assistant_model=<Gemma4Assistant...>``       ``SinglePositionMultiTokenCandidateGenerator`` (Gemma 4 / 3n target)
``use_mtp=True``                               ``MTPCandidateGenerator`` (a model with ``num_mtp_layers``)
``speculation_type="dflash"``                  ``DFlashTokenCandidateGenerator``
=============================================  =========================================================

HF decodes a batch of one and draws from torch's GLOBAL generator, so each
call seeds torch from the harness: ``torch.manual_seed(int(rng.integers(2**63)))``
-- the same ``rng`` state gives the same continuation.  Stopping is not part
of a next-token law: the decoder generates exactly ``new_tokens`` tokens
(``eos_token_id=[]``: ``None`` is refilled from the model's defaults).

:func:`hf_target` is the target law: the target model's last-position logits
after the SAME logits processors ``generate`` builds from the same
generation config (``GenerationMixin._get_logits_processor``: temperature,
top-k, top-p, ...), softmax in float64, renormalised.
"""

from __future__ import annotations

import copy

import numpy as np

from . import check_new_tokens, check_output, check_prompt, check_rng
from .engine import _check_contexts, _vocab

#: Options handed to the assistant's own generation config (how many tokens it drafts per round).
ASSISTANT_OPTIONS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


def generation_config_for(model, generation_config=None, **options):
    """The sampling ``GenerationConfig`` both the decoder and the target use.

    A deep copy of ``generation_config`` (default: ``model.generation_config``)
    updated with ``options``, with ``do_sample=True`` and ``eos_token_id=[]``
    (generate exactly the requested number of tokens).

    Raises
    ------
    TypeError
        ``generation_config`` is not a ``transformers.GenerationConfig``.
    ValueError
        ``do_sample=False`` was asked for (greedy is not a law to certify; use
        temperature > 0), or transformers rejects an option.
    """
    from transformers import GenerationConfig

    base = model.generation_config if generation_config is None else generation_config
    if not isinstance(base, GenerationConfig):
        raise TypeError(f"generation_config must be a transformers.GenerationConfig, got {type(base).__name__}")
    if options.get("do_sample", True) is not True or (generation_config is not None and not base.do_sample
                                                      and "do_sample" not in options):
        raise ValueError("HFDecoder certifies sampling: pass do_sample=True (greedy decoding is not a law)")
    gc = copy.deepcopy(base)
    gc.update(**{**options, "do_sample": True})
    gc.eos_token_id = []  # None would be refilled from model.generation_config by generate
    if gc.pad_token_id is None:
        gc.pad_token_id = 0
    gc.validate()
    return gc


class HFDecoder:
    """``decoder(prompt, new_tokens, rng)`` running ``model.generate(do_sample=True, ...)`` on one prompt.

    Parameters
    ----------
    model : transformers causal LM (the target)
    assistant_model : transformers causal LM, optional
        The draft (same vocabulary); selects ``AssistedCandidateGenerator``
        (or the Gemma 4 assistant path for a ``Gemma4Assistant*`` model).
    generation_config : transformers.GenerationConfig, optional
        Copied, never modified.
    **options
        Generation options (``temperature=0.7``, ``top_k=3``,
        ``prompt_lookup_num_tokens=2``, ``assistant_early_exit=1``, ...);
        ``num_assistant_tokens``, ``num_assistant_tokens_schedule`` and
        ``assistant_confidence_threshold`` are set on the assistant's own
        generation config (where HF reads them; with ``assistant_early_exit``
        the model drafts for itself, so on ``model.generation_config``).

    Calling it returns ``new_tokens`` new token ids, ndarray (new_tokens,)
    int64; torch's global generator is seeded from ``rng`` first.

    Raises
    ------
    ValueError
        ``assistant_model`` with another vocabulary size than ``model``;
        greedy options; per call: bad prompt, fewer tokens than asked.
    TypeError
        Prompt not an int64 ndarray, ``rng`` not a numpy Generator.
    """

    #: Why the conditional checks of ``certify_decoder`` are skipped for it.
    no_events_reason = ("transformers generate does not expose its verification decisions (candidates, accepted "
                        "index per node), so accepted_count, after_rejection and bonus are not run; their bias "
                        "shows in the joint and PIT checks")

    def __init__(self, model, assistant_model=None, generation_config=None, **options):
        self.model, self.assistant_model = model, assistant_model
        self.vocab = _vocab(model)
        head = getattr(assistant_model, "get_output_embeddings", lambda: None)()
        if head is not None:  # a DFlash assistant has no head of its own (it uses the target's)
            va = int(head.weight.shape[0])
            if va != self.vocab:
                raise ValueError(f"assistant_model has a {va}-token vocabulary but model has {self.vocab}; "
                                 "assisted generation needs one shared vocabulary (use a draft with the target's "
                                 "tokenizer)")
        assistant_opts = {k: options.pop(k) for k in ASSISTANT_OPTIONS if k in options}
        if assistant_opts:
            drafter = assistant_model if assistant_model is not None else (
                model if options.get("assistant_early_exit") is not None else None)
            if drafter is None:
                raise ValueError(f"{sorted(assistant_opts)} configure the assistant; pass assistant_model= "
                                 "(or assistant_early_exit=)")
        self.generation_config = generation_config_for(model, generation_config, **options)  # checked first
        if assistant_opts:
            drafter.generation_config.update(**assistant_opts)
        self.device = next(model.parameters()).device

    def __call__(self, prompt, new_tokens, rng) -> np.ndarray:
        import torch

        prompt = check_prompt(prompt, self.vocab)
        new_tokens = check_new_tokens(new_tokens)
        rng = check_rng(rng)
        torch.manual_seed(int(rng.integers(2**63)))
        ids = torch.as_tensor(prompt[None], device=self.device)
        kw = {} if self.assistant_model is None else {"assistant_model": self.assistant_model}
        gc = copy.copy(self.generation_config)
        gc.max_new_tokens = new_tokens
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=gc, **kw)
        seq = out.sequences if hasattr(out, "sequences") else out
        return check_output(seq[0, prompt.size:].cpu().numpy(), new_tokens, self.vocab, "model.generate")

    def __repr__(self) -> str:
        a = "" if self.assistant_model is None else f", assistant={type(self.assistant_model).__name__}"
        return f"HFDecoder({type(self.model).__name__}{a})"


def hf_target(model, generation_config=None, **options):
    """The ``target(contexts)`` callable: ``model``'s next-token law after generate's logits processors.

    Parameters
    ----------
    model : transformers causal LM
    generation_config, **options
        As for :class:`HFDecoder` (give the same ones): the processors are
        built by ``model._get_logits_processor`` from that config, exactly as
        ``generate`` builds them.

    Returns
    -------
    callable ``(contexts (B, L) int64) -> (B, V) float64``
        Cache-free forward; last-position logits in float32 (as generate),
        processors applied, softmax in float64, renormalised.

    Raises (when called)
    ------
    TypeError / ValueError
        Contexts not a 2-D int64 array, ids out of range; processors that
        leave no token (all ``-inf``).
    """
    import torch
    from transformers import LogitsProcessorList

    for k in ASSISTANT_OPTIONS + ("assistant_model",):
        options.pop(k, None)
    gc = generation_config_for(model, generation_config, **options)
    vocab = _vocab(model)
    device = next(model.parameters()).device
    model._prepare_special_tokens(gc, device=device)  # as generate does: the EOS tensor bad words / min length read

    def target(contexts):
        ctx = _check_contexts(contexts, vocab)
        ids = torch.as_tensor(ctx, device=device)
        procs = model._get_logits_processor(generation_config=gc, input_ids_seq_length=ids.shape[1],
                                            encoder_input_ids=ids, prefix_allowed_tokens_fn=None,
                                            logits_processor=LogitsProcessorList(), device=str(device),
                                            model_kwargs={})
        with torch.inference_mode():
            logits = model(input_ids=ids, use_cache=False).logits[:, -1].float()
            scores = procs(ids, logits).to("cpu", torch.float64)
        if not torch.isfinite(scores.max(dim=1).values).all():
            raise ValueError("the logits processors left no finite score in a row; check top_k / top_p")
        law = torch.softmax(scores, dim=1).numpy()
        return law / law.sum(axis=1, keepdims=True)

    return target
