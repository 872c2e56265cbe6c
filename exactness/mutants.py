"""Mutant catalogue: realistic biased verifiers the harness must flag.

Each mutant is a small, documented variant of a correct verifier that
reproduces a bug class seen in speculative-decoding engines.  The harness
must flag every one with its default budget (``resispec certify --mutants``
reports the detection power of each).  Most are biased in law; two break
coupling or bookkeeping only (``batch_broadcast``, ``accepted_by_match``)
and one breaks reproducibility only (``unseeded_residual``) -- the
conditional checks exist to catch those.

``CATALOGUE``: name -> Verifier instance.  ``MIN_K``: smallest ``k`` at which
a mutant is biased.  ``CAUGHT_BY``: the check designed to catch it.

Rules mutated: SpecInfer recursive rejection (Miao et al. 2024, arXiv
2305.09781), speculative sampling (Leviathan et al. 2023, arXiv 2211.17192),
RSD without-replacement drafting (Jeon et al. 2024, arXiv 2402.14160),
ResiSpec residual shaping (``docs/RESISPEC.md`` section 4); ``public_summary_proxy`` is a
RECONSTRUCTION from public summaries of an after-rejection proxy rule, not any author's code.
"""

from __future__ import annotations

import numpy as np

from resispec._validation import as_candidates, as_laws, as_uniforms, check_rng
from resispec.verifiers.base import MassVerifier, Verifier, decide, reject_update
from resispec.verifiers.baselines import RecursiveRejection
from resispec.verifiers.rejection_proxy import RejectionProxy
from resispec.verifiers.resispec import ResiSpec, solve_reserve


def _rrs_steps(p, q, k, ratio_q=None, renormalise=True, subtract=True):
    """The rrs walk with optional bugs, candidates aside: ``([ratio (B, V)] * k, residual (B, V))``.

    ``ratio[i][b, x]`` is the accept probability of candidate ``i`` if it is
    token ``x`` (the walk never looks at the candidates), so the chain at any
    candidates and the one-node table are read from the same numbers.
    """
    p_i = p
    qd = q if ratio_q is None else ratio_q
    ratios = []
    for _ in range(k):
        m = np.minimum(p_i, q)
        with np.errstate(divide="ignore", invalid="ignore"):  # tokens with q = 0 are never candidates
            ratios.append(np.clip(m / qd, 0.0, 1.0))
        if subtract:
            p_i = reject_update(p_i, m) if renormalise else np.maximum(p_i - m, 0.0)
    z = p_i.sum(axis=1, keepdims=True)
    return ratios, np.where(z > 0, p_i / np.where(z > 0, z, 1.0), p)


def _rrs_chain(p, q, c, ratio_q=None, renormalise=True, subtract=True):
    """The rrs chain with optional bugs; returns (a (B, k), residual (B, V))."""
    B, k = c.shape
    ratios, r = _rrs_steps(p, q, k, ratio_q, renormalise, subtract)
    rows = np.arange(B)
    return np.stack([ratios[i][rows, c[:, i]] for i in range(k)], axis=1), r


class _SharedRRS:
    """Mix-in: an ``_rrs_chain`` mutant verifies a batch of one shared node in O(k V) + O(k log V) per row."""

    handles_shared_nodes = True
    _bugs: dict = {}

    def _node_table(self, p1, q1, k):
        opts = dict(self._bugs)
        if opts.pop("bf16", False):
            opts["ratio_q"] = bfloat16(q1)
        ratios, r = _rrs_steps(p1, q1, k, **opts)
        return np.stack([x[0] for x in ratios]), r[0]


class _Mutant(Verifier):
    drafting = "iid"
    bug = ""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"mutant:{self.name}"


class RRSOnWOR(_Mutant):
    """``rrs`` (``m_i = min(p_i, q)``, raw ``q``) applied to without-replacement drafts."""

    drafting = "without_replacement"
    bug = "rrs on without-replacement drafts (draft not renormalised after each rejection)"

    def _chain(self, p, q, c):
        return RecursiveRejection()._chain(p, q, c)


class ResidualNotRenormalised(_SharedRRS, _Mutant):
    """rrs whose residual ``p_i - m_i`` is never divided by ``1 - sum m_i``."""

    bug = "residual (p - q)_+ not renormalised before the next candidate"
    _bugs = {"renormalise": False}

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c, renormalise=False)


class ReusedUniform(_Mutant):
    """rrs that reuses the last acceptance uniform to draw the residual token."""

    bug = "the acceptance uniform of the last candidate reused for the residual draw"

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c)

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        p2, q2, _ = as_laws(p, q)
        c = as_candidates(candidates, q2, drafting=self.drafting)
        B, k = c.shape
        u = check_rng(rng).random((B, k + 1)) if uniforms is None else as_uniforms(uniforms, B, k).copy()
        u[:, k] = u[:, k - 1]
        a, r = self._chain(p2, q2, c)
        return decide(a, r, c, u)


class TopKDraft(_Mutant):
    """Drafts sampled from a top-k processed ``q``; the ratio uses the raw ``q``."""

    bug = "draft sampled from top-k processed q, ratio computed with the raw q"

    def __init__(self, name, top_k: int = 4):
        super().__init__(name)
        self.top_k = top_k

    def draft_law(self, q):
        V = q.shape[1]
        if self.top_k >= V:
            return q
        idx = np.argpartition(-q, self.top_k - 1, axis=1)[:, :self.top_k]
        out = np.zeros_like(q)
        rows = np.arange(q.shape[0])[:, None]
        out[rows, idx] = q[rows, idx]
        return out / out.sum(axis=1, keepdims=True)

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c)


class GreedyDraft(_Mutant):
    """Greedy (argmax) drafts verified as if they were sampled from the softmax ``q``."""

    bug = "greedy (argmax) draft verified with the softmax q"

    def draft_law(self, q):
        out = np.zeros_like(q)
        out[np.arange(q.shape[0]), np.argmax(q, axis=1)] = 1.0
        return out

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c)


class AlwaysAccept(_Mutant):
    """Accepts the first candidate unconditionally (output law ``q``)."""

    bug = "always accept the first candidate"
    handles_shared_nodes = True

    def _chain(self, p, q, c):
        a = np.zeros(c.shape, dtype=np.float64)
        a[:, 0] = 1.0
        return a, p.copy()

    def _node_table(self, p1, q1, k):
        a = np.zeros((k, p1.shape[1]))
        a[0] = 1.0
        return a, p1[0].copy()


class ResidualIsP(_SharedRRS, _Mutant):
    """rrs that resamples from ``p`` instead of the residual ``norm((p - q)_+)``."""

    bug = "residual equal to p instead of norm((p - q)_+)"
    _bugs = {"subtract": False}

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c, subtract=False)


class BonusFromResidual(_Mutant):
    """Correct rrs at a node, but the bonus token after a full accept comes from the residual."""

    bug = "bonus token after a full accept drawn from the residual norm((p - q)_+) instead of p"

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c)

    def bonus_law(self, p, q):
        r = np.maximum(p - q, 0.0)
        z = r.sum(axis=1, keepdims=True)
        return np.where(z > 0, r / np.where(z > 0, z, 1.0), p)


class PeekingProxy(MassVerifier):
    """ResiSpec whose proxy is the empirical law of the LATER candidates (peeks ahead)."""

    drafting = "iid"
    candidate_independent = False
    bug = "ResiSpec proxy computed from the later candidates"

    def __init__(self, name):
        self.name = name
        self._c = None

    def __repr__(self):
        return f"mutant:{self.name}"

    def _chain(self, p, q, c):
        self._c = c
        try:
            return self._walk(p, q, c)
        finally:
            self._c = None

    def accepted_mass(self, i, k, p_i, q_i, *, q, rejected):
        if i == k - 1:
            return np.minimum(p_i, q_i)
        later = self._c[:, i + 1:]
        B, V = p_i.shape
        rho = np.zeros((B, V))
        np.add.at(rho, (np.repeat(np.arange(B), later.shape[1]), later.ravel()), 1.0)
        rho /= rho.sum(axis=1, keepdims=True)
        lam = solve_reserve(p_i, q_i, rho, 1.0)
        return np.minimum(q_i, np.maximum(p_i - lam[:, None] * rho, 0.0))


def bfloat16(x: np.ndarray) -> np.ndarray:
    """Round float64 values to bfloat16 (round to nearest even), returned as float64."""
    f = np.asarray(x, dtype=np.float32)
    b = f.view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


class BF16Ratio(_SharedRRS, _Mutant):
    """rrs whose accept ratio divides by ``q`` rounded to bfloat16 (the rest in float64)."""

    bug = "q rounded to bfloat16 in the accept ratio only"
    _bugs = {"bf16": True}

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c, ratio_q=bfloat16(q))


class BatchBroadcast(_Mutant):
    """rrs that verifies every row of a batch against row 0's ``p`` and ``q`` (stride bug)."""

    bug = "batched verify reads row 0's p and q for every node (exact one node at a time)"

    def _chain(self, p, q, c):
        B = c.shape[0]
        return _rrs_chain(np.broadcast_to(p[:1], p.shape), np.broadcast_to(q[:1], q.shape), c)


class AcceptedByMatch(_Mutant):
    """ResiSpec that reports the accepted index by matching the emitted token against the candidates.

    Harmless for ``rrs`` (a rejected token has zero residual mass) but wrong
    for ResiSpec, whose residual keeps mass on rejected candidates: a residual
    token equal to a rejected candidate is booked as an accept.
    """

    bug = "accepted count recovered by matching the output token against the drafts (ResiSpec)"

    def _chain(self, p, q, c):
        return ResiSpec()._chain(p, q, c)

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        res = super().verify(p, q, candidates, rng, uniforms=uniforms)
        p2, q2, _ = as_laws(p, q)
        c = as_candidates(candidates, q2)
        match = c == res.tokens[:, None]
        acc = np.where(match.any(axis=1), np.argmax(match, axis=1), -1).astype(np.int64)
        return type(res)(tokens=res.tokens, accepted=acc)


class UnseededResidual(_Mutant):
    """rrs that draws the residual token from an internal unseeded generator."""

    bug = "residual token drawn from an unseeded generator (not reproducible)"

    def __init__(self, name):
        super().__init__(name)
        self._own = np.random.default_rng()

    def _chain(self, p, q, c):
        return _rrs_chain(p, q, c)

    def verify(self, p, q, candidates, rng=None, *, uniforms=None):
        p2, q2, _ = as_laws(p, q)
        c = as_candidates(candidates, q2)
        B, k = c.shape
        u = check_rng(rng).random((B, k + 1)) if uniforms is None else as_uniforms(uniforms, B, k).copy()
        u[:, k] = self._own.random(B)
        a, r = self._chain(p2, q2, c)
        return decide(a, r, c, u)


def public_summary_rule(R, q, x, *, step):
    """RECONSTRUCTION, from third-party public summaries (not the authors' code), of an after-rejection proxy.

    As summaries describe it: on rejecting ``x`` build ``K = GetProxy(R, q, x)`` with "local alignment"
    ``K(x) = q(x)`` and continue from ``R <- norm((R - K)_+)``.  The summaries do not say what ``K`` is off
    ``x``; this reconstruction takes ``K = q(x) e_x`` (zero elsewhere): the draft's mass at the rejected
    token only.  On ``p = (.4, .3, .3)``, ``q = (.6, .3, .1)``, ``k = 1`` its exact output law is
    ``(.4, .4, .2)`` (TV 0.1; ``tests/test_rejection_proxy.py``), not the issue's ``(.4, .48, .12)``, which
    came from a reconstruction whose ``K`` off ``x`` we could not recover.  Biased: it ignores the transport
    condition ``sum_x (q(x) - R(x))_+ R^(x) = (R - q)_+`` (``resispec/verifiers/rejection_proxy.py``).

    ``R, q``: (B, V) float64; ``x``: (B,) int64.  Returns (B, V) float64 laws (``R`` kept where ``R - K`` is 0).
    """
    rows = np.arange(x.shape[0])
    K = np.zeros_like(R)
    K[rows, x] = q[rows, x]
    resid = np.maximum(R - K, 0.0)
    z = resid.sum(axis=1, keepdims=True)
    return np.where(z > 0, resid / np.where(z > 0, z, 1.0), R)


class PublicSummaryProxy(RejectionProxy):
    """RECONSTRUCTION of a publicly summarised after-rejection proxy (:func:`public_summary_rule`); not the authors' code."""

    bug = ("reconstruction (from public summaries, not the authors' code) of an after-rejection proxy: "
           "R <- norm((R - K)+), K(x) = q(x) at the rejected token; ignores the transport condition")

    def __init__(self, name: str):
        super().__init__(public_summary_rule)
        self.name = name

    def __repr__(self):
        return f"mutant:{self.name}"


_CLASSES = {
    "rrs_on_wor": RRSOnWOR,
    "residual_not_renormalised": ResidualNotRenormalised,
    "reused_uniform": ReusedUniform,
    "topk_draft_raw_ratio": TopKDraft,
    "greedy_draft_softmax_ratio": GreedyDraft,
    "always_accept": AlwaysAccept,
    "residual_is_p": ResidualIsP,
    "bonus_from_residual": BonusFromResidual,
    "peeking_proxy": PeekingProxy,
    "bf16_ratio": BF16Ratio,
    "batch_broadcast": BatchBroadcast,
    "accepted_by_match": AcceptedByMatch,
    "unseeded_residual": UnseededResidual,
    "public_summary_proxy": PublicSummaryProxy,
}

#: name -> biased Verifier instance.
CATALOGUE: dict[str, Verifier] = {name: cls(name) for name, cls in _CLASSES.items()}

#: Smallest k at which the mutant differs from a correct verifier.
MIN_K = {"rrs_on_wor": 2, "residual_not_renormalised": 2, "peeking_proxy": 2, "accepted_by_match": 2}

#: The check designed to catch each mutant (others may catch it too).
CAUGHT_BY = {
    "rrs_on_wor": "exact_law, marginal",
    "residual_not_renormalised": "exact_law, marginal",
    "reused_uniform": "joint (stop, token), residual, marginal (k = 1)",
    "topk_draft_raw_ratio": "exact_law, marginal",
    "greedy_draft_softmax_ratio": "exact_law, marginal",
    "always_accept": "exact_law, marginal, acceptance <= alpha*",
    "residual_is_p": "exact_law, marginal",
    "bonus_from_residual": "tree (bonus token)",
    "peeking_proxy": "exact_law, marginal",
    "bf16_ratio": "exact_law",
    "batch_broadcast": "batched == one-at-a-time",
    "accepted_by_match": "joint (stop, token), accepted count",
    "unseeded_residual": "seeded determinism",
    "public_summary_proxy": "exact_law, marginal",
}


def describe(name: str) -> str:
    """One-line description of a mutant's bug."""
    return getattr(CATALOGUE[name], "bug", "") or (type(CATALOGUE[name]).__doc__ or "").strip().splitlines()[0]
