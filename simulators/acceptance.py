"""Per-token acceptance mass of a verifier at one node.

``M(x)`` = probability that the verifier accepts SOME candidate and that the
accepted candidate is token ``x`` (so ``sum_x M(x)`` is the acceptance rate).
Tree recursions need ``M`` because the accepted token decides the context of
the next node (``docs/RESISPEC.md`` section 6).

Closed forms (any V) are each verifier's own ``closed_form_split`` method
(:meth:`resispec.Verifier.closed_form_split`, tested against enumeration),
so adding one touches the verifier's class only:

- sequential mass verifiers with candidate-independent ``m_i`` under iid
  drafting (``sps``, ``rrs``, ``resispec``): ``M = sum_i prod_{j<i}(1 - beta_j) m_i``
  (section 2 lemma; SpecInfer, arXiv 2305.09781);
- ``kseq`` (SpecTr, arXiv 2310.15141): ``M = min(q, p / rho) (1 - (1 - beta)^k) / beta``;
- ``target_only`` under iid drafting (EAGLE-2, arXiv 2406.16858):
  ``M = p (1 - (1 - q)^k)``.

Everything else (``rrs_wor``, ``target_only`` without replacement, custom
verifiers) is computed by exact enumeration of the candidate tuples
(``V**k`` or ``V!/(V-k)!`` tuples, at most ``resispec.enumeration.MAX_TUPLES``),
or by a Rao-Blackwellised Monte Carlo estimate when asked
(``method="monte_carlo"``: the exact conditional acceptance of each sampled
tuple is averaged, and a standard error is returned).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resispec._validation import as_laws, check_drafting, check_k, check_rng
from resispec.enumeration import MAX_TUPLES, candidate_tuples, count_tuples
from resispec.sampling import draw_candidates

METHODS = ("auto", "closed_form", "enumeration", "monte_carlo")


@dataclass(frozen=True)
class AcceptanceMass:
    """Per-token acceptance mass of a batch of nodes.

    Attributes
    ----------
    mass : ndarray, shape (B, V), float64
        ``mass[b, x]``: probability that node ``b`` accepts a candidate equal to ``x``.
    method : str
        ``closed_form``, ``enumeration`` or ``monte_carlo``.
    stderr : ndarray, shape (B,), float64
        Standard error of ``acceptance`` (0 for exact methods).
    """

    mass: np.ndarray
    method: str
    stderr: np.ndarray

    @property
    def acceptance(self) -> np.ndarray:
        """Acceptance rate per node, shape (B,)."""
        return self.mass.sum(axis=1)


def _closed_form(verifier, p, q, k, drafting):
    """``M`` (B, V) from the verifier's own closed form (``Verifier.closed_form_split``), or None."""
    split = getattr(verifier, "closed_form_split", None)
    if split is None:
        return None
    out = split(p, q, k, drafting)
    return None if out is None else out[0]


def resolve_drafting(verifier, drafting: str | None) -> str:
    """The candidate law to use: ``drafting`` if given, else the verifier's (``any`` -> ``iid``)."""
    if drafting is None:
        d = getattr(verifier, "drafting", "iid")
        return "iid" if d == "any" else d
    check_drafting(drafting)
    return "iid" if drafting == "any" else drafting


def _need_chain(verifier):
    if not hasattr(verifier, "_chain"):
        raise TypeError(f"{type(verifier).__name__} has no _chain(p, q, candidates); "
                        "per-token acceptance needs the verifier's acceptance chain")


def node_split(verifier, p, q, k: int, *, drafting: str | None = None, limit: int = MAX_TUPLES):
    """Exact split of the emitted token's law into accepted and residual parts.

    By enumeration of every candidate tuple: ``M[b, x]`` = P(a candidate equal
    to ``x`` is accepted), ``R[b, x]`` = P(every candidate rejected and the
    residual emits ``x``).  ``M + R`` is the emitted law (``p`` for an exact
    verifier).

    Parameters
    ----------
    verifier : Verifier with ``_chain``
    p, q : array_like, shape (V,) or (B, V), float64
    k : int >= 1
    drafting : {"iid", "without_replacement"}, optional (default: the verifier's)

    Returns
    -------
    M, R : ndarray, shape (B, V), float64

    Raises
    ------
    ValueError
        More than ``limit`` tuples, bad laws or k.
    """
    _need_chain(verifier)
    p2, q2, _ = as_laws(p, q)
    k = check_k(k)
    d = resolve_drafting(verifier, drafting)
    B, V = p2.shape
    M = np.zeros((B, V))
    R = np.zeros((B, V))
    rows_per = max(1, min(65536, (1 << 22) // V))
    for b in range(B):
        for tup, w in candidate_tuples(q2[b], k, d, chunk_rows=rows_per, limit=limit):
            n = tup.shape[0]
            a, r = verifier._chain(np.broadcast_to(p2[b], (n, V)), np.broadcast_to(q2[b], (n, V)), tup)
            reach = w.copy()
            for i in range(k):
                M[b] += np.bincount(tup[:, i], weights=reach * a[:, i], minlength=V)
                reach = reach * (1.0 - a[:, i])
            R[b] += reach @ r
    return M, R


def _monte_carlo(verifier, p, q, k, drafting, n_samples, rng):
    _need_chain(verifier)
    B, V = p.shape
    M = np.zeros((B, V))
    se = np.zeros(B)
    for b in range(B):
        Q = np.broadcast_to(q[b], (n_samples, V))
        tup = draw_candidates(Q, k, drafting, rng)
        a, _ = verifier._chain(np.broadcast_to(p[b], (n_samples, V)), Q, tup)
        reach = np.full(n_samples, 1.0 / n_samples)
        acc = np.zeros(n_samples)
        for i in range(k):
            M[b] += np.bincount(tup[:, i], weights=reach * a[:, i], minlength=V)
            acc += reach * n_samples * a[:, i]
            reach = reach * (1.0 - a[:, i])
        se[b] = acc.std(ddof=1) / np.sqrt(n_samples) if n_samples > 1 else np.inf
    return M, se


def acceptance_mass(verifier, p, q, k: int, *, drafting: str | None = None, method: str = "auto",
                    n_samples: int = 256, rng: np.random.Generator | None = None,
                    limit: int = MAX_TUPLES) -> AcceptanceMass:
    """Per token ``x``, the probability that the verifier accepts a candidate equal to ``x``.

    Parameters
    ----------
    verifier : Verifier
    p, q : array_like, shape (V,) or (B, V), float64
        Target and draft laws of each node.
    k : int >= 1
        Candidates per node.
    drafting : {"iid", "without_replacement"}, optional
        Candidate law (default: the verifier's; ``any`` means iid).
    method : {"auto", "closed_form", "enumeration", "monte_carlo"}
        ``auto``: closed form when registered for this verifier and drafting,
        else exact enumeration (raises past ``limit`` tuples, suggesting
        ``monte_carlo``).
    n_samples : int
        Candidate tuples per node for ``monte_carlo``.
    rng : numpy.random.Generator
        Required for ``monte_carlo``.

    Returns
    -------
    AcceptanceMass
        ``mass`` (B, V), ``method``, ``stderr`` (B,).

    Raises
    ------
    ValueError
        Unknown method, no closed form for ``closed_form``, enumeration past
        ``limit``, bad laws or k.
    TypeError
        A verifier without an acceptance chain (for enumeration / Monte Carlo).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    p2, q2, _ = as_laws(p, q)
    k = check_k(k)
    d = resolve_drafting(verifier, drafting)
    B = p2.shape[0]
    if method in ("auto", "closed_form"):
        M = _closed_form(verifier, p2, q2, k, d)
        if M is not None:
            return AcceptanceMass(np.clip(M, 0.0, None), "closed_form", np.zeros(B))
        if method == "closed_form":
            raise ValueError(f"no closed-form acceptance mass for {verifier!r} with drafting={d!r}; "
                             "use method='enumeration' or 'monte_carlo'")
        support = int((q2 > 0).sum(axis=1).max())
        if count_tuples(support, k, d) > limit:
            raise ValueError(
                f"{verifier!r} with drafting={d!r} has no closed form and exact enumeration needs "
                f"{count_tuples(support, k, d):,} candidate tuples (limit {limit:,}); "
                "use method='monte_carlo' (with rng) or a smaller vocabulary")
    if method == "monte_carlo":
        if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 2:
            raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
        M, se = _monte_carlo(verifier, p2, q2, k, d, int(n_samples), check_rng(rng))
        return AcceptanceMass(M, "monte_carlo", se)
    M, _ = node_split(verifier, p2, q2, k, drafting=d, limit=limit)
    return AcceptanceMass(M, "enumeration", np.zeros(B))
