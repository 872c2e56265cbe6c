"""Residual-drift report: PNG plots and markdown tables of a :class:`simulators.drift.DriftSweep`.

The sweep itself (the measurement) is :func:`simulators.drift.drift_sweep`;
this module is its report writer (``resispec drift``).

Figures are built with :class:`matplotlib.figure.Figure` (no pyplot state, no
backend switch): save them, or show them in a notebook with ``display(fig)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulators._io import save_figure, write_json, write_text
from simulators.drift import DriftSweep

from ._report import command_lines, md_table

PANELS = (("beta", "viability beta_i"), ("tv", "TV(p_i, q_i)"),
          ("top_mass", "residual mass in draft top-mass set"), ("cumulative_acceptance", "cumulative acceptance"))


def _main_lines(sweep: DriftSweep):
    """Baselines plus every proxy at gamma = 1."""
    return [r for r in sweep.results if not r.label.startswith("resispec") or r.options.get("gamma") == 1.0]


def plot_steps(sweep: DriftSweep):
    """Figure: the four drift statistics against the chain step (baselines and each proxy at gamma = 1).

    The legend sits below the panels (it never covers a line) and the title above them
    (constrained layout keeps it clear of the panel titles).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(17, 4.8), layout="constrained")
    axes = fig.subplots(1, 4)
    for r in _main_lines(sweep):
        steps = np.arange(1, r.beta.size + 1)
        style = "--" if not r.label.startswith("resispec") else "-"
        for ax, (key, title) in zip(axes, PANELS):
            ax.plot(steps, getattr(r, key), style, marker="o", ms=3, label=r.label)
            ax.set_title(title)
            ax.set_xlabel("candidate step i")
    axes[3].axhline(sweep.alpha_star, color="k", lw=0.8, ls=":", label="alpha* (optimum)")
    handles, labels = axes[3].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(5, len(labels)), fontsize=8)
    fig.suptitle(f"Residual drift, k = {sweep.settings['k']}, {sweep.settings.get('family', '')} "
                 f"T = {sweep.settings.get('temperature', '')}, V = {sweep.settings['V']}")
    return fig


def plot_gamma(sweep: DriftSweep):
    """Figure: acceptance with all k candidates against the reserve scale gamma, one line per proxy.

    Proxies whose curves coincide (e.g. ``coverage`` and ``draft`` when every
    token is covered) are drawn with distinct markers and line styles, hollow
    markers on top, so no line hides another; the legend sits outside the axes.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.subplots()
    looks = [("o", "-", 9), ("s", "--", 7), ("^", "-.", 6), ("D", ":", 5), ("v", (0, (5, 1)), 4), ("x", "-", 6)]
    for j, pr in enumerate(sweep.settings["proxies"]):
        rs = [r for r in sweep.results if r.options.get("proxy", "").startswith(pr) and r.label.startswith("resispec")]
        rs.sort(key=lambda r: r.options["gamma"])
        marker, ls, ms = looks[j % len(looks)]
        ax.plot([r.options["gamma"] for r in rs], [r.acceptance for r in rs], marker=marker, ls=ls, ms=ms,
                mfc="none", lw=1.4, label=f"resispec[{pr}]", zorder=3 + j)
    styles = [("gray", "--"), ("black", "--"), ("saddlebrown", "-."), ("olive", ":")]
    base = [r for r in sweep.results if not r.label.startswith("resispec")]
    for r, (color, ls) in zip(base, styles * (1 + len(base) // len(styles))):
        ax.axhline(r.acceptance, ls=ls, lw=1.0, color=color, label=r.label)
    ax.axhline(sweep.alpha_star, color="k", ls=":", label="alpha*")
    ax.set_xlabel("reserve scale gamma")
    ax.set_ylabel(f"acceptance (k = {sweep.settings['k']})")
    fig.legend(loc="outside right center", fontsize=8)
    return fig


def to_markdown(sweep: DriftSweep, command: str = "") -> str:
    """Markdown report: summary per verifier configuration and the per-step table of the main lines."""
    s = sweep.settings
    k = s["k"]
    out = ["# Residual drift", ""] + command_lines(command)
    out += [f"Family `{s.get('family')}`, T = {s.get('temperature')}, V = {s['V']}, {s['B']} pairs, k = {k}, "
            f"top-mass set = smallest set holding {s['top_level']:.0%} of the draft q_i. "
            f"Mean alpha* (optimal acceptance, iid drafts) = {sweep.alpha_star:.4f}.", "",
            "Statistics are averaged over pairs weighted by the probability of reaching step i "
            "(`docs/RESISPEC.md` section 4). `rrs_wor` uses without-replacement drafts (Monte Carlo over "
            "candidate tuples); every other line is exact.", "",
            "## Summary", ""]
    rrs = next((r.acceptance for r in sweep.results if r.label == "rrs"), None)
    best = max(sweep.results, key=lambda r: r.acceptance)
    rows = []
    for r in sweep.results:
        closed = ""
        if rrs is not None and sweep.alpha_star > rrs + 1e-12:
            closed = f"{(r.acceptance - rrs) / (sweep.alpha_star - rrs):+.2f}"
        mark = " **best**" if r is best else ""
        rows.append([f"`{r.label}`{mark}", f"{r.acceptance:.4f}"]
                    + [f"{x:.3f}" for x in (r.beta[0], r.beta[-1], r.tv[0], r.tv[-1], r.top_mass[0], r.top_mass[-1])]
                    + [closed])
    out += md_table(["verifier", "acceptance", "beta_1", "beta_k", "TV_1", "TV_k", "top-mass_1", "top-mass_k",
                     "gap to alpha* closed vs rrs"], rows)
    out += ["", "## Per step (baselines and each proxy at gamma = 1)", ""]
    out += md_table(["verifier", "statistic"] + [f"i={i}" for i in range(1, k + 1)],
                    ([f"`{r.label}`", title] + [f"{x:.3f}" for x in getattr(r, key)]
                     for r in _main_lines(sweep) for key, title in PANELS))
    out += ["", "![drift per step](drift_steps.png)", "", "![acceptance vs gamma](drift_gamma.png)", ""]
    return "\n".join(out)


def write_drift_report(sweep: DriftSweep, out_dir, *, command: str = "", stem: str = "drift") -> dict:
    """Write ``{stem}.md``, ``{stem}.json``, ``{stem}_steps.png`` and ``{stem}_gamma.png`` atomically.

    Returns a dict of the written paths.
    """
    out_dir = Path(out_dir)
    paths = {}
    fig = plot_steps(sweep)
    paths["steps_png"] = save_figure(fig, out_dir / f"{stem}_steps.png")
    fig = plot_gamma(sweep)
    paths["gamma_png"] = save_figure(fig, out_dir / f"{stem}_gamma.png")
    md = to_markdown(sweep, command).replace("drift_steps.png", f"{stem}_steps.png").replace("drift_gamma.png", f"{stem}_gamma.png")
    paths["markdown"] = write_text(out_dir / f"{stem}.md", md)
    paths["json"] = write_json(out_dir / f"{stem}.json", {"settings": sweep.settings, "alpha_star": sweep.alpha_star,
                                                         "results": [r.to_dict() for r in sweep.results]})
    return paths
