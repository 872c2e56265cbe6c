"""Markdown summary of a block-efficiency benchmark (:func:`simulators.bench.run_bench`)."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from .bench import BENCH_VERIFIERS, BenchRow


def _candidates(rows):
    labels = []
    for r in rows:
        for lab in r.efficiency:
            if lab not in labels and any(e.label == lab and e.role == "candidate" for e in BENCH_VERIFIERS):
                labels.append(lab)
    return labels


def markdown(rows: list[BenchRow], settings: dict, command: str = "", seconds: float | None = None) -> str:
    """Report: headline, where the candidates gain and where not, per-shape and per-family means, full table."""
    cands = _candidates(rows)
    out = ["# Block-efficiency benchmark", ""]
    if command:
        out += [f"Command: `{command}`" + (f" ({seconds:.0f} s)" if seconds is not None else ""), ""]
    out += [
        f"Families {', '.join(f'`{f}`' for f in settings['families'])}; T in {list(settings['temperatures'])}; "
        f"V = {settings['V']}; {settings['n']} (p, q) pairs per (family, T), each tree node draws one i.i.d.; "
        f"seed {settings['seed']}.",
        "",
        "Block efficiency = expected tokens per target call, exact for i.i.d. per-node pairs: "
        "`1 + a_1 + a_1 a_2 + ...` with `a_d` the mean acceptance with `k_d` candidates "
        "(closed forms; without-replacement baselines `rrs_wor` and `target_only_wor` use a Rao-Blackwellised "
        f"Monte Carlo average over {settings['n_samples']} candidate tuples per pair, standard errors in the JSON). "
        "Ratio = verifier / best baseline of the shape's drafting (iid shapes: `sps`, `rrs`, `kseq`, `target_only`; "
        "`wor:` shapes: `rrs_wor`, `target_only_wor`). `resispec` drafts i.i.d. on every shape, so on `wor:` shapes "
        "it is compared on the same branching factors but with its own drafting. "
        "`bound` = the per-node optimum alpha* chained over the tree (iid shapes).",
        "",
    ]
    wor_c = [e for e in BENCH_VERIFIERS if e.role == "candidate" and e.drafting == "without_replacement"
             and any(e.label in r.efficiency for r in rows)]
    for e in wor_c:
        out += [f"`{e.label}` (`{e.name}` {e.options}) drafts without replacement and runs on `wor:` shapes"
                + (f" with at most {e.max_k} candidates per node" if e.max_k else "")
                + (f", Monte Carlo acceptance over {e.n_samples} candidate tuples per pair" if e.n_samples else "")
                + "; blank cells were not computed.", ""]
    for lab in cands:
        rs = [r for r in rows if lab in r.ratio and np.isfinite(r.ratio[lab])]
        if not rs:
            continue
        best = max(rs, key=lambda r: r.ratio[lab])
        worst = min(rs, key=lambda r: r.ratio[lab])
        ratios = np.array([r.ratio[lab] for r in rs])
        nogain = [r for r in rs if r.ratio[lab] <= 1.0 + 1e-9]
        out += [f"## `{lab}` against the best baseline", "",
                f"- Largest ratio: **{best.ratio[lab]:.3f}** ({best.efficiency[lab]:.3f} vs `{best.best_baseline}` "
                f"{best.efficiency[best.best_baseline]:.3f} tokens/call) on family `{best.family}`, T = {best.temperature:g}, "
                f"shape `{best.shape}` ({best.nodes} nodes).",
                f"- Smallest ratio: {worst.ratio[lab]:.3f} on `{worst.family}`, T = {worst.temperature:g}, shape `{worst.shape}`.",
                f"- Median ratio {np.median(ratios):.3f} over {len(rs)} configurations; ratio > 1.01 in "
                f"{int(np.sum(ratios > 1.01))}, no gain (ratio <= 1) in {len(nogain)}.",
                ""]
        by_shape = defaultdict(list)
        by_fam = defaultdict(list)
        by_T = defaultdict(list)
        for r in rs:
            by_shape[r.shape].append(r)
            by_fam[r.family].append(r.ratio[lab])
            by_T[r.temperature].append(r.ratio[lab])
        out += ["Mean over families and temperatures, per shape:", "",
                f"| shape | nodes | mean `{lab}` tokens/call | mean best baseline | mean ratio | max ratio | mean bound |",
                "|---|---|---|---|---|---|---|"]
        for s, rr in by_shape.items():
            bounds = [r.bound for r in rr if r.bound is not None]
            out.append(f"| `{s}` | {rr[0].nodes} | {np.mean([r.efficiency[lab] for r in rr]):.3f} | "
                       f"{np.mean([r.efficiency[r.best_baseline] for r in rr]):.3f} | "
                       f"{np.mean([r.ratio[lab] for r in rr]):.3f} | {max(r.ratio[lab] for r in rr):.3f} | "
                       f"{np.mean(bounds) if bounds else float('nan'):.3f} |")
        flat = [s for s, rr in by_shape.items() if max(r.ratio[lab] for r in rr) <= 1.001]
        small = sorted(((np.mean([r.ratio[lab] for r in rr]), s) for s, rr in by_shape.items() if s not in flat))[:3]
        out += ["", "Where it does not gain: " + (", ".join(f"`{s}`" for s in flat) + " (ratio <= 1.001 in every family "
                "and temperature)" if flat else "every shape gains somewhere") + "; smallest mean gains elsewhere: "
                + ", ".join(f"`{s}` {m:.3f}" for m, s in small) + "."]
        out += ["", "Mean ratio per family: " + ", ".join(f"`{f}` {np.mean(v):.3f}" for f, v in by_fam.items()) + ".",
                "", "Mean ratio per temperature: " + ", ".join(f"T={t:g} {np.mean(v):.3f}" for t, v in by_T.items()) + ".",
                ""]
    labels = []
    for r in rows:
        for lab in r.efficiency:
            if lab not in labels:
                labels.append(lab)
    out += ["## Full table (tokens per target call; ratio of each verifier to the best baseline in brackets)", "",
            "| family | T | shape | nodes | " + " | ".join(f"`{lab}`" for lab in labels) + " | best baseline | bound |",
            "|---|---|---|---|" + "---|" * len(labels) + "---|---|"]
    for r in rows:
        cells = []
        for lab in labels:
            if lab in r.efficiency and np.isfinite(r.efficiency[lab]):
                cells.append(f"{r.efficiency[lab]:.3f} ({r.ratio[lab]:.3f})")
            else:
                cells.append("")
        bound = f"{r.bound:.3f}" if r.bound is not None else ""
        out.append(f"| `{r.family}` | {r.temperature:g} | `{r.shape}` | {r.nodes} | " + " | ".join(cells)
                   + f" | `{r.best_baseline}` | {bound} |")
    out.append("")
    return "\n".join(out)
