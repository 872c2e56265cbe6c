"""Certify a whole speculative decoder end to end: ``certify_decoder`` (its plan in :mod:`exactness.decoder_cert`,
its checks in :mod:`exactness.decoder_checks`; the drawing, the exact joint law, the PIT statistics and the
reports here).

The contract::

    certify_decoder(decoder, target, prompts, *, new_tokens=2, n=None, tv=None, alpha=1e-3, seed=0)
        decoder(prompt: ndarray (L,) int64, new_tokens: int, rng: numpy.random.Generator)
            -> ndarray (new_tokens,) int64                 # one sampled continuation
            (or an object with decoder.sample(prompts (B, L), new_tokens, rng) -> (B, new_tokens))
            optional: decoder.draft_law(contexts (B, L)) -> (B, V)   # the q it hands its verifier
            optional: decoder.sample_events(prompts, new_tokens, rng) -> (tokens, DecoderEvents), decoder.rule
            optional: decoder.per_row_rng = True                     # rng may be a list of B Generators
        target(contexts: ndarray (B, L) int64) -> ndarray (B, V) float64
            # the target's next-token law after its sampling processors
        prompts: ndarray (P, L) int64                      # certified per prompt and pooled

Checks (each a p-value; the verdict is Holm over all of them, ``statsmodels``):

``joint`` / ``joint[i]``
    The exact law of the first ``m`` new tokens, enumerated over ``V^m`` sequences
    (``m`` the largest ``<= min(new_tokens, JOINT_TOKENS)`` with ``V^m <= JOINT_MAX``), against the sampled
    sequence counts: Pearson chi-square and G-test after the pooling rule of
    :mod:`exactness.gof`, per prompt (``joint[i]``) and pooled over prompts (``joint``:
    the per-prompt statistics and degrees of freedom summed).
``pit[j, order]``
    At any V and length: for each emitted token ``y_j`` the target's conditional law
    ``p_j = target(prompt + y_<j)`` at the SAMPLED prefix, and the randomised
    probability-integral transform ``u = F(y_j-) + U p_j(y_j)`` (``F`` the CDF of ``p_j`` in a
    token order, ``U ~ U(0, 1)``; Brockwell 2007, Czado et al. 2009).  Under exactness ``u`` is
    exactly uniform for every order, whatever the context; binned into ``PIT_BINS`` equal bins
    and tested with chi-square (df = bins - 1), pooled over prompts and contexts.  Orders:
    ``id`` (token id: mass pushed toward token 0 or high ids), ``argmax`` (target probability
    descending: mass pushed toward or away from the argmax), ``ratio`` (draft-to-target ratio
    ``q / p`` descending, when the decoder reports ``draft_law``: mass pushed toward
    draft-favoured tokens).  A wrong position's law shows in all three.
``impossible``
    A sampled token of target probability 0 (p-value 0).
``single``
    When the decoder has ``sample``: continuations drawn one prompt per call
    (``sample(prompt[None], ...)``) tested like ``joint`` (or ``pit[1, id]`` when the joint does
    not enumerate): batch of B and B batches of 1 must both follow the target.  The main sample
    is drawn (after one batch of each prompt alone, ``homogeneous``) in heterogeneous batches
    (prompts interleaved in random order) of the sizes ``MAIN_SIZES`` (4,096 down to 9 rows), so a
    decoder that mixes rows, or is wrong for some batch sizes, is tested against each row's own law.
``small_batches``
    When the decoder has ``sample``: a sample drawn in batches of 2 to 8 rows, each row position
    (and the last row of its batch) tested on its own at every token, Bonferroni over the groups
    (:mod:`exactness.decoder_batches`): a decoder wrong at one row position of a batch.
``tile_rows``
    When the decoder has ``sample``: the main sample's rows by their place in their batch (the first
    and the last row of every tile of 8 to 2,048 rows, the single rows 2^j and 2^j - 1, the last row of
    each batch size), each group tested on its own (:func:`exactness.decoder_batches.tile_rows_check`): a
    decoder wrong at tile boundaries of large batches (a tiling bug).
``homogeneous``
    With several prompts: the main sample's first batches (one prompt each) tested on their own: a
    decoder wrong only when the rows of a batch share a prompt.
``seeded``
    Two runs with the same seed give the same continuations.  A decoder that ignores its seed is
    skipped with the reason (``seeded=None``) or is a ``ValueError`` (``seeded=True``).
``accepted_count``, ``after_rejection``, ``bonus``
    When the decoder reports its decisions (``decoder.sample_events`` and ``decoder.rule``, a
    registry verifier name): the number accepted per target call, the token after a rejection and
    the bonus token after a full path, each against its exact conditional law from the rule's
    ``chain`` at the harness's own ``p`` and ``q`` (:mod:`exactness.decoder_events`).  The main
    sample is then drawn through ``sample_events``.  Skipped with the reason when the decoder
    reports no events or its rule is not per node (block verification).
``batch_rows``
    When the decoder declares ``per_row_rng = True`` (``sample`` takes a list of B Generators):
    a heterogeneous batch equals each row decoded alone under the same per-row seed; the first
    differing row is reported.

What a PIT-bin test detects: a bias in the law of ``u``, i.e. in the token law projected onto
the chosen order.  Mass moved between tokens that lie in different bins of the order is seen at
(nearly) its full TV; mass moved between tokens within one bin's probability span is not seen by
that order (the joint test and the other orders cover it).  The detectable TV stated per
position is that of the PIT-bin law: ``exactness.power.detectable_tv(n_j, df = bins - 1)``.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import stats

from resispec._validation import SUM_TOL

from ._checks import SubjectError, passes_through
from .certificate import Certificate, holm
from .gof import pool_cells, pooled_gof_test, tv_bounds
from .pit import BATCH, PAIR_BINS, PAIR_TOKENS, PIT_BINS, POWER, running, subject
from .pit import draft_laws as _draft_laws
from .pit import pit as _pit
from .pit import pit_check as _pit_check
from .power import detectable_tv, samples_for_tv

#: Largest number of enumerated sequences ``V^m`` for the exact joint test (per prompt).
JOINT_MAX = 1_000_000
#: Most new tokens in the joint test (the default budget is planned for it).
JOINT_TOKENS = 3
#: Rows of conditional laws held at once by the PIT pass (memory O(PIT_CHUNK V)), at most PIT_ELEMS / V rows:
#: 4,096 rows of V = 151,936 would make 4.6 GiB arrays, several at once.
PIT_CHUNK = 4096
PIT_ELEMS = 1 << 22
#: TV the default ``n`` is planned to detect (power 0.99 at ``alpha``) on the joint test.
DEFAULT_TV = 0.02
#: Rows of the main sample's batches, one call after another: a decoder wrong only for some batch sizes (e.g. every
#: size from 9 to 4,095 rows) is tested at several (``small_batches`` covers 2-8, ``single`` 1).
MAIN_SIZES = (BATCH, 1531, 509, 127, 31, 9)
#: Rows of one homogeneous batch per prompt at the start of the main sample (all rows one prompt), also tested on
#: their own (``homogeneous``): a decoder wrong only when a batch of 9+ rows shares a prompt (prefix sharing,
#: parallel sampling) passed with several prompts, whose shuffled batches are never homogeneous (breaker).
HOMOGENEOUS = 509
#: Rows of the probe that ``sample_events`` returns the tokens ``sample`` returns (at most the main sample's).
EVENTS_PROBE_ROWS = 4096
#: Groups of the ``pit[j,id,by_previous]`` check: the most frequent previous tokens each alone, the rest together.
CONTEXT_GROUPS = 16
#: Continuations per prompt drawn one per call for the ``single`` check (at most ``n``).
SINGLE_N = 200
#: Seconds a phase (drawing, the PIT pass, ...) runs before its progress shows on stderr (``progress=True``).
PROGRESS_AFTER = 2.0


# --------------------------------------------------------------------------- input checks
def _check_prompts(prompts) -> np.ndarray:
    if isinstance(prompts, (str, bytes)) or prompts is None:
        raise TypeError(f"prompts must be a (P, L) int64 array of token ids, got {type(prompts).__name__}")
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(r, (list, tuple, np.ndarray)) for r in prompts):
        lens = sorted({len(r) for r in prompts})
        if len(lens) > 1:
            raise ValueError(f"prompts have unequal lengths {lens}; certify_decoder needs a (P, L) array: pad them "
                             "to one length or certify each length separately")
    try:
        arr = np.asarray(prompts)
    except ValueError as exc:
        raise ValueError(f"prompts must be a (P, L) array of equal-length token-id rows ({exc})") from None
    if arr.dtype == object:
        raise ValueError("prompts have unequal lengths or mixed types; pass a (P, L) int64 array "
                         "(pad prompts to one length or certify each length separately)")
    if arr.ndim == 1:
        raise ValueError(f"prompts must have shape (P, L); got shape {arr.shape}: wrap one prompt as prompts[None, :]")
    if arr.ndim != 2 or arr.shape[0] < 1:
        raise ValueError(f"prompts must have shape (P, L) with P >= 1, got shape {arr.shape}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"prompts must hold integer token ids (int64), got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        raise ValueError(f"prompts hold negative token id {int(arr.min())}; token ids lie in [0, V)")
    return arr.astype(np.int64)


def _check_target_out(out, B: int, V: int | None) -> np.ndarray:
    arr = np.asarray(out)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"target(contexts) returned dtype {arr.dtype}; it must return (B, V) float64 probabilities")
    if arr.ndim != 2 or arr.shape[0] != B:
        raise ValueError(f"target(contexts) returned shape {arr.shape} for {B} contexts; it must return (B, V), "
                         "one next-token law per context row")
    if V is not None and arr.shape[1] != V:
        raise ValueError(f"target(contexts) returned V = {arr.shape[1]} but V = {V} before; the vocabulary "
                         "size must be the same at every context")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("target(contexts) returned NaN, inf or negative probabilities; return a law per row "
                         "(softmax of the processed logits)")
    s = arr.sum(axis=1)
    bad = np.flatnonzero(np.abs(s - 1.0) > SUM_TOL)
    if bad.size:
        raise ValueError(f"target(contexts) row {int(bad[0])} sums to {s[bad[0]]!r}, not 1 (tolerance {SUM_TOL}); "
                         "return normalised probabilities (softmax after temperature / top-k / top-p)")
    return arr


def _not_token_ids(what: str, out, exc: BaseException) -> SubjectError:
    """The FAIL of a decoder output whose conversion to an array raised ``exc`` (ragged lists, an ``__array__``)."""
    return SubjectError(f"{what} returned {type(out).__name__} that is not an array of token ids "
                        f"({type(exc).__name__}: {exc})")


def _check_tokens(out, B: int, m: int, V: int, what: str) -> np.ndarray:
    """The decoder's output as a (B, m) int64 copy; :class:`SubjectError` (a FAIL naming ``what``) for another
    dtype or shape or ids outside [0, V): the decoder misbehaved, the caller's input was fine."""
    try:
        t = np.asarray(out)
    except BaseException as exc:                   # ragged lists and the like; an __array__ that raises
        if passes_through(exc):
            raise
        raise _not_token_ids(what, out, exc) from None
    if t.dtype == bool or not np.issubdtype(t.dtype, np.integer):
        raise SubjectError(f"{what} returned dtype {t.dtype}; it must return integer token ids (int64)")
    if t.shape != (B, m):
        raise SubjectError(f"{what} returned shape {t.shape}; expected ({B}, {m}): exactly new_tokens = {m} ids "
                           "per prompt row")
    if t.size and (t.min() < 0 or t.max() >= V):
        raise SubjectError(f"{what} returned ids in [{t.min()}, {t.max()}], outside the target's vocabulary "
                           f"[0, {V})")
    return np.array(t, dtype=np.int64)  # always a copy: a decoder may hand back (and reuse) one buffer


class _Target:
    """Validated, chunked calls to the user's target; remembers V."""

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"target must be a callable contexts (B, L) int64 -> (B, V) float64, got "
                            f"{type(fn).__name__}")
        self.fn, self.V = fn, None

    def __call__(self, contexts: np.ndarray) -> np.ndarray:
        out = []
        rows = BATCH if self.V is None else max(1, min(BATCH, PIT_ELEMS // self.V))   # (rows, V) a call
        for s in range(0, contexts.shape[0], rows):
            c = np.array(contexts[s:s + rows], dtype=np.int64)      # the target's own copy, C-contiguous
            try:
                with running("target(contexts)"):
                    raw = self.fn(c)
            except BaseException as exc:         # any but Ctrl-C and the time limit: a target that fails
                if passes_through(exc):
                    raise
                hint = ("; do the prompts hold ids outside the target's vocabulary?"
                        if isinstance(exc, (IndexError, KeyError)) else "")
                raise ValueError(f"target(contexts) raised {type(exc).__name__}: {exc} (the harness called it on "
                                 f"int64 contexts of shape {c.shape}: prompt + tokens drawn so far{hint}); a failing "
                                 "target is an error, never a pass") from exc
            r = _check_target_out(raw, c.shape[0], self.V)
            self.V = r.shape[1]
            out.append(r)
        return np.concatenate(out) if out else np.zeros((0, self.V or 0))


# --------------------------------------------------------------------------- drawing
def _sampler(decoder):
    """``draw(prompts (B, L), m, rng) -> (B, m)`` and whether the decoder is batched."""
    if hasattr(decoder, "sample") and callable(decoder.sample):
        return (lambda pr, m, rng: subject(decoder.sample, "decoder.sample(prompts, new_tokens, rng)", pr, m,
                                           rng)), True
    if callable(decoder):
        return (lambda pr, m, rng: _loop(decoder, pr, m, rng)), False
    raise TypeError(f"decoder must be a callable decoder(prompt (L,), new_tokens, rng) -> (new_tokens,) or an "
                    f"object with sample(prompts (B, L), new_tokens, rng), got {type(decoder).__name__}")


def _loop(decoder, pr, m, rng):
    rows, what = [], "decoder(prompt, new_tokens, rng)"
    for row in pr:
        out = subject(decoder, what, row.copy(), m, rng)
        try:
            r = np.array(out)                        # a copy: a decoder may reuse one output buffer
        except BaseException as exc:
            if passes_through(exc):
                raise
            raise _not_token_ids(what, out, exc) from None
        if r.shape != (m,):
            raise SubjectError(f"{what} returned shape {r.shape}; expected ({m},): exactly new_tokens = {m} ids, one "
                               "continuation")
        rows.append(r)
    return np.stack(rows)


def _call(draw, batched, pr, m, rng, V):
    """One draw, its output checked: (B, m) int64.  The decoder gets its own copy of the prompt rows, so one that
    writes into its ``prompts`` buffer (``prompts[:] = 1`` after sampling) cannot change the harness's prompts:
    the verdict is on what it emits."""
    what = "decoder.sample(prompts, new_tokens, rng)" if batched else "decoder(prompt, new_tokens, rng)"
    return _check_tokens(draw(np.array(pr, dtype=np.int64), m, rng), pr.shape[0], m, V, what)


def _draw_mixed(draw, batched, prompts, n, m, rng, V, events=None, tick=None):
    """n continuations per prompt, drawn in heterogeneous batches.

    Returns ``(seqs (P, n, m) int64, flat, places (P, n, 2) int64)``; with ``events``
    (``decoder.sample_events``) the tokens come from it and ``flat = (prompt index (P n,), tokens (P n, m),
    DecoderEvents)`` in drawing order (events validated per batch, rows and calls renumbered), else
    ``flat = None``.  ``places[i, r] = (row of the batch, rows of the batch)`` of continuation ``r`` of prompt
    ``i`` (the ``tile_rows`` check tests rows by their place in a batch).
    """
    from .decoder_events import DecoderEvents, check_events

    P = prompts.shape[0]
    h = min(n, HOMOGENEOUS) if batched and P > 1 else 0   # first, one batch of h rows of each prompt alone
    rest = np.repeat(np.arange(P), n - h)
    rng.shuffle(rest)
    rows = np.concatenate([np.repeat(np.arange(P), h), rest])
    out = np.empty((P * n, m), dtype=np.int64)
    place = np.empty((P * n, 2), dtype=np.int64)         # (row of its batch, rows of its batch), drawing order
    sizes = MAIN_SIZES if batched else (max(1, P * n),)
    parts, calls = [], 0
    cycle = np.array(sizes)                              # then batch c has sizes[c % len(sizes)] rows
    ends = P * h + np.cumsum(np.tile(cycle, rest.size // int(cycle.sum()) + 1))
    bounds = [h * i for i in range(P + 1 if h else 1)] + [int(e) for e in ends[ends < rows.size]] + [rows.size]
    bounds = sorted(set(bounds))
    if tick is not None:
        tick.phase("drawing the main sample", len(bounds) - 1, "batch")
    for s, e in zip(bounds[:-1], bounds[1:]):
        if tick is not None:
            tick.step(f"{s:,}/{rows.size:,} continuations")
        step = e - s
        idx = rows[s:s + step]
        place[s:e, 0], place[s:e, 1] = np.arange(step), step
        if events is None:
            out[s:s + step] = _call(draw, batched, prompts[idx], m, rng, V)
            continue
        res = subject(events, "decoder.sample_events(prompts, new_tokens, rng)", prompts[idx], m, rng)  # a copy
        if not isinstance(res, tuple) or len(res) != 2:
            raise SubjectError("decoder.sample_events(prompts, new_tokens, rng) must return (tokens (B, m) int64, "
                               f"events), got {type(res).__name__}")
        tok = _check_tokens(res[0], idx.size, m, V, "decoder.sample_events(prompts, new_tokens, rng)")
        ev = check_events(res[1], tok, V)
        _, cid = np.unique(ev.call, return_inverse=True)
        parts.append(DecoderEvents(ev.row + s, ev.position, ev.candidates, ev.accepted, ev.token,
                                   cid.reshape(-1).astype(np.int64) + calls))
        calls += int(cid.max()) + 1 if cid.size else 0
        out[s:s + step] = tok
    res = np.empty((P, n, m), dtype=np.int64)
    places = np.empty((P, n, 2), dtype=np.int64)
    for i in range(P):
        res[i], places[i] = out[rows == i], place[rows == i]
    return res, (None if events is None else (rows, out, DecoderEvents.concat(parts))), places


# --------------------------------------------------------------------------- exact joint law
def joint_law(target, prompt: np.ndarray, m: int) -> np.ndarray:
    """Exact law of the first ``m`` new tokens after ``prompt``, by enumeration: (V^m,) float64.

    Sequence ``(y_1..y_m)`` has index ``sum y_j V^(m-j)`` (``numpy.ravel_multi_index`` order).
    Costs ``sum_{j<m} V^j`` target rows.
    """
    tgt = target if isinstance(target, _Target) else _Target(target)
    prompt = np.asarray(prompt, dtype=np.int64)
    ctx = prompt[None, :]
    law = np.ones(1)
    for _ in range(m):
        p = tgt(ctx)                                       # (V^j, V)
        V = p.shape[1]
        law = (law[:, None] * p).reshape(-1)
        ctx = np.concatenate([np.repeat(ctx, V, axis=0), np.tile(np.arange(V), ctx.shape[0])[:, None]], axis=1)
    return law


def markov_joint_law(pair, prompt, m: int) -> np.ndarray:
    """Exact law of the next ``m`` tokens of a first-order Markov target (``pair.P``, ``pair.p0``), (V^m,).

    Closed form ``p(y_1 | last) prod_j P[y_{j-1}, y_j]`` (``simulators.autoregressive.MarkovPair``);
    an independent cross-check of :func:`joint_law`.
    """
    prompt = np.asarray(prompt, dtype=np.int64).reshape(-1)
    law = pair.P[prompt[-1]] if prompt.size else pair.p0
    for _ in range(m - 1):
        law = (law[:, None] * pair.P[np.arange(law.size) % pair.P.shape[0]]).reshape(-1)
    return law


def joint_tokens(V: int, new_tokens: int) -> int:
    """Tokens the exact joint check enumerates: the largest ``m <= min(new_tokens, JOINT_TOKENS)`` with
    ``V^m <= JOINT_MAX`` (0: none, the PIT checks only).  V = 100: 3; V = 101 or 128: 2; V = 1,001: 1."""
    mj = 0
    while mj < min(int(new_tokens), JOINT_TOKENS) and V ** (mj + 1) <= JOINT_MAX:
        mj += 1
    return mj


def _joint_check(seqs, laws, V, m, alpha, label):
    """Joint test on (P, n, m') sequences: checks, details."""
    P, n, _ = seqs.shape
    idx = np.ravel_multi_index(tuple(seqs[:, :, j] for j in range(m)), (V,) * m) if m else np.zeros((P, n), int)
    counts = [np.bincount(idx[i], minlength=V ** m) for i in range(P)]
    per, pooled = pooled_gof_test(counts, laws)
    checks, det = {}, {}
    tvs = [tv_bounds(c, law, alpha) for c, law in zip(counts, laws)]
    for i, r in enumerate(per):
        d = dict(statistic=r.statistic, df=r.df, pvalue=r.pvalue, g_statistic=r.g_statistic, g_pvalue=r.g_pvalue,
                 tv=tvs[i][0], tv_upper=tvs[i][1], n=n, tokens=m,
                 detectable_tv=detectable_tv(n, max(1, r.df), alpha=alpha, power=POWER))
        if P > 1:
            checks[f"{label}[{i}]"] = r.pvalue
            det[f"{label}[{i}]"] = d
        else:
            pooled.update(tv=d["tv"], tv_upper=d["tv_upper"])
    pooled.update(n=n * P, tokens=m, cells_df=pooled["df"],
                  detectable_tv=detectable_tv(n, max(1, max(r.df for r in per)), alpha=alpha, power=POWER))
    if P > 1:
        pooled.update(tv=float(np.mean([t[0] for t in tvs])), tv_upper=max(t[1] for t in tvs))
    checks[label] = pooled["pvalue"]
    det[label] = pooled
    return checks, det


# --------------------------------------------------------------------------- PIT
def _pit_values(tgt, decoder, prompts, seqs, lookup, rng, orders, V, tick=None):
    """Randomised PIT of every emitted token under each order, streamed in chunks of ``PIT_CHUNK`` rows.

    Returns ``({(j, order): (P n,) float64}, impossible)``; memory O(P n m + PIT_CHUNK V).  ``impossible``
    is None, or for the emitted tokens of target probability 0: ``count`` (tokens), ``continuations`` (holding
    one), and the first one's ``prompt`` index, ``prefix`` (tokens before it), ``position`` (1-based) and
    ``token``.  The conditional law at position j < len(lookup) comes from the enumerated joint law,
    beyond it from ``target`` at the sampled prefix.
    """
    P, n, m = seqs.shape
    y = seqs.reshape(P * n, m)
    who = np.repeat(np.arange(P), n)
    out, imp, bad = {}, None, np.zeros(P * n, dtype=bool)
    rows = max(1, min(PIT_CHUNK, PIT_ELEMS // V))             # (rows, V) float64 arrays, several at once
    if tick is not None:
        tick.phase("PIT pass (target at every sampled prefix)", m * (-(-P * n // rows)), "chunk")
    for j in range(m):
        u = rng.random(P * n)
        vals = {o: np.empty(P * n) for o in orders}
        exact = lookup is not None and j in lookup
        for s in range(0, P * n, rows):
            if tick is not None:
                tick.step(f"token {j + 1} of {m}")
            sl = slice(s, s + rows)
            ctx = np.concatenate([prompts[who[sl]], y[sl, :j]], axis=1)
            p = lookup[j](who[sl], y[sl, :j]) if exact else tgt(ctx)
            yj = y[sl, j]
            zero = p[np.arange(p.shape[0]), yj] <= 0
            if zero.any():
                bad[sl] |= zero
                if imp is None:
                    r = s + int(np.flatnonzero(zero)[0])
                    imp = {"count": 0, "prompt": int(who[r]), "prefix": y[r, :j].tolist(), "position": j + 1,
                           "token": int(y[r, j])}
                imp["count"] += int(np.count_nonzero(zero))
            keys = {"id": None, "argmax": -p}
            if "ratio" in orders:
                q = _draft_laws(decoder, ctx, V)
                with np.errstate(divide="ignore", invalid="ignore"):
                    keys["ratio"] = -np.where(p > 0, q / np.where(p > 0, p, 1.0), -np.inf)
            for o in orders:
                vals[o][sl] = _pit(p, yj, keys[o], u[sl])
        for o in orders:
            out[(j, o)] = vals[o]
    if imp is not None:
        imp["continuations"] = int(np.count_nonzero(bad))
    return out, imp


def _pit_checks(pits, m, orders, alpha, P: int = 1, covered: int = 0, seqs=None):
    """One PIT check per position and order, pooled over prompts and contexts; past the joint check's
    ``covered`` first tokens also the id-order PIT split by context, each part binned and tested on its own,
    chi-squares and df summed (as the joint check does per prompt), so that a bias whose direction depends
    on the context and cancels in the pooled PIT still shows:

    ``pit[j,id,by_prompt]`` (several prompts) splits by prompt; ``pit[j,id,by_previous]`` (j >= 2, with
    ``seqs`` (P, n, m)) by the previous emitted token and ``pit[j,id,by_previous2]`` (j >= 3) by the last two
    (the ``CONTEXT_GROUPS - 1`` most frequent contexts each on its own, the rest together).
    """
    checks, det = {}, {}
    base = int(seqs.max()) + 1 if seqs is not None else 0       # context ids of the last tokens, base V
    for j in range(m):
        for o in orders:
            d = _pit_check(pits[(j, o)], alpha)
            label = f"pit[{j + 1},{o}]"
            checks[label] = d["pvalue"]
            det[label] = d
        if j < covered:
            continue
        u = pits[(j, "id")]
        splits = []
        if P > 1:
            splits.append(("by_prompt", np.split(u, P), P))                      # prompt-major rows
        for back, name in ((1, "by_previous"), (2, "by_previous2")):
            if seqs is None or j < back:
                continue
            ctx = np.zeros(u.size, dtype=np.int64)
            for b in range(back, 0, -1):                 # the last `back` tokens as one context id
                ctx = ctx * base + seqs[:, :, j - b].reshape(-1)
            tok, cnt = np.unique(ctx, return_counts=True)
            top = np.sort(tok[np.argsort(-cnt, kind="stable")[:CONTEXT_GROUPS - 1]])
            group = np.where(np.isin(ctx, top), np.searchsorted(top, ctx), len(top))
            parts = [u[group == g] for g in range(len(top) + 1)]
            splits.append((name, [x for x in parts if x.size], len(tok)))
        for name, parts, groups in splits:
            parts = [_pit_check(x, alpha) for x in parts]
            stat, df = sum(d["statistic"] for d in parts), sum(d["df"] for d in parts)
            if df > 0:
                label = f"pit[{j + 1},id,{name}]"
                checks[label] = float(stats.chi2.sf(stat, df))
                det[label] = {"statistic": stat, "df": df, "pvalue": checks[label], "groups": len(parts),
                              "contexts": groups, "tv": max(d["tv"] for d in parts), "n": int(u.size)}
    return checks, det


# --------------------------------------------------------------------------- planning
#: Most tokens (continuations x prompts x new tokens) certify_decoder draws and keeps: 1 GiB of int64.
MAX_DECODER_TOKENS = 1 << 27


def _default_n(laws, tv: float, alpha: float) -> int:
    """Continuations per prompt at which every prompt's joint test detects ``tv`` (power ``POWER``).

    Starts from ``samples_for_tv(tv, V^m - 1)`` and lowers ``n`` while the df after pooling
    (:func:`exactness.gof.pool_cells` on ``n * law``) still gives ``detectable_tv <= tv``;
    with no joint law (``laws`` empty), the PIT test's ``samples_for_tv(tv, PIT_BINS - 1)``.
    """
    if not laws:
        return samples_for_tv(tv, PIT_BINS - 1, alpha=alpha, power=POWER)

    seen = {}

    def df(n):  # largest df over the prompts after pooling at n (cached: pooling 1e6 cells costs seconds)
        if n not in seen:
            seen[n] = max(1, max(int(pool_cells(n * law).max()) for law in laws))
        return seen[n]

    n = samples_for_tv(tv, laws[0].size - 1, alpha=alpha, power=POWER)
    if n > MAX_DECODER_TOKENS:                   # past anything drawn (a tv near 0): refused before any pooling
        from ._checks import BudgetError

        raise BudgetError(f"tv = {tv:g} needs about 10^{len(str(n)) - 1} continuations per prompt, over "
                          f"exactness.decoder.MAX_DECODER_TOKENS = {MAX_DECODER_TOKENS:,}; ask a larger tv")
    for _ in range(8):
        m = samples_for_tv(tv, df(n), alpha=alpha, power=POWER)
        if m >= n or detectable_tv(m, df(m), alpha=alpha, power=POWER) > tv:
            break
        n = m
    return int(n)


def _seeded_probe(draw, batched, prompts, m, seed, V):
    """True if two runs with the same seed give the same continuations."""
    reps = max(8, 2 * prompts.shape[0])
    pr = prompts[np.arange(reps) % prompts.shape[0]]
    a = _call(draw, batched, pr, m, np.random.default_rng([seed, 7]), V)
    b = _call(draw, batched, pr, m, np.random.default_rng([seed, 7]), V)
    return bool(np.array_equal(a, b))


# --------------------------------------------------------------------------- the certifier
class _Ticker:
    """Progress of the current phase on stderr (``exactness._progress.Progress``), shown only once the phase
    has run ``PROGRESS_AFTER`` seconds: a tqdm bar on a terminal, else a line every ~10 s."""

    def __init__(self, mode: str):
        self.mode, self.bar = mode, None
        self.desc, self.total, self.unit, self.done, self.t0 = "", 1, "step", 0, time.perf_counter()

    def phase(self, desc: str, total: int, unit: str) -> None:
        self.close()
        self.desc, self.total, self.unit, self.done, self.t0 = desc, max(1, int(total)), unit, 0, time.perf_counter()

    def step(self, label: str = "") -> None:
        """Called as a step STARTS (so a step that hangs still shows where it is)."""
        if self.mode == "off":
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < PROGRESS_AFTER:
                self.done += 1
                return
            from ._progress import Progress

            self.bar = Progress(self.total, f"certify-decoder: {self.desc}", self.unit, mode=self.mode)
            self.bar.done = self.done
            if self.bar._bar is not None:
                self.bar._bar.update(self.done)
            self.done = 0
        self.bar.step(label)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _scope(details: dict, m: int, mj: int, det: float, orders) -> dict:
    """Which law each stated detectable TV (power ``POWER``) is of: ``{"note": one line, "lines": [...]}``.

    Only the exact joint law of the first ``mj`` tokens is certified whole; later tokens are certified
    through projections (binned PITs), and a bias invisible in every projection is not covered.
    """
    pos = details.get("positions", [])
    lines = []
    if mj:
        lines.append(f"joint: {det:.3g}, of the joint law of tokens 1-{mj} (every one of the V^{mj} sequences; "
                     "small cells pooled)" if mj > 1 else f"joint: {det:.3g}, of the law of token 1 (every token)")
    if pos:
        lines.append(f"pit[j,order]: {max(d['detectable_tv'] for d in pos):.3g} (largest over tokens), of each "
                     f"token's law projected on {PIT_BINS} PIT bins in the orders {', '.join(orders)}, pooled over "
                     "contexts; pit[j,id,by_*] the same law within each prompt and after each previous token "
                     "(or two)")
    for o in orders[:2]:
        d = details.get(f"pit_pairs[{o}]")
        if d:
            which = (f"all among tokens 1-{m}" if m <= PAIR_TOKENS
                     else f"all among tokens 1-{PAIR_TOKENS}, lags 1-2 beyond")
            lines.append(f"pit_pairs[{o}]: {d['detectable_tv']:.3g}, of the joint law of two tokens' {PAIR_BINS}-bin "
                         f"PITs, for each of {d['pairs']} pairs ({which}; Bonferroni): a token whose law depends on "
                         "an earlier token")
        d = details.get(f"pit_tuple[{o}]")
        if d:
            lines.append(f"pit_tuple[{o}]: {d['detectable_tv']:.3g}, of the joint law of the PITs of tokens "
                         f"1-{d['tokens']}, each binned in halves")
    lines.append("not covered: mass moved within one PIT bin, or a dependence on earlier tokens that none of "
                 "these projections shows")
    pairs = [details[k]["detectable_tv"] for k in ("pit_pairs[id]", "pit_pairs[argmax]") if k in details]
    pair_txt = f", token pairs {max(pairs):.3g}" if pairs else ""
    if mj == m:
        note = f"detectable TV {det:.3g} is of the joint law of all {m} new tokens"
    elif mj:
        later = f"token {m}" if mj + 1 == m else f"tokens {mj + 1}-{m}"
        first = "token 1" if mj == 1 else f"tokens 1-{mj}"
        note = (f"detectable TV {det:.3g} is of the joint law of {first} only; {later} tested through binned PIT "
                f"laws (per token{pair_txt}): see the report's scope")
    else:
        note = (f"detectable TV {det:.3g} is of token 1's {PIT_BINS}-bin PIT law; all tokens are tested through "
                f"binned PIT laws only{pair_txt and ' (' + pair_txt[2:] + ')'}: see the report's scope")
    return {"note": note, "lines": lines}


def _plan_mode(decoder, rng, V):
    """``(collector or None, skip reason or None)`` of the ``plan_sampler`` check: a decoder built on a chain
    kernel (``ChainDecoder``: ``plan_collector``, ``kernel_plan``, ``gamma``) whose kernel declares a plan has
    every kernel call of the main draw scored under it (``exactness.plan_check``); other decoders: no reason."""
    from ._checks import subject_cause
    from .plan_check import declared

    try:
        if not hasattr(decoder, "plan_collector") or not hasattr(decoder, "kernel_plan"):
            return None, None
        plan = decoder.kernel_plan
    except BaseException as exc:        # the kernel's plan attribute raised: the subject's failure
        if passes_through(exc):             # Ctrl-C, the harness's time limit
            raise
        raise SubjectError(subject_cause("reading the chain kernel's plan", exc)) from exc
    if plan is None:
        _, why = declared(decoder.kernel, "plan")
        if why:                                   # a plan declared wrong (not callable): the subject's failure
            raise SubjectError(f"the chain kernel's plan: {why}")
        return None, ("the chain kernel declares no plan(target_probs, draft_probs, draft_ids) -> PathPlan: nothing "
                      "to compare its calls with (docs/pathlevel.md, section 11)")
    from .plan_check import PLAN_SAMPLER

    name = getattr(decoder.kernel, "__name__", type(decoder.kernel).__name__)
    return PLAN_SAMPLER.kernel_collector(plan, name, rng, int(decoder.gamma) + 1, V), None


def _events_mode(decoder):
    """``(sample_events or None, reason)``: whether the conditional checks run, and why not (all of them, or with
    ``sample_events`` given, the per-node ones: a decoder whose rule is None or not per node still has its bonus
    draws checked, the bonus law after a full path being the target's for every exact rule).

    Raises ValueError when ``decoder.rule`` names no registry verifier and no known non-per-node rule.
    """
    fn = getattr(decoder, "sample_events", None)
    if not callable(fn):
        return None, getattr(decoder, "no_events_reason", None) or (
            "the decoder reports no events (no sample_events(prompts, new_tokens, rng) -> (tokens, DecoderEvents), "
            "see exactness.decoder_events): accepted_count, after_rejection and bonus are not run; their bias shows "
            "in the joint and PIT checks")
    rule = getattr(decoder, "rule", None)
    if rule is None:
        return fn, ("decoder.rule is None: the decoder names no per-node rule (a resispec registry verifier name, "
                    "e.g. 'rrs' for token-level chain verification), so its accept decisions and residual tokens "
                    "have no law to check (the rule-free bonus check runs)")
    from .decoder_events import NOT_PER_NODE

    if rule in NOT_PER_NODE:
        return fn, f"decoder.rule = {rule!r}: {NOT_PER_NODE[rule]} (the rule-free bonus check runs)"
    import resispec

    names = resispec.available_verifiers()
    if rule not in names:
        raise ValueError(f"decoder.rule = {rule!r} is not a resispec registry verifier ({', '.join(names)}) nor a "
                         f"known non-per-node rule ({', '.join(NOT_PER_NODE)}); name the rule each node decision "
                         "follows (e.g. 'rrs' for token-level chain verification), or set rule = None")
    from .decoder_events import events_q

    if events_q(decoder) == "draft_law" and not (hasattr(decoder, "draft_law") and callable(decoder.draft_law)):
        raise ValueError("the decoder offers sample_events but no draft_law(contexts) -> (B, V): the harness needs "
                         "the q each decision was verified with; add draft_law or drop sample_events")
    return fn, None


def _events_probe(draw, ev_fn, prompts, m, seed, V, rows: int = 8):
    """SubjectError unless ``sample_events`` returns the tokens ``sample`` returns under the same seed: batches of
    the main sample's sizes (``MAIN_SIZES``, each at most ``rows``), prompts cycled.  The main sample is drawn
    through ``sample_events``; a ``sample`` that differed on 9 % of the rows passed an 8-row probe, and one that
    differed only in batches of 9 to 4,095 rows passed a single 4,096-row probe (breaker)."""
    for i, size in enumerate(sorted({min(max(rows, 2 * prompts.shape[0]), s) for s in MAIN_SIZES})):
        pr = prompts[np.arange(size) % prompts.shape[0]]
        a = _call(draw, True, pr, m, np.random.default_rng([seed, 9, i]), V)
        res = subject(ev_fn, "decoder.sample_events(prompts, new_tokens, rng)", pr.copy(), m,
                      np.random.default_rng([seed, 9, i]))
        b = res[0] if isinstance(res, tuple) and len(res) == 2 else None
        if b is None or not np.array_equal(np.asarray(b), a):
            raise SubjectError(f"decoder.sample_events and decoder.sample return different tokens under the same rng "
                               f"(a batch of {size} rows): sample_events must run the same decoder (same random "
                               "draws) and only add the events")


def _joint_lookup(laws, V, mj):
    """Position j < mj: the conditional law at a sampled prefix from the enumerated joint law."""
    tables = []
    for law in laws:
        t = law.reshape((V,) * mj)
        tabs = []
        for j in range(mj):
            marg = t.reshape(V ** j, V, -1).sum(axis=2)  # P(y_<j, y_j)
            tot = marg.sum(axis=1, keepdims=True)
            tabs.append(np.where(tot > 0, marg / np.where(tot > 0, tot, 1.0), 1.0 / V))
        tables.append(tabs)

    def make(j):
        def f(who, prefix):  # prompt index (N,), sampled prefix (N, j) -> (N, V)
            idx = np.ravel_multi_index(tuple(prefix[:, i] for i in range(j)), (V,) * j) if j else np.zeros(who.size, int)
            out = np.empty((who.size, V))
            for i in np.unique(who):
                sel = who == i
                out[sel] = tables[i][j][idx[sel]]
            return out
        return f

    return {j: make(j) for j in range(mj)}


# --------------------------------------------------------------------------- reports
def certificate_rows(cert: Certificate) -> list[dict]:
    """One row per check: name, raw and Holm-adjusted p-value, statistic, df, TV, detectable TV, n, verdict."""
    adj = holm(cert.checks)
    rows = []
    for name, pv in cert.checks.items():
        d = cert.details.get(name, {}) or {}
        verdict = "FAIL" if adj[name] < cert.alpha else "no bias detected"
        if d.get("acceptance") is not None and d.get("bound") is not None:   # acceptance_bound: its mean and bound
            verdict += (f" (E[accepted] {d['acceptance']:.4g} +- {d.get('se', float('nan')):.2g}, "
                        f"bound {d['bound']:.4g})")
        rows.append({"check": name, "pvalue": float(pv), "holm": float(adj[name]),
                     "statistic": d.get("statistic"), "df": d.get("df"), "tv": d.get("tv"),
                     "detectable_tv": d.get("detectable_tv"), "n": d.get("n"), "verdict": verdict})
    return rows


def _num(x, spec=".3g") -> str:
    return "-" if x is None else format(float(x), spec) if isinstance(x, (float, np.floating)) else str(x)


def n_text(n: int, prompts: int) -> str:
    """``"n = 150,000 continuations (50,000 per prompt x 3 prompts)"``: the pooled total (``Certificate.n``, the
    summary's ``n``) and the per-prompt ``n`` (the ``n`` argument, ``--samples``)."""
    if prompts == 1:
        return f"n = {n:,} continuations (one prompt)"
    return f"n = {n * prompts:,} continuations ({n:,} per prompt x {prompts} prompts)"


def terminal_table(cert: Certificate) -> str:
    """Fixed-width table of every check (for the terminal), under a line naming the sample: ``n = 150,000
    continuations (50,000 per prompt x 3 prompts)``.  Each row's ``n`` is what that check tested: per prompt
    for ``joint[i]``, pooled over prompts for ``joint`` and the PIT checks."""
    head = f"{'check':<14} {'p':>9} {'Holm p':>9} {'chi2':>10} {'df':>6} {'TV':>8} {'det. TV':>8} {'n':>9}  verdict"
    plan = cert.details.get("plan") or {}
    lines = [n_text(plan["n_per_prompt"], plan["prompts"]) + f" of {plan['new_tokens']} tokens, V = {plan['V']}"] \
        if plan.get("n_per_prompt") else []
    lines += [head, "-" * len(head)]
    for r in certificate_rows(cert):
        lines.append(f"{r['check']:<14} {r['pvalue']:>9.3g} {r['holm']:>9.3g} {_num(r['statistic'], '.4g'):>10} "
                     f"{_num(r['df']):>6} {_num(r['tv']):>8} {_num(r['detectable_tv']):>8} {_num(r['n']):>9}  "
                     f"{r['verdict']}")
    for k, v in cert.skipped.items():
        lines.append(f"{k:<14} skipped: {v}")
    return "\n".join(lines)


def to_markdown(cert: Certificate, *, title: str = "Decoder certificate", command: str | None = None) -> str:
    """Markdown report: verdict, plan, every check, the per-position detectable TV, skips and notes."""
    plan = cert.details.get("plan", {})
    out = [f"# {title}", ""]
    if command:
        out += [f"Command: `{command}`", ""]
    if not plan:                                  # stopped early: a misbehaving decoder (a FAIL naming it)
        cause = (cert.details.get("subject") or {}).get("error", "no check ran")
        out += [f"**FAIL**: the decoder misbehaved, so nothing about its law is claimed: {cause}", ""]
        if cert.notes:
            out += ["Notes:", ""] + [f"- {n}" for n in cert.notes]
        return "\n".join(out) + "\n"
    out += [f"**{'No bias detected' if cert.passed else 'FAIL'}** at family-wise alpha {cert.alpha:g} (Holm over "
            f"{len(cert.checks)} checks); smallest Holm p = {cert.pvalue:.3g}.", "",
            f"V = {plan.get('V')}, {n_text(plan.get('n_per_prompt'), plan.get('prompts'))} of "
            f"{plan.get('new_tokens')} tokens; exact joint law over the first {plan.get('joint_tokens')} tokens; "
            f"PIT with {plan.get('pit_bins')} bins under the orders {', '.join(plan.get('orders', []))}; detectable "
            f"TV (power {cert.power:g}) of the main test: {cert.detectable_tv:.3g}.", "",
            *([f"Failing checks, strongest first:", ""] + [f"- {cert.describe(k)}" for k in cert.failing_order()]
              + [""] if not cert.passed else []),
            "| check | p | Holm p | chi2 | df | TV | detectable TV | n | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for r in certificate_rows(cert):
        out.append(f"| {r['check']} | {r['pvalue']:.3g} | {r['holm']:.3g} | {_num(r['statistic'], '.4g')} | "
                   f"{_num(r['df'])} | {_num(r['tv'])} | {_num(r['detectable_tv'])} | {_num(r['n'])} | {r['verdict']} |")
    out += ["", "Per position (PIT, pooled over prompts and contexts; the detectable TV is that of the PIT-bin law):",
            "", "| position | smallest PIT p | largest PIT-bin TV | detectable TV |", "|---|---|---|---|"]
    for d in cert.details.get("positions", []):
        out.append(f"| {d['position']} | {d['pvalue']:.3g} | {d['tv']:.3g} | {d['detectable_tv']:.3g} |")
    scope = cert.details.get("scope")
    if scope:
        out += ["", f"What the detectable TV covers (power {cert.power:g}; each number is of the law named, no "
                    "other):", ""] + [f"- {line}" for line in scope["lines"]]
    if cert.skipped:
        out += ["", "Skipped:", ""] + [f"- `{k}`: {v}" for k, v in cert.skipped.items()]
    if cert.notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in cert.notes]
    return "\n".join(out) + "\n"


def figure(cert: Certificate, *, title: str = "Decoder certificate"):
    """Per-position figure (a ``matplotlib.figure.Figure``, no pyplot state): left, the smallest PIT
    p-value per position (log scale) with the level ``alpha``; right, the largest PIT-bin TV and the
    detectable TV (power ``cert.power``) per position."""
    from matplotlib.figure import Figure

    pos = cert.details.get("positions", [])
    x = [d["position"] for d in pos]
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    a, b = fig.subplots(1, 2)
    a.semilogy(x, [max(d["pvalue"], 1e-300) for d in pos], "o-", label="smallest PIT p (raw)")
    a.axhline(cert.alpha, color="r", ls="--", label=f"alpha {cert.alpha:g}")
    a.set(xlabel="position", ylabel="p-value", title="PIT p-value per position")
    a.legend(fontsize=8)
    b.plot(x, [d["tv"] for d in pos], "o-", label="largest PIT-bin TV (sampled)")
    b.plot(x, [d["detectable_tv"] for d in pos], "s--", label=f"detectable TV (power {cert.power:g})")
    b.set(xlabel="position", ylabel="TV", title="TV per position")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.set_xticks(x)
    fig.suptitle(f"{title}: {'no bias detected' if cert.passed else 'FAIL'} (smallest Holm p {cert.pvalue:.3g})",
                 fontsize=10)
    return fig


def to_json(cert: Certificate) -> dict:
    """JSON-ready dict of the certificate (floats; inf as the string "inf")."""
    def clean(x):
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, (int, np.integer)):
            return int(x)
        if isinstance(x, (float, np.floating)):
            return float(x) if math.isfinite(x) else str(float(x))
        return x

    return clean({"passed": cert.passed, "pvalue": cert.pvalue, "alpha": cert.alpha, "power": cert.power,
                  "n": cert.n, "detectable_tv": cert.detectable_tv, "tv_estimate": cert.tv_estimate,
                  "statistic": cert.statistic, "df": cert.df, "checks": cert.checks, "holm": holm(cert.checks),
                  "details": cert.details, "skipped": cert.skipped, "notes": list(cert.notes)})
