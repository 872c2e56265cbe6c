"""Certification of a verifier at one node: Monte Carlo plus conditional checks.

Checks (each a p-value; deterministic checks give 1.0 = pass, 0.0 = fail),
combined with Holm's correction (``statsmodels`` ``multipletests``):

``marginal``
    Chi-square / G-test of the emitted tokens against ``p``.
``exact_law``
    Exact output law by enumeration (or the built-in accept table) equals
    ``p`` to TV < 1e-9 and the exact acceptance does not exceed alpha*.
``joint``
    Sampled (stop position, token) pairs against the exact joint law of the
    verifier's own ``chain``: catches a ``verify`` that disagrees with its
    declared chain (e.g. a reused uniform).
``accepted_count``
    Law of the accepted index (number of rejections before the stop).
``residual``
    Law of the token emitted at the residual stop (all candidates rejected).
``tree_bonus``, ``tree_two_level``
    Joint law of two successive emitted tokens on a small tree, depth 1 (the
    second token is the bonus after a full accept) and depth 2
    (:mod:`exactness.tree`); V <= ``TREE_MAX_V`` only.  Exact TV folded in.
``determinism``
    Same seed, same tokens and accepted indices.
``batched``
    ``verify`` on a batch of distinct nodes equals one node at a time with
    the same uniforms.
"""

from __future__ import annotations

import numpy as np

from resispec import Verifier
from resispec._validation import as_laws, check_k

from ._checks import as_generator, check_alpha, check_n
from .certificate import Certificate, certificate_from_counts
from .exact import EXACT_TOL, MAX_TUPLES, certify_exact, enumerable
from .gof import gof_test
from .sampling import NodeSampler, candidate_law, draw_node_candidates, drafting_of
from .tree import tree_check

#: Default Monte Carlo draws per node.
DEFAULT_N = 200_000
#: Cap on draws x V x k for verifiers sampled through the generic (O(V)) path.
GENERIC_BUDGET = 40_000_000
#: Largest vocabulary for the tree checks.
TREE_MAX_V = 16
#: Largest number of sampled pairs per tree check.
TREE_N = 50_000
#: Nodes in the batched == one-at-a-time check.
BATCH_ROWS = 16


def default_n(sampler: NodeSampler) -> int:
    """Default budget: ``DEFAULT_N`` draws, capped for the generic path at large V."""
    if sampler.path == "table":
        return DEFAULT_N
    return int(max(2_000, min(DEFAULT_N, GENERIC_BUDGET // (sampler.V * sampler.k))))


def _determinism(sampler: NodeSampler, seed_seq) -> float:
    m = 500
    a = sampler.draws(np.random.default_rng(seed_seq), m)
    b = sampler.draws(np.random.default_rng(seed_seq), m)
    same = np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)
    return 1.0 if same else 0.0


def _batched(verifier, p, q, k, rng) -> float | None:
    """1.0 when a batch of distinct nodes verifies like one node at a time."""
    if not isinstance(verifier, Verifier):
        return None
    V = p.size
    B = BATCH_ROWS
    perms = np.stack([rng.permutation(V) for _ in range(B)])
    P, Q = p[perms], q[perms]
    d = drafting_of(verifier)
    cl = candidate_law(verifier, Q)
    cand = np.stack([draw_node_candidates(cl[b], k, d, rng.random((1, k)))[0] for b in range(B)])
    u = rng.random((B, k + 1))
    whole = verifier.verify(P, Q, cand, uniforms=u)
    for b in range(B):
        one = verifier.verify(P[b:b + 1], Q[b:b + 1], cand[b:b + 1], uniforms=u[b:b + 1])
        if one.tokens[0] != whole.tokens[b] or one.accepted[0] != whole.accepted[b]:
            return 0.0
    return 1.0


def certify_verifier(verifier, p, q, k: int, *, n: int | None = None, alpha: float = 1e-3, seed=0,
                     power: float = 0.99, tv: float | None = None, tree: bool = True,
                     exact: bool = True) -> Certificate:
    """Certify a verifier at one node by Monte Carlo through ``verify`` plus conditional checks.

    Candidates are drawn per ``verifier.drafting`` (``"any"`` -> iid; a
    ``draft_law`` hook overrides the candidate law), ``k`` per draw.

    Parameters
    ----------
    verifier : Verifier or any object with ``verify(p, q, candidates, rng)`` and ``drafting``
    p, q : array_like, shape (V,), float64
        Target and draft laws of one node.
    k : int >= 1
        Candidates per node.
    n : int, optional
        Monte Carlo draws; ``None`` = default budget (``DEFAULT_N`` = 200,000,
        capped at ``GENERIC_BUDGET / (V k)`` (at least 2,000) when sampling
        costs O(V) per draw).
    alpha : float, default 1e-3
        Family-wise level over the checks (Holm).
    seed : int, SeedSequence or Generator, default 0
    power : float, default 0.99
        Power used for ``detectable_tv``.
    tv : float, optional
        Smallest TV you require to be detected; warns (ExactnessWarning) with
        the detectable TV when ``n`` is too small.
    tree : bool, default True
        Run the two-token tree checks (only when V <= ``TREE_MAX_V``).
    exact : bool, default True
        Run the exact checks when the enumeration fits (<= 300,000 tuples)
        or a built-in accept table exists.

    Returns
    -------
    Certificate
        ``checks`` maps each check above to its raw p-value; ``details`` holds
        the exact TV, acceptance, alpha*, sampling path and tree numbers.

    Raises
    ------
    ValueError, TypeError
        Bad laws, ``k``, ``n``, ``alpha`` or verifier.
    """
    p2, q2, _ = as_laws(p, q)
    if p2.shape[0] != 1:
        raise ValueError(f"certify_verifier takes one node: p and q of shape (V,); got {p2.shape[0]} rows")
    p1, q1 = p2[0], q2[0]
    k = check_k(k)
    alpha = check_alpha(alpha)
    if isinstance(seed, np.random.Generator):
        ss = np.random.SeedSequence(int(seed.integers(2**63)))
    elif isinstance(seed, np.random.SeedSequence):
        ss = seed
    else:
        as_generator(seed)  # validates the type (TypeError names the argument)
        ss = np.random.SeedSequence(seed)
    s_mc, s_det, s_batch, s_tree = ss.spawn(4)
    sampler = NodeSampler(verifier, p1, q1, k)
    n = default_n(sampler) if n is None else check_n(n)
    checks: dict[str, float] = {}
    details: dict = {"path": sampler.path, "V": int(p1.size), "k": k}

    J = None
    if exact and hasattr(verifier, "chain") and (enumerable(verifier, q1, k) or sampler.table is not None):
        ex = certify_exact(verifier, p1, q1, k, limit=MAX_TUPLES)
        J = ex.joint
        checks["exact_law"] = 1.0 if ex.passed else 0.0
        details["exact"] = {"tv": ex.tv, "acceptance": ex.acceptance, "alpha_star": ex.alpha_star,
                            "tol": EXACT_TOL}

    draws = sampler.draws(np.random.default_rng(s_mc), n)
    counts = np.bincount(draws.tokens, minlength=p1.size)
    V = p1.size
    mc_df: dict[str, int] = {}

    def _mc(name, counts_, law_):
        res = gof_test(counts_, law_)
        checks[name] = res.pvalue
        mc_df[name] = res.df

    if J is not None and np.all(draws.accepted >= -1):
        stop = np.where(draws.accepted < 0, k, draws.accepted)
        _mc("joint", np.bincount(stop * V + draws.tokens, minlength=(k + 1) * V), J.ravel())
        _mc("accepted_count", np.bincount(stop, minlength=k + 1), J.sum(axis=1))
        rmass = J[k].sum()
        nres = int(np.count_nonzero(stop == k))
        if rmass > 0 and nres > 0:
            _mc("residual", np.bincount(draws.tokens[stop == k], minlength=V), J[k] / rmass)
        details["acceptance_mc"] = float(np.mean(draws.accepted >= 0))

    checks["determinism"] = _determinism(sampler, s_det)
    b = _batched(verifier, p1, q1, k, np.random.default_rng(s_batch))
    if b is not None:
        checks["batched"] = b
    if tree and V <= TREE_MAX_V:
        rng_t = np.random.default_rng(s_tree)
        n_tree = max(1, min(n // 2, TREE_N))
        can_exact = exact and hasattr(verifier, "chain") and enumerable(verifier, q1, k)
        for name, depth in (("tree_bonus", 1), ("tree_two_level", 2)):
            tr = tree_check(verifier, p1, q1, k, n_tree, rng_t, depth=depth, exact=can_exact)
            checks[name] = tr.pvalue
            if tr.exact_tv is not None:
                checks[name] = tr.pvalue if tr.exact_tv < EXACT_TOL else 0.0
            details[name] = {"exact_tv": tr.exact_tv, "pvalue_mc": tr.pvalue, "n": tr.n}
            mc_df[name] = tr.df
    cert = certificate_from_counts(counts, p1, alpha=alpha, power=power, tv=tv, checks=checks, details=details)
    mc_df["marginal"] = cert.df
    cert.details["mc_df"] = mc_df
    return cert
