"""One table from several ``bench-decode`` runs (e.g. one per temperature): the real-pair table.

Reads the strict JSON that :func:`resispec.bench.decode.write_report` writes and renders, per run and tree,
every verifier's paired Rao-Blackwellised block efficiency with its standard error, its ratio to the best
baseline on the same tree (the seed's headline style), the paired difference, the projected speed-up on the
machine that ran it (CPU time and wall) and the memory-bound speed-up (Jeon et al., arXiv 2402.14160).
Nothing is recomputed: the rows are :meth:`BenchResult.table` of the stored runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..trees import TreeShape
from ._report import fmt, md_table
from .decode import AUTOREGRESSIVE, BenchResult, BenchRow, _f, _is_baseline, _pm


def load_result(path, need_speculative: bool = True) -> BenchResult:
    """The :class:`BenchResult` stored in a ``bench-decode`` JSON.

    Raises ValueError naming ``path`` when the file is missing, not JSON, or not written by ``bench-decode``,
    or (``need_speculative``) holds no finished speculative run.
    """
    path = Path(path)
    what = f"{str(path)!r} is not a bench-decode run JSON"

    def _no_nan(token):
        raise ValueError(f"non-finite number {token} (bench-decode writes strict JSON)")

    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_nan)
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} does not exist; pass the .json a 'resispec bench decode --out X.md' "
                         "run wrote beside X.md") from None
    except (OSError, ValueError, RecursionError) as exc:          # JSONDecodeError, UnicodeDecodeError: ValueError
        raise ValueError(f"{what} ({type(exc).__name__}: {exc}); pass the .json a 'resispec bench decode' run "
                         "wrote") from None
    if isinstance(data, dict) and "raw" not in data and isinstance(data.get("runs"), list) \
            and all(isinstance(r, dict) and "source" in r for r in data["runs"]):
        raise ValueError(f"{str(path)!r} is a summary written by 'bench-decode --from-json', not a run; pass the "
                         f"run JSONs it names: {[r['source'] for r in data['runs']]}")
    if isinstance(data, dict) and "raw" in data and "runs" not in data:
        raise ValueError(f"{str(path)!r} was written by an older bench-decode that kept no per-run data (no 'runs'); "
                         "the summary needs them: rerun that bench-decode")
    try:
        cfg, raw, runs, complete = data["config"], data["raw"], data["runs"], data["complete"]
        if not isinstance(cfg, dict) or not isinstance(raw, list) or not isinstance(runs, list):
            raise TypeError("config must be an object, raw and runs lists")
        if not isinstance(complete, bool):
            raise TypeError(f"complete must be true or false, got {complete!r}")
        for key in ("target_weights", "draft_weights"):
            w = cfg.get(key)
            if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0 or
                                  (key == "target_weights" and w == 0)):
                raise TypeError(f"config {key} must be a parameter count (int > 0; draft >= 0) or null, got {w!r}")
        _check_runs(runs, cfg.get("max_new_tokens"))
        fields = BenchRow.__dataclass_fields__
        rows = [BenchRow(**{k: r[k] for k in fields if k in r}) for r in raw]   # older files lack draft_calls
        result = BenchResult(rows, cfg, runs=list(runs), complete=complete)
        result.table()                                   # every stored run must render: fail here, not later
    except (KeyError, TypeError, AttributeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(f"{what} ({type(exc).__name__}: {exc}); pass the .json a 'resispec bench decode' run "
                         "wrote") from None
    if need_speculative and not any(x.get("method") != AUTOREGRESSIVE for x in result.runs if isinstance(x, dict)):
        raise ValueError(f"{str(path)!r} holds no finished speculative run; nothing to tabulate")
    return result


#: per-run counts and times: finite numbers >= 0 where present
_NONNEG = ("tokens", "target_calls", "calls", "obs", "seconds", "cpu_seconds", "rb_seconds", "target_seconds",
           "draft_seconds", "draft_levels", "draft_calls")
#: of those, the counts: integers
_COUNTS = ("tokens", "target_calls", "calls", "draft_levels", "draft_calls")


def _check_runs(runs: list, max_new_tokens=None) -> None:
    """TypeError / ValueError for a run that could not come from bench-decode: not an object, a count or time
    that is negative or not a finite number (or a count that is not an integer), an RB value likewise, more
    tokens than ``max_new_tokens``, target-only decoding with tokens != target calls (one token per call), or
    the same (method, tree, seed, prompt, repeat) twice (it would shrink every standard error)."""
    seen = set()
    for i, x in enumerate(runs):
        if not isinstance(x, dict) or not isinstance(x.get("method"), str) or not isinstance(x.get("tree"), str):
            raise TypeError(f"runs[{i}] must be an object with string 'method' and 'tree'")
        vals = [(k, x[k]) for k in _NONNEG if x.get(k) is not None]
        vals += [(f"rb.{k}", v) for k, v in (x.get("rb") or {}).items()]
        for k, v in vals:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"runs[{i}] {k} = {v!r}: counts and times are finite numbers >= 0")
            if k in _COUNTS and not isinstance(v, int):
                raise ValueError(f"runs[{i}] {k} = {v!r}: a count is an integer")
        if isinstance(max_new_tokens, int) and isinstance(x.get("tokens"), int) and x["tokens"] > max_new_tokens:
            raise ValueError(f"runs[{i}] tokens = {x['tokens']} exceeds the run's max_new_tokens {max_new_tokens}")
        if x["method"] != AUTOREGRESSIVE and isinstance(x.get("tokens"), int) and isinstance(x.get("target_calls"), int):
            try:
                depth = TreeShape.parse(x["tree"]).depth
            except ValueError:
                raise ValueError(f"runs[{i}] tree = {x['tree']!r} is not a tree shape") from None
            if x["tokens"] > x["target_calls"] * (depth + 1):     # a call emits at most depth + 1 tokens
                raise ValueError(f"runs[{i}] made {x['tokens']} tokens in {x['target_calls']} target calls on "
                                 f"tree {x['tree']} (at most {depth + 1} a call)")
        if x["method"] == AUTOREGRESSIVE and x.get("tokens") != x.get("target_calls"):
            raise ValueError(f"runs[{i}] target-only decoding made {x.get('tokens')!r} tokens in "
                             f"{x.get('target_calls')!r} target calls; it makes one token per call")
        key = (x["method"], x["tree"], x.get("seed"), x.get("prompt"), x.get("repeat"))
        if key in seen:
            raise ValueError(f"runs[{i}] repeats (method, tree, seed, prompt, repeat) = {key}")
        seen.add(key)


def _order(method: str) -> tuple:
    """Target-only decoding, then baselines, then path-level rules, then ours; alphabetical within each."""
    from ..pathlevel.registry import available_path_verifiers

    if method == AUTOREGRESSIVE:
        return (0, method)
    if method in available_path_verifiers():
        return (2, method)
    return (1 if _is_baseline(method) else 3, method)


def summary_rows(result: BenchResult) -> list[list[str]]:
    """Markdown cells, one row per (tree, verifier) with an RB value, plus the target-only row."""
    table = result.table()
    out = []
    ar = next((r for r in table if r["method"] == AUTOREGRESSIVE), None)
    if ar is not None:
        out.append(["-", "target-only decoding", "1.000", "-", "-", "1.000", "1.000"])
    for tree in dict.fromkeys(r["tree"] for r in table if r["method"] != AUTOREGRESSIVE):
        rows = sorted((r for r in table if r["tree"] == tree and r["block_efficiency_rb"] is not None),
                      key=lambda r: _order(r["method"]))
        best = next((r["rb_best_baseline"] for r in rows if r["rb_best_baseline"]), None)
        best_be = next((r["block_efficiency_rb"] for r in rows if r["method"] == best), None)
        for r in rows:
            ran = " (ran)" if r["block_efficiency"] is not None else ""
            diff = "-" if r["rb_vs_best_baseline"] is None else (
                fmt(r["rb_vs_best_baseline"], 3, sign=True) + ("" if r["rb_vs_best_baseline_se"] is None
                                                      else f" ± {r['rb_vs_best_baseline_se']:.3f}"))
            se = r["block_efficiency_rb_se"]
            if r["block_efficiency"] is not None and r["speedup_paired_cpu"] is not None:   # measured: with s.e.
                proj = (f"{_pm(r['speedup_paired_cpu'], r['speedup_paired_cpu_se'])} "
                        f"({_pm(r['speedup_paired'], r['speedup_paired_se'])}) measured")
            else:
                proj = "-" if r["speedup_projected_cpu"] is None else (
                    f"{_f(r['speedup_projected_cpu'])} ({_f(r['speedup_projected'])})")
            out.append([f"`{tree}`", f"{r['method']}{ran}" + (" **best baseline**" if r["method"] == best else ""),
                        _f(r["block_efficiency_rb"]) + ("" if se is None else f" ± {se:.3f}"),
                        _f(r["block_efficiency_rb"] / best_be) if best_be else "-", diff, proj,
                        _f(r["speedup_memory_bound"])])
    return out


def _prompts(res: BenchResult) -> str:
    """The prompt count; for a stopped run, how many finished of those asked for."""
    asked = res.config.get("prompts")
    if res.complete:
        return str(asked)
    done = {x.get("prompt") for x in res.runs if x.get("method") == AUTOREGRESSIVE}
    return f"{len(done)} (of {asked} asked)"


def summary_markdown(results: list, sources: list, command: str = "") -> str:
    """The combined report: per input run its settings line and table (see the module docstring)."""
    head = ["tree", "method", "block eff., paired RB (± s.e.)", "/ best baseline", "- best baseline (± s.e.)",
            "speed-up vs target-only, CPU time (wall)", "memory-bound speed-up"]
    md = ["# Real-model speculative decoding: every verifier on the same drafted trees", ""]
    if command:
        md += [f"Rendered by `{command}` from the runs below (nothing recomputed).", ""]
    md += ["How to read it. Every exact verifier emits the target's law, so one run per tree (the `(ran)` row) "
           "visits target-distributed contexts and every other verifier is scored on the SAME drafted trees by "
           "its exact expected accepted length (the paired Rao-Blackwellised estimator; s.e. over prompts; "
           "differences paired). `/ best baseline`: block efficiency over the best published rule on the tree "
           "(sps, rrs, rrs_wor, kseq, target_only, block, token, traversal; never one of ours: resispec*, "
           "traversal_resispec), the seed's headline ratio. "
           "Speed-up: on the `(ran)` row, MEASURED -- the mean over prompts of tokens/s over target-only "
           "decoding's on the same prompt, run interleaved (± s.e. over prompts); on the other rows PROJECTED -- "
           "the driver's measured speed-up times the ratio of block efficiencies (a verifier's own step cost left "
           "out). CPU time is the figure to read on a shared machine, wall in brackets. Memory-bound speed-up (Jeon et al., arXiv "
           "2402.14160): BE / (1 + c L), c = draft / target weights, L = draft forwards per target call -- what "
           "a machine whose passes cost in proportion to the weights read (a GPU at small batch) would give.", ""]
    for res, src in zip(results, sources):
        cfg = res.config
        tw, dw = cfg.get("target_weights"), cfg.get("draft_weights")
        c = dw / tw if tw and dw is not None else None
        costs = [r["draft_cost_per_level"] for r in res.table() if r.get("draft_cost_per_level") is not None]
        lo, hi = (f"{min(costs):.3f}", f"{max(costs):.3f}") if costs else ("", "")
        cost = ("" if not costs else f"; draft cost per drafted level, measured: {lo}"
                + ("" if hi == lo else f"-{hi}") + " of a 1-token target pass")
        md += [f"## T = {cfg.get('temperature')}: target `{cfg.get('target')}`, draft `{cfg.get('draft')}`", "",
               f"Source: `{src}`" + ("" if res.complete else " (**PARTIAL**: the run was stopped)")
               + f"; {_prompts(res)} prompts x seeds {cfg.get('seeds')}, up to {cfg.get('max_new_tokens')} new "
               f"tokens, {cfg.get('device')} {cfg.get('dtype')}; c = {'unknown' if c is None else f'{c:.3f}'}{cost}.", ""]
        md += md_table(head, summary_rows(res))
        md.append("")
    return "\n".join(md)
