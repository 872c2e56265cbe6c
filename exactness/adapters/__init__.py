"""Adapters: real speculative decoders as ``decoder`` / ``target`` callables for ``exactness.certify_decoder``.

The contract (``exactness.certify_decoder``, issue 11)::

    decoder(prompt: ndarray (L,) int64, new_tokens: int, rng: numpy.random.Generator)
        -> ndarray (new_tokens,) int64          # one sampled continuation
    target(contexts: ndarray (B, L) int64) -> ndarray (B, V) float64
        # the target's next-token law after its sampling processors

Modules (imported by name, never by ``import exactness``; they need torch and
transformers):

- :mod:`.hf`     Hugging Face ``generate`` (``assistant_model=``, prompt lookup,
                 early exit, ...) -> :class:`~.hf.HFDecoder`, :func:`~.hf.hf_target`
- :mod:`.engine` this project's ``resispec.decoding.engine.speculative_decode``
                 -> :class:`~.engine.EngineDecoder`, :func:`~.engine.engine_target`

This module (numpy only) holds the shared input checks and an exact-law check
of the first ``m`` new tokens that needs only ``certify_sampler``:
:func:`joint_law` (enumeration of ``V**m`` sequences from ``target``) and
:func:`certify_joint` (sampled sequences vs that law).
"""

from __future__ import annotations

import numpy as np

#: Largest ``V**m`` that :func:`joint_law` enumerates.
MAX_JOINT = 1 << 20


def check_prompt(prompt, vocab: int, *, name: str = "prompt") -> np.ndarray:
    """Validate one prompt: a 1-D int64 ndarray of ids in ``[0, vocab)``, length >= 1.

    Raises
    ------
    TypeError
        Not an ndarray, or not of dtype int64 (convert with ``np.asarray(ids, dtype=np.int64)``).
    ValueError
        Not 1-D, empty, or ids out of range.
    """
    if not isinstance(prompt, np.ndarray):
        raise TypeError(f"{name} must be a numpy ndarray of dtype int64, got {type(prompt).__name__}; "
                        f"pass np.asarray(ids, dtype=np.int64)")
    if prompt.dtype != np.int64:
        raise TypeError(f"{name} must have dtype int64, got {prompt.dtype}; pass {name}.astype(np.int64)")
    if prompt.ndim != 1 or prompt.size < 1:
        raise ValueError(f"{name} must have shape (L,) with L >= 1, got shape {prompt.shape}")
    lo, hi = int(prompt.min()), int(prompt.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name} ids must lie in [0, {vocab}) (the model's vocabulary), got range [{lo}, {hi}]")
    return prompt


def check_new_tokens(new_tokens) -> int:
    """Validate ``new_tokens``: an integer >= 1 (ValueError otherwise)."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
        raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
    return int(new_tokens)


def check_rng(rng) -> np.random.Generator:
    """Validate the harness generator (TypeError naming the fix otherwise)."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}; "
                        "pass np.random.default_rng(seed)")
    return rng


def check_output(tokens, new_tokens: int, vocab: int, what: str) -> np.ndarray:
    """A decoder's continuation as (new_tokens,) int64; ValueError if shorter, longer or out of range."""
    out = np.asarray(tokens)
    if not np.issubdtype(out.dtype, np.integer):
        raise TypeError(f"{what} returned dtype {out.dtype}, expected integer token ids")
    out = out.astype(np.int64).reshape(-1)
    if out.size != new_tokens:
        raise ValueError(f"{what} returned {out.size} new tokens, expected {new_tokens} (did it stop on an "
                         "end-of-sequence token? pass eos_token_id=None)")
    if out.size and (out.min() < 0 or out.max() >= vocab):
        raise ValueError(f"{what} returned ids outside [0, {vocab})")
    return out


def joint_law(target, prompt, m: int = 2) -> np.ndarray:
    """Exact law of the first ``m`` new tokens: ``P(y_1..y_m) = prod_j p(y_j | prompt, y_<j)``.

    Parameters
    ----------
    target : callable ``(contexts (B, L) int64) -> (B, V) float64``
    prompt : ndarray (L,) int64
    m : int >= 1, with ``V**m <= MAX_JOINT``

    Returns
    -------
    ndarray, shape (V**m,), float64
        Index of ``(y_1, ..., y_m)`` is ``sum_j y_j V**(m-j)`` (row-major), as
        :func:`sequence_index` encodes it.

    Raises
    ------
    ValueError
        ``target`` returns a wrong shape, negative or non-finite entries or
        rows not summing to 1 (1e-6); ``V**m`` above ``MAX_JOINT``.
    """
    prompt = np.asarray(prompt, dtype=np.int64).reshape(-1)
    m = check_new_tokens(m)
    law = _target_rows(target, prompt[None])[0]
    V = law.size
    if V ** m > MAX_JOINT:
        raise ValueError(f"joint law over V**m = {V}**{m} sequences exceeds MAX_JOINT = {MAX_JOINT:,}; lower m")
    prefixes = np.empty((1, 0), dtype=np.int64)
    for _ in range(1, m):
        prefixes = np.concatenate([np.repeat(prefixes, V, axis=0), np.tile(np.arange(V), len(prefixes))[:, None]],
                                  axis=1)
        ctx = np.concatenate([np.broadcast_to(prompt, (len(prefixes), prompt.size)), prefixes], axis=1)
        rows = _target_rows(target, ctx, V)
        law = (law[:, None] * rows.reshape(law.size, V)).reshape(-1)
    return law / law.sum()


def _target_rows(target, ctx: np.ndarray, V: int | None = None) -> np.ndarray:
    rows = np.asarray(target(np.ascontiguousarray(ctx, dtype=np.int64)), dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] != len(ctx) or (V is not None and rows.shape[1] != V):
        raise ValueError(f"target(contexts) must return shape ({len(ctx)}, V), got {rows.shape}")
    if not np.all(np.isfinite(rows)) or np.any(rows < 0):
        raise ValueError("target(contexts) returned negative or non-finite probabilities")
    if np.any(np.abs(rows.sum(axis=1) - 1) > 1e-6):
        raise ValueError("target(contexts) rows do not sum to 1; return normalised float64 laws")
    return rows


def sequence_index(tokens: np.ndarray, V: int) -> int:
    """Row-major index of a token sequence in the ``V**m`` joint law."""
    idx = 0
    for t in tokens:
        idx = idx * V + int(t)
    return idx


def certify_joint(decoder, target, prompt, n: int, *, new_tokens: int = 2, alpha: float = 1e-3, seed=0,
                  tv: float | None = None):
    """Certify the joint law of a decoder's first ``new_tokens`` tokens with ``exactness.certify_sampler``.

    Each of the ``n`` samples is one ``decoder(prompt, new_tokens, rng)``
    call, encoded by :func:`sequence_index` and compared with
    :func:`joint_law` (pooled chi-square and G-test).  The stand-in for
    ``exactness.certify_decoder``'s enumerable check on one prompt.

    Returns
    -------
    exactness.Certificate
        A decoder that raises or returns bad output (see :func:`check_output`) gives a FAILED certificate
        naming the cause (``details["subject"]["error"]``, as ``certify_sampler``).

    Raises
    ------
    ValueError, TypeError
        Bad prompt, ``new_tokens`` or target laws.
    """
    from ..certificate import certify_sampler

    prompt = np.asarray(prompt)
    if prompt.dtype != np.int64:
        raise TypeError(f"prompt must have dtype int64, got {prompt.dtype}; pass prompt.astype(np.int64)")
    new_tokens = check_new_tokens(new_tokens)
    law = joint_law(target, prompt, new_tokens)
    V = round(law.size ** (1 / new_tokens))

    def sample(rng, k):
        out = np.empty(k, dtype=np.int64)
        for j in range(k):
            toks = check_output(decoder(prompt.copy(), new_tokens, rng), new_tokens, V,   # its own copy of the prompt
                                "decoder(prompt, new_tokens, rng)")
            out[j] = sequence_index(toks, V)
        return out

    return certify_sampler(sample, law, n, alpha=alpha, seed=seed, tv=tv)


__all__ = ["MAX_JOINT", "certify_joint", "check_new_tokens", "check_output", "check_prompt", "check_rng",
           "joint_law", "sequence_index"]
