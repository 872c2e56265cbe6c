"""Biased speculative decoders (each a real bug class) and the exact ones they are built from.

Every biased decoder here must FAIL :func:`exactness.certify_decoder` at default settings
(``tests/test_decoder_mutants.py``); the exact ones must pass.  Each is built over a tiny
draft/target model (``model.laws(contexts) -> (p, q)``, e.g. ``simulators.autoregressive.MarkovPair``).

Exact: :func:`token_chain` (Leviathan et al. 2023), :func:`block_chain` (Sun et al. 2024),
:class:`RRSDecoder` (one token per step through ``resispec.get_verifier("rrs")``).

Biased (``MUTANTS``: name -> factory ``(model, gamma) -> decoder``):

- ``argmax_draft_raw_q``: drafts by argmax of q but hands the raw q to the verifier (the
  acceptance ratio is then for the wrong draft law);
- ``shared_rng``: one random stream for drafting and acceptance (the same uniform draws the
  draft by inverse CDF and decides its acceptance);
- ``residual_off_by_one``: the residual after a rejection at position i uses the target row of
  position i + 1;
- ``target_off_by_one``: the acceptance ratio at position i uses the target row of position i + 1;
- ``block_same_position_residual``: block verification whose residual is the token-level
  ``norm(max(p_tau - q_tau, 0))`` of the stop row, without the block weight ``w_tau``;
- ``rows_mixed``: in batches of more than two rows, rows 2.. are handed the target rows of
  their neighbour (a stride / index bug that spares batches of one and two);
- ``bonus_from_residual``: after a fully accepted path the bonus token is drawn from
  ``norm(max(p_gamma - q_{gamma-1}, 0))`` instead of ``p_gamma``.
"""

from __future__ import annotations

import numpy as np

from .chain import (ChainDecoder, _block_residual, _draft_q, _emit, _normalise_or, _sample_rows,
                    block_kernel, block_stop, chain_target, model_laws, token_chain_kernel)


def token_chain(model, gamma: int = 2, **kw) -> ChainDecoder:
    """Exact: token-level chain verification over ``model`` (``kw``: ``one_hot``)."""
    return ChainDecoder(token_chain_kernel, model, gamma=gamma, **kw)


def block_chain(model, gamma: int = 2, **kw) -> ChainDecoder:
    """Exact: block verification over ``model``."""
    return ChainDecoder(block_kernel, model, gamma=gamma, **kw)


class RRSDecoder:
    """Exact: one token per step, ``k`` iid draft candidates verified by ``resispec.get_verifier("rrs")``.

    ``sample(prompts (B, L), new_tokens, rng) -> (B, new_tokens)``; ``draft_law(contexts)`` reports q.
    """

    def __init__(self, model, k: int = 2):
        import resispec

        self.model, self.k = model, int(k)
        self.verifier = resispec.get_verifier("rrs")
        self.name = f"rrs[k={self.k}]"

    def draft_law(self, contexts):
        return model_laws(self.model, [row for row in np.asarray(contexts)])[1]

    def sample(self, prompts, new_tokens, rng):
        from resispec.sampling import draw_candidates

        prompts = np.asarray(prompts, dtype=np.int64)
        ctx = [list(r) for r in prompts]
        out = np.empty((prompts.shape[0], new_tokens), dtype=np.int64)
        for j in range(new_tokens):
            p, q = model_laws(self.model, ctx)
            cand = draw_candidates(q, self.k, "iid", rng)
            out[:, j] = self.verifier.verify(p, q, cand, rng).tokens
            ctx = [c + [int(t)] for c, t in zip(ctx, out[:, j])]
        return out

    def __call__(self, prompt, new_tokens, rng):
        return self.sample(np.asarray(prompt)[None, :], new_tokens, rng)[0]

    def __repr__(self):
        return self.name


# --------------------------------------------------------------------------- biased decoders
class ArgmaxDraftRawQ(ChainDecoder):
    """Drafts ``argmax q`` while the kernel is told the drafts came from ``q``."""

    def draft(self, q, u):
        return np.argmax(q, axis=1).astype(np.int64)


class SharedRNG(ChainDecoder):
    """Drafting and acceptance read the same uniforms (one stream handed to both)."""

    def streams(self, rng):
        s = int(rng.integers(2**63))
        return np.random.default_rng(s), np.random.default_rng(s)


class RowsMixed(ChainDecoder):
    """Batches of more than two rows: rows 2.. get the target rows of the next row (cyclically)."""

    def verify_inputs(self, p, q, d):
        p, q, d = super().verify_inputs(p, q, d)
        if p.shape[0] > 2:
            p = p.copy()
            p[2:] = np.roll(p[2:], -1, axis=0)
        return p, q, d


def _token_accepts(target_probs, draft_probs, draft_ids, rng):
    """The correct token-level accept stage: ``(p (B, g+1, V), q (B, g, V), ids (B, g), g, n_acc (B,))``.

    Candidate ``i`` is accepted w.p. ``min(1, p_i(x_i) / q_i(x_i))`` until the first rejection
    (Leviathan et al. 2023, arXiv 2211.17192); the mutants below reuse it and change one later step.
    """
    p = np.asarray(target_probs, dtype=np.float64)
    d = np.asarray(draft_ids, dtype=np.int64)
    B, g1, V = p.shape
    g = g1 - 1
    q = _draft_q(draft_probs, d, V)
    rows, pos = np.arange(B)[:, None], np.arange(g)[None, :]
    ratio = p[rows, pos, d] / np.maximum(q[rows, pos, d], 1e-300)
    n_acc = np.cumprod(rng.random((B, g)) < np.minimum(1.0, ratio), axis=1).sum(axis=1)
    return p, q, d, g, n_acc


def residual_off_by_one_kernel(target_probs, draft_probs, draft_ids, rng):
    """Token-level chain whose residual after a rejection at i uses target row i + 1 (biased)."""
    p, q, d, g, n_acc = _token_accepts(target_probs, draft_probs, draft_ids, rng)
    B = p.shape[0]
    at = np.minimum(n_acc, g - 1)
    p_wrong = p[np.arange(B), at + 1]                       # BUG: should be at
    residual = _normalise_or(np.maximum(p_wrong - q[np.arange(B), at], 0.0), p_wrong)
    law = np.where((n_acc == g)[:, None], p[:, g], residual)
    return _emit(d, n_acc, _sample_rows(law, rng.random(B)))


def target_off_by_one_kernel(target_probs, draft_probs, draft_ids, rng):
    """Token-level chain whose acceptance ratio at i reads target row i + 1 (biased)."""
    p = np.asarray(target_probs, dtype=np.float64)
    return token_chain_kernel(np.concatenate([p[:, 1:], p[:, -1:]], axis=1), draft_probs, draft_ids, rng)


def bonus_from_residual_kernel(target_probs, draft_probs, draft_ids, rng):
    """Token-level chain whose bonus token (full acceptance) comes from a residual (biased)."""
    p, q, d, g, n_acc = _token_accepts(target_probs, draft_probs, draft_ids, rng)
    B = p.shape[0]
    at = np.minimum(n_acc, g - 1)
    p_at, q_at = p[np.arange(B), at], q[np.arange(B), at]
    residual = _normalise_or(np.maximum(p_at - q_at, 0.0), p_at)
    bonus = _normalise_or(np.maximum(p[:, g] - q[:, g - 1], 0.0), p[:, g])   # BUG: should be p[:, g]
    law = np.where((n_acc == g)[:, None], bonus, residual)
    return _emit(d, n_acc, _sample_rows(law, rng.random(B)))


def block_same_position_residual_kernel(target_probs, draft_probs, draft_ids, rng):
    """Block verification with the token-level residual of the stop row (no weight ``w_tau``; biased)."""
    p, q, d, w, tau = block_stop(target_probs, draft_probs, draft_ids, rng)
    law = _block_residual(p, q, np.ones_like(w), tau)          # BUG: weights dropped
    return _emit(d, tau, _sample_rows(law, rng.random(p.shape[0])))


# The biased kernels claim the rule they mean to implement: the conditional checks hold them to it.
for _k in (residual_off_by_one_kernel, target_off_by_one_kernel, bonus_from_residual_kernel):
    _k.rule = "rrs"
block_same_position_residual_kernel.rule = "block"

MUTANTS = {
    "argmax_draft_raw_q": lambda model, gamma=2: ArgmaxDraftRawQ(token_chain_kernel, model, gamma=gamma),
    "shared_rng": lambda model, gamma=2: SharedRNG(token_chain_kernel, model, gamma=gamma),
    "residual_off_by_one": lambda model, gamma=2: ChainDecoder(residual_off_by_one_kernel, model, gamma=gamma),
    "target_off_by_one": lambda model, gamma=2: ChainDecoder(target_off_by_one_kernel, model, gamma=gamma),
    "block_same_position_residual":
        lambda model, gamma=2: ChainDecoder(block_same_position_residual_kernel, model, gamma=gamma),
    "rows_mixed": lambda model, gamma=2: RowsMixed(token_chain_kernel, model, gamma=gamma),
    "bonus_from_residual": lambda model, gamma=2: ChainDecoder(bonus_from_residual_kernel, model, gamma=gamma),
}

#: Exact decoders: name -> factory ``(model, gamma) -> decoder``.
CORRECT = {
    "token_chain": lambda model, gamma=2: token_chain(model, gamma),
    "token_chain_one_hot": lambda model, gamma=2: token_chain(model, gamma, one_hot=True),
    "block_chain": lambda model, gamma=2: block_chain(model, gamma),
    "rrs": lambda model, gamma=2: RRSDecoder(model, k=gamma),
}


def demo(V: int = 8, gamma: int = 2, seed: int = 0, name: str = "token_chain", prompts: int = 3):
    """Factory for ``resispec certify-decoder --decoder exactness.decoder_mutants:demo``:
    ``(decoder, target, prompts)`` over a random Markov pair (``simulators.autoregressive.MarkovPair``)."""
    from simulators.autoregressive import MarkovPair

    model = MarkovPair.random(np.random.default_rng(seed), V)
    make = {**CORRECT, **MUTANTS}[name]
    pr = (np.arange(prompts, dtype=np.int64) % V)[:, None]
    return make(model, gamma), chain_target(model), pr
