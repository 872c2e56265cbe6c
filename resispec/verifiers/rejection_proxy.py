"""Rejection-dependent proxies: a residual shaped only AFTER a rejection, by a user's rule (iid drafts).

The chain (``docs/verifiers.md``, "Rejection-dependent proxies"): with ``R_0 = p``, candidate ``x_i`` is
accepted with probability ``min(1, R_i(x_i) / q(x_i))`` (``rrs``'s ratio, SpecInfer, Miao et al. 2024,
arXiv 2305.09781); on rejection the next residual is ``R_{i+1} = proxy(R_i, q, x_i, step=i)``, any law the
user's rule returns; after ``k`` rejections the token is drawn from ``R_k``.

Exactness (the section 2 lemma of ``docs/RESISPEC.md`` with a candidate-dependent residual, as in its
section 4 "Without replacement"): with accepted mass ``m = min(R, q)`` the step emits ``R`` exactly iff the
residuals after each possible rejection satisfy the transport condition

    sum_x (q(x) - R(x))_+ R^(x) = (R - q)_+      (pointwise),

because rejecting ``x`` has probability ``q(x) - m(x) = (q(x) - R(x))_+`` and ``R - m = (R - q)_+``.  At
``k = 1`` this is necessary and sufficient; at every step it is sufficient.  The default proxy,
``rrs_residual`` = ``norm((R - q)_+)``, meets it with equality for every ``x``: the default verifier IS ``rrs``.
For iid drafts no candidate-dependent residual beats the best sequential verifier (``docs/RESISPEC.md``
section 5; :func:`resispec.bounds.sequential_optimum_iid`).

Written once against the array namespace of its inputs (:mod:`resispec._xp`): ``backend="torch"`` runs these
lines on tensors and hands the proxy torch tensors (``R``, ``q``: (B, V) in the working dtype on the laws'
device, ``x``: (B,) int64).  Checking a proxy's output synchronises with the host once per step on a GPU: this
rule is for trying ideas, not for serving.
"""

from __future__ import annotations

import numpy as np

from .._xp import accept_prob, device, namespace, reject_update
from .base import Verifier
from .registry import register

#: A proxy's output must sum to 1 within this (float64 round-off of a normalised law).
SUM_TOL = 1e-9


def rrs_residual(R, q, x, *, step):
    """``rrs``'s residual ``norm((R - q)_+)`` (``R`` unchanged when that mass is below 1e-13): the exact default.

    Parameters
    ----------
    R, q : array (numpy or torch), shape (B, V), float64 (float32 tensors too)
        Current residual and draft law.
    x : ndarray, shape (B,), int64
        The rejected candidate of each row (unused: this rule transports every rejection the same way).
    step : int
        0-based index of the rejected candidate (unused).

    Returns
    -------
    array of ``R``'s library, shape (B, V), ``R``'s dtype, rows summing to 1.
    """
    return reject_update(R, q)                     # norm((R - q)_+): the residual after an rrs rejection


def proxy_name(proxy) -> str:
    """A readable name for a proxy callable (for error messages and reports)."""
    return getattr(proxy, "__qualname__", None) or getattr(proxy, "__name__", None) or type(proxy).__name__


def apply_proxy(proxy, R, q, x, step: int):
    """``proxy(R, q, x, step=step)`` checked: a law per row, shape (B, V).

    Parameters
    ----------
    proxy : callable ``(R (B, V), q (B, V), x (B,) int64, *, step: int) -> (B, V) or (V,)``
    R, q : array (numpy or torch), shape (B, V), float64 (float32 tensors too)
    x : array, shape (B,), int64
    step : int

    Returns
    -------
    array of ``R``'s library, shape (B, V), ``R``'s dtype on its device (a ``(V,)`` output is used for every row)

    Raises
    ------
    ValueError
        The proxy raised, or its output is not of shape (B, V) or (V,), has non-finite or negative entries,
        or rows that do not sum to 1 within ``SUM_TOL`` (float32: ``max(SUM_TOL, 64 eps)``; more than the mass
        that is left, or less); the message names the proxy and the step.
    """
    xp = namespace(R, q)
    who = f"proxy {proxy_name(proxy)!r} at step {step}"
    try:
        out = proxy(xp.asarray(R, copy=True), xp.asarray(q, copy=True), xp.asarray(x, copy=True), step=step)
    except Exception as exc:
        raise ValueError(f"{who} raised {type(exc).__name__}: {exc}") from exc
    if getattr(out, "requires_grad", False):               # a torch output tied to autograd: its values only
        out = out.detach()
    try:
        out = xp.asarray(out, device=device(R))
        kind_ok = xp.isdtype(out.dtype, ("real floating", "integral")) and not xp.isdtype(out.dtype, "bool")
        out = xp.astype(out, R.dtype) if kind_ok else None
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ValueError(f"{who} must return an array of floats, got {type(out).__name__} ({exc})") from exc
    if out is None:
        raise ValueError(f"{who} must return an array of real floats (a law over the vocabulary), got entries of "
                         "another kind (complex, bool or text)")
    B, V = R.shape
    if tuple(out.shape) == (V,):
        out = xp.broadcast_to(out, (B, V))
    if tuple(out.shape) != (B, V):
        raise ValueError(f"{who} returned shape {tuple(out.shape)}; it must return the next residual, shape "
                         f"({B}, {V}) (one law per row) or ({V},)")
    if not bool(xp.all(xp.isfinite(out))):
        raise ValueError(f"{who} returned non-finite entries (NaN or inf); return a law over the vocabulary")
    if bool(xp.any(out < 0)):
        raise ValueError(f"{who} returned negative entries (min {float(xp.min(out)):.3g}); a residual is a law, >= 0")
    s = xp.sum(out, axis=1)                                                  # (B,)
    tol = max(SUM_TOL, 64 * float(xp.finfo(R.dtype).eps))
    bad = xp.abs(s - 1.0) > tol
    if bool(xp.any(bad)):
        v = float(s[bad][0])
        what = "more mass than is left (a residual is a law)" if v > 1 else "less than 1"
        raise ValueError(f"{who} returned a row summing to {v:.12g}: {what}; normalise it to sum to 1 "
                         f"(within {tol:g})")
    return xp.asarray(out, copy=True)


@register("rejection_proxy", ours=True)
class RejectionProxy(Verifier):
    """Residual shaped after each rejection by ``proxy(R, q, x, *, step)`` (iid drafts; exact iff it transports).

    Accept ``x_i`` with probability ``min(1, R_i(x_i) / q(x_i))`` (``R_0 = p``); on rejection
    ``R_{i+1} = proxy(R_i, q, x_i, step=i)``; after ``k`` rejections emit from ``R_k``.  The proxy is called only
    on rows whose rejection has positive probability (elsewhere ``R`` is kept; its weight is 0).  Exact iff the
    transport condition ``sum_x (q(x) - R(x))_+ R^(x) = (R - q)_+`` holds at every reachable step (module
    docstring; check a rule with :func:`exactness.validate_proxy`).  The default ``rrs_residual`` gives ``rrs``
    (SpecInfer, arXiv 2305.09781).

    Parameters
    ----------
    proxy : callable, optional
        ``proxy(R (B, V) float64, q (B, V) float64, x (B,) int64, *, step: int) -> (B, V) or (V,)`` law;
        default :func:`rrs_residual`.  Any rule, exact or not (users run their idea; the harness judges it).

    Raises
    ------
    TypeError
        ``proxy`` is not callable.
    ValueError
        (from ``verify`` / ``chain``) the proxy's output is not a law, naming the proxy and the step.
    """

    drafting = "iid"
    #: Not in the default verifier lists of the benchmark tables: its default proxy is exactly ``rrs``, and
    #: with a user's proxy it has no closed form (Monte Carlo at every node); name it to include it.
    bench_default = False

    def __init__(self, proxy=None):
        if proxy is None:
            proxy = rrs_residual
        if not callable(proxy):
            raise TypeError(f"proxy must be a callable proxy(R, q, x, *, step), got {type(proxy).__name__}")
        self.proxy = proxy

    def options(self) -> dict:
        return {} if self.proxy is rrs_residual else {"proxy": proxy_name(self.proxy)}

    def _chain(self, p, q, c):
        xp = namespace(p, q)
        B, k = c.shape
        a = xp.empty((B, k), dtype=p.dtype, device=device(p))             # (B, k)
        R = xp.asarray(p, copy=True)                                         # R_0 = p, (B, V)
        for i in range(k):
            x = c[:, i]                                                      # (B,)
            a[:, i] = accept_prob(R, q, x)                                   # min(1, R_i(x_i) / q(x_i))
            live = a[:, i] < 1.0                                             # rows whose rejection can happen
            if bool(xp.any(live)):
                R[live] = apply_proxy(self.proxy, R[live], q[live], x[live], i)   # R_{i+1} = proxy(R_i, q, x_i)
        return a, R


def transport_residual(proxy, p, q, *, step: int = 0, tol: float = 1e-9, chunk: int = 1 << 22):
    """The transport condition of the FIRST rejection, exactly, at any V: O(V^2) work, one proxy call per chunk.

    ``T = sum_x (q(x) - p(x))_+ proxy(p, q, x)`` over the tokens ``x`` whose rejection has positive
    probability, against ``(p - q)_+`` (module docstring; ``docs/verifiers.md``).

    Parameters
    ----------
    proxy : callable ``(R, q, x, *, step)`` as in :class:`RejectionProxy`
    p, q : ndarray, shape (V,), float64 (validated laws)
    step : int
        Passed to the proxy (0 = the first candidate).
    tol : float
        A token fails when ``|T(y) - (p - q)_+(y)| > tol``.
    chunk : int
        Largest number of (row x V) elements per proxy call.

    Returns
    -------
    (residual, failing) : (float, ndarray of int64)
        ``max_y |T(y) - (p - q)_+(y)|`` and the tokens ``y`` where it exceeds ``tol``, sorted by token id.

    Raises
    ------
    ValueError
        The proxy's output is not a law (see :func:`apply_proxy`).
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    V = p.size
    w = np.maximum(q - p, 0.0)
    xs = np.flatnonzero(w > 0)
    T = np.zeros(V)
    rows = max(1, chunk // max(V, 1))
    for s in range(0, xs.size, rows):
        x = xs[s:s + rows].astype(np.int64)
        n = x.size
        out = apply_proxy(proxy, np.tile(p, (n, 1)), np.tile(q, (n, 1)), x, step)
        T += w[x] @ out
    diff = np.abs(T - np.maximum(p - q, 0.0))
    return float(diff.max(initial=0.0)), np.flatnonzero(diff > tol).astype(np.int64)
