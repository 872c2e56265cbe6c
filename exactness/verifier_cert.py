"""Certification of a verifier at one node: Monte Carlo plus conditional checks.

Checks (each a p-value; deterministic checks give 1.0 = pass, 0.0 = fail),
combined with Holm's correction (:func:`exactness.certificate.holm`, the values of ``statsmodels`` ``multipletests``):

``marginal``
    Chi-square / G-test of the emitted tokens against ``p``.
``exact_law``
    Exact output law by enumeration (or the built-in accept table) equals
    ``p`` to TV < 1e-9 and the exact acceptance does not exceed alpha*.
``joint``
    Sampled (stop position, token) pairs against the exact joint law of the
    verifier's own ``chain``: catches a ``verify`` that disagrees with its
    declared chain (e.g. a reused uniform).
``accepted_count``
    Law of the accepted index (number of rejections before the stop).
``residual``
    Law of the token emitted at the residual stop (all candidates rejected).
``tree_bonus``, ``tree_two_level``
    Joint law of two successive emitted tokens on a small tree, depth 1 (the
    second token is the bonus after a full accept) and depth 2
    (:mod:`exactness.tree`); V <= ``TREE_MAX_V`` only.  Exact TV folded in.
``determinism``
    Same seed, same tokens and accepted indices.
``batched``
    ``verify`` on a batch of distinct nodes equals one node at a time with
    the same uniforms.
``batched_rows``
    For black boxes (where ``batched`` cannot run: no ``uniforms``, or not a
    ``resispec.Verifier``): ``verify`` on batches of ``BATCH_ROWS``
    heterogeneous nodes (permuted copies of ``(p, q)``, interleaved), each
    row's tokens tested against its own row's target law (per-row pooled
    chi-square, statistics and df summed).  Catches rows mixed in batches.
``small_batches``
    Black boxes: ``verify`` on batches of 1..``SMALL_B`` rows, pooled chi-square.
``batch_sizes``
    Wherever ``verify`` draws the main sample (the generic path): its calls
    cycle through the batch sizes ``exactness.sampling.MAIN_SIZES`` (9 to
    4,096 rows), and each size's tokens are compared with the other sizes'
    (chi-square test of homogeneity), Bonferroni over the sizes.  Catches a
    ``verify`` wrong only for some batch sizes.

A check that cannot run is listed in ``Certificate.skipped`` (name ->
reason) and never counted as a pass; a Monte Carlo check whose pooled
chi-square has df 0 (too few samples in that sub-law) is skipped the same
way.  ``details["chain_consistency"]`` gives the TV between what ``verify``
sampled and the exact law of the verifier's own chain.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from resispec import Verifier
from resispec._validation import Laws, check_k
from resispec.enumeration import count_tuples

from ._checks import SubjectError, as_seed_sequence, check_alpha, check_n, plural
from . import limits
from .certificate import Certificate, _hours, certificate_from_counts, pilot_seconds, run_subject
from .limits import DEFAULT_TIMEOUT  # the keyword default (bound at definition)
from .exact import MAX_TUPLES, ChainError, certify_exact, enumerable, exact_tol
from .budget import BudgetError
from .gof import gof_test
from .sampling import (_ELEMS, Draws, NodeSampler, UnsupportedK, as_numpy_verifier, call_subject, candidate_law,
                       concat_draws, door_node, draw_node_candidates, drafting_of, emitted_result, has_chain,
                       k_support, rechecks_in, subject_cause, takes_laws, takes_uniforms)
from .tree import tree_check

#: Default Monte Carlo draws per node.
DEFAULT_N = 200_000
#: Cap on draws x V x k for verifiers sampled through the generic (O(V)) path.
GENERIC_BUDGET = 40_000_000
#: Largest vocabulary for the tree checks.
TREE_MAX_V = 16
#: Largest number of sampled pairs per tree check.
TREE_N = 50_000
#: Nodes in the batched == one-at-a-time check.
BATCH_ROWS = 16
#: Largest number of draws in the black-box ``batched_rows`` check.
BATCH_N = 50_000
#: Draws of the black-box ``small_batches`` check (verify on batches of 1..``SMALL_B`` rows of the node).
SMALL_N = 2_000
SMALL_B = 8


def default_n(sampler: NodeSampler) -> int:
    """Default budget: ``DEFAULT_N`` draws, capped for the generic path at large V."""
    if sampler.path != "generic":
        return DEFAULT_N
    return int(max(2_000, min(DEFAULT_N, GENERIC_BUDGET // (sampler.V * sampler.k))))


def _determinism(sampler: NodeSampler, seed_seq) -> float:
    m = 500
    a = sampler.draws(np.random.default_rng(seed_seq), m)
    b = sampler.draws(np.random.default_rng(seed_seq), m)
    same = np.array_equal(a.tokens, b.tokens) and np.array_equal(a.accepted, b.accepted)
    return 1.0 if same else 0.0


def _batched(verifier, p, q, k, rng) -> float | None:
    """1.0 when a batch of distinct nodes verifies like one node at a time, else the failing row in a dict."""
    V = p.size
    B = BATCH_ROWS
    perms = np.stack([rng.permutation(V) for _ in range(B)])
    P, Q = p[perms], q[perms]
    d = drafting_of(verifier)
    cl = candidate_law(verifier, Q)
    cand = np.stack([draw_node_candidates(cl[b], k, d, rng.random((1, k)))[0] for b in range(B)])
    u = rng.random((B, k + 1))
    # permuted rows of a checked node are laws: resispec's own verify gets them as a trusted Laws
    laws = takes_laws(verifier, "verify")

    def pq(rows):
        return (Laws(P[rows].copy(), Q[rows].copy()), None) if laws else (P[rows].copy(), Q[rows].copy())

    name = f"{type(verifier).__name__}.verify"
    whole = call_subject(verifier.verify, name, *pq(slice(None)), cand.copy(), uniforms=u)
    wt, wa, _ = emitted_result(whole, B, k, V, verifier, cand)
    for b in range(B):
        one = call_subject(verifier.verify, name, *pq(slice(b, b + 1)), cand[b:b + 1].copy(), uniforms=u[b:b + 1])
        ot, oa, _ = emitted_result(one, 1, k, V, verifier, cand[b:b + 1])
        same_acc = oa[0] == wa[b] or min(oa[0], wa[b]) < -1   # unusable accepted indices: the tokens are compared
        if ot[0] != wt[b] or not same_acc:
            return 0.0, {"reason": f"verify on a batch of {B} distinct nodes differs from one node at a time at "
                                   f"row {b} (token {wt[b]} vs {ot[0]}, same uniforms)"}
    return 1.0, {}


def _batched_rows(verifier, p, q, k, n, rng) -> tuple[float, dict]:
    """Black-box batch check: ``verify`` on batches of ``BATCH_ROWS`` distinct nodes, each row against its own law.

    Node ``b`` is ``(p, q)`` permuted by ``perms[b]``; batch row ``r`` holds node
    ``r % B``, so every call mixes all ``B`` nodes (at least ``B`` rows a call).
    Under exactness, ``perms[b][token]`` of a row of node ``b`` follows ``p``;
    the per-node pooled chi-squares (``gof_test``) are summed (statistic and df)
    and referred to ``scipy.stats.chi2``.  Returns ``(p-value, details)``; df 0
    gives ``(None, details)`` (the caller lists it as skipped).
    """
    from scipy import stats

    V, B = p.size, BATCH_ROWS
    perms = np.stack([rng.permutation(V) for _ in range(B)])
    P, Q = p[perms], q[perms]
    d = drafting_of(verifier)
    cl = candidate_law(verifier, Q)
    m = max(1, n // B)
    cand = np.empty((m, B, k), dtype=np.int64)
    for b in range(B):
        cand[:, b] = draw_node_candidates(cl[b], k, d, rng.random((m, k)))
    cand = cand.reshape(m * B, k)
    node = np.tile(np.arange(B), m)
    uses_u, laws = takes_uniforms(verifier), takes_laws(verifier, "verify")
    rows_per_call = max(B, (_ELEMS // V) // B * B)
    toks = []
    for s in range(0, m * B, rows_per_call):
        idx = node[s:s + rows_per_call]
        c = cand[s:s + rows_per_call]
        Pr, Qr = P[idx], Q[idx]
        args = (Laws(Pr, Qr), None) if laws else (Pr, Qr)
        kw = {"uniforms": rng.random((idx.size, k + 1))} if uses_u else {}
        try:
            res = verifier.verify(*args, c.copy(), rng, **kw)
        except SubjectError:
            raise
        except (Exception, SystemExit) as e:    # the subject failed: a FAIL naming it
            raise SubjectError(f"{type(verifier).__name__}.verify failed on a batch of {idx.size} rows of {B} "
                               f"distinct nodes ({subject_cause(type(verifier).__name__ + '.verify', e)}); p and q "
                               "are (B, V) float64 with a different law in each row") from e
        t, _, _ = emitted_result(res, idx.size, k, V, verifier, c)
        toks.append(t)
    t = np.concatenate(toks)
    x = perms[node, t]  # back to the labels of p
    stat, df, tv = 0.0, 0, 0.0
    for b in range(B):
        cb = np.bincount(x[node == b], minlength=V)
        r = gof_test(cb, p)
        if r.impossible:
            return 0.0, {"statistic": float("inf"), "df": df, "n": int(t.size), "rows": B,
                         "reason": f"row {b} of the batch emitted a token its own target gives probability 0"}
        stat += r.statistic
        df += r.df
        tv = max(tv, 0.5 * float(np.abs(cb / cb.sum() - p).sum()))
    info = {"statistic": stat, "df": df, "n": int(t.size), "rows": B, "tv": tv}
    if df == 0:
        return None, info
    pv = float(stats.chi2.sf(stat, df))
    info["pvalue"] = pv
    return pv, info


def _small_batches(sampler: NodeSampler, p, n: int, rng) -> tuple[float | None, dict]:
    """Black-box check: ``n`` draws through ``verify`` on batches of 1, 2, .., ``SMALL_B`` rows (the main sample
    and ``batched_rows`` call it with thousands of rows or at least ``BATCH_ROWS``), tested against ``p`` by the
    pooled chi-square.  Catches a ``verify`` that is wrong only on small batches (a single-row fast path, a
    padding bug): with ``SMALL_N`` draws, a bias of TV ~0.1 or more.  ``(None, details)`` when df is 0."""
    k, V = sampler.k, sampler.V
    toks, s, b = [], 0, 0
    while s < n:
        B = min(1 + b % SMALL_B, n - s)
        uc, uv = rng.random((B, k)), rng.random((B, k + 1))
        cand = draw_node_candidates(sampler.cand_law, k, sampler.drafting, uc)
        toks.append(sampler._generic(cand, uv, rng).tokens)
        s, b = s + B, b + 1
    counts = np.bincount(np.concatenate(toks), minlength=V)
    r = gof_test(counts, p)
    info = {"statistic": r.statistic, "df": r.df, "n": int(n), "largest_batch": SMALL_B,
            "tv": 0.5 * float(np.abs(counts / n - p).sum())}
    if r.impossible:
        info["reason"] = "a small batch emitted a token the target gives probability 0"
        return 0.0, info
    if r.df == 0:
        return None, info
    info["pvalue"] = r.pvalue
    return r.pvalue, info


def _cells_by_mass(p, m: int) -> np.ndarray:
    """Cell of each token (V,) int64, pooling tokens by decreasing ``p`` so that ``m`` draws expect at least
    ``MIN_EXPECTED`` in every cell (the last, short cell merged into the one before); tokens of ``p = 0`` share
    the last cell (the marginal check fails them at once)."""
    from .gof import MIN_EXPECTED

    order = np.argsort(-p, kind="stable")
    start = np.cumsum(p[order]) - p[order]
    cid = np.floor(start * m / MIN_EXPECTED).astype(np.int64)
    _, cid = np.unique(cid, return_inverse=True)
    if cid.max() > 0 and p[order][cid == cid.max()].sum() * m < MIN_EXPECTED:
        cid[cid == cid.max()] -= 1
    cells = np.empty(p.size, dtype=np.int64)
    cells[order] = cid
    return cells


def _batch_sizes(by_batch: np.ndarray, sizes, p) -> tuple[float | None, dict]:
    """The ``batch_sizes`` check: is the law of the emitted tokens the same at every batch size?  ``by_batch``
    (S, V) counts the main sample's tokens by the size class of the ``verify`` call that emitted them (row ``j``:
    calls of ``sizes[j]`` rows).  Each class is compared with the rest of the sample by a chi-square test of
    homogeneity (``scipy.stats.chi2_contingency`` on the 2 x C table of tokens pooled into cells of at least
    ``MIN_EXPECTED`` expected draws, :func:`_cells_by_mass`), Bonferroni over the classes tested:
    ``p = min(1, m * min_j p_j)``.  Catches a ``verify`` wrong only for some batch sizes (a kernel path for 9-190
    rows, a padding bug at powers of two), which the pooled marginal dilutes; a bias the same at every size is
    the marginal's (this check stays quiet on it).  ``(None, details)`` when no class could be tested."""
    from scipy import stats

    total = by_batch.sum(axis=0)
    N = int(total.sum())
    rows, worst = [], None
    for size, c in zip(sizes, by_batch):
        m = int(c.sum())
        if not m:
            continue
        row = {"rows": int(size), "n": m, "tv": 0.5 * float(np.abs(c / m - p).sum()), "df": 0, "pvalue": None}
        rows.append(row)
        rest = total - c
        if N - m <= 0:
            continue
        cells = _cells_by_mass(p, min(m, N - m))
        C = int(cells.max()) + 1
        if C < 2:
            continue
        table = np.stack([np.bincount(cells, weights=c, minlength=C), np.bincount(cells, weights=rest, minlength=C)])
        table = table[:, table.sum(axis=0) > 0]
        if table.shape[1] < 2:
            continue
        stat, pv, df, _ = stats.chi2_contingency(table, correction=False)
        row.update(df=int(df), statistic=float(stat), pvalue=float(pv))
        if worst is None or pv < worst["pvalue"]:
            worst = row
    tested = sum(1 for r in rows if r["pvalue"] is not None)
    info = {"classes": rows, "n": N, "df": sum(r["df"] for r in rows)}
    if worst is None:
        return None, info
    pv = min(1.0, tested * worst["pvalue"])
    info.update(pvalue=pv, tv=worst["tv"], statistic=worst["statistic"], df=worst["df"],
                reason=f"worst of {tested} batch sizes: verify on batches of {worst['rows']:,} rows "
                       f"({plural(worst['n'], 'draw')}) against the other sizes, Bonferroni")
    return pv, info


def _support(law) -> int:
    return int(np.count_nonzero(np.asarray(law) > 0))


def check_workers(workers) -> int:
    """``workers``: an int >= 1 (processes for the Monte Carlo draws); TypeError / ValueError otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)):
        raise TypeError(f"workers must be an integer >= 1 (processes for the Monte Carlo draws), got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1 (1 = draw in this process), got {workers}")
    return int(workers)


def parallel_draws(sampler: NodeSampler, seed_seq: np.random.SeedSequence, n: int, workers: int,
                   executor="process") -> Draws:
    """``n`` draws of ``sampler``: in this process for ``workers == 1``, else split over ``workers`` chunks.

    ``workers == 1``: ``sampler.draws(default_rng(seed_seq), n)``.  ``workers = N > 1``: part ``i`` (``n // N``
    draws, the first ``n % N`` parts one more) is drawn with ``default_rng(seed_seq.spawn(N)[i])``
    (:func:`exactness.chunks.chunk_jobs`) by ``executor`` (:mod:`exactness.executors`; default ``"process"``: a
    forked ``ProcessPoolExecutor``, so the verifier need not be picklable; where fork is missing the parts are
    drawn here, in order, giving the same draws).  The result depends only on ``seed_seq``, ``n`` and
    ``workers``.  A part that raises re-raises here (the original exception); a worker process that dies (the
    verifier ended or crashed it) is an :class:`exactness.SubjectError` naming its ``verify``: never a pass.
    ``certify_verifier`` uses :func:`exactness.chunks.mc_counts` (the same chunks, reduced to histograms in the
    workers).
    """
    from functools import partial

    from .chunks import check_chunk_results, chunk_jobs, draw_chunk
    from .executors import executor_for, subject_deaths

    jobs = chunk_jobs(seed_seq, n, workers)
    with executor_for(executor, workers=workers) as ex, \
            subject_deaths(f"{type(sampler.verifier).__name__}.verify", workers):
        parts = check_chunk_results(ex, jobs, ex.map_chunks(partial(draw_chunk, sampler), jobs),
                                    lambda d: int(np.size(d.tokens)) if isinstance(d, Draws) else None)
    return concat_draws(parts)


def _stepwise_hint(verifier) -> str:
    """The other route for a verifier that declares its steps (a refusal's last words)."""
    if not callable(getattr(verifier, "step_plan", None)):
        return ""
    return ("; this verifier declares its steps: use exactness.certify_stepwise(verifier, p, q, k, tv=...), which "
            "bounds its TV from ~ln(1/alpha)/tv draws at O(V) per visited state (docs/certify.md)")


def _check_budget(sampler: NodeSampler, n: int, workers: int = 1, sequential: bool = True) -> None:
    """Refuse up front an ``n`` over ``exactness.limits.MAX_SAMPLES`` (sequential: the draws are kept) or
    ``MAX_COUNTED`` (fixed n: only counted), or estimated (timed pilot) above ``MAX_SECONDS``."""
    limit = limits.MAX_SAMPLES if sequential else limits.MAX_COUNTED
    if n <= limits.PILOT_ABOVE and n <= limit:
        return
    pilot, per_chunk = sampler.pilot_sampler()   # the first call's recheck paid outside the timed pilot
    est = (pilot_seconds(pilot.draws, n) + per_chunk * rechecks_in(n)) / workers
    gib = n * 16 / 2**30
    if n > limit or est > limits.MAX_SECONDS:
        which = "MAX_SAMPLES" if sequential else "MAX_COUNTED"
        raise BudgetError(f"n = {n:.3g} would take ~{_hours(est)} (timed pilot of {limits.PILOT:,} draws) and "
                         f"{gib:.3g} GiB were the tokens and accepted indices kept (exactness.limits: {which} = "
                         f"{limit:,} draws, MAX_SECONDS = {_hours(limits.MAX_SECONDS)}; MAX_SAMPLES = "
                         f"{limits.MAX_SAMPLES:,} when sequential); pass a "
                         "smaller n or use tv= / exactness.samples_for_tv to plan the n you need"
                         + _stepwise_hint(sampler.verifier))


def _max_checks(exact: bool, chain_ok: bool, tree: bool, V: int, black_box: bool = False,
                generic: bool = False) -> int:
    """Most p-values Holm can count in one certificate: marginal, exact_law + joint + accepted_count + residual
    (with a chain), acceptance_bound, determinism, batched (a Verifier taking uniforms) or else batched_rows and
    small_batches (``black_box``), batch_sizes (the generic path) and the two tree checks (V <= ``TREE_MAX_V``)."""
    return (1 + (4 if exact and chain_ok else 0) + 1 + 1 + (2 if black_box else 1) + (1 if generic else 0)
            + (2 if tree and V <= TREE_MAX_V else 0))


def _acceptance_bound(mc, node, k, drafting, alpha, power, checks, skipped, details, m_max: int = 1) -> None:
    """The acceptance-bound check (``exactness.acceptance_bound``) on the draws' (stop, token) counts: its
    p-value into ``checks``, its record into ``details``, or why it cannot run into ``skipped``.  ``node``: the
    one-node ``Laws`` checked at the door (handed on, not checked again); ``m_max``: the most checks Holm can
    count, so the detectable excess is stated at ``alpha / m_max`` (Bonferroni-safe after Holm)."""
    from .acceptance_bound import ACCEPTANCE_BOUND as AB

    why = AB.skip_reason(mc.joint is not None, drafting)
    if why is None:
        res = AB.run_node(mc.joint, node, None, k, drafting, alpha, power)
        # its power is stated at alpha / (the most checks Holm can count): what the certificate itself detects
        res = replace(res, detectable_excess=AB.detectable_excess(res.n, res.bound, alpha / m_max, power))
        details[AB.name] = res.as_dict()
        if math.isinf(res.detectable_excess):
            why = f"{res.n:,} draws against alpha* = {res.bound:.4g}: no accepted count can fail the test"
        else:
            checks[AB.name] = res.pvalue
    if why is not None:
        skipped[AB.name] = why


def certify_verifier(verifier, p, q, k: int, *, n: int | None = None, alpha: float = 1e-3, seed=0,
                     power: float = 0.99, tv: float | None = None, tree: bool = True,
                     exact: bool = True, workers: int = 1, executor="process",
                     sequential: bool = False, timeout: float | None = DEFAULT_TIMEOUT) -> Certificate:
    """Certify a verifier at one node by Monte Carlo through ``verify`` plus conditional checks.

    Candidates are drawn per ``verifier.drafting`` (``"any"`` -> iid; a
    ``draft_law`` hook overrides the candidate law), ``k`` per draw.

    Parameters
    ----------
    verifier : resispec.Verifier, a torch verifier, or a black box
        A ``resispec.Verifier`` (chain, uniforms: every check); a torch
        verifier (``get_verifier(..., backend="torch")``), wrapped in
        ``resispec.torch_backend.NumpyFacade``; or any object with
        ``drafting`` ("iid", "without_replacement" or "any"; required) and
        ``verify(p, q, candidates, rng)`` taking batches -- ``p, q`` (B, V)
        float64, ``candidates`` (B, k) int64 -- and returning ``.tokens``
        (B,) int64 and ``.accepted`` (B,) int64 (the index of the emitted
        candidate, -1 for a residual token).  ``verify`` gets the keyword
        ``uniforms`` (B, k + 1) only when its signature takes it; without
        it the checks that need uniforms (``batched``) are skipped.  The
        exact checks need ``chain(p, q, candidates)`` (a
        ``resispec.Verifier``, or a callable ``chain`` with that signature);
        without one they are skipped and the verifier is a black box.
        Non-built-in verifiers receive writable copies of ``p, q`` and
        ``candidates``.
    p, q : array_like, shape (V,), float64
        Target and draft laws of one node; or ``p`` a one-node
        :class:`resispec._validation.Laws` (``as_node``) and ``q=None``,
        trusted.  Checked once here and divided by their sums
        (:func:`exactness.sampling.door_node`: a float32 or float16 law gets
        the verdict of its float64 renormalisation); every inner call gets
        the ``Laws``.
    k : int >= 1
        Candidates per node.
    n : int, optional
        Monte Carlo draws; ``None`` = default budget (``DEFAULT_N`` = 200,000,
        capped at ``GENERIC_BUDGET / (V k)`` (at least 2,000) when sampling
        costs O(V) per draw).  At most ``MAX_COUNTED`` (2**33; the draws are
        counted chunk by chunk, never kept), ``MAX_SAMPLES`` (2**27) with
        ``sequential=True`` (the draws are kept); above 2**24
        draws a timed pilot of 2,000 draws estimates the run time first and
        runs estimated over ``MAX_SECONDS`` (1 h) are refused.
    alpha : float, default 1e-3
        Family-wise level over the checks (Holm).
    seed : int, sequence of ints, SeedSequence or Generator, default 0
        Any seed :func:`exactness._checks.as_seed_sequence` takes: ``3``,
        ``[0, i]`` (run ``i`` of a study), ``numpy.random.SeedSequence(...)``.
    power : float, default 0.99
        Power used for ``detectable_tv``.
    tv : float in (0, 1], optional
        Smallest TV you require to be detected.  With ``n=None`` it PLANS
        ``n`` (:func:`exactness.budget.plan_for_tv`: ``samples_for_tv(tv, df,
        alpha, power)``, ``df`` of the pooled marginal test at that ``n``; the
        sequential budget with ``sequential=True``), times a pilot of 2,000
        draws and logs the estimated time on the ``exactness.plan`` logger
        before the long run (a WARNING above 10 s; also in ``details["plan"]``),
        and refuses (ValueError naming ``tv``) a plan over ``MAX_COUNTED`` (``MAX_SAMPLES`` if sequential)
        draws or ``MAX_SECONDS``.  With ``n`` given it only warns
        (ExactnessWarning) with the detectable TV when ``n`` is too small.
    tree : bool, default True
        Run the two-token tree checks (only when V <= ``TREE_MAX_V``).
    exact : bool, default True
        Run the exact checks when the enumeration fits (<= 300,000 tuples)
        or a built-in accept table exists.
    workers : int >= 1, default 1
        Processes for the main Monte Carlo draws (:func:`parallel_draws`:
        forked ``ProcessPoolExecutor``, worker ``i`` seeded with the ``i``-th
        ``SeedSequence`` child): the same certificate for the same seed and
        ``workers``, though not the same as another ``workers``.  The
        conditional, tree and batch checks run in this process.  A worker
        that raises, or dies (the verifier ended or crashed its process), FAILS the certificate naming the
        cause, as in one process.  Forking a process that holds a
        CUDA context is unsafe: keep ``workers=1`` for GPU verifiers.
        With another ``executor``, ``workers`` is the number of chunks
        (``SeedSequence`` children) the draws are split into.
    executor : str or exactness.executors.Executor, default "process"
        Who draws the chunks (:mod:`exactness.executors`): ``"process"``
        (the forked pool above), ``"local"`` (every chunk here, in order),
        ``"ray"`` (one Ray task per chunk: the cluster already started with
        ``ray.init``, else a local cluster of ``workers`` CPUs started and
        shut down for this call), or an
        ``Executor`` instance (e.g. ``RayExecutor(address="auto")``, kept
        open for many calls).  Each chunk comes back as histograms that are
        summed (:mod:`exactness.chunks`), so one seed and ``workers`` give
        the same certificate with every executor.
    timeout : float or None, default ``exactness.limits.DEFAULT_TIMEOUT`` (2 h)
        Hard wall-clock limit in seconds for the whole call (``0`` / None: none).
        A verifier that never returns is stopped and the certificate FAILS
        naming it (``SIGALRM``, main thread on POSIX; code stuck in one long C
        call is stopped when that call returns).  A limit already running
        around this call (``resispec certify``'s per cell) governs instead.
    sequential : bool, default False
        Test the marginal token law with the anytime-valid e-process of
        :mod:`exactness.sequential` (Ville 1939; Ramdas et al. 2023, arXiv
        2210.01948): draws come in chunks of ``n / 128`` (at least 2**14,
        chunk ``i`` seeded by the ``i``-th child of the Monte Carlo seed),
        the run stops as soon as the e-value reaches ``m / alpha``, ``m``
        the most checks Holm can count in this certificate (marginal,
        exact_law, joint, accepted_count, residual, determinism, batched or
        batched_rows and small_batches, batch_sizes, two tree checks: at most
        11), so a stop always FAILS the certificate
        at family-wise level ``alpha`` (the plan for ``tv`` uses ``alpha / m``), and
        otherwise draws the whole budget (``n``, or the sequential plan for
        ``tv``).  The marginal p-value is the anytime-valid one; its level
        holds under this optional stopping.  The other checks keep their
        fixed-n form on the draws actually made.  ``details["sequential"]``
        (shown by ``summary()``) says what was sequential; ``detectable_tv`` is the
        sequential test's at the budget.

    Optional hooks (honoured when the verifier defines them)
    ---------------------------------------------------------
    ``draft_law(q) -> (B, V)``
        The law the candidates are really drawn from (e.g. a top-k
        processed draft) while ``verify`` and ``chain`` receive ``q``;
        used by the Monte Carlo, the exact enumeration and the tree checks.
    ``bonus_law(p, q) -> (B, V)``
        The law of the bonus token after a full accept on a tree (default
        ``p``); the ``tree_bonus`` check tests it against ``p``.
    ``sample_bonus(p, q, rng) -> (B,) int64``
        The verifier's own draw of the bonus token from the next node's laws
        ``p, q`` (B, V) float64; when present, ``tree_bonus`` tests these
        draws (a black box's bonus is sampled by the black box).
    ``supported_k``
        The ``k`` values the verifier handles: ints ``(1, 2)`` or a method
        ``supported_k(k) -> bool``.  Another ``k`` raises
        :class:`exactness.sampling.UnsupportedK` (a ``ValueError``);
        ``resispec certify`` lists such a cell as skipped ("not supported").

    Returns
    -------
    Certificate
        ``checks`` maps each check that ran to its raw p-value; ``skipped``
        each check that did not run (or could not fail) to the reason;
        ``details`` holds each check's statistic / df / TV, the exact TV,
        acceptance, alpha*, sampling path, tree numbers and
        ``chain_consistency`` (TV between the sampled and the chain's exact
        joint and marginal laws).  When ``verify`` disagrees with the
        verifier's own chain, ``notes`` says so: the exact TV then describes
        ``_chain``, not ``verify``.  A ``chain`` returning NaN/inf or
        probabilities outside [0, 1] fails ``exact_law`` with the reason.

        A verifier that misbehaves FAILS, never raises: ``verify`` (or its
        ``chain``, ``draft_law``, ``sample_bonus``, ``supported_k``) raising,
        tokens of the wrong dtype or shape or outside ``[0, V)``, a run past
        ``timeout``: ``checks == {"subject": 0.0}`` and
        ``details["subject"]["error"]`` names the cause
        (:func:`exactness.certificate.subject_failure`).  A token of target
        probability 0 fails ``marginal`` at once, named with its count
        (``details["marginal"]["impossible_tokens"]``, a note).  Accepted
        indices that do not name the emitted candidate (a pipeline drafting
        its own candidates, an accept flag) are no refusal: the verifier is
        certified on the tokens it emits, ``notes`` and
        ``details["accepted_index"]`` state the cause, and the checks that
        need the accepted index are skipped with the reason.

    Raises
    ------
    ValueError, TypeError
        Bad laws, ``k``, ``n``, ``alpha``, ``timeout`` or verifier (no
        ``verify``, no ``drafting``); a marginal test left with no degrees of
        freedom by a tiny ``n``; ``n`` over the budget above;
        ``k`` outside the verifier's ``supported_k`` (``UnsupportedK``, a
        ValueError); bad ``workers``, unknown ``executor``, ray missing or
        its cluster unreachable (``exactness.executors.RayExecutor``);
        ``tv`` not a number in (0, 1] or a ``tv`` plan over ``MAX_SAMPLES`` /
        ``MAX_SECONDS`` (ValueError naming ``tv``; nothing drawn but the
        pilot); ``sequential`` not a bool.
        RuntimeError: a Ray task that could not run (``exactness.executors``).
        ``exactness._timeout.TimeLimitExceeded``: an outer time limit passed.
    """
    verifier = as_numpy_verifier(verifier)
    node = door_node(p, q)  # the one check of p, q (normalised): everything below gets the trusted Laws
    from ._checks import check_tv

    check_tv(tv)
    p2, q2, _ = node
    if p2.shape[0] != 1:
        raise ValueError(f"certify_verifier takes one node: p and q of shape (V,); got {p2.shape[0]} rows")
    node = node.row(0)
    p1, q1 = p2[0], q2[0]
    k = check_k(k)
    alpha = check_alpha(alpha)
    workers = check_workers(workers)
    from .executors import check_executor

    executor = check_executor(executor)
    ss = as_seed_sequence(seed)  # TypeError / ValueError naming seed
    s_mc, s_det, s_batch, s_tree = ss.spawn(4)
    if not isinstance(sequential, (bool, np.bool_)):
        raise TypeError(f"sequential must be True or False, got {sequential!r}")
    from ._timeout import check_timeout

    timeout = check_timeout(timeout)

    def body() -> Certificate:
        return _certify(verifier, node, k, n=n, alpha=alpha, power=power, tv=tv, tree=tree, exact=exact,
                        workers=workers, executor=executor, sequential=sequential, seeds=(s_mc, s_det, s_batch, s_tree))

    return run_subject(body, timeout=timeout, what=f"{type(verifier).__name__} (certify_verifier)", alpha=alpha,
                       power=power, details={"V": int(p1.size), "k": k}, subject=verifier)


def _certify(verifier, node, k: int, *, n, alpha, power, tv, tree, exact, workers, executor, sequential,
             seeds) -> Certificate:
    """The checks of :func:`certify_verifier` on checked arguments (``node`` a one-node ``Laws``); a misbehaving
    subject raises :class:`exactness.SubjectError`."""
    s_mc, s_det, s_batch, s_tree = seeds
    p1, q1 = node.p[0], node.q[0]
    q2 = node.q
    why = k_support(verifier, k)
    if why:
        raise UnsupportedK(f"{why}: certify it at a k it supports")
    sampler = NodeSampler(verifier, node, None, k)
    # the e-process runs at alpha / (the most checks Holm can count here): its stop is always a FAIL
    m_max = _max_checks(exact, has_chain(verifier), tree, p1.size,
                        black_box=not (isinstance(verifier, Verifier) and takes_uniforms(verifier)),
                        generic=sampler.path == "generic")
    alpha_seq = alpha / m_max if sequential else alpha
    plan = None
    if n is None and tv is not None:
        from .budget import check_planned_budget, plan_for_tv

        n, df_plan = plan_for_tv(p1, float(tv), alpha=alpha_seq, power=power, sequential=bool(sequential))
        pilot, per_chunk = sampler.pilot_sampler()
        est = check_planned_budget(pilot.draws, n, tv=float(tv), workers=workers,
                                   fixed_seconds=per_chunk * rechecks_in(n),
                                   max_samples=limits.MAX_SAMPLES if sequential else limits.MAX_COUNTED,
                                   what=type(verifier).__name__, hint=_stepwise_hint(verifier))
        plan = {"tv": float(tv), "n": n, "df": df_plan, "estimated_seconds": est, "sequential": bool(sequential)}
    n = default_n(sampler) if n is None else check_n(n)
    if plan is None:  # a tv plan was timed and checked just above
        _check_budget(sampler, n, workers, sequential=bool(sequential))
    checks: dict[str, float] = {}
    skipped: dict[str, str] = {}
    details: dict = {"path": sampler.path, "V": int(p1.size), "k": k}
    if drafting_of(verifier) == "any":         # one verifier, two candidate laws: only iid is drawn here
        skipped["without_replacement_drafts"] = ("drafting 'any': candidates were drawn iid only; set drafting = "
                                                 "'without_replacement' on the verifier and certify again to test "
                                                 "that law")
    chain_ok = has_chain(verifier)
    V = p1.size

    J = None
    if not exact:
        skipped["exact_law"] = "exact=False"
    elif not chain_ok:
        skipped["exact_law"] = "black box: no chain(p, q, candidates) (not a resispec.Verifier)"
    elif not (enumerable(verifier, q1, k) or sampler.table is not None):
        d = drafting_of(verifier)
        m = count_tuples(_support(candidate_law(verifier, q2)[0]), k, "iid" if d == "any" else d)
        skipped["exact_law"] = (f"{m:,} candidate tuples (V = {V}, k = {k}) exceed MAX_TUPLES = {MAX_TUPLES:,} "
                                "and no built-in accept table")
    else:
        try:
            ex = certify_exact(verifier, node, None, k, limit=MAX_TUPLES)
        except ChainError as e:
            checks["exact_law"] = 0.0
            details["exact"] = {"tv": None, "error": str(e)}
        except SubjectError:
            raise
        except (Exception, SystemExit) as e:    # the verifier's own chain (or hooks) failed: a FAIL naming it
            raise SubjectError(subject_cause(f"{type(verifier).__name__}.chain (exact law)", e)) from e
        else:
            J = ex.joint
            checks["exact_law"] = 1.0 if ex.passed else 0.0
            details["exact"] = {"tv": ex.tv, "acceptance": ex.acceptance, "alpha_star": ex.alpha_star,
                                "tol": exact_tol(node.p[0], node.q[0])}
    for name in ("joint", "accepted_count", "residual"):
        if J is None:
            skipped[name] = "needs the exact joint law (exact_law " + (
                "failed: chain invalid)" if "error" in details.get("exact", {}) else "not run)")

    seq = None
    if sequential:  # chunks drawn in order, the e-process looking after each; then counted as below
        from .chunks import counts_of
        from .sequential import sequential_draws

        drawn: list[Draws] = []   # kept whole here: the e-process keeps only tokens and accepted indices

        def draw(s, m):
            drawn.append(parallel_draws(sampler, s, m, workers, executor))
            return drawn[-1]

        _, seq = sequential_draws(draw, s_mc, p1, n, alpha_seq)   # its concatenation dropped: the parts are kept
        draws = concat_draws(drawn)
        n = int(draws.tokens.size)
        mc = counts_of(draws, V, k, sampler.accepted_note, len(sampler.batch_sizes))
    else:
        from .chunks import mc_counts

        mc = mc_counts(sampler, s_mc, n, workers, executor)  # histograms summed over the chunks
    counts = mc.tokens
    mc_df: dict[str, int] = {}

    def _mc(name, counts_, law_):
        res = gof_test(counts_, law_)
        m = int(counts_.sum())
        details[name] = {"statistic": res.statistic, "df": res.df, "pvalue": res.pvalue, "n": m,
                         "tv": 0.5 * float(np.abs(counts_ / m - law_).sum()) if m else None}
        mc_df[name] = res.df
        if res.df == 0 and res.impossible == 0 and _support(law_) > 1:
            skipped[name] = f"df 0 after pooling ({plural(m, 'sample')}): the test cannot fail"
        else:
            checks[name] = res.pvalue

    if mc.by_batch is not None:   # the generic path: verify called on batches of every size class
        pv, info = _batch_sizes(mc.by_batch, sampler.batch_sizes, p1)
        details["batch_sizes"] = info
        if pv is None:
            skipped["batch_sizes"] = (f"no batch size could be compared with the others ({plural(info['n'], 'draw')}"
                                      "): df 0 after pooling")
        else:
            checks["batch_sizes"] = pv
    if J is not None and mc.joint is not None:
        joint_counts = mc.joint
        by_stop = joint_counts.reshape(k + 1, V)
        _mc("joint", joint_counts, J.ravel())
        _mc("accepted_count", by_stop.sum(axis=1), J.sum(axis=1))
        rmass = J[k].sum()
        nres = int(by_stop[k].sum())
        if rmass > 0 and nres > 0:
            _mc("residual", by_stop[k].copy(), J[k] / rmass)
        else:
            skipped["residual"] = ("the chain's residual has zero mass" if rmass <= 0
                                   else "no draw ended at the residual")
        details["acceptance_mc"] = (n - nres) / n
        details["chain_consistency"] = {
            "tv_joint": 0.5 * float(np.abs(joint_counts / n - J.ravel()).sum()),
            "tv_marginal": 0.5 * float(np.abs(counts / n - J.sum(axis=0)).sum())}
    elif J is not None:
        for name in ("joint", "accepted_count", "residual"):
            skipped[name] = "verify returned no .accepted" if mc.note is None else BAD_ACCEPTED_SKIP
    _acceptance_bound(mc, node, k, drafting_of(verifier), alpha, power, checks, skipped, details, m_max)
    notes = ()
    if mc.note is not None:   # a pipeline that drafts its own candidates: certified on the tokens it emits,
        # and the broken contract is itself a FAIL (p = 0: the subject misbehaved; return only .tokens to avoid it)
        details["accepted_index"] = {"error": mc.note}
        notes = (f"certified on the tokens it emits: {mc.note}; the checks that need the accepted index "
                 "(joint, accepted_count, residual, tree checks) were skipped",)

    checks["determinism"] = _determinism(sampler, s_det)
    if sampler.guard is not None:  # the fast path's run-time recheck against verify and chain (exactness.fast_paths)
        details["fast_path_check"] = dict(sampler.guard)
    if checks["determinism"] == 0.0:
        details["determinism"] = {"reason": "the same seed gave different draws"}
    if not isinstance(verifier, Verifier):
        skipped["batched"] = "not a resispec.Verifier (needs verify(..., uniforms=)); batched_rows ran instead"
    elif not takes_uniforms(verifier):
        skipped["batched"] = "verify takes no uniforms keyword (black-box path); batched_rows ran instead"
    else:
        b, info = _batched(verifier, p1, q1, k, np.random.default_rng(s_batch))
        checks["batched"] = b
        if info:
            details["batched"] = info
    if "batched" in skipped:  # black box: rows of distinct nodes in one batch, each tested against its own law;
        # and the node on batches of 1..SMALL_B rows
        for name, (pv, info), why in (
                ("batched_rows", _batched_rows(verifier, p1, q1, k, min(n, BATCH_N),
                                               np.random.default_rng(s_batch.spawn(1)[0])), f" over {BATCH_ROWS} rows"),
                ("small_batches", _small_batches(sampler, p1, min(n, SMALL_N),
                                                 np.random.default_rng(s_batch.spawn(1)[0])), "")):
            details[name] = info
            mc_df[name] = info["df"]
            if pv is None:
                skipped[name] = f"df 0 after pooling ({plural(info['n'], 'draw')}{why})"
            else:
                checks[name] = pv
    tree_names = ("tree_bonus", "tree_two_level")
    if not tree:
        skipped.update({t: "tree=False" for t in tree_names})
    elif mc.note is not None:
        skipped.update({t: BAD_ACCEPTED_SKIP + " (a full accept leads to the bonus token)" for t in tree_names})
    elif V > TREE_MAX_V:
        skipped.update({t: f"V = {V} > TREE_MAX_V = {TREE_MAX_V}" for t in tree_names})
    else:
        rng_t = np.random.default_rng(s_tree)
        n_tree = max(1, min(n // 2, TREE_N))
        can_exact = exact and chain_ok and enumerable(verifier, q1, k) and "error" not in details.get("exact", {})
        for name, depth in (("tree_bonus", 1), ("tree_two_level", 2)):
            try:
                tr = tree_check(verifier, node, None, k, n_tree, rng_t, depth=depth, exact=can_exact)
            except ChainError as e:
                checks[name] = 0.0
                details[name] = {"exact_tv": None, "error": str(e)}
                continue
            except SubjectError:
                raise
            except (Exception, SystemExit) as e:    # its hooks (sample_bonus, bonus_law) or chain failed: a FAIL
                raise SubjectError(subject_cause(f"{type(verifier).__name__} (the {name} check)", e)) from e
            details[name] = {"exact_tv": tr.exact_tv, "pvalue_mc": tr.pvalue, "n": tr.n, "statistic": tr.statistic,
                             "df": tr.df, "tv_mc": tr.tv_mc}
            mc_df[name] = tr.df
            if tr.exact_tv is not None:
                checks[name] = tr.pvalue if tr.exact_tv < 2 * exact_tol(node.p[0], node.q[0]) else 0.0
                if tr.df == 0:
                    details[name]["reason"] = "Monte Carlo part has df 0; exact part tested"
            elif tr.df == 0 and tr.pvalue > 0:   # p = 0 at df 0: an impossible pair was drawn, a FAIL
                skipped[name] = f"no exact law and df 0 after pooling ({plural(tr.n, 'pair')}): the test cannot fail"
            else:
                checks[name] = tr.pvalue
        if not can_exact:
            skipped["tree_exact"] = "tree checks ran by Monte Carlo only (no enumerable chain)"
    if plan is not None:
        details["plan"] = plan
    if seq is not None:
        from .sequential import sequential_certificate

        cert = sequential_certificate(counts, p1, seq, alpha=alpha, power=power, tv=tv, checks=checks,
                                      details=details, skipped=skipped)
    else:
        cert = certificate_from_counts(counts, p1, alpha=alpha, power=power, tv=tv, checks=checks,
                                       details=details, skipped=skipped)
    mc_df["marginal"] = cert.df
    cert.details["mc_df"] = mc_df
    if cert.details["marginal"].get("impossible_tokens") and cert.checks.get("marginal", 0.0) > 0.0:
        cert = _fail_check(cert, "marginal")    # one impossible token fails at once, whatever the test around it
    if mc.note is not None:    # accepted indices that do not name the candidates: the subject broke its contract
        cert = _fail_check(cert, "accepted_index")   # (a FAIL; a pipeline drafting its own returns only .tokens)
    chain_note = _notes(cert)
    if chain_note:   # what the report's "exact TV*" marks (other notes do not)
        cert.details["verify_disagrees_with_chain"] = True
    return replace(cert, notes=cert.notes + notes + chain_note)


#: Reason a check needing the accepted index was skipped when ``verify``'s accepted indices broke their contract.
BAD_ACCEPTED_SKIP = "verify's accepted indices do not name its candidates (see notes): not usable"


def _fail_check(cert: Certificate, name: str) -> Certificate:
    """``cert`` with check ``name`` at p = 0 and the verdict recomputed: a deterministic failure (an impossible
    token was emitted: ``marginal``; accepted indices that break their contract: ``accepted_index``)."""
    from .certificate import holm

    checks = dict(cert.checks, **{name: 0.0})
    pmin = min(holm(checks).values())
    return replace(cert, checks=checks, pvalue=float(pmin), passed=bool(pmin >= cert.alpha))


def _notes(cert: Certificate) -> tuple:
    """Say when ``verify`` disagrees with the verifier's own chain (the exact TV then describes ``_chain``)."""
    ex = cert.details.get("exact", {})
    cc = cert.details.get("chain_consistency")
    if cc is None or ex.get("tv") is None:
        return ()
    failed = set(cert.failed_checks())
    mc = failed & {"marginal", "joint", "accepted_count", "residual"}
    if not mc or "exact_law" in failed:
        return ()
    return (f"verify disagrees with the verifier's own chain: the sampled (stop, token) law is TV "
            f"{cc['tv_joint']:.3g} from the chain's exact joint law (output law: TV {cc['tv_marginal']:.3g}), "
            f"failing {', '.join(sorted(mc))}; the exact TV {ex['tv']:.2g} describes _chain, not verify",)
