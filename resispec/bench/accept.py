"""Acceptance table: exact acceptance of every iid verifier against alpha*.

For each cell (pair family, vocabulary ``V``, candidates ``k``, temperature
``T``) the same ``nodes`` target/draft pairs are drawn (the same nodes for
every ``k``), and for each iid-capable verifier the exact probability that
some candidate is accepted is averaged over them, next to the optimum
``alpha*`` (``docs/RESISPEC.md`` section 5) and, where affordable, the best
*sequential* verifier (an LP, :func:`resispec.bounds.sequential_optimum_iid`).

The headline number is the fraction of the ``rrs``-to-``alpha*`` gap a
verifier closes in a cell::

    gap_closed(v) = (A(v) - A(rrs)) / (alpha* - A(rrs))

on cell means (the ratio of the means, not a mean of per-node ratios, so
near-saturated nodes do not dominate).  A cell whose gap
``alpha* - A(rrs)`` is below :data:`SATURATED` is *saturated*: every
verifier accepts (almost) surely and the ratio is undefined (reported as
``None``, left out of the averages).

How each acceptance is computed (the ``method`` of a cell entry):

- ``exact``: candidate-independent step acceptances ``beta_i``
  (``A = 1 - prod (1 - beta_i)``; ``sps``, ``rrs``, ``kseq``, ``resispec``).
- ``closed form``: ``target_only`` with iid drafts rejects every candidate
  iff the emitted token lies outside the set ``S`` of distinct candidates,
  so ``A = E p(S) = sum_x p(x) (1 - (1 - q(x))^k)`` (checked against exact
  enumeration in the tests).
- ``enumeration``: any other verifier when ``V**k <= 2e6``.
- ``monte carlo``: otherwise, ``mc_samples`` draws per node, with its
  standard error (labelled in the report).

References: rrs (SpecInfer, arXiv 2305.09781), kseq (SpecTr, arXiv
2310.15141), target_only (EAGLE-2, arXiv 2406.16858), optimum (SpecTr;
Hu et al. 2025, arXiv 2502.18779).
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from .._validation import as_laws, check_k
from ..analysis import acceptance_probability, optimal_acceptance
from ..bounds import sequential_optimum_iid
from ..enumeration import MAX_TUPLES
from ..sampling import draw_candidates
from ..verifiers import available_verifiers, get_verifier
from ._report import command_lines, fmt, md_table, stats_table, write_markdown_and_json

#: Cells with ``alpha* - A(rrs)`` below this are saturated (ratio undefined).
SATURATED = 1e-6

from .defaults import ACCEPT_FAMILIES as DEFAULT_FAMILIES  # noqa: E402
from .defaults import ACCEPT_K as DEFAULT_K  # noqa: E402
from .defaults import ACCEPT_T as DEFAULT_T  # noqa: E402
from .defaults import ACCEPT_V as DEFAULT_V  # noqa: E402


def target_only_acceptance_iid(p, q, k: int) -> float | np.ndarray:
    """Exact acceptance of ``target_only`` on iid drafts.

    ``A = sum_x p(x) (1 - (1 - q(x))^k)``: the chain rejects every candidate
    iff the residual token falls outside the set of distinct candidates.

    Parameters
    ----------
    p, q : array_like, shape (V,) or (B, V), float64
    k : int >= 1

    Returns
    -------
    float (ndarray (B,) for 2-D input)
    """
    _, _, squeeze = as_laws(p, q)
    out = get_verifier("target_only").acceptance_closed_form(p, q, k, "iid")   # sum_x p(x)(1 - (1 - q(x))^k)
    return float(out[0]) if squeeze else out


#: Report order (others follow alphabetically).
_ORDER = ("sps", "target_only", "rrs", "kseq", "resispec")
#: The Monte Carlo path verifies at most this many (node, token) entries a chain call (a 20,000-draw node at
#: V = 32,000 in one call needed ~24 GB and was killed).
MC_CHUNK_ELEMS = 1 << 23


def iid_verifiers() -> list[str]:
    """Registered numpy verifiers that are exact on iid drafts (report order)."""
    names = [n for n in available_verifiers()
             if get_verifier(n).drafting in ("iid", "any") and getattr(get_verifier(n), "bench_default", True)]
    return sorted(names, key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))


def node_acceptance(verifier, p, q, k: int, rng: np.random.Generator, *,
                    mc_samples: int = 20000) -> tuple[float, float, str]:
    """Acceptance of ``verifier`` at one node: ``(value, stderr, method)``.

    ``stderr`` is 0 for the exact methods.  See the module docstring for the
    methods.
    """
    if getattr(verifier, "step_acceptance", None) is None or verifier.step_acceptance(p, q, k) is None:
        closed = getattr(verifier, "acceptance_closed_form", None)
        a = None if closed is None else closed(p, q, k, "iid")
        if a is not None:
            return float(a[0]), 0.0, "closed form"
    if hasattr(verifier, "step_acceptance") and verifier.step_acceptance(p, q, k) is not None:
        return acceptance_probability(verifier, p, q, k), 0.0, "exact"
    if int(np.count_nonzero(q)) ** k <= MAX_TUPLES:
        return acceptance_probability(verifier, p, q, k, drafting="iid"), 0.0, "enumeration"
    chunk = max(1, MC_CHUNK_ELEMS // max(p.size, 1))          # bounded memory: (chunk, V) laws a chain call
    hits = []
    for start in range(0, mc_samples, chunk):
        m = min(chunk, mc_samples - start)
        P = np.broadcast_to(p, (m, p.size))
        Q = np.broadcast_to(q, (m, q.size))
        cands = draw_candidates(Q, k, "iid", rng)
        a = verifier.chain(P, Q, cands).accept_probs
        hits.append(1.0 - np.prod(1.0 - a, axis=1))           # Rao-Blackwellised over the coins
    hit = np.concatenate(hits)
    return float(hit.mean()), float(hit.std(ddof=1) / math.sqrt(mc_samples)), "monte carlo"


@dataclass
class Cell:
    """One (family, V, k, T) cell of the acceptance table.

    Attributes
    ----------
    acceptance : dict name -> mean exact acceptance over the nodes
    stderr : dict name -> standard error of that mean over the nodes
        (node-to-node spread, plus Monte Carlo error where used)
    method : dict name -> how it was computed
    alpha_star : mean alpha* over the nodes
    seq_opt : mean best-sequential acceptance (LP), or None when skipped
    gap_closed : dict name -> (A - A_rrs) / (alpha* - A_rrs), None if saturated
    seq_gap_closed : the same for the sequential optimum, or None
    """

    family: str
    V: int
    k: int
    T: float
    nodes: int
    acceptance: dict = field(default_factory=dict)
    stderr: dict = field(default_factory=dict)
    method: dict = field(default_factory=dict)
    alpha_star: float = float("nan")
    seq_opt: float | None = None
    gap_closed: dict = field(default_factory=dict)
    seq_gap_closed: float | None = None

    @property
    def saturated(self) -> bool:
        return self.alpha_star - self.acceptance.get("rrs", 0.0) < SATURATED

    def ordering_holds(self) -> bool | None:
        """``resispec > kseq > rrs`` strictly (None when saturated or missing)."""
        a = self.acceptance
        if self.saturated or not all(n in a for n in ("resispec", "kseq", "rrs")):
            return None
        return bool(a["resispec"] > a["kseq"] > a["rrs"])


@dataclass
class AcceptTable:
    """Result of :func:`bench_accept`: the cells plus the run's settings."""

    cells: list
    verifiers: list
    settings: dict
    seconds: float

    def summary(self) -> dict:
        """Mean / min / max gap closed per verifier over non-saturated cells, ordering counts."""
        out = {"cells": len(self.cells), "saturated_cells": sum(c.saturated for c in self.cells)}
        live = [c for c in self.cells if not c.saturated]
        gaps = {}
        for name in self.verifiers + ["seq_opt"]:
            vals = [c.seq_gap_closed if name == "seq_opt" else c.gap_closed.get(name) for c in live]
            vals = [v for v in vals if v is not None]
            if vals:
                gaps[name] = {"mean": float(np.mean(vals)), "median": float(np.median(vals)),
                              "min": float(np.min(vals)),
                              "max": float(np.max(vals)), "cells": len(vals)}
        out["gap_closed"] = gaps
        orders = [c.ordering_holds() for c in self.cells]
        out["ordering_resispec_gt_kseq_gt_rrs"] = {
            "holds": sum(o is True for o in orders), "fails": sum(o is False for o in orders),
            "saturated": sum(c.saturated for c in self.cells),
            "not_run": sum(o is None and not c.saturated for c, o in zip(self.cells, orders))}
        out["ordering_fails_in"] = [f"{c.family} V={c.V} k={c.k} T={c.T}" for c, o in zip(self.cells, orders)
                                    if o is False]
        return out

    def to_json(self) -> dict:
        return {"settings": self.settings, "verifiers": self.verifiers, "seconds": self.seconds,
                "summary": self.summary(),
                "cells": [{**asdict(c), "saturated": c.saturated} for c in self.cells]}


def _cell_seed(seed: int, family: str, V: int, T: float) -> np.random.Generator:
    key = zlib.crc32(f"{family}|{V}|{T!r}".encode())
    return np.random.default_rng([int(seed), key])


def _check_ints(name, values, lo):
    if not values:
        raise ValueError(f"{name} must not be empty")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{name} entries must be integers >= {lo}, got {v!r}")


def bench_accept(*, families=DEFAULT_FAMILIES, Vs=DEFAULT_V, ks=DEFAULT_K, Ts=DEFAULT_T, nodes: int = 8,
                 seed: int = 0, verifiers=None, lp_max_V: int = 1000, mc_samples: int = 20000,
                 progress: bool = True) -> AcceptTable:
    """Compute the acceptance table.

    Parameters
    ----------
    families : sequence of str
        Pair families (:func:`simulators.get_family`); a family with a fixed
        vocabulary (``ngram``) ignores ``Vs`` and uses its own.
    Vs, ks, Ts : sequences of int, int, float
        Vocabulary sizes (>= 2), candidate counts (>= 1), temperatures (> 0).
    nodes : int >= 1
        Nodes per cell (the same nodes for every ``k``).
    seed : int
    verifiers : sequence of str, optional
        Default: every registered iid-capable verifier
        (:func:`iid_verifiers`); ``rrs`` is always included (the baseline).
    lp_max_V : int
        Run the sequential-optimum LP only when ``V <= lp_max_V`` (0: never).
    mc_samples : int
        Draws per node for the Monte Carlo fallback.
    progress : bool
        tqdm progress bar on stderr.

    Returns
    -------
    AcceptTable

    Raises
    ------
    ValueError
        Unknown family or verifier, empty or invalid lists, ``nodes < 1``.
    """
    from simulators import get_family
    from tqdm.auto import tqdm

    families = list(families)
    if not families:
        raise ValueError("families must not be empty")
    fams = [get_family(f) for f in families]
    Vs, ks, Ts = list(Vs), list(ks), [float(t) for t in Ts]
    _check_ints("V", Vs, 2)
    _check_ints("k", ks, 1)
    if not Ts or any(not (t > 0) or not math.isfinite(t) for t in Ts):
        raise ValueError(f"T entries must be finite and > 0, got {Ts}")
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
        raise ValueError(f"nodes must be an integer >= 1, got {nodes!r}")
    if isinstance(mc_samples, bool) or not isinstance(mc_samples, (int, np.integer)) or mc_samples < 2:
        raise ValueError(f"mc_samples must be an integer >= 2, got {mc_samples!r}")
    names = list(verifiers) if verifiers is not None else iid_verifiers()
    known = iid_verifiers()
    for n in names:
        if n not in known:
            raise ValueError(f"verifiers: {n!r} is not an iid-capable verifier; choose from {known}")
    if "rrs" not in names:
        names = ["rrs"] + names
    built = {n: get_verifier(n) for n in names}

    plan = []
    for fam in fams:
        for V in ([fam.fixed_vocab] if fam.fixed_vocab else Vs):
            for T in Ts:
                plan.append((fam, int(V), T))
    t0 = time.perf_counter()
    cells = []
    bar = tqdm(total=len(plan) * len(ks), desc="bench-accept", unit="cell", disable=None if progress else True)
    for fam, V, T in plan:
        rng = _cell_seed(seed, fam.name, V, T)
        P, Q = fam.sample(rng, n=int(nodes), V=None if fam.fixed_vocab else V, temperature=T)
        for k in ks:
            k = int(k)
            bar.set_postfix_str(f"{fam.name} V={V} T={T} k={k}")
            cell = Cell(fam.name, V, k, T, int(nodes))
            per = {n: [] for n in names}
            errs = {n: [] for n in names}
            for b in range(P.shape[0]):
                for n, v in built.items():
                    val, se, how = node_acceptance(v, P[b], Q[b], k, rng, mc_samples=int(mc_samples))
                    per[n].append(val), errs[n].append(se)
                    cell.method[n] = how
            alpha = optimal_acceptance(P, Q, k)
            cell.alpha_star = float(np.mean(alpha))
            for n in names:
                x = np.asarray(per[n])
                spread = x.std(ddof=1) / math.sqrt(x.size) if x.size > 1 else 0.0
                mc = math.sqrt(np.sum(np.square(errs[n]))) / x.size
                cell.acceptance[n] = float(x.mean())
                cell.stderr[n] = float(math.hypot(spread, mc))
            if V <= lp_max_V:
                cell.seq_opt = float(np.mean([sequential_optimum_iid(P[b], Q[b], k) for b in range(P.shape[0])]))
            base = cell.acceptance["rrs"]
            gap = cell.alpha_star - base
            for n in names:
                cell.gap_closed[n] = None if gap < SATURATED else float((cell.acceptance[n] - base) / gap)
            if cell.seq_opt is not None and gap >= SATURATED:
                cell.seq_gap_closed = float((cell.seq_opt - base) / gap)
            cells.append(cell)
            bar.update(1)
    bar.close()
    settings = dict(families=families, V=[int(v) for v in Vs], k=[int(k) for k in ks], T=Ts, nodes=int(nodes),
                    seed=int(seed), lp_max_V=int(lp_max_V), mc_samples=int(mc_samples))
    return AcceptTable(cells, names, settings, time.perf_counter() - t0)


def to_markdown(table: AcceptTable, *, command: str | None = None) -> str:
    """Markdown report: summary, then one row per cell (acceptance and gap closed)."""
    s = table.summary()
    names = table.verifiers
    lines = ["# Acceptance table (`resispec bench accept`)", ""] + command_lines(command)
    st = table.settings
    lines += [f"Families {', '.join(st['families'])}; V in {st['V']} (real n-gram nodes: their own V); "
              f"k in {st['k']}; T in {st['T']}; {st['nodes']} nodes per cell (same nodes for every k); "
              f"seed {st['seed']}; sequential LP where V <= {st['lp_max_V']}. Run time {table.seconds:.0f} s.", ""]
    lines += ["Acceptance = exact probability that some candidate is accepted, averaged over the nodes "
              "(method per verifier below). Gap closed = (A - A_rrs) / (alpha* - A_rrs) on cell means; "
              f"'-' where the cell is saturated (alpha* - A_rrs < {SATURATED:g}) or the LP was skipped.", ""]
    methods = sorted({(n, c.method.get(n)) for c in table.cells for n in names})
    lines += ["Methods: " + "; ".join(f"`{n}` {m}" for n, m in methods), ""]
    lines += ["## Summary", ""]
    o = s["ordering_resispec_gt_kseq_gt_rrs"]
    if o["not_run"]:
        lines += ["- ResiSpec > kseq > rrs: not checked (needs all three verifiers in the run)."]
    else:
        lines += [f"- ResiSpec > kseq > rrs (strict) in {o['holds']} of {o['holds'] + o['fails']} non-saturated "
                  f"cells; fails in {o['fails']}; {o['saturated']} saturated cells (every verifier at alpha* to 1e-6)."]
    if s["ordering_fails_in"]:
        lines += [f"- Ordering fails in: {', '.join(s['ordering_fails_in'])}"]
    lines += [""] + stats_table("verifier", s["gap_closed"], ("mean", "median", "min", "max"),
                                head=("mean gap closed", "median", "min", "max"))
    lines += ["", "Verifiers below `rrs` (`sps`, `target_only`) have negative fractions, unbounded when the "
              "cell's gap alpha* - A_rrs is tiny; compare them by the acceptances in the cells. `seq_opt` "
              "(the best sequential verifier, an LP) is averaged over the V <= lp_max_V cells only."]
    lines += ["", "## Cells", ""]
    head = ["family", "V", "k", "T"] + [f"A {n}" for n in names] + ["alpha*", "seq LP"] + \
           [f"gap {n}" for n in names if n != "rrs"] + ["gap seq LP"]
    rows = []
    for c in table.cells:
        r = [c.family, str(c.V), str(c.k), f"{c.T:g}"]
        for n in names:
            v = fmt(c.acceptance[n])
            if c.method.get(n) == "monte carlo":
                v += f" ± {c.stderr[n]:.4f} (MC)"
            r.append(v)
        r += [fmt(c.alpha_star), fmt(c.seq_opt)]
        r += [fmt(c.gap_closed[n], 3) for n in names if n != "rrs"]
        r.append(fmt(c.seq_gap_closed, 3))
        rows.append(r)
    lines += md_table(head, rows)
    lines += ["", "Standard errors of the cell means over nodes are in the JSON file (`stderr`).", ""]
    return "\n".join(lines)



def write_reports(table: AcceptTable, out: str, *, command: str | None = None) -> tuple[str, str]:
    """Write ``out`` (markdown) and the same path with ``.json``; return both paths."""
    return write_markdown_and_json(out, to_markdown(table, command=command), table.to_json())
