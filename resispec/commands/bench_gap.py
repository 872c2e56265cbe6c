"""Acceptance of the new ResiSpec rules against the optima they chase.

iid drafts: rrs, kseq, resispec (myopic), resispec (look-ahead), the
sequential LP optimum and alpha*, with the fraction of the rrs-to-alpha* gap
each closes.  Without-replacement drafts: rrs_wor, resispec (WOR) and
alpha*_wor at V, plus small cases with the WOR sequential optimum.  Writes a
markdown report and a JSON file beside it.
"""

from __future__ import annotations

import shlex
import sys

from ._args import ListAction, check_out, count, seed_int  # noqa: E402

NAME = "bench-gap"
HELP = "acceptance of resispec (look-ahead, without-replacement) against the sequential optimum and alpha*"


def add_arguments(parser):
    from ..bench.defaults import GAP_FAMILIES as DEFAULT_FAMILIES
    from ..bench.defaults import GAP_K as DEFAULT_K
    from ..bench.defaults import GAP_T as DEFAULT_T

    parser.add_argument("--families", "--family", dest="families", action=ListAction, default=list(DEFAULT_FAMILIES), help="comma-separated families")
    parser.add_argument("--temperatures", "--T", dest="temperatures", action=ListAction, item_type=float, default=list(DEFAULT_T),
                        help="comma-separated temperatures")
    parser.add_argument("--k", action=ListAction, item_type=int, default=list(DEFAULT_K),
                        help="candidate counts, iid and without replacement alike (default %(default)s)")
    parser.add_argument("--V", action=ListAction, item_type=int, unique=False, default=[1000, 8],
                        help="vocabulary of the main tables, then of the small WOR cases (default 1000 8; one "
                             "value: the small cases keep 8)")
    parser.add_argument("--nodes", action=ListAction, item_type=int, unique=False, default=[4, 6],
                        help="nodes per cell of the main tables, then of the small WOR cases (default 4 6; one "
                             "value: the small cases keep 6)")
    parser.add_argument("--n", "--samples", "--n-samples", "--mc-samples", dest="samples", type=count, default=500, metavar="N",
                        help="Monte Carlo draws per node for WOR cells past exact computation (default %(default)s)")
    parser.add_argument("--sections", action=ListAction, default=["iid", "wor", "wor_small"],
                        help="comma-separated subset of iid,wor,wor_small")
    parser.add_argument("--lp-max-V", type=int, default=1000,
                        help="run the iid sequential-optimum LP only when --V <= this (0: never; default %(default)s)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--out", default="bench-out/bench_gap.md", metavar="PATH", help="markdown path; JSON beside it")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def run(args) -> int:
    given = {"--V": args.V, "--nodes": args.nodes}      # the main tables' value, then the small WOR cases'
    for flag, values in given.items():
        if len(values) > 2:
            raise ValueError(f"{flag} takes one or two values for bench gap (the main tables', then the small WOR "
                             f"cases'), got {len(values)} values")
    unused = [f"{flag}'s second value" for flag, values in given.items() if len(values) == 2]
    if unused and "wor_small" not in args.sections:
        raise ValueError(f"{' and '.join(unused)} set the small WOR cases, which --sections "
                         f"{','.join(args.sections)} leaves out; add wor_small or give one value")
    args.V, args.V_small = args.V[0], (args.V[1:] or [8])[0]
    args.nodes, args.small_nodes = args.nodes[0], (args.nodes[1:] or [6])[0]
    if args.lp_max_V < 0:
        raise ValueError(f"--lp-max-V must be >= 0 (0: never run the LP), got {args.lp_max_V}")
    check_out(args.out, "--out", json_beside=True)     # before any work
    from ..bench.gap import bench_gap, to_markdown, write_reports

    try:
        table = bench_gap(families=args.families, Ts=args.temperatures, ks=args.k, wor_ks=args.k, V=args.V,
                          V_small=args.V_small, nodes=args.nodes, small_nodes=args.small_nodes, seed=args.seed,
                          samples=args.samples, lp=0 < args.V <= args.lp_max_V, sections=tuple(args.sections),
                          progress=not args.no_progress)
    except ValueError as exc:       # the library names its parameter (wor_k); the user typed --k
        msg = str(exc).replace("V_small = ", "the small cases' V = ")   # the second value of --V
        if msg.startswith("V_small "):
            msg = "--V's second value (the small cases')" + msg[len("V_small"):]
        if msg.startswith("small_nodes "):
            msg = "--nodes's second value (the small cases')" + msg[len("small_nodes"):]
        raise ValueError("--k" + msg[len("wor_k"):] if msg.startswith("wor_k ") else msg) from None
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
    print(to_markdown(table, command=command))
    md, js = write_reports(table, args.out, command=command)
    print(f"wrote {md} and {js}")
    return 0
