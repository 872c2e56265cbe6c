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
from .decoder_batches import per_row_check, small_batch_check
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
    lookup          position -> conditional law from ``laws`` (``exactness.decoder._joint_lookup``) or None
    orders          the PIT orders run ("id", "argmax", and "ratio" with ``decoder.draft_law``)
    pits            {(position j, order): (P n,) float64} randomised PIT values of the main sample
    rng             the certificate's streams: "single", "pit", "cond", "small" (numpy Generators)
    seed            int: the seed of the probes that repeat one seed (seeded, events, batch_rows)
    ev_fn, ev_skip  ``decoder.sample_events`` or None and why the per-node checks do not run (None: they do)
    plan_col, plan_skip   the plan-vs-sampler collector filled during the main draw, or why there is none
    seeded          the caller's ``seeded`` (None: probe, True: required, False: not probed)
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


class AcceptanceBoundDecoder(DecoderCheck):
    names = ("acceptance_bound",)
    detects = ("a chain decoder (decoder.gamma drafts a target call, from the law decoder.draft_law reports) whose "
               "first target call keeps more drafts on average than any exact rule can: the LP over all exact rules "
               "(resispec.pathlevel.optimal_accepted) at each prompt, from the decisions it reports (sample_events); "
               "biased whatever its samples look like")
    mutant = "too_generous_chain"

    def skip(self, st):
        decoder = st.decoder
        gamma = getattr(decoder, "gamma", None)
        why = ("needs the decoder's decisions (sample_events) to count the drafts kept" if st.flat is None else
               "needs decoder.gamma, the drafts of a chain per target call (an int >= 1)"
               if isinstance(gamma, bool) or not isinstance(gamma, (int, np.integer)) or gamma < 1 else
               "needs decoder.draft_law, the law the drafts come from" if not callable(
                   getattr(decoder, "draft_law", None)) else None)
        return None if why is None else {"acceptance_bound": why}

    def run(self, st):
        from resispec.pathlevel.bound import optimal_accepted

        from .acceptance_bound import ACCEPTANCE_BOUND, lp_bound

        rows, _, ev = st.flat
        gamma = int(st.decoder.gamma)
        kept = first_call_kept(ev, rows.size)                             # (R,) drafts kept by each row's first call
        if kept.size < 100:
            st.skipped["acceptance_bound"] = f"needs >= 100 continuations for the test on the mean (got {kept.size})"
            return
        pair = _ReportedPair(st.tgt, st.decoder, st.V)
        bounds = np.empty(st.P)
        for i, prompt in enumerate(st.prompts):
            try:
                bounds[i] = lp_bound(optimal_accepted(pair, (1,) * gamma, context=tuple(int(t) for t in prompt)))
            except ValueError as exc:                 # the LP is too large at this size: the check cannot run
                st.skipped["acceptance_bound"] = f"no bound at this size (V = {st.V}, gamma = {gamma}): {exc}"
                return
        bound = float(bounds[rows].mean())                                 # E over the rows' prompts
        res = ACCEPTANCE_BOUND.run_mean(kept.astype(np.int64), bound, st.alpha, _d.POWER, top=gamma)
        st.record("acceptance_bound", res.pvalue, {**res.as_dict(), "per_prompt_bound": bounds.tolist(),
                                                   "gamma": gamma})


def first_call_kept(ev, R: int) -> np.ndarray:
    """Drafts kept by each row's first target call (R,) int64, from its decisions: the entries of the call that
    emits position 0 whose candidate was accepted (a bonus draw has no candidate).  Entries past ``new_tokens``
    are not reported, so a count is never above the call's own (the test stays valid, with less power)."""
    start = ev.position == 0
    call0 = np.full(R, -1, dtype=np.int64)
    call0[ev.row[start]] = ev.call[start]
    kept = (ev.call == call0[ev.row]) & (ev.accepted >= 0) & (ev.candidates >= 0).any(axis=1)
    return np.bincount(ev.row[kept], minlength=R).astype(np.int64)


class _ReportedPair:
    """The (target, draft) pair ``resispec.pathlevel.optimal_accepted`` reads: the certified target and the draft
    law the decoder reports (``laws(contexts) -> (p, q)`` over token tuples of any length)."""

    def __init__(self, tgt, decoder, V: int):
        self.tgt, self.decoder, self.vocab_size = tgt, decoder, int(V)

    def laws(self, contexts):
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
DECODER_CHECKS = (Joint(), Pit(), Single(), SmallBatches(), PlanSampler(), Conditional(), AcceptanceBoundDecoder(),
                  Seeded(), BatchRows())


def run_checks(st: DecoderRun) -> None:
    """Run :data:`DECODER_CHECKS` on ``st`` in order: each check's skip reasons, or its run."""
    for check in DECODER_CHECKS:
        why = check.skip(st)
        if why is None:
            check.run(st)
        else:
            st.skipped.update({k: v for k, v in why.items() if v})
