"""One rule for numpy and torch: the array namespace and the row operations the array API lacks.

A rule's step is written once against ``xp = namespace(p, q)`` (the Python array API standard through
``array_api_compat``: ``xp`` is numpy's namespace for numpy arrays and torch's for tensors), so
``get_verifier(name, backend="torch")`` runs the same lines on tensors, on any device.  The array API has no
fancy indexing by a per-row column and no scatter; :func:`at` and :func:`zero_at` are those two, written
once.  Every function here gives the same values as the numpy indexing it replaces (the parity tests of
``tests/test_torch_parity.py`` compare decisions bit for bit off near-ties).
"""

from __future__ import annotations

import inspect
from functools import lru_cache

from array_api_compat import array_namespace, device, is_torch_namespace
from array_api_compat import is_torch_array as is_torch  # noqa: F401  (a tensor? any object)

from ._reserve_tol import RESIDUAL_EPS  # noqa: E402  (the one value; float32: :func:`residual_eps`)


def namespace(*arrays):
    """The array namespace of ``arrays`` (numpy's or torch's, via ``array_api_compat.array_namespace``).

    Raises
    ------
    TypeError
        Arrays of two libraries mixed (``array_api_compat``'s message).
    """
    return array_namespace(*arrays)


def native(xp):
    """The library behind ``xp`` (``numpy`` or ``torch``), for the ``out=`` forms both spell alike
    (``subtract``, ``divide``, ``clip``): the engine's own buffers, never a rule's arrays."""
    if is_torch_namespace(xp):
        import torch

        return torch
    import numpy

    return numpy


def residual_eps(xp, dtype) -> float:
    """Remaining mass below which a rejection is impossible: ``max(1e-13, 16 eps(dtype))`` (1e-13 in float64)."""
    return max(RESIDUAL_EPS, 16.0 * float(xp.finfo(dtype).eps))


def sub_scaled(p, lam, rho, out=None):
    """``p - lam[:, None] rho`` (B, V) into ``out`` when given: ``p``, ``rho`` (B, V), ``lam`` (B,).  One fused
    pass on torch (``addcmul``); numpy: a product into ``out``, then the difference in place."""
    xp = array_namespace(p, rho)
    if is_torch_namespace(xp):
        import torch

        return torch.addcmul(p, rho, lam[:, None], value=-1.0, out=out)
    import numpy

    y = numpy.multiply(rho, lam[:, None], out=out)
    return numpy.subtract(p, y, out=y)


def clip_to(y, hi, out=None):
    """``min(max(y, 0), hi)`` (B, V) in one pass, into ``out`` when given: ``y``, ``hi`` (B, V) (the accepted mass
    ``min(q, (p - lambda rho)_+)`` from ``y = p - lambda rho``)."""
    if is_torch(y):
        import torch

        return torch.clamp(y, min=torch.zeros((), dtype=y.dtype, device=y.device), max=hi, out=out)
    import numpy

    return numpy.clip(y, 0.0, hi, out=out)


def sum_where_equal(a, b, w, buf=None):
    """``sum_j w[i, j] [a[i, j] == b[i, j]]`` per row: ``a``, ``b``, ``w`` (B, V) -> (B,).  torch: the indicator
    written into ``buf`` ((B, V), ``a``'s dtype) and reduced with ``w`` by a batched dot product (two passes, no
    (B, V) allocation with ``buf``); numpy: ``einsum`` over the boolean indicator."""
    if is_torch(a):
        import torch

        e = torch.eq(a, b, out=buf) if buf is not None else (a == b).to(a.dtype)   # indicator 1.0 / 0.0
        return torch.bmm(e.unsqueeze(1), w.unsqueeze(2)).view(-1)
    import numpy

    return numpy.einsum("ij,ij->i", a == b, w)


def at(x, idx):
    """``x[b, idx[b]]`` for every row: ``x`` (B, V), ``idx`` (B,) int64 -> (B,), ``x``'s dtype."""
    xp = array_namespace(x)
    return xp.take_along_axis(x, idx[:, None], axis=1)[:, 0]


def zero_at(x, idx):
    """A copy of ``x`` (B, V) with ``x[b, idx[b]] = 0`` in each row; ``idx`` (B,) int64 (C order)."""
    return _put(_copy(x), idx, 0.0)


def _copy(x):
    """A C-ordered copy of ``x`` (B, V)."""
    if is_torch_namespace(array_namespace(x)):
        return x.contiguous().clone()
    import numpy

    return numpy.array(x, order="C")


def _put(out, idx, values):
    """``out[b, idx[b]] = values[b]`` (or a scalar) in place, on numpy or torch (the scatter the array API lacks)."""
    if is_torch_namespace(array_namespace(out)):
        v = values[:, None] if not isinstance(values, float) else values
        return out.scatter_(1, idx[:, None], v)
    import numpy

    numpy.put_along_axis(out, idx[:, None], values if isinstance(values, float) else values[:, None], axis=1)
    return out


def only_at(x, idx):
    """``x`` (B, V) kept at ``idx[b]`` in each row and zero elsewhere (a one-hot mass); ``idx`` (B,) int64 (C order)."""
    xp = array_namespace(x)
    out = xp.zeros(x.shape, dtype=x.dtype, device=device(x))          # (B, V)
    return _put(out, idx, at(x, idx))


def accept_prob(m, q_i, x):
    """``clip(m_i(x_i) / q_i(x_i), 0, 1)``, 0 where ``q_i(x_i) = 0``: ``m``, ``q_i`` (B, V), ``x`` (B,) -> (B,).

    The acceptance probability of candidate ``x_i`` given ``0..i-1`` rejected (Leviathan et al. 2023,
    arXiv 2211.17192; the lemma of ``docs/RESISPEC.md`` section 2).
    """
    xp = array_namespace(m, q_i)
    qx = at(q_i, x)                                                   # (B,)
    return xp.clip(xp.where(qx > 0, at(m, x) / xp.where(qx > 0, qx, 1.0), 0.0), 0.0, 1.0)   # m(x) / q(x)


def reject_update(p_i, m, out=None):
    """Residual after a rejection, ``(p_i - m)_+ / sum``; ``p_i`` unchanged where that mass is ~0.

    ``p_i``, ``m``: (B, V), float64 or float32 -> (B, V), same dtype.  ``out``: optional (B, V) buffer of
    that dtype for the result (never ``p_i``; may be ``m``).  Leviathan et al. 2023 (arXiv 2211.17192).
    """
    xp = array_namespace(p_i, m)
    nat = native(xp)
    resid = nat.subtract(p_i, m, out=out)                            # p_i - m_i, (B, V)
    nat.clip(resid, 0.0, None, out=resid)                            # (p_i - m_i)_+
    z = xp.sum(resid, axis=1, keepdims=True)                         # 1 - sum(m_i) up to round-off, (B, 1)
    ok = z > residual_eps(xp, p_i.dtype)                             # (B, 1)
    nat.divide(resid, xp.where(ok, z, 1.0), out=resid)               # p_{i+1} = (p_i - m_i)_+ / z
    if is_torch_namespace(xp):
        return nat.where(ok, resid, p_i, out=resid)                  # rows with no mass left keep p_i
    nat.copyto(resid, p_i, where=~ok)
    return resid


def reject_at(p_i, x, out):
    """``reject_update(p_i, only_at(p_i, x))`` bit for bit, in fewer passes: ``p_i`` with ``x[b]`` zeroed in each row,
    renormalised (``p_i`` unchanged where that mass is ~0).  ``p_i`` (B, V), ``x`` (B,) int64, ``out`` a (B, V) buffer
    of ``p_i``'s dtype (never ``p_i``) that receives the result.  The residual of a one-hot proposal rejected
    (EAGLE-2's and SGLang's tree verification; Li et al. 2024, arXiv 2406.16858)."""
    xp = array_namespace(p_i)
    nat = native(xp)
    if is_torch_namespace(xp):
        out.copy_(p_i)
    else:
        nat.copyto(out, p_i)
    resid = _put(out, x, 0.0)                                        # (p_i - p_i(x) 1[x])_+ = p_i without x
    z = xp.sum(resid, axis=1, keepdims=True)                         # 1 - p_i(x) up to round-off, (B, 1)
    ok = z > residual_eps(xp, p_i.dtype)                             # (B, 1)
    nat.divide(resid, xp.where(ok, z, 1.0), out=resid)               # p_{i+1} = p_i without x / z
    if is_torch_namespace(xp):
        return nat.where(ok, resid, p_i, out=resid)                  # rows with no mass left keep p_i
    nat.copyto(resid, p_i, where=~ok)
    return resid


@lru_cache(maxsize=None)
def _params(fn) -> frozenset:
    """The parameter names of the function ``fn`` (an ``accepted_mass``, unbound); empty when unknown."""
    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()


def mass(rule, i, k, p_i, q_i, *, q, rejected, state, out=None):
    """``rule.accepted_mass(i, k, p_i, q_i, q=q, rejected=rejected)`` (B, V); an ``accepted_mass`` that takes
    ``state=`` (ResiSpec's: its look-ahead schedule, a solver's warm start) also gets the walk's own dict
    (made by the walk, passed explicitly: no thread-local, no state on the rule), and one that takes ``out=``
    (the torch reserve rules) the walk's (B, V) buffer to write ``m_i`` into.  A subclass or instance
    overriding ``accepted_mass`` without them is called without them."""
    fn = rule.accepted_mass                  # the instance's (a method set on the instance overrides the class's)
    takes = _params(getattr(fn, "__func__", fn))
    extra = {}
    if "state" in takes:
        extra["state"] = state
    if out is not None and "out" in takes:
        extra["out"] = out
    return fn(i, k, p_i, q_i, q=q, rejected=rejected, **extra)


def walk(rule, p, q, c, ms=None, ps=None, qs=None, state=None):
    """The sequential engine every accepted-mass rule shares, on numpy arrays or torch tensors.

    Step ``i`` asks ``rule.accepted_mass(i, k, p_i, q_i, q=q, rejected=c[:, :i])`` for ``m_i`` (B, V),
    accepts ``x_i`` with probability ``m_i(x_i) / q_i(x_i)`` and moves to the residual
    ``p_{i+1} = (p_i - m_i)_+ / (1 - sum m_i)``; under without-replacement drafting the draft ``q_i`` drops
    each rejected candidate and is renormalised (the law the sampler drew ``x_{i+1}`` from).

    Parameters
    ----------
    rule : object with ``accepted_mass`` and ``drafting``
    p, q : (B, V) float64 (or float32 tensors), validated laws
    c : (B, k) int64 candidates
    ms, ps, qs : lists, optional
        Filled with each step's ``m_i``, ``p_i`` (and the final residual) and ``q_i`` (drift analysis).
    state : dict, optional
        The walk's state handed to an ``accepted_mass`` that takes ``state=`` (:func:`mass`); a fresh dict by default
        (a rule may seed it, e.g. with solver buffers).

    Returns
    -------
    a : (B, k), ``p``'s dtype -- acceptance probability of each step
    residual : (B, V) -- the law of the token emitted when all ``k`` are rejected

    Raises
    ------
    TypeError
        ``p``, ``q`` of two array libraries (``array_api_compat``); whatever the rule's ``accepted_mass`` raises.

    Source: the sequential lemma of ``docs/RESISPEC.md`` section 2 (exact whenever ``m_i`` never reads ``x_i`` or
    later candidates); recursive rejection sampling, SpecInfer (Miao et al. 2024, arXiv 2305.09781).
    """
    xp = array_namespace(p, q)
    B, k = c.shape
    state = {} if state is None else state
    wor = rule.drafting == "without_replacement"
    a = xp.empty((B, k), dtype=p.dtype, device=device(p))
    # Two (B, V) buffers, reused: step i writes m_i (a rule taking out=) and then p_{i+1} over it into
    # bufs[i % 2], which never holds p_i (a fresh (B, V) allocation a step costs up to ~2x the step on CPU,
    # page faults).  Kept steps (ms, ps) get new arrays.
    # C order (empty_like of a broadcast batch is Fortran-strided: its sums would run in another order).
    bufs = (None, None) if ps is not None else tuple(xp.empty(p.shape, dtype=p.dtype, device=device(p)) for _ in "ab")
    p_i = p
    q_i = q / xp.sum(q, axis=1, keepdims=True) if wor else q         # the law the sampler draws (rows off 1 by SUM_TOL)
    for i in range(k):
        x = c[:, i]                                                    # (B,)
        m = mass(rule, i, k, p_i, q_i, q=q, rejected=c[:, :i], state=state,
                 out=bufs[i % 2])                                      # (B, V), 0 <= m <= min(p_i, q_i)
        a[:, i] = accept_prob(m, q_i, x)
        if ms is not None:
            ms.append(m), ps.append(p_i), qs.append(q_i)
        p_i = reject_update(p_i, m, out=bufs[i % 2])
        if wor and i + 1 < k:
            q_i = zero_at(q_i, x)
            q_i = q_i / xp.sum(q_i, axis=1, keepdims=True)             # q_{i+1} = norm(q_i without x_i)
    if ps is not None:
        ps.append(p_i)
    return a, p_i


def host(x, dtype=None):
    """A C-ordered numpy view of ``x`` (a numpy array or a CPU tensor), for the compiled kernels; None for a
    tensor on another device.  No copy where ``x`` is already C-ordered in ``dtype`` (default: its own)."""
    import numpy

    if is_torch(x):
        if x.device.type != "cpu":
            return None
        x = x.detach().numpy()
    return numpy.ascontiguousarray(x, dtype=dtype)


def host_out(out, dtype=None):
    """A numpy array that writes through to ``out`` (a C-ordered, writable numpy array or CPU tensor of ``dtype``,
    a numpy dtype, default float64), else None: the buffer a compiled kernel may fill in place."""
    import numpy

    if out is None:
        return None
    if is_torch(out):
        if out.device.type != "cpu" or not out.is_contiguous():
            return None
        out = out.detach().numpy()
    ok = out.dtype == (numpy.float64 if dtype is None else dtype) and out.flags.c_contiguous and out.flags.writeable
    return out if ok else None


def into(out, m):
    """``m`` written into ``out`` (B, V) and ``out`` returned; ``m`` itself when ``out`` is None."""
    if out is None:
        return m
    out[...] = m
    return out


def like(a, ref):
    """The numpy array ``a`` in the library, dtype and device of ``ref`` (no copy for numpy or a CPU tensor of
    that dtype)."""
    if is_torch(ref):
        import torch

        return torch.from_numpy(a).to(device=ref.device, dtype=ref.dtype)
    return a.astype(ref.dtype, copy=False)


def cummax(x):
    """Running maximum along each row of ``x`` (B, V) -> (B, V) (``np.maximum.accumulate`` / ``torch.cummax``)."""
    if is_torch(x):
        return x.cummax(dim=1).values
    import numpy

    return numpy.maximum.accumulate(x, axis=1)


#: Above this vocabulary size numpy's :func:`count_sorted` binary-searches; below it one vectorised O(V) scan is
#: cheaper (``benchmarks/lookahead_search.py``, B = 8, k = 4: scan/bsearch time ratio 0.4 at V = 1000, 0.5 at
#: 10,000, 1.4 at 50,000, 2.3 at 150,000).
SCAN_MAX_V = 32768


def count_sorted(rows, x, strict: bool):
    """Per row, how many entries are ``< x`` (``strict``) or ``<= x``: ``rows`` (B, V) ascending (``+inf``
    allowed), ``x`` (B,) -> (B,) int64.

    torch: ``searchsorted`` (O(log V)); numpy (which has no batched search): one O(V) scan up to
    :data:`SCAN_MAX_V` tokens, else a vectorised binary search over the rows (``ceil(log2(V + 1))`` passes).
    """
    if is_torch(rows):
        import torch

        return torch.searchsorted(rows, x[:, None].contiguous(), right=not strict)[:, 0]
    import numpy as np

    B, V = rows.shape
    if V <= SCAN_MAX_V:
        return np.sum((rows < x[:, None]) if strict else (rows <= x[:, None]), axis=1)
    idx = np.arange(B)
    lo = np.zeros(B, dtype=np.int64)
    hi = np.full(B, V, dtype=np.int64)
    for _ in range(int(V).bit_length()):
        mid = (lo + hi) // 2
        val = rows[idx, np.minimum(mid, V - 1)]
        right = (val < x) if strict else (val <= x)
        active = lo < hi
        lo = np.where(active & right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
    return lo
