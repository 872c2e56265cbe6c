"""Top-k / top-p truncation applied identically to the target and the draft.

Real decoders process both models' logits the same way before speculative
sampling (``docs/RESISPEC.md`` section 1: ``q`` is the draft AFTER the same
processing used to sample drafts).  :func:`truncate` does that for one law;
:func:`truncated_family` wraps any registered family so that every pair it
samples is truncated with the same ``top_k`` / ``top_p`` on both sides (each
law keeps its OWN top tokens, as Hugging Face ``TopKLogitsWarper`` /
``TopPLogitsWarper`` do; Holtzman et al. 2020, arXiv 1904.09751 for top-p).
"""

from __future__ import annotations

import numpy as np

from .families import PairFamily, get_family, register_family


def _check_trunc(top_k, top_p):
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1 or None, got {top_k!r}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating)) or not 0 < top_p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1] or None, got {top_p!r}")


def truncate(law, *, top_k: int | None = None, top_p: float | None = None) -> np.ndarray:
    """Keep each row's ``top_k`` largest tokens and/or its top-``top_p`` nucleus, renormalised.

    Parameters
    ----------
    law : array_like, shape (V,) or (B, V), float64
        Rows summing to 1.
    top_k : int >= 1, optional
        Keep the ``top_k`` most likely tokens (ties broken by token id).
    top_p : float in (0, 1], optional
        Keep the smallest set of most likely tokens whose mass is >= ``top_p``
        (the most likely token is always kept).  Applied after ``top_k``.

    Returns
    -------
    ndarray, same shape, float64; rows sum to 1.

    Raises
    ------
    ValueError
        ``top_k < 1`` or ``top_p`` outside (0, 1].
    """
    _check_trunc(top_k, top_p)
    x = np.asarray(law, dtype=np.float64)
    squeeze = x.ndim == 1
    x2 = np.atleast_2d(x).copy()
    B, V = x2.shape
    order = np.argsort(-x2, axis=1, kind="stable")
    sorted_ = np.take_along_axis(x2, order, axis=1)
    keep = np.ones((B, V), dtype=bool)
    if top_k is not None and top_k < V:
        keep[:, top_k:] = False
    if top_p is not None:
        kept = np.where(keep, sorted_, 0.0)
        kept = kept / kept.sum(axis=1, keepdims=True)
        before = np.cumsum(kept, axis=1) - kept          # mass strictly above each token
        keep &= before < top_p - 1e-12
        keep[:, 0] = True
    mask = np.zeros_like(keep)
    np.put_along_axis(mask, order, keep, axis=1)
    out = np.where(mask, x2, 0.0)
    out /= out.sum(axis=1, keepdims=True)
    return out[0] if squeeze else out


def truncated_family(base: str, *, top_k: int | None = None, top_p: float | None = None,
                     name: str | None = None, register: bool = True) -> PairFamily:
    """Wrap family ``base`` so every sampled pair is truncated identically on p and q.

    The returned family takes the base family's parameters plus ``top_k`` and
    ``top_p`` (defaults given here), so ``family.sample(rng, n=8, V=1000,
    top_k=20)`` dials the truncation per call.

    Parameters
    ----------
    base : str
        A registered family name.
    top_k, top_p : optional
        Default truncation (at least one must be set).
    name : str, optional
        Registry name; default ``f"{base}_top_k"`` / ``f"{base}_top_p"`` /
        ``f"{base}_top_k_top_p"``.
    register : bool
        Add it to the family registry.

    Raises
    ------
    ValueError
        Unknown base family, neither ``top_k`` nor ``top_p`` given, or bad values.
    """
    fam = get_family(base)
    _check_trunc(top_k, top_p)
    if top_k is None and top_p is None:
        raise ValueError("truncated_family needs top_k and/or top_p")
    if name is None:
        name = base + ("_top_k" if top_k is not None else "") + ("_top_p" if top_p is not None else "")

    def sampler(rng, n, V, T, top_k=top_k, top_p=top_p, **kw):
        p, q = fam.sampler(rng, n, V, T, **kw)
        return truncate(p, top_k=top_k, top_p=top_p), truncate(q, top_k=top_k, top_p=top_p)

    desc = f"{base} with top_k={top_k}, top_p={top_p} applied to both p and q: {fam.description}"
    out = PairFamily(name, desc, sampler, {**fam.params, "top_k": top_k, "top_p": top_p}, fam.fixed_vocab)
    return register_family(out) if register else out


truncated_family("softmax_noise", top_k=50)
truncated_family("softmax_noise", top_p=0.9)
