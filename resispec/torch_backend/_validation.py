"""Input checks of the torch backend.

Rules (each violation raises ``TypeError`` / ``ValueError`` naming the
argument and the fix):

- ``p`` and ``q`` are ``torch.Tensor`` of shape ``(V,)`` or ``(B, V)``, on the
  SAME device, with the SAME floating dtype, C-contiguous.  numpy arrays are
  accepted and converted to the verifier's ``dtype`` / ``device`` (default
  float64 on CPU).
- float64 and float32 are computed natively; float16 and bfloat16 rows must
  sum to 1 within ``4 * eps(dtype)`` (float16: 3.9e-3, bfloat16: 3.1e-2), and
  are then **up-cast to float32 and renormalised** (the target is the
  normalised row).  float32 / float64 rows must sum to 1 within 1e-6 (the
  numpy backend's tolerance) and are used as given.
- candidates: an integer tensor (any integer dtype, cast to int64) of shape
  ``(k,)`` or ``(B, k)`` on the laws' device; ids in ``[0, V)`` with
  ``q > 0``; distinct within a row under without-replacement drafting.
- uniforms: shape ``(B, k + 1)``, finite, in ``[0, 1)``; cast to float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._validation import MAX_K, SUM_TOL, check_drafting, check_k  # noqa: F401  (re-exported)

#: Dtypes computed natively; half precisions are up-cast to float32.
NATIVE = (torch.float64, torch.float32)
HALF = (torch.float16, torch.bfloat16)


def sum_tolerance(dtype: torch.dtype, V: int = 1) -> float:
    """Row-sum tolerance for ``V``-token laws stored in ``dtype``.

    ``max(1e-6, 4 eps)`` for float16/bfloat16; ``max(1e-6, 4 sqrt(V) eps)``
    for float32/float64, since a float32 softmax over V = 151,936 tokens sums
    to 1 only within a few 1e-6 (round-off of a length-V sum grows like
    ``sqrt(V) eps``).  float64 keeps the numpy tolerance 1e-6.
    """
    eps = torch.finfo(dtype).eps
    if dtype in HALF:
        return max(SUM_TOL, 4.0 * eps)
    return max(SUM_TOL, 4.0 * math.sqrt(max(1, V)) * eps)


def residual_eps(dtype: torch.dtype) -> float:
    """Below this remaining mass a rejection is treated as impossible (1e-13 in float64; :mod:`resispec._xp`)."""
    from .._xp import residual_eps as eps

    return eps(torch, dtype)


def _to_tensor(x, name, dtype, device):
    if isinstance(x, torch.Tensor):
        return x.detach()  # verification is not differentiable: autograd inputs are detached (documented)
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be a torch.Tensor of probabilities, got {type(x).__name__}")
    arr = np.asarray(x)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a real numeric tensor or array, got dtype {arr.dtype}")
    return torch.as_tensor(np.ascontiguousarray(arr, dtype=np.float64), device=device).to(dtype)


def as_law_t(x, *, name: str, dtype=torch.float64, device="cpu", structure_only: bool = False) -> torch.Tensor:
    """Validate one batch of laws; return a (B, V) contiguous float32/float64 tensor."""
    t = _to_tensor(x, name, dtype, device)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor (float64, float32, float16 or bfloat16), got {t.dtype}")
    if t.dtype not in NATIVE + HALF:
        raise TypeError(f"{name} has unsupported dtype {t.dtype}; use float64, float32, float16 or bfloat16")
    if not t.is_contiguous():
        raise ValueError(f"{name} is not contiguous (stride {tuple(t.stride())}); pass {name}.contiguous()")
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.dim() != 2:
        raise ValueError(f"{name} must have shape (V,) or (B, V), got shape {tuple(t.shape)}")
    if t.shape[0] < 1 or t.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one token, got shape {tuple(t.shape)}")
    return t if structure_only else check_values(t, name)


def check_values(t: torch.Tensor, name: str) -> torch.Tensor:
    """Finite, non-negative rows summing to 1 (dtype tolerance); half precision up-cast."""
    # two passes: a finite sum of entries >= 0 means every entry is finite
    sums = t.sum(dim=1, dtype=torch.float64)
    if not bool(torch.isfinite(sums).all()):
        raise ValueError(f"{name} contains NaN or inf; pass finite probabilities")
    if bool(t.amin() < 0):
        raise ValueError(f"{name} has negative entries (min {float(t.min()):.3g}); laws must be non-negative")
    tol = sum_tolerance(t.dtype, t.shape[-1])
    bad = (sums - 1.0).abs() > tol
    if bool(bad.any()):
        i = int(torch.nonzero(bad)[0, 0])
        raise ValueError(f"{name} row {i} sums to {float(sums[i])!r}, not 1 (tolerance {tol:.3g} for {t.dtype}); "
                         "normalise it first")
    if t.dtype in HALF:
        t = t.to(torch.float32)
        t = t / t.sum(dim=1, keepdim=True)
    return t


def as_laws_t(p, q, *, dtype=torch.float64, device="cpu") -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Validate a target/draft pair: same device, same dtype, (B, V) each.

    Returns ``(p2, q2, squeeze)`` with ``squeeze`` True for 1-D input.
    A single row is broadcast (materialised) against a batch.

    Raises
    ------
    TypeError
        Non-floating or mixed dtypes.
    ValueError
        Mixed devices, bad shapes, non-contiguous tensors, bad values.
    """
    if isinstance(p, torch.Tensor) and isinstance(q, torch.Tensor):
        if p.device != q.device:
            raise ValueError(f"p is on {p.device} but q is on {q.device}; move both to one device (q.to(p.device))")
        if p.device.type == "meta":
            raise ValueError("p and q are meta tensors (shapes without data); verify needs real values on cpu or cuda")
        if p.dtype != q.dtype:
            raise TypeError(f"p has dtype {p.dtype} but q has dtype {q.dtype}; cast both to one dtype")
    elif isinstance(p, torch.Tensor) or isinstance(q, torch.Tensor):
        t = p if isinstance(p, torch.Tensor) else q
        dtype, device = (t.dtype if t.dtype in NATIVE else torch.float32), t.device
    squeeze = _ndim(p) == 1 and _ndim(q) == 1
    p2 = as_law_t(p, name="p", dtype=dtype, device=device, structure_only=True)
    q2 = as_law_t(q, name="q", dtype=dtype, device=device, structure_only=True)
    if p2.shape != q2.shape and not (p2.shape[1] == q2.shape[1] and 1 in (p2.shape[0], q2.shape[0])):
        raise ValueError(f"p has shape {tuple(p2.shape)} but q has shape {tuple(q2.shape)}; target and draft "
                         "must both be (V,) or (B, V) over the same vocabulary")
    p2, q2 = check_values(p2, "p"), check_values(q2, "q")
    if p2.dtype != q2.dtype:  # one numpy input converted, the other a tensor
        q2 = q2.to(p2.dtype)
    if p2.shape != q2.shape:
        if p2.shape[0] == 1 and q2.shape[1] == p2.shape[1]:
            p2 = p2.expand_as(q2).contiguous()
        elif q2.shape[0] == 1 and q2.shape[1] == p2.shape[1]:
            q2 = q2.expand_as(p2).contiguous()
        else:
            raise ValueError(f"p has shape {tuple(p2.shape)} but q has shape {tuple(q2.shape)}; target and draft "
                             "must both be (V,) or (B, V) over the same vocabulary")
    return p2, q2, squeeze


def _ndim(x) -> int:
    return x.dim() if isinstance(x, torch.Tensor) else np.ndim(x)


def as_candidates_t(candidates, q2: torch.Tensor, *, drafting: str | None = None) -> torch.Tensor:
    """Validate candidate ids against the draft law; return (B, k) int64 on q2's device."""
    if isinstance(candidates, torch.Tensor):
        c = candidates
        if c.device != q2.device:
            raise ValueError(f"candidates are on {c.device} but p/q on {q2.device}; move them to one device")
        if c.dtype == torch.bool or c.is_floating_point() or c.is_complex():
            raise TypeError(f"candidates must be an integer tensor of token ids (int64), got {c.dtype}")
    else:
        arr = np.asarray(candidates)
        if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"candidates must be an integer array of token ids, got dtype {arr.dtype}")
        c = torch.as_tensor(arr.astype(np.int64), device=q2.device)
    c = c.to(torch.int64)
    B, V = q2.shape
    if c.dim() == 1:
        c = c.unsqueeze(0)
    if c.dim() != 2 or c.shape[1] < 1:
        raise ValueError(f"candidates must have shape (k,) or (B, k) with k >= 1, got {tuple(candidates.shape) if hasattr(candidates, 'shape') else np.shape(candidates)}")
    if c.shape[1] > MAX_K:
        raise ValueError(f"candidates has k = {c.shape[1]} columns, more than MAX_K = {MAX_K} candidates per node; "
                         "verify fewer candidates")
    if c.shape[0] != B:
        raise ValueError(f"candidates has {c.shape[0]} rows but p/q have B = {B}; one row of candidates per node")
    if bool(((c < 0) | (c >= V)).any()):
        raise ValueError(f"candidates contains ids outside [0, {V}); token ids must index the vocabulary")
    qc = torch.gather(q2, 1, c)
    if bool((qc <= 0).any()):
        b, j = (int(v) for v in torch.nonzero(qc <= 0)[0])
        raise ValueError(f"candidates[{b}, {j}] = {int(c[b, j])} has draft probability q = 0, so it cannot have "
                         "been drafted; candidates must be sampled from q")
    if drafting == "without_replacement" and c.shape[1] > 1:
        s, _ = torch.sort(c, dim=1)
        if bool((s[:, 1:] == s[:, :-1]).any()):
            raise ValueError("candidates repeat a token within a row, but drafting='without_replacement' "
                             "requires distinct ids")
    return c.contiguous()


def as_uniforms_t(uniforms, B: int, k: int, device) -> torch.Tensor:
    """Validate explicit uniforms: (B, k + 1) float64 in [0, 1), moved to ``device``."""
    if isinstance(uniforms, torch.Tensor):
        if not (uniforms.is_floating_point()):
            raise TypeError(f"uniforms must be a floating tensor (float64), got {uniforms.dtype}")
        u = uniforms.to(device=device, dtype=torch.float64)
    else:
        try:
            raw = np.asarray(uniforms) if not isinstance(uniforms, (str, bytes)) else np.asarray(object())
        except ValueError as exc:                          # ragged rows
            raise ValueError(f"uniforms must be a (B, k + 1) array of floats in [0, 1); could not read it as one: "
                             f"{exc}") from None
        if raw.dtype == object or raw.dtype == bool or not (np.issubdtype(raw.dtype, np.floating)
                                                            or np.issubdtype(raw.dtype, np.integer)):
            raise TypeError(f"uniforms must be a real float array or tensor of shape (B, k + 1), got "
                            f"{type(uniforms).__name__} of dtype {raw.dtype}")
        u = torch.as_tensor(raw.astype(np.float64), device=device)
    if u.dim() == 1 and B == 1:
        u = u.unsqueeze(0)
    if tuple(u.shape) != (B, k + 1):
        raise ValueError(f"uniforms must have shape (B, k + 1) = ({B}, {k + 1}), got {tuple(u.shape)}")
    if not bool(torch.isfinite(u).all()) or bool((u < 0).any()) or bool((u >= 1).any()):
        raise ValueError("uniforms must be finite and lie in [0, 1)")
    return u.contiguous()


def check_generator(rng, device) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (TypeError / ValueError otherwise)."""
    if isinstance(rng, np.random.Generator):
        raise TypeError("the torch backend takes a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
                        "not a numpy Generator; or pass explicit uniforms=")
    if not isinstance(rng, torch.Generator):
        raise TypeError(f"rng must be a torch.Generator, got {type(rng).__name__}")
    if torch.device(rng.device).type != torch.device(device).type:
        raise ValueError(f"rng lives on {rng.device} but the laws are on {device}; "
                         f"use torch.Generator(device={str(device)!r})")
    return rng
