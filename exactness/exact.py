"""Exact certification by enumeration: the joint law of (stop position, token).

For a verifier exposing ``chain`` (every :class:`resispec.Verifier`), the
exact joint law of the accepted index ``i`` (``-1`` = residual) and the
emitted token ``y`` at one node is

    J[i, y] = sum_tuples P(tuple) * prod_{j<i} (1 - a_j) * a_i * [x_i = y]
    J[k, y] = sum_tuples P(tuple) * prod_j (1 - a_j) * r(y)      (row k = residual)

summing over every candidate tuple drawn per the verifier's drafting (or its
``draft_law`` hook).  Its column sums are the output law (must equal ``p``),
its row sums the law of the stop position (number of rejections), and row
``k`` the residual law.  The verdict uses TV < 1e-9 (``docs/RESISPEC.md``
sections 2 and 5).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import Laws, as_node, check_k
from resispec.analysis import optimal_acceptance
from resispec.enumeration import candidate_tuples, count_tuples

from .sampling import accept_table, candidate_law, drafting_of, has_chain, takes_laws

#: Exact verdict threshold on TV(output law, p) for laws normalised to round-off.
EXACT_TOL = 1e-9


def exact_tol(*laws) -> float:
    """Threshold for the exact checks: ``EXACT_TOL + 2 sum_i |sum(law_i) - 1|`` (largest row).

    Laws are accepted when their rows sum to 1 within ``SUM_TOL`` (1e-6; a
    float32 softmax is off by ~1e-8), and an exact verifier fed such laws
    emits ``p / sum(p)`` up to that error, so the threshold grows by the
    input's own normalisation error and stays ``EXACT_TOL`` for laws that
    sum to 1 to round-off.
    """
    slack = sum(float(np.max(np.abs(np.asarray(x, dtype=np.float64).sum(axis=-1) - 1.0))) for x in laws)
    return EXACT_TOL + 2.0 * slack
#: Largest enumeration the harness performs by default.
MAX_TUPLES = 300_000
#: Tuples x V below which a verifier with an accept table is still enumerated.
_ENUM_ELEMS = 4_000_000


class ChainError(ValueError):
    """``verifier.chain`` returned an invalid law: NaN/inf, or probabilities outside [0, 1]."""


def _check_chain(verifier, a, r, tup, n: int, k: int, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate one enumeration block of ``chain``: accept_probs (n, k) and residual (n, V) in [0, 1], finite."""
    name = type(verifier).__name__
    a, r = np.asarray(a, dtype=np.float64), np.asarray(r, dtype=np.float64)
    if a.shape != (n, k) or r.shape != (n, V):
        raise ChainError(f"{name}.chain returned accept_probs of shape {a.shape} and residual of shape {r.shape}; "
                         f"expected ({n}, {k}) and ({n}, {V})")
    for what, arr in (("accept_probs", a), ("residual", r)):
        bad = ~np.isfinite(arr)
        kind = "NaN or inf"
        if not bad.any():
            bad = (arr < -1e-12) | (arr > 1 + 1e-12)
            kind = "a probability outside [0, 1]"
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            col = int(np.flatnonzero(bad[row])[0])
            raise ChainError(f"{name}.chain returned {kind} ({arr[row, col]!r}) in {what}[:, {col}] at candidates "
                             f"{tup[row].tolist()}: the exact law cannot be computed")
    return a, r


@dataclass(frozen=True)
class ExactResult:
    """Exact analysis of one node.

    Attributes
    ----------
    passed : bool
        ``tv < EXACT_TOL`` and acceptance <= alpha* (+1e-9).
    tv : float
        TV between the exact output law and ``p``.
    joint : ndarray, shape (k + 1, V), float64
        Joint law of (stop position, token); row ``k`` is the residual.
    acceptance : float
        Exact probability of accepting some candidate.
    alpha_star : float or None
        Optimum acceptance for the verifier's drafting (None if not computable).
    """

    passed: bool
    tv: float
    joint: np.ndarray
    acceptance: float
    alpha_star: float | None

    @property
    def output_law(self) -> np.ndarray:
        return self.joint.sum(axis=0)

    @property
    def stop_law(self) -> np.ndarray:
        """(k + 1,): P(accepted index = i), last entry = all rejected."""
        return self.joint.sum(axis=1)


def enumerable(verifier, q, k: int, limit: int = MAX_TUPLES) -> bool:
    """True when the candidate tuples at this node number at most ``limit``."""
    d = drafting_of(verifier)
    d = "iid" if d == "any" else d
    ql = candidate_law(verifier, np.asarray(q, dtype=np.float64)[None])[0]
    n = int(np.count_nonzero(ql > 0))
    if d == "without_replacement" and k > n:
        return False
    return count_tuples(n, k, d) <= limit


def joint_law(verifier, p, q, k: int, *, limit: int = MAX_TUPLES) -> np.ndarray:
    """Exact joint law (k + 1, V) of (stop position, token) at one node.

    ``p, q``: (V,) float64 laws, or ``p`` a one-node
    :class:`resispec._validation.Laws` and ``q=None`` (checked once at the
    door, trusted).  Enumerates candidate tuples through ``verifier.chain`` when they number
    at most ``limit`` (and, for verifiers with a built-in accept table --
    ``sps``, ``rrs``, ``kseq``, ``resispec`` -- when tuples x V <= 4e6);
    otherwise uses that accept table (any V).

    Raises
    ------
    ValueError
        Bad laws, ``k``, or more than ``limit`` tuples to enumerate.
    ChainError (a ValueError)
        ``chain`` returned NaN/inf, probabilities outside [0, 1] or wrong shapes.
    TypeError
        The verifier has no ``chain(p, q, candidates)`` method
        (:func:`exactness.sampling.has_chain`).
    """
    p2, q2, _ = as_node(p, q)
    if p2.shape[0] != 1:
        raise ValueError("joint_law takes one node: p and q of shape (V,)")
    p1, q1 = p2[0], q2[0]
    k = check_k(k)
    V = p1.size
    tab = accept_table(verifier, p1, q1, k)
    if tab is not None and enumerable(verifier, q1, k, min(limit, _ENUM_ELEMS // V)):
        tab = None  # small enough: enumerate, independently of the table
    if tab is not None:
        a, r = tab
        J = np.zeros((k + 1, V))
        reach = 1.0
        for i in range(k):
            J[i] = reach * q1 * a[i]
            reach = reach - J[i].sum()
        J[k] = max(reach, 0.0) * r
        return J
    if not has_chain(verifier):
        raise TypeError("exact certification needs verifier.chain(p, q, candidates) (the Verifier interface)")
    d = drafting_of(verifier)
    d = "iid" if d == "any" else d
    ql = candidate_law(verifier, q2)[0]
    J = np.zeros((k + 1, V))
    rows = max(1, min(65536, (1 << 22) // V))
    trusted = takes_laws(verifier, "chain")
    for tup, w in candidate_tuples(ql, k, d, chunk_rows=rows, limit=limit):
        n = tup.shape[0]
        P, Q = np.broadcast_to(p1, (n, V)), np.broadcast_to(q1, (n, V))
        ch = verifier.chain(Laws(P, Q), None, tup) if trusted else verifier.chain(P, Q, tup)
        if not (hasattr(ch, "accept_probs") and hasattr(ch, "residual")):
            raise ChainError(f"{type(verifier).__name__}.chain returned {type(ch).__name__}; it must return a "
                             "resispec.Chain (accept_probs (B, k), residual (B, V))")
        a, r = _check_chain(verifier, ch.accept_probs, ch.residual, tup, n, k, V)
        reach = w.copy()
        for i in range(k):
            J[i] += np.bincount(tup[:, i], weights=reach * a[:, i], minlength=V)
            reach = reach * (1.0 - a[:, i])
        J[k] += reach @ r
    return J


def certify_exact(verifier, p, q, k: int, *, limit: int = MAX_TUPLES, tol: float | None = None) -> ExactResult:
    """Exact verdict at one node: TV(output law, p) < ``tol`` and acceptance <= alpha*.

    Parameters
    ----------
    verifier : Verifier
    p, q : array_like, shape (V,), float64
        Or ``p`` a one-node :class:`resispec._validation.Laws` and ``q=None`` (trusted).
    k : int >= 1
    limit : int, largest enumeration
    tol : float, TV threshold (default :func:`exact_tol` of p and q: 1e-9 for laws normalised to round-off)

    Returns
    -------
    ExactResult

    Raises
    ------
    ValueError, TypeError
        As :func:`joint_law`.
    """
    node = as_node(p, q)
    p2, q2, _ = node
    J = joint_law(verifier, node, None, k, limit=limit)
    tv = 0.5 * float(np.abs(J.sum(axis=0) - p2[0]).sum())
    tol = exact_tol(p2[0], q2[0]) if tol is None else tol
    acc = float(1.0 - J[k].sum())
    d = drafting_of(verifier)
    astar = None
    try:
        if not hasattr(verifier, "draft_law"):
            astar = float(optimal_acceptance(node.row(0), None, k, drafting="iid" if d == "any" else d))
    except ValueError:
        astar = None
    ok = tv < tol and (astar is None or acc <= astar + 1e-9)
    return ExactResult(bool(ok), tv, J, acc, astar)
