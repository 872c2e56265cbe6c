"""Path-level verification: exact expected accepted length of block vs token-wise verification, and the
LP bound over all exact rules, on chains; on small trees the node-level walks (rrs, resispec) and
traversal-style verification (with rrs and with ResiSpec at the siblings) against the LP (``docs/pathlevel.md``).

Pairs: first-order Markov draft/target pairs whose V + 1 rows (one per last token, plus the empty
context) are drawn from a named family of ``simulators.families`` (seeded).  Every number is exact
(enumeration of every drafted chain / tree, or an LP solved to ~1e-9), so no load dependence.

    PYTHONPATH=$PWD python benchmarks/pathlevel.py            # V = 4, L = 3 chains; V = 3 trees
    PYTHONPATH=$PWD python benchmarks/pathlevel.py --V 3 --L 2 --seeds 3
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import resispec
from resispec.pathlevel import analyse_path, analyse_tree, get_path_verifier, optimal_accepted
from simulators.autoregressive import MarkovPair
from simulators.families import get_family
from simulators.trees import block_efficiency

FAMILIES = ("softmax_noise", "zipf", "shifted", "dirichlet", "temp_mismatch")


def family_markov(name: str, V: int, seed: int, temperature: float = 1.0) -> MarkovPair:
    """A Markov pair whose V + 1 rows are V + 1 node pairs of family ``name`` (seeded)."""
    p, q = get_family(name).sample(np.random.default_rng(seed), n=V + 1, V=V, temperature=temperature)
    return MarkovPair(p[:V], q[:V], p[V], q[V])


def chains(V: int, L: int, seeds: int) -> list[str]:
    rows = ["| family | V | L | token-wise E[tau] | block E[tau] | LP bound (all exact rules) | block - token | block - LP |",
            "|---|---|---|---|---|---|---|---|"]
    for fam in FAMILIES:
        t = b = lp = 0.0
        for s in range(seeds):
            pair = family_markov(fam, V, s)
            t += analyse_path(get_path_verifier("token"), pair, L).expected_accepted / seeds
            b += analyse_path(get_path_verifier("block"), pair, L).expected_accepted / seeds
            lp += optimal_accepted(pair, (1,) * L).expected_accepted / seeds
        rows.append(f"| {fam} | {V} | {L} | {t:.6f} | {b:.6f} | {lp:.6f} | {b - t:+.6f} | {b - lp:+.2e} |")
    return rows


def trees(V: int, shapes, seeds: int) -> list[str]:
    rows = ["| family | V | shape | rrs tree walk | resispec tree walk | traversal (path-level) | traversal_resispec | "
            "LP bound (all exact rules) | traversal - rrs | traversal_resispec - best other | LP - best shipped rule |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    rrs, rsp, trav = resispec.get_verifier("rrs"), resispec.get_verifier("resispec"), get_path_verifier("traversal")
    trr = get_path_verifier("traversal_resispec")
    for fam in FAMILIES:
        for shape in shapes:
            a = r = t = tr = lp = 0.0
            branching = tuple(int(k) for k in shape.split(","))
            for s in range(seeds):
                pair = family_markov(fam, V, s)
                a += (block_efficiency(rrs, shape, pair).block_efficiency - 1) / seeds
                r += (block_efficiency(rsp, shape, pair).block_efficiency - 1) / seeds
                t += analyse_tree(trav, pair, branching).expected_accepted / seeds
                tr += analyse_tree(trr, pair, branching).expected_accepted / seeds
                lp += optimal_accepted(pair, shape).expected_accepted / seeds
            rows.append(f"| {fam} | {V} | {shape} | {a:.6f} | {r:.6f} | {t:.6f} | {tr:.6f} | {lp:.6f} | {t - a:+.6f} | "
                        f"{tr - max(a, r, t):+.6f} | {lp - max(a, r, t, tr):+.6f} |")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--V", type=int, default=4, help="vocabulary of the chain pairs (default 4)")
    ap.add_argument("--L", type=int, default=3, help="drafts per chain (default 3)")
    ap.add_argument("--tree-V", type=int, default=3, help="vocabulary of the tree pairs (default 3)")
    ap.add_argument("--shapes", default="2,1;1,2;3,1;2,2", help="tree shapes, ';'-separated (default 2,1;1,2;3,1;2,2)")
    ap.add_argument("--seeds", type=int, default=5, help="pairs per family, averaged (default 5)")
    a = ap.parse_args(argv)
    t0 = time.time()
    print(f"## Chains: expected accepted drafts per step (mean of {a.seeds} seeded pairs per family)\n")
    print("\n".join(chains(a.V, a.L, a.seeds)))
    print(f"\n## Trees (iid children), expected accepted drafts: node-level walks, traversal, the LP bound "
          f"(mean of {a.seeds} pairs)\n")
    print("\n".join(trees(a.tree_V, a.shapes.split(";"), a.seeds)))
    print(f"\n({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
