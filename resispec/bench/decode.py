"""Side-by-side decoding benchmark: target-only autoregressive vs every verifier.

Every method runs on the same prompts, the same seeds (``rng =
default_rng([seed, prompt index])``) and the same tree shapes.  Reported per
(method, tree): block efficiency (tokens per target call), target calls,
tokens per second, and the ratios to target-only decoding and to the best
baseline verifier of the same tree.
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
from ..trees import TreeShape
from ..verifiers.registry import get_verifier
from ..decoding.engine import autoregressive_decode, speculative_decode
from ..decoding.laws import SamplingConfig
from ._report import fmt, md_table

#: Verifiers compared by default (``resispec`` is ours, the rest are baselines).
DEFAULT_VERIFIERS = ("rrs", "rrs_wor", "kseq", "target_only", "resispec")
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
        """
        ar = next((r for r in self.rows if r.method == AUTOREGRESSIVE), None)
        ar_tps = {x["unit"]: _tps(x) for x in self.runs if x["method"] == AUTOREGRESSIVE}
        ar_cps = {x["unit"]: _tps(x, "cpu_seconds") for x in self.runs if x["method"] == AUTOREGRESSIVE}
        out = []
        for r in self.rows:
            peers = [x for x in self.rows if x.tree == r.tree and x.method not in (AUTOREGRESSIVE, "resispec")
                     and x.runs]
            best_be = max((x.block_efficiency for x in peers), default=float("nan"))
            best_tps = max((x.tokens_per_second for x in peers), default=float("nan"))
            mine = [x for x in self.runs if x["method"] == r.method and x["tree"] == r.tree]
            tps = [_tps(x) for x in mine]
            be = [x["tokens"] / max(x["target_calls"], 1) for x in mine]
            ratios = [_tps(x) / ar_tps[x["unit"]] for x in mine if ar_tps.get(x["unit"])]
            cpu_ratios = [_tps(x, "cpu_seconds") / ar_cps[x["unit"]] for x in mine if ar_cps.get(x["unit"])]
            q = np.percentile(tps, [25, 50, 75]) if tps else [None] * 3
            out.append({
                "method": r.method, "tree": r.tree, "tokens": r.tokens, "target_calls": r.target_calls,
                "draft_calls": r.draft_calls, "block_efficiency": r.block_efficiency,
                "block_efficiency_se": _se(be),
                "tokens_per_second": r.tokens_per_second, "seconds": r.seconds,
                "tps_q25": q[0], "tps_median": q[1], "tps_q75": q[2],
                "target_seconds": r.target_seconds, "draft_seconds": r.draft_seconds,
                "speedup_vs_autoregressive": (r.tokens_per_second / ar.tokens_per_second) if ar and ar.runs
                else float("nan"),
                "speedup_paired": float(np.mean(ratios)) if ratios else None, "speedup_paired_se": _se(ratios),
                "speedup_paired_cpu": float(np.mean(cpu_ratios)) if cpu_ratios else None,
                "speedup_paired_cpu_se": _se(cpu_ratios), "paired_units": len(ratios),
                "block_eff_vs_best_baseline": r.block_efficiency / best_be if peers else float("nan"),
                "tps_vs_best_baseline": r.tokens_per_second / best_tps if peers else float("nan"),
            })
        return out


def _tps(run: dict, key: str = "seconds") -> float:
    """Tokens per second of one run (``key="cpu_seconds"``: per CPU-second); NaN when unmeasured."""
    sec = run.get(key) or 0.0
    return run["tokens"] / sec if sec > 0 else float("nan")


def _se(xs) -> float | None:
    """Standard error of the mean (sd with ddof=1 over sqrt(n)); None for fewer than 2 values."""
    xs = [x for x in xs if x == x]
    return float(np.std(xs, ddof=1) / math.sqrt(len(xs))) if len(xs) >= 2 else None


def strict(obj):
    """``obj`` with every NaN / inf float replaced by None, for strict JSON (``allow_nan=False``)."""
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def run_bench(pair, prompts: list[list[int]], *, verifiers=DEFAULT_VERIFIERS, trees=("4,2,1",),
              sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 48, seeds=(0,),
              proxy: str | None = None, progress: bool = True, stop_at_eos: bool = True,
              capture: list | None = None, capture_top_n: int = 64, repeats: int = 1, on_run=None,
              estimate: bool = True) -> BenchResult:
    """Run target-only decoding and every verifier on the same prompts/seeds/trees.

    Parameters
    ----------
    pair : ModelPair
    prompts : list of token-id lists
    verifiers : names from the registry (numpy backend)
    trees : tree shapes like ``"4,2,1"``
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
    jobs = [(AUTOREGRESSIVE, None)] + [(v, s) for s in shapes for v in verifiers]
    rows = {(m, str(s) if s else "-"): BenchRow(m, str(s) if s else "-") for m, s in jobs}
    built = {m: get_verifier(m, **({"proxy": proxy} if proxy and m == "resispec" else {}))
             for m in dict.fromkeys(m for m, _ in jobs) if m != AUTOREGRESSIVE}
    units = [(seed, i, r) for seed in seeds for i in range(len(prompts)) for r in range(repeats)]
    config = {"target": pair.target_name, "draft": pair.draft_name,
              "trees": [str(s) for s in shapes], "verifiers": list(verifiers), "temperature": sampling.temperature,
              "top_k": sampling.top_k, "top_p": sampling.top_p, "max_new_tokens": max_new_tokens,
              "seeds": list(seeds), "repeats": int(repeats), "prompts": len(prompts),
              "prompt_tokens": [len(p) for p in prompts], "proxy": proxy,
              "device": str(next(pair.target.parameters()).device),
              "dtype": str(next(pair.target.parameters()).dtype), "machine": platform.machine(),
              "cpu_count": os.cpu_count(), "order": "methods interleaved per unit, rotated by one per unit"}
    result = BenchResult(list(rows.values()), config, runs=[], complete=False)
    if estimate:
        print(_estimate(pair, prompts, len(jobs) * len(units), max_new_tokens, sampling), file=sys.stderr)
    total = len(jobs) * len(units) * max_new_tokens
    with tqdm(total=total, desc="bench-decode", unit="tok", disable=not progress, file=sys.stderr) as bar:
        for u, (seed, i, rep) in enumerate(units):
            ids = prompts[i]
            for method, shape in jobs[u % len(jobs):] + jobs[:u % len(jobs)]:
                row = rows[(method, str(shape) if shape else "-")]
                rng = np.random.default_rng([int(seed), i])
                bar.set_postfix_str(f"{method} {row.tree} prompt {i} seed {seed} rep {rep}")
                done = bar.n

                def tick(toks):
                    bar.update(len(toks))
                if method == AUTOREGRESSIVE:
                    res = autoregressive_decode(pair.target, ids, sampling=sampling, max_new_tokens=max_new_tokens,
                                                rng=rng, eos_token_id=eos, on_tokens=tick)
                else:
                    res = speculative_decode(pair.target, pair.draft, ids, built[method], shape,
                                             sampling=sampling, max_new_tokens=max_new_tokens, rng=rng,
                                             eos_token_id=eos, record=capture is not None, on_tokens=tick)
                    if capture is not None and res.nodes:
                        from simulators.captured import sparsify

                        idx, pv, qv = sparsify(np.stack([n["p"] for n in res.nodes]),
                                               np.stack([n["q"] for n in res.nodes]), capture_top_n)
                        capture.append((idx, pv, qv, np.array([n["depth"] for n in res.nodes])))
                        res.nodes.clear()
                bar.update(done + max_new_tokens - bar.n)  # an early EOS still completes this run's share
                row.add(res)
                result.runs.append({"unit": u, "method": method, "tree": row.tree, "prompt": i, "seed": int(seed),
                                    "repeat": rep, "tokens": len(res.tokens), "target_calls": res.target_calls,
                                    "draft_levels": res.draft_levels, "seconds": res.seconds,
                                    "cpu_seconds": res.cpu_seconds,
                                    "target_seconds": res.target_seconds, "draft_seconds": res.draft_seconds})
                if on_run is not None:
                    on_run(result)
    result.complete = True
    return result


def _estimate(pair, prompts, runs: int, max_new_tokens: int, sampling) -> str:
    """One-line time estimate from a probe: one prefill and one 1-token target step on the first prompt."""
    import time

    t0 = time.perf_counter()
    autoregressive_decode(pair.target, prompts[0], sampling=sampling, max_new_tokens=2,
                          rng=np.random.default_rng(0))
    probe = time.perf_counter() - t0
    t0 = time.perf_counter()
    autoregressive_decode(pair.target, prompts[0], sampling=sampling, max_new_tokens=1, rng=np.random.default_rng(0))
    prefill = time.perf_counter() - t0
    step = max(probe - prefill, 1e-6)
    per_run = prefill + max_new_tokens * step
    return (f"bench-decode: {runs} runs x up to {max_new_tokens} tokens; probe: prefill {prefill:.2f} s, one "
            f"target step {step * 1000:.0f} ms -> estimate ~{runs * per_run / 60:.1f} min, assuming each method "
            "costs about as much per token as target-only decoding (a rough guide; results are written as they come)")


def format_table(result: BenchResult) -> str:
    """Markdown table of :meth:`BenchResult.table`."""
    head = ["method", "tree", "tokens", "target calls", "block eff. (± s.e.)", "tokens/s median [q25, q75]",
            "speed-up vs AR, paired (± s.e.)", "same, CPU time (± s.e.)", "block eff. / best baseline", "tokens/s / best baseline"]
    rows = ([r["method"], r["tree"], str(r["tokens"]), str(r["target_calls"]),
             _pm(r["block_efficiency"], r["block_efficiency_se"]),
             f"{_f(r['tps_median'])} [{_f(r['tps_q25'])}, {_f(r['tps_q75'])}]",
             _pm(r["speedup_paired"], r["speedup_paired_se"]),
             _pm(r["speedup_paired_cpu"], r["speedup_paired_cpu_se"]),
             _f(r["block_eff_vs_best_baseline"]), _f(r["tps_vs_best_baseline"])] for r in result.table())
    return "\n".join(md_table(head, rows))


def _f(x) -> str:
    """NaN / None (no baseline on this tree, nothing run yet) as ``-``."""
    return fmt(None if x is None or x != x else x, 3)


def _pm(x, se) -> str:
    return _f(x) + ("" if se is None else f" ± {se:.3f}")


def write_report(result: BenchResult, md_path: Path, json_path: Path, command: str = "") -> None:
    """Write the markdown report and the strict JSON (atomically: temp file, then rename; JSON first).

    A result with ``complete`` False is marked PARTIAL in both.
    """
    cfg = result.config
    regime = (f"{cfg.get('device')} {cfg.get('dtype')}, {cfg.get('cpu_count')} CPU cores visible "
              f"({cfg.get('machine')})")
    done = len(result.runs)
    md = "\n".join([
        "# Real-model tree speculative decoding: every verifier vs target-only decoding", "",
        "" if result.complete else f"**PARTIAL: {done} runs finished when this was written.**", "",
        f"Command: `{command}`" if command else "", "",
        f"Regime: {regime}. Target `{cfg.get('target')}`, draft `{cfg.get('draft')}`; "
        f"T = {cfg.get('temperature')}, top-k = {cfg.get('top_k')}, top-p = {cfg.get('top_p')}; "
        f"{cfg.get('prompts')} prompts x seeds {cfg.get('seeds')} x {cfg.get('repeats', 1)} repeat(s), "
        f"up to {cfg.get('max_new_tokens')} new tokens.", "",
        "Block efficiency (tokens per target call) is the portable figure; tokens/s is wall-clock on THIS machine "
        "(shared CPU: noisy; a CPU pass of a few tokens costs 1.2-2x a 1-token pass even with the small-batch linear, benchmarks/cpu_linear.py). Methods run "
        "interleaved unit by unit (unit = prompt x seed x repeat) in rotated order; the paired speed-up is the mean "
        "over units of tokens/s divided by target-only decoding's on the same unit; the CPU-time column is the same "
        "ratio of tokens per CPU-second of this process (time.process_time), which other processes holding the "
        "cores do not inflate. "
        "'best baseline' = best of rrs, rrs_wor, kseq, target_only on the same tree.", "",
        format_table(result), ""])
    payload = {"config": cfg, "command": command, "complete": result.complete, "rows": result.table(),
               "raw": [asdict(r) for r in result.rows], "runs": result.runs}
    _atomic_write(Path(json_path), json.dumps(strict(payload), indent=2, allow_nan=False))
    _atomic_write(Path(md_path), md)
