"""The randomised probability-integral transform (PIT) of emitted tokens and its binned test.

Shared by :mod:`exactness.decoder` (the per-position PIT checks) and :mod:`exactness.decoder_events`
(the conditional checks).  ``u = F(y-) + U p(y)`` with ``F`` the CDF of the law ``p`` in a token order
and ``U ~ U(0, 1)`` is exactly uniform when ``y ~ p`` (Brockwell 2007; Czado, Gneiting and Held 2009).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from ._checks import SubjectError, subject_call
from .gof import gof_test
from .power import detectable_tv

#: Equal-width bins of the randomised PIT.
PIT_BINS = 16
#: Largest batch of contexts handed to ``decoder.draft_law``.
BATCH = 4096
#: Power at which detectable TVs are stated.
POWER = 0.99
#: Bins per token of the pair check: a PAIR_BINS x PAIR_BINS table of two tokens' PITs (df 15, as one token's).
PAIR_BINS = 4
#: The pair check takes every pair of positions among the first PAIR_TOKENS, and beyond them the pairs at lags
#: 1..PAIR_LAG (a decoder of thousands of tokens would otherwise have millions of pairs).
PAIR_TOKENS = 16
PAIR_LAG = 2
#: The tuple check bins each token's PIT in two (below / above 1/2) and tests the 2^t cells of the first t >= 3
#: tokens at once, t as large as 2^t <= TUPLE_MAX and 2^t expected cells of >= TUPLE_MIN_EXPECTED draws allow.
TUPLE_MAX = 1 << 12
TUPLE_MIN_EXPECTED = 20

@contextmanager
def running(what: str):
    """Mark ``what`` (``"decoder.sample(prompts, new_tokens, rng)"``, ``"target(contexts)"``) as the call in progress
    (``exactness._timeout.calling``: an alarm records it), and a time limit that passes through it remembers it as
    the innermost call it stopped (``exc.running``), for the cause of a time-limit stop."""
    from ._timeout import calling

    try:
        with calling(what):
            yield
    except BaseException as exc:          # a time limit (TimeLimitExceeded) remembers the innermost call it stopped
        if getattr(exc, "running", None) is None:
            try:
                exc.running = what
            except AttributeError:
                pass
        raise


def subject(fn, what: str, *args, **kwargs):
    """Call the decoder's ``fn``: marked as running, and anything it raises a :class:`SubjectError` naming ``what``
    (a decoder that raises is a FAIL, never "bad input"; :func:`exactness._checks.subject_call`).

    ``SystemExit`` (a decoder that calls ``sys.exit(2)``), ``GeneratorExit``, ``asyncio.CancelledError`` and any
    other ``BaseException`` are the subject's misbehaviour too: a :class:`SubjectError` whose cause reads ``"<what>
    called sys.exit(2)"`` / ``"<what> raised CancelledError"``, never a silent exit of the whole run.  Time limits
    and Ctrl-C (``KeyboardInterrupt``) pass through.
    """
    with running(what):
        return subject_call(fn, what, *args, **kwargs)


def pit(p: np.ndarray, y: np.ndarray, key: np.ndarray | None, u: np.ndarray) -> np.ndarray:
    """Randomised PIT of tokens ``y`` (N,) under laws ``p`` (N, V) in the order of ascending ``key``
    (None: token id; ties in ``key`` broken by token id, as a stable sort orders them).  Returns (N,) in [0, 1].

    ``PIT = P(Y' before y) + u * p(y)`` with Y' ~ p: uniform on [0, 1] when y ~ p.  No sort: "before y" is a
    mask over the vocabulary (O(N V) instead of O(N V log V); at V = 151,936 a sort dominated the certificate).
    """
    N, V = p.shape
    rows = np.arange(N)
    ids = np.arange(V)[None, :]                                        # (1, V)
    yy = np.asarray(y)[:, None]                                        # (N, 1)
    if key is None:
        before = ids < yy                                              # (N, V) bool: tokens ordered before y
    else:
        ky = key[rows, y][:, None]                                     # (N, 1) the key of y
        before = (key < ky) | ((key == ky) & (ids < yy))               # stable order: equal keys by token id
    py = p[rows, y]                                                    # (N,) p(y)
    below = np.where(before, p, 0.0).sum(axis=1)                       # (N,) P(Y' before y)
    return np.clip(below + u * py, 0.0, 1.0)                           # PIT = P(Y' < y) + u p(y)


def pit_check(uvals: np.ndarray, alpha: float) -> dict:
    n = uvals.size
    bins = np.minimum((uvals * PIT_BINS).astype(np.int64), PIT_BINS - 1)
    counts = np.bincount(bins, minlength=PIT_BINS)
    r = gof_test(counts, np.full(PIT_BINS, 1.0 / PIT_BINS))
    return dict(statistic=r.statistic, df=r.df, pvalue=r.pvalue, g_statistic=r.g_statistic, g_pvalue=r.g_pvalue,
                tv=float(0.5 * np.abs(counts / n - 1.0 / PIT_BINS).sum()), n=n,
                detectable_tv=detectable_tv(n, PIT_BINS - 1, alpha=alpha, power=POWER))



def draft_laws(decoder, ctx, V):
    """``decoder.draft_law`` on ``ctx`` (N, L) in chunks: (N, V) float64.

    Raises :class:`SubjectError` (the decoder misbehaved: a FAIL) when it raises or returns another shape,
    non-numeric, non-finite or negative values, or rows that do not sum to 1 (within ``resispec``'s law tolerance,
    1e-6, or for a lower-precision output ``32 sqrt(V) eps`` of its dtype: a float32 softmax at V = 151,936 is off
    by ~1e-5).  Rows are returned renormalised (the verifiers' laws must sum to 1 within 1e-6).
    """
    from resispec._validation import SUM_TOL

    out = []
    rows = max(1, min(BATCH, (1 << 22) // V))                      # (rows, V) float64 a call
    what = "decoder.draft_law(contexts)"
    for s in range(0, ctx.shape[0], rows):
        raw = subject(decoder.draft_law, what, np.array(ctx[s:s + rows], dtype=np.int64))   # its own copy
        try:
            src = np.asarray(raw)                                   # its own dtype (a torch float32 tensor: float32)
            q = src.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise SubjectError(f"{what} returned {type(raw).__name__} that is not a (B, V) float array ({exc})") \
                from None
        if q.shape != (min(rows, ctx.shape[0] - s), V) or not np.all(np.isfinite(q)) or np.any(q < 0):
            raise SubjectError(f"{what} returned shape {q.shape} or non-finite / negative values; it must return "
                               f"the (B, V) = (.., {V}) draft law handed to the verifier")
        eps = float(np.finfo(src.dtype).eps) if np.issubdtype(src.dtype, np.floating) else 0.0
        tol = max(SUM_TOL, 32.0 * np.sqrt(V) * eps) if eps > np.finfo(np.float64).eps else SUM_TOL
        off = np.abs(q.sum(axis=1) - 1.0) > tol
        if off.any():
            j = int(np.flatnonzero(off)[0])
            raise SubjectError(f"{what} returned a row summing to {float(q[j].sum())!r} (context {ctx[s + j].tolist()}); "
                               f"it must return the draft law handed to the verifier, rows summing to 1 (within {tol:g})")
        out.append(q / q.sum(axis=1, keepdims=True))
    return np.concatenate(out)


class ImpossibleToken(SubjectError):
    """The decoder emitted a token of target probability 0: a FAIL at once (one is enough, whatever the pooling).

    ``details``: ``{"impossible": {token, position (1-based), prompt (index), prefix, count, continuations, n,
    sample, reason}}``.
    """

    def __init__(self, cause: str, details: dict):
        super().__init__(cause)
        self.details = details


def impossible(zero, prompts, who, seqs, position: int, sample: str) -> ImpossibleToken:
    """The error naming the first token of target probability 0 at 0-based ``position``.

    ``zero`` (N,) bool: row emitted a token of target probability 0 there; ``prompts`` (P, L); ``who`` (N,)
    prompt index of each row; ``seqs`` (N, m) the emitted tokens; ``sample``: which sample ("the main
    sample", "small_batches", ...)."""
    r = int(np.flatnonzero(zero)[0])
    i, j = int(who[r]), int(position)
    imp = {"token": int(seqs[r, j]), "position": j + 1, "prompt": i, "prefix": seqs[r, :j].tolist(),
           "count": int(np.count_nonzero(zero)), "continuations": int(np.count_nonzero(zero)), "n": int(len(zero)),
           "sample": sample}
    return impossible_error(imp, prompts)


def impossible_error(imp: dict, prompts) -> ImpossibleToken:
    """:class:`ImpossibleToken` from its details (see there)."""
    cause = (f"the decoder emitted token {imp['token']} of target probability 0 at new token {imp['position']} "
             f"after prompt {imp['prompt']} ({np.asarray(prompts)[imp['prompt']].tolist()}) + prefix "
             f"{imp['prefix']}; {imp['count']:,} such tokens in {imp['continuations']:,} of {imp['n']:,} "
             f"continuations ({imp['sample']})")
    return ImpossibleToken(cause, {"impossible": {**imp, "reason": cause}})


def pair_list(m: int) -> list:
    """Pairs of positions ``(i, j)``, ``i < j < m`` (0-based), of the pair check: all pairs among the first
    ``PAIR_TOKENS`` positions, and the pairs at lags 1..``PAIR_LAG`` beyond them."""
    return [(i, j) for j in range(m) for i in range(j) if j < PAIR_TOKENS or j - i <= PAIR_LAG]


def pair_check(u: dict, m: int, alpha: float):
    """The joint law of two tokens' binned PITs, for each pair of :func:`pair_list`: ``(p-value, details)``.

    ``u``: position j -> (N,) randomised PITs (one order).  Under exactness the PITs of one continuation are
    i.i.d. uniform on [0, 1] (the randomised Rosenblatt transform: Rosenblatt 1952, Ann. Math. Stat. 23;
    Diebold, Gunther and Tay 1998, Int. Econ. Rev. 39), so each pair's ``PAIR_BINS^2`` cells are
    equally likely: chi-square per pair, Bonferroni over the pairs.  ``(None, details)`` with ``m < 2`` or
    when no pair keeps a degree of freedom.  The detectable TV (power ``POWER``) is that of one pair's binned
    law at level ``alpha / pairs``: it covers a token whose law depends on an earlier token through their
    PIT bins (e.g. token 4 tilted toward low ids after a low token 1, toward high ids after a high one,
    which cancels in every single-token law), not mass moved within a bin.
    """
    pairs = pair_list(m)
    if not pairs:
        return None, {"reason": "one new token: no pair of tokens"}
    K = PAIR_BINS
    b = {j: np.minimum((u[j] * K).astype(np.int64), K - 1) for j in range(m)}
    N = u[0].size
    law = np.full(K * K, 1.0 / (K * K))
    best, rows = None, 0
    for i, j in pairs:
        counts = np.bincount(b[i] * K + b[j], minlength=K * K)
        r = gof_test(counts, law)
        if r.df == 0:
            continue
        rows += 1
        if best is None or r.pvalue < best[0]:
            best = (r.pvalue, i, j, r, float(0.5 * np.abs(counts / N - law).sum()))
    if best is None:
        return None, {"reason": f"{N:,} continuations leave no degree of freedom in a {K}x{K} pair table: raise n"}
    pv, i, j, r, tv = best
    p = min(1.0, rows * pv)
    det = detectable_tv(N, K * K - 1, alpha=alpha / rows, power=POWER)
    return p, {"statistic": r.statistic, "df": r.df, "pvalue": p, "g_statistic": r.g_statistic,
               "g_pvalue": r.g_pvalue, "tv": tv, "n": N, "pairs": rows, "worst": [i + 1, j + 1],
               "bins": K, "detectable_tv": det,
               "reason": f"worst pair: tokens {i + 1} and {j + 1}, p = {pv:.3g} before Bonferroni over {rows} "
                         f"pairs of {K}x{K} PIT bins"}


def tuple_check(u: dict, m: int, alpha: float):
    """The joint law of the first ``t`` tokens' PITs, each binned in two: ``(p-value, details)`` or ``(None,
    details)`` when fewer than 3 tokens fit (``2^t <= TUPLE_MAX`` cells of ``>= TUPLE_MIN_EXPECTED``
    expected draws).  Under exactness the ``2^t`` cells are equally likely; chi-square, df ``2^t - 1``.
    It covers a dependence among several tokens that no pair shows (e.g. token 3 tilted by the parity of
    tokens 1 and 2's halves)."""
    N = u[0].size
    t = 0
    while t < m and 2 ** (t + 1) <= TUPLE_MAX and N / 2 ** (t + 1) >= TUPLE_MIN_EXPECTED:
        t += 1
    if t < 3:
        return None, {"reason": (f"{m} new tokens: pairs cover them" if m < 3 else
                                 f"{N:,} continuations fill fewer than 2^3 cells of {TUPLE_MIN_EXPECTED} expected "
                                 "draws: raise n")}
    idx = np.zeros(N, dtype=np.int64)
    for j in range(t):
        idx = 2 * idx + (u[j] >= 0.5)
    counts = np.bincount(idx, minlength=2 ** t)
    law = np.full(2 ** t, 1.0 / 2 ** t)
    r = gof_test(counts, law)
    return r.pvalue, {"statistic": r.statistic, "df": r.df, "pvalue": r.pvalue, "g_statistic": r.g_statistic,
                      "g_pvalue": r.g_pvalue, "tv": float(0.5 * np.abs(counts / N - law).sum()), "n": N,
                      "tokens": t, "detectable_tv": detectable_tv(N, max(1, r.df), alpha=alpha, power=POWER),
                      "reason": f"the first {t} tokens' PITs, each binned below / above 1/2: {2 ** t} cells"}


__all__ = ["pit", "pit_check", "draft_laws", "ImpossibleToken", "impossible", "impossible_error", "pair_check",
           "pair_list", "tuple_check", "subject", "running",
           "PIT_BINS", "BATCH", "POWER", "PAIR_BINS"]
