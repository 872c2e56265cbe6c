"""Auxiliary proxies ``rho_i`` of the draft density of the candidates to come.

A proxy is a callable ``proxy(q_i, *, step, k, p_i) -> (B, V) float64``:
non-negative rows summing to 1, computed from the draft law of the remaining
candidates ``q_i`` (and optionally the current residual ``p_i``) -- never
from the current or later candidates, or exactness is lost
(``docs/RESISPEC.md`` sections 2 and 4).  ``step`` is the 0-based index of
the candidate being verified, ``k`` the number of candidates.

Built-in names (:data:`PROXIES`): ``draft`` (default), ``tempered``,
``topk``, ``uniform_mix``, ``coverage``.  Written once against the array
namespace of ``q_i`` (:mod:`resispec._xp`): the same proxies run on numpy
arrays and on torch tensors (``backend="torch"`` hands a proxy tensors).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ._xp import device, is_torch, namespace

Proxy = Callable[..., np.ndarray]


def _real(value, name: str) -> float:
    """A real number option (not bool, str or None), else TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


def _normalise(x, fallback):
    """``x / sum(x)`` per row (B, V); ``fallback``'s row where that sum is 0."""
    xp = namespace(x, fallback)
    z = xp.sum(x, axis=1, keepdims=True)                                    # (B, 1)
    return xp.where(z > 0, x / xp.where(z > 0, z, 1.0), fallback)


def draft() -> Proxy:
    """The draft density itself: ``rho_i = q_i`` (the default)."""

    def proxy(q_i, *, step, k, p_i):
        return q_i

    proxy.__name__ = "draft"
    return proxy


def tempered(tau: float = 2.0) -> Proxy:
    """Tempered draft ``norm(q_i ** (1 / tau))``; ``tau > 1`` flattens it.

    Raises ValueError unless ``tau`` is finite and > 0.
    """
    tau = _real(tau, "tempered proxy: tau")
    if not np.isfinite(tau) or tau <= 0:
        raise ValueError(f"tempered proxy: tau must be finite and > 0, got {tau}")

    def proxy(q_i, *, step, k, p_i):
        return _normalise(q_i ** (1.0 / tau), q_i)

    proxy.__name__ = f"tempered(tau={tau})"
    return proxy


def topk(top_k: int = 64) -> Proxy:
    """Draft truncated to its ``top_k`` most likely tokens, renormalised (sparse).

    Ties at the ``top_k``-th largest value are broken by lower token id, so
    every backend keeps the same tokens (:func:`topk_mask`).
    """
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"topk proxy: top_k must be an integer >= 1, got {top_k!r}")

    def proxy(q_i, *, step, k, p_i):
        V = q_i.shape[1]
        if top_k >= V:
            return q_i
        return _normalise(namespace(q_i).where(topk_mask(q_i, top_k), q_i, 0.0), q_i)

    proxy.__name__ = f"topk(top_k={top_k})"
    return proxy


def topk_mask(q_i, top_k: int):
    """Boolean (B, V): the ``top_k`` largest entries per row of ``q_i`` (B, V), ties broken by lower token id."""
    xp = namespace(q_i)
    kth = xp.sort(q_i, axis=1, descending=True)[:, top_k - 1:top_k]          # the top_k-th largest, (B, 1)
    greater = q_i > kth
    eq = q_i == kth
    rank = xp.cumulative_sum(xp.astype(eq, xp.int64), axis=1)               # 1-based rank among ties, token-id order
    return greater | (eq & (rank <= top_k - xp.sum(xp.astype(greater, xp.int64), axis=1, keepdims=True)))


def uniform_mix(eps: float = 0.1) -> Proxy:
    """``(1 - eps) q_i + eps / V``: the draft mixed with uniform."""
    eps = _real(eps, "uniform_mix proxy: eps")
    if not np.isfinite(eps) or not 0 <= eps <= 1:
        raise ValueError(f"uniform_mix proxy: eps must lie in [0, 1], got {eps}")

    def proxy(q_i, *, step, k, p_i):
        return (1.0 - eps) * q_i + eps / q_i.shape[1]

    proxy.__name__ = f"uniform_mix(eps={eps})"
    return proxy


def coverage() -> Proxy:
    """Coverage ``norm(1 - (1 - q_i)^j)`` for the ``j = k - 1 - step`` candidates still to come."""

    def proxy(q_i, *, step, k, p_i):
        j = max(1, k - 1 - step)
        xp = namespace(q_i)
        with np.errstate(divide="ignore"):  # q = 1 gives log1p(-1) = -inf, coverage 1 (correct)
            cov = -xp.expm1(j * xp.log1p(-xp.clip(q_i, None, 1.0)))       # 1 - (1 - q_i)^j
        return _normalise(cov, q_i)

    proxy.__name__ = "coverage"
    return proxy


#: Built-in proxy factories by name.
PROXIES: dict[str, Callable[..., Proxy]] = {
    "draft": draft,
    "tempered": tempered,
    "topk": topk,
    "uniform_mix": uniform_mix,
    "coverage": coverage,
}


def get_proxy(proxy, **options) -> Proxy:
    """Resolve a proxy name (with options) or pass a callable through.

    Raises
    ------
    ValueError
        Unknown proxy name.
    TypeError
        Neither a name nor a callable, options given with a callable, or a
        callable whose signature cannot take ``(q_i, *, step, k, p_i)``.
    """
    if callable(proxy):
        if options:
            raise TypeError(f"proxy options {sorted(options)} only apply to built-in proxy names")
        _check_proxy_signature(proxy)
        return proxy
    if not isinstance(proxy, str):
        raise TypeError(f"proxy must be a name in {sorted(PROXIES)} or a callable, got {type(proxy).__name__}")
    if proxy not in PROXIES:
        raise ValueError(f"unknown proxy {proxy!r}; choose one of {sorted(PROXIES)} or pass a callable")
    return PROXIES[proxy](**options)


def _check_proxy_signature(proxy) -> None:
    """TypeError now, not at the first verify, when ``proxy`` cannot be called as ``proxy(q_i, step=, k=, p_i=)``."""
    import inspect

    try:
        sig = inspect.signature(proxy)
    except (TypeError, ValueError):  # builtins without a signature: checked at the first call
        return
    try:
        sig.bind(None, step=0, k=1, p_i=None)
    except TypeError as exc:
        raise TypeError(f"proxy {getattr(proxy, '__name__', proxy)!r} has signature {sig}, but a proxy is called as "
                        f"proxy(q_i, *, step, k, p_i) -> (B, V) law ({exc}); add the keyword arguments "
                        "(or **kwargs)") from None


def check_proxy_output(rho, like, name: str):
    """A proxy's output checked and renormalised: (B, V) finite, non-negative, rows summing to 1.

    Parameters
    ----------
    rho : the proxy's return value (an array of ``like``'s library, or anything it converts)
    like : array (numpy or torch), shape (B, V)
        The proxy's input ``q_i``: the result has its library, dtype, device and shape.
    name : str
        The proxy's name, for the messages.

    Returns
    -------
    array of ``like``'s library, shape (B, V), ``like``'s dtype, rows summing to 1 (detached from autograd)

    Raises
    ------
    TypeError
        Not an array of real numbers (complex, bool, text, objects).
    ValueError
        Another device, another shape, negative or non-finite entries, or an all-zero row.
    """
    xp = namespace(like)
    if getattr(rho, "requires_grad", False):               # a torch output tied to autograd: its values only
        rho = rho.detach()
    if is_torch(like) and is_torch(rho) and rho.device != like.device:
        raise ValueError(f"proxy {name!r} returned a tensor on {rho.device}, expected {like.device}")
    try:
        raw = xp.asarray(rho if not isinstance(rho, (str, bytes)) else np.asarray(object()), device=device(like))
        kind_ok = xp.isdtype(raw.dtype, ("real floating", "integral"))
    except Exception as exc:
        raise TypeError(f"proxy {name!r} returned {type(rho).__name__}, not an array of real numbers ({exc}); "
                        "a proxy must return a real (B, V) law") from exc
    if not kind_ok:
        raise TypeError(f"proxy {name!r} returned dtype {raw.dtype}; a proxy must return a real (B, V) law")
    rho = xp.astype(raw, like.dtype)
    if tuple(rho.shape) != tuple(like.shape):
        raise ValueError(f"proxy {name!r} returned shape {tuple(rho.shape)}, expected {tuple(like.shape)}")
    if not bool(xp.all(xp.isfinite(rho))) or bool(xp.any(rho < 0)):
        raise ValueError(f"proxy {name!r} returned negative or non-finite values; a proxy must be a law")
    z = xp.sum(rho, axis=1, keepdims=True)                                   # (B, 1)
    if bool(xp.any(z <= 0)):
        raise ValueError(f"proxy {name!r} returned an all-zero row; a proxy must be a law summing to 1")
    return rho / z                                                           # rows renormalised to 1
