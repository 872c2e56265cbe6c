"""Certify outputs already collected (e.g. from a GPU kernel run elsewhere): ``certify_counts``, ``certify_samples``.

No verifier is called here: the tests use only what was recorded.

``marginal``
    Chi-square / G-test of the emitted tokens against the target ``p``
    (:mod:`exactness.gof` pooling), with the detectable TV stated, as
    :func:`exactness.certify_sampler`.
``acceptance_bound``
    Needs the accepted indices (or counts by stop position) and ``q``, the law
    the candidates were drawn from.  No exact verifier accepts a candidate
    more often than alpha* (``resispec.optimal_acceptance``; the maximal
    coupling bound, ``docs/RESISPEC.md`` section 5, Sun et al. 2023, arXiv
    2310.15141): one-sided exact binomial test (``scipy.stats.binomtest``,
    ``alternative="greater"``) of the number accepted against alpha*.
``candidate_support``
    Deterministic: a token emitted as an accepted candidate must lie in the
    support of ``q`` (p = 0 when one does not).
``candidates``
    Needs the candidates and ``q``: the drafts follow ``q`` (iid drafting: all
    ``n k`` candidates; without replacement: the first candidate of each
    draw), pooled chi-square.  Catches drafts made another way than the ``q``
    handed to the verifier (e.g. argmax drafts with raw draft logits as q).

What needs the verifier's own rule (the law of the stop position, of the
residual token, the exact law) cannot be tested from outputs alone; it is
listed in ``Certificate.skipped`` with the reason, never passed in silence.
"""

from __future__ import annotations

import numpy as np

from resispec._validation import check_k

from ._checks import check_alpha, check_tv, plural
from .certificate import Certificate, certificate_from_counts, subject_failure
from .gof import MIN_EXPECTED, gof_test
from .sampling import accepted_problem, door_law

_NEEDS_CHAIN = "outputs only: needs the verifier's own rule (use exactness.certify_verifier)"


#: Most samples ``certify_counts`` takes (2**53: counts summed and tested in float64 stay exact below it); a larger
#: total is an overflow (int64 sums wrap past 9.2e18), never data.
MAX_COUNT_TOTAL = 2**53


def _int_array(x, name: str) -> np.ndarray:
    """``x`` as int64, or TypeError / ValueError naming ``name``: non-integers (floats, bools, objects) and values
    int64 cannot hold (a uint64 or Python int past 2**63 - 1) are refused, never wrapped."""
    if isinstance(x, (str, bytes)) or x is None:
        raise TypeError(f"{name} must be an integer array, got {type(x).__name__}")
    try:
        a = np.asarray(x)
    except OverflowError as exc:
        raise ValueError(f"{name} holds an integer too large for int64 ({exc}): an overflowed count") from None
    if a.dtype == object and a.size and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                            for v in a.ravel()):
        big = [int(v) for v in a.ravel() if not -2**63 <= int(v) < 2**63]
        if big:
            raise ValueError(f"{name} holds {big[0]:.4g}, beyond int64 (2**63 - 1 = 9.2e18): an overflowed count")
        a = a.astype(np.int64)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        kind = {"f": "floats", "c": "complex numbers", "b": "booleans"}.get(a.dtype.kind, "non-integers")
        raise TypeError(f"{name} must hold integers (int64), got {kind} (dtype {a.dtype}); "
                        + ("use numpy.bincount(tokens, minlength=V) for counts" if name == "counts"
                           else "pass token ids / indices, not probabilities or flags"))
    if a.dtype == np.uint64 and a.size and int(a.max()) >= 2**63:
        raise ValueError(f"{name} holds {int(a.max()):.4g} (uint64), beyond int64 (2**63 - 1 = 9.2e18): an "
                         "overflowed (wrapped) count")
    return a.astype(np.int64, copy=False)


def _check_drafting(drafting) -> str:
    if drafting not in ("iid", "without_replacement"):
        raise ValueError(f"drafting must be 'iid' or 'without_replacement' (how the candidates were drawn), "
                         f"got {drafting!r}")
    return drafting


def _certify(joint: np.ndarray | None, marg: np.ndarray, p, q, k, drafting, alpha, power, tv, min_expected,
             candidates=None, accepted_note: str | None = None) -> Certificate:
    """Marginal test plus the chain-free checks; ``joint`` (k + 1, V) counts by stop position or None;
    ``accepted_note``: why the recorded accepted indices were unusable (the tokens are certified alone)."""
    from scipy import stats

    checks: dict[str, float] = {}
    details: dict = {}
    notes = ()
    skipped: dict[str, str] = {name: _NEEDS_CHAIN for name in ("exact_law", "joint", "accepted_count", "residual")}
    if accepted_note is not None:   # a pipeline drafting its own candidates: certified on the tokens it emitted
        details["accepted_index"] = {"error": accepted_note}
        checks["accepted_index"] = 0.0     # the recorded indices break their contract: a FAIL (the subject misbehaved)
        notes = (f"certified on the emitted tokens: {accepted_note}; the checks that need the accepted index were "
                 "skipped",)
        for name in ("acceptance_bound", "candidate_support"):
            skipped[name] = "the accepted indices do not name the recorded candidates (see notes): not usable"
    elif joint is not None and q is not None:
        import resispec

        n = int(joint.sum())
        n_acc = int(joint[:k].sum())
        a_star = float(resispec.optimal_acceptance(p, q, k, drafting=drafting))
        res = stats.binomtest(n_acc, n, min(a_star, 1.0), alternative="greater")
        checks["acceptance_bound"] = float(res.pvalue)
        details["acceptance_bound"] = {"acceptance": n_acc / n, "alpha_star": a_star, "n": n,
                                       "pvalue": float(res.pvalue),
                                       "reason": f"acceptance {n_acc / n:.4g} over {n:,} draws vs alpha* {a_star:.4g}"}
        off = np.flatnonzero((joint[:k].sum(axis=0) > 0) & (q <= 0))
        checks["candidate_support"] = 0.0 if off.size else 1.0
        if off.size:
            details["candidate_support"] = {"reason": f"tokens {off[:5].tolist()} were emitted as accepted "
                                                      "candidates but have q = 0 (cannot be drafted)"}
    elif joint is None:
        skipped["acceptance_bound"] = ("needs the accepted indices (certify_samples(..., accepted=)) or counts by "
                                       "stop position, shape (k + 1, V), and q")
    else:
        skipped["acceptance_bound"] = "needs q, the law the candidates were drawn from"
    if candidates is not None and q is not None:
        drawn = candidates.ravel() if drafting == "iid" else candidates[:, 0]
        cc = np.bincount(drawn, minlength=p.size)
        r = gof_test(cc, q, min_expected=min_expected)
        m = int(cc.sum())
        details["candidates"] = {"statistic": r.statistic, "df": r.df, "pvalue": r.pvalue, "n": m,
                                 "tv": 0.5 * float(np.abs(cc / m - q).sum())}
        if r.df == 0 and r.impossible == 0 and np.count_nonzero(q > 0) > 1:
            skipped["candidates"] = f"df 0 after pooling ({plural(m, 'candidate')}): the test cannot fail"
        else:
            checks["candidates"] = r.pvalue
    else:
        skipped["candidates"] = ("needs the candidates (n, k) and q" if candidates is None
                                 else "needs q, the law the candidates were drawn from")
    return certificate_from_counts(marg, p, alpha=alpha, power=power, tv=tv, checks=checks, details=details,
                                   min_expected=min_expected, skipped=skipped, notes=notes)


def _laws(p, q):
    """``p`` and ``q`` (or None) checked and divided by their sums (:func:`exactness.sampling.door_law`)."""
    p = door_law(p, name="p")
    if q is not None:
        q = door_law(q, name="q")
        if q.shape != p.shape:
            raise ValueError(f"p and q must have the same vocabulary: p has V = {p.size}, q has V = {q.size}")
    return p, q


def certify_counts(counts, p, q=None, k=None, *, alpha: float = 1e-3, power: float = 0.99, tv: float | None = None,
                   drafting: str = "iid", min_expected: float = MIN_EXPECTED) -> Certificate:
    """Certify token counts collected elsewhere against the target law ``p``.

    Parameters
    ----------
    counts : array_like of int, shape (V,) or (k + 1, V)
        ``(V,)``: how often each token was emitted (``numpy.bincount(tokens,
        minlength=V)``).  ``(k + 1, V)``: counts by stop position, row ``i < k``
        the tokens emitted as accepted candidate ``i``, row ``k`` the residual
        tokens; with ``q`` this adds ``acceptance_bound`` and
        ``candidate_support``.
    p : array_like, shape (V,), float64
        Target law (non-negative, finite, sums to 1; divided by its sum, so a
        float32 / float16 law is certified as its float64 renormalisation).
    q : array_like, shape (V,), float64, optional
        The law the candidates were drawn from.
    k : int, optional
        Candidates per draw; inferred from ``(k + 1, V)`` counts, and must match them.
    alpha, power, tv, min_expected
        As :func:`exactness.certify_sampler`.
    drafting : {"iid", "without_replacement"}, default "iid"
        How the candidates were drawn (for alpha*).

    Returns
    -------
    Certificate
        ``checks``: ``marginal`` and, where the inputs allow, the checks of
        :mod:`exactness.collected`; ``skipped``: what could not be tested, with
        the reason; ``detectable_tv``: the smallest TV the marginal test finds
        with probability ``power``.

        A token of probability 0 under ``p`` among the counts fails the
        certificate at once (``marginal`` p = 0, whatever the pooling), named
        with its count in ``details["marginal"]["impossible_tokens"]`` and a
        note.

    Raises
    ------
    TypeError
        Non-integer counts (floats, bools, objects); bad argument types.
    ValueError
        Counts int64 cannot hold (a uint64 or Python int past 2**63 - 1),
        counts summing past ``MAX_COUNT_TOTAL`` (2**53: an overflow upstream,
        never wrapped into a small or negative total), negative counts, no
        samples, a shape that is neither (V,) nor (k + 1, V) for p's V, a ``k``
        that disagrees with the counts, bad laws, a marginal test with no
        degrees of freedom (too few samples) and no impossible token.
    """
    p, q = _laws(p, q)
    alpha = check_alpha(alpha)
    check_tv(tv)
    drafting = _check_drafting(drafting)
    c = _int_array(counts, "counts")
    V = p.size
    if c.ndim not in (1, 2) or c.shape[-1] != V or (c.ndim == 2 and c.shape[0] < 2):
        raise ValueError(f"counts must have shape (V,) = ({V},) or (k + 1, V) = (k + 1, {V}) (by stop position, "
                         f"last row the residual) for p's V = {V}; got {c.shape}")
    if np.any(c < 0):
        raise ValueError(f"counts has negative entries (min {c.min()}); counts are numbers of samples (a negative "
                         "count is often a wrapped int64 overflow)")
    total = float(c.sum(dtype=np.float64))      # a float sum cannot wrap as an int64 sum does
    if total > MAX_COUNT_TOTAL:
        raise ValueError(f"counts sums to {total:.4g} samples, more than 2**53 = {MAX_COUNT_TOTAL:.4g} (the int64 "
                         "sum would overflow, or the chi-square lose exactness): counts this large are an overflow "
                         "upstream; pass the counts of the draws actually made")
    if total == 0:
        raise ValueError("counts sums to 0: there are no samples to certify")
    joint = None
    if c.ndim == 2:
        kk = c.shape[0] - 1
        if k is not None and check_k(k) != kk:
            raise ValueError(f"k = {k} but counts has {c.shape[0]} rows; (k + 1, V) counts have k + 1 = "
                             f"{check_k(k) + 1} rows")
        k, joint = kk, c
    elif k is not None:
        k = check_k(k)
    return _certify(joint, c.sum(axis=0) if c.ndim == 2 else c, p, q, k, drafting, alpha, power, tv, min_expected)


def certify_samples(tokens, p, *, accepted=None, candidates=None, q=None, k=None, drafting: str = "iid",
                    alpha: float = 1e-3, power: float = 0.99, tv: float | None = None,
                    min_expected: float = MIN_EXPECTED) -> Certificate:
    """Certify emitted tokens collected elsewhere (one per draw), plus what the recorded indices allow.

    Parameters
    ----------
    tokens : array_like of int, shape (n,)
        Emitted token ids in ``[0, V)``.
    p : array_like, shape (V,), float64
        Target law.
    accepted : array_like of int, shape (n,), optional
        Index of the emitted candidate, ``-1`` for a residual token (the
        ``certify_verifier`` convention).  With ``q``: ``acceptance_bound`` and
        ``candidate_support``.  Needs ``k`` or ``candidates``.
    candidates : array_like of int, shape (n, k), optional
        The drafts of each draw; with ``q``, the ``candidates`` check.  When
        ``accepted`` does not name them (``tokens != candidates[accepted]``
        where ``accepted >= 0``, or an index outside ``[-1, k)``: a pipeline
        that drafts its own candidates, or records a flag) the tokens are
        certified alone: a note and ``details["accepted_index"]`` give the
        first bad row, and ``acceptance_bound`` / ``candidate_support`` are
        skipped with the reason.
    q : array_like, shape (V,), float64, optional
        The law the candidates were drawn from.
    k : int, optional
        Candidates per draw (taken from ``candidates`` when given; must match).
    drafting, alpha, power, tv, min_expected
        As :func:`certify_counts`.

    Returns
    -------
    Certificate (as :func:`certify_counts`).
        The collected arrays are the subject's output, so what the subject got
        wrong is a FAIL naming the cause, never an exception: a token (or
        candidate) id outside ``[0, V)`` fails the certificate
        (``checks == {"subject": 0.0}``, ``details["subject"]["error"]`` names
        the first such id and how many, as
        :func:`exactness.certify_verifier` for a verify that emits one); a
        token of probability 0 under ``p`` fails ``marginal`` at once; accepted
        indices that do not name the emitted candidate, or ``accepted`` given
        as accept flags (a bool array, or 0/1 ints that do not name the
        candidate), fail ``accepted_index`` and the tokens are certified alone.

    Raises
    ------
    TypeError
        Non-integer ``tokens`` or ``candidates`` (floats, bools), ``accepted``
        of floats or objects.
    ValueError
        Wrong shapes, ``accepted`` without ``k`` or ``candidates``, a ``k``
        that disagrees with ``candidates``, bad laws, no degrees of freedom
        (unless a token of probability 0 was emitted: that fails the
        certificate at once, named with its count).
    """
    p, q = _laws(p, q)
    alpha = check_alpha(alpha)
    check_tv(tv)
    drafting = _check_drafting(drafting)
    V = p.size
    t = _int_array(tokens, "tokens")
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"tokens must have shape (n,) with n >= 1, one emitted token per draw; got {t.shape}")
    n = t.size
    cand = None
    if candidates is not None:
        cand = _int_array(candidates, "candidates")
        if cand.ndim != 2 or cand.shape[0] != n or cand.shape[1] < 1:
            raise ValueError(f"candidates must have shape (n, k) = ({n}, k), one row per token; got {cand.shape}")
        if k is not None and check_k(k) != cand.shape[1]:
            raise ValueError(f"k = {k} but candidates has shape {cand.shape} (k = {cand.shape[1]})")
        k = cand.shape[1]
    elif k is not None:
        k = check_k(k)
    joint, why = None, None
    a = None
    if accepted is not None:
        if k is None:
            raise ValueError("accepted needs k: pass k=... (candidates per draw) or candidates=(n, k)")
        flags = getattr(accepted, "dtype", None) == bool or (
            isinstance(accepted, (list, tuple)) and np.asarray(accepted).dtype == bool)
        a = np.asarray(accepted) if flags else _int_array(accepted, "accepted")
        if a.shape != (n,):
            raise ValueError(f"accepted must have shape (n,) = ({n},), like tokens; got {a.shape}")
        if flags:     # accept flags recorded instead of indices: the subject's output broke its contract (a FAIL)
            why = (f"certify_samples: accepted holds accept flags (dtype bool), not indices; accepted must be the "
                   f"index of the emitted candidate in [0, {k}) (or -1 for a residual token)")
    # the collected tokens (and drafts) are the subject's output: ids outside p's vocabulary are a FAIL naming them
    for name, ids in (("tokens", t), ("candidates", cand)):
        if ids is None:
            continue
        bad = np.flatnonzero((ids.ravel() < 0) | (ids.ravel() >= V))
        if bad.size:
            i = np.unravel_index(int(bad[0]), ids.shape)
            where = ", ".join(str(int(x)) for x in i)
            return subject_failure(f"certify_samples: {name}[{where}] = {ids[i]} is outside [0, {V}) of p's "
                                   f"vocabulary ({plural(int(bad.size), 'such id')}): the collected {name} are not "
                                   "tokens of the target", alpha=alpha, power=power)
    if a is not None:
        if why is None:
            why = accepted_problem(t, a, k, cand, "certify_samples: ")
        if why is None:
            stop = np.where(a < 0, k, a)
            joint = np.bincount(stop * V + t, minlength=(k + 1) * V).reshape(k + 1, V)
    marg = np.bincount(t, minlength=V)
    return _certify(joint, marg, p, q, k, drafting, alpha, power, tv, min_expected, candidates=cand,
                    accepted_note=why)
