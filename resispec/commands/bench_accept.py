"""Exact acceptance of every iid verifier against alpha* on synthetic and real n-gram pairs.

Prints, for each (family, V, k, T) cell, the exact acceptance probability of
each verifier averaged over the nodes, alpha*, the sequential-verifier LP
optimum (V <= --lp-max-V), and the fraction of the rrs-to-alpha* gap each
verifier closes; writes the markdown report and a JSON file beside it.
"""

from __future__ import annotations

import shlex
import sys

from ._args import ListAction, check_out, count, seed_int  # noqa: E402

NAME = "bench-accept"
HELP = "exact acceptance of every iid verifier and the fraction of the rrs-to-alpha* gap it closes"


def add_arguments(parser):
    from ..bench.defaults import ACCEPT_FAMILIES as DEFAULT_FAMILIES
    from ..bench.defaults import ACCEPT_K as DEFAULT_K
    from ..bench.defaults import ACCEPT_T as DEFAULT_T
    from ..bench.defaults import ACCEPT_V as DEFAULT_V

    parser.add_argument("--families", "--family", dest="families", action=ListAction, default=list(DEFAULT_FAMILIES),
                        help="comma-separated pair families (default: %(default)s)")
    parser.add_argument("--V", action=ListAction, item_type=int, unique=False, default=list(DEFAULT_V),
                        help="comma-separated vocabulary sizes for synthetic families (default: %(default)s)")
    parser.add_argument("--k", action=ListAction, item_type=int, default=list(DEFAULT_K), help="comma-separated candidate counts")
    parser.add_argument("--temperatures", "--T", dest="temperatures", action=ListAction, item_type=float, default=list(DEFAULT_T),
                        help="comma-separated temperatures")
    parser.add_argument("--nodes", action=ListAction, one=True, item_type=int, unique=False, default=8,
                        help="nodes per cell (one value; default: 8)")
    parser.add_argument("--verifiers", action=ListAction, default=None,
                        help="comma-separated verifiers (default: every iid-capable one)")
    parser.add_argument("--lp-max-V", type=int, default=1000,
                        help="run the sequential-optimum LP only when V <= this (0: never; default %(default)s)")
    parser.add_argument("--n", "--samples", "--n-samples", "--mc-samples", dest="samples", type=count, default=20000, metavar="N",
                        help="draws per node for verifiers with no exact acceptance formula")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--out", default="bench-out/bench_accept.md", metavar="PATH",
                        help="markdown report path; JSON goes beside it (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args) -> int:
    twice = sorted({v for v in args.V if args.V.count(v) > 1})
    if twice:
        raise ValueError(f"--V lists {', '.join(repr(str(v)) for v in twice)} twice; give each item once")
    if args.lp_max_V < 0:
        raise ValueError(f"--lp-max-V must be >= 0 (0: never run the LP), got {args.lp_max_V}")
    check_out(args.out, "--out", json_beside=True)     # before any work
    from ..bench.accept import bench_accept, write_reports

    table = bench_accept(families=args.families, Vs=args.V, ks=args.k, Ts=args.temperatures, nodes=args.nodes,
                         seed=args.seed, verifiers=args.verifiers, lp_max_V=args.lp_max_V,
                         mc_samples=args.samples, progress=not args.no_progress)
    names = table.verifiers
    head = f"{'family':<14}{'V':>6}{'k':>3}{'T':>5} " + "".join(f"{n[:11]:>12}" for n in names) + \
        f"{'alpha*':>9}{'seqLP':>9}{'gap kseq':>9}{'gap rsp':>9}{'gap LP':>9}"
    print(head)
    for c in table.cells:
        g = c.gap_closed
        fmt = lambda x: "      -" if x is None else f"{x:9.3f}"
        print(f"{c.family:<14}{c.V:>6}{c.k:>3}{c.T:>5g} " + "".join(f"{c.acceptance[n]:12.4f}" for n in names)
              + f"{c.alpha_star:9.4f}" + ("        -" if c.seq_opt is None else f"{c.seq_opt:9.4f}")
              + fmt(g.get("kseq")) + fmt(g.get("resispec")) + fmt(c.seq_gap_closed))
    s = table.summary()
    print()
    for n, gs in s["gap_closed"].items():
        print(f"gap closed  {n:<12} mean {gs['mean']:9.3f}  median {gs['median']:7.3f}  min {gs['min']:9.3f}  "
              f"max {gs['max']:6.3f}  ({gs['cells']} cells)")
    o = s["ordering_resispec_gt_kseq_gt_rrs"]
    if not o["not_run"]:
        print(f"resispec > kseq > rrs: holds in {o['holds']}, fails in {o['fails']}, saturated {o['saturated']} cells")
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
    md, js = write_reports(table, args.out, command=command)
    print(f"wrote {md} and {js}")
    return 0
