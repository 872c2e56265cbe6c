"""Conditional checks of a decoder's verification decisions, from the events it reports.

A decoder MAY offer (used by :func:`exactness.certify_decoder`)::

    decoder.sample_events(prompts (B, L) int64, new_tokens, rng) -> (tokens (B, m) int64, DecoderEvents)
    decoder.rule            # the node rule: a resispec registry verifier name (e.g. "rrs"),
                            # "block" (block verification: not per node), or None
    decoder.events_q        # optional: "draft_law" (default) or "one_hot" (the verifier was handed
                            # a point mass at each candidate, k = 1, as for n-gram / argmax drafts)

:class:`DecoderEvents` holds one entry per verification decision at one node (arrays of length E):
``row`` the batch row, ``position`` the index in the new tokens of the token the decision emits,
``candidates`` (E, k) int64 padded with -1 (no candidate: a bonus draw after a full path),
``accepted`` the index of the accepted candidate or -1 (rejected: a residual token; bonus: -1),
``token`` the emitted token, ``call`` the id of the target call the decision belongs to.
Entries at ``position >= new_tokens`` are dropped (their tokens are not returned).

The harness computes everything else itself: ``p`` from ``target`` at the context (prompt + the
tokens emitted before ``position``), ``q`` from ``decoder.draft_law`` at that context, and the
exact conditional law of a decision given its candidates (with ``events_q = "one_hot"``,
``q`` is the point mass at the candidate instead) from the rule's ``chain``
(``resispec.get_verifier(rule).chain(p, q, candidates)``: accept probabilities ``a`` (k,) and
residual ``r`` (V,); as :func:`exactness.coupled.run.joint_law`).  Checks (randomised PIT,
Brockwell 2007; ``PIT_BINS`` equal bins, chi-square, pooled over contexts):

``accepted_count``
    Per target call, the number of accepted decisions ``a``.  Given the history, node ``i`` of the
    call is passed with probability ``alpha_i = 1 - prod_j (1 - a_ij)`` (any candidate accepted).
    With ``S = prod_{i<a} alpha_i``: a call ending in a rejection has
    ``u = 1 - S + U S (1 - alpha_a)``; a call without one (full path, or cut by ``new_tokens`` /
    its depth, a cap fixed when the call starts) has ``u = 1 - S + U S``.  Exactly uniform under
    exactness, node by node, for chains and trees alike.  An accepted decision of probability 0
    is impossible (p = 0); a rejection the harness puts at probability 0 only enters the PIT
    (float32 forwards of the decoder and the harness differ by ~1e-7).
``after_rejection``
    The token after a rejection against the residual ``r``; two token orders (id, and ``r``
    descending), Bonferroni-combined into one p-value.  A token of target probability 0: p = 0 (a
    token of residual mass 0 but target mass > 0 only enters the PIT: the two can differ by float noise).
``bonus``
    The bonus token after a full path (no candidates) against ``p``; the same two orders (id,
    ``p`` descending).

Each check's detectable TV is that of its PIT-bin law, ``detectable_tv(n_events, PIT_BINS - 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import SubjectError
from .pit import draft_laws, pit, pit_check

#: Rule names that are not per-node decisions (the conditional checks are skipped, with the reason).
NOT_PER_NODE = {"block": ("block verification (Sun et al. 2024, arXiv 2403.10444) decides the accepted length "
                          "jointly over the whole block and draws its extra token from a residual weighted by the "
                          "block weight w_tau, so its decisions are not per node: no node law to check them against "
                          "(the joint and PIT checks cover it)")}
#: Orders of the token PIT in after_rejection and bonus.
TOKEN_ORDERS = ("id", "desc")
#: Events handled at once (memory O(EVENT_ROWS V)).
EVENT_ROWS = 4096
#: An accepted decision whose pass probability is at most this is impossible (p = 0).  Exactly 0:
#: any positive probability may be legitimate (a decision the harness puts at 1e-9 happens about
#: once in 1e9), and a float32 decoder's cached forward differs from the harness's by ~1e-7, so a
#: rejection the harness puts at probability 0 (accept probability 1) is never called impossible
#: either: both enter the PIT, where a systematic bias shows.
IMPOSSIBLE_TOL = 0.0

FIELDS = ("row", "position", "candidates", "accepted", "token", "call")


@dataclass(frozen=True)
class DecoderEvents:
    """A decoder's verification decisions, one entry per decision at one node.

    Attributes (E entries; int64)
    ----------
    row : (E,)        batch row
    position : (E,)   index in the new tokens of the token this decision emits
    candidates : (E, k)  candidate ids, padded with -1 (a row of -1: a bonus draw after a full path)
    accepted : (E,)   index of the accepted candidate, or -1 (rejected: residual token; bonus)
    token : (E,)      the emitted token
    call : (E,)       id of the target call the decision belongs to
    """

    row: np.ndarray
    position: np.ndarray
    candidates: np.ndarray
    accepted: np.ndarray
    token: np.ndarray
    call: np.ndarray

    @classmethod
    def empty(cls, k: int = 1) -> "DecoderEvents":
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, np.zeros((0, k), dtype=np.int64), z, z, z)

    @classmethod
    def concat(cls, parts) -> "DecoderEvents":
        """Entries of several batches in one (candidates padded to the widest k with -1)."""
        parts = list(parts)
        if not parts:
            return cls.empty()
        k = max(e.candidates.shape[1] for e in parts)
        cand = [np.pad(e.candidates, ((0, 0), (0, k - e.candidates.shape[1])), constant_values=-1) for e in parts]
        return cls(*(np.concatenate([getattr(e, f) for e in parts]) for f in ("row", "position")),
                   np.concatenate(cand), *(np.concatenate([getattr(e, f) for e in parts])
                                           for f in ("accepted", "token", "call")))

    def take(self, sel) -> "DecoderEvents":
        return DecoderEvents(*(getattr(self, f)[sel] for f in FIELDS))


def _fail(msg: str):
    """The decoder's events contradict its tokens: the decoder misbehaved (a FAIL naming the cause)."""
    raise SubjectError(f"decoder.sample_events: {msg}")


def check_events(events, tokens: np.ndarray, V: int) -> DecoderEvents:
    """Validate a decoder's events against the ``tokens`` (B, m) it returned with them.

    Returns the events (int64 copies) with entries at ``position >= m`` dropped.

    Raises
    ------
    SubjectError
        (the decoder misbehaved: ``certify_decoder`` returns a FAIL naming it) ``events`` lacks a field
        or holds non-integer arrays; shapes that disagree; rows or positions out of range; an entry whose token is not
        ``tokens[row, position]``; an accepted index that is not a candidate or whose candidate
        is not the token; a token of the returned tokens with no entry or with two; a call whose
        entries span rows, skip positions, or continue after its rejection / bonus draw.
        Each message names the fix.
    """
    missing = [f for f in FIELDS if not hasattr(events, f)]
    if missing:
        raise SubjectError(f"decoder.sample_events must return (tokens, events) with events having fields {FIELDS} "
                        f"(e.g. exactness.decoder_events.DecoderEvents); missing {missing}")
    arrs = {}
    for f in FIELDS:
        a = np.asarray(getattr(events, f))
        if a.size and (a.dtype == bool or not np.issubdtype(a.dtype, np.integer)):
            raise SubjectError(f"decoder.sample_events: events.{f} has dtype {a.dtype}; it must hold int64 ids")
        arrs[f] = a.astype(np.int64)
    E = arrs["row"].shape[0] if arrs["row"].ndim == 1 else -1
    c = arrs["candidates"]
    if c.ndim == 1 and c.size == 0:
        c = arrs["candidates"] = c.reshape(E if E > 0 else 0, 0)
    for f in FIELDS:
        want = 2 if f == "candidates" else 1
        if arrs[f].ndim != want or arrs[f].shape[0] != E:
            _fail(f"events.{f} has shape {arrs[f].shape}; every field needs E = {E} entries "
                  f"({'(E, k), padded with -1' if f == 'candidates' else '(E,)'})")
    B, m = tokens.shape
    row, pos = arrs["row"], arrs["position"]
    if E and (row.min() < 0 or row.max() >= B):
        _fail(f"events.row holds {int(row.min())}..{int(row.max())}, outside the batch rows [0, {B})")
    if E and pos.min() < 0:
        _fail(f"events.position holds {int(pos.min())}; positions index the new tokens from 0")
    ev = DecoderEvents(**arrs).take(pos < m)
    row, pos, c, acc, tok = ev.row, ev.position, ev.candidates, ev.accepted, ev.token
    E = row.size
    if E and np.any(tok != tokens[row, pos]):
        i = int(np.flatnonzero(tok != tokens[row, pos])[0])
        _fail(f"entry {i} says row {row[i]} emitted token {tok[i]} at position {pos[i]}, but the returned tokens "
              f"hold {tokens[row[i], pos[i]]} there; report the token each decision emitted, at its index in the "
              "returned tokens")
    seen = np.zeros((B, m), dtype=np.int64)
    np.add.at(seen, (row, pos), 1)
    if np.any(seen != 1):
        r, j = (int(x[0]) for x in np.nonzero(seen != 1))
        _fail(f"row {r}, position {j} has {seen[r, j]} entries; every returned token comes from exactly one "
              "decision: report one entry per emitted token (a bonus draw with candidates all -1)")
    if c.size and (c.min() < -1 or c.max() >= V):
        _fail(f"events.candidates hold ids in [{c.min()}, {c.max()}], outside [0, {V}) (pad with -1)")
    k = (c >= 0).sum(axis=1)
    if c.shape[1] and np.any(np.cumprod(c >= 0, axis=1).sum(axis=1) != k):
        _fail("events.candidates rows must hold their candidates first, then -1 padding")
    if np.any((acc < -1) | (acc >= np.maximum(k, 0)) & (acc != -1)):
        i = int(np.flatnonzero((acc < -1) | (acc >= k) & (acc != -1))[0])
        _fail(f"entry {i} has accepted = {acc[i]} with {k[i]} candidates; accepted is a candidate index or -1")
    hit = acc >= 0
    if np.any(c[np.flatnonzero(hit), acc[hit]] != tok[hit]):
        i = int(np.flatnonzero(hit)[c[np.flatnonzero(hit), acc[hit]] != tok[hit]][0])
        _fail(f"entry {i} accepts candidate {acc[i]} = {c[i, acc[i]]} but emits token {tok[i]}; an accepted "
              "decision emits its candidate")
    # calls: one row, consecutive positions, accepted decisions first, at most one final rejection / bonus
    o = np.lexsort((pos, ev.call))
    call, r_, p_, term = ev.call[o], row[o], pos[o], ~hit[o]
    same = call[1:] == call[:-1]
    if np.any(same & (r_[1:] != r_[:-1])):
        _fail(f"call {call[1:][same & (r_[1:] != r_[:-1])][0]} spans several rows; give each row's target calls "
              "their own ids")
    if np.any(same & (p_[1:] != p_[:-1] + 1)):
        _fail(f"call {call[1:][same & (p_[1:] != p_[:-1] + 1)][0]} has entries at non-consecutive positions; a "
              "call's decisions emit consecutive tokens")
    if np.any(same & term[:-1]):
        _fail(f"call {call[:-1][same & term[:-1]][0]} continues after a rejection or bonus draw; those end the call")
    return ev


def _token_pit(law: np.ndarray, y: np.ndarray, u: np.ndarray, order: str) -> np.ndarray:
    return pit(law, y, None if order == "id" else -law, u)


def _contexts(prompts_rows: np.ndarray, tokens: np.ndarray, row: np.ndarray, j: int) -> np.ndarray:
    return np.concatenate([prompts_rows[row], tokens[row, :j]], axis=1)


def events_q(decoder) -> str:
    """``decoder.events_q``: "draft_law" (default) or "one_hot"; ValueError otherwise."""
    mode = getattr(decoder, "events_q", "draft_law")
    if mode not in ("draft_law", "one_hot"):
        raise ValueError(f"decoder.events_q = {mode!r}; use 'draft_law' (decisions verified with "
                         "decoder.draft_law) or 'one_hot' (with a point mass at the candidate)")
    return mode


def _event_q(decoder, ctx, cand, k, V):
    if events_q(decoder) == "draft_law":
        return draft_laws(decoder, ctx, V)
    if np.any(k != 1):
        raise ValueError("decoder.events_q = 'one_hot' needs one candidate per decision (k = 1); report "
                         "draft_law instead for several candidates")
    q = np.zeros((ctx.shape[0], V))
    q[np.arange(ctx.shape[0]), cand[:, 0]] = 1.0
    return q


def conditional_values(ev: DecoderEvents, prompts_rows, tokens, tgt, decoder, rule: str, rng):
    """PIT values of the three conditional checks: ``{check: (N,) float64}`` and impossible counts.

    ``prompts_rows`` (N, L) and ``tokens`` (N, m): the prompt and the tokens of every row that
    ``ev.row`` indexes; ``tgt`` the validated target; ``rule`` a registry verifier name, or None: then only the
    bonus draws are scored (their law, ``p`` at the context, is the same for every exact rule: a bonus ``y`` after
    the full path ``d`` and any other route to the output ``d, y`` -- a residual token, then later steps -- add up
    to ``p(y | d)`` only if the bonus law is ``p(. | d)``, the later steps being target continuations), and
    ``accepted_count`` / ``after_rejection`` are None.
    """
    import resispec

    verifier = None if rule is None else resispec.get_verifier(rule)
    E = ev.row.size
    V = tgt.V
    k = (ev.candidates >= 0).sum(axis=1)
    alpha = np.ones(E)                                     # pass probability of each decision
    u_tok = {o: np.full(E, np.nan) for o in TOKEN_ORDERS}  # token PIT (rejections and bonus draws)
    bad_token = np.zeros(E, dtype=bool)
    for j in np.unique(ev.position):
        at = np.flatnonzero(ev.position == j)
        for s in range(0, at.size, EVENT_ROWS):
            e = at[s:s + EVENT_ROWS]
            ctx = _contexts(prompts_rows, tokens, ev.row[e], int(j))
            p = tgt(ctx)
            law = p.copy()                                 # bonus: p; rejection: the residual
            dec = k[e] > 0
            if dec.any() and verifier is not None:
                q = _event_q(decoder, ctx[dec], ev.candidates[e[dec]], k[e][dec], V)
                for kk in np.unique(k[e][dec]):
                    sel = np.flatnonzero(dec)[k[e][dec] == kk]
                    ch = verifier.chain(p[sel], q[np.searchsorted(np.flatnonzero(dec), sel)],
                                        ev.candidates[e[sel], :kk])
                    a = np.asarray(ch.accept_probs, dtype=np.float64).reshape(sel.size, kk)
                    alpha[e[sel]] = 1.0 - np.prod(1.0 - a, axis=1)
                    law[sel] = np.asarray(ch.residual, dtype=np.float64).reshape(sel.size, V)
            term = ev.accepted[e] < 0
            if term.any():
                t = e[term]
                lt = law[term]
                # impossible only where the TARGET gives the token no mass: a residual of 0 at a token
                # with p > 0 can be float noise between two forwards (p ~ q there); the PIT sees a real bias
                bad_token[t] = p[term][np.arange(t.size), ev.token[t]] <= 0
                uu = rng.random(t.size)
                for o in TOKEN_ORDERS:
                    u_tok[o][t] = _token_pit(lt, ev.token[t], uu, o)
    rej = (k > 0) & (ev.accepted < 0)
    bonus = k == 0
    acc = ev.accepted >= 0
    impossible = {"accepted_count": int(np.count_nonzero(acc & (alpha <= IMPOSSIBLE_TOL))),
                  "after_rejection": int(np.count_nonzero(rej & bad_token)),
                  "bonus": int(np.count_nonzero(bonus & bad_token))}
    if verifier is None:                                  # no rule: the rule-free bonus check only
        return ({"accepted_count": None, "after_rejection": None,
                 "bonus": {o: u_tok[o][bonus] for o in TOKEN_ORDERS}}, impossible)
    # accepted_count: S = prod of pass probabilities of the accepted decisions of each call
    decided = k > 0
    ids, inv = np.unique(ev.call[decided], return_inverse=True)
    with np.errstate(divide="ignore"):
        logs = np.bincount(inv, weights=np.where(acc[decided], np.log(alpha[decided]), 0.0), minlength=ids.size)
    S = np.exp(logs)
    a_rej = np.ones(ids.size)                             # 1 - alpha of the final rejection, 1 without one
    r_sel = rej[decided]
    a_rej[inv[r_sel]] = 1.0 - alpha[decided][r_sel]
    u_count = np.clip(1.0 - S + rng.random(ids.size) * S * a_rej, 0.0, 1.0)
    return ({"accepted_count": u_count,
             "after_rejection": {o: u_tok[o][rej] for o in TOKEN_ORDERS},
             "bonus": {o: u_tok[o][bonus] for o in TOKEN_ORDERS}}, impossible)


def conditional_checks(values, impossible, alpha: float):
    """``(checks, details, skipped)`` of the conditional checks from :func:`conditional_values`."""

    checks, details, skipped = {}, {}, {}
    for name in ("accepted_count", "after_rejection", "bonus"):
        v = values[name]
        if v is None:                                     # not scored (no rule): the caller says why
            continue
        n = (v if isinstance(v, np.ndarray) else v[TOKEN_ORDERS[0]]).size
        if n == 0:
            what = {"accepted_count": "target calls with a decision", "after_rejection": "rejections",
                    "bonus": "bonus draws after a full path"}[name]
            skipped[name] = f"no {what} in the sample: nothing to check"
            continue
        if isinstance(v, np.ndarray):
            d = pit_check(v, alpha)
        else:
            per = {o: pit_check(v[o], alpha) for o in TOKEN_ORDERS}
            best = min(per, key=lambda o: per[o]["pvalue"])
            d = dict(per[best])
            d.update(pvalue=min(1.0, len(per) * per[best]["pvalue"]), order=best,
                     orders={o: per[o]["pvalue"] for o in per},
                     reason=f"Bonferroni over the token orders {', '.join(TOKEN_ORDERS)}")
        d["impossible"] = impossible[name]
        if impossible[name]:
            d.update(pvalue=0.0, reason=f"{impossible[name]} decisions of probability 0 under the rule")
        checks[name], details[name] = d["pvalue"], d
    return checks, details, skipped
