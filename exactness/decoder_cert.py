"""``certify_decoder``: certify a whole speculative decoder end to end (the contract and every check:
:mod:`exactness.decoder`).

The plan, in one direction: the door (arguments, the exact joint laws, ``n``), the main draw
(:mod:`exactness.decoder`), the checks of :data:`exactness.decoder_checks.DECODER_CHECKS` in table order on a
shared :class:`~exactness.decoder_checks.DecoderRun`, the certificate (Holm over every p-value, the main check's
numbers, the scope of each stated detectable TV).
"""

from __future__ import annotations

import warnings

import numpy as np

from ._checks import (BudgetError, ExactnessWarning, SubjectError, as_generator, check_alpha, check_n, check_tv,
                      seed_copy)
from ._timeout import (TimeLimitExceeded, check_timeout, hard_limit, out_of_time, run_deadline,
                       time_limit as _time_limit)
from . import decoder as D
from .certificate import Certificate, holm, stopped_call, subject_failure
from .limits import DEFAULT_TIME_LIMIT
from .decoder import (DEFAULT_TV, PIT_BINS, POWER, _check_prompts, _default_n, _draw_mixed,
                      _events_mode, _plan_mode, _sampler, _scope, _Target, _Ticker, joint_law, joint_tokens, n_text)
from .decoder_checks import DecoderRun, run_checks
from .gof import pool_cells


def _read_hooks(decoder) -> None:
    """Read the decoder's optional hooks once (``exactness.protocols.HOOKS``, kind ``decoder``): an attribute whose
    reading raises (a property, ``__getattr__``) is a :class:`SubjectError` naming it, a FAIL, not a traceback from
    wherever the harness reads it first.  ``gamma`` and ``kernel_plan`` are not read here: the checks read them
    once, guarded, where they use them (a value that changes between reads is then never read twice)."""
    from ._checks import subject_call

    reads = (("sample", lambda: getattr(decoder, "sample", None)),
             ("sample_events", lambda: getattr(decoder, "sample_events", None)),
             ("rule", lambda: getattr(decoder, "rule", None)),
             ("draft_law", lambda: getattr(decoder, "draft_law", None)),
             ("events_q", lambda: getattr(decoder, "events_q", None)),
             ("per_row_rng", lambda: getattr(decoder, "per_row_rng", None)),
             ("plan_collector", lambda: getattr(decoder, "plan_collector", None)),
             ("no_events_reason", lambda: getattr(decoder, "no_events_reason", None)))
    for name, read in reads:
        subject_call(read, f"reading decoder.{name}")


def certify_decoder(decoder, target, prompts, *, new_tokens: int = 2, n: int | None = None, tv: float | None = None,
                    alpha: float = 1e-3, seed=0, seeded: bool | None = None,
                    time_limit: float | None = DEFAULT_TIME_LIMIT, progress=False) -> Certificate:
    """Certify that a speculative decoder emits exactly the target's law, token after token.

    Parameters
    ----------
    decoder : callable or object with ``sample``
        ``decoder(prompt (L,) int64, new_tokens, rng) -> (new_tokens,) int64``, or
        ``decoder.sample(prompts (B, L) int64, new_tokens, rng) -> (B, new_tokens) int64``
        (preferred: the harness then draws heterogeneous batches).  Optional
        ``decoder.draft_law(contexts (B, L)) -> (B, V)``: the draft law it reports to its verifier
        (enables the ``ratio`` order).  Every random number must come from ``rng``.  Each call gets
        its own copy of the prompt rows: a decoder that writes into them cannot change what the harness
        reads back (the verdict is on what it emits).
        Optional ``decoder.sample_events(prompts, new_tokens, rng) -> (tokens (B, m) int64,
        DecoderEvents)`` with ``decoder.rule`` (a registry verifier name): the conditional checks
        (:mod:`exactness.decoder_events`).  Optional ``decoder.per_row_rng = True``: ``sample``
        accepts a list of B Generators (one per row): the ``batch_rows`` check.
    target : callable
        ``target(contexts (B, L') int64) -> (B, V) float64``: the target's next-token law after its
        sampling processors (temperature, top-k, top-p); rows sum to 1.
    prompts : array_like, shape (P, L), int64
        Prompts of equal length; certified per prompt and pooled.
    new_tokens : int >= 1, default 2
        Tokens per continuation; the PIT checks cover every position, the joint check the first ``m``:
        the largest ``m <= min(new_tokens, JOINT_TOKENS)`` with ``V^m <= JOINT_MAX`` (V = 100: 3, V = 128: 2,
        V > 1,000,000: none).
    n : int, optional
        Continuations per prompt (``Certificate.n`` and the summary's ``n`` are the pooled total ``P n``).
        Default: the ``n`` at which the joint test (or, when nothing
        enumerates, each PIT check) detects TV ``tv`` (default ``DEFAULT_TV`` = 0.02) with power 0.99
        at ``alpha`` (``exactness.samples_for_tv`` with df = V^m - 1).
    tv : float, optional
        TV to detect; warns (:class:`ExactnessWarning`) when ``n`` is too small for it.
    alpha : float, default 1e-3
        Family-wise level over all checks (Holm).
    seed : int or SeedSequence, default 0
    seeded : bool or None, default None
        ``True``: the decoder must reproduce its output under a fixed seed (``ValueError`` if
        it does not); ``None``: probe it, and skip the ``seeded`` check with the reason if it
        does not; ``False``: do not probe.
    time_limit : float or None, default ``DEFAULT_TIME_LIMIT`` (3,600 s)
        Wall-clock limit of the whole run in seconds (0 or None: none).  Past it no new call of the decoder
        starts and the run ends with a ``BudgetError`` (the caller's limit: no verdict); a call still running
        ``exactness._timeout.hard_limit(time_limit)`` = ``time_limit + max(10, time_limit)`` seconds into the run
        is stopped (``SIGALRM``: main thread, POSIX; elsewhere no limit) and is a hang: a FAIL certificate naming
        it.
    progress : bool or str, default False
        Progress on stderr of each phase that runs over ``PROGRESS_AFTER`` seconds (``True``: a bar on a
        terminal, else a line every ~10 s; or a mode of ``exactness._progress.Progress``).

    Returns
    -------
    Certificate
        ``passed``, ``pvalue`` (smallest Holm-adjusted), ``checks`` (name -> raw p-value),
        ``details`` (per check: statistic, df, TV, detectable TV, n; ``details["positions"]``:
        per position the smallest PIT p-value and the detectable TV; ``details["scope"]``: which
        law each detectable TV is of), ``n`` (continuations in all, pooled over prompts: ``P x n``; the
        first note says ``"n = 150,000 continuations (50,000 per prompt x 3 prompts)"``), ``alpha``,
        ``detectable_tv`` (of the main test only: the joint law of the first ``joint_tokens``
        tokens, else the 16-bin PIT law of token 1), ``skipped`` (check -> reason).

        A misbehaving decoder is a FAIL certificate (``passed`` False, check ``subject`` at p = 0,
        ``details["subject"]["error"]`` the cause), never an exception: it raised, returned the
        wrong dtype or shape, ids outside [0, V), a token of target probability 0 (the token, its
        prompt and prefix and the count are named; ``details["impossible"]``), events inconsistent
        with its tokens, ``sample_events`` tokens other than ``sample``'s, a ``per_row_rng``
        ``sample`` failing on a list of rngs, it called ``sys.exit`` (the cause reads ``"decoder.sample(prompts,
        new_tokens, rng) called sys.exit(2)"``), or a call of it had not returned ``time_limit + max(10,
        time_limit)`` seconds into the run.

    Raises
    ------
    TypeError, ValueError
        The caller's input: bad prompts (not (P, L) integers, unequal lengths, ids outside [0, V)),
        a target that raises or returns rows of the wrong shape, V or not normalised, bad
        ``new_tokens`` / ``n`` / ``alpha`` / ``time_limit``, ``n`` too small for any degree of
        freedom; ``seeded=True`` and a decoder that ignores its seed; a ``decoder.rule`` that names
        no registry verifier.
    exactness.budget.BudgetError
        (a ValueError) ``time_limit`` passed with no call of the decoder hung: the run needs more time.
    """
    alpha = check_alpha(alpha)
    limit = check_timeout(time_limit, name="time_limit")
    from ._progress import progress_mode

    tick = _Ticker(progress_mode(progress))
    hard = None if limit is None else hard_limit(limit)     # a call still running then is a hang
    try:
        with run_deadline(limit), _time_limit(hard):           # past limit no new call starts: RunOutOfTime
            _read_hooks(decoder)
            return _certify(decoder, target, prompts, new_tokens, n, tv, alpha, seed, seeded, tick)
    except SubjectError as exc:
        return subject_failure(exc.cause, alpha=alpha, power=POWER, main="subject",
                               details=dict(getattr(exc, "details", None) or {}))
    except TimeLimitExceeded as exc:                           # RunOutOfTime too: past the limit, no new call
        what = stopped_call(exc)
        if what is None:                                       # every call returned: the caller's limit, no verdict
            raise BudgetError(out_of_time(limit, "time_limit / --time-limit")) from None
        if what == "target(contexts)":                         # the target is the caller's input, as when it raises
            raise ValueError(f"target(contexts) did not return, still running {hard:g} s into the run (time_limit = "
                             f"{limit:g} s plus a grace of {hard - limit:g} s): the target hangs") from None
        return subject_failure(f"time_limit = {limit:g} s passed: {what} did not return, still running {hard:g} s "
                               f"into the run (the limit plus a grace of {hard - limit:g} s: a decoder that hangs)",
                               alpha=alpha, power=POWER, details={"time_limit": {"seconds": limit, "running": what}})
    finally:
        tick.close()


def _certify(decoder, target, prompts, new_tokens, n, tv, alpha, seed, seeded, tick) -> Certificate:
    """The body of :func:`certify_decoder` (arguments as there; ``tick`` a ``_Ticker``): the door, the main
    draw, the checks of :data:`exactness.decoder_checks.DECODER_CHECKS` in order, the certificate."""
    prompts = _check_prompts(prompts)
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, (int, np.integer)) or new_tokens < 1:
        raise ValueError(f"new_tokens must be an integer >= 1, got {new_tokens!r}")
    m = int(new_tokens)
    alpha = check_alpha(alpha)
    tv = check_tv(tv)
    if n is not None:
        n = check_n(n)
    if seeded not in (None, True, False):
        raise ValueError(f"seeded must be None, True or False, got {seeded!r}")
    draw, batched = _sampler(decoder)
    tgt = _Target(target)
    P = prompts.shape[0]
    V = tgt(prompts[:1]).shape[1]
    if prompts.size and prompts.max() >= V:
        raise ValueError(f"prompts hold token id {int(prompts.max())}, outside the target's vocabulary [0, {V})")
    ss = _seed_sequence(seed)
    r_main, r_single, r_pit, r_seed, r_cond, r_small = [np.random.default_rng(s) for s in ss.spawn(6)]
    ev_fn, ev_skip = _events_mode(decoder)

    mj = joint_tokens(V, m)
    goal = DEFAULT_TV if tv is None else float(tv)
    if mj:
        tick.phase("enumerating the exact joint law", P, "prompt")
    laws = []
    for i in range(P if mj else 0):
        tick.step(f"prompt {i + 1} of {P}")
        laws.append(joint_law(tgt, prompts[i], mj))
    if n is None:
        n = _default_n(laws, goal, alpha)
    _check_budget(laws, n, P, m, mj, goal, tv)

    plan_col, plan_skip = _plan_mode(decoder, np.random.default_rng(ss.spawn(1)[0]), V)
    if plan_col is not None:
        decoder.plan_collector = plan_col     # the main draw only: the probes repeat seeds (not independent)
    try:
        seqs, flat, places = _draw_mixed(draw, batched, prompts, n, m, r_main, V, events=ev_fn, tick=tick)
    finally:
        if plan_col is not None:
            decoder.plan_collector = None
    st = DecoderRun(decoder=decoder, draw=draw, batched=batched, tgt=tgt, prompts=prompts, m=m, mj=mj, V=V, n=n,
                    alpha=alpha, laws=laws, seqs=seqs, flat=flat, places=places,
                    rng={"single": r_single, "pit": r_pit, "cond": r_cond, "small": r_small},
                    seed=int(ss.generate_state(1)[0]), ev_fn=ev_fn, ev_skip=ev_skip, plan_col=plan_col,
                    plan_skip=plan_skip, seeded=seeded, tick=tick)
    if P == 1:
        st.notes.append("one prompt: batches are homogeneous, so row-mixing bugs cannot show; pass several prompts")
    run_checks(st)
    return _certificate(st, tv)


def _seed_sequence(seed) -> np.random.SeedSequence:
    """``seed`` (int, SeedSequence or Generator) as the SeedSequence every stream of the run is spawned from."""
    if isinstance(seed, np.random.SeedSequence):
        return seed_copy(seed)                        # the caller's object is not spawned from: same seed, same run
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int(seed.integers(2**63)))
    as_generator(seed)  # TypeError / ValueError naming seed
    return np.random.SeedSequence(seed)


def _check_budget(laws, n, P, m, mj, goal, tv) -> None:
    """Refuse before the first draw: more tokens than the certificate may keep (``MAX_DECODER_TOKENS``), or an
    ``n`` that leaves the main check no degree of freedom after pooling (it depends on ``n`` and the laws only;
    new_tokens = 2000 at n = 2 would sample for seconds, 20,000 for minutes, before refusing)."""
    if n * P * m > D.MAX_DECODER_TOKENS:        # the drawn tokens are kept: refuse before a draw, not an OOM
        from .budget import BudgetError, count_text

        raise BudgetError(f"{'tv = ' + format(goal, 'g') + ' needs ' if tv is not None else ''}n = {count_text(n)} "
                          f"continuations per prompt x {P} prompt(s) x {m} new tokens, over the "
                          f"{D.MAX_DECODER_TOKENS:,} tokens (8 bytes each) the certificate may keep "
                          "(exactness.decoder.MAX_DECODER_TOKENS); ask for a larger tv (n grows like 1/tv^2), "
                          "fewer prompts or new_tokens, or a smaller n")
    main_df = (sum(int(pool_cells(n * law).max()) for law in laws) if mj
               else int(pool_cells(np.full(PIT_BINS, n * P / PIT_BINS)).max()))
    if main_df <= 0 and mj and all(np.count_nonzero(law) <= 1 for law in laws):   # no n can help here
        raise ValueError("the target is deterministic at every prompt (one continuation of positive probability "
                         "each: greedy, top-k 1 or temperature 0), so no sampling test has a degree of freedom "
                         "whatever n; certify_decoder needs a target with at least two continuations per prompt "
                         "(sample at temperature > 0, top-k > 1), or compare the decoder's output with the one "
                         "continuation directly")
    if main_df <= 0:
        raise ValueError(f"n = {n:,} continuations per prompt are too few: the main check "
                         f"{'joint' if mj else 'pit[1,id]'} has no degree of freedom after pooling, so the "
                         "certificate would pass without testing anything; raise n (n=None plans it for a "
                         f"detectable TV of {DEFAULT_TV:g})")


def _certificate(st, tv) -> Certificate:
    """The certificate of a run whose checks are done: Holm over every p-value, the main check's numbers, the
    power warnings and the scope (``st`` an ``exactness.decoder_checks.DecoderRun``)."""
    n, m, mj, P, details, notes = st.n, st.m, st.mj, st.P, st.details, st.notes
    main = "joint" if mj else "pit[1,id]"
    md = details[main]
    det = md["detectable_tv"]
    if md["df"] == 0:
        raise ValueError(f"n = {n:,} continuations per prompt are too few: the main check {main} has no degree of "
                         "freedom after pooling, so the certificate would pass without testing anything; raise n "
                         f"(n=None plans it for a detectable TV of {DEFAULT_TV:g})")
    if det >= 1:
        notes.append(f"no power: the detectable TV of {main} at n = {n:,} is {det:.3g} >= 1 (power {POWER:g}); "
                     "a pass here is no evidence of exactness")
        warnings.warn(f"certify_decoder has no power at n = {n:,} continuations per prompt (detectable TV of {main} "
                      f"{det:.3g} >= 1): a pass is no evidence; raise n", ExactnessWarning, stacklevel=4)
    elif tv is not None and det > tv:
        warnings.warn(f"too few samples for the requested power: with n = {n:,} continuations per prompt the "
                      f"detectable TV of {main} at alpha = {st.alpha:g} and power {POWER:g} is {det:.3g} > "
                      f"requested {tv:.3g}", ExactnessWarning, stacklevel=4)
    adj = holm(st.checks)
    pmin = float(min(adj.values()))
    details["plan"] = {"new_tokens": m, "joint_tokens": mj, "V": st.V, "prompts": P, "n_per_prompt": n,
                       "pit_bins": PIT_BINS, "orders": st.orders, "batched": st.batched}
    details["scope"] = _scope(details, m, mj, det, st.orders)
    notes.append(details["scope"]["note"])
    if P > 1:                                 # which n is which: Certificate.n (the summary's) is the pooled total
        notes.insert(0, n_text(n, P))
    return Certificate(passed=bool(pmin >= st.alpha), statistic=float(md["statistic"]), pvalue=pmin,
                       tv_estimate=float(md.get("tv", 0.0)), tv_upper=float(md.get("tv_upper", 1.0)),
                       detectable_tv=float(det), n=int(n * P), alpha=st.alpha, power=POWER, df=int(md["df"]),
                       g_statistic=float(md["g_statistic"]), g_pvalue=float(md["g_pvalue"]), checks=st.checks,
                       details=details, skipped=st.skipped, notes=tuple(notes), main=main)
