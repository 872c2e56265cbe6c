"""Torch twins of the built-in proxies of :mod:`resispec.proxies`.

Same names, options and formulas; a proxy is
``proxy(q_i, *, step, k, p_i) -> (B, V)`` on tensors.  A user callable is
called with tensors (working dtype, laws' device) and may return a tensor or
anything ``torch.as_tensor`` accepts.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .. import proxies as _np_proxies


def _normalise(x, fallback):
    z = x.sum(dim=1, keepdim=True)
    pos = z > 0
    return torch.where(pos, x / torch.where(pos, z, torch.ones_like(z)), fallback)


def draft():
    """``rho_i = q_i`` (default)."""
    def proxy(q_i, *, step, k, p_i):
        return q_i
    proxy.__name__ = "draft"
    return proxy


def tempered(tau: float = 2.0):
    """``norm(q_i ** (1 / tau))``."""
    _np_proxies.tempered(tau)  # same validation and message

    def proxy(q_i, *, step, k, p_i):
        return _normalise(q_i ** (1.0 / tau), q_i)
    proxy.__name__ = f"tempered(tau={tau})"
    return proxy


def topk(top_k: int = 64):
    """Draft truncated to its ``top_k`` largest entries, renormalised.

    Ties at the ``top_k``-th value are broken by lower token id, as in numpy.
    """
    _np_proxies.topk(top_k)

    def proxy(q_i, *, step, k, p_i):
        V = q_i.shape[1]
        if top_k >= V:
            return q_i
        kth = torch.topk(q_i, top_k, dim=1).values[:, -1:]
        greater = q_i > kth
        eq = q_i == kth
        rank = torch.cumsum(eq.to(torch.int64), dim=1)   # 1-based rank among ties, token-id order
        keep = greater | (eq & (rank <= top_k - greater.sum(dim=1, keepdim=True)))
        return _normalise(torch.where(keep, q_i, torch.zeros_like(q_i)), q_i)
    proxy.__name__ = f"topk(top_k={top_k})"
    return proxy


def uniform_mix(eps: float = 0.1):
    """``(1 - eps) q_i + eps / V``."""
    _np_proxies.uniform_mix(eps)

    def proxy(q_i, *, step, k, p_i):
        return (1.0 - eps) * q_i + eps / q_i.shape[1]
    proxy.__name__ = f"uniform_mix(eps={eps})"
    return proxy


def coverage():
    """``norm(1 - (1 - q_i)^j)``, ``j = k - 1 - step`` candidates to come."""
    def proxy(q_i, *, step, k, p_i):
        j = max(1, k - 1 - step)
        return _normalise(-torch.expm1(j * torch.log1p(-torch.clamp(q_i, max=1.0))), q_i)
    proxy.__name__ = "coverage"
    return proxy


PROXIES: dict[str, Callable] = {"draft": draft, "tempered": tempered, "topk": topk,
                                "uniform_mix": uniform_mix, "coverage": coverage}
assert set(PROXIES) == set(_np_proxies.PROXIES), "torch proxies must mirror resispec.proxies.PROXIES"


def get_proxy(proxy, **options):
    """Resolve a built-in name (with options) or pass a callable through (same errors as numpy)."""
    if callable(proxy):
        return _np_proxies.get_proxy(proxy, **options)  # same option and signature checks as numpy
    _np_proxies.get_proxy(proxy, **options)  # validates name and options with the numpy messages
    return PROXIES[proxy](**options)


def check_proxy_output(rho, like: torch.Tensor, name: str) -> torch.Tensor:
    """Validate a proxy's output against ``like`` (B, V); return it renormalised, in like's dtype/device."""
    if not isinstance(rho, torch.Tensor):
        arr = np.asarray(rho) if rho is not None and not isinstance(rho, (str, bytes)) else np.asarray(object())
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"proxy {name!r} returned {type(rho).__name__}; a proxy must return a real (B, V) tensor")
        rho = torch.as_tensor(arr, device=like.device)
    if rho.is_complex() or rho.dtype == torch.bool:
        raise TypeError(f"proxy {name!r} returned dtype {rho.dtype}; a proxy must return a real (B, V) tensor")
    if rho.device != like.device:
        raise ValueError(f"proxy {name!r} returned a tensor on {rho.device}, expected {like.device}")
    rho = rho.to(like.dtype)
    if tuple(rho.shape) != tuple(like.shape):
        raise ValueError(f"proxy {name!r} returned shape {tuple(rho.shape)}, expected {tuple(like.shape)}")
    if not bool(torch.isfinite(rho).all()) or bool((rho < 0).any()):
        raise ValueError(f"proxy {name!r} returned negative or non-finite values; a proxy must be a law")
    z = rho.sum(dim=1, keepdim=True)
    if bool((z <= 0).any()):
        raise ValueError(f"proxy {name!r} returned an all-zero row; a proxy must be a law summing to 1")
    return rho / z


