"""Inverse-CDF sampling and candidate drafting on torch tensors.

Bit-compatible with :func:`resispec.sampling.inverse_cdf` on CPU: the law is
up-cast to float64, its cumulative sum is taken in token-id order
(``torch.cumsum`` on CPU accumulates sequentially, like ``numpy.cumsum``),
and the token is ``#{j : cdf[j] <= u * cdf[-1]}``, clamped to the last token
of positive mass.  So identical float64 rows and uniforms give identical
tokens.  On CUDA ``cumsum`` is a parallel scan, so ties at a CDF boundary
may resolve one token apart (documented tie rule; such a ``u`` lies within
a few ulps of the boundary).
"""

from __future__ import annotations

import torch

from ._validation import as_law_t, check_drafting, check_generator, check_k


def inverse_cdf(law: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Sample one token per row (per column of ``u``) by inverse CDF.

    Parameters
    ----------
    law : Tensor, shape (B, V), floating
        Non-negative rows with positive sum (need not be normalised).
    u : Tensor, shape (B,) or (B, n), float64 in [0, 1), same device.

    Returns
    -------
    Tensor, shape like ``u``, int64
        A token of zero mass is never returned.
    """
    squeeze = u.dim() == 1
    u2 = u.unsqueeze(1) if squeeze else u
    law64 = law.to(torch.float64)
    cdf = torch.cumsum(law64, dim=1)                      # (B, V)
    target = u2.to(torch.float64) * cdf[:, -1:]           # (B, n)
    out = torch.searchsorted(cdf, target.contiguous(), right=True)  # count of cdf <= target
    V = law.shape[1]
    over = out >= V                      # round-off pushed u * total past the last cdf value
    if bool(over.any()):                 # fall back to the last token with positive mass
        last = V - 1 - torch.argmax(torch.flip(law64 > 0, dims=[1]).to(torch.uint8), dim=1)
        out = torch.minimum(out, last.unsqueeze(1))
    return out[:, 0] if squeeze else out


def draw_candidates(q, k: int, drafting: str = "iid", rng: torch.Generator | None = None, *,
                    uniforms=None) -> torch.Tensor:
    """Pre-sample ``k`` candidates per row from the draft law (torch).

    Parameters
    ----------
    q : Tensor, shape (V,) or (B, V), floating
        Draft law(s); rows sum to 1 (see :mod:`._validation` for dtypes).
    k : int >= 1
    drafting : {"iid", "without_replacement", "any"}
        ``"iid"``/``"any"``: with replacement; ``"without_replacement"``:
        successive sampling, ``q_{i+1} = norm(q_i`` with ``x_i`` zeroed)
        (RSD, Jeon et al. 2024, arXiv 2402.14160).
    rng : torch.Generator on q's device
        Required unless ``uniforms`` is given.
    uniforms : Tensor, shape (B, k), float64 in [0, 1), optional
        Column ``i`` draws candidate ``i`` by inverse CDF -- the numpy
        :func:`resispec.draw_candidates` with ``rng.random((B, k))`` makes
        the same draws from the same uniforms (float64, CPU).

    Returns
    -------
    Tensor, shape (B, k), int64, on q's device

    Raises
    ------
    ValueError, TypeError
        Bad law, ``k``, drafting, rng/uniforms, or ``k`` above the draft
        support under without-replacement drafting.
    """
    q2 = as_law_t(q, name="q")
    k = check_k(k)
    check_drafting(drafting)
    B, V = q2.shape
    if uniforms is None:
        if rng is None:
            raise ValueError("pass rng (a torch.Generator) or explicit uniforms")
        u = torch.rand((B, k), generator=check_generator(rng, q2.device), dtype=torch.float64, device=q2.device)
    else:
        u = torch.as_tensor(uniforms, dtype=torch.float64, device=q2.device)
        if tuple(u.shape) != (B, k) or bool((u < 0).any()) or bool((u >= 1).any()):
            raise ValueError(f"uniforms must have shape (B, k) = ({B}, {k}) with values in [0, 1)")
    if drafting != "without_replacement":
        return inverse_cdf(q2, u)
    support = (q2 > 0).sum(dim=1)
    if bool((support < k).any()):
        raise ValueError(f"k = {k} exceeds the draft support ({int(support.min())} tokens with q > 0) in some row; "
                         "without-replacement drafting needs k <= support size")
    out = torch.empty((B, k), dtype=torch.int64, device=q2.device)
    qi = q2.clone()
    for i in range(k):  # loop over the k candidates only
        x = inverse_cdf(qi, u[:, i])
        out[:, i] = x
        qi.scatter_(1, x.unsqueeze(1), 0.0)
    return out
