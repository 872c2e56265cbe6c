"""Coupled certification of a depth-2 tree verifier: one set of coins per tree node.

The tree: a root node with ``k`` candidates; candidate ``j`` has its own
child node (laws ``p_child[j], q_child[j]``) with ``k`` candidates of its
own.  Coins, in the ``resispec`` layout per node: ``uniforms`` (B, 1 + k,
k + 1): slot 0 is the root's, slot ``1 + j`` is child ``j``'s.  The
reference verifies the root with slot 0; when it accepts candidate ``j`` it
verifies child ``j`` with slot ``1 + j``; after a residual token the path
ends (second token -1, second accepted -2).

A tree kernel is any object with ``verify_tree(p_root (B, V), q_root (B, V),
p_child (B, k, V), q_child (B, k, V), c_root (B, k), c_child (B, k, k), *,
uniforms (B, 1 + k, k + 1))`` returning ``.tokens`` and ``.accepted`` of
shape (B, 2) int64.  A mismatch names its tree depth, so a kernel that
reads the wrong node's coins or laws shows at depth 2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from resispec._validation import as_laws, check_k

from .._checks import as_generator, check_alpha, check_n
from ..sampling import draw_node_candidates
from .certify import tv_upper_bound
from .conventions import Coins
from .run import run_reference


@dataclass(frozen=True)
class TreeCertificate:
    """Result of :func:`certify_coupled_tree`.

    ``passed``, ``mismatches``, ``n``, ``tv_upper`` (bound on the TV of the
    two-token path law), ``seconds``, ``first_mismatch`` (draw, depth,
    kernel and reference outputs), ``verdict``.
    """

    passed: bool
    mismatches: int
    n: int
    tv_upper: float
    seconds: float
    first_mismatch: dict | None
    verdict: str

    def __str__(self):
        return self.verdict


def reference_tree(reference, p0, q0, p1, q1, c0, c1, uniforms):
    """The reference's path ``(tokens (B, 2), accepted (B, 2))`` int64.

    Tree coins ``uniforms`` (B, 1 + k, k + 1); ``p0, q0`` (B, V), ``p1, q1`` (B, k, V),
    ``c0`` (B, k), ``c1`` (B, k, k).
    """
    B, k = c0.shape
    t0, a0 = run_reference(reference, p0, q0, c0, Coins("resispec", B, k, {"uniforms": uniforms[:, 0]}))
    tokens = np.stack([t0, np.full(B, -1)], 1)
    acc = np.stack([a0, np.full(B, -2)], 1)
    for j in range(k):
        sel = np.flatnonzero(a0 == j)
        if sel.size:
            t1, a1 = run_reference(reference, p1[sel, j], q1[sel, j], c1[sel, j],
                                   Coins("resispec", sel.size, k, {"uniforms": uniforms[sel, 1 + j]}))
            tokens[sel, 1], acc[sel, 1] = t1, a1
    return tokens.astype(np.int64), acc.astype(np.int64)


class ReferenceTreeKernel:
    """Any registry rule walked over the depth-2 tree (the reference implementation of the tree layout)."""

    def __init__(self, verifier):
        self.verifier = verifier

    def verify_tree(self, p0, q0, p1, q1, c0, c1, *, uniforms):
        from resispec.verifiers.base import VerifyResult

        t, a = reference_tree(self.verifier, p0, q0, p1, q1, c0, c1, uniforms)
        return VerifyResult(tokens=t, accepted=a)


def certify_coupled_tree(kernel, reference, p_root, q_root, p_child, q_child, k: int, *, n: int = 20_000,
                         alpha: float = 1e-3, seed=0) -> TreeCertificate:
    """Coupled certification of a depth-2 tree kernel against a registry rule (see the module docstring).

    Parameters
    ----------
    kernel : object with ``verify_tree``
    reference : str or resispec.Verifier (iid drafting)
    p_root, q_root : array_like (V,) ; p_child, q_child : array_like (k, V)
    k, n, alpha, seed : as :func:`exactness.certify_coupled`

    Raises
    ------
    TypeError, ValueError
        Bad laws or arguments; a kernel without ``verify_tree``, that raises,
        or returns the wrong shape or dtype.
    """
    from ..certify_run import load_verifier

    t_start = time.perf_counter()
    ref = load_verifier(reference)[1] if isinstance(reference, str) else reference
    if not callable(getattr(kernel, "verify_tree", None)):
        raise TypeError(f"kernel must have verify_tree(p_root, q_root, p_child, q_child, c_root, c_child, *, "
                        f"uniforms), got {type(kernel).__name__}")
    k, n, alpha = check_k(k), check_n(n), check_alpha(alpha)
    p0, q0, _ = as_laws(p_root, q_root, names=("p_root", "q_root"))
    p1, q1, _ = as_laws(p_child, q_child, names=("p_child", "q_child"))
    if p0.shape[0] != 1 or p1.shape != (k, p0.shape[1]):
        raise ValueError(f"p_root, q_root must be (V,) and p_child, q_child (k, V) = ({k}, {p0.shape[1]}); got "
                         f"{p0.shape} and {p1.shape}")
    V = p0.shape[1]
    rng = as_generator(seed)
    done = mism = 0
    first = None
    step = max(1, (1 << 20) // (V * (k + 1)))
    while done < n:
        B = min(step, n - done)
        c0 = draw_node_candidates(q0[0], k, "iid", rng.random((B, k)))
        c1 = np.stack([draw_node_candidates(q1[j], k, "iid", rng.random((B, k))) for j in range(k)], 1)
        u = rng.random((B, 1 + k, k + 1))
        P0, Q0 = np.broadcast_to(p0[0], (B, V)), np.broadcast_to(q0[0], (B, V))
        P1, Q1 = np.broadcast_to(p1, (B, k, V)), np.broadcast_to(q1, (B, k, V))
        try:
            res = kernel.verify_tree(P0.copy(), Q0.copy(), P1.copy(), Q1.copy(), c0.copy(), c1.copy(),
                                     uniforms=u.copy())
        except Exception as exc:
            raise TypeError(f"tree kernel {type(kernel).__name__} raised {type(exc).__name__}: {exc}") from exc
        kt, ka = np.asarray(getattr(res, "tokens", None)), np.asarray(getattr(res, "accepted", None))
        for name, x in (("tokens", kt), ("accepted", ka)):
            if x.dtype == object or x.dtype == bool or not np.issubdtype(x.dtype, np.integer):
                raise TypeError(f"tree kernel returned {name} of dtype {x.dtype}; expected int64 of shape ({B}, 2)")
            if x.shape != (B, 2):
                raise ValueError(f"tree kernel returned {name} of shape {x.shape}; expected ({B}, 2)")
        rt, ra = reference_tree(ref, P0, Q0, P1, Q1, c0, c1, u)
        bad = (kt != rt) | (ka != ra)
        rows = np.flatnonzero(bad.any(axis=1))
        if rows.size and first is None:
            b = int(rows[0])
            first = {"draw": done + b, "depth": int(np.argmax(bad[b])) + 1, "candidates_root": c0[b].tolist(),
                     "kernel": (kt[b].tolist(), ka[b].tolist()), "reference": (rt[b].tolist(), ra[b].tolist())}
        mism += int(rows.size)
        done += B
    tv = tv_upper_bound(mism, done, alpha)
    sec = time.perf_counter() - t_start
    if mism == 0:
        verdict = (f"PASS: tree kernel vs {getattr(ref, 'name', ref)!r}: 0 mismatches in {done:,} coupled paths; "
                   f"TV of the two-token path law <= {tv:.3g} at confidence {1 - alpha:g}")
    else:
        verdict = (f"FAIL: tree kernel vs {getattr(ref, 'name', ref)!r}: {mism:,} mismatching paths in {done:,}; "
                   f"first at draw {first['draw']:,}, depth {first['depth']}: kernel {first['kernel']}, reference "
                   f"{first['reference']}")
    return TreeCertificate(mism == 0, mism, done, tv, sec, first, verdict)
