"""Fast paths: O(k log V) samplers of built-in verifiers whose chain depends on the rejected candidates.

The accept table of :func:`exactness.sampling.accept_table` covers the rules whose chain depends on the
candidates only through ``a_i(x_i)`` (``sps``, ``rrs``, ``kseq``, ``resispec``, ``resispec_lookahead``).
The rules here change their state with every rejected candidate, so no (k, V) table exists; instead each
path keeps, per draw, the few numbers that state is made of and evaluates the chain in closed form:

``target_only`` (:class:`resispec.verifiers.baselines.TargetOnly`, iid candidates; EAGLE-2, arXiv
2406.16858)
    after rejecting the distinct set ``S`` the target is ``p`` without ``S``, renormalised, so
    ``a_i = p(x_i) / (sum p - p(S))`` (``p(x_0)`` for the first candidate, 0 for a repeated one) and the
    residual token is the inverse CDF of ``p`` without ``S`` (prefix sums of ``p`` shifted by the removed
    entries, O(k log V)).

Each path returns the tokens and accepted indices :meth:`Verifier.verify` returns for the same
candidates and uniforms (uniform ``i`` accepts candidate ``i`` when ``u_i < a_i``; uniform ``k`` is the
inverse CDF of the residual in token-id order); the closed forms differ from ``verify``'s O(V) arithmetic
only by float64 round-off, so a draw can differ only when a uniform falls within round-off of a decision
boundary (probability ~1e-12 a draw).  :class:`exactness.sampling.NodeSampler` cross-checks every path at
run time against the verifier's own code: its first ``GUARD`` draws through ``verify`` (bit for bit) and
the path's accept probabilities and residual law on those candidates against ``verifier.chain``
(:func:`check_against_chain`); either disagreement raises ``RuntimeError``.

Register a path with :func:`register_fast_path` (built-in classes only: a user's subclass may change the
rule, so it keeps the generic path).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: Below this ``V * k`` the generic path is cheap and kept (the default grid's small-V cells run as before).
FAST_MIN_ELEMS = 200
#: ``reject_update``'s threshold (``resispec.verifiers.base._RESIDUAL_EPS``): below it a rejection keeps the state.
_EPS = 1e-13
#: Tolerance of the chain cross-check (absolute, on accept probabilities and residual entries).
CHAIN_TOL = 1e-9

_FAST: dict[type, tuple[str, Callable]] = {}


def register_fast_path(name: str, cls: type):
    """Decorator: ``builder(verifier, p (V,), q (V,), k) -> path or None`` is the fast path of ``cls`` (exact type)."""

    def deco(builder):
        _FAST[cls] = (name, builder)
        return builder

    return deco


def fast_path_for(verifier, p: np.ndarray, q: np.ndarray, k: int):
    """The registered fast path of ``verifier`` at node ``p, q`` (V,) float64 with ``k`` candidates, or None.

    None when the verifier's exact type has no registered path, when it carries a ``draft_law`` /
    ``bonus_law`` hook, when ``V * k <= FAST_MIN_ELEMS``, or when the builder declines.
    """
    _load_builtins()
    entry = _FAST.get(type(verifier))
    if entry is None or hasattr(verifier, "draft_law") or hasattr(verifier, "bonus_law"):
        return None
    if p.size * k <= FAST_MIN_ELEMS:
        return None
    name, builder = entry
    path = builder(verifier, p, q, k)
    if path is not None:
        path.name = name
    return path


def _load_builtins() -> None:
    if _FAST:
        return
    from resispec.verifiers.baselines import TargetOnly

    register_fast_path("target_only_closed_form", TargetOnly)(_TargetOnlyPath.build)


def check_against_chain(verifier, p: np.ndarray, q: np.ndarray, cand: np.ndarray, a_fast: np.ndarray,
                        r_fast: np.ndarray) -> float:
    """Largest absolute difference between a path's chain and ``verifier.chain`` on candidates ``cand`` (n, k).

    ``a_fast`` (n, k) accept probabilities and ``r_fast`` (n, V) residual laws of the path. Raises
    RuntimeError when it exceeds ``CHAIN_TOL`` (the path no longer models the verifier's code).
    """
    n, V = cand.shape[0], p.size
    ch = verifier.chain(np.broadcast_to(p, (n, V)), np.broadcast_to(q, (n, V)), cand)
    a_ref, r_ref = np.asarray(ch.accept_probs), np.asarray(ch.residual)
    reach = np.cumprod(np.concatenate([np.ones((n, 1)), 1.0 - a_ref], axis=1), axis=1)
    # compare where it matters: a step reached with positive probability, a residual reached at all
    da = np.where(reach[:, :-1] > 0, np.abs(a_fast - a_ref), 0.0)
    dr = np.where(reach[:, -1:] > 0, np.abs(r_fast - r_ref), 0.0)
    err = float(max(da.max(initial=0.0), dr.max(initial=0.0)))
    if err > CHAIN_TOL:
        raise RuntimeError(f"fast path of {type(verifier).__name__} disagrees with its chain by {err:.3g} "
                           f"(> {CHAIN_TOL:g}) on the first {n} candidate tuples; use NodeSampler(..., fast=False)")
    return err


def _inverse_cdf_without(cdf: np.ndarray, vals: np.ndarray, target: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Smallest ``j`` with ``sum_{y <= j, y not removed} vals(y) > target``, per row.

    ``cdf`` (V,) = ``cumsum(vals)``; ``target`` (n,); ``removed`` (n, m) int64 token ids sorted ascending,
    each at most once per row, ``V`` for an unused slot.  O(m log V) a row: each removed entry at or before
    the current answer shifts the target by its mass (module docstring).
    """
    V = cdf.size
    t = target.copy()
    j = np.searchsorted(cdf, t, side="right")
    for c in range(removed.shape[1]):
        s = removed[:, c]
        hit = s <= j
        if not hit.any():
            continue
        t[hit] += vals[s[hit]]
        j[hit] = np.searchsorted(cdf, t[hit], side="right")
    return np.minimum(j, V - 1)


class _TargetOnlyPath:
    """``target_only`` on iid candidates in closed form (module docstring)."""

    @classmethod
    def build(cls, verifier, p, q, k):
        if getattr(verifier, "drafting", None) not in ("any", "iid"):
            return None
        return cls(p, k)

    def __init__(self, p, k):
        self.p, self.k, self.V = p, k, p.size
        self.total = float(np.sum(p))
        self.top = int(np.argmax(p))
        rest = p.copy()
        rest[self.top] = 0.0
        self.total_wo_top = float(rest.sum())   # sum p - p(top) without cancellation (a peaked p)
        self.cdf = np.cumsum(p)
        pos = np.flatnonzero(p > 0)
        self.last_pos = pos[::-1][:k + 1]       # the k + 1 last tokens with mass, descending

    def _left(self, ssum, has_top, ssum_wo_top):
        """``sum p`` over the tokens not removed (per row), the dominant token's share kept exact."""
        return np.where(has_top, self.total_wo_top - ssum_wo_top, self.total - ssum)

    def walk(self, cand, uv=None):
        """``(a (n, k), removed (n, k) sorted, left (n,))``; with ``uv`` also the first accepted index (n,)."""
        n, k = cand.shape
        p = self.p
        removed = np.full((n, k), self.V, dtype=np.int64)
        ssum = np.zeros(n)
        ssum_wo_top = np.zeros(n)
        has_top = np.zeros(n, dtype=bool)
        scale = np.ones(n)                      # p_i = p / scale off the removed set (p_0 = p itself)
        a = np.empty((n, k))
        for i in range(k):
            x = cand[:, i]
            rep = (removed[:, :i] == x[:, None]).any(axis=1)
            px = p[x]
            a[:, i] = np.clip(np.where(rep, 0.0, px / scale), 0.0, 1.0)
            # reject_update: p_{i+1} = (p_i without x) / z unless z = (left - p(x)) / scale <= _EPS
            left = self._left(ssum, has_top, ssum_wo_top)
            is_top = x == self.top
            new_left = np.where(is_top & ~has_top, self.total_wo_top - ssum_wo_top, left - px)
            take = ~rep & (new_left / scale > _EPS)
            removed[take, i] = x[take]
            ssum = np.where(take, ssum + px, ssum)
            ssum_wo_top = np.where(take & ~is_top, ssum_wo_top + px, ssum_wo_top)
            has_top = has_top | (take & is_top)
            scale = np.where(take, self._left(ssum, has_top, ssum_wo_top), scale)
        removed.sort(axis=1)
        return a, removed, self._left(ssum, has_top, ssum_wo_top)

    def draw(self, cand, uv):
        """Tokens (n,) and accepted indices (n,) int64 for candidates (n, k) and uniforms (n, k + 1)."""
        n, k = cand.shape
        a, removed, left = self.walk(cand)
        acc = uv[:, :k] < a
        hit = acc.any(axis=1)
        first = np.argmax(acc, axis=1)
        tokens = cand[np.arange(n), first].astype(np.int64)
        miss = np.flatnonzero(~hit)
        if miss.size:
            rm = removed[miss]
            j = _inverse_cdf_without(self.cdf, self.p, uv[miss, k] * left[miss], rm)
            tokens[miss] = np.minimum(j, self._last_kept(rm))
        return tokens, np.where(hit, first, -1).astype(np.int64)

    def _last_kept(self, removed):
        """Last token with mass not removed, per row (``inverse_cdf``'s round-off fallback)."""
        lp = self.last_pos
        gone = (removed[:, :, None] == lp[None, None, :]).any(axis=1)      # (n, k + 1)
        return lp[np.argmax(~gone, axis=1)]

    def chain(self, cand):
        """The path's ``(accept_probs (n, k), residual (n, V))`` for the chain cross-check."""
        a, removed, left = self.walk(cand)
        r = np.broadcast_to(self.p, (cand.shape[0], self.V)).copy()
        rows = np.repeat(np.arange(cand.shape[0]), removed.shape[1])
        cols = removed.ravel()
        keep = cols < self.V
        r[rows[keep], cols[keep]] = 0.0
        return a, r / left[:, None]
