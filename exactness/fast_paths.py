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
``rrs_wor`` (:class:`resispec.verifiers.baselines.RecursiveRejectionWOR`, without-replacement candidates;
RSD, arXiv 2402.14160)
    the target after ``i`` rejections is ``(p - t q0)_+`` off the rejected set, one threshold ``t`` a draw,
    each rejected token frozen at the threshold of its rejection (:class:`_RRSWORPath`); the residual token
    by a merge-sort tree over token ids (:class:`_ThresholdTree`), the candidates by successive sampling in
    O(k log V).
``rejection_proxy`` with its default ``rrs_residual``
    the residuals ignore the rejected token: a per-step table built with the verifier's own proxy.

Not covered: ResiSpec for without-replacement drafts and ``rejection_proxy`` with a user's proxy: they keep
the generic path.  ResiSpec WOR's state after rejecting ``x`` is ``r^(x) = alpha(x) q theta + beta(x) b``
off ``x`` (the rank-one plan), but its next step solves a reserve fixed point whose per-token clip points
move with ``(alpha, beta, 1 - q(x))`` in two dimensions, so no sorted structure serves every prefix: each
distinct rejected prefix costs O(V), and a long run visits millions of distinct prefixes.  For it, the
coupled route (:func:`exactness.certify_coupled`, ``verify`` against the rule's ``chain`` on shared coins)
needs about ln(1/alpha) / TV draws instead of ~1/TV^2 (``benchmarks/fast_paths.py`` prints both).

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

from ._search import GuidedCDF

#: Below this ``V * k`` the generic path is cheap and kept (the default grid's small-V cells run as before).
FAST_MIN_ELEMS = 200
#: ``reject_update``'s threshold: below it a rejection keeps the state (one value, ``resispec._reserve_tol``).
from resispec._reserve_tol import RESIDUAL_EPS as _EPS  # noqa: E402
#: Calls with fewer draws run the numpy references (same tokens): the compiled loops
#: (:mod:`exactness._fast_kernels`) pay their one-time compilation only in long runs.
KERNEL_MIN_DRAWS = 1 << 15
#: Tolerance of the chain cross-check (absolute, on accept probabilities and residual entries).
CHAIN_TOL = 1e-9

_FAST: dict[type, tuple[str, Callable]] = {}


def register_fast_path(name: str, cls: type):
    """Decorator: ``builder(verifier, p (V,), q (V,), k) -> path or None`` is the fast path of ``cls`` (exact type)."""

    def deco(builder):
        _FAST[cls] = (name, builder)
        return builder

    return deco


#: The methods a fast path or accept table stands in for: the harness samples through ``verify`` itself (the
#: generic path) when any of them is not this project's own code.
_SAMPLING_METHODS = ("verify", "chain", "_chain", "masses", "step", "_chain_decided", "chain_until_accept")


def pristine(verifier) -> bool:
    """Whether ``verifier``'s sampling methods are this project's own: none set on the instance, and each one
    its class resolves still the function its ``resispec`` class was created with.

    A built-in whose ``verify`` a user replaced (on the instance, by a subclass, or by patching the class, even
    with ``functools.wraps``) fails this, so the harness draws through that ``verify`` instead of a table that
    mirrors the built-in rule.  Returns a bool; raises nothing."""
    inst = getattr(verifier, "__dict__", {})
    for name in _SAMPLING_METHODS:
        if name in inst:
            return False
        owner = next((c for c in type(verifier).__mro__ if name in vars(c)), None)
        if owner is None:
            continue
        if not owner.__module__.startswith("resispec.") or \
                vars(owner).get("_as_defined", {}).get(name) is not vars(owner)[name]:
            return False                     # defined outside resispec, or replaced after the class was made
    return True


def fast_path_for(verifier, p: np.ndarray, q: np.ndarray, k: int):
    """The registered fast path of ``verifier`` at node ``p, q`` (V,) float64 with ``k`` candidates, or None.

    None when the verifier's exact type has no registered path, when it carries a ``draft_law`` /
    ``bonus_law`` hook, when ``V * k <= FAST_MIN_ELEMS``, or when the builder declines.
    """
    _load_builtins()
    entry = _FAST.get(type(verifier))
    if entry is None or hasattr(verifier, "draft_law") or hasattr(verifier, "bonus_law") or not pristine(verifier):
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

    from resispec.verifiers.baselines import RecursiveRejectionWOR

    register_fast_path("target_only_closed_form", TargetOnly)(_TargetOnlyPath.build)
    from resispec.verifiers.rejection_proxy import RejectionProxy

    register_fast_path("rrs_wor_threshold", RecursiveRejectionWOR)(_RRSWORPath.build)
    register_fast_path("rejection_proxy_table", RejectionProxy)(_rejection_proxy_table)


def check_against_chain(verifier, p: np.ndarray, q: np.ndarray, cand: np.ndarray, a_fast: np.ndarray,
                        r_fast: np.ndarray) -> float:
    """Largest absolute difference between a path's chain and ``verifier.chain`` on candidates ``cand`` (n, k).

    ``a_fast`` (n, k) accept probabilities and ``r_fast`` (n, V) residual laws of the path. Raises
    RuntimeError when it exceeds ``CHAIN_TOL`` (the path no longer models the verifier's code).
    """
    from resispec._validation import Laws
    from resispec.verifiers.base import takes_laws

    n, V = cand.shape[0], p.size
    P, Q = np.broadcast_to(p, (n, V)), np.broadcast_to(q, (n, V))
    # the node was checked at the door: resispec's own chain gets the trusted Laws (docs/architecture.md)
    ch = verifier.chain(Laws(P, Q), None, cand) if takes_laws(verifier, "chain") else verifier.chain(P, Q, cand)
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

    ``cdf`` a :class:`exactness._search.GuidedCDF` of ``cumsum(vals)`` (V,); ``target`` (n,); ``removed`` (n, m) int64 token ids sorted ascending,
    each at most once per row, ``V`` for an unused slot.  O(m log V) a row: each removed entry at or before
    the current answer shifts the target by its mass (module docstring).
    """
    V = cdf.cdf.size
    t = target.copy()
    j = cdf.search(t)
    for c in range(removed.shape[1]):
        s = removed[:, c]
        hit = (s <= j) & (s < V)
        if not hit.any():
            continue
        t[hit] += vals[s[hit]]
        j[hit] = cdf.search(t[hit])
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
        self.cdf = GuidedCDF(np.cumsum(p))
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
        if not _compiled(cand.shape[0], self):
            return self.draw_numpy(cand, uv)
        from . import _fast_kernels as fk

        n = cand.shape[0]
        tokens, accepted = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        g = self.cdf
        fk.target_only_draw(self.p, g.cdf, g.guide, g.inv_h, np.ascontiguousarray(cand), np.ascontiguousarray(uv),
                            self.total, self.total_wo_top, self.top, self.last_pos, tokens, accepted)
        return tokens, accepted

    def draw_numpy(self, cand, uv):
        """:meth:`draw` in numpy (the reference the compiled kernel follows)."""
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


class _ThresholdTree:
    """Index-order prefix sums of ``(p - t q)_+`` for any threshold ``t``: a merge-sort tree, O(log V) searches.

    ``G(j; t) = sum_{y <= j} (p(y) - t q(y))_+ = sum_{y <= j, r(y) > t} (p(y) - t q(y))`` with ``r = p / q``
    (``+inf`` where ``q = 0``).  Level ``s`` (segments of ``s`` consecutive ids) stores each segment's tokens
    sorted by their rank in the global ratio order, with running sums of ``p`` and ``q`` in that order, so a
    segment's sum at ``t`` is two differences after one ``searchsorted`` over all queries at once.
    """

    def __init__(self, p: np.ndarray, q: np.ndarray):
        V = p.size
        self.V, self.Vpad = V, 1 << max(1, int(V - 1).bit_length())
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.where(p > 0, np.inf, 0.0))
        order = np.argsort(ratio, kind="stable")
        self.order = order
        self.r_sorted = ratio[order]
        rank = np.zeros(self.Vpad, dtype=np.int64)            # padding: rank 0, no mass
        rank[order] = np.arange(1, V + 1)
        pp = np.zeros(self.Vpad)
        qq = np.zeros(self.Vpad)
        pp[:V], qq[:V] = p, np.where(np.isfinite(ratio), q, 0.0)
        self.span = V + 2
        self.levels = {}
        ids = np.arange(self.Vpad)
        s = self.Vpad // 2
        while s >= 1:
            key = (ids // s) * self.span + rank
            o = np.argsort(key, kind="stable")
            cp = np.concatenate([[0.0], np.cumsum(pp[o])])
            cq = np.concatenate([[0.0], np.cumsum(qq[o])])
            self.levels[s] = (key[o], cp, cq)
            s //= 2

    def stacked(self):
        """The levels as ``(keys (L, Vpad) int64, cp (L, Vpad + 1), cq (L, Vpad + 1))``, level ``l`` of segment size
        ``Vpad >> (l + 1)`` (for the compiled kernel)."""
        if getattr(self, "_stacked", None) is None:
            sizes = [self.Vpad >> (l + 1) for l in range(len(self.levels))]
            self._stacked = tuple(np.ascontiguousarray(np.stack([self.levels[s][i] for s in sizes]))
                                  for i in range(3))
        return self._stacked

    def count(self, t: np.ndarray) -> np.ndarray:
        """``#{y : r(y) <= t}`` per query (n,)."""
        return np.searchsorted(self.r_sorted, t, side="right")

    def _segment(self, s, g, cnt, t):
        key, cp, cq = self.levels[s]
        pos = np.searchsorted(key, g * self.span + cnt + 1, side="left")
        end = (g + 1) * s
        return (cp[end] - cp[pos]) - t * (cq[end] - cq[pos])

    def inverse(self, target: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Smallest ``j`` with ``G(j; t) > target`` per query, clipped to ``V - 1``."""
        cnt = self.count(t)
        lo = np.zeros(target.size, dtype=np.int64)
        rest = target.copy()
        s = self.Vpad // 2
        while s >= 1:
            left = self._segment(s, lo // s, cnt, t)
            right = rest >= left
            rest = np.where(right, rest - left, rest)
            lo = np.where(right, lo + s, lo)
            s //= 2
        return np.minimum(lo, self.V - 1)

    def prefix(self, j: np.ndarray, t: np.ndarray) -> np.ndarray:
        """``G(j; t)`` per query (sum over ids ``<= j``)."""
        cnt = self.count(t)
        hi = j + 1
        lo = np.zeros(j.size, dtype=np.int64)
        out = np.zeros(j.size)
        s = self.Vpad // 2
        while s >= 1:
            take = lo + s <= hi
            if take.any():
                out[take] += self._segment(s, lo[take] // s, cnt[take], t[take])
                lo = np.where(take, lo + s, lo)
            s //= 2
        return out


class _RRSWORPath:
    """``rrs_wor`` on without-replacement candidates in closed form.

    With ``q0 = q / sum q`` and ``S`` the rejected set, the draft is ``q0 / (sum q0 - q0(S))`` off ``S`` and,
    by induction on ``p_{i+1} = norm((p_i - q_i)_+)``, the target is ``(p - t q0)_+`` (unnormalised) off ``S``
    with one threshold ``t`` per draw (``t_{i+1} = t_i + Z_i / D_i``, ``Z_i`` the target's mass, ``D_i`` the
    draft's), while a token rejected at step ``i`` keeps ``(p - t_{i+1} q0)_+`` frozen.  So
    ``a_i = min(1, P_i(x) D_i / (Z_i q0(x)))`` and the residual token is the inverse CDF of ``(p - t_k q0)_+``
    plus the frozen corrections, in token-id order (:class:`_ThresholdTree`).  Candidates: successive sampling
    by the inverse CDF of ``q`` without ``S`` (:func:`_inverse_cdf_without`), as
    :func:`exactness.sampling.draw_node_candidates` does with an O(V) cumsum a step.
    """

    @classmethod
    def build(cls, verifier, p, q, k):
        if getattr(verifier, "drafting", None) != "without_replacement" or k > int(np.count_nonzero(q > 0)):
            return None
        return cls(p, q, k)

    def __init__(self, p, q, k):
        self.p, self.k, self.V = p, k, p.size
        self.qraw = q
        self.q0 = q / q.sum()
        self.qtot = float(self.q0.sum())
        self.cdf_q = GuidedCDF(np.cumsum(q))
        self.last_q = np.flatnonzero(q > 0)[::-1][:k + 1]
        self.tree = _ThresholdTree(p, self.q0)
        o = self.tree.order                  # the tree's ratio order, so that count(t) indexes these sums
        ps, qs = p[o], self.q0[o]
        self.suf_p = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])   # tokens with ratio rank >= i
        self.suf_q = np.concatenate([np.cumsum(qs[::-1])[::-1], [0.0]])

    def _F(self, t):
        """``sum_y (p - t q0)_+`` over every token, per row."""
        c = self.tree.count(t)
        return self.suf_p[c] - t * self.suf_q[c]

    def candidates(self, uc):
        """Candidates (n, k) int64 by successive sampling from uniforms ``uc`` (n, k)."""
        if not _compiled(uc.shape[0], self):
            return self.candidates_numpy(uc)
        from . import _fast_kernels as fk

        out = np.empty(uc.shape, dtype=np.int64)
        g = self.cdf_q
        fk.wor_candidates(self.qraw, g.cdf, g.guide, g.inv_h, self.last_q, np.ascontiguousarray(uc), out)
        return out

    def candidates_numpy(self, uc):
        """:meth:`candidates` in numpy."""
        n, k = uc.shape
        q = self.qraw
        out = np.empty((n, k), dtype=np.int64)
        removed = np.full((n, max(k - 1, 1)), self.V, dtype=np.int64)
        gone = np.zeros(n)
        tot = float(self.cdf_q.cdf[-1])
        for i in range(k):
            rm = np.sort(removed[:, :i], axis=1) if i else removed[:, :0]
            x = _inverse_cdf_without(self.cdf_q, q, uc[:, i] * (tot - gone), rm)
            out[:, i] = np.minimum(x, _last_kept(self.last_q, rm))
            if i + 1 < k:
                removed[:, i] = out[:, i]
                gone += q[out[:, i]]
        return out

    def walk(self, cand):
        """``(a (n, k), t_k (n,), frozen ids (n, k) sorted, their extra mass (n, k), Z_k (n,))``."""
        n, k = cand.shape
        p, q0 = self.p, self.q0
        t = np.zeros(n)
        Z = np.ones(n)                       # p_0 = p itself
        D = np.ones(n)                       # q_0 = q0 itself
        qgone = np.zeros(n)
        frozen_ids = np.full((n, k), self.V, dtype=np.int64)
        frozen_T = np.zeros((n, k))
        a = np.empty((n, k))
        for i in range(k):
            x = cand[:, i]
            Px = np.maximum(p[x] - t * q0[x], 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                a[:, i] = np.clip(np.where(q0[x] > 0, Px * D / (Z * q0[x]), 0.0), 0.0, 1.0)
            t_new = t + Z / D
            # Z_{i+1} = F(t_new) over the live tokens + the frozen ones' own masses
            fz = frozen_ids[:, :i]
            live_f = fz < self.V
            fzc = np.where(live_f, fz, 0)
            Tf = frozen_T[:, :i]
            own = np.where(live_f, np.maximum(p[fzc] - Tf * q0[fzc], 0.0), 0.0).sum(axis=1)
            cur = np.where(live_f, np.maximum(p[fzc] - t_new[:, None] * q0[fzc], 0.0), 0.0).sum(axis=1)
            Z_new = self._F(t_new) - cur + own
            ok = Z_new / Z > _EPS            # reject_update keeps p_i when the residual mass is ~0
            t = np.where(ok, t_new, t)
            Z = np.where(ok, Z_new, Z)
            frozen_ids[:, i] = x
            frozen_T[:, i] = t
            if i + 1 < k:
                qgone += q0[x]
                D = self.qtot - qgone
        # the residual after k rejections: (p - t q0)_+ off the frozen set + the frozen masses
        fzc = np.minimum(frozen_ids, self.V - 1)
        extra = np.maximum(p[fzc] - frozen_T * q0[fzc], 0.0) - np.maximum(p[fzc] - t[:, None] * q0[fzc], 0.0)
        order = np.argsort(frozen_ids, axis=1)
        return (a, t, np.take_along_axis(frozen_ids, order, axis=1), np.take_along_axis(extra, order, axis=1), Z)

    def _residual_tokens(self, t, fids, extra, target):
        """Inverse CDF (token-id order) of the residual at ``target`` (n,) (frozen corrections added in order)."""
        tree = self.tree
        D = np.zeros(target.size)
        j = tree.inverse(target, t)
        done = np.zeros(target.size, dtype=bool)
        for c in range(fids.shape[1]):
            s = fids[:, c]
            act = ~done & (extra[:, c] > 0)
            act &= j >= s
            if not act.any():
                continue
            idx = np.flatnonzero(act)
            g = tree.prefix(s[idx], t[idx])
            here = g + D[idx] + extra[idx, c] > target[idx]
            j[idx[here]] = s[idx[here]]
            done[idx[here]] = True
            mv = idx[~here]
            D[mv] += extra[mv, c]
            j[mv] = tree.inverse(target[mv] - D[mv], t[mv])
        return j

    def draw(self, cand, uv):
        """Tokens (n,) and accepted indices (n,) int64 for candidates (n, k) and uniforms (n, k + 1)."""
        if not _compiled(cand.shape[0], self):
            return self.draw_numpy(cand, uv)
        from . import _fast_kernels as fk

        n = cand.shape[0]
        tokens, accepted = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        tr = self.tree
        keys, cp, cq = tr.stacked()
        fk.rrs_wor_draw(self.p, self.q0, self.qtot, tr.r_sorted, self.suf_p, self.suf_q, keys, cp, cq, tr.Vpad,
                        tr.span, np.ascontiguousarray(cand), np.ascontiguousarray(uv), tokens, accepted)
        return tokens, accepted

    def draw_lazy(self, uc, uv):
        """:meth:`draw` of :meth:`candidates` ``(uc)``, each candidate drawn only when its step is reached (the
        same tokens: an accepted draw never looks at its later candidates); None without numba."""
        if not _compiled(uc.shape[0], self):
            return None
        from . import _fast_kernels as fk

        n = uc.shape[0]
        tokens, accepted = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        tr, g = self.tree, self.cdf_q
        keys, cp, cq = tr.stacked()
        fk.rrs_wor_draw_lazy(self.p, self.q0, self.qtot, tr.r_sorted, self.suf_p, self.suf_q, keys, cp, cq, tr.Vpad,
                             tr.span, np.ascontiguousarray(uc), np.ascontiguousarray(uv), tokens, accepted,
                             self.qraw, g.cdf, g.guide, g.inv_h, self.last_q)
        return tokens, accepted

    def draw_numpy(self, cand, uv):
        """:meth:`draw` in numpy (the reference the compiled kernel follows)."""
        n, k = cand.shape
        a, t, fids, extra, Z = self.walk(cand)
        acc = uv[:, :k] < a
        hit = acc.any(axis=1)
        first = np.argmax(acc, axis=1)
        tokens = cand[np.arange(n), first].astype(np.int64)
        miss = np.flatnonzero(~hit)
        if miss.size:
            tokens[miss] = self._residual_tokens(t[miss], fids[miss], extra[miss], uv[miss, k] * Z[miss])
        return tokens, np.where(hit, first, -1).astype(np.int64)

    def chain(self, cand):
        a, t, fids, extra, Z = self.walk(cand)
        n = cand.shape[0]
        r = np.maximum(self.p[None, :] - t[:, None] * self.q0[None, :], 0.0)
        rows = np.repeat(np.arange(n), fids.shape[1])
        r[rows, fids.ravel()] += extra.ravel()
        return a, r / Z[:, None]


def _compiled(n: int, path=None) -> bool:
    """Use the compiled loop for a call of ``n`` draws: numba present and ``n >= KERNEL_MIN_DRAWS`` (or the path's
    ``always_compiled``, set on the timing copy of ``NodeSampler.pilot_sampler``)."""
    if n < KERNEL_MIN_DRAWS and not getattr(path, "always_compiled", False):
        return False
    from . import _fast_kernels as fk

    return fk.AVAILABLE


def _last_kept(last_pos: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Last token of ``last_pos`` (descending ids with mass) not in ``removed`` (n, m), per row."""
    if removed.shape[1] == 0:
        return np.full(removed.shape[0], last_pos[0])
    gone = (removed[:, :, None] == last_pos[None, None, :]).any(axis=1)
    return last_pos[np.argmax(~gone, axis=1)]


class _StepTablePath:
    """A per-step accept table ``a (k, V)`` and residual ``r (V,)``: ``a_i = a[i, x_i]``, O(k log V) a draw."""

    def __init__(self, a: np.ndarray, r: np.ndarray):
        self.a, self.r, self.k = a, r, a.shape[0]
        self.flat = a.ravel()
        self.offsets = (np.arange(self.k) * r.size)[None, :]
        self.r_cdf = GuidedCDF(np.cumsum(r))
        self.r_last = int(r.size - 1 - np.argmax(r[::-1] > 0))

    def draw(self, cand, uv):
        n, k = cand.shape
        acc = uv[:, :k] < self.flat[cand + self.offsets]
        hit = acc.any(axis=1)
        first = np.argmax(acc, axis=1)
        tokens = cand[np.arange(n), first].astype(np.int64)
        miss = ~hit
        if miss.any():
            tokens[miss] = np.minimum(self.r_cdf.search(uv[miss, k] * self.r_cdf.cdf[-1]), self.r_last)
        return tokens, np.where(hit, first, -1).astype(np.int64)

    def chain(self, cand):
        return self.flat[cand + self.offsets], np.broadcast_to(self.r, (cand.shape[0], self.r.size))


def _rejection_proxy_table(verifier, p, q, k):
    """``rejection_proxy`` with its default ``rrs_residual``: the rule ignores the rejected token, so the residuals
    ``R_{i+1} = proxy(R_i, q, x, step=i)`` are the same for every candidate; computed here with the verifier's own
    proxy (``apply_proxy``), then a table.  Any other proxy may look at ``x``: generic path."""
    from resispec.verifiers.rejection_proxy import apply_proxy, rrs_residual

    if getattr(verifier, "proxy", None) is not rrs_residual or getattr(verifier, "drafting", None) != "iid":
        return None
    R = p[None].copy()
    q2 = q[None]
    x0 = np.array([int(np.argmax(q))])
    safe = np.where(q > 0, q, 1.0)
    a = np.empty((k, p.size))
    for i in range(k):
        a[i] = np.clip(np.where(q > 0, R[0] / safe, 0.0), 0.0, 1.0)
        R = apply_proxy(verifier.proxy, R, q2, x0, i)
    return _StepTablePath(a, R[0])
