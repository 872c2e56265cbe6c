"""Logits -> next-token laws, with the SAME processing for target and draft.

Temperature, top-k and top-p (nucleus) are applied in one function, so the
law the draft samples its candidates from and the ``q`` handed to the
verifier are the same array, and the target's ``p`` gets the identical
processing (``docs/RESISPEC.md`` section 1).  The softmax runs in float64
and every row is renormalised in float64, as the numpy verifiers require.
Temperature 0 means greedy: a one-hot law on the arg-max (lowest id on ties).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingConfig:
    """Logit processing shared by target and draft.

    Attributes
    ----------
    temperature : float >= 0
        0 = greedy (one-hot arg-max law).
    top_k : int >= 0
        Keep the ``top_k`` most likely tokens (0 = off).
    top_p : float in (0, 1]
        Keep the smallest set of most likely tokens with mass >= ``top_p``
        (Holtzman et al. 2020, arXiv 1904.09751); 1 = off.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) or not np.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating)) or not (0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def process_logits(logits, config: SamplingConfig) -> np.ndarray:
    """Turn raw logits into next-token laws.

    Parameters
    ----------
    logits : torch.Tensor or ndarray, shape (N, V), any float dtype
    config : SamplingConfig

    Returns
    -------
    ndarray, shape (N, V), float64
        Non-negative rows summing to 1 (renormalised in float64).

    Raises
    ------
    ValueError
        Non-finite logits (NaN/inf would make a silent wrong law).
    """
    import torch

    z = torch.as_tensor(logits).detach().to("cpu", torch.float64)
    if z.ndim != 2:
        raise ValueError(f"logits must have shape (N, V), got {tuple(z.shape)}")
    if not torch.isfinite(z).all():
        raise ValueError("logits contain NaN or inf; check the model dtype (try --dtype float32)")
    N, V = z.shape
    if config.greedy:
        out = torch.zeros_like(z)
        out[torch.arange(N), z.argmax(dim=1)] = 1.0
        return out.numpy()
    zt = z / config.temperature
    if not torch.isfinite(zt).all():        # a tiny temperature overflowed: shift first (the max becomes 0, never NaN)
        zt = (z - z.max(dim=1, keepdim=True).values) / config.temperature
    z = zt
    if 0 < config.top_k < V:
        kth = torch.topk(z, config.top_k, dim=1).values[:, -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    law = torch.softmax(z, dim=1)
    if config.top_p < 1:
        sorted_p, order = torch.sort(law, dim=1, descending=True)
        before = torch.cumsum(sorted_p, dim=1) - sorted_p  # mass strictly above each token
        drop_sorted = before >= config.top_p                 # the first token is always kept
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        law = law.masked_fill(drop, 0.0)
    law = law / law.sum(dim=1, keepdim=True)
    return law.numpy()
