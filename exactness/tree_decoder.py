"""A reference tree speculative decoder over a draft/target model, in the flattened layout engines use.

One target call per step verifies a whole draft tree of branching ``(k_1, .., k_D)``: the root
(the current context) has ``k_1`` i.i.d. candidates drawn from ``q(context)``; every level-``l``
node has ``k_{l+1}`` i.i.d. children drawn from ``q`` at its own context.  As in serving engines
(SpecInfer, Miao et al. 2024, arXiv 2305.09781; Sequoia, Chen et al. 2024, arXiv 2402.12374), the
target and draft laws of every node are computed in one flattened pass: level ``l`` holds
``N_l = k_1 .. k_l`` nodes per row, node ``n`` of level ``l`` has parent ``n // k_l``.  Verification
walks down from the root: at the current node the node rule (a ``resispec`` registry verifier,
default ``rrs``; Chen et al. 2023 / SpecInfer's multi-candidate recursive rejection sampling)
verifies the node's children with ``p`` and ``q`` read from THAT node's slice; an accepted child
becomes the current node and its token is emitted; a rejection emits the rule's residual token
and ends the step; after a fully accepted path the bonus token is drawn from ``p`` at the leaf.
Every verifier's lemma (the emitted token at a node follows ``p`` at that node) makes the whole
decoder exact, whatever ``q``.

:class:`TreeDecoder` satisfies the :func:`exactness.certify_decoder` contract (``sample``,
``__call__``, ``draft_law``).  Its hook :meth:`TreeDecoder.node_laws` (which slice of the
flattened laws the rule reads) is where the biased decoders of :mod:`exactness.decoder_mutants`
plant the "wrong logits slice" and "wrong position" bugs that engines shipped.
"""

from __future__ import annotations

import numpy as np

from .chain import _Contexts, _sample_rows, check_rng, check_sample_args, model_laws


#: The most candidates one tree node may have (engines use a handful; more is a typo, not a tree).
MAX_BRANCHING = 64


def _check_branching(branching) -> tuple[int, ...]:
    """``(k_1, .., k_D)`` from a sequence of ints or a string like ``"2,2"``; each ``1 <= k <= 64``."""
    if isinstance(branching, str):
        try:
            branching = tuple(int(s) for s in branching.split(","))
        except ValueError:
            raise ValueError(f"branching must be like '2,2' (candidates per level), got {branching!r}") from None
    try:
        items = list(branching)
    except TypeError:
        raise TypeError(f"branching must be a sequence of ints (candidates per level), got {branching!r}") from None
    if not items or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_BRANCHING
                        for k in items):
        raise ValueError(f"branching must be a non-empty sequence of integers in [1, {MAX_BRANCHING}] (candidates "
                         f"per level, e.g. (2, 2) or '2,2'), got {branching!r}")
    return tuple(int(k) for k in items)

class TreeDecoder:
    """A tree speculative decoder: draft a ``branching`` tree from ``q``, verify it level by level.

    Parameters
    ----------
    model : object with ``laws(contexts) -> (p (B, V), q (B, V))``
        Draft/target model, e.g. ``simulators.autoregressive.MarkovPair``.
    branching : sequence of int or str, default (2, 2)
        Candidates per level (``"2,2"``: two candidates at the root, two children each).
    verifier : str or resispec Verifier, default "rrs"
        Node rule for i.i.d. drafts (``rrs``, ``kseq``, ``resispec``, ``target_only``, ...).

    Calling conventions (:func:`exactness.certify_decoder`): ``sample(prompts (B, L) int64,
    new_tokens, rng) -> (B, new_tokens) int64``; ``__call__(prompt (L,), new_tokens, rng)``;
    ``draft_law(contexts (B, L)) -> (B, V)``.  ``rng.spawn(2)``: one stream drafts, one verifies.

    Raises
    ------
    TypeError, ValueError
        A model without ``laws``; a ``branching`` entry that is not an integer in [1, 64]; an
        unknown verifier name, an object that is not a Verifier (``verify``, ``chain``, ``name``),
        or a verifier that is not exact for i.i.d. drafts (e.g. ``rrs_wor``).  ``sample``: an
        ``rng`` that is not a numpy Generator (TypeError), prompts not 2-D integer ids in [0, V),
        ``new_tokens`` < 1.
    """

    def __init__(self, model, branching=(2, 2), verifier="rrs"):
        from resispec import get_verifier

        if not hasattr(model, "laws"):
            raise TypeError("model must have laws(contexts) -> (p, q), e.g. simulators.autoregressive.MarkovPair")
        self.model = model
        self.branching = _check_branching(branching)
        self.verifier = get_verifier(verifier) if isinstance(verifier, str) else verifier
        if not (callable(getattr(self.verifier, "verify", None)) and callable(getattr(self.verifier, "chain", None))
                and isinstance(getattr(self.verifier, "name", None), str)):
            raise TypeError(f"verifier must be a registry name (e.g. 'rrs') or a resispec Verifier (an object with "
                            f"verify, chain and name), got {type(verifier).__name__}")
        if getattr(self.verifier, "drafting", "iid") not in ("iid", "any"):
            raise ValueError(f"verifier {self.verifier.name!r} is exact for {self.verifier.drafting} drafts; "
                             "TreeDecoder drafts i.i.d. candidates: pick an i.i.d. rule (rrs, kseq, resispec, ...)")
        self.name = f"tree[{self.verifier.name}, {','.join(map(str, self.branching))}]"

    # -- hook --------------------------------------------------------------
    def node_laws(self, P, Q, level: int, cur: np.ndarray, rows: np.ndarray):
        """``(p, q)`` (A, V) the rule uses at the current nodes ``cur`` (A,) of ``level``.

        ``P[l], Q[l]``: (B, N_l, V) laws at every level-``l`` node (``P[0]``: the root).  The
        correct slice is the current node's own.
        """
        return P[level][rows, cur], Q[level][rows, cur]

    # -- the decoder ---------------------------------------------------------
    def draft_law(self, contexts) -> np.ndarray:
        """The draft law ``q`` (B, V) float64 at each context (B, L)."""
        return model_laws(self.model, [row for row in np.asarray(contexts)])[1]

    def _tree(self, seq: np.ndarray, length: np.ndarray, drng):
        """Draft the whole tree: per level its tokens (A, N_l) and laws ``P[l], Q[l]`` (A, N_l, V)."""
        A = seq.shape[0]
        ctx = _Contexts(self.model, seq, length)               # the level's node contexts, (A N_l) rows
        P, Q, tokens = [], [], []
        n = 1
        for k in self.branching + (0,):
            p, q = ctx.laws()
            P.append(p.reshape(A, n, -1))
            Q.append(q.reshape(A, n, -1))
            if k == 0:
                break
            u = drng.random((A * n, k))
            d = np.stack([_sample_rows(q, u[:, j]) for j in range(k)], axis=1)   # k iid children per node
            tokens.append(d.reshape(A, n * k))
            ctx = _Contexts(self.model, np.repeat(ctx.seq, k, axis=0), np.repeat(ctx.length, k))
            ctx.push(d.reshape(-1))
            n *= k
        return tokens, P, Q

    def sample(self, prompts, new_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """``new_tokens`` tokens per prompt row: (B, L) int64 -> (B, new_tokens) int64."""
        prompts = check_sample_args(self.model, prompts, new_tokens)
        B, L = prompts.shape
        D = len(self.branching)
        drng, vrng = check_rng(rng, B, False).spawn(2)
        seq = np.concatenate([prompts, np.full((B, new_tokens + D + 1), -1, dtype=np.int64)], axis=1)
        length = np.full(B, L, dtype=np.int64)
        active = np.arange(B)

        def emit(rows, toks):
            seq[rows, length[rows]] = toks
            length[rows] += 1

        while active.size:
            tokens, P, Q = self._tree(seq[active], length[active], drng)
            A = active.size
            cur = np.zeros(A, dtype=np.int64)
            going = np.ones(A, dtype=bool)
            for level, k in enumerate(self.branching):
                g = np.flatnonzero(going)
                if not g.size:
                    break
                p, q = self.node_laws(P, Q, level, cur[g], g)
                cand = tokens[level][g[:, None], cur[g, None] * k + np.arange(k)[None, :]]
                res = self.verifier.verify(p, q, cand, vrng)
                emit(active[g], res.tokens)
                acc = res.accepted >= 0
                cur[g[acc]] = cur[g[acc]] * k + res.accepted[acc]
                going[g[~acc]] = False
            g = np.flatnonzero(going)
            if g.size:                                          # full path: bonus from p at the leaf
                p, _ = self.node_laws(P, Q, D, cur[g], g)
                emit(active[g], _sample_rows(p, vrng.random(g.size)))
            active = active[length[active] - L < new_tokens]
        return seq[:, L:L + new_tokens].copy()

    def __call__(self, prompt, new_tokens: int, rng: np.random.Generator) -> np.ndarray:
        return self.sample(np.asarray(prompt, dtype=np.int64)[None, :], new_tokens, rng)[0]

    def __repr__(self) -> str:
        return self.name


class WrongSliceTree(TreeDecoder):
    """Biased: below the root the rule reads the NEXT sibling's slice of the flattened laws (an index bug)."""

    def node_laws(self, P, Q, level, cur, rows):
        if level == 0:
            return super().node_laws(P, Q, level, cur, rows)
        n = P[level].shape[1]
        return P[level][rows, (cur + 1) % n], Q[level][rows, cur]


class ParentPositionTree(TreeDecoder):
    """Biased: below the root the rule reads the target law of the PARENT position (off by one position)."""

    def node_laws(self, P, Q, level, cur, rows):
        if level == 0:
            return super().node_laws(P, Q, level, cur, rows)
        k = self.branching[level - 1]
        return P[level - 1][rows, cur // k], Q[level][rows, cur]


__all__ = ["TreeDecoder", "WrongSliceTree", "ParentPositionTree"]
