"""Block-efficiency benchmark of every verifier on token trees.

Each node of a tree draws its own (p, q) pair i.i.d. from a family, so the
exact block efficiency is ``1 + sum_d prod_{j<=d} a_j`` with ``a_j`` the
mean acceptance rate over the sampled pairs with ``k_j`` candidates
(:func:`simulators.trees.block_efficiency_iid`).  Candidate-independent
verifiers use closed forms (exact at any V); candidate-dependent ones under
without-replacement drafting (``rrs_wor``, ``target_only``) use a
Rao-Blackwellised Monte Carlo average of the exact per-tuple acceptance, with
a standard error.

The verifier list is data (:data:`BENCH_VERIFIERS`): each entry names a
registered verifier, its options, its drafting and its role (``baseline`` or
``candidate``).  A shape with drafting ``d`` is compared against the
baselines of drafting ``d``; candidates run on the same branching factors
with their own drafting.  Add one with :func:`register_bench_verifier`.

:func:`to_markdown` writes the report (``resispec bench``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

import numpy as np

from simulators.acceptance import acceptance_mass
from simulators.families import get_family

from ..analysis import optimal_acceptance
from ..trees import MAX_TREE_NODES, TreeShape
from ..verifiers import available_verifiers, get_verifier
from ._report import md_table


@dataclass(frozen=True)
class BenchVerifier:
    """One verifier configuration of the benchmark.

    Attributes
    ----------
    label : str
        Column name in the report.
    name : str
        Registered verifier name.
    options : dict
    drafting : {"iid", "without_replacement"}
    role : {"baseline", "candidate"}
        A ``without_replacement`` candidate runs only on ``wor:`` shapes; an
        ``iid`` candidate runs on every shape (with its own iid drafts).
    max_k : int, optional
        Skip shapes with more candidates per node (for verifiers whose
        Monte Carlo acceptance is expensive); skipped cells stay blank.
    n_samples : int, optional
        Candidate tuples per pair for Monte Carlo acceptance (default: the
        benchmark's ``n_samples``).
    """

    label: str
    name: str
    options: dict = field(default_factory=dict)
    drafting: str = "iid"
    role: str = "baseline"
    max_k: int | None = None
    n_samples: int | None = None

    def build(self):
        return get_verifier(self.name, **self.options)


BENCH_VERIFIERS: list[BenchVerifier] = [
    BenchVerifier("sps", "sps"),
    BenchVerifier("rrs", "rrs"),
    BenchVerifier("kseq", "kseq"),
    BenchVerifier("target_only", "target_only"),
    BenchVerifier("rrs_wor", "rrs_wor", drafting="without_replacement"),
    BenchVerifier("target_only_wor", "target_only", drafting="without_replacement"),
    BenchVerifier("resispec", "resispec", role="candidate"),
]


def register_bench_verifier(entry: BenchVerifier) -> BenchVerifier:
    """Add (or replace, by label) a benchmark entry; e.g. a without-replacement ResiSpec::

        register_bench_verifier(BenchVerifier("resispec_wor", "resispec_wor",
                                              drafting="without_replacement", role="candidate"))
    """
    if entry.role not in ("baseline", "candidate"):
        raise ValueError(f"role must be 'baseline' or 'candidate', got {entry.role!r}")
    if entry.max_k is not None and (isinstance(entry.max_k, bool) or not isinstance(entry.max_k, int)
                                    or entry.max_k < 1):
        raise ValueError(f"max_k must be an integer >= 1 or None, got {entry.max_k!r}")
    if entry.drafting not in ("iid", "without_replacement"):
        raise ValueError(f"drafting must be 'iid' or 'without_replacement', got {entry.drafting!r}")
    BENCH_VERIFIERS[:] = [e for e in BENCH_VERIFIERS if e.label != entry.label] + [entry]
    return entry


#: Without-replacement ResiSpec (issue 6: ``get_verifier("resispec", drafting="without_replacement")``),
#: added automatically when the registry can build it.  Its acceptance needs Monte Carlo over
#: candidate tuples and costs about 40x ``rrs_wor``'s, hence the caps.
RESISPEC_WOR = BenchVerifier("resispec_wor", "resispec", {"drafting": "without_replacement"},
                             drafting="without_replacement", role="candidate", max_k=4, n_samples=32)


#: Registered verifiers left out of the default bench: the look-ahead reserve
#: costs O(k^2 V) per node (about 12 s for one node with 64 candidates at
#: V = 1000), which would take the default run far past its 10-minute budget.
#: Its tree numbers come from ``benchmarks/gap_trees.py``; add it to a run with
#: ``register_bench_verifier(BenchVerifier("resispec_lookahead", "resispec_lookahead", role="candidate"))``.
_NOT_AUTO = ("resispec_lookahead",)


def _auto_register():
    """Pick up ResiSpec variants once they are registered (e.g. a without-replacement ResiSpec)."""
    if not any(e.label == RESISPEC_WOR.label for e in BENCH_VERIFIERS):
        try:
            if RESISPEC_WOR.build().drafting == "without_replacement":
                register_bench_verifier(RESISPEC_WOR)
        except (TypeError, ValueError):
            pass
    for name in available_verifiers():
        if name in _NOT_AUTO:
            continue
        if name.startswith("resispec") and name != "resispec" and not any(e.name == name for e in BENCH_VERIFIERS):
            try:
                v = get_verifier(name)
            except (TypeError, ValueError):      # needs options: add it with register_bench_verifier
                continue
            d = getattr(v, "drafting", "iid")
            if d in ("iid", "without_replacement"):
                register_bench_verifier(BenchVerifier(name, name, drafting=d, role="candidate"))


from .defaults import TREES_FAMILIES as DEFAULT_FAMILIES  # noqa: E402
from .defaults import TREES_SHAPES as DEFAULT_SHAPES  # noqa: E402
from .defaults import TREES_TEMPERATURES as DEFAULT_TEMPERATURES  # noqa: E402


def shape_label(shape: TreeShape) -> str:
    b = shape.branching
    core = f"1x{len(b)} chain" if all(x == 1 for x in b) else ",".join(map(str, b))
    return ("wor:" if shape.drafting == "without_replacement" else "") + core


@dataclass(frozen=True)
class BenchRow:
    """Block efficiency of every verifier on one (family, T, shape).

    Attributes
    ----------
    family, temperature, shape, drafting, nodes
    efficiency : dict label -> float      expected tokens per target call
    stderr : dict label -> float          0 for exact entries
    best_baseline : str
    ratio : dict label -> float           efficiency / best baseline's
    bound : float or None                 per-node optimum (alpha*) bound, iid shapes
    """

    family: str
    temperature: float
    shape: str
    drafting: str
    nodes: int
    efficiency: dict
    stderr: dict
    best_baseline: str
    ratio: dict
    bound: float | None


def _efficiency(acc: dict, se: dict, branching):
    a = np.array([acc[k] for k in branching])
    prefix = np.cumprod(a)
    E = 1.0 + float(prefix.sum())
    var = 0.0
    for j, k in enumerate(branching):
        if se.get(k, 0.0) > 0 and a[j] > 0:
            var += (float(np.sum(prefix[j:])) / a[j]) ** 2 * se[k] ** 2
    return E, float(np.sqrt(var))


def run_bench(*, families=DEFAULT_FAMILIES, temperatures=DEFAULT_TEMPERATURES, shapes=DEFAULT_SHAPES,
              V: int = 1000, n: int = 32, n_samples: int = 128, seed: int = 0, progress: bool = True,
              verifiers: list[BenchVerifier] | None = None, path_rules=None, n_trees: int = 128) -> list[BenchRow]:
    """Block efficiency of every benchmark verifier on every (family, T, shape).

    Parameters
    ----------
    families : sequence of str
    temperatures : sequence of float > 0
    shapes : sequence of str or TreeShape (``"wor:"`` prefix = without replacement)
    V : int
        Vocabulary size of synthetic families.
    n : int
        (p, q) pairs per (family, T); every node draws one of them uniformly.
    n_samples : int
        Candidate tuples per pair for Monte Carlo acceptance (without replacement).
    seed : int
    progress : bool
        Show a tqdm progress bar.
    verifiers : list of BenchVerifier, optional (default :data:`BENCH_VERIFIERS`)
    path_rules : sequence of str, optional
        Path-level rules (``resispec.pathlevel``; default every registered one: ``block``, ``token``,
        ``traversal``, ``traversal_resispec``) added on the i.i.d. shapes they serve, by the paired
        Rao-Blackwellised Monte Carlo of :func:`resispec.bench.path_rules.path_efficiency` against the
        closed form of the node rule each extends (``rrs``; ``resispec`` for ``traversal_resispec``; needs an
        ``rrs`` entry); their standard errors are in ``stderr``.  ``()`` leaves them out.
    n_trees : int >= 2
        Sampled trees per (family, T, shape) for the path-level rules.

    Returns
    -------
    list of BenchRow

    Raises
    ------
    ValueError
        Unknown family, malformed shape, no baseline for a shape's drafting.
    """
    from tqdm.auto import tqdm

    from .path_rules import path_efficiency

    _auto_register()
    path_rules = normalise_path_rules(path_rules)
    check_path_rules(path_rules, n_trees)
    entries = list(BENCH_VERIFIERS if verifiers is None else verifiers)
    parsed = [TreeShape.parse(s) for s in shapes]  # "wor:" prefix = without replacement
    for sh in parsed:
        if sh.num_nodes > MAX_TREE_NODES:                # each tree's nodes are drawn and verified: memory and time
            raise ValueError(f"tree shape {shape_label(sh)!r} has {sh.num_nodes:,} nodes, over MAX_TREE_NODES = "
                             f"{MAX_TREE_NODES:,} (resispec.trees); give a smaller shape")
    fams = [get_family(f) for f in families]
    for sh in parsed:
        if not any(e.role == "baseline" and e.drafting == sh.drafting for e in entries):
            raise ValueError(f"no baseline with drafting={sh.drafting!r} for shape {shape_label(sh)!r}")
    ks = {d: sorted({k for sh in parsed if sh.drafting == d for k in sh.branching}) for d in ("iid", "without_replacement")}
    rows: list[BenchRow] = []
    total = len(fams) * len(temperatures) * len(entries)
    bar = tqdm(total=total, disable=None if progress else True, desc="bench", unit="verifier")
    for fi, fam in enumerate(fams):
        for ti, T in enumerate(temperatures):
            rng = np.random.default_rng([seed, fi, ti])
            p, q = fam.sample(rng, n=n, V=V if fam.fixed_vocab is None else None, temperature=T)
            acc: dict = {}
            se: dict = {}
            for e in entries:
                bar.set_postfix_str(f"{fam.name} T={T} {e.label}")
                v = e.build()
                if e.role == "candidate" and e.drafting == "iid":
                    need = sorted(set(ks["iid"]) | set(ks["without_replacement"]))
                else:
                    need = ks[e.drafting]
                acc[e.label], se[e.label] = {}, {}
                for k in need:
                    if e.max_k is not None and k > e.max_k:
                        continue
                    wor = e.drafting == "without_replacement"
                    support = int((q > 0).sum(axis=1).min())
                    if wor and k > support:
                        acc[e.label][k], se[e.label][k] = np.nan, 0.0
                        continue
                    am = acceptance_mass(v, p, q, k, drafting=e.drafting, method="auto" if not wor else "monte_carlo",
                                         n_samples=e.n_samples or n_samples, rng=rng)
                    acc[e.label][k] = float(am.acceptance.mean())
                    se[e.label][k] = float(np.sqrt(np.sum(am.stderr ** 2)) / am.stderr.size)
                bar.update(1)
            star = {k: float(np.mean(optimal_acceptance(p, q, k))) for k in ks["iid"]}
            for sh in parsed:
                eff, err = {}, {}
                for e in entries:
                    if e.drafting != sh.drafting and (e.role == "baseline" or e.drafting != "iid"):
                        continue
                    if any(k not in acc[e.label] for k in sh.branching):
                        continue                                   # above max_k
                    eff[e.label], err[e.label] = _efficiency(acc[e.label], se[e.label], sh.branching)
                if path_rules and "rrs" in eff and sh.drafting == "iid":
                    bar.set_postfix_str(f"{fam.name} T={T} path rules {shape_label(sh)}")
                    for lab, (x, sx) in path_efficiency(p, q, sh, eff, path_rules, n_trees, rng).items():
                        eff[lab], err[lab] = x, float(sx)   # its control's closed form is exact (s.e. 0)
                base = {lab: x for lab, x in eff.items()
                        if any(en.label == lab and en.role == "baseline" for en in entries) and np.isfinite(x)}
                if not base:
                    support = int((q > 0).sum(axis=1).min())
                    raise ValueError(
                        f"shape {shape_label(sh)!r} on family {fam.name!r}: no baseline could run it (a "
                        f"without-replacement branching factor {max(sh.branching)} exceeds the draft support "
                        f"of {support} tokens); use smaller branching factors or a larger --V")
                best = max(base, key=base.get)
                ratio = {lab: x / base[best] for lab, x in eff.items()}
                bound = _efficiency(star, {}, sh.branching)[0] if sh.drafting == "iid" else None
                rows.append(BenchRow(fam.name, float(T), shape_label(sh), sh.drafting, sh.num_nodes, eff, err,
                                     best, ratio, bound))
    bar.close()
    return rows


def normalise_path_rules(path_rules) -> tuple:
    """``None`` -> every registered path-level rule; ``"none"`` / ``()`` -> none; a name -> that one; names."""
    from .path_rules import DEFAULT_PATH_RULES

    if path_rules is None:
        return DEFAULT_PATH_RULES
    if isinstance(path_rules, str):
        path_rules = [path_rules]
    rules = tuple(path_rules)
    return () if rules == ("none",) else rules


def check_path_rules(path_rules, n_trees) -> None:
    """Raise ValueError (naming the argument) for an unknown path-level rule or, with rules, ``n_trees`` < 2."""
    from ..pathlevel.registry import available_path_verifiers

    bad = [r for r in path_rules if not isinstance(r, str) or r not in available_path_verifiers()]
    if bad:
        raise ValueError(f"path_rules: unknown path-level rule(s) {bad}; choose from {available_path_verifiers()} "
                         "or 'none' to leave them out")
    if not path_rules:
        return
    if isinstance(n_trees, bool) or not isinstance(n_trees, (int, np.integer)) or n_trees < 2:
        raise ValueError(f"n_trees must be an integer >= 2 (sampled trees for the path-level rules), got {n_trees!r}")


def _against_path_rules(rs: list[BenchRow], lab: str) -> list[str]:
    """One line: ``lab`` against the best published rule INCLUDING the path-level ``block``/``token``/``traversal``
    (Monte Carlo estimates, s.e. in the JSON), where they ran."""
    from ..pathlevel.registry import available_path_verifiers
    from ..verifiers.registry import is_ours

    pub = tuple(n for n in available_path_verifiers() if not is_ours(n))   # the published path rules
    cells = [(r, max([r.efficiency[r.best_baseline]] + [r.efficiency[x] for x in pub if x in r.efficiency]))
             for r in rs if any(x in r.efficiency for x in pub)]
    if not cells:
        return []
    ratios = np.array([r.efficiency[lab] / best for r, best in cells])
    worst = min(cells, key=lambda c: c[0].efficiency[lab] / c[1])[0]
    return [f"- Against the best published rule including the path-level `block` / `token` / `traversal` "
            f"(Monte Carlo, {len(cells)} i.i.d. configurations): median ratio {np.median(ratios):.3f}, below 1 in "
            f"{int(np.sum(ratios < 1 - 1e-9))} (smallest {ratios.min():.3f}, `{worst.family}`, "
            f"T = {worst.temperature:g}, `{worst.shape}`)."]


def _path_section(rows: list[BenchRow]) -> list[str]:
    """Markdown: each path-level rule against the best node-level baseline and the chained per-node bound."""
    from ..pathlevel.registry import available_path_verifiers

    labels = [lab for lab in available_path_verifiers() if any(lab in r.efficiency for r in rows)]
    if not labels:
        return []
    out = ["## Path-level rules against the best node-level baseline and the chained per-node bound", "",
           "`block` (Sun et al., arXiv 2403.10444) and `token` decide chains, `traversal` (after arXiv 2505.12398, "
           "our derivation, docs/pathlevel.md) and `traversal_resispec` (traversal with ResiSpec at the siblings, "
           "ours, docs/pathlevel.md section 10) every i.i.d. tree. Estimated on sampled trees by the paired "
           "Rao-Blackwellised Monte Carlo of `resispec.bench.path_rules` (exact expected accepted length per "
           "tree, minus that of the node-level walk the rule extends on the same tree -- `rrs`, or `resispec` for "
           "`traversal_resispec` -- added to that walk's closed form); standard errors in the JSON "
           "`stderr`. `above bound` counts cells where the rule exceeds the chained per-node optimum by more "
           "than 2 s.e. (and 1e-9) -- a node-by-node verifier cannot.", ""]
    for lab in labels:
        rs = [r for r in rows if lab in r.efficiency and np.isfinite(r.efficiency[lab])]
        by_shape = defaultdict(list)
        for r in rs:
            by_shape[r.shape].append(r)
        above = [r for r in rs if r.bound is not None
                 and r.efficiency[lab] - r.bound > max(2 * r.stderr.get(lab, 0.0), 1e-9)]   # 1e-9: round-off
        top = max(rs, key=lambda r: r.efficiency[lab] - (r.bound or 0.0))
        out += [f"### `{lab}`", "",
                f"- Above the chained per-node bound in {len(above)} of {len(rs)} cells; largest excess "
                f"{top.efficiency[lab] - top.bound:+.3f} ({top.efficiency[lab]:.3f} vs bound {top.bound:.3f}, "
                f"s.e. {top.stderr.get(lab, 0.0):.3f}) on `{top.family}`, T = {top.temperature:g}, `{top.shape}`.",
                f"- Ratio to the best node-level baseline: median {np.median([r.ratio[lab] for r in rs]):.3f}, "
                f"min {min(r.ratio[lab] for r in rs):.3f}, max {max(r.ratio[lab] for r in rs):.3f}.", ""]
        table = [[f"`{sh}`", str(rr[0].nodes), f"{np.mean([r.efficiency[lab] for r in rr]):.3f}",
                  f"{np.mean([r.efficiency[r.best_baseline] for r in rr]):.3f}",
                  f"{np.mean([r.ratio[lab] for r in rr]):.3f}", f"{min(r.ratio[lab] for r in rr):.3f}",
                  f"{np.mean([r.bound for r in rr]):.3f}" if all(r.bound is not None for r in rr) else "-",
                  f"{np.mean([r.stderr.get(lab, 0.0) for r in rr]):.3f}",
                  f"{sum(r in above for r in rr)} / {len(rr)}"] for sh, rr in by_shape.items()]
        out += md_table(["shape", "nodes", f"mean `{lab}` tokens/call", "mean best baseline", "mean ratio",
                         "min ratio", "mean bound", "mean s.e.", "above bound"], table)
        out.append("")
    return out


def rows_to_json(rows: list[BenchRow]) -> list[dict]:
    """Rows as JSON-ready dicts."""
    return [asdict(r) for r in rows]


def rows_from_json(items: list[dict]) -> list[BenchRow]:
    """Inverse of :func:`rows_to_json`.

    Raises
    ------
    ValueError
        A row lacks a field, or holds a number that no bench writes: a NaN anywhere, an infinite or non-numeric
        efficiency / standard error / ratio / bound, an efficiency below 1 (a target call yields at least one
        token), a negative standard error, or ``nodes`` not a positive integer (naming the row and the field).
    """
    import math

    try:
        rows = [BenchRow(**{k: d[k] for k in BenchRow.__dataclass_fields__}) for d in items]
    except KeyError as exc:
        raise ValueError(f"bench JSON row lacks field {exc}") from None
    for i, r in enumerate(rows):
        def bad(what, why):
            return ValueError(f"bench JSON row {i} ({r.family}, T {r.temperature}, {r.shape}): {what} {why}")

        if not isinstance(r.temperature, (int, float)) or isinstance(r.temperature, bool) or math.isnan(r.temperature):
            raise bad("temperature", f"is {r.temperature!r}, not a number")
        if not isinstance(r.nodes, int) or isinstance(r.nodes, bool) or r.nodes < 1:
            raise bad("nodes", f"is {r.nodes!r}, not a positive integer")
        for name in ("efficiency", "stderr", "ratio"):
            table = getattr(r, name)
            if not isinstance(table, dict):
                raise bad(name, f"is {type(table).__name__}, not a label -> number table")
            for label, v in table.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise bad(f"{name}[{label!r}]", f"is {v!r}, not a finite number")
                if (name == "efficiency" and v < 1) or (name == "stderr" and v < 0):
                    raise bad(f"{name}[{label!r}]", f"is {v!r}, " + ("below 1 (tokens per target call)"
                                                                      if name == "efficiency" else "negative"))
        if r.bound is not None and (isinstance(r.bound, bool) or not isinstance(r.bound, (int, float))
                                    or not math.isfinite(r.bound)):
            raise bad("bound", f"is {r.bound!r}, not a finite number or null")
    return rows


def _candidates(rows):
    labels = []
    for r in rows:
        for lab in r.efficiency:
            if lab not in labels and any(e.label == lab and e.role == "candidate" for e in BENCH_VERIFIERS):
                labels.append(lab)
    return labels


def to_markdown(rows: list[BenchRow], settings: dict, command: str = "", seconds: float | None = None) -> str:
    """Report: headline, where the candidates gain and where not, per-shape and per-family means, full table."""
    _auto_register()                   # the ResiSpec variants' labels, also when re-rendering a stored JSON
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
        "Ratio = verifier / best node-level baseline of the shape's drafting (iid shapes: `sps`, `rrs`, `kseq`, "
        "`target_only`; the path-level rules are compared in their own section and in one line per candidate; "
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
                *_against_path_rules(rs, lab),
                ""]
        by_shape = defaultdict(list)
        by_fam = defaultdict(list)
        by_T = defaultdict(list)
        for r in rs:
            by_shape[r.shape].append(r)
            by_fam[r.family].append(r.ratio[lab])
            by_T[r.temperature].append(r.ratio[lab])
        rows_ = []
        for s, rr in by_shape.items():
            bounds = [r.bound for r in rr if r.bound is not None]
            rows_.append([f"`{s}`", str(rr[0].nodes), f"{np.mean([r.efficiency[lab] for r in rr]):.3f}",
                          f"{np.mean([r.efficiency[r.best_baseline] for r in rr]):.3f}",
                          f"{np.mean([r.ratio[lab] for r in rr]):.3f}", f"{max(r.ratio[lab] for r in rr):.3f}",
                          f"{np.mean(bounds):.3f}" if bounds else "-"])
        out += ["Mean over families and temperatures, per shape (`bound` is `-` on `wor:` shapes: the chained "
                "alpha* is computed for iid drafts only):", ""]
        out += md_table(["shape", "nodes", f"mean `{lab}` tokens/call", "mean best baseline", "mean ratio",
                         "max ratio", "mean bound"], rows_)
        flat = [s for s, rr in by_shape.items() if max(r.ratio[lab] for r in rr) <= 1.001]
        small = sorted(((np.mean([r.ratio[lab] for r in rr]), s) for s, rr in by_shape.items() if s not in flat))[:3]
        out += ["", "Where it does not gain: " + (", ".join(f"`{s}`" for s in flat) + " (ratio <= 1.001 in every family "
                "and temperature)" if flat else "every shape gains somewhere") + "; smallest mean gains elsewhere: "
                + ", ".join(f"`{s}` {m:.3f}" for m, s in small) + "."]
        out += ["", "Mean ratio per family: " + ", ".join(f"`{f}` {np.mean(v):.3f}" for f, v in by_fam.items()) + ".",
                "", "Mean ratio per temperature: " + ", ".join(f"T={t:g} {np.mean(v):.3f}" for t, v in by_T.items()) + ".",
                ""]
    out += _path_section(rows)
    labels = []
    for r in rows:
        for lab in r.efficiency:
            if lab not in labels:
                labels.append(lab)
    full = []
    for r in rows:
        cells = []
        for lab in labels:
            if lab in r.efficiency and np.isfinite(r.efficiency[lab]):
                cells.append(f"{r.efficiency[lab]:.3f} ({r.ratio[lab]:.3f})")
            else:
                cells.append("")
        bound = f"{r.bound:.3f}" if r.bound is not None else ""
        full.append([f"`{r.family}`", f"{r.temperature:g}", f"`{r.shape}`", str(r.nodes), *cells,
                     f"`{r.best_baseline}`", bound])
    out += ["## Full table (tokens per target call; ratio of each verifier to the best baseline in brackets)", ""]
    out += md_table(["family", "T", "shape", "nodes", *(f"`{lab}`" for lab in labels), "best baseline", "bound"], full)
    out.append("")
    return "\n".join(out)
