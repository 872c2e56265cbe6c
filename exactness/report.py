"""Reports of a certify run: terminal table, Markdown, JSON and figures (atomic writes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from resispec._io import strict_json

from .grid import REFUSED, GridResult
from .power import detectable_tv


def _fmt(x, spec=".3g", none="n/a"):
    if x is None:
        return none
    if isinstance(x, float) and not np.isfinite(x):
        return str(x)
    return format(x, spec)


from resispec._io import atomic_write  # noqa: E402  (re-exported)

COLUMNS = ("verifier", "family", "V", "k", "exact TV", "p (cell)", "p Holm", "p BH", "n", "detect. TV",
           "accept", "alpha*", "rrs", "verdict", "skipped")

#: Column legend printed under the terminal table and in the Markdown report.
LEGEND = (
    "exact TV: TV(exact output law of the verifier's chain, p) by enumeration or the built-in accept table "
    "(n/a: not computed, see skipped; 'invalid': the chain returned NaN/inf or a probability outside [0, 1]; "
    "a trailing * means verify disagrees with its own chain, so the exact TV describes _chain, not verify)",
    "p (cell): the cell's smallest Holm-adjusted p-value over its checks; p Holm / p BH: that p-value "
    "adjusted over all cells (Holm decides the verdict, Benjamini-Hochberg is reported)",
    "n: Monte Carlo draws; detect. TV: smallest TV bias the marginal test detects with power 0.99 at alpha",
    "accept: exact acceptance rate; alpha*: optimum for the verifier's drafting; rrs: acceptance of rrs",
    "verdict: 'no bias detected (detectable TV x)': no check found a bias, and one of TV x would have been found "
    "with power 0.99 (evidence, not a proof of exactness); or FAIL with each failing check and THAT check's own "
    "TV / statistic / p",
    "skipped: checks that did not run (or could not fail); reasons listed below the table",
    "FAIL (subject error: cause): the verifier misbehaved (raised, called sys.exit, emitted a token outside V, "
    "a call did not return within --time-limit plus its grace); nothing was measured, so the numeric columns are '-'",
    "NOT RUN (reason): the cell's budget (--n / --tv) or its --time-limit was too small to finish it, every call of "
    "the verifier having returned: nothing is decided about the verifier there (yours to raise)",
)


def _exact_tv_cell(c) -> str:
    cert = c.certificate
    if "error" in cert.details.get("exact", {}):
        return "invalid"
    return _fmt(c.exact_tv, ".1e") + ("*" if cert.details.get("verify_disagrees_with_chain") else "")


def cell_rows(grid: GridResult) -> list[tuple]:
    """One row per cell, in ``COLUMNS`` order (strings or numbers)."""
    rows = []
    failed_cells = grid.failed_cells()
    for c in grid.cells:
        if c.certificate is None:
            rows.append((c.verifier, c.family, c.V, c.k, "-", "-", "-", "-", "-", "-", "-", "-", "-",
                         f"skipped: {c.skipped}", "all"))
            continue
        cert = c.certificate
        if "error" in cert.details:   # a cell that could not be certified: its cause, not NaN numbers
            reason = str(cert.details["error"])
            verdict = (f"FAIL (subject error: {reason.removeprefix('error: ')})"
                       if cert.details.get("subject_misbehaved") else
                       f"NOT RUN ({reason.removeprefix(REFUSED)})" if cert.details.get("refused") else f"FAIL ({reason})")
            p_cols = (("-",) * 3 if cert.details.get("refused") else     # nothing was tested: no p-value to show
                      (_fmt(cert.pvalue, ".3f"), _fmt(c.p_holm, ".3f"), _fmt(c.p_bh, ".3f")))
            rows.append((c.verifier, c.family, c.V, c.k, "-", *p_cols, "-", "-", "-", "-", "-", verdict, "-"))
            continue
        failed = c in failed_cells
        verdict = "FAIL" if failed else f"no bias detected (detectable TV {_fmt(cert.detectable_tv, '.3g')})"
        if failed:
            bad = "; ".join(cert.describe(name) for name in cert.failed_checks())
            if not c.acceptance_ok:
                bad = "; ".join(x for x in (bad, f"acceptance {c.acceptance:.6g} > alpha* {c.alpha_star:.6g}") if x)
            verdict += f" ({bad})" if bad else ""
        rows.append((c.verifier, c.family, c.V, c.k, _exact_tv_cell(c), _fmt(cert.pvalue, ".3f"),
                     _fmt(c.p_holm, ".3f"), _fmt(c.p_bh, ".3f"), f"{cert.n:,}", _fmt(cert.detectable_tv, ".3g"),
                     _fmt(c.acceptance, ".4f"), _fmt(c.alpha_star, ".4f"), _fmt(c.rrs_acceptance, ".4f"), verdict,
                     ", ".join(cert.skipped) or "-"))
    return rows


def skip_reasons(grid: GridResult) -> list[str]:
    """``"check: reason (m cells)"`` for every distinct skipped check and reason, and every skipped cell."""
    seen: dict = {}
    for c in grid.cells:
        items = c.certificate.skipped.items() if c.certificate is not None else [("cell", c.skipped)]
        for name, why in items:
            seen[(name, why)] = seen.get((name, why), 0) + 1
    return [f"{name}: {why} ({m} cell{'s' if m > 1 else ''})" for (name, why), m in seen.items()]


def cell_notes(grid: GridResult) -> list[str]:
    """Certificate notes (e.g. verify disagreeing with its chain), prefixed by the cell."""
    return [f"{c.verifier} {c.family} k={c.k}: {note}" for c in grid.cells if c.certificate is not None
            for note in c.certificate.notes]


def terminal_table(grid: GridResult) -> str:
    """The cells as an aligned text table, a column legend, the skipped checks with reasons, and notes."""
    rows = [tuple(str(x) for x in r) for r in cell_rows(grid)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(COLUMNS)]
    line = "  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths))
    out = [line, "-" * len(line)]
    out += ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    out += ["", "Legend:"] + [f"  {x}" for x in LEGEND]
    reasons = skip_reasons(grid)
    if reasons:
        out += ["Skipped checks:"] + [f"  {x}" for x in reasons]
    notes = cell_notes(grid)
    if notes:
        out += ["Notes:"] + [f"  {x}" for x in notes]
    return "\n".join(out)


def overall_verdict(grid: GridResult, power: float = 0.99) -> str:
    """The run's verdict in one Markdown line: no bias detected (with the detectable-TV range) or the failures."""
    if not grid.passed:
        failed, not_run = grid.failed_verifiers(), grid.not_run_verifiers()
        return " ".join(([f"**FAILED: {', '.join(failed)}**"] if failed else []) +
                        ([f"**NOT RUN (budget or --time-limit too small, nothing decided): {', '.join(not_run)}**"]
                         if not_run else []))
    dets = [c.certificate.detectable_tv for c in grid.cells if c.certificate is not None]
    if not dets:
        return "**Nothing certified** (every cell skipped)"
    rng = _fmt(min(dets), ".2g") + ("" if min(dets) == max(dets) else f" to {_fmt(max(dets), '.2g')}")
    return (f"**No bias detected** in any cell (detectable TV {rng} at power {power:g}: a bias that large would "
            "have been found; smaller ones need more samples)")


def verdicts(grid: GridResult) -> dict:
    out = {}
    for c in grid.cells:
        if c.certificate is None:
            continue
        v = out.setdefault(c.verifier, {"cells": 0, "failed": 0, "min_p_holm": 1.0})
        v["cells"] += 1
        v["min_p_holm"] = min(v["min_p_holm"], c.p_holm if c.p_holm is not None else 1.0)
        if c in grid.failed_cells():
            v["failed"] += 1
    return out


def to_json(grid: GridResult, mutants=None, meta=None) -> dict:
    cells = []
    for c in grid.cells:
        d = {"verifier": c.verifier, "family": c.family, "V": c.V, "k": c.k, "skipped": c.skipped or None,
             "acceptance": c.acceptance, "alpha_star": c.alpha_star, "rrs_acceptance": c.rrs_acceptance,
             "seconds": c.seconds, "p_holm": c.p_holm, "p_bh": c.p_bh, "exact_tv": c.exact_tv}
        if c.certificate is not None:
            cert = c.certificate
            d.update({"passed_cell": cert.passed, "skipped_checks": cert.skipped, "notes": list(cert.notes),
                      "failed_checks": {name: cert.describe(name) for name in cert.failed_checks()},
                      "statistic": cert.statistic, "pvalue": cert.pvalue,
                      "g_statistic": cert.g_statistic, "g_pvalue": cert.g_pvalue, "df": cert.df,
                      "tv_estimate": cert.tv_estimate, "tv_upper": cert.tv_upper,
                      "detectable_tv": cert.detectable_tv, "n": cert.n, "checks": cert.checks,
                      "path": cert.details.get("path"), "equivalence": cert.equivalence(),
                      "plan": cert.details.get("plan"), "sequential": cert.details.get("sequential")})
        cells.append(d)
    cal = grid.calibration
    return {
        "meta": meta or {},
        "alpha": grid.alpha,
        "passed": grid.passed,
        "failed_verifiers": grid.failed_verifiers(),
        "not_run_verifiers": grid.not_run_verifiers(),
        "untested_verifiers": grid.untested_verifiers(),
        "verdicts": verdicts(grid),
        "calibration": None if cal is None else {**cal.__dict__, "consistent": cal.consistent},
        "notes": grid.notes,
        "cells": cells,
        "mutants": None if mutants is None else [
            {"name": m.name, "bug": m.bug, "caught_by": m.caught_by, "runs": m.runs, "flagged": m.flagged,
             "flagged_mc": m.flagged_mc, "power": m.power, "power_mc": m.power_mc,
             "failing_checks": m.failing_checks} for m in mutants],
    }


def figures(grid: GridResult, qq_path: Path, tv_path: Path, power: float = 0.99) -> None:
    """Write the QQ plot of the Monte Carlo p-values and the detectable-TV figure (PNG, Agg)."""
    qq, tv = figure_bytes(grid, power)
    atomic_write(qq_path, qq)
    atomic_write(tv_path, tv)


def figure_bytes(grid: GridResult, power: float = 0.99) -> tuple[bytes, bytes]:
    """Render the QQ plot and the detectable-TV figure in memory: two PNG byte strings."""
    import matplotlib

    matplotlib.use("Agg")
    import io

    import matplotlib.pyplot as plt

    pv = np.sort(np.array([p for c in grid.cells for p in c.mc_pvalues()]))
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    if pv.size:
        m = pv.size
        expected = (np.arange(1, m + 1) - 0.5) / m
        lo = np.array([np.quantile(np.random.default_rng(0).beta(i, m + 1 - i, 400), 0.025) for i in range(1, m + 1)])
        hi = np.array([np.quantile(np.random.default_rng(0).beta(i, m + 1 - i, 400), 0.975) for i in range(1, m + 1)])
        ax.fill_between(-np.log10(expected), -np.log10(lo), -np.log10(hi), color="0.85", label="95% band")
        ax.plot(-np.log10(expected), -np.log10(np.maximum(pv, 1e-300)), ".", ms=3, label=f"{m} MC p-values")
        top = max(-np.log10(expected).max(), 1.0)
        ax.plot([0, top], [0, top], "k--", lw=0.8)
        ax.legend(loc="upper left", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no Monte Carlo p-values (no cell certified)", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("expected -log10 p (uniform)")
    ax.set_ylabel("observed -log10 p")
    ax.set_title("Calibration of the Monte Carlo checks")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    qq_png = buf.getvalue()

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    ns = np.logspace(3, 8, 60)
    for df in (7, 63, 999, 4095):
        ax.loglog(ns, [detectable_tv(int(n), df, alpha=grid.alpha, power=power) for n in ns],
                  label=f"df = {df}")
    pts = [(c.certificate.n, c.certificate.detectable_tv) for c in grid.cells if c.certificate is not None]
    if pts:
        x, y = zip(*pts)
        ax.loglog(x, y, "k.", ms=5, label="certify cells")
    ax.axhline(1e-3, color="0.5", lw=0.6, ls=":")
    ax.set_xlabel("samples n")
    ax.set_ylabel(f"detectable TV (alpha = {grid.alpha:g}, power = {power:g})")
    ax.set_title("Smallest TV bias detected")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return qq_png, buf.getvalue()


def markdown(grid: GridResult, mutants=None, meta=None, qq_name="certify_qq.png",
             tv_name="certify_detectable_tv.png") -> str:
    from .node_checks import NODE_CHECKS

    meta = meta or {}
    L = ["# resispec certify", ""]
    if meta:
        per_cell = meta.get("samples") or ("planned for --tv" if meta.get("tv") else "default budget")
        L += [f"- command: `{meta.get('command', '')}`", f"- seed {meta.get('seed')}, alpha {grid.alpha:g} "
              f"(family-wise over all cells, Holm), samples per cell: {per_cell}",
              f"- wall time {grid.seconds:.1f} s (grid)"
              + (f", {meta['mutant_seconds']:.1f} s (mutants)" if meta.get("mutant_seconds") else ""), ""]
        if meta.get("tv") is not None or meta.get("sequential"):
            L[-1:-1] = [f"- requested TV per cell: {meta.get('tv') or 'none'} (power 0.99); sequential marginal "
                        f"test: {'yes (anytime-valid e-process)' if meta.get('sequential') else 'no'}"]
    if meta.get("tv") is not None or meta.get("sequential"):
        eq = [c for c in grid.cells if c.certificate is not None]
        L_eq = ["## Equivalence (positive evidence)", "",
                "Each cell's one-sided upper confidence bound on the TV of its sampled law from the target:", ""]
        for c in eq:
            eqd = c.certificate.details.get("equivalence") or {}
            st = (c.certificate.equivalence() or (f"withheld: {eqd['reason']}" if eqd.get("reason") else None)
                  or f"none ({c.certificate.details.get('error', 'no marginal test')})")
            sq = c.certificate.details.get("sequential")
            L_eq.append(f"- `{c.verifier}` {c.family} k={c.k}: {st}, n = {c.certificate.n:,}"
                        + (f"; sequential: {sq['statement']}" if sq else ""))
        L_eq.append("")
    else:
        L_eq = []
    L += ["## Verdict", "", "| verifier | cells | failed | min Holm p |", "|---|---|---|---|"]
    for v, d in verdicts(grid).items():
        L.append(f"| `{v}` | {d['cells']} | {d['failed']} | {d['min_p_holm']:.3g} |")
    L += ["", overall_verdict(grid), ""]
    if grid.untested_verifiers():
        L += [f"Not tested (every cell skipped, which is never a pass): {', '.join(grid.untested_verifiers())}", ""]
    for note in grid.notes:
        L.append(f"- note: {note}")
    L += L_eq
    L += ["", "## Cells", "",
          "Per cell: exact-law TV where enumeration (or the built-in accept table) fits, the cell's p-value "
          "(Holm over its checks: marginal chi-square against p, and those of exactness.node_checks.NODE_CHECKS "
          f"that apply: {', '.join(n for c in NODE_CHECKS for n in c.names)}), its Holm and BH adjustment over "
          "all cells, the sample size and the TV it detects with power 0.99, and the exact acceptance against "
          "alpha* and against rrs.", "",
          "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in cell_rows(grid):
        L.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
    L += ["", "Columns:", ""] + [f"- {x}" for x in LEGEND]
    reasons = skip_reasons(grid)
    if reasons:
        L += ["", "Skipped checks (never counted as a pass):", ""] + [f"- {x}" for x in reasons]
    notes = cell_notes(grid)
    if notes:
        L += ["", "Notes:", ""] + [f"- {x}" for x in notes]
    cal = grid.calibration
    if cal is not None:
        L += ["", "## Calibration", "",
              f"{cal.n} Monte Carlo p-values (tests with df >= 1) of the cells: KS against U(0, 1) "
              f"statistic {cal.ks_statistic:.3f}, p = {cal.ks_pvalue:.3g}; false-positive rate at "
              f"{cal.level:g}: {cal.fpr:.3f} (95% CI [{cal.ci_low:.3f}, {cal.ci_high:.3f}]) -- "
              + ("consistent with the level." if cal.consistent else "NOT consistent with the level."),
              "", f"![p-value QQ plot]({qq_name})", ""]
    L += ["## Detectable TV", "",
          "Smallest TV bias each sample size detects at this alpha with power 0.99 (noncentral chi-square, "
          "hardest bias direction; `exactness.power`).", "", f"![detectable TV]({tv_name})", ""]
    if mutants:
        L += ["## Mutants", "",
              "Biased verifiers from `exactness.mutants.CATALOGUE`, each run on the mutant panel "
              "(softmax_noise node, V = 8, k in {1, 2, 4} where the bug is active), cell p-values Holm-corrected. "
              "`flagged` counts runs where any check failed; `MC only` counts runs flagged by the Monte Carlo "
              "checks alone (marginal, joint, accepted count, residual).", "",
              "| mutant | bug | designed check | flagged | MC only | failing checks |", "|---|---|---|---|---|---|"]
        for m in mutants:
            fc = ", ".join(f"{k} ({v})" for k, v in sorted(m.failing_checks.items()))
            L.append(f"| `{m.name}` | {m.bug} | {m.caught_by} | {m.flagged}/{m.runs} | {m.flagged_mc}/{m.runs} | {fc} |")
        L.append("")
    return "\n".join(L)


def report_paths(out, json_path=None) -> dict:
    """The four paths a certify run writes: ``markdown``, ``json``, ``qq`` and ``detectable_tv`` PNGs.

    Raises ValueError when two of them are the same file (``--out c.json``: the Markdown where its own JSON goes;
    or a ``json_path`` equal to one of the others): one would silently overwrite the other.
    """
    import os

    out = Path(out)
    stem = out.with_suffix("")
    paths = {"markdown": out, "json": Path(json_path) if json_path else out.with_suffix(".json"),
             "qq": stem.parent / f"{stem.name}_qq.png", "detectable_tv": stem.parent / f"{stem.name}_detectable_tv.png"}
    seen = {}
    for name, p in paths.items():
        key = os.path.realpath(p)
        if key in seen:
            raise ValueError(f"the {name} report and the {seen[key]} report would both be written to {str(p)!r}; "
                             "give --out a Markdown path such as certify-out/c.md (the JSON goes beside it as "
                             "STEM.json, the PNGs as STEM_qq.png and STEM_detectable_tv.png)")
        seen[key] = name
    return paths


def write_reports(grid: GridResult, out: Path, mutants=None, meta=None, json_path: Path | None = None) -> dict:
    """Write ``out`` (Markdown), its JSON twin and the two PNG figures next to it; return the paths.

    All four are rendered in memory first, then written one by one
    atomically (:func:`resispec._io.atomic_write`); if a write fails (e.g.
    disk full, ``OSError``), the files this call already wrote are removed
    before the error propagates, so a failed call leaves none of its new
    files behind.
    """
    paths = report_paths(out, json_path)
    out, js, qq, tv = paths["markdown"], paths["json"], paths["qq"], paths["detectable_tv"]
    qq_png, tv_png = figure_bytes(grid)
    payloads = [(js, json.dumps(strict_json(to_json(grid, mutants, meta)), indent=1, allow_nan=False)),
                (out, markdown(grid, mutants, meta, qq.name, tv.name)), (qq, qq_png), (tv, tv_png)]
    written = []
    try:
        for path, data in payloads:
            atomic_write(path, data)
            written.append(path)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return {"markdown": out, "json": js, "qq": qq, "detectable_tv": tv}
