"""Rejection-dependent proxies on torch: twin of :mod:`resispec.verifiers.rejection_proxy` (iid drafts).

Accept ``x_i`` w.p. ``min(1, R_i(x_i) / q(x_i))`` (``R_0 = p``); on rejection
``R_{i+1} = proxy(R_i, q, x_i, step=i)`` with the proxy given torch tensors (``R``, ``q``: (B, V) in the working
dtype on the laws' device, ``x``: (B,) int64); after ``k`` rejections emit from ``R_k``.  Exact iff the proxy
meets the transport condition ``sum_x (q(x) - R(x))_+ R^(x) = (R - q)_+`` (the numpy module's docstring).
Checking a user's output (shape, finite, >= 0, rows sum to 1 within ``SUM_TOL``) synchronises with the host
once per step: this backend is for trying rules, not for serving.  Default: ``rrs``'s residual
``norm((R - q)_+)`` (SpecInfer, Miao et al. 2024, arXiv 2305.09781).
"""

from __future__ import annotations

import torch

from ..verifiers.registry import register
from ..verifiers.rejection_proxy import SUM_TOL, proxy_name
from ._validation import residual_eps
from .base import TorchVerifier


def rrs_residual_t(R, q, x, *, step):
    """``norm((R - q)_+)`` on tensors (``R`` kept where that mass is below ``residual_eps``): the exact default."""
    resid = torch.clamp(R - q, min=0.0)
    z = resid.sum(dim=1, keepdim=True)
    ok = z > residual_eps(R.dtype)
    return torch.where(ok, resid / torch.where(ok, z, torch.ones_like(z)), R)


def apply_proxy_t(proxy, R: torch.Tensor, q: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
    """``proxy(R, q, x, step=step)`` checked as :func:`resispec.verifiers.rejection_proxy.apply_proxy` does.

    Raises ValueError naming the proxy and the step when the output is not a tensor of shape (B, V) or (V,)
    with finite entries >= 0 and rows summing to 1 within ``SUM_TOL`` (float32: ``max(SUM_TOL, 64 eps)``).
    """
    who = f"proxy {proxy_name(proxy)!r} at step {step}"
    try:
        out = proxy(R.clone(), q.clone(), x.clone(), step=step)
    except Exception as exc:
        raise ValueError(f"{who} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"{who} must return a torch.Tensor on the torch backend, got {type(out).__name__}")
    B, V = R.shape
    if tuple(out.shape) == (V,):
        out = out.unsqueeze(0).expand(B, V)
    if tuple(out.shape) != (B, V):
        raise ValueError(f"{who} returned shape {tuple(out.shape)}; it must return the next residual, shape "
                         f"({B}, {V}) (one law per row) or ({V},)")
    out = out.to(device=R.device, dtype=R.dtype)
    if not bool(torch.isfinite(out).all()):
        raise ValueError(f"{who} returned non-finite entries (NaN or inf); return a law over the vocabulary")
    if bool((out < 0).any()):
        raise ValueError(f"{who} returned negative entries (min {float(out.min()):.3g}); a residual is a law, >= 0")
    s = out.sum(dim=1)
    tol = max(SUM_TOL, 64 * torch.finfo(R.dtype).eps)
    bad = (s - 1.0).abs() > tol
    if bool(bad.any()):
        v = float(s[bad][0])
        what = "more mass than is left (a residual is a law)" if v > 1 else "less than 1"
        raise ValueError(f"{who} returned a row summing to {v:.12g}: {what}; normalise it to sum to 1 "
                         f"(within {tol:g})")
    return out.contiguous()


@register("rejection_proxy", backend="torch", ours=True)
class RejectionProxyTorch(TorchVerifier):
    """Residual shaped after each rejection by ``proxy(R, q, x, *, step)`` on tensors (iid drafts).

    Parameters
    ----------
    proxy : callable ``(R (B, V) Tensor, q (B, V) Tensor, x (B,) int64 Tensor, *, step: int) -> Tensor``, optional
        Default :func:`rrs_residual_t` (then the verifier is ``rrs``).
    dtype, device : as every torch verifier.

    Raises
    ------
    TypeError
        ``proxy`` is not callable.
    """

    drafting = "iid"

    def __init__(self, proxy=None, *, dtype=None, device=None):
        self._init_backend(dtype, device)
        proxy = rrs_residual_t if proxy is None else proxy
        if not callable(proxy):
            raise TypeError(f"proxy must be a callable proxy(R, q, x, *, step), got {type(proxy).__name__}")
        self.proxy = proxy

    def options(self) -> dict:
        return {} if self.proxy is rrs_residual_t else {"proxy": proxy_name(self.proxy)}

    def _chain_t(self, p, q, c):
        B, k = c.shape
        a = torch.empty((B, k), dtype=p.dtype, device=p.device)
        R = p.clone()
        for i in range(k):
            x = c[:, i]
            qx = torch.gather(q, 1, x.unsqueeze(1)).squeeze(1)
            rx = torch.gather(R, 1, x.unsqueeze(1)).squeeze(1)
            pos = qx > 0
            a[:, i] = torch.where(pos, rx / torch.where(pos, qx, torch.ones_like(qx)), torch.zeros_like(qx)).clamp(0, 1)
            live = a[:, i] < 1.0
            if bool(live.any()):
                R[live] = apply_proxy_t(self.proxy, R[live], q[live], x[live], i)
        return a, R
