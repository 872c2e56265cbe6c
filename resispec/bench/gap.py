"""Closing the gap: acceptance of the new ResiSpec rules against the optima.

Two tables (``resispec bench gap``):

*iid drafts*, per (family, T, k) at vocabulary ``V``: exact acceptance of
``rrs``, ``kseq``, ``resispec`` (myopic fixed point), ``resispec`` with
``reserve="lookahead"``, the best sequential verifier (LP,
:func:`resispec.bounds.sequential_optimum_iid`) and ``alpha*``; each
verifier's fraction of the ``rrs``-to-``alpha*`` gap closed (ratio of cell
means, as in ``bench-accept``).

*without-replacement drafts*, per (family, T, k): ``rrs_wor`` and ``resispec``
(``drafting="without_replacement"``) with ``alpha*_wor``
(:func:`resispec.wor_bound.alpha_star_wor`); and on *small cases*
(``V_small`` tokens, exact enumeration) also the WOR sequential optimum
(:func:`resispec.bounds.sequential_optimum`) and the fraction of the
``rrs_wor``-to-sequential-optimum gap closed.

How WOR acceptance is computed (the cell's ``method``):

- ``closed form`` for k = 2: ``beta_1 + sum_x w(x) beta_2(x)`` in O(V log V)
  (:func:`wor_acceptance_k2`; equal to enumeration in the tests);
- ``enumeration`` when the ordered tuples fit (``perm(n, k) <= enum_limit``);
- ``monte carlo`` otherwise: both verifiers see the SAME candidate draws and
  the per-draw acceptance is Rao-Blackwellised over the coins
  (``1 - prod(1 - a_i)``), so the difference has a small standard error
  (reported as ``diff_se``).

References: rrs (SpecInfer, arXiv 2305.09781), rrs_wor (RSD, arXiv
2402.14160), kseq (SpecTr, arXiv 2310.15141), optimum (Hu et al. 2025,
arXiv 2502.18779).
"""

from __future__ import annotations

import math
import time
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from ..analysis import acceptance_probability, optimal_acceptance
from ..bounds import sequential_optimum, sequential_optimum_iid
from ..enumeration import count_tuples
from ..sampling import draw_candidates
from ..verifiers import get_verifier
from ..verifiers.resispec_wor import ResiSpecWOR, _plain_next_value
from ..wor_bound import alpha_star_wor
from ._report import command_lines, fmt, md_table, stats_table, write_markdown_and_json

#: Cells with ``bound - A(baseline)`` below this are saturated (ratio undefined):
#: coarser than bench-accept's 1e-6 because the WOR bounds carry LP / quadrature
#: errors of ~1e-7 that would make such ratios noise.
SATURATED = 1e-4

from .defaults import GAP_FAMILIES as DEFAULT_FAMILIES  # noqa: E402
from .defaults import GAP_K as DEFAULT_K  # noqa: E402
from .defaults import GAP_T as DEFAULT_T  # noqa: E402

#: ``resispec`` is the default (the look-ahead reserve); ``resispec_myopic`` the default before it (the fixed point).
IID_NAMES = ("rrs", "kseq", "resispec_myopic", "resispec")


def _iid_verifiers():
    return {"rrs": get_verifier("rrs"), "kseq": get_verifier("kseq"), "resispec_myopic": get_verifier("resispec_myopic"),
            "resispec": get_verifier("resispec")}


def wor_acceptance_k2(verifier, p, q) -> float:
    """Exact acceptance of ``rrs_wor`` or WOR ResiSpec with k = 2, O(V log V).

    ``A = sum(m_1) + sum_x w(x) sum_{y != x} min(r^(x)(y), q^(x)(y))`` with the
    first step's accepted mass ``m_1``, ``w = q - m_1`` and the residual
    ``r^(x)`` after rejecting ``x`` (the second candidate is greedy).

    Parameters
    ----------
    verifier : the ``rrs_wor`` verifier or :class:`ResiSpecWOR`
    p, q : ndarray, shape (V,), float64

    Returns
    -------
    float
    """
    p2, q2 = np.asarray(p, float)[None], np.asarray(q, float)[None]
    if isinstance(verifier, ResiSpecWOR):
        return float(verifier.step(p2, q2)[3][0])
    if getattr(verifier, "name", None) == "rrs_wor":
        m = np.minimum(p2, q2)
        return float(m.sum() + _plain_next_value(p2 - m, q2, q2 - m)[0])
    raise TypeError(f"wor_acceptance_k2 handles rrs_wor and ResiSpecWOR, got {type(verifier).__name__}")


def wor_pair_acceptance(verifiers: dict, p, q, k: int, rng: np.random.Generator, *, samples: int = 2000,
                        enum_limit: int = 200_000) -> tuple[dict, dict, str]:
    """Acceptance of several WOR verifiers at one node: ``(values, stderr, method)``.

    Monte Carlo uses one set of candidate draws for every verifier; ``stderr``
    also holds ``"diff:<a>-<b>"`` entries for the paired differences against
    the first verifier.
    """
    n_sup = int(np.count_nonzero(q))
    names = list(verifiers)
    if k == 2:
        return {n: wor_acceptance_k2(v, p, q) for n, v in verifiers.items()}, {n: 0.0 for n in names}, "closed form"
    if count_tuples(n_sup, k, "without_replacement") <= enum_limit:
        return ({n: acceptance_probability(v, p, q, k) for n, v in verifiers.items()},
                {n: 0.0 for n in names}, "enumeration")
    P = np.broadcast_to(p, (samples, p.size))
    Q = np.broadcast_to(q, (samples, q.size))
    cands = draw_candidates(Q, k, "without_replacement", rng)
    hits = {n: 1.0 - np.prod(1.0 - v.chain(P, Q, cands).accept_probs, axis=1) for n, v in verifiers.items()}
    vals = {n: float(h.mean()) for n, h in hits.items()}
    se = {n: float(h.std(ddof=1) / math.sqrt(samples)) for n, h in hits.items()}
    base = names[0]
    for n in names[1:]:
        d = hits[n] - hits[base]
        se[f"diff:{n}-{base}"] = float(d.std(ddof=1) / math.sqrt(samples))
    return vals, se, "monte carlo"


@dataclass
class GapCell:
    """One (family, T, k) cell.

    Attributes
    ----------
    acceptance : dict name -> mean acceptance over the nodes
    stderr : dict name -> standard error of the mean (node spread and MC)
    bounds : dict name -> mean bound (``alpha*``, ``seq_opt``, ...)
    gap_closed : dict "verifier/bound" -> (A - A_base) / (bound - A_base), None if saturated
    method : how the acceptances were computed
    """

    section: str
    family: str
    V: int
    k: int
    T: float
    nodes: int
    method: str = "exact"
    acceptance: dict = field(default_factory=dict)
    stderr: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)
    gap_closed: dict = field(default_factory=dict)


def _ratio(a, base, bound):
    gap = bound - base
    return None if gap < SATURATED else float((a - base) / gap)


def _rng(seed, *key) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32("|".join(map(repr, key)).encode())])


def _nodes(family, seed, V, T, nodes):
    from simulators import get_family

    fam = get_family(family)
    rng = _rng(seed, family, V, T)
    return fam.sample(rng, n=int(nodes), V=V, temperature=float(T))


def iid_cells(families, Ts, ks, *, V: int, nodes: int, seed: int, lp: bool = True, bar=None) -> list:
    """The iid table (see the module docstring)."""
    vs = _iid_verifiers()
    cells = []
    for fam in families:
        for T in Ts:
            P, Q = _nodes(fam, seed, V, T, nodes)
            for k in ks:
                c = GapCell("iid", fam, V, int(k), float(T), int(nodes))
                per = {n: [acceptance_probability(v, P[b], Q[b], k) for b in range(len(P))] for n, v in vs.items()}
                for n, x in per.items():
                    c.acceptance[n] = float(np.mean(x))
                    c.stderr[n] = float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
                c.bounds["alpha*"] = float(np.mean(optimal_acceptance(P, Q, k)))
                if lp:
                    c.bounds["seq_opt"] = float(np.mean([sequential_optimum_iid(P[b], Q[b], k) for b in range(len(P))]))
                base = c.acceptance["rrs"]
                for n in list(vs)[1:] + (["seq_opt"] if lp else []):
                    a = c.bounds["seq_opt"] if n == "seq_opt" else c.acceptance[n]
                    c.gap_closed[f"{n}/alpha*"] = _ratio(a, base, c.bounds["alpha*"])
                if lp:
                    for n in ("resispec_myopic", "resispec"):
                        c.gap_closed[f"{n}/seq_opt"] = _ratio(c.acceptance[n], base, c.bounds["seq_opt"])
                cells.append(c)
                if bar is not None:
                    bar.update(1)
    return cells


def wor_cells(families, Ts, ks, *, V: int, nodes: int, seed: int, samples: int, small: bool,
              alpha_tol: float = 1e-3, bar=None) -> list:
    """The without-replacement table; ``small=True`` adds the sequential LP optimum."""
    vs = {"rrs_wor": get_verifier("rrs_wor"), "resispec": get_verifier("resispec", drafting="without_replacement")}
    cells = []
    for fam in families:
        for T in Ts:
            P, Q = _nodes(fam, seed, V, T, nodes)
            for k in ks:
                k = int(k)
                c = GapCell("wor_small" if small else "wor", fam, V, k, float(T), int(nodes))
                rng = _rng(seed, "wor", fam, V, T, k)
                vals = {n: [] for n in vs}
                ses = {n: [] for n in vs}
                dse = []
                a_lo, a_hi, a_mid, seq = [], [], [], []
                for b in range(len(P)):
                    if np.count_nonzero(Q[b]) < k:
                        continue
                    v, s, c.method = wor_pair_acceptance(vs, P[b], Q[b], k, rng, samples=samples)
                    for n in vs:
                        vals[n].append(v[n]), ses[n].append(s[n])
                    dse.append(s.get("diff:resispec-rrs_wor", 0.0))
                    if small:
                        a_mid.append(optimal_acceptance(P[b], Q[b], k, "without_replacement"))
                        try:
                            seq.append(sequential_optimum(P[b], Q[b], k, "without_replacement"))
                        except ValueError:       # LP past MAX_SEQ_LP_VARIABLES: leave the cell without it
                            pass

                    else:
                        r = alpha_star_wor(P[b], Q[b], k, tol=alpha_tol)
                        a_mid.append(r.statistic), a_lo.append(r.lower), a_hi.append(r.upper)
                n_ok = len(a_mid)
                c.nodes = n_ok
                if n_ok == 0:
                    continue
                for n in vs:
                    x = np.asarray(vals[n])
                    spread = x.std(ddof=1) / math.sqrt(n_ok) if n_ok > 1 else 0.0
                    c.acceptance[n] = float(x.mean())
                    c.stderr[n] = float(math.hypot(spread, math.sqrt(np.sum(np.square(ses[n]))) / n_ok))
                d = np.asarray(vals["resispec"]) - np.asarray(vals["rrs_wor"])
                c.stderr["diff_mc"] = float(math.sqrt(np.sum(np.square(dse))) / n_ok)
                c.stderr["diff_min_node"] = float(d.min())
                c.bounds["alpha*_wor"] = float(np.mean(a_mid))
                if a_lo:
                    c.bounds["alpha*_wor_lower"] = float(np.mean(a_lo))
                    c.bounds["alpha*_wor_upper"] = float(np.mean(a_hi))
                base = c.acceptance["rrs_wor"]
                if seq and len(seq) == n_ok:
                    c.bounds["seq_opt_wor"] = float(np.mean(seq))
                    c.gap_closed["resispec/seq_opt_wor"] = _ratio(c.acceptance["resispec"], base, c.bounds["seq_opt_wor"])
                    c.gap_closed["seq_opt_wor/alpha*_wor"] = _ratio(c.bounds["seq_opt_wor"], base, c.bounds["alpha*_wor"])
                c.gap_closed["resispec/alpha*_wor"] = _ratio(c.acceptance["resispec"], base, c.bounds["alpha*_wor"])
                cells.append(c)
                if bar is not None:
                    bar.update(1)
    return cells


@dataclass
class GapTable:
    """Result of :func:`bench_gap`."""

    cells: list
    settings: dict
    seconds: float

    def summary(self) -> dict:
        """Mean / min / max of every gap fraction per section and k, plus the headline checks."""
        out = {}
        for sec in ("iid", "wor", "wor_small"):
            cs = [c for c in self.cells if c.section == sec]
            if not cs:
                continue
            keys = sorted({k for c in cs for k in c.gap_closed})
            agg = {}
            for key in keys:
                for kk in sorted({c.k for c in cs}) + ["all"]:
                    vals = [c.gap_closed.get(key) for c in cs if kk == "all" or c.k == kk]
                    vals = [v for v in vals if v is not None]
                    if vals:
                        agg[f"{key} k={kk}"] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)),
                                                "max": float(np.max(vals)), "cells": len(vals)}
            out[sec] = agg
        iid = [c for c in self.cells if c.section == "iid" and c.k in (4, 8)]
        if iid:
            la = [c.gap_closed.get("resispec/alpha*") for c in iid]
            my = [c.gap_closed.get("resispec_myopic/alpha*") for c in iid]
            lp = [c.gap_closed.get("seq_opt/alpha*") for c in iid]
            f = lambda v: float(np.mean([x for x in v if x is not None])) if any(x is not None for x in v) else None  # noqa: E731
            out["target_iid_k4_8"] = {"lookahead_mean_gap": f(la), "myopic_mean_gap": f(my), "seq_opt_mean_gap": f(lp),
                                      "lookahead_ge_myopic_cells": sum(
                                          c.acceptance["resispec"] >= c.acceptance["resispec_myopic"] - 1e-12
                                          for c in iid), "cells": len(iid), "k": sorted({c.k for c in iid})}
        wor = [c for c in self.cells if c.section in ("wor", "wor_small")]
        if wor:
            below = [f"{c.section} {c.family} T={c.T} k={c.k}" for c in wor
                     if c.acceptance["resispec"] < c.acceptance["rrs_wor"] - 3 * c.stderr.get("diff_mc", 0.0) - 1e-12]
            out["target_wor_ge_rrs_wor"] = {"cells": len(wor), "below": below}
            sm = [c.gap_closed.get("resispec/seq_opt_wor") for c in wor if c.section == "wor_small"]
            sm = [x for x in sm if x is not None]
            if sm:
                out["target_wor_small_gap_to_seq_opt"] = {"mean": float(np.mean(sm)), "min": float(np.min(sm)),
                                                          "cells": len(sm)}
        return out

    def to_json(self) -> dict:
        return {"settings": self.settings, "seconds": self.seconds, "summary": self.summary(),
                "cells": [asdict(c) for c in self.cells]}


def bench_gap(*, families=DEFAULT_FAMILIES, Ts=DEFAULT_T, ks=DEFAULT_K, wor_ks=DEFAULT_K, V: int = 1000,
              V_small: int = 8, nodes: int = 4, small_nodes: int = 6, seed: int = 0, samples: int = 500,
              lp: bool = True, sections=("iid", "wor", "wor_small"), progress: bool = True) -> GapTable:
    """Run the gap tables.

    Parameters
    ----------
    families : sequence of str
        Pair families (:func:`simulators.get_family`).
    Ts, ks, wor_ks : sequences of float, int, int
        Temperatures, candidate counts for iid and for without-replacement.
    V, V_small : int
        Vocabulary of the main tables and of the small WOR cases.
    nodes, small_nodes : int
        Nodes per cell.
    seed : int
    samples : int
        Monte Carlo draws per node for WOR cells past exact computation.
    lp : bool
        Solve the iid sequential LP (about a second per node at V = 1000, k = 8).
    sections : subset of {"iid", "wor", "wor_small"}
    progress : bool

    Returns
    -------
    GapTable

    Raises
    ------
    ValueError
        Unknown family or section, invalid sizes.
    """
    from tqdm.auto import tqdm

    for name, val, lo in (("V", V, 2), ("V_small", V_small, 2), ("nodes", nodes, 1),
                          ("small_nodes", small_nodes, 1), ("samples", samples, 2)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {val!r}")
    bad = set(sections) - {"iid", "wor", "wor_small"}
    if bad or not sections:
        raise ValueError(f"sections must be a non-empty subset of iid, wor, wor_small; got {sections!r}")
    for kk in list(ks) + list(wor_ks):
        if isinstance(kk, bool) or not isinstance(kk, (int, np.integer)) or kk < 1:
            raise ValueError(f"k values must be integers >= 1, got {kk!r}")
    for sec, vocab, name in (("wor", V, "V"), ("wor_small", V_small, "V_small")):   # k distinct tokens of V
        big = [int(kk) for kk in wor_ks if kk > vocab]
        if sec in sections and big:
            raise ValueError(f"wor_k must be <= {name} = {vocab}, got {big}: {max(big)} distinct candidates cannot be "
                             f"drafted without replacement from {vocab} tokens, so every {sec} cell would be empty "
                             f"(or drop the {sec} section)")
    from simulators import get_family

    for f in families:
        get_family(f)
    n_cells = len(families) * len(Ts) * (len(ks) * ("iid" in sections) + len(wor_ks) * (
        ("wor" in sections) + ("wor_small" in sections)))
    bar = tqdm(total=n_cells, desc="bench-gap", unit="cell", disable=None if progress else True)
    t0 = time.perf_counter()
    cells = []
    if "iid" in sections:
        cells += iid_cells(families, Ts, ks, V=V, nodes=nodes, seed=seed, lp=lp, bar=bar)
    if "wor" in sections:
        cells += wor_cells(families, Ts, wor_ks, V=V, nodes=nodes, seed=seed, samples=samples, small=False, bar=bar)
    if "wor_small" in sections:
        cells += wor_cells(families, Ts, wor_ks, V=V_small, nodes=small_nodes, seed=seed, samples=samples,
                           small=True, bar=bar)
    bar.close()
    settings = dict(families=list(families), T=[float(t) for t in Ts], k=[int(k) for k in ks],
                    wor_k=[int(k) for k in wor_ks], V=int(V), V_small=int(V_small), nodes=int(nodes),
                    small_nodes=int(small_nodes), seed=int(seed), samples=int(samples), lp=bool(lp),
                    sections=list(sections))
    return GapTable(cells, settings, time.perf_counter() - t0)


def to_markdown(table: GapTable, *, command: str | None = None) -> str:
    """Markdown report: headline checks, then one table per section."""
    s = table.summary()
    st = table.settings
    L = ["# Closing the gap (`resispec bench gap`)", ""] + command_lines(command)
    L += [f"Families {', '.join(st['families'])}; T in {st['T']}; iid k in {st['k']}, WOR k in {st['wor_k']}; "
          f"V = {st['V']} ({st['nodes']} nodes per cell)"
          + (f", small WOR cases V = {st['V_small']} ({st['small_nodes']} nodes)"
             if "wor_small" in st.get("sections", ("wor_small",)) else "")
          + f"; seed {st['seed']}. Run time {table.seconds:.0f} s.", "",
          "Gap closed = (A - A_base) / (bound - A_base) on cell means (base `rrs` for iid, `rrs_wor` for WOR); "
          f"'-' where the cell is saturated (bound - A_base < {SATURATED:g}).", ""]
    head_at = len(L)
    L += ["## Headline", ""]
    t = s.get("target_iid_k4_8")
    if t:
        ks = ", ".join(map(str, t.get("k", (4, 8))))      # the cells' k among 4 and 8 (older JSON: both)
        L += [f"- iid, k in {{{ks}}}: mean fraction of the rrs-to-alpha* gap closed by the default `resispec`: "
              f"now (look-ahead) {fmt(t['lookahead_mean_gap'], 3)}, before (myopic, `resispec_myopic`) "
              f"{fmt(t['myopic_mean_gap'], 3)}; sequential LP optimum "
              f"{fmt(t['seq_opt_mean_gap'], 3)}; look-ahead >= myopic in {t['lookahead_ge_myopic_cells']} of "
              f"{t['cells']} cells."]
    t = s.get("target_wor_ge_rrs_wor")
    if t:
        L += [f"- WOR: ResiSpec below rrs_wor (beyond 3 MC standard errors of the paired difference) in "
              f"{len(t['below'])} of {t['cells']} cells" + (f": {', '.join(t['below'])}" if t["below"] else ".")]
    t = s.get("target_wor_small_gap_to_seq_opt")
    if t:
        L += [f"- WOR small cases: mean fraction of the rrs_wor-to-sequential-optimum gap closed "
              f"{t['mean']:.3f} (min {t['min']:.3f}, {t['cells']} cells)."]
    if len(L) == head_at + 2:
        del L[head_at:]                               # no headline figure for the sections run (e.g. iid at k = 2)
    L += [""]
    for sec, title in (("iid", "iid drafts"), ("wor", "Without-replacement drafts"),
                       ("wor_small", "Without-replacement drafts, small cases (exact, with the sequential LP)")):
        cs = [c for c in table.cells if c.section == sec]
        if not cs:
            continue
        L += [f"## {title}", ""]
        accs = list(cs[0].acceptance)
        bnds = sorted({b for c in cs for b in c.bounds})
        gaps = sorted({g for c in cs for g in c.gap_closed})
        head = ["family", "T", "k", "V", "method"] + [f"A {a}" for a in accs] + bnds + [f"gap {g}" for g in gaps]
        rows = []
        for c in cs:
            row = [c.family, f"{c.T:g}", str(c.k), str(c.V), c.method]
            for a in accs:
                v = fmt(c.acceptance.get(a))
                if c.method == "monte carlo":
                    v += f" ± {c.stderr.get(a, 0):.4f}"
                row.append(v)
            row += [fmt(c.bounds.get(b)) for b in bnds]
            row += [fmt(c.gap_closed.get(g), 3) for g in gaps]
            rows.append(row)
        L += md_table(head, rows) + [""]
        agg = s.get(sec, {})
        if agg:
            L += stats_table("gap fraction", agg) + [""]
    if any(c.method == "monte carlo" for c in table.cells):
        L += ["Monte Carlo WOR cells: both verifiers see the same candidate draws; the standard error of the paired "
              "difference is `stderr.diff_mc` in the JSON file.", ""]
    return "\n".join(L)



def write_reports(table: GapTable, out: str, *, command: str | None = None) -> tuple[str, str]:
    """Write ``out`` (markdown) and the same path with ``.json`` (atomically); return both paths."""
    return write_markdown_and_json(out, to_markdown(table, command=command), table.to_json())
