"""Side-by-side decoding benchmark: target-only autoregressive vs every verifier.

Every method runs on the same prompts, the same seeds (``rng =
default_rng([seed, prompt index])``) and the same tree shapes.  Reported per
(method, tree): block efficiency (tokens per target call), target calls,
tokens per second, and the ratios to target-only decoding and to the best
baseline verifier of the same tree.
"""

from __future__ import annotations

import json
import os
import platform
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
        self.target_seconds += res.target_seconds
        self.draft_seconds += res.draft_seconds
        self.runs += 1


@dataclass
class BenchResult:
    rows: list
    config: dict = field(default_factory=dict)

    def table(self) -> list[dict]:
        """Rows with block efficiency, tokens/s and the ratios (dicts, for printing and JSON)."""
        ar = next((r for r in self.rows if r.method == AUTOREGRESSIVE), None)
        out = []
        for r in self.rows:
            peers = [x for x in self.rows if x.tree == r.tree and x.method not in (AUTOREGRESSIVE, "resispec")]
            best_be = max((x.block_efficiency for x in peers), default=float("nan"))
            best_tps = max((x.tokens_per_second for x in peers), default=float("nan"))
            out.append({
                "method": r.method, "tree": r.tree, "tokens": r.tokens, "target_calls": r.target_calls,
                "draft_calls": r.draft_calls, "block_efficiency": r.block_efficiency,
                "tokens_per_second": r.tokens_per_second, "seconds": r.seconds,
                "target_seconds": r.target_seconds, "draft_seconds": r.draft_seconds,
                "speedup_vs_autoregressive": (r.tokens_per_second / ar.tokens_per_second) if ar else float("nan"),
                "block_eff_vs_best_baseline": r.block_efficiency / best_be if peers else float("nan"),
                "tps_vs_best_baseline": r.tokens_per_second / best_tps if peers else float("nan"),
            })
        return out


def run_bench(pair, prompts: list[list[int]], *, verifiers=DEFAULT_VERIFIERS, trees=("4,2,1",),
              sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 48, seeds=(0,),
              proxy: str | None = None, progress: bool = True, stop_at_eos: bool = True,
              capture: list | None = None, capture_top_n: int = 64) -> BenchResult:
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

    Returns
    -------
    BenchResult
    """
    shapes = [TreeShape.parse(t) for t in trees]
    if not prompts:
        raise ValueError("no prompts to benchmark")
    eos = pair.eos_ids() if stop_at_eos else None
    jobs = [(AUTOREGRESSIVE, None)] + [(v, s) for s in shapes for v in verifiers]
    rows = {(m, str(s) if s else "-"): BenchRow(m, str(s) if s else "-") for m, s in jobs}
    built = {m: get_verifier(m, **({"proxy": proxy} if proxy and m == "resispec" else {}))
             for m in dict.fromkeys(m for m, _ in jobs) if m != AUTOREGRESSIVE}
    total = len(jobs) * len(prompts) * len(seeds)
    # Methods are interleaved per (seed, prompt), so a change in machine load during the run hits every
    # method alike instead of biasing whichever ran at a busy moment.
    with tqdm(total=total, desc="bench-decode", disable=not progress) as bar:
        for seed in seeds:
            for i, ids in enumerate(prompts):
                for method, shape in jobs:
                    row = rows[(method, str(shape) if shape else "-")]
                    rng = np.random.default_rng([int(seed), i])
                    bar.set_postfix_str(f"{method} {row.tree}")
                    if method == AUTOREGRESSIVE:
                        res = autoregressive_decode(pair.target, ids, sampling=sampling,
                                                    max_new_tokens=max_new_tokens, rng=rng, eos_token_id=eos)
                    else:
                        res = speculative_decode(pair.target, pair.draft, ids, built[method], shape,
                                                 sampling=sampling, max_new_tokens=max_new_tokens, rng=rng,
                                                 eos_token_id=eos, record=capture is not None)
                        if capture is not None and res.nodes:
                            from simulators.captured import sparsify

                            idx, pv, qv = sparsify(np.stack([n["p"] for n in res.nodes]),
                                                   np.stack([n["q"] for n in res.nodes]), capture_top_n)
                            capture.append((idx, pv, qv, np.array([n["depth"] for n in res.nodes])))
                            res.nodes.clear()
                    row.add(res)
                    bar.update(1)
    config = {"target": pair.target_name, "draft": pair.draft_name, "trees": [str(s) for s in shapes],
              "verifiers": list(verifiers), "temperature": sampling.temperature, "top_k": sampling.top_k,
              "top_p": sampling.top_p, "max_new_tokens": max_new_tokens, "seeds": list(seeds),
              "prompts": len(prompts), "prompt_tokens": [len(p) for p in prompts], "proxy": proxy,
              "device": str(next(pair.target.parameters()).device),
              "dtype": str(next(pair.target.parameters()).dtype), "machine": platform.machine(),
              "cpu_count": os.cpu_count()}
    return BenchResult(list(rows.values()), config)


def format_table(result: BenchResult) -> str:
    """Markdown table of :meth:`BenchResult.table`."""
    head = ["method", "tree", "tokens", "target calls", "block eff.", "tokens/s", "speed-up vs AR",
            "block eff. / best baseline", "tokens/s / best baseline"]
    rows = ([r["method"], r["tree"], str(r["tokens"]), str(r["target_calls"]), f"{r['block_efficiency']:.3f}",
             f"{r['tokens_per_second']:.3f}", f"{r['speedup_vs_autoregressive']:.3f}",
             _f(r["block_eff_vs_best_baseline"]), _f(r["tps_vs_best_baseline"])] for r in result.table())
    return "\n".join(md_table(head, rows))


def _f(x) -> str:
    """NaN (no baseline on this tree) as ``-``."""
    return fmt(None if x != x else x, 3)


def write_report(result: BenchResult, md_path: Path, json_path: Path, command: str = "") -> None:
    """Write the markdown report and the JSON (atomically: temp file, then rename)."""
    cfg = result.config
    regime = (f"{cfg.get('device')} {cfg.get('dtype')}, {cfg.get('cpu_count')} CPU cores visible "
              f"({cfg.get('machine')})")
    md = "\n".join([
        "# Real-model tree speculative decoding: every verifier vs target-only decoding", "",
        f"Command: `{command}`" if command else "", "",
        f"Regime: {regime}. Target `{cfg.get('target')}`, draft `{cfg.get('draft')}`; "
        f"T = {cfg.get('temperature')}, top-k = {cfg.get('top_k')}, top-p = {cfg.get('top_p')}; "
        f"{cfg.get('prompts')} prompts x seeds {cfg.get('seeds')}, up to {cfg.get('max_new_tokens')} new tokens.", "",
        "Block efficiency (tokens per target call) is the portable figure; tokens/s is wall-clock on THIS machine "
        "(shared CPU: noisy, and a CPU tree pass costs far more than a 1-token pass, unlike a GPU). "
        "'best baseline' = best of rrs, rrs_wor, kseq, target_only on the same tree.", "",
        format_table(result), ""])
    _atomic_write(Path(md_path), md)
    _atomic_write(Path(json_path), json.dumps({"config": cfg, "command": command, "rows": result.table(),
                                               "raw": [asdict(r) for r in result.rows]}, indent=2))

