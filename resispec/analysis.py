"""Exact analysis of one node: output law, acceptance and the optimum alpha*."""

from __future__ import annotations

import numpy as np

from ._validation import Laws, as_node, check_drafting, check_k
from .enumeration import MAX_TUPLES, candidate_tuples, check_limit, count_tuples
from .verifiers.base import Verifier, law_from_chain, takes_laws

# (rows x V) elements processed at once during enumeration.
_ELEMS = 1 << 22


def _one_node(p, q) -> Laws:
    """The door of the one-node functions: ``p, q`` checked once (or a trusted ``Laws`` passed through)."""
    node = as_node(p, q)
    if node.shape[0] != 1:
        raise ValueError(f"p and q must describe one node, shape (V,); got {node.shape[0]} rows")
    return node.row(0)


def _pq(verifier, method: str, node: Laws) -> tuple:
    """What ``verifier.<method>`` gets as ``(p, q)``: the trusted ``Laws`` if it is resispec's own, else (V,) arrays."""
    return (node, None) if takes_laws(verifier, method) else (node.p[0], node.q[0])


def _drafting_of(verifier: Verifier, drafting: str | None) -> str:
    if drafting is None:
        d = getattr(verifier, "drafting", "iid")
        return "iid" if d == "any" else d
    return check_drafting(drafting)


def _check_verifier(verifier):
    if not all(hasattr(verifier, a) for a in ("verify", "drafting")):
        raise TypeError(f"verifier must follow the Verifier interface (verify, drafting), got {type(verifier).__name__}")
    if not hasattr(verifier, "_chain") and not hasattr(verifier, "conditional_law"):
        raise TypeError("exact analysis needs a verifier with conditional_law()")


def _enumerate(verifier, p, q, k, drafting, limit):
    """Yield (tuples, probs, accept_probs, residual) chunks."""
    V = p.size
    rows = max(1, min(65536, _ELEMS // V))
    for tup, w in candidate_tuples(q, k, drafting, chunk_rows=rows, limit=limit):
        n = tup.shape[0]
        P = np.broadcast_to(p, (n, V))
        Q = np.broadcast_to(q, (n, V))
        if hasattr(verifier, "_chain"):
            a, r = verifier._chain(P, Q, tup)
            yield tup, w, a, r
        else:  # black-box verifier: only the conditional law is known
            yield tup, w, None, np.asarray(verifier.conditional_law(P, Q, tup), dtype=np.float64)


#: Ways to compute the exact analysis of one node.
METHODS = ("auto", "enumeration", "closed_form")


def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return method


def _closed_split(verifier, node: Laws, k, drafting):
    """The verifier's closed-form ``(M, R)`` for one trusted node ((V,), (V,)), or None."""
    fn = getattr(verifier, "closed_form_split", None)
    if fn is None:
        return None
    split = fn(*_pq(verifier, "closed_form_split", node), k, drafting)
    return None if split is None else (np.asarray(split[0])[0], np.asarray(split[1])[0])


def _fits(q, k, d, limit):
    return count_tuples(int(np.count_nonzero(q > 0)), k, d) <= limit


def _no_closed_form(verifier, d):
    return ValueError(f"{type(verifier).__name__} ({getattr(verifier, 'name', '?')}) has no closed form under "
                      f"drafting={d!r}; use method='enumeration' (or 'auto')")


def exact_output_law(verifier: Verifier, p, q, k: int, *, drafting: str | None = None,
                     limit: int = MAX_TUPLES, method: str = "auto") -> np.ndarray:
    """Exact law of the emitted token at one node.

    By enumeration: ``verifier.conditional_law`` summed over every candidate
    tuple weighted by its draft probability (``drafting`` defaults to the
    verifier's; ``"any"`` is enumerated as iid).  By closed form: ``M + R``
    from :meth:`Verifier.closed_form_split` (accepted and residual mass per
    token, computed from the rule, never assumed equal to ``p``), for
    ``target_only``, ``kseq`` and the candidate-independent sequential rules
    (``sps``, ``rrs``, ``resispec``) under iid drafts: any V.

    Parameters
    ----------
    verifier : Verifier
    p, q : array_like, shape (V,), float64
        Or ``p`` a one-node :class:`resispec._validation.Laws` and ``q=None`` (checked once already, trusted).
    k : int >= 1
    drafting : {"iid", "without_replacement"}, optional
        Override the candidate law (e.g. to show ``rrs`` is biased on
        without-replacement drafts).
    limit : int
        Largest number of tuples (default 2e6).
    method : {"auto", "enumeration", "closed_form"}
        ``"auto"``: enumeration when the tuples fit in ``limit`` (it runs the
        verifier's own chain), else the closed form when the verifier has one.

    Returns
    -------
    ndarray, shape (V,), float64
        Equals ``p`` for an exact verifier (to round-off).

    Raises
    ------
    ValueError
        Bad laws, ``k < 1``, unknown ``method``, ``method="closed_form"``
        without one, or more than ``limit`` tuples (``V**k > 2e6`` for iid
        over the draft support) and no closed form.
    """
    _check_verifier(verifier)
    node = _one_node(p, q)
    p1, q1 = node.p[0], node.q[0]
    k = check_k(k)
    _check_method(method)
    check_limit(limit)
    d = _drafting_of(verifier, drafting)
    if method == "closed_form" or (method == "auto" and not _fits(q1, k, d, limit)):
        split = _closed_split(verifier, node, k, d)
        if split is not None:
            return split[0] + split[1]
        if method == "closed_form":
            raise _no_closed_form(verifier, d)
    law = np.zeros_like(p1)
    for tup, w, a, r in _enumerate(verifier, p1, q1, k, d, limit):
        cond = law_from_chain(a, r, tup) if a is not None else r
        law += w @ cond
    return law


def acceptance_probability(verifier: Verifier, p, q, k: int, *, drafting: str | None = None,
                           limit: int = MAX_TUPLES, method: str = "auto") -> float:
    """Exact probability that some candidate is accepted at one node.

    ``method="auto"``: the verifier's candidate-independent per-step
    acceptance (``A = 1 - prod_i (1 - beta_i)``, ``docs/RESISPEC.md``
    section 2) when it has one and ``drafting`` is not overridden (``rrs``,
    ``sps``, ``kseq``, ``resispec`` with iid drafts: any V); else
    enumeration of every candidate tuple when they fit in ``limit``
    (``V**k <= 2e6``); else the closed form of
    :meth:`Verifier.acceptance_closed_form` (``target_only`` with iid
    drafts, ``sum_x p(x) (1 - (1 - q(x))^k)``, and the rules above: any V).

    Parameters
    ----------
    verifier : Verifier
    p, q : array_like, shape (V,), float64
        Or ``p`` a one-node :class:`resispec._validation.Laws` and ``q=None`` (checked once already, trusted).
    k : int >= 1
    drafting : str, optional
        Override the candidate law (enumerates when the tuples fit).
    limit : int
        Largest number of tuples (default 2e6).
    method : {"auto", "enumeration", "closed_form"}

    Returns
    -------
    float in [0, 1]

    Raises
    ------
    ValueError
        Bad laws, ``k < 1``, unknown ``method``, ``method="closed_form"``
        without one, or enumeration past ``limit`` and no closed form.
    TypeError
        Enumeration of a verifier without an accept chain (``_chain``).
    """
    _check_verifier(verifier)
    node = _one_node(p, q)
    p1, q1 = node.p[0], node.q[0]
    k = check_k(k)
    _check_method(method)
    check_limit(limit)
    if method == "auto" and drafting is None and hasattr(verifier, "step_acceptance"):
        beta = verifier.step_acceptance(*_pq(verifier, "step_acceptance", node), k)
        if beta is not None:
            return float(1.0 - np.prod(1.0 - np.asarray(beta)[0]))
    d = _drafting_of(verifier, drafting)
    if method == "closed_form" or (method == "auto" and not _fits(q1, k, d, limit)):
        split = _closed_split(verifier, node, k, d)
        if split is not None:
            return float(np.clip(split[0].sum(), 0.0, 1.0))
        if method == "closed_form":
            raise _no_closed_form(verifier, d)
    total = 0.0
    for tup, w, a, r in _enumerate(verifier, p1, q1, k, d, limit):
        if a is None:
            raise TypeError("acceptance_probability needs a verifier with an accept chain (_chain)")
        total += float(w @ (1.0 - np.prod(1.0 - a, axis=1)))
    return total


def optimal_acceptance(p, q, k: int, drafting: str = "iid") -> float | np.ndarray:
    """alpha*: the largest acceptance any exact verifier can reach.

    ``alpha* = 1 - max_H [Q(all k drafts in H) - p(H)]`` (max-flow / min-cut;
    ``docs/RESISPEC.md`` section 5; see also Sun et al. 2023, arXiv
    2310.15141, and Hu et al. 2025, arXiv 2502.18779).  For iid drafts
    ``Q(all in H) = q(H)^k`` and the maximiser is a prefix of tokens sorted
    by ``p/q`` ascending: O(V log V).  For without-replacement drafts the
    maximum is taken over every subset of the draft support by exact
    enumeration (support <= 20 tokens and <= 2e6 ordered tuples); past that
    over the ratio-sorted prefixes (:func:`resispec.wor_bound.alpha_star_wor`:
    exact for k = 2 in O(V log V); for k >= 3 a successive-sampling integral
    with certified error <= 1e-4, a few seconds at V = 151,936; use that
    function for the bracket).

    Parameters
    ----------
    p, q : array_like, shape (V,) or (B, V), float64
        Or ``p`` a :class:`resispec._validation.Laws` and ``q=None`` (checked once already, trusted).
    k : int >= 1
    drafting : {"iid", "without_replacement"}

    Returns
    -------
    float (or ndarray (B,) for 2-D input)

    Raises
    ------
    ValueError
        Bad laws or k, unknown drafting, or ``k`` above the draft support
        (without replacement).
    """
    p2, q2, squeeze = as_node(p, q)
    k = check_k(k)
    check_drafting(drafting)
    if drafting == "without_replacement" and k > 1:
        out = np.array([_alpha_star_wor(pr, qr, k) for pr, qr in zip(p2, q2)])
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # p / tiny q -> inf, as q = 0
            ratio = np.where(q2 > 0, p2 / np.where(q2 > 0, q2, 1.0), np.inf)
        order = np.argsort(ratio, axis=1, kind="stable")
        Q = np.cumsum(np.take_along_axis(q2, order, axis=1), axis=1)
        P = np.cumsum(np.take_along_axis(p2, order, axis=1), axis=1)
        gap = np.max(np.minimum(Q, 1.0) ** k - P, axis=1)
        out = 1.0 - np.maximum(gap, 0.0)
    out = np.clip(out, 0.0, 1.0)
    return float(out[0]) if squeeze else out


#: Largest draft support for the exact without-replacement optimum.
MAX_WOR_SUPPORT = 20


def _alpha_star_wor(p: np.ndarray, q: np.ndarray, k: int) -> float:
    support = np.flatnonzero(q > 0)
    n = support.size
    if k > n:
        raise ValueError(f"k = {k} exceeds the draft support ({n} tokens) for without-replacement drafting")
    if n > MAX_WOR_SUPPORT or count_tuples(n, k, "without_replacement") > MAX_TUPLES:
        # past enumeration: successive-sampling integral over ratio-sorted prefixes
        from .wor_bound import alpha_star_wor

        return alpha_star_wor(p, q, k).statistic
    f = np.zeros(1 << n)
    bits = (1 << np.arange(n, dtype=np.int64))
    index = np.full(q.size, -1)
    index[support] = np.arange(n)
    for tup, w in candidate_tuples(q, k, "without_replacement"):
        masks = bits[index[tup]].sum(axis=1)
        f += np.bincount(masks, weights=w, minlength=1 << n)
    g = np.zeros(1 << n)
    g[bits] = p[support]
    for b in range(n):  # zeta transform: sum over subsets
        for arr in (f, g):
            view = arr.reshape(-1, 2, 1 << b)
            view[:, 1, :] += view[:, 0, :]
    return float(1.0 - max(0.0, float(np.max(f - g))))
