"""Convict without a histogram: draws the acceptance-bound check needs vs the marginal histogram, side by side.

    python benchmarks/acceptance_bound.py [--seeds 5] [--out reports/acceptance_bound.md]

Subject: ``exactness.acceptance_bound.too_generous(factor)``, recursive rejection accepting with
``min(1, factor p/q)``, behind a plain ``verify`` (a black box: no chain, so nothing but samples can convict it),
at two seeded nodes (V = 8 and V = 64, a draft confident where the target is not) and k = 1, 2.

Per (node, k, factor), from the mutant's exact law (``exactness.exact.certify_exact`` of its chain):

- ``excess``: its acceptance minus alpha* (``resispec.analysis.optimal_acceptance``); ``TV``: its output law's TV to p;
- ``n bound``: draws at which the acceptance-bound check fails it with probability 0.99 at alpha 1e-3
  (``AcceptanceBound.n_for_excess``, exact binomial);
- ``n histogram``: draws at which the marginal chi-square detects that TV with the same power and level
  (``exactness.power.samples_for_tv(TV, V - 1)``);
- then, measured: ``exactness.certify_verifier`` of the black box at ``n bound`` draws over ``--seeds`` seeds: how
  often each of the two checks rejected (raw p-value below 1e-3).

The claim is the ratio ``n histogram / n bound`` and the measured rejection rates at ``n bound``, in one run.

Paths (``--paths``, on by default): ``exactness.acceptance_bound.too_generous_block(factor)``, block verification
whose final acceptance is ``min(1, factor w_L)``, on a seeded 3-token Markov pair at L = 2, as a black box (its
plan hidden, so only samples can convict it).  Per factor: its plan's exact E[accepted] against the LP bound
(``resispec.pathlevel.optimal_accepted``) and its horizon TV (``exactness.pathlevel.analyse_path``); then
``exactness.certify_path`` over ``--seeds`` seeds at each n of ``PATH_NS``: how often the acceptance-bound check
and the horizon histogram each rejected (raw p below 1e-3), side by side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FACTORS = (1.02, 1.05, 1.1, 1.2)
#: Factors and draws of the path-level rows.
PATH_FACTORS = (1.1, 1.2)
PATH_NS = (500, 1000, 2000, 4000, 8000)
KS = (1, 2)
ALPHA = 1e-3


def nodes():
    """Two seeded nodes: (label, p (V,), q (V,)) float64."""
    out = []
    for V, seed in ((8, 40), (64, 41)):
        rng = np.random.default_rng(seed)
        out.append((f"V={V}", rng.dirichlet(np.ones(V)), rng.dirichlet(np.full(V, 0.3))))
    return out


class BlackBox:
    """The subject behind a plain ``verify`` (no chain)."""

    def __init__(self, inner):
        self.inner, self.drafting = inner, inner.drafting

    def verify(self, p, q, candidates, rng):
        return self.inner.verify(p, q, candidates, rng)


def run(seeds: int = 5, progress=print) -> list[dict]:
    """One row per (node, k, factor); see the module docstring."""
    from exactness import certify_verifier
    from exactness.acceptance_bound import ACCEPTANCE_BOUND as AB
    from exactness.acceptance_bound import too_generous
    from exactness.exact import certify_exact
    from exactness.power import samples_for_tv

    rows = []
    for label, p, q in nodes():
        for k in KS:
            bound = AB.bound(p, q, k, "iid")
            for f in FACTORS:
                v = too_generous(f)
                ex = certify_exact(v, p, q, k)
                excess = ex.acceptance - ex.alpha_star
                row = {"node": label, "k": k, "factor": f, "acceptance": ex.acceptance, "alpha_star": ex.alpha_star,
                       "excess": excess, "tv": ex.tv}
                if excess <= bound - ex.alpha_star:         # accepts no more than alpha*: the check cannot see it
                    row["note"] = ("accepts less than alpha*: only the histograms can convict it" if excess < 0
                                   else "excess within the bound's slack")
                    rows.append(row)
                    continue
                n_b = AB.n_for_excess(excess - (bound - ex.alpha_star), bound)
                n_h = samples_for_tv(ex.tv, p.size - 1)
                t0 = time.perf_counter()
                rej_b = rej_h = 0
                for s in range(seeds):
                    c = certify_verifier(BlackBox(v), p, q, k, n=n_b, seed=s, tree=False, exact=False)
                    rej_b += c.checks.get("acceptance_bound", 1.0) < ALPHA
                    rej_h += c.checks.get("marginal", 1.0) < ALPHA
                row.update(n_bound=n_b, n_histogram=n_h, ratio=n_h / n_b, rejected_bound=rej_b,
                           rejected_histogram=rej_h, seeds=seeds, seconds=time.perf_counter() - t0)
                rows.append(row)
                progress(f"{label} k={k} factor {f}: excess {excess:.4f}, TV {ex.tv:.4f}; n bound {n_b:,}, "
                         f"n histogram {n_h:,} (x{n_h / n_b:.1f}); at n bound: bound {rej_b}/{seeds}, "
                         f"histogram {rej_h}/{seeds}")
    return rows


class HiddenPlan:
    """A path rule behind a plain ``verify`` (no plan): the acceptance bound must come from its samples."""

    def __init__(self, inner):
        self.inner = inner

    def verify(self, p, q, drafts, rng):
        return self.inner.verify(p, q, drafts, rng)


def run_paths(seeds: int = 5, progress=print) -> list[dict]:
    """One row per (factor, n) of the path-level comparison (module docstring)."""
    from exactness.acceptance_bound import ACCEPTANCE_BOUND as AB
    from exactness.acceptance_bound import too_generous_block
    from exactness.pathlevel import certify_path
    from resispec.pathlevel import analyse_path
    from simulators.autoregressive import MarkovPair

    pair, L = MarkovPair.random(np.random.default_rng(0), 3, noise=1.0), 2
    rows = []
    for f in PATH_FACTORS:
        rule = too_generous_block(f)
        ex = AB.exact_path(rule, pair, L)                       # the plan's E[accepted] and the LP bound
        tv = float(analyse_path(rule, pair, L).tv)              # horizon TV of its law to the target's
        for n in PATH_NS:
            t0 = time.perf_counter()
            rej_b = rej_h = 0
            for s in range(seeds):
                c = certify_path(HiddenPlan(rule), pair, L, n=n, seed=s)
                rej_b += c.checks.get("acceptance_bound", 1.0) < ALPHA
                rej_h += c.checks.get("horizon", 1.0) < ALPHA
            row = {"factor": f, "n": n, "expected_accepted": ex["expected_accepted"], "bound": ex["bound"],
                   "excess": ex["expected_accepted"] - ex["bound"], "tv": tv, "rejected_bound": rej_b,
                   "rejected_histogram": rej_h, "seeds": seeds, "seconds": time.perf_counter() - t0}
            rows.append(row)
            progress(f"block x{f} n={n:,}: excess {row['excess']:.4f}, horizon TV {tv:.4f}; bound {rej_b}/{seeds}, "
                     f"horizon {rej_h}/{seeds}")
    return rows


def path_markdown(rows) -> list[str]:
    if not rows:
        return []
    lines = ["", "## Paths: too-generous block verification (L = 2, a 3-token Markov pair, plan hidden)", "",
             "`too_generous_block(factor)` keeps all L drafts with min(1, factor w_L) where block uses w_L. 'excess': "
             "its plan's exact E[accepted] minus the LP bound over exact rules (`AcceptanceBound.exact_path`); "
             "'rejected': how often `certify_path`'s acceptance-bound check and its horizon histogram each had a raw "
             "p-value below 1e-3, over the seeds.", "",
             "| factor | excess over the bound | horizon TV | n | rejected: acceptance bound | horizon histogram |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['factor']} | {r['excess']:.4f} | {r['tv']:.4f} | {r['n']:,} | "
                     f"{r['rejected_bound']}/{r['seeds']} | {r['rejected_histogram']}/{r['seeds']} |")
    return lines


def markdown(rows, seeds: int, seconds: float, load: tuple, path_rows=(), out: str | None = None,
             paths: bool = True) -> str:
    lines = ["# Convict without a histogram: the acceptance bound vs the marginal histogram", "",
             f"Command: `python benchmarks/acceptance_bound.py --seeds {seeds}{' --out ' + out if out else ''}"
             f"{'' if paths else ' --no-paths'}`. Run time {seconds:.0f} s; load "
             f"average at the start {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (2 cores). Subject: "
             "`too_generous(factor)` (recursive rejection accepting with min(1, factor p/q)) as a black box. "
             "'n bound' / 'n histogram': draws at which the acceptance-bound check / the marginal chi-square fail "
             "it with probability 0.99 at alpha 1e-3 (design numbers: exact binomial; `samples_for_tv(TV, V - 1)`); "
             f"'rejected at n bound': how often each check's raw p-value fell below 1e-3 in `certify_verifier` "
             f"runs at n bound, over {seeds} seeds.", "",
             "| node | k | factor | excess over alpha* | TV of the output law | n bound | n histogram | "
             "histogram / bound | rejected at n bound: bound | histogram |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "n_bound" not in r:
            lines.append(f"| {r['node']} | {r['k']} | {r['factor']} | {r['excess']:.2e} | {r['tv']:.2e} | - | - | - | "
                         f"{r.get('note', '')} | |")
            continue
        lines.append(f"| {r['node']} | {r['k']} | {r['factor']} | {r['excess']:.4f} | {r['tv']:.4f} | "
                     f"{r['n_bound']:,} | {r['n_histogram']:,} | {r['ratio']:.1f} | "
                     f"{r['rejected_bound']}/{r['seeds']} | {r['rejected_histogram']}/{r['seeds']} |")
    return "\n".join(lines + path_markdown(path_rows)) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the markdown table (and a JSON beside it)")
    ap.add_argument("--no-paths", dest="paths", action="store_false", help="skip the path-level rows")
    a = ap.parse_args(argv)
    if a.seeds < 1:
        ap.error("--seeds must be >= 1")
    import os

    load = os.getloadavg()
    t0 = time.perf_counter()
    rows = run(a.seeds)
    path_rows = run_paths(a.seeds) if a.paths else []
    md = markdown(rows, a.seeds, time.perf_counter() - t0, load, path_rows, a.out, a.paths)
    print(md)
    if a.out:
        from resispec._io import write_markdown_and_json

        write_markdown_and_json(a.out, md, {"seeds": a.seeds, "rows": rows, "path_rows": path_rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
