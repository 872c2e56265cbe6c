"""Side-by-side decoding benchmark: target-only autoregressive vs every verifier.

Every method runs on the same prompts, the same seeds (``rng =
default_rng([seed, prompt index])``) and the same tree shapes.  Reported per
(method, tree): block efficiency (tokens per target call), target calls,
tokens per second, and the ratios to target-only decoding and to the best
baseline verifier of the same tree; beside the observed counts, the paired
Rao-Blackwellised block efficiency of every verifier (the exact expected tokens
per call on the SAME drafted trees, pooled over all runs of a tree,
:mod:`resispec.decoding.expected`) with its paired differences.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .._io import atomic_write as _atomic_write
from .._io import strict_json as strict
from ..trees import TreeShape
from ..pathlevel.registry import available_path_verifiers, get_any_verifier
from ..verifiers.registry import get_verifier, is_ours
from ..decoding.drafts import as_draft, count_weights
from ..decoding.engine import autoregressive_decode, check_fits, speculative_decode
from ..decoding.laws import SamplingConfig
from ._report import fmt, md_table

#: Verifiers compared by default (``resispec`` is ours, the rest are baselines).
from .defaults import DECODE_VERIFIERS as DEFAULT_VERIFIERS  # noqa: E402
AUTOREGRESSIVE = "autoregressive"


@dataclass
class BenchRow:
    """Totals of one method on one tree shape over all prompts and seeds."""

    method: str
    tree: str
    tokens: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    target_seconds: float = 0.0
    draft_seconds: float = 0.0
    runs: int = 0

    @property
    def block_efficiency(self) -> float:
        return self.tokens / max(self.target_calls, 1)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    def add(self, res) -> None:
        self.tokens += len(res.tokens)
        self.target_calls += res.target_calls
        self.draft_calls += res.draft_calls
        self.seconds += res.seconds
        self.cpu_seconds += res.cpu_seconds
        self.target_seconds += res.target_seconds
        self.draft_seconds += res.draft_seconds
        self.runs += 1

    def add_run(self, run: dict) -> None:
        """Add one stored run (a ``BenchResult.runs`` entry; ``--resume``)."""
        self.tokens += run["tokens"]
        self.target_calls += run["target_calls"]
        self.draft_calls += run.get("draft_calls", 0)
        for k in ("seconds", "cpu_seconds", "target_seconds", "draft_seconds"):
            setattr(self, k, getattr(self, k) + run.get(k, 0.0))
        self.runs += 1


@dataclass
class BenchResult:
    """Totals per (method, tree) in ``rows``, one dict per finished run in ``runs``.

    ``complete`` is False while the benchmark is still running (a partial result).
    """

    rows: list
    config: dict = field(default_factory=dict)
    runs: list = field(default_factory=list)
    complete: bool = True

    def table(self) -> list[dict]:
        """Rows with block efficiency, tokens/s and the ratios (dicts, for printing and JSON).

        Beside the totals: ``tps_median`` / ``tps_q25`` / ``tps_q75`` (tokens/s
        over runs), ``speedup_paired`` (mean over units of this method's
        tokens/s divided by target-only decoding's on the SAME unit, run next to
        it) with its standard error ``speedup_paired_se`` (sd / sqrt(n)), the same
        ratio of CPU time (``speedup_paired_cpu`` / ``_se``: tokens per CPU-second,
        blind to other processes holding the cores), and
        ``block_efficiency_se`` (s.e. of the per-unit block efficiency).
        None where undefined (no target-only run, a single unit).

        Paired Rao-Blackwellised keys (speculative rows; None where no run of the tree served the verifier):
        ``block_efficiency_rb`` = sum over calls of (1 + expected accepted) / calls, pooled over EVERY run
        on this tree whose drafting serves this verifier (whichever verifier drove it), ``rb_calls`` those
        calls, ``block_efficiency_rb_se``; ``rb_vs_best_baseline`` (minus the best baseline's RB value, best
        of the published baselines on the tree (never a ResiSpec rule: ``is_ours``), named in ``rb_best_baseline``) and ``rb_vs_rrs``
        with ``_se``; the observed counterpart
        ``block_efficiency_calls`` (this method's own (1 + accepted) per call, before the max-new-tokens
        cut) with ``_se``, and ``rb_se_gain`` = its s.e. / the RB s.e.; when the best baseline also drove
        runs on the tree, ``obs_vs_best_baseline`` (± ``_se``) = the same difference from observed counts
        (different trajectories, paired by cluster only) and ``rb_diff_se_gain`` = its s.e. / the RB
        difference's (what the paired estimator buys when comparing two verifiers).  Standard errors are over
        (seed, prompt) clusters, the independent units (calls within a decode share a context, and
        repeats repeat the same tokens), by the delta method for a ratio of sums (Cochran 1977, sec. 6.3):
        ``z_u = (S_u - R N_u) / mean(N)``, s.e. = sd(z) / sqrt(n); a difference uses ``z_a - z_b`` on the
        same clusters, so the pairing (the same trees) cancels their common noise.

        ``speedup_projected`` / ``speedup_projected_cpu`` / ``projected_from``: the paired speed-up (wall,
        CPU time) projected from a method that ran on the tree by the ratio of RB block efficiencies
        (:func:`_project`); for a method that ran it is its own measured speed-up.  Rows of verifiers only
        scored (``run_bench(score=)``) have no runs, only RB and projected keys.
        """
        ar = next((r for r in self.rows if r.method == AUTOREGRESSIVE), None)
        ar_tps = {x["unit"]: _tps(x) for x in self.runs if x["method"] == AUTOREGRESSIVE}
        ar_cps = {x["unit"]: _tps(x, "cpu_seconds") for x in self.runs if x["method"] == AUTOREGRESSIVE}
        rb = {r.tree: _rb_tree(self.runs, r.tree) for r in self.rows if r.method != AUTOREGRESSIVE}
        ar_runs = [x for x in self.runs if x["method"] == AUTOREGRESSIVE]
        ar_calls = sum(x["target_calls"] for x in ar_runs)
        ar_pass = sum(x["target_seconds"] for x in ar_runs) / ar_calls if ar_calls else None  # s per 1-token pass
        out = []
        for r in self.rows:
            peers = [x for x in self.rows if x.tree == r.tree and _is_baseline(x.method) and x.runs]
            best_be = max((x.block_efficiency for x in peers), default=float("nan"))
            best_tps = max((x.tokens_per_second for x in peers), default=float("nan"))
            mine = [x for x in self.runs if x["method"] == r.method and x["tree"] == r.tree]
            tps = [_tps(x) for x in mine]
            be = [x["tokens"] / max(x["target_calls"], 1) for x in mine]
            ratios = [v for v in (_tps(x) / ar_tps[x["unit"]] for x in mine if ar_tps.get(x["unit"]))
                      if math.isfinite(v)]                     # an unmeasured run (0 s) leaves its unit out
            cpu_ratios = [v for v in (_tps(x, "cpu_seconds") / ar_cps[x["unit"]] for x in mine
                                      if ar_cps.get(x["unit"])) if math.isfinite(v)]
            q = np.percentile(tps, [25, 50, 75]) if tps else [None] * 3
            levels = sum(x.get("draft_levels", 0) for x in mine)
            # draft cost per drafted level / one 1-token target pass, both measured in this run
            cost = (sum(x["draft_seconds"] for x in mine) / levels / ar_pass
                    if levels and ar_pass and r.method != AUTOREGRESSIVE else None)
            out.append({
                "method": r.method, "tree": r.tree, "tokens": r.tokens, "target_calls": r.target_calls,
                "draft_calls": r.draft_calls, "block_efficiency": r.block_efficiency if r.runs else None,
                "block_efficiency_se": _se(be),
                "tokens_per_second": r.tokens_per_second if r.runs else None, "seconds": r.seconds,
                "tps_q25": q[0], "tps_median": q[1], "tps_q75": q[2],
                "target_seconds": r.target_seconds, "draft_seconds": r.draft_seconds,
                "draft_cost_per_level": cost,
                "speedup_vs_autoregressive": (r.tokens_per_second / ar.tokens_per_second) if ar and ar.runs and r.runs
                else float("nan"),
                "speedup_paired": float(np.mean(ratios)) if ratios else None, "speedup_paired_se": _se(ratios),
                "speedup_paired_cpu": float(np.mean(cpu_ratios)) if cpu_ratios else None,
                "speedup_paired_cpu_se": _se(cpu_ratios), "paired_units": len(ratios),
                "block_eff_vs_best_baseline": r.block_efficiency / best_be if peers and r.runs else float("nan"),
                "tps_vs_best_baseline": r.tokens_per_second / best_tps if peers and r.runs else float("nan"),
                **_rb_keys(rb.get(r.tree), r.method),
            })
        _project(out, self.runs)
        _memory_bound(out, self.runs, self.config)
        return out


def _project(rows: list, runs: list) -> None:
    """Add ``speedup_projected`` / ``speedup_projected_cpu`` (and ``projected_from``) to every row with an RB value.

    A verifier's projected speed-up on a tree is the measured paired speed-up of a method that RAN on the
    same tree and whose runs scored it, times the ratio of their paired RB block efficiencies:
    ``S_v = S_d * BE_rb(v) / BE_rb(d)`` -- the per-call cost (draft + one target pass) is the driver's, so
    only the tokens per call change (a verifier's own step, microseconds to milliseconds, is left out).
    The driver is the row itself when it ran, else the method that ran most on the tree.
    """
    for r in rows:
        r.update(speedup_projected=None, speedup_projected_cpu=None, projected_from=None)
    for r in rows:
        if r["block_efficiency_rb"] is None:
            continue
        scored_by = {x["method"] for x in runs if x["tree"] == r["tree"] and r["method"] in x.get("rb", {})}
        cands = [d for d in rows if d["tree"] == r["tree"] and d["method"] in scored_by
                 and d["speedup_paired"] is not None and d["block_efficiency_rb"]]
        if not cands:
            continue
        d = next((c for c in cands if c["method"] == r["method"]), max(cands, key=lambda c: c["paired_units"]))
        f = r["block_efficiency_rb"] / d["block_efficiency_rb"]  # tokens per call relative to the driver's
        r["speedup_projected"] = d["speedup_paired"] * f
        if d["speedup_paired_cpu"] is not None:
            r["speedup_projected_cpu"] = d["speedup_paired_cpu"] * f
        r["projected_from"] = d["method"]


def _memory_bound(rows: list, runs: list, config: dict) -> None:
    """Add ``speedup_memory_bound`` (and ``draft_forwards_per_call``) to every row.

    The memory-bound speed-up of Jeon et al. (Recursive Speculative Decoding, arXiv 2402.14160): a forward
    pass costs in proportion to the weights it reads, so ``MBSU = BE / (1 + c L)`` with ``c`` = draft
    weights / target weights (``config["draft_weights"] / config["target_weights"]``, 0 for a weight-free
    draft such as the n-gram) and ``L`` = draft forwards per target call, measured on the tree (all its
    runs).  ``BE`` is the paired RB block efficiency where there is one, else the observed one.  None
    where a size is unknown or the tree has no run; 1 for target-only decoding.
    """
    tw, dw = config.get("target_weights"), config.get("draft_weights")
    c = dw / tw if tw and dw is not None else None
    for r in rows:
        r.update(speedup_memory_bound=None, draft_forwards_per_call=None)
        if r["method"] == AUTOREGRESSIVE:
            r["speedup_memory_bound"] = 1.0 if r["block_efficiency"] is not None else None
            continue
        mine = [x for x in runs if x["tree"] == r["tree"] and x["method"] != AUTOREGRESSIVE]
        calls = sum(x["target_calls"] for x in mine)
        be = r["block_efficiency_rb"] if r["block_efficiency_rb"] is not None else r["block_efficiency"]
        if c is None or not calls or be is None:
            continue
        L = sum(x.get("draft_calls", x["draft_levels"]) for x in mine) / calls
        r["draft_forwards_per_call"] = L
        r["speedup_memory_bound"] = be / (1.0 + c * L)  # MBSU = BE / (1 + c L), arXiv 2402.14160


def _cluster_ratio(runs: list, clusters: list, value) -> tuple:
    """``(R, z, calls)``: the ratio of sums ``R = sum S_u / sum N_u`` over clusters, its influence vector
    ``z`` (n,) float64 and the calls ``sum N_u``; ``(None, None, 0)`` when no run counts.

    ``value(run)``: the run's sum over calls (None: the run does not count), ``N`` its ``calls``.
    ``z_u = (S_u - R N_u) / mean(N)`` (delta method, Cochran 1977 sec. 6.3): var(R) ~ var(z) / n.
    """
    S, N = dict.fromkeys(clusters, 0.0), dict.fromkeys(clusters, 0)
    for x in runs:
        v = value(x)
        if v is not None:
            c = (x["seed"], x["prompt"])
            S[c] += v
            N[c] += x["calls"]
    tot = sum(N.values())
    if tot == 0:
        return None, None, 0
    R = sum(S.values()) / tot
    nbar = tot / len(clusters)
    return R, np.array([(S[c] - R * N[c]) / nbar for c in clusters]), tot


def _z_se(z) -> float | None:
    return float(np.std(z, ddof=1) / math.sqrt(len(z))) if z is not None and len(z) >= 2 else None


#: an RB difference whose s.e. is below this (relative) is a tie to rounding: no s.e. gain is formed from it
_TIE_SE = 1e-9


def _rb_tree(runs: list, tree: str) -> dict:
    """Per method on ``tree``: (RB estimate, z), (observed per-call estimate, z) over (seed, prompt) clusters;
    also the tree's runs and, per driver, the clusters it drove (for :func:`_obs_common`)."""
    mine = [x for x in runs if x["tree"] == tree and "rb" in x]
    clusters = sorted({(x["seed"], x["prompt"]) for x in mine})
    names = dict.fromkeys(m for x in mine for m in x["rb"])
    out = {m: _cluster_ratio(mine, clusters, lambda x, m=m: x["rb"].get(m)) for m in names}
    drove = {}
    for x in mine:
        drove.setdefault(x["method"], set()).add((x["seed"], x["prompt"]))
    obs = {m: _cluster_ratio(mine, clusters, lambda x, m=m: x["obs"] if x["method"] == m else None) for m in drove}
    return {"rb": out, "obs": obs, "runs": mine, "drove": drove}


def _obs_common(t: dict, a: str, b: str):
    """Observed per-call estimates ``(R, z, calls)`` of drivers ``a`` and ``b`` on the clusters BOTH drove
    (else a difference would compare prompt sets, not verifiers); None when they share none."""
    both = t["drove"].get(a, set()) & t["drove"].get(b, set())
    if not both:
        return None
    runs = [x for x in t["runs"] if (x["seed"], x["prompt"]) in both]
    return tuple(_cluster_ratio(runs, sorted(both), lambda x, m=m: x["obs"] if x["method"] == m else None)
                 for m in (a, b))


def _rb_keys(t: dict | None, method: str) -> dict:
    """The paired Rao-Blackwellised keys of one (method, tree) row (see :meth:`BenchResult.table`)."""
    keys = dict.fromkeys(["block_efficiency_rb", "block_efficiency_rb_se", "rb_calls", "rb_best_baseline",
                          "rb_vs_best_baseline", "rb_vs_best_baseline_se", "rb_vs_rrs", "rb_vs_rrs_se",
                          "block_efficiency_calls", "block_efficiency_calls_se", "rb_se_gain",
                          "obs_vs_best_baseline", "obs_vs_best_baseline_se", "rb_diff_se_gain"])
    if t is None:
        return keys
    R, z, calls = t["rb"].get(method, (None, None, 0))
    O, zo, _ = t["obs"].get(method, (None, None, 0))
    keys.update(block_efficiency_calls=O, block_efficiency_calls_se=_z_se(zo))
    if R is None:
        return keys
    se = _z_se(z)
    keys.update(block_efficiency_rb=R, block_efficiency_rb_se=se, rb_calls=calls)
    if se and keys["block_efficiency_calls_se"] is not None:
        keys["rb_se_gain"] = keys["block_efficiency_calls_se"] / se
    base = {m: v for m, v in t["rb"].items() if _is_baseline(m) and v[0] is not None}
    best = _best_baseline({m: v[0] for m, v in base.items()})
    for name, other in (("rb_vs_best_baseline", best), ("rb_vs_rrs", "rrs" if "rrs" in t["rb"] else None)):
        if other is not None:
            Rb, zb, _ = t["rb"][other]
            keys[name], keys[name + "_se"] = R - Rb, _z_se(z - zb)
    keys["rb_best_baseline"] = best
    # the same difference from observed counts, when the best baseline ALSO drove runs on this tree: different
    # trajectories on the prompts both ran, so only the prompts pair it; its s.e. over the paired RB
    # difference's is what the paired estimator buys when telling two verifiers apart
    common = _obs_common(t, method, best) if best is not None and best != method else None
    if common is not None:
        (Om, zm, _), (Ob, zob, _) = common
        keys["obs_vs_best_baseline"], keys["obs_vs_best_baseline_se"] = Om - Ob, _z_se(zm - zob)
        rb_se = keys["rb_vs_best_baseline_se"]
        obs_se = keys["obs_vs_best_baseline_se"]
        # no gain from a tie: RB s.e. at rounding level, or observed s.e. 0 (the two drove identical paths)
        if rb_se is not None and rb_se > _TIE_SE * max(1.0, abs(R)) and obs_se:
            keys["rb_diff_se_gain"] = keys["obs_vs_best_baseline_se"] / rb_se
    return keys


def _cpu_support() -> dict:
    """:func:`resispec.decoding.models.cpu_matmul_support` (the report's regime line)."""
    from ..decoding.models import cpu_matmul_support

    return cpu_matmul_support()


def _is_baseline(method: str) -> bool:
    """A published rule (not target-only decoding, not one of this project's rules: ``is_ours``)."""
    return method != AUTOREGRESSIVE and not is_ours(method)


def _tps(run: dict, key: str = "seconds") -> float:
    """Tokens per second of one run (``key="cpu_seconds"``: per CPU-second); NaN when unmeasured."""
    sec = run.get(key) or 0.0
    return run["tokens"] / sec if sec > 0 else float("nan")


def _se(xs) -> float | None:
    """Standard error of the mean (sd with ddof=1 over sqrt(n)); None for fewer than 2 values."""
    xs = [x for x in xs if x == x]
    return float(np.std(xs, ddof=1) / math.sqrt(len(xs))) if len(xs) >= 2 else None


def run_bench(pair, prompts: list[list[int]], *, verifiers=DEFAULT_VERIFIERS, trees=("4,2,1",),
              sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 48, seeds=(0,),
              proxy: str | None = None, progress: bool = True, stop_at_eos: bool = True,
              capture: list | None = None, capture_top_n: int = 64, repeats: int = 1, on_run=None,
              estimate: bool = True, paired: bool = True, score=(), resume: BenchResult | None = None) -> BenchResult:
    """Run target-only decoding and every verifier on the same prompts/seeds/trees.

    Parameters
    ----------
    pair : ModelPair
    prompts : list of token-id lists
    verifiers : names from the registry (numpy backend), or path-level rules (``block``, ``token``:
        ``resispec.pathlevel``, chain shapes only such as ``"1,1,1"``; ``traversal`` on every iid shape)
        -- each is RUN (timed) on every tree it serves
    trees : tree shapes like ``"4,2,1"``; ``"wor:2,1"`` drafts without replacement and runs only the rules
        exact for it (:func:`shape_verifiers`)
    score : names, optional
        Verifiers scored by the paired Rao-Blackwellised estimator only (not run): their exact expected
        block efficiency on the SAME drafted trees as the runs, and a projected speed-up (see
        :meth:`BenchResult.table`); needs ``paired``.
    sampling, max_new_tokens, seeds
    proxy : ResiSpec proxy name (``resispec`` only)
    capture : list, optional
        When given, the (p, q) laws of every verified node are appended as
        sparse rows ``(index, p_vals, q_vals, depth)`` (see
        :func:`simulators.captured.sparsify`), so a benchmark doubles as a capture.
    repeats : int >= 1
        Each (seed, prompt) unit is run this many times (same tokens, new timings).
    on_run : callable(BenchResult), optional
        Called after every finished run with the result so far (``complete``
        False): the command writes its report there, so a killed run keeps
        what it finished.
    estimate : bool
        Print a time estimate to stderr before starting (from a one-step probe).
    paired : bool
        At every target call of every speculative run, also compute every verifier's exact expected accepted
        count on that run's tree (``speculative_decode(..., also=)``; no extra target pass; the time is kept
        out of the run's timings) for the paired Rao-Blackwellised columns.  Verifiers sharing one
        ``Verifier.name`` (e.g. two resispec variants) get no paired value.
    resume : BenchResult, optional
        A stopped run of the SAME benchmark (``--resume``): its units (prompt x seed x repeat) whose every
        method finished are kept as they are and not run again; a unit it left half-done is run again whole
        (so every unit's methods stay interleaved in one stretch of time).  Raises ValueError naming the
        settings that differ (model, draft, trees, verifiers, sampling, prompts, token budget, EOS handling,
        device, dtype, paired columns), or when it is already complete, or with ``capture``.

    Timing on a shared machine: the methods are interleaved unit by unit (a
    unit = one (seed, prompt, repeat)), in an order ROTATED by one method per
    unit, so load drift hits every method alike and no method always runs
    first; :meth:`BenchResult.table` then reports medians with spread and
    paired per-unit ratios to target-only decoding with standard errors.

    Returns
    -------
    BenchResult (``complete`` True)
    """
    shapes = [TreeShape.parse(t) for t in trees]
    if not prompts:
        raise ValueError("no prompts to benchmark")
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    eos = pair.eos_ids() if stop_at_eos else None
    score = [m for m in dict.fromkeys(score) if m not in verifiers]
    runners = {s.label: shape_verifiers(verifiers, s, proxy) for s in shapes}  # label -> {method: Verifier}
    scoring = {s.label: {**runners[s.label], **_servable(shape_verifiers(score, s, proxy), runners[s.label], s)}
               for s in shapes}
    idle = [lab for lab, r in runners.items() if not r]
    if idle:
        raise ValueError(f"no verifier of {list(verifiers)} is exact for tree(s) {idle}; a wor: tree needs a "
                         "without-replacement rule (rrs_wor, resispec, target_only)")
    jobs = [(AUTOREGRESSIVE, None)] + [(m, s) for s in shapes for m in runners[s.label]]
    rows = {(AUTOREGRESSIVE, "-"): BenchRow(AUTOREGRESSIVE, "-")}
    rows.update({(m, s.label): BenchRow(m, s.label) for s in shapes for m in scoring[s.label]})
    labels, scorers = {}, {}
    for lab, vs in scoring.items():
        names = [v.name for v in vs.values()]
        labels[lab] = {v.name: m for m, v in vs.items() if names.count(v.name) == 1}  # Verifier.name -> method
        scorers[lab] = [vs[m] for m in labels[lab].values()]
    import torch

    units = [(seed, i, r) for seed in seeds for i in range(len(prompts)) for r in range(repeats)]
    config = {"target": pair.target_name, "draft": pair.draft_name,
              "trees": [s.label for s in shapes], "verifiers": list(verifiers), "scored": score,
              "temperature": sampling.temperature,
              "top_k": sampling.top_k, "top_p": sampling.top_p, "max_new_tokens": max_new_tokens,
              "seeds": list(seeds), "repeats": int(repeats), "prompts": len(prompts),
              "prompt_tokens": [len(p) for p in prompts], "proxy": proxy,
              "device": str(next(pair.target.parameters()).device),
              "dtype": str(next(pair.target.parameters()).dtype), "machine": platform.machine(),
              "cpu_count": os.cpu_count(), "cpu": _cpu_support(),
              "order": "methods interleaved per unit, rotated by one per unit",
              "stop_at_eos": bool(stop_at_eos), "paired": bool(paired), "threads": torch.get_num_threads(),
              "prompt_sha256": prompts_digest(prompts)}
    draft = as_draft(pair.draft)
    config.update(target_weights=count_weights(pair.target), draft_weights=draft.weights)
    kept = {} if resume is None else _resumable(resume, config, jobs, units, capture is not None)
    for p in prompts:             # every prompt x tree fits both contexts: checked before the first run writes
        check_fits(pair.target, len(p), max_new_tokens, None)
        for s in shapes:
            check_fits(pair.target, len(p), max_new_tokens, s)
            check_fits(draft, len(p), max_new_tokens, s, what="draft")
    result = BenchResult(list(rows.values()), config, runs=[], complete=False)
    for u in sorted(kept):                                     # --resume: the finished units, as they were
        for run in kept[u]:
            rows[(run["method"], run["tree"])].add_run(run)
            result.runs.append(run)
    if resume is not None:
        config["resumed_units"] = len(kept)
        print(f"bench-decode: resuming: {len(kept)} of {len(units)} units (prompt x seed x repeat) kept from the "
              "stopped run (a unit is kept when every method finished it); the rest run now", file=sys.stderr)
    todo = [u for u in range(len(units)) if u not in kept]
    if estimate and todo:
        print(_estimate(pair, prompts, jobs, len(todo), max_new_tokens, sampling), file=sys.stderr)
    total = len(jobs) * len(todo) * max_new_tokens
    with tqdm(total=total, desc="bench-decode", unit="tok", disable=None if progress else True, file=sys.stderr) as bar:
        for u in todo:
            seed, i, rep = units[u]
            ids = prompts[i]
            for method, shape in jobs[u % len(jobs):] + jobs[:u % len(jobs)]:
                row = rows[(method, shape.label if shape else "-")]
                rng = np.random.default_rng([int(seed), i])
                bar.set_postfix_str(f"{method} {row.tree} prompt {i} seed {seed} rep {rep}")
                done = bar.n

                def tick(toks):
                    bar.update(len(toks))
                if method == AUTOREGRESSIVE:
                    res = autoregressive_decode(pair.target, ids, sampling=sampling, max_new_tokens=max_new_tokens,
                                                rng=rng, eos_token_id=eos, on_tokens=tick)
                else:
                    drv, label = runners[shape.label][method], labels[shape.label]
                    also = [v for v in scorers[shape.label] if v.name != drv.name] if paired else None
                    res = speculative_decode(pair.target, pair.draft, ids, drv, shape,
                                             sampling=sampling, max_new_tokens=max_new_tokens, rng=rng,
                                             eos_token_id=eos, record=capture is not None, on_tokens=tick,
                                             also=also, drafting=_explicit(shape))
                    if capture is not None and res.nodes:
                        from simulators.captured import sparsify

                        idx, pv, qv = sparsify(np.stack([n["p"] for n in res.nodes]),
                                               np.stack([n["q"] for n in res.nodes]), capture_top_n)
                        capture.append((idx, pv, qv, np.array([n["depth"] for n in res.nodes])))
                        res.nodes.clear()
                bar.update(done + max_new_tokens - bar.n)  # an early EOS still completes this run's share
                row.add(res)
                run = {"unit": u, "method": method, "tree": row.tree, "prompt": i, "seed": int(seed),
                       "repeat": rep, "tokens": len(res.tokens), "target_calls": res.target_calls,
                       "draft_levels": res.draft_levels, "draft_calls": res.draft_calls, "seconds": res.seconds,
                       "cpu_seconds": res.cpu_seconds,
                       "target_seconds": res.target_seconds, "draft_seconds": res.draft_seconds}
                if method != AUTOREGRESSIVE and paired:
                    # per-run sums over calls: observed (1 + accepted) and, per served verifier, (1 + expected)
                    run.update(calls=len(res.accepted), obs=float(sum(1 + a for a in res.accepted)),
                               rb={label[n]: float(sum(1.0 + e for e in xs)) for n, xs in res.expected.items()
                                   if n in label}, rb_seconds=res.expected_seconds)
                result.runs.append(run)
                if on_run is not None:
                    on_run(result)
    result.complete = True
    return result


#: settings a resumed run must share with the stopped one (everything that changes what a run measures, or its
#: timings: the machine and the thread count)
RESUME_KEYS = ("target", "draft", "trees", "verifiers", "scored", "temperature", "top_k", "top_p", "max_new_tokens",
               "seeds", "repeats", "prompts", "prompt_tokens", "prompt_sha256", "proxy", "device", "dtype",
               "target_weights", "draft_weights", "stop_at_eos", "paired", "machine", "cpu_count", "cpu", "threads")


def prompts_digest(prompts) -> str:
    """sha256 of the prompts' token ids (``--resume`` refuses other prompts of the same lengths)."""
    import hashlib

    return hashlib.sha256(json.dumps([[int(t) for t in p] for p in prompts]).encode()).hexdigest()


def config_differences(prev: dict, now: dict, keys=RESUME_KEYS) -> list:
    """``"key: <there> there, <now> now"`` for every key of ``keys`` stored in ``prev`` (even as null) whose
    value differs in ``now``; a key the stopped run's file lacks (older files) is not compared."""
    return [f"{k}: {prev[k]!r} there, {now.get(k)!r} now" for k in keys if k in prev and k in now
            and prev[k] != now[k]]


def _resumable(old: BenchResult, config: dict, jobs: list, units: list, capture: bool) -> dict:
    """``{unit index: [stored runs]}`` of the units of ``old`` whose every method finished (``--resume``)."""
    if capture:
        raise ValueError("--resume cannot be combined with --capture (the stopped run's nodes were not kept); "
                         "drop one of them")
    if old.complete:
        raise ValueError("--resume: that run is complete; nothing to resume (choose another --out for a new run)")
    prev = old.config
    missing = [k for k in ("target", "draft", "trees", "verifiers", "temperature", "max_new_tokens", "seeds",
                           "prompts", "stop_at_eos", "paired") if k not in prev]
    if missing:
        raise ValueError(f"--resume: the stopped run's file does not record {', '.join(missing)}, so it cannot be "
                         "checked to match this run; start a new run (another --out)")
    diff = config_differences(prev, config)
    if diff:
        raise ValueError("--resume: the stopped run was made with other settings (" + "; ".join(diff)
                         + "); rerun with the same options as its command, or choose another --out")
    want = {(m, s.label if s else "-") for m, s in jobs}
    by_unit: dict = {}
    stray = 0
    for x in old.runs:
        u = x.get("unit")
        if isinstance(u, int) and not isinstance(u, bool) and 0 <= u < len(units) \
                and (x.get("seed"), x.get("prompt"), x.get("repeat")) == tuple(int(v) for v in units[u]) \
                and (x.get("method"), x.get("tree")) in want:
            by_unit.setdefault(u, {})[(x["method"], x["tree"])] = x
        else:
            stray += 1
    if stray:
        raise ValueError(f"--resume: {stray} stored run(s) match no (prompt, seed, repeat, method, tree) of this "
                         "run; the file was not written by this benchmark as configured: start a new run")
    return {u: [got[j] for j in sorted(want)] for u, got in by_unit.items() if set(got) >= want}


def shape_verifiers(names, shape: TreeShape, proxy: str | None = None) -> dict:
    """``{method: Verifier}`` of the registry names ``names`` to run on ``shape``.

    On a plain shape (``"2,1"``) every name runs with its own drafting law (``rrs_wor`` drafts without
    replacement, as before).  On a ``wor:`` shape only rules exact for without-replacement drafts run: a
    name whose default rule is not is rebuilt with ``drafting="without_replacement"`` where the registry
    has such a rule (``resispec`` -> ResiSpec WOR) and left out otherwise (``rrs``, ``kseq``).

    Raises ValueError for an unknown name (from the registry).
    """
    from ..decoding.expected import serves

    out = {}
    for m in names:
        opts = {"proxy": proxy} if proxy and m == "resispec" else {}
        v = get_any_verifier(m, **opts)
        if not serves(v, v.drafting if v.drafting != "any" else shape.drafting, shape):
            continue  # a chain-only path rule (block, token) on a tree with branching
        if shape.drafting == "without_replacement" and not serves(v, shape.drafting):
            try:
                v = get_verifier(m, drafting=shape.drafting, **opts)
            except (TypeError, ValueError):
                continue  # no without-replacement rule of this name
            if not serves(v, shape.drafting):
                continue
        out[m] = v
    return out


def score_names(names) -> list:
    """``--score`` names checked against the registries; ``"all"`` = every built-in verifier needing no options,
    node-level and path-level (less ``rejection_proxy``, a frame for users' proxies whose default rule IS ``rrs``).

    Raises ValueError for an unknown name (the registry's message lists the known ones).
    """
    from ..verifiers.registry import available_verifiers

    out = []
    for n in names:
        if n == "all":
            for m in available_verifiers() + available_path_verifiers():
                if m == "rejection_proxy":
                    continue
                try:
                    get_any_verifier(m)
                except (TypeError, ValueError):
                    continue  # needs options
                out.append(m)
        else:
            get_any_verifier(n)
            out.append(n)
    return list(dict.fromkeys(out))


def _servable(scored: dict, runners: dict, shape: TreeShape) -> dict:
    """The scored-only verifiers exact for the drafting of at least one run on ``shape`` (others get no value)."""
    from ..decoding.engine import resolve_drafting
    from ..decoding.expected import serves

    modes = {resolve_drafting(v, shape, explicit=_explicit(shape) is not None) for v in runners.values()}
    return {m: v for m, v in scored.items() if any(serves(v, d, shape) for d in modes)}


def _explicit(shape: TreeShape) -> str | None:
    """The drafting law a ``wor:`` shape imposes (None: each verifier drafts with its own law)."""
    return shape.drafting if shape.drafting == "without_replacement" else None


#: target steps in the probe's longer decode: the step time is a difference of two decodes, and one step
#: (~0.5 s) against a ~3 s prefill is lost in load noise (a user's loaded run printed "0 ms")
_PROBE_STEPS = 4


def _probe_step(prefills: list, longer: float, steps: int = _PROBE_STEPS):
    """One target step (s) from decode timings: ``(longer - min(prefills)) / steps``, where ``prefills`` are
    1-token decodes and ``longer`` a ``1 + steps``-token decode; None when that is not positive (other
    processes held the cores during the probe)."""
    step = (longer - min(prefills)) / steps
    return step if step > 0 else None


def _estimate(pair, prompts, jobs, units: int, max_new_tokens: int, sampling) -> str:
    """One-line time estimate from a probe on the first prompt: 1-token decodes (the prefill), a
    ``1 + _PROBE_STEPS``-token decode (the step is their difference over ``_PROBE_STEPS``), and per tree shape a
    prefill with ``N`` more tokens (``N`` its drafted nodes: the extra cost of a verify pass over a 1-token step).

    ``jobs`` are the (method, shape) runs of one unit (shape None: target-only decoding), ``units`` the units
    to run.  A tree run makes between ``max_new_tokens / (depth + 1)`` calls (every call accepts a whole path)
    and ``max_new_tokens`` (one token a call), so the estimate is that range; draft passes are left out.
    A first, unmeasured decode warms the target up (weight packing, the compiled linear kernel), which
    otherwise lands in the probe and inflated the estimate 5-7x on short runs.
    """
    import time

    def timed(n: int, ids=None) -> float:
        t0 = time.perf_counter()
        autoregressive_decode(pair.target, prompts[0] if ids is None else ids, sampling=sampling,
                              max_new_tokens=n, rng=np.random.default_rng(0))
        return time.perf_counter() - t0

    timed(2)                                                   # warm-up, not measured
    prefills = [timed(1), timed(1)]
    step = _probe_step(prefills, timed(1 + _PROBE_STEPS))
    prefill = min(prefills)
    head = f"bench-decode: {len(jobs) * units} runs x up to {max_new_tokens} tokens; probe: prefill {prefill:.2f} s, one "
    if step is None:
        return (head + "target step not measurable (other processes held the cores during the probe), so no "
                "estimate; results are written as they come")
    passes = {}                                                # shape label -> seconds of one verify pass
    for _, shape in jobs:
        if shape is not None and shape.label not in passes:
            longer = list(prompts[0]) + [int(prompts[0][-1])] * shape.num_nodes
            passes[shape.label] = step + max(0.0, timed(1, longer) - prefill)
    lo = hi = 0.0
    for _, shape in jobs:
        if shape is None:
            lo += prefill + max_new_tokens * step
            hi += prefill + max_new_tokens * step
        else:
            lo += prefill + max_new_tokens / (shape.depth + 1) * passes[shape.label]
            hi += prefill + max_new_tokens * passes[shape.label]
    biggest = max(passes.items(), key=lambda kv: kv[1], default=None)
    tree = "" if biggest is None else f", a `{biggest[0]}` verify pass {biggest[1] * 1000:.0f} ms"
    return (head + f"target step {step * 1000:.0f} ms{tree} -> estimate ~{units * lo / 60:.1f}-{units * hi / 60:.1f} "
            "min (every call accepting a whole path .. one token a call; draft passes left out; a rough guide; "
            "results are written as they come)")


def format_table(result: BenchResult) -> str:
    """Markdown table of :meth:`BenchResult.table`."""
    head = ["method", "tree", "tokens", "target calls", "block eff. (± s.e.)", "tokens/s median [q25, q75]",
            "speed-up vs AR, paired (± s.e.)", "same, CPU time (± s.e.)", "block eff. / best baseline", "tokens/s / best baseline",
            "block eff. RB, pooled (± s.e.)", "RB - best baseline (± s.e.)", "RB - rrs (± s.e.)",
            "observed - best baseline (± s.e.)", "s.e. gain of RB: level / difference",
            "projected speed-up, wall / CPU", "memory-bound speed-up", "draft cost / level (x 1-token target pass)"]
    rows = ([r["method"], r["tree"], str(r["tokens"]) if r["block_efficiency"] is not None else "- (scored)",
             str(r["target_calls"]) if r["block_efficiency"] is not None else "-",
             _pm(r["block_efficiency"], r["block_efficiency_se"]),
             f"{_f(r['tps_median'])} [{_f(r['tps_q25'])}, {_f(r['tps_q75'])}]",
             _pm(r["speedup_paired"], r["speedup_paired_se"]),
             _pm(r["speedup_paired_cpu"], r["speedup_paired_cpu_se"]),
             _f(r["block_eff_vs_best_baseline"]), _f(r["tps_vs_best_baseline"]),
             _pm(r["block_efficiency_rb"], r["block_efficiency_rb_se"]),
             _pm(r["rb_vs_best_baseline"], r["rb_vs_best_baseline_se"])
             + (f" ({r['rb_best_baseline']})" if r["rb_best_baseline"] else ""),
             _pm(r["rb_vs_rrs"], r["rb_vs_rrs_se"]),
             _pm(r["obs_vs_best_baseline"], r["obs_vs_best_baseline_se"]),
             f"{_f(r['rb_se_gain'])} / {_f(r['rb_diff_se_gain'])}",
             (f"{_f(r['speedup_projected'])} / {_f(r['speedup_projected_cpu'])}"
              + ("" if r["projected_from"] in (None, r["method"]) else f" (from {r['projected_from']})")
              if r["speedup_projected"] is not None else "-"),
             _f(r["speedup_memory_bound"]), _f(r["draft_cost_per_level"])] for r in result.table())
    return "\n".join(md_table(head, rows))


def _best_baseline(values: dict):
    """The baseline with the largest value; ties (equal to round-off: rules that coincide on the tree, such as
    ``block`` and ``traversal`` on a chain) go to a node-level rule before a path-level one, then by name, so
    the pick does not depend on which rounding came out larger."""
    if not values:
        return None
    top = max(values.values())
    tied = [m for m, v in values.items() if v >= top - 1e-9 * max(1.0, abs(top))]
    path = set(available_path_verifiers())
    return min(tied, key=lambda m: (m in path, m))


def _f(x) -> str:
    """NaN / None (no baseline on this tree, nothing run yet) as ``-``."""
    return fmt(None if x is None or x != x else x, 3)


def _ratio(a, b) -> str:
    return "unknown" if a is None or not b else f"{a:,} / {b:,} = {a / b:.3f}"


def _pm(x, se) -> str:
    return _f(x) + ("" if se is None else f" ± {se:.3f}")


def write_report(result: BenchResult, md_path: Path, json_path: Path, command: str = "") -> None:
    """Write the markdown report and the strict JSON (atomically: temp file, then rename; JSON first).

    A result with ``complete`` False is marked PARTIAL in both.
    """
    cfg = result.config
    cpu = cfg.get("cpu") or {}
    half = str(cfg.get("device", "")).startswith("cpu") and any(
        h in str(cfg.get("dtype")) for h in ("bfloat16", "float16"))
    native = {True: "yes", False: "NO (emulated: multi-token passes are slow)", None: "unknown"}
    key = "bf16" if "bfloat16" in str(cfg.get("dtype")) else "fp16"
    regime = (f"{cfg.get('device')} {cfg.get('dtype')}, {cfg.get('cpu_count')} CPU cores visible "
              f"({cfg.get('machine')}, torch CPU kernels {cpu.get('capability', 'unknown')}"
              + (f", native {key} matmul {native.get(cpu.get(key), 'unknown')}" if half else "") + ")")
    done = len(result.runs)
    md = "\n".join([
        "# Real-model tree speculative decoding: every verifier vs target-only decoding", "",
        "" if result.complete else f"**PARTIAL: {done} runs finished when this was written** (a prompt some "
        "methods have not finished yet runs again whole under --resume).", "",
        "" if not cfg.get("resumed_units") else f"Resumed: {cfg['resumed_units']} unit(s) (prompt x seed x repeat) "
        "were kept from a stopped run and timed then; the rest ran in this session (speed-ups stay paired within "
        "each unit).", "",
        f"Command: `{command}`" if command else "", "",
        f"Regime: {regime}. Target `{cfg.get('target')}`, draft `{cfg.get('draft')}`; "
        f"T = {cfg.get('temperature')}, top-k = {cfg.get('top_k')}, top-p = {cfg.get('top_p')}; "
        f"{cfg.get('prompts')} prompts x seeds {cfg.get('seeds')} x {cfg.get('repeats', 1)} repeat(s), "
        f"up to {cfg.get('max_new_tokens')} new tokens.", "",
        "Block efficiency (tokens per target call) is the portable figure; tokens/s is wall-clock on THIS machine "
        "(shared CPU: noisy; a CPU pass of a few tokens costs 1.2-2x a 1-token pass even with the streamed linear, benchmarks/cpu_linear.py). Methods run "
        "interleaved unit by unit (unit = prompt x seed x repeat) in rotated order; the paired speed-up is the mean "
        "over units of tokens/s divided by target-only decoding's on the same unit; the CPU-time column is the same "
        "ratio of tokens per CPU-second of this process (time.process_time), which other processes holding the "
        "cores do not inflate. "
        "'best baseline' = best published rule run or scored on the same tree (sps, rrs, rrs_wor, kseq, target_only, "
        "block, token, traversal; never a ResiSpec rule: resispec, resispec_lookahead, resispec_myopic, rejection_proxy, traversal_resispec). "
        "RB columns: the paired Rao-Blackwellised block efficiency, mean over calls of 1 + the EXACT expected "
        "accepted length of each verifier on the SAME drafted trees and target laws, pooled over every run of the "
        "tree whose drafting the verifier is exact for (unbiased: every exact verifier emits the target's law, so "
        "the visited contexts are target samples whatever verifier drives); s.e. over (seed, prompt) clusters; "
        "differences are paired (same trees). 'observed - best baseline': the same difference from the two verifiers' own runs (different trajectories, paired by prompt only; needs both to drive, --verifiers A B). s.e. gain: observed s.e. / RB s.e., of one verifier's level and of that difference. It counts calls before the max-new-tokens cut, so it can sit a "
        "little above the observed column. Memory-bound speed-up (Jeon et al., arXiv 2402.14160): "
        "BE / (1 + c L), c = draft / target weights "
        f"({_ratio(cfg.get('draft_weights'), cfg.get('target_weights'))}), L = draft forwards per target call on "
        "the tree; what a machine whose passes cost in proportion to the weights read would give. Draft cost / "
        "level: the driver's measured draft seconds per drafted level over target-only decoding's target seconds "
        "per (1-token) call, both from this run (the prompt's prefill counts as one of those calls, which "
        "understates the draft's share by a few per cent).", "",
        format_table(result), ""])
    payload = {"config": cfg, "command": command, "complete": result.complete, "rows": result.table(),
               "raw": [asdict(r) for r in result.rows], "runs": result.runs}
    _atomic_write(Path(json_path), json.dumps(strict(payload), indent=2, allow_nan=False))
    _atomic_write(Path(md_path), md)
