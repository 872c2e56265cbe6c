"""The batch checks of :func:`exactness.certify_decoder`: ``small_batches`` and ``batch_rows``.

The main sample is drawn in heterogeneous batches of up to 4,096 rows, so a decoder wrong only at
one row position of a batch (row 2, the last row: a stride or indexing bug) spoils a few dozen
rows in 150,000 and passes the pooled tests.  ``small_batches`` draws its own sample in batches of
2 to 8 rows and tests each row position on its own; ``batch_rows`` (decoders that take one
generator per row) compares a batch with its rows decoded alone under the same seeds.
"""

from __future__ import annotations

import numpy as np

from ._checks import SubjectError, passes_through, subject_cause
from .gof import pooled_gof_test
from .pit import POWER, impossible, pit, pit_check, running
from .power import detectable_tv

#: Batch sizes of the ``small_batches`` sample, one call after another.
SMALL_SIZES = (2, 3, 4, 5, 6, 7, 8)


def small_batch_check(call, prompts, m: int, mj: int, laws, target, V: int, rng, calls: int, alpha: float):
    """Each row position of small heterogeneous batches against the target: ``(p-value, details)``.

    Parameters
    ----------
    call : callable
        ``call(prompts (b, L) int64, m, rng) -> (b, m) int64``: the decoder's ``sample``, its output
        already checked.
    prompts : ndarray, shape (P, L), int64
    m, mj : int
        New tokens per continuation; tokens covered by the exact joint laws ``laws`` (0: none).
    laws : list of P ndarrays, shape (V^mj,), float64
        The exact law of the first ``mj`` tokens after each prompt (``mj > 0``).
    target : callable
        ``target(contexts (B, L) int64) -> (B, V) float64``, used when ``mj == 0``.
    V : int
        Vocabulary size.
    rng : numpy.random.Generator
        Prompts of each row and the decoder's randomness.
    calls : int
        Calls to ``call``; call ``c`` has ``SMALL_SIZES[c % 7]`` rows (2..8, about 5 on average),
        each with a prompt drawn uniformly.
    alpha : float
        Level at which the per-position detectable TV is stated.

    Returns
    -------
    (float or None, dict)
        None (with ``details["reason"]``) when no group keeps a degree of freedom after pooling (the
        check could not fail: the caller lists it as skipped).  Otherwise Bonferroni over the groups (row positions 0..7 and "last row of its batch") of each group's
        test: the pooled joint test over prompts when ``mj > 0`` (chi-square, statistics and df
        summed), else the randomised PIT of the first token in token-id order (16 bins).  Details
        give per group its rows, p-value and detectable TV (power 0.99), and the worst group.
    """
    P = prompts.shape[0]
    who, seqs, pos, last = [], [], [], []
    for c in range(calls):
        b = SMALL_SIZES[c % len(SMALL_SIZES)]
        idx = rng.integers(P, size=b)
        seqs.append(call(prompts[idx], m, rng))
        who.append(idx)
        pos.append(np.arange(b))
        last.append(np.arange(b) == b - 1)
    who, seqs, pos, last = (np.concatenate(a) for a in (who, seqs, pos, last))
    for j in range(mj):                  # a token of target probability 0: a FAIL at once, naming it
        pre = np.ravel_multi_index(tuple(seqs[:, i] for i in range(j + 1)), (V,) * (j + 1))
        zero = np.zeros(who.size, dtype=bool)
        for i in np.unique(who):
            sel = who == i
            zero[sel] = laws[i].reshape(V ** (j + 1), -1).sum(axis=1)[pre[sel]] <= 0
        if zero.any():
            raise impossible(zero, prompts, who, seqs, j, "the small_batches sample")
    groups = [(f"row {j}", pos == j) for j in range(max(SMALL_SIZES))] + [("last row", last)]
    rows = []
    for name, sel in groups:
        if not sel.any():
            continue
        if mj:
            idx = np.ravel_multi_index(tuple(seqs[sel, j] for j in range(mj)), (V,) * mj)   # joint_law's order
            counts = [np.bincount(idx[who[sel] == i], minlength=laws[i].size) for i in range(P)]
            _, d = pooled_gof_test(counts, laws)
        else:
            p0 = target(prompts[who[sel]])
            _possible(p0, seqs[sel], 0, prompts, who[sel])
            d = pit_check(pit(p0, seqs[sel, 0], None, rng.random(int(sel.sum()))), alpha)
        n = int(sel.sum())
        tests = [("joint" if mj else "token 1", d)]
        for j in range(max(mj, 1), m):                    # later tokens: PIT at the sampled prefix (id order)
            ctx = np.concatenate([prompts[who[sel]], seqs[sel, :j]], axis=1)
            pj = target(ctx)
            _possible(pj, seqs[sel], j, prompts, who[sel])
            tests.append((f"token {j + 1}", pit_check(pit(pj, seqs[sel, j], None, rng.random(n)), alpha)))
        for what, d in tests:
            rows.append({"group": name, "test": what, "rows": n, "pvalue": float(d["pvalue"]), "df": int(d["df"]),
                         "detectable_tv": detectable_tv(n, d["df"], alpha=alpha, power=POWER) if d["df"] else 1.0})
    if all(r["df"] == 0 for r in rows):                  # nothing could fail: skipped, never a pass
        return None, {"calls": calls, "rows": int(pos.size),
                      "reason": f"{pos.size:,} rows in {calls:,} batches of 2-8 rows leave no degree of freedom in "
                                "any row group after pooling: raise n"}
    rows = [r for r in rows if r["df"] > 0]
    worst = min(rows, key=lambda r: r["pvalue"])
    pvalue = min(1.0, len(rows) * worst["pvalue"])               # Bonferroni over the row groups and tests
    return pvalue, {"calls": calls, "rows": int(pos.size), "n": int(pos.size), "groups": rows, "worst": worst["group"],
                    "worst_test": worst["test"], "pvalue": pvalue,
                    "detectable_tv": max(r["detectable_tv"] for r in rows),
                    "reason": f"{pos.size:,} rows in {calls:,} batches of 2-8 rows; worst: {worst['group']}, "
                              f"{worst['test']} ({worst['rows']:,} rows), p = {worst['pvalue']:.3g} before "
                              f"Bonferroni over {len(rows)} tests (row groups x tokens)"}


def _possible(p, seqs, j, prompts, who):
    """Raise :class:`exactness.pit.ImpossibleToken` if a row's token ``j`` has target probability 0 under ``p``."""
    zero = p[np.arange(p.shape[0]), seqs[:, j]] <= 0
    if zero.any():
        raise impossible(zero, prompts, who, seqs, j, "the small_batches sample")


def per_row_check(decoder, prompts, m, seed, check):
    """Batch of B equals B batches of 1 under fixed per-row seeds: ``(p-value 1 or 0, details)``.

    ``B = max(8, 2 P)`` rows cycle through the prompts (a heterogeneous batch); row ``i`` gets
    ``numpy.random.default_rng([seed, 11, i])`` in the batch and again alone.  ``check(out, B, what)``
    validates a returned (B, m) array of token ids and returns it as int64.  A ``sample`` that raises on a
    list of Generators (or calls ``sys.exit``) is a :class:`SubjectError` (it declared ``per_row_rng``).
    """
    B = max(8, 2 * prompts.shape[0])
    pr = prompts[np.arange(B) % prompts.shape[0]]
    gens = lambda rows: [np.random.default_rng([seed, 11, i]) for i in rows]  # noqa: E731
    what = "decoder.sample(prompts, new_tokens, [Generator] * B) (per_row_rng = True)"
    def run(rows):
        try:
            with running(what):
                return decoder.sample(pr[rows], m, gens(rows))      # pr[rows]: a fresh copy each call
        except Exception as exc:             # the decoder broke its own declaration: a FAIL naming it
            raise SubjectError(f"the decoder declares per_row_rng = True but {what} raised {type(exc).__name__}: "
                               f"{exc}; accept a list of B numpy Generators as rng (one per row), or drop "
                               "per_row_rng") from exc
        except BaseException as exc:         # sys.exit(2), asyncio.CancelledError inside sample: a FAIL naming it
            if passes_through(exc):          # Ctrl-C, the harness's time limit
                raise
            raise SubjectError(subject_cause(what, exc)) from exc

    batch = check(run(np.arange(B)), B, what)
    alone = np.concatenate([check(run(np.array([i])), 1, what) for i in range(B)])
    diff = np.flatnonzero((batch != alone).any(axis=1))
    if diff.size:
        i = int(diff[0])
        return 0.0, {"rows": B, "first_row": i, "prompt": pr[i].tolist(), "batch": batch[i].tolist(),
                     "alone": alone[i].tolist(),
                     "reason": f"row {i} of a heterogeneous batch of {B} (prompt {pr[i].tolist()}) gave "
                               f"{batch[i].tolist()} but {alone[i].tolist()} alone under the same per-row seed "
                               f"({diff.size} rows differ)"}
    return 1.0, {"rows": B, "reason": f"each of {B} rows of a heterogeneous batch equals that row alone under the "
                                      "same per-row seed"}


#: Tile sizes of the ``tile_rows`` check: the first and the last row of every tile of T rows of a batch.
TILES = tuple(2 ** j for j in range(3, 12))          # 8 .. 2,048 rows


def tile_groups(places: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The row groups of the ``tile_rows`` check: ``[(label, (P, n) bool)]``.

    ``places`` (P, n, 2) int64: (row of its batch, rows of its batch) of each continuation of the main sample.
    Groups: for each ``T`` in :data:`TILES`, the rows that start a tile of T rows past the batch's first
    (``r % T == 0, r > 0``), those that end one (``r % T == T - 1``), and the single rows ``r == T`` and
    ``r == T - 1``; the last row of the batches of each size of ``exactness.decoder.MAIN_SIZES``, and of all
    batches of 9+ rows (``small_batches`` tests those of 2-8)."""
    from .decoder import MAIN_SIZES

    r, b = places[..., 0], places[..., 1]                 # (P, n) int64 each
    groups = []
    for T in TILES:
        groups.append((f"first row of each {T}-row tile", (r % T == 0) & (r > 0)))
        groups.append((f"last row of each {T}-row tile", r % T == T - 1))
        groups.append((f"row {T}", r == T))
        groups.append((f"row {T - 1}", r == T - 1))
    groups += [(f"last row of the {s:,}-row batches", (r == b - 1) & (b == s)) for s in MAIN_SIZES]
    groups.append(("last row of a batch of 9+ rows", (r == b - 1) & (b > max(SMALL_SIZES))))
    return groups


def tile_rows_check(seqs, places, pits, laws, mj: int, V: int, alpha: float) -> tuple[float | None, dict]:
    """The main sample's rows at tile boundaries of their batch, each group on its own: ``(p-value, details)``.

    A decoder wrong at one row of a large batch (row 1,024, every 512th row: a tiling, stride or block-boundary
    bug in a batched kernel) spoils a few rows in 10^5 and passes the pooled tests; here those rows are a group
    of their own.  No new draws and no target calls: the groups are subsets of the main sample, chosen by place
    (independent of the tokens), so under exactness each group's test is exact.

    Parameters
    ----------
    seqs : ndarray, shape (P, n, m), int64
        The main sample, prompt-major.
    places : ndarray, shape (P, n, 2), int64
        (row of its batch, rows of its batch) of each continuation (``exactness.decoder._draw_mixed``).
    pits : dict
        ``{(j, "id"): (P n,) float64}`` randomised PIT values of the main sample (prompt-major).
    laws : list of P ndarrays, shape (V^mj,), float64
        The exact joint law of the first ``mj`` tokens per prompt (``mj == 0``: none).
    mj : int
        Tokens the joint laws cover; later tokens (all when ``mj == 0``, or when a group's rows leave the joint
        test no degree of freedom) are tested through their PIT (16 bins, pooled over prompts).
    V : int
        Vocabulary size.
    alpha : float
        Level at which each group's detectable TV is stated (power 0.99).

    Returns
    -------
    (float or None, dict)
        Bonferroni over the groups x tests that keep a degree of freedom (the pooled joint test over prompts
        when ``mj > 0``, then the PIT of each later token); None with ``details["reason"]`` when none does
        (the check could not fail: skipped).
    """
    P, n, m = seqs.shape
    rows = []
    for name, sel in tile_groups(places):               # sel: (P, n) bool
        k = int(sel.sum())
        if k == 0:
            continue
        tests, pit_from = [], mj
        flat = sel.reshape(-1)                          # (P n,) bool, the PIT arrays' order
        if mj:
            counts = [np.bincount(np.ravel_multi_index(tuple(seqs[i][sel[i], j] for j in range(mj)), (V,) * mj),
                                  minlength=laws[i].size) for i in range(P)]     # joint_law's order
            joint = pooled_gof_test(counts, laws)[1]
            if joint["df"] > 0:
                tests.append(("joint", joint))
            else:                                       # too few rows per prompt: the PIT, pooled over prompts
                pit_from = 0
        tests += [(f"token {j + 1}", pit_check(pits[(j, "id")][flat], alpha)) for j in range(pit_from, m)]
        rows += [{"group": name, "test": what, "rows": k, "pvalue": float(d["pvalue"]), "df": int(d["df"])}
                 for what, d in tests]
    rows = [r for r in rows if r["df"] > 0]
    for r in rows:                                        # at the Bonferroni level the p-value is judged at
        r["detectable_tv"] = detectable_tv(r["rows"], r["df"], alpha=alpha / max(len(rows), 1), power=POWER)
    if not rows:                                          # nothing could fail: skipped, never a pass
        return None, {"rows": int(P * n), "reason": "no row group at a tile boundary keeps a degree of freedom "
                                                     "after pooling (batches too small or n too few): raise n"}
    worst = min(rows, key=lambda r: r["pvalue"])
    pvalue = min(1.0, len(rows) * worst["pvalue"])               # Bonferroni over the row groups and tests
    return pvalue, {"n": int(P * n), "groups": rows, "worst": worst["group"], "worst_test": worst["test"],
                    "pvalue": pvalue, "detectable_tv": max(r["detectable_tv"] for r in rows),
                    "reason": f"worst: {worst['group']}, {worst['test']} ({worst['rows']:,} rows), "
                              f"p = {worst['pvalue']:.3g} before Bonferroni over {len(rows)} tests (row groups x "
                              "tokens)"}
