"""The checks of a decoder certificate (:func:`exactness.certify_decoder`) as objects (issue 39, item 3).

Each check is a :class:`DecoderCheck`: its ``names`` (the p-values it records in ``Certificate.checks``; a name
with ``*`` stands for a family, ``pit[*]`` for ``pit[1,id]``, ``pit[2,argmax]``, ...), what it ``detects``,
when it applies (:meth:`DecoderCheck.skip`: the reasons it records in ``Certificate.skipped`` instead of
running), how it runs on the shared :class:`DecoderRun`, its design twins (:meth:`DecoderCheck.detectable_tv`,
:meth:`DecoderCheck.n_for_tv`) and the planted bug it must catch (``mutant``, a key of
:data:`exactness.decoder_mutants.CHECK_MUTANTS`; ``tests/test_decoder_checks.py`` certifies every one and
asserts that the check fails it).  ``certify_decoder`` is then a short plan: the door (arguments, exact laws,
``n``), the main draw, the ``run`` of every check in :data:`DECODER_CHECKS` order, the certificate.

The order is part of the contract: the checks share the certificate's random streams (``DecoderRun.rng``), so
the same seed gives the same p-values only in this order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import decoder as _d
from ._checks import SubjectError, subject_call
from .decoder_batches import per_row_check, small_batch_check, tile_rows_check
from .pit import impossible, impossible_error, pair_check, tuple_check
from .pit import pit_check as _pit_check
from .power import DesignTwins


@dataclass
class DecoderRun:
    """What the checks of one decoder certificate share, filled in plan order (the plan writes the main sample
    once; each check reads what it needs and writes only its own entries).

    decoder, draw, batched   the subject, its sampling call and whether it takes batches (``sample``)
    tgt             the target (``exactness.decoder._Target``: rows checked as laws)
    prompts         (P, L) int64;  m: new tokens;  mj: tokens of the exact joint law (0: none);  V: vocabulary
    n               continuations per prompt;  alpha: the certificate's level
    laws            [P] of (V^mj,) float64: the exact joint law of the first mj tokens per prompt
    seqs            (P, n, m) int64: the main sample (prompt-major);  flat: (rows, tokens, events) or None
    places          (P, n, 2) int64: (row of its batch, rows of its batch) of each continuation of the main sample
    lookup          position -> conditional law from ``laws`` (``exactness.decoder._joint_lookup``) or None
    orders          the PIT orders run ("id", "argmax", and "ratio" with ``decoder.draft_law``)
    pits            {(position j, order): (P n,) float64} randomised PIT values of the main sample
    rng             the certificate's streams: "single", "pit", "cond", "small" (numpy Generators)
    seed            int: the seed of the probes that repeat one seed (seeded, events, batch_rows)
    ev_fn, ev_skip  ``decoder.sample_events`` or None and why the per-node checks do not run (None: they do)
    plan_col, plan_skip   the plan-vs-sampler collector filled during the main draw, or why there is none
    seeded          the caller's ``seeded`` (None: probe, True: required, False: not probed)
    gamma           ``decoder.gamma`` as read once (by the acceptance-bound check's ``skip``), or None
    tick            progress (``exactness.decoder._Ticker``)
    checks, details, skipped, notes   the certificate's entries
    """

    decoder: object
    draw: object
    batched: bool
    tgt: object
    prompts: np.ndarray
    m: int
    mj: int
    V: int
    n: int
    alpha: float
    laws: list
    seqs: np.ndarray
    flat: tuple | None
    rng: dict
    seed: int
    ev_fn: object
    ev_skip: str | None
    plan_col: object
    plan_skip: str | None
    seeded: bool | None
    tick: object
    lookup: object = None
    places: np.ndarray | None = None
    gamma: int | None = None
    orders: list = field(default_factory=list)
    pits: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def P(self) -> int:
        return int(self.prompts.shape[0])

    def record(self, name: str, pvalue, detail: dict, reason: str | None = None) -> None:
        """``pvalue`` None (or a check with no degree of freedom): skipped with ``reason``; else recorded."""
        if pvalue is None:
            self.skipped[name] = reason or detail.get("reason", "not run")
        else:
            self.checks[name], self.details[name] = float(pvalue), detail


class DecoderCheck(DesignTwins):
    """One check of a decoder certificate (module docstring).  Subclasses set the class attributes and ``run``."""

    #: the p-values it records (``Certificate.checks`` keys; ``*`` a family)
    names: tuple = ()
    #: what it can detect, in a sentence
    detects: str = ""
    #: the planted bug it must catch (``exactness.decoder_mutants.CHECK_MUTANTS``)
    mutant: str = ""

    def skip(self, st: DecoderRun) -> dict | None:
        """None: the check runs; else ``{name: reason}`` recorded in ``Certificate.skipped`` (may be empty:
        nothing to say, e.g. a decoder that is not built on a chain kernel has no plan to compare)."""
        return None

    def run(self, st: DecoderRun) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.names)})"


class Joint(DecoderCheck):
    names = ("joint", "joint[*]")
    detects = ("any bias in the joint law of the first mj new tokens (every one of the V^mj sequences, small "
               "cells pooled), per prompt and pooled")
    mutant = "target_off_by_one"

    def skip(self, st):
        return None if st.mj else {"joint": f"V = {st.V}: V^1 > JOINT_MAX = {_d.JOINT_MAX:,} sequences do not "
                                            "enumerate; PIT checks only"}

    def run(self, st):
        c, d = _d._joint_check(st.seqs[:, :, :st.mj], st.laws, st.V, st.mj, st.alpha, "joint")
        st.checks.update(c)
        st.details.update(d)
        st.lookup = _d._joint_lookup(st.laws, st.V, st.mj)


class Pit(DecoderCheck):
    names = ("impossible", "pit[*]", "pit_pairs[*]", "pit_tuple[*]")
    detects = ("a token of target probability 0 (at once); at every position, a bias of its law projected on "
               f"{_d.PIT_BINS} PIT bins in the id, argmax and draft-ratio orders (pooled, per prompt and per "
               "previous token), and a dependence between tokens (pairs and tuples of binned PITs)")
    mutant = "target_off_by_one"

    def run(self, st):
        decoder = st.decoder
        st.orders = ["id", "argmax"]
        if hasattr(decoder, "draft_law") and callable(decoder.draft_law):
            st.orders.append("ratio")
        else:
            st.skipped["pit[*,ratio]"] = ("the decoder reports no draft_law(contexts): the draft-to-target ratio "
                                          "order is not run")
        st.pits, imp = _d._pit_values(st.tgt, st.decoder, st.prompts, st.seqs, st.lookup, st.rng["pit"], st.orders,
                                      st.V, tick=st.tick)
        if imp is not None:                   # one is enough, whatever the pooling: a FAIL at once
            raise impossible_error({**imp, "n": st.P * st.n, "sample": "the main sample"}, st.prompts)
        st.checks["impossible"] = 1.0
        st.details["impossible"] = {"count": 0, "reason": "no sampled token has target probability 0"}
        c, d = _d._pit_checks(st.pits, st.m, st.orders, st.alpha, P=st.P, covered=st.mj, seqs=st.seqs)
        st.checks.update(c)
        st.details.update(d)
        for o in st.orders[:2]:               # id and argmax: tokens jointly, through their binned PITs
            u = {j: st.pits[(j, o)] for j in range(st.m)}
            for label, fn in ((f"pit_pairs[{o}]", pair_check), (f"pit_tuple[{o}]", tuple_check)):
                pv, d = fn(u, st.m, st.alpha)
                if pv is not None:
                    st.record(label, pv, d)
                elif st.m > 1 and not (label.startswith("pit_tuple") and st.m < 3):
                    st.skipped[label] = d["reason"]
        st.details["positions"] = [
            {"position": j + 1, "pvalue": min(st.checks[f"pit[{j + 1},{o}]"] for o in st.orders),
             "detectable_tv": st.details[f"pit[{j + 1},id]"]["detectable_tv"],
             "tv": max(st.details[f"pit[{j + 1},{o}]"]["tv"] for o in st.orders)} for j in range(st.m)]


class Single(DecoderCheck):
    names = ("single", "homogeneous")
    detects = ("a decoder wrong only in batches of one row (single: one prompt per call), or only when the rows "
               "of a batch share a prompt (homogeneous: the main sample's first batches, one prompt each)")
    mutant = "single_row"

    def skip(self, st):
        return None if st.batched else {
            "single": "the decoder has no sample(prompts, ...): every draw is already one prompt per call"}

    def run(self, st):
        ns = min(st.n, _d.SINGLE_N)
        st.tick.phase("drawing one prompt per call (single)", st.P * ns, "call")

        def one(i):
            st.tick.step(f"prompt {i + 1} of {st.P}")
            return _d._call(st.draw, True, st.prompts[i:i + 1], st.m, st.rng["single"], st.V)

        parts = [("single", np.stack([np.concatenate([one(i) for _ in range(ns)]) for i in range(st.P)]))]
        h = min(st.n, _d.HOMOGENEOUS)
        if st.P > 1 and h:
            parts.append(("homogeneous", st.seqs[:, :h]))     # the main sample's first batches: one prompt each
        for label, part in parts:                              # part: (P, rows, m) int64
            d = self._test(st, label, part)
            if d["df"] == 0:                                   # could not fail: skipped, never a pass
                st.skipped[label] = (f"{part.shape[1]:,} continuations per prompt leave no degree of freedom "
                                     "after pooling: raise n")
            else:
                st.record(label, d["pvalue"], d)

    @staticmethod
    def _test(st, label, part) -> dict:
        """The joint test of ``part`` (P, rows, m) (the PIT of token 1 when nothing enumerates); a token of
        target probability 0 is a FAIL naming it."""
        if st.mj:
            flat = part[:, :, :st.mj].reshape(-1, st.mj)
            who = np.repeat(np.arange(st.P), part.shape[1])
            for j in range(st.mj):
                zero = st.lookup[j](who, flat[:, :j])[np.arange(flat.shape[0]), flat[:, j]] <= 0
                if zero.any():
                    raise impossible(zero, st.prompts, who, flat, j, f"the {label} sample")
            return _d._joint_check(part[:, :, :st.mj], st.laws, st.V, st.mj, st.alpha, label)[1][label]
        sp, imp = _d._pit_values(st.tgt, st.decoder, st.prompts, part[:, :, :1], None, st.rng["pit"], ["id"], st.V)
        if imp is not None:
            raise impossible_error({**imp, "n": int(part.shape[0] * part.shape[1]),
                                    "sample": f"the {label} sample"}, st.prompts)
        return _pit_check(sp[(0, "id")], st.alpha)


class SmallBatches(DecoderCheck):
    names = ("small_batches",)
    detects = ("a decoder wrong at one row position of batches of 2 to 8 rows (each position, and the last row, "
               "tested on its own at every token, Bonferroni over the groups)")
    mutant = "row_2"

    def skip(self, st):
        return None if st.batched else {
            "small_batches": "the decoder has no sample(prompts, ...): every draw is one prompt per call"}

    def run(self, st):
        ns = min(st.n, _d.SINGLE_N)
        st.tick.phase("drawing batches of 2-8 rows (small_batches)", st.P * ns, "call")

        def small(pr, mm, r):
            st.tick.step(f"{pr.shape[0]} rows")
            return _d._call(st.draw, True, pr, mm, r, st.V)

        pv, d = small_batch_check(small, st.prompts, st.m, st.mj, st.laws, st.tgt, st.V, st.rng["small"], st.P * ns,
                                  st.alpha)
        st.record("small_batches", pv, d)


class TileRows(DecoderCheck):
    names = ("tile_rows",)
    detects = ("a decoder wrong at the first or the last row of every tile of T = 8, 16, ..., 2,048 rows of a "
               "batch (every 512th row: a tiling or stride bug of a batched kernel), at one row 2^j or 2^j - 1 up to "
               "1,024, or at the last row of a batch size: the main sample's rows at those places, each group "
               "tested on its own at every token (Bonferroni over the groups), no new draws; a row only 4,096-row "
               "batches have (1,531-4,095: ~24 rows at the default n) is not reliably found")
    mutant = "tile_64"

    def skip(self, st):
        return None if st.batched else {
            "tile_rows": "the decoder has no sample(prompts, ...): every draw is one prompt per call"}

    def run(self, st):
        pv, d = tile_rows_check(st.seqs, st.places, st.pits, st.laws, st.mj, st.V, st.alpha)
        st.record("tile_rows", pv, d)


class PlanSampler(DecoderCheck):
    names = ("plan_sampler",)
    detects = ("a chain kernel whose calls do not follow the plan it declares (kernel.plan): the exact analysis "
               "of the plan is then no analysis of the code (exactness.plan_check)")
    mutant = "kernel_off_its_plan"

    def skip(self, st):
        if st.plan_col is not None:
            return None
        return {"plan_sampler": st.plan_skip} if st.plan_skip else {}

    def run(self, st):
        res = st.plan_col.result(st.alpha)
        st.record("plan_sampler", res.pvalue, res.as_dict())


class Conditional(DecoderCheck):
    names = ("accepted_count", "after_rejection", "bonus")
    detects = ("with reported events (sample_events, rule): the number accepted per target call, the token after "
               "a rejection and the bonus token, each against its exact conditional law from the rule's chain")
    mutant = "residual_off_by_one"

    def skip(self, st):
        return None if st.ev_fn is not None else {"conditional": st.ev_skip}

    def run(self, st):
        from .decoder_events import conditional_checks, conditional_values

        rows, toks, ev = st.flat
        per_node = st.ev_skip is None                    # else only the rule-free bonus check (ev_skip: why)
        vals, imp = conditional_values(ev, st.prompts[rows], toks, st.tgt, st.decoder,
                                       st.decoder.rule if per_node else None, st.rng["cond"])
        c, d, sk = conditional_checks(vals, imp, st.alpha)
        if not per_node:
            sk.update({"accepted_count": st.ev_skip, "after_rejection": st.ev_skip})
        st.checks.update(c)
        st.details.update(d)
        st.skipped.update(sk)


class Seeded(DecoderCheck):
    names = ("seeded",)
    detects = ("a decoder that ignores its seed (the run cannot be reproduced: skipped with the reason, or an "
               "error with seeded=True); with sample_events, events whose tokens differ from sample's (a FAIL)")
    mutant = "events_differ"
    deterministic = True

    def skip(self, st):
        return {} if st.seeded is False else None

    def run(self, st):
        st.tick.phase("seed and batch probes", 1, "probe")
        if _d._seeded_probe(st.draw, st.batched, st.prompts, st.m, st.seed, st.V):
            st.record("seeded", 1.0, {"reason": "two runs with the same seed gave the same continuations"})
            if st.ev_fn is not None:
                _d._events_probe(st.draw, st.ev_fn, st.prompts, st.m, st.seed, st.V,
                                 rows=min(_d.EVENTS_PROBE_ROWS, st.n * st.P))
        elif st.seeded:
            raise ValueError("the decoder ignores its seed: two runs with the same rng seed gave different "
                             "continuations; draw every random number from the rng argument (seed torch / global "
                             "RNGs from it), or pass seeded=None to skip the seeded check")
        else:
            st.skipped["seeded"] = ("the decoder ignores its seed (two runs with the same seed differ): the run "
                                    "cannot be reproduced; draw every random number from the rng argument")
            if st.ev_fn is not None:
                st.skipped["events_vs_sample"] = (
                    "sample ignores its seed, so its tokens could not be compared with sample_events' (the main "
                    "sample and the joint / PIT checks used sample_events; sample itself was tested only by single "
                    "and small_batches)")


class BatchRows(DecoderCheck):
    names = ("batch_rows",)
    detects = ("with per_row_rng = True: a row whose tokens depend on the other rows of its batch (a batch of B "
               "against B batches of 1 under fixed per-row seeds; the first differing row is named)")
    mutant = "rows_mixed"
    deterministic = True

    def skip(self, st):
        decoder = st.decoder
        if getattr(decoder, "per_row_rng", False) and st.batched:
            return None
        return {"batch_rows": ("the decoder does not declare per_row_rng = True (sample(prompts (B, L), "
                               "new_tokens, rng) taking a list of B numpy Generators, one per row): batch of B "
                               "against B batches of 1 under fixed per-row seeds is not run")}

    def run(self, st):
        c, d = per_row_check(st.decoder, st.prompts, st.m, st.seed,
                             lambda out, B, what: _d._check_tokens(out, B, st.m, st.V, what))
        st.record("batch_rows", c, d)


#: Largest LP (constraint nonzeros, ``resispec.pathlevel.bound``'s estimate) the decoder route solves per prompt:
#: about 2 s each (V = 4, gamma = 5 is 5.6e6 and took 27 s); larger pairs skip with the reason (the step form,
#: ``certify_path``, solves up to ``MAX_NONZEROS``).
DECODER_LP_NONZEROS = 1_000_000
#: What the decoder's bound takes on the decoder's word: the LP is over drafts from ``decoder.draft_law`` at every
#: context of the chain; the ``draft_law`` check tests the first draft only (deeper drafts are seen only when the
#: ones before were kept, a selection that depends on the rule), so a decoder misreporting the law of its later
#: drafts (or drafting per position, as Medusa heads do) is outside what this check can tell apart.
PREMISE = ("drafts follow decoder.draft_law at every context of the chain, tested at the prompt only (draft_law); a "
           "decoder drafting by another law at later positions, e.g. one head per position, breaks it")


class AcceptanceBoundDecoder(DecoderCheck):
    names = ("acceptance_bound", "draft_law")
    detects = ("a chain decoder (decoder.gamma drafts a target call) whose first target call keeps more drafts on "
               "average than any exact rule can (acceptance_bound: the LP over all exact rules at each prompt, "
               "resispec.pathlevel.optimal_accepted, from the decisions sample_events reports; biased whatever its "
               "samples look like), and first drafts that do not follow the law decoder.draft_law reports at the "
               "prompt (draft_law: the bound's premise; chi-square of the first draft per prompt)")
    mutant = "too_generous_chain"
    #: Source: the LP over exact rules for drafted chains (docs/pathlevel.md section 4), attained by block
    #: verification (Sun et al. 2024, arXiv 2403.10444, Theorem 2); the test on a bounded mean is Hoeffding's
    #: (1963, JASA 58, Theorem 1).

    def skip(self, st):
        from .decoder_events import events_q

        decoder = st.decoder
        gamma = subject_call(lambda: getattr(decoder, "gamma", None), "reading decoder.gamma")
        why = ("needs the decoder's decisions (sample_events) to count the drafts kept" if st.flat is None else
               "needs decoder.gamma, the drafts of a chain per target call (an int >= 1)"
               if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1 else
               "needs decoder.draft_law, the law the drafts come from" if not callable(
                   getattr(decoder, "draft_law", None)) else
               "the decisions are verified with point masses (decoder.events_q = 'one_hot'): the drafts need not "
               "come from draft_law, so no bound over drafts from it applies" if events_q(decoder) == "one_hot" else
               f"needs new_tokens >= decoder.gamma = {gamma} to see a first call's kept drafts whole (new_tokens = "
               f"{st.m})" if st.m < gamma else None)
        if why is None:
            st.gamma = int(gamma)                     # read once: a property that changes between reads is not re-read
        return None if why is None else {"acceptance_bound": why, "draft_law": why}

    def run(self, st):
        rows, _, ev = st.flat
        gamma = st.gamma
        if ev.candidates.shape[1] > 1 and bool(((ev.candidates >= 0).sum(axis=1) > 1).any()):
            why = ("the decoder reports decisions among several candidates: the LP here is a chain's (one draft a "
                   "step); certify a tree rule with exactness.pathlevel.certify_tree_rule for its bound")
            st.skipped.update({"acceptance_bound": why, "draft_law": why})
            return
        kept, first = first_call_kept(ev, rows.size, gamma, st.m)         # (R,) drafts kept; (R,) first draft
        _first_draft_check(st, rows, first)
        if kept.size < 100:
            st.skipped["acceptance_bound"] = f"needs >= 100 continuations for the test on the mean (got {kept.size})"
            return
        bounds, why = _prompt_bounds(st, gamma)
        if why is not None:
            st.skipped["acceptance_bound"] = why
            return
        from .acceptance_bound import ACCEPTANCE_BOUND

        bound = float(bounds[rows].mean())                                 # E over the rows' prompts
        res = ACCEPTANCE_BOUND.run_mean(kept, bound, st.alpha, _d.POWER, top=gamma)
        detail = {**res.as_dict(), "per_prompt_bound": bounds.tolist(), "gamma": gamma, "premise": PREMISE}
        if res.pvalue < st.alpha:                     # the verdict names its premise: a decoder drafting otherwise
            detail["reason"] += f" (premise: {PREMISE})"                 # breaks it, and that is what fails
        st.record("acceptance_bound", res.pvalue, detail)


def _first_draft_check(st, rows, first) -> None:
    """``draft_law``: the first draft of each continuation (drawn at the prompt) against ``decoder.draft_law`` there,
    chi-square per prompt (small cells pooled), Bonferroni over the prompts."""
    from .gof import gof_test
    from .pit import draft_laws

    q = draft_laws(st.decoder, st.prompts, st.V)                           # (P, V) at the prompts
    pv = []
    for i in range(st.P):
        got = first[(rows == i) & (first >= 0)]
        if got.size < 20:
            continue
        pv.append(float(gof_test(np.bincount(got, minlength=st.V), q[i]).pvalue))
    if pv:
        st.record("draft_law", min(1.0, min(pv) * len(pv)), {
            "pvalue": min(1.0, min(pv) * len(pv)), "per_prompt_pvalue": pv,
            "reason": f"first drafts against decoder.draft_law at the prompt: p = {min(1.0, min(pv) * len(pv)):.3g} "
                      f"(Bonferroni over {len(pv)} prompts)"})
    else:
        st.skipped["draft_law"] = "needs >= 20 continuations of a prompt to test its first drafts"


def _prompt_bounds(st, gamma: int):
    """``(bounds (P,), None)``: the LP bound over exact rules at each prompt (identical pairs solved once), or
    ``(None, why)`` where no LP bound is computed (too large, or the solver failed at this pair)."""
    from resispec.pathlevel.analysis import prefix_laws
    from resispec.pathlevel.bound import lp_nonzeros, optimal_accepted

    from .acceptance_bound import lp_bound

    V = st.V
    nnz = lp_nonzeros(V, (1,) * gamma) if gamma <= 64 else float("inf")
    if nnz > DECODER_LP_NONZEROS:
        return None, (f"no LP bound at this size: V = {V}, gamma = {gamma} gives ~{float(nnz):.3g} constraint "
                      f"nonzeros, over DECODER_LP_NONZEROS = {DECODER_LP_NONZEROS:,} (certify the kernel with "
                      "exactness.pathlevel.certify_path for the bound)")
    pair = _ReportedPair(st.tgt, st.decoder, V)
    memo, bounds = {}, np.empty(st.P)
    for i, prompt in enumerate(st.prompts):
        ctx = tuple(int(t) for t in prompt)
        laws = prefix_laws(pair, gamma, ctx)          # target / draft_law errors surface here (not as a size skip)
        key = b"".join(p.tobytes() + q.tobytes() for p, q in laws.values())
        if key not in memo:
            try:                                      # the LP reads the same laws again: _ReportedPair remembers them
                memo[key] = lp_bound(optimal_accepted(pair, (1,) * gamma, context=ctx))
            except (ValueError, OverflowError, MemoryError) as exc:      # too large, or the LP solver failed
                return None, f"no LP bound for prompt {list(ctx)} (V = {V}, gamma = {gamma}): {exc}"
        bounds[i] = memo[key]
    return bounds, None


def first_call_kept(ev, R: int, gamma: int | None = None, m: int | None = None):
    """``(kept (R,), first (R,))`` int64: the drafts kept by each row's first target call (the entries of the call
    that emits position 0 whose candidate was accepted; a bonus draw has no candidate) and its first draft (the
    candidate at position 0; -1 for a row without one).  With ``gamma`` and ``m`` (new tokens) the first call is
    checked against the chain it declares: at most ``gamma`` kept, a bonus only after ``gamma`` kept, and an end on
    a rejection or a bonus unless it reaches position ``m - 1``; else :class:`SubjectError` (a FAIL naming it)."""
    start = ev.position == 0
    call0 = np.full(R, -1, dtype=np.int64)
    call0[ev.row[start]] = ev.call[start]
    first = np.full(R, -1, dtype=np.int64)
    first[ev.row[start]] = ev.candidates[start, 0]
    in_first = ev.call == call0[ev.row]
    has_cand = (ev.candidates >= 0).any(axis=1)
    kept = np.bincount(ev.row[in_first & (ev.accepted >= 0) & has_cand], minlength=R).astype(np.int64)
    if gamma is not None:
        over = np.flatnonzero(kept > gamma)
        if over.size:
            raise SubjectError(f"decoder.sample_events: a first target call kept {int(kept[over[0]])} drafts, more than "
                               f"decoder.gamma = {gamma} (row {int(over[0])}); gamma must be the drafts a call makes")
        bonus = np.flatnonzero(in_first & ~has_cand)
        short = bonus[kept[ev.row[bonus]] < gamma]
        if short.size:
            r = int(ev.row[short[0]])
            raise SubjectError(f"decoder.sample_events: a first target call took its bonus token after {int(kept[r])} "
                               f"kept drafts, fewer than decoder.gamma = {gamma} (row {r}): a bonus follows a full "
                               "chain; gamma must be the drafts a call makes")
        last_pos = np.full(R, -1, dtype=np.int64)
        np.maximum.at(last_pos, ev.row[in_first], ev.position[in_first])
        ends = in_first & (ev.position == last_pos[ev.row]) & (ev.accepted >= 0) & has_cand
        open_ = np.flatnonzero(ends & (ev.position < m - 1))
        if open_.size:
            r = int(ev.row[open_[0]])
            raise SubjectError(f"decoder.sample_events: row {r}'s first target call ends on an accepted draft at "
                               f"position {int(ev.position[open_[0]])} < new_tokens - 1 = {m - 1}: a call ends with "
                               "a rejection (its residual token) or a bonus token")
    return kept, first


class _ReportedPair:
    """The (target, draft) pair ``resispec.pathlevel.optimal_accepted`` reads: the certified target and the draft
    law the decoder reports (``laws(contexts) -> (p, q)`` over token tuples of any length), each list of contexts
    read once (the LP asks again for the laws its caller read first)."""

    def __init__(self, tgt, decoder, V: int):
        self.tgt, self.decoder, self.vocab_size = tgt, decoder, int(V)
        self._read: dict = {}

    def laws(self, contexts):
        key = tuple(tuple(c) for c in contexts)
        if key not in self._read:
            self._read[key] = self._laws(contexts)
        return self._read[key]

    def _laws(self, contexts):
        from .pit import draft_laws

        n = len(contexts)
        p, q = np.empty((n, self.vocab_size)), np.empty((n, self.vocab_size))
        by_len: dict = {}
        for j, c in enumerate(contexts):
            by_len.setdefault(len(c), []).append(j)
        for _, idx in by_len.items():
            ctx = np.array([contexts[j] for j in idx], dtype=np.int64)
            p[idx], q[idx] = self.tgt(ctx), draft_laws(self.decoder, ctx, self.vocab_size)   # laws (checked)
        return p / p.sum(axis=1, keepdims=True), q / q.sum(axis=1, keepdims=True)   # round-off: the LP's 1e-9


#: The checks of a decoder certificate, in run order (module docstring: the order fixes the random streams).
DECODER_CHECKS = (Joint(), Pit(), Single(), SmallBatches(), TileRows(), PlanSampler(), Conditional(),
                  AcceptanceBoundDecoder(), Seeded(), BatchRows())


def run_checks(st: DecoderRun) -> None:
    """Run :data:`DECODER_CHECKS` on ``st`` in order: each check's skip reasons, or its run."""
    for check in DECODER_CHECKS:
        why = check.skip(st)
        if why is None:
            check.run(st)
        else:
            st.skipped.update({k: v for k, v in why.items() if v})
