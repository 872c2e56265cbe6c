"""Shrink a coupled mismatch to a minimal counterexample and print it as Python.

A direct search (no hypothesis dependency): one row; runs of tokens that are
neither a candidate nor an emitted token merged in place (the CDF at every
kept token is unchanged, so the residual draw still lands where it did);
single tokens dropped; candidates dropped from the end; p, q and the coins
rounded to as few decimals as keep the mismatch.  Each step is kept only if
the kernel and the reference still disagree on the same coins.
"""

from __future__ import annotations

import numpy as np

from .._checks import SubjectError
from .conventions import Coins, to_python
from .run import run_kernel, run_reference

#: Single-token drops are tried only on nodes of at most this many tokens (after merging).
MAX_DROP_V = 64


def _differs(kernel, reference, p, q, c, coins) -> bool:
    try:
        kt, ka = run_kernel(kernel, p[None], q[None], c[None], coins)
        rt, ra = run_reference(reference, p[None], q[None], c[None], coins)
    except (TypeError, ValueError, SubjectError):   # a smaller node the kernel (or reference) refuses: not kept
        return False
    return bool(kt[0] != rt[0] or ka[0] != ra[0])


def _norm(x):
    s = x.sum()
    return x / s if s > 0 else None


def _valid(p, q, c) -> bool:
    return p is not None and q is not None and np.all(q[c] > 0) and p.sum() > 0


def _drop_column(coins: Coins, j: int) -> Coins:
    if coins.convention == "resispec":
        u = np.delete(coins.arrays["uniforms"], j, axis=1)
        return Coins("resispec", 1, coins.k - 1, {"uniforms": u})
    if coins.convention == "sglang":
        us = np.delete(coins.arrays["uniform_samples"], 1 + j, axis=1)
        return Coins("sglang", 1, coins.k - 1, {"uniform_samples": us, "uniform_samples_for_final_sampling":
                                                coins.arrays["uniform_samples_for_final_sampling"]})
    return Coins("generator", 1, coins.k - 1, {}, seed=coins.seed)


def _round_coins(coins: Coins, d: int) -> Coins:
    if coins.convention == "generator":
        return coins
    arrs = {n: np.minimum(np.round(a, d), 1 - 10.0 ** -d) for n, a in coins.arrays.items()}
    return Coins(coins.convention, 1, coins.k, arrs)


def shrink(kernel, reference, p, q, c, coins: Coins, *, seeds: int = 2000):
    """Smallest mismatch found from one mismatching row.

    Parameters
    ----------
    p, q : ndarray, shape (V,), float64 ; c : ndarray, shape (k,), int64
    coins : Coins of one row (``generator``: the batch seed; a seed that
        mismatches on this row alone is searched first, up to ``seeds``).

    Returns
    -------
    (p, q, c, coins) or None when the mismatch does not reproduce on one row.
    """
    p, q, c = np.array(p, float), np.array(q, float), np.array(c, np.int64)
    if coins.convention == "generator":
        for s in range(seeds):
            trial = Coins("generator", 1, c.size, {}, seed=s)
            if _differs(kernel, reference, p, q, c, trial):
                coins = trial
                break
        else:
            return None
    if not _differs(kernel, reference, p, q, c, coins):
        return None
    # 1. merge runs of unimportant tokens in place
    kt, _ = run_kernel(kernel, p[None], q[None], c[None], coins)
    rt, _ = run_reference(reference, p[None], q[None], c[None], coins)
    keep = np.zeros(p.size, bool)
    keep[c] = True
    keep[[kt[0], rt[0]]] = True
    group = np.cumsum(keep | np.concatenate([[True], keep[:-1]]))  - 1   # new id of each old token
    P = np.bincount(group, weights=p)
    Q = np.bincount(group, weights=q)
    C = group[c]
    if _valid(P, Q, C) and _differs(kernel, reference, P, Q, C, coins):
        p, q, c = P, Q, C
    # 2. drop single tokens (renormalised)
    j = p.size - 1 if p.size <= MAX_DROP_V else -1   # single drops only once the node is small
    while j >= 0 and p.size > 1:
        if j not in c:
            P, Q = _norm(np.delete(p, j)), _norm(np.delete(q, j))
            C = c - (c > j)
            if _valid(P, Q, C) and _differs(kernel, reference, P, Q, C, coins):
                p, q, c = P, Q, C
        j -= 1
    # 3. fewer candidates
    for j in range(c.size - 1, -1, -1):
        if c.size > 1:
            C, K = np.delete(c, j), _drop_column(coins, j)
            if _valid(p, q, C) and _differs(kernel, reference, p, q, C, K):
                c, coins = C, K
    # 4. simpler numbers
    for d in range(1, 7):
        P, Q = np.round(p, d), np.round(q, d)
        if P.sum() <= 0 or Q.sum() <= 0:
            continue
        P[np.argmax(P)] += round(1.0 - P.sum(), d)
        Q[np.argmax(Q)] += round(1.0 - Q.sum(), d)
        P, Q = np.round(P, d), np.round(Q, d)
        if np.all(P >= 0) and np.all(Q >= 0) and abs(P.sum() - 1) < 1e-9 and abs(Q.sum() - 1) < 1e-9 \
                and _valid(P, Q, c) and _differs(kernel, reference, P, Q, c, coins):
            p, q = P, Q
            break
    for d in range(1, 7):
        K = _round_coins(coins, d)
        if _differs(kernel, reference, p, q, c, K):
            coins = K
            break
    return p, q, c, coins


def to_source(kernel_spec: str, reference_spec: str, p, q, c, coins: Coins) -> str:
    """A few lines of Python that rebuild the mismatch and run both sides (asserts they differ)."""
    kw_call = {"resispec": "uniforms=...", "sglang": "uniform_samples=..., uniform_samples_for_final_sampling=...",
               "generator": "rng = default_rng(seed)"}[coins.convention]
    return "\n".join([
        "import numpy as np",
        "from exactness.certify_run import load_verifier",
        "from exactness.coupled import Coins, run_kernel, run_reference",
        f"kernel = load_verifier({kernel_spec!r})[1]",
        f"reference = load_verifier({reference_spec!r})[1]",
        f"p = np.array([{', '.join(repr(float(x)) for x in p)}])[None]",
        f"q = np.array([{', '.join(repr(float(x)) for x in q)}])[None]",
        f"c = np.array([{', '.join(str(int(x)) for x in c)}])[None]",
        f"coins = Coins({coins.convention!r}, 1, {c.size}, "
        + ("{}, seed=%d)" % coins.seed if coins.convention == "generator" else
           "{" + ", ".join(f"{n!r}: np.array({a.tolist()!r})" for n, a in coins.arrays.items()) + "})"),
        f"kt, ka = run_kernel(kernel, p, q, c, coins)  # kernel.verify(p, q, c, rng, {kw_call})",
        "rt, ra = run_reference(reference, p, q, c, coins)",
        "print('kernel: token', kt[0], 'accepted', ka[0], '| reference: token', rt[0], 'accepted', ra[0])",
        "assert (kt[0], ka[0]) != (rt[0], ra[0]), 'the mismatch did not reproduce'",
    ])


__all__ = ["shrink", "to_source", "to_python"]
