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

The 2026 bug classes (issue 38), with sampling settings (:class:`exactness.settings.SamplingSettings`)
as part of the law.  Exact: :class:`SettingsChainDecoder` (``CORRECT_2026["settings_chain"]``): token-level
chain verification of the PROCESSED laws, target ``processed_law(log P, ...)`` and draft
``processed_law(log Q, ...)`` in the engine's order (default ``"transformers"``), certified against
:func:`settings_target`.  Biased (``MUTANTS_2026``: name -> factory ``(model, gamma=2, settings=None,
**kw) -> decoder``; a separate dict because its target is :func:`settings_target`, not
``chain_target``, and because ``tests/test_decoder_mutants*.py`` pin ``MUTANTS``' names):

- ``settings_bonus_only``: the settings other than the temperature reach the bonus token only; the
  draft and the verified positions (and so the residual after a rejection) use ``softmax(logits / T)``
  (vllm-project/vllm#42744, #42802: min_p / logit_bias skipped by the rejection sampler, honoured on
  the bonus token through the regular sampler);
- ``settings_dropped_by_verifier``: the drafted positions' target rows lack ``logit_bias`` (the
  draft and the bonus keep it) (vllm-project/vllm#38467: logit_bias silently ignored under
  speculative decoding);
- ``penalty_history_off_by_one``: every target row of the speculative path (verified and bonus)
  computes its penalties over the history without its last token (the same class as
  sgl-project/sglang#33643: accepted tokens missing from the penalty state; the opposite sign,
  the last sampled token counted twice, was caught in review of vllm-project/vllm#33251);
- ``verifier_temperature_hardcoded``: the verified positions' target rows are computed at
  temperature 1 while the draft and the bonus use ``T`` (ohdearquant/lattice#388);
- ``first_draft_unverified``: the first drafted token of every round is committed without a test
  (its target row is replaced by its draft row, so ``min(1, p / q) = 1``) (ohdearquant/lattice#243,
  greedy n-gram verification);
- ``draft_misaligned_after_reorder``: in a batch of two or more rows the draft laws ``q`` handed to
  the verifier come in the order of the rows sorted by prompt, while the drafted tokens stay in the
  batch order (batches of one, and batches of one prompt, are spared) (the class of
  vllm-project/vllm#41044: draft probs packed without the batch-reorder map, and #14645).

Two more 2026 classes are in ``MUTANTS`` above: a draft that is an argmax scored with its softmax
``q`` (``argmax_draft_raw_q``) and rows of a batch reading another row's target law (``rows_mixed``).
The engine-level twins, planted inside a real engine, are in :mod:`exactness.engines.mutants`.
"""

from __future__ import annotations

from dataclasses import replace

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



# --------------------------------------------------------------------------- bugs only one decoder check sees
class Shifted(ChainDecoder):
    """Exact token-level chain except the rows ``when(prompts (B, L), B) -> (B,) bool`` picks (a stride, indexing
    or batch-shape bug): their tokens at ``tokens`` (a slice or index, default all) shift by one id.

    No events and no per-row generators, so neither the conditional checks nor ``batch_rows`` can see it."""

    sample_events = None
    per_row_rng = False

    def __init__(self, model, when, tokens=slice(None)):
        super().__init__(token_chain_kernel, model)
        self.when, self.tokens = when, tokens

    def sample(self, prompts, new_tokens, rng):
        out = np.array(super().sample(prompts, new_tokens, rng))                      # (B, new_tokens) int64
        rows = np.asarray(self.when(np.asarray(prompts), out.shape[0]), dtype=bool)   # (B,) bool
        out[rows, self.tokens] = (out[rows, self.tokens] + 1) % self.model.P.shape[0]
        return out


def batch_row(r):
    """``when`` of :class:`Shifted`: row ``r`` of every batch that has it (``"last"``: the last row of batches
    of 2 or more)."""
    return lambda pr, B: (np.arange(B) == (B - 1 if r == "last" else r)) & (B > 1)


def tile_start(T: int):
    """``when`` of :class:`Shifted`: the first row of every tile of ``T`` rows past a batch's first (rows T, 2T,
    ...: a batched kernel's tiling bug)."""
    return lambda pr, B: (np.arange(B) % T == 0) & (np.arange(B) > 0)


class EventsDiffer(ChainDecoder):
    """Exact ``sample_events``, while ``sample`` shifts the last token of every 11th row: the main sample (drawn
    through the events) is exact, the decoder users call is not."""

    def sample(self, prompts, new_tokens, rng):
        out = np.array(super().sample(prompts, new_tokens, rng))
        flip = np.arange(out.shape[0]) % 11 == 10
        out[flip, -1] = (out[flip, -1] + 1) % self.model.P.shape[0]
        return out


def kernel_off_its_plan(model, gamma: int = 2) -> ChainDecoder:
    """Token-wise chain verification (exact: its law is the target's) whose kernel declares block verification's
    plan (``kernel.plan``): what the plan's exact analysis says is not what the code does."""
    from resispec.pathlevel import get_path_verifier

    from .chain import per_request

    token, block = get_path_verifier("token"), get_path_verifier("block")

    def kernel(target_probs, draft_probs, draft_ids, rng):
        r = token.verify(target_probs, draft_probs, draft_ids, rng)
        return np.append(draft_ids[:r.accepted], r.token)

    kernel.plan = block.plan
    return ChainDecoder(per_request(kernel), model, gamma=gamma)


def too_generous_chain(model, gamma: int = 2, factor: float = 1.2) -> ChainDecoder:
    """Block verification (Sun et al. 2024, arXiv 2403.10444) whose final acceptance is ``min(1, factor w_L)``
    (:func:`exactness.acceptance_bound.too_generous_block`) as a chain decoder that reports its decisions: it keeps
    more drafts a target call than any exact rule can (the acceptance-bound check), and its law is not the target's."""
    from .acceptance_bound import too_generous_block
    from .chain import per_request

    rule = too_generous_block(factor)

    def kernel(target_probs, draft_probs, draft_ids, rng):
        r = rule.verify(target_probs, draft_probs, draft_ids, rng)
        return np.append(draft_ids[:r.accepted], r.token)

    return ChainDecoder(per_request(kernel), model, gamma=gamma)


#: The planted bug each check of a decoder certificate must catch (``exactness.decoder_checks``): name -> factory
#: ``(model) -> decoder``, certified against ``chain_target(model)`` (``tests/test_decoder_checks.py``).
CHECK_MUTANTS = {
    "target_off_by_one": lambda model: MUTANTS["target_off_by_one"](model),
    "residual_off_by_one": lambda model: MUTANTS["residual_off_by_one"](model),
    "rows_mixed": lambda model: MUTANTS["rows_mixed"](model),
    "single_row": lambda model: Shifted(model, lambda pr, B: np.full(B, B == 1)),
    "row_2": lambda model: Shifted(model, batch_row(2)),
    "tile_64": lambda model: Shifted(model, tile_start(64)),
    "events_differ": lambda model: EventsDiffer(token_chain_kernel, model),
    "kernel_off_its_plan": kernel_off_its_plan,
    "too_generous_chain": too_generous_chain,
}

# --------------------------------------------------------------------------- 2026: sampling settings
def _settings_default():
    from .settings import SamplingSettings

    return SamplingSettings(temperature=0.7, repetition_penalty=1.5, logit_bias=((1, 1.0),))


#: The setting the 2026 catalogue runs at unless told otherwise: a temperature, a repetition penalty
#: (its history is the prompt and the tokens generated so far) and a logit bias; every token keeps a
#: positive probability, so a biased decoder fails on the law, not on an impossible token.
SETTINGS_DEFAULT = _settings_default()


def _raw_logits(model, contexts: list) -> tuple[np.ndarray, np.ndarray]:
    """Raw ``(target, draft)`` logits (B, V) float64: ``model.logits(contexts)`` when the model has it, else
    the log of its laws (a Markov pair's logits are ``log P``, ``log Q``: all <= 0)."""
    if callable(getattr(model, "logits", None)):
        lp, lq = model.logits(contexts)
        return np.asarray(lp, dtype=np.float64), np.asarray(lq, dtype=np.float64)
    p, q = model_laws(model, contexts)
    with np.errstate(divide="ignore"):
        return np.log(p), np.log(q)


class SettingsLaws:
    """Named processed laws at each context: the law stack a settings decoder picks its rows from.

    ``variants``: name -> ``(side, settings, shift)`` with ``side`` ``"p"`` (target logits) or ``"q"``
    (draft logits), ``settings`` a :class:`exactness.settings.SamplingSettings`, and ``shift`` the
    number of tokens dropped from the END of the history the steps see (0: the exact history; the
    logits are always those at the full context).  ``laws(contexts) -> (stack, stack)``, each (B, K, V)
    float64 with row ``k`` the law ``names[k]`` (both ``ChainDecoder`` slots get the same stack);
    ``contexts[b][:prompt_len]`` is the prompt.  Rows are cached per context.  ``last_contexts`` holds
    the contexts of the last call (a chain round's final call: prefix + its drafts), read by the
    batch-level hooks.  Raises ``ValueError`` when ``prompt_len`` is unknown (None, no sample yet).
    """

    def __init__(self, model, variants: dict, order: str = "transformers", prompt_len: int | None = None):
        from .settings import ORDERS

        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(sorted(ORDERS))}, got {order!r}")
        if not hasattr(model, "laws"):
            raise TypeError("model must have laws(contexts) -> (p, q), e.g. simulators.autoregressive.MarkovPair")
        self.model, self.order, self.variants = model, order, dict(variants)
        self.names = tuple(self.variants)
        self.vocab_size = int(getattr(model, "vocab_size", None) or _raw_logits(model, [()])[0].shape[1])
        self.prompt_len = prompt_len
        self.last_contexts: list = []
        self._cache: dict = {}

    def _rows(self, ctxs: list, pl: int) -> None:
        from .settings import processed_law

        lp, lq = _raw_logits(self.model, ctxs)
        for b, c in enumerate(ctxs):
            rows = []
            for side, settings, shift in self.variants.values():
                hist = np.asarray(c[:max(len(c) - shift, 0)], dtype=np.int64)[None, :]
                logits = (lp if side == "p" else lq)[b]
                rows.append(processed_law(logits[None, :], hist, min(pl, hist.shape[1]), settings, self.order)[0])
            self._cache[(pl, c)] = np.stack(rows)

    def laws(self, contexts):
        if self.prompt_len is None:
            raise ValueError("prompt_len is unknown: pass prompt_len= or call the decoder's sample first")
        pl = int(self.prompt_len)
        ctxs = [tuple(int(t) for t in c) for c in contexts]
        self.last_contexts = ctxs
        miss = [c for c in dict.fromkeys(ctxs) if (pl, c) not in self._cache]
        if miss:
            self._rows(miss, pl)
        stack = np.stack([self._cache[(pl, c)] for c in ctxs])
        return stack, stack

    def law(self, contexts, name: str) -> np.ndarray:
        """The law ``name`` (B, V) float64 at each context."""
        return self.laws(contexts)[0][:, self.names.index(name)]


def settings_target(model, settings=None, prompt_len: int = 1, order: str = "transformers"):
    """The ``target(contexts (B, L') int64) -> (B, V) float64`` of :class:`SettingsChainDecoder`, for
    ``certify_decoder``: ``exactness.settings.processed_law`` of the model's target logits (``log P`` for a
    Markov pair) under ``settings`` (default :data:`SETTINGS_DEFAULT`) in ``order``, the first
    ``prompt_len`` tokens of each context being the prompt.  Rows cached per context."""
    laws = SettingsLaws(model, {"p": ("p", SETTINGS_DEFAULT if settings is None else settings, 0)}, order,
                        prompt_len)

    def target(contexts):
        return laws.law(np.asarray(contexts), "p")

    return target


class SettingsChainDecoder(ChainDecoder):
    """Exact: token-level chain verification (Leviathan et al. 2023) of the PROCESSED laws.

    Drafts from ``q = processed_law(draft logits)`` and verifies with ``p = processed_law(target logits)``
    at every position, the bonus included: the law of :func:`settings_target` with the same ``settings``,
    ``order`` and prompt length.  ``prompt_len=None`` takes it from each ``sample`` call's prompts (B, L).
    The biased subclasses below change which named law (:meth:`variants`) a slot reads: ``DRAFT`` (the
    drafting law, handed to the verifier as q), ``VERIFIED`` (target rows of the drafted positions, whose
    residuals follow) and ``BONUS`` (the target row after a full path).  Contract as :class:`ChainDecoder`;
    raises ``TypeError`` for settings that are not a ``SamplingSettings``.
    """

    DRAFT, VERIFIED, BONUS = "q", "p", "p"

    def __init__(self, model, settings=None, *, gamma: int = 2, order: str = "transformers",
                 prompt_len: int | None = None):
        from .settings import SamplingSettings

        settings = SETTINGS_DEFAULT if settings is None else settings
        if not isinstance(settings, SamplingSettings):
            raise TypeError(f"settings must be an exactness.settings.SamplingSettings, got {type(settings).__name__}")
        self.settings, self.order, self._prompt_len = settings, order, prompt_len
        self.stack = SettingsLaws(model, self.variants(settings), order, prompt_len)
        super().__init__(token_chain_kernel, self.stack, gamma=gamma)
        self.base_model = model
        self.name = f"{type(self).__name__}[{settings.label()}, gamma={self.gamma}]"

    def variants(self, s) -> dict:
        """name -> ``(side, settings, shift)`` of the laws this decoder reads (see :class:`SettingsLaws`)."""
        return {"p": ("p", s, 0), "q": ("q", s, 0)}

    def pick(self, stack: np.ndarray, name: str) -> np.ndarray:
        """The law ``name`` out of a stack (..., K, V) -> (..., V)."""
        return stack[..., self.stack.names.index(name), :]

    def _run(self, prompts, new_tokens, rng, events):
        arr = np.asarray(prompts)
        if self._prompt_len is None and arr.ndim == 2:
            self.stack.prompt_len = arr.shape[1]
        return super()._run(prompts, new_tokens, rng, events)

    def draft(self, q, u):
        return super().draft(self.pick(q, self.DRAFT), u)

    def verify_inputs(self, p, q, d):
        g = d.shape[1]
        tp = np.concatenate([self.pick(p[:, :g], self.VERIFIED), self.pick(p[:, g:], self.BONUS)], axis=1)
        return tp, self.pick(q, self.DRAFT), d

    def draft_law(self, contexts) -> np.ndarray:
        return self.stack.law([row for row in np.asarray(contexts)], self.DRAFT)


class SettingsBonusOnly(SettingsChainDecoder):
    """Settings reach the bonus token only: draft and verified rows are ``softmax(logits / T)`` (biased)."""

    DRAFT, VERIFIED = "q_raw", "p_raw"

    def variants(self, s):
        raw = type(s)(temperature=s.temperature)
        return {**super().variants(s), "p_raw": ("p", raw, 0), "q_raw": ("q", raw, 0)}


class SettingsDroppedByVerifier(SettingsChainDecoder):
    """The drafted positions' target rows lack ``logit_bias``; draft and bonus keep it (biased)."""

    VERIFIED = "p_no_bias"

    def variants(self, s):
        return {**super().variants(s), "p_no_bias": ("p", replace(s, logit_bias=()), 0)}


class PenaltyHistoryOffByOne(SettingsChainDecoder):
    """Every target row's penalty history misses its last token (``history[:-1]``; biased)."""

    VERIFIED = BONUS = "p_short_history"

    def variants(self, s):
        return {**super().variants(s), "p_short_history": ("p", s, 1)}


class VerifierTemperatureHardcoded(SettingsChainDecoder):
    """The verified positions' target rows are computed at temperature 1; draft and bonus at ``T`` (biased)."""

    VERIFIED = "p_T1"

    def variants(self, s):
        return {**super().variants(s), "p_T1": ("p", replace(s, temperature=1.0), 0)}


class FirstDraftUnverified(SettingsChainDecoder):
    """The first drafted token of every round is committed untested: its target row is its draft row (biased)."""

    def verify_inputs(self, p, q, d):
        tp, dp, d = super().verify_inputs(p, q, d)
        tp = tp.copy()
        tp[:, 0] = dp[:, 0]                       # BUG: min(1, p / q) = 1 at the first position
        return tp, dp, d


class DraftMisalignedAfterReorder(SettingsChainDecoder):
    """Batches of 2+ rows: the verifier gets q in the rows' order sorted by prompt, the tokens unsorted (biased)."""

    def verify_inputs(self, p, q, d):
        tp, dp, d = super().verify_inputs(p, q, d)
        ctxs, pl = self.stack.last_contexts, int(self.stack.prompt_len)
        if len(ctxs) != d.shape[0]:
            raise RuntimeError("law stack out of step with the round (last_contexts has the wrong rows)")
        order = sorted(range(d.shape[0]), key=lambda b: ctxs[b][:pl])   # stable: equal prompts keep their order
        return tp, dp[order], d                   # BUG: q comes back sorted, the tokens do not


def _settings_factory(cls):
    def make(model, gamma: int = 2, settings=None, **kw):
        return cls(model, settings, gamma=gamma, **kw)

    make.__doc__ = f"``(model, gamma=2, settings=None, order=, prompt_len=) -> {cls.__name__}``"
    return make


#: The 2026 classes: name -> factory ``(model, gamma=2, settings=None, **kw) -> decoder``; certify each
#: against ``settings_target(model, settings, prompt_len)``.
MUTANTS_2026 = {
    "settings_bonus_only": _settings_factory(SettingsBonusOnly),
    "settings_dropped_by_verifier": _settings_factory(SettingsDroppedByVerifier),
    "penalty_history_off_by_one": _settings_factory(PenaltyHistoryOffByOne),
    "verifier_temperature_hardcoded": _settings_factory(VerifierTemperatureHardcoded),
    "first_draft_unverified": _settings_factory(FirstDraftUnverified),
    "draft_misaligned_after_reorder": _settings_factory(DraftMisalignedAfterReorder),
}

#: Exact decoders certified against ``settings_target`` (the processed law), apart from ``CORRECT`` (``chain_target``).
CORRECT_2026 = {"settings_chain": _settings_factory(SettingsChainDecoder)}


def demo(V: int = 8, gamma: int = 2, seed: int = 0, name: str = "token_chain", prompts: int = 3):
    """Factory for ``resispec certify decoder --decoder exactness.decoder_mutants:demo``:
    ``(decoder, target, prompts)`` over a random Markov pair (``simulators.autoregressive.MarkovPair``)."""
    from simulators.autoregressive import MarkovPair

    model = MarkovPair.random(np.random.default_rng(seed), V)
    make = {**CORRECT, **CORRECT_2026, **MUTANTS, **MUTANTS_2026}[name]
    pr = (np.arange(prompts, dtype=np.int64) % V)[:, None]
    if name in MUTANTS_2026 or name == "settings_chain":   # at SETTINGS_DEFAULT, against its processed law
        return make(model, gamma), settings_target(model, SETTINGS_DEFAULT, pr.shape[1]), pr
    return make(model, gamma), chain_target(model), pr
