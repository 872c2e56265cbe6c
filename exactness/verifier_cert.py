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

from dataclasses import replace

import numpy as np

from resispec._validation import check_k

from ._checks import as_seed_sequence, check_alpha, check_n
from . import limits
from .certificate import Certificate, _hours, certificate_from_counts, pilot_seconds, run_subject
from .limits import DEFAULT_TIMEOUT  # the keyword default (bound at definition)
from ._timeout import RunOutOfTime
from .budget import BudgetError
from .sampling import (Draws, NodeSampler, UnsupportedK, as_numpy_verifier, concat_draws, door_node, drafting_of,
                       has_chain, k_support, rechecks_in)
# the checks and their constants live in exactness.node_checks (re-exported: docs and tests name them here)
from .node_checks import (BAD_ACCEPTED_SKIP, BATCH_N, BATCH_ROWS, NODE_CHECKS, SMALL_B, SMALL_N,  # noqa: F401
                          TREE_MAX_V, TREE_N, NodeRun, _batched_rows, _is_coupled)

#: Default Monte Carlo draws per node.
DEFAULT_N = 200_000
#: Cap on draws x V x k for verifiers sampled through the generic (O(V)) path.
GENERIC_BUDGET = 40_000_000


def default_n(sampler: NodeSampler) -> int:
    """Default budget: ``DEFAULT_N`` draws, capped for the generic path at large V."""
    if sampler.path != "generic":
        return DEFAULT_N
    return int(max(2_000, min(DEFAULT_N, GENERIC_BUDGET // (sampler.V * sampler.k))))


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
    p1 = p2[0]
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


def _monte_carlo(sampler: NodeSampler, s_mc, p1, n: int, alpha_seq: float, workers, executor, sequential):
    """The main sample: ``(counts, sequential record or None)``.  Sequential: chunks drawn in order, the e-process
    (``exactness.sequential``) looking after each at ``alpha_seq``; fixed ``n``: histograms summed over the chunks
    (``exactness.chunks.mc_counts``)."""
    if not sequential:
        from .chunks import mc_counts

        return mc_counts(sampler, s_mc, n, workers, executor), None
    from .chunks import counts_of
    from .sequential import sequential_draws

    drawn: list[Draws] = []   # kept whole here: the e-process keeps only tokens and accepted indices

    def draw(s, m):
        drawn.append(parallel_draws(sampler, s, m, workers, executor))
        return drawn[-1]

    _, seq = sequential_draws(draw, s_mc, p1, n, alpha_seq)   # its concatenation dropped: the parts are kept
    return counts_of(concat_draws(drawn), sampler.V, sampler.k, sampler.accepted_note,
                     len(sampler.batch_sizes)), seq


def _certify(verifier, node, k: int, *, n, alpha, power, tv, tree, exact, workers, executor, sequential,
             seeds) -> Certificate:
    """The checks of :func:`certify_verifier` on checked arguments (``node`` a one-node ``Laws``); a misbehaving
    subject raises :class:`exactness.SubjectError`."""
    s_mc, s_det, s_batch, s_tree = seeds
    p1 = node.p[0]
    why = k_support(verifier, k)
    if why:
        raise UnsupportedK(f"{why}: certify it at a k it supports")
    sampler = NodeSampler(verifier, node, None, k)
    # the e-process runs at alpha / (the most checks Holm can count here): its stop is always a FAIL
    m_max = _max_checks(exact, has_chain(verifier), tree, p1.size,
                        black_box=not _is_coupled(verifier),
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
    st = NodeRun(verifier, node, k, sampler, n, alpha, power, exact, tree,
                 {"det": s_det, "batch": s_batch, "tree": s_tree}, m_max)
    st.details.update({"path": sampler.path, "V": int(p1.size), "k": k})
    if drafting_of(verifier) == "any":         # one verifier, two candidate laws: only iid is drawn here
        st.skipped["without_replacement_drafts"] = ("drafting 'any': candidates were drawn iid only; set drafting "
                                                    "= 'without_replacement' on the verifier and certify again to "
                                                    "test that law")
    for check in NODE_CHECKS:                  # the exact law (no draws)
        check.before(st)
    st.mc, seq = _monte_carlo(sampler, s_mc, p1, n, alpha_seq, workers, executor, sequential)
    st.n = n = int(st.mc.tokens.sum())
    notes = ()
    if st.mc.note is not None:   # a pipeline that drafts its own candidates: certified on the tokens it emits,
        # and the broken contract is itself a FAIL (p = 0: the subject misbehaved; return only .tokens to avoid it)
        st.details["accepted_index"] = {"error": st.mc.note}
        notes = (f"certified on the tokens it emits: {st.mc.note}; the checks that need the accepted index "
                 "(joint, accepted_count, residual, tree checks) were skipped",)
    try:
        for check in NODE_CHECKS:              # every check on the draws, in table order
            check.run(st)
    except RunOutOfTime as exc:                # the caller's deadline: what already convicts still does
        return _convicted_before_the_deadline(st, p1, alpha, power, tv, exc, seq)
    counts, checks, skipped, details, mc_df = st.mc.tokens, st.checks, st.skipped, st.details, st.mc_df
    if plan is not None:
        details["plan"] = plan
    if seq is not None:
        from .sequential import sequential_certificate

        cert = sequential_certificate(counts, p1, seq, alpha=alpha, power=power, tv=tv, checks=checks,
                                      details=details, skipped=skipped)
    else:
        try:
            cert = certificate_from_counts(counts, p1, alpha=alpha, power=power, tv=tv, checks=checks,
                                           details=details, skipped=skipped)
        except BudgetError as exc:            # too few draws for the marginal test: a refusal of the caller's n ...
            if checks.get("exact_law") != 0.0:
                raise
            cert = _convicted_without_marginal(counts, p1, alpha, power, checks, details, skipped, str(exc))
    mc_df["marginal"] = cert.df
    cert.details["mc_df"] = mc_df
    if cert.details["marginal"].get("impossible_tokens") and cert.checks.get("marginal", 0.0) > 0.0:
        cert = _fail_check(cert, "marginal")    # one impossible token fails at once, whatever the test around it
    if st.mc.note is not None:   # accepted indices that do not name the candidates: the subject broke its contract
        cert = _fail_check(cert, "accepted_index")   # (a FAIL; a pipeline drafting its own returns only .tokens)
    chain_note = _notes(cert)
    if chain_note:   # what the report's "exact TV*" marks (other notes do not)
        cert.details["verify_disagrees_with_chain"] = True
    return replace(cert, notes=cert.notes + notes + chain_note)


def _convicted_before_the_deadline(st, p1, alpha, power, tv, exc, seq=None) -> Certificate:
    """A run's soft deadline (``exactness._timeout.run_deadline``) passed during the checks, after the main sample:
    the checks done so far, with the main sample's marginal test (the e-process's p-value under ``--sequential``,
    valid under its optional stopping), still convict when one of them is below ``alpha / m`` (Bonferroni over
    ``m`` = every check Holm could count here, so stopping early never makes a FAIL easier); else ``exc`` is raised
    again (nothing decided: NOT RUN)."""
    if exc.first is not None:                  # an alarm the subject swallowed before: a hang, not a deadline
        raise exc
    kw = dict(alpha=alpha, power=power, tv=tv, checks=dict(st.checks), details=dict(st.details),
              skipped=dict(st.skipped))
    try:
        if seq is not None:
            from .sequential import sequential_certificate

            cert = sequential_certificate(st.mc.tokens, p1, seq, **kw)
        else:
            cert = certificate_from_counts(st.mc.tokens, p1, **kw)
    except BudgetError:
        raise exc from None
    if not cert.checks or min(cert.checks.values()) * st.m_max >= alpha:
        raise exc
    note = (f"the run's time limit stopped the checks after {', '.join(cert.checks)}; the rest did not run, and "
            f"this FAIL rests on these alone (p < alpha / {st.m_max}, Bonferroni over every check)")
    return replace(cert, passed=False, notes=cert.notes + (note,))


def _convicted_without_marginal(counts, p1, alpha, power, checks, details, skipped, why: str) -> Certificate:
    """... unless the exact law already convicts the verifier (no draws needed): a FAIL whatever ``n``, the marginal
    test listed as skipped with ``why`` (its counts pooled into no degree of freedom)."""
    cert = certificate_from_counts(counts, p1, alpha=alpha, power=power, checks=checks, details=details,
                                   skipped=skipped, min_expected=1e-12)          # only to fill the record's fields
    rest = {k: v for k, v in cert.checks.items() if k != "marginal"}
    return replace(cert, checks=rest, pvalue=0.0, passed=False, skipped={**cert.skipped, "marginal": why})


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
