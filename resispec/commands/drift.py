"""Measure residual drift per chain step for every verifier and proxy, sweeping
the reserve scale gamma; write PNG plots, a markdown table and JSON to bench-out/ (git-ignored; --out reports
rewrites the shipped ones).

Example:
  resispec bench drift --families softmax_noise --k 8 --temperature 1.0 --out reports
"""

from __future__ import annotations

from ._args import ListAction, check_out, folder_and_stem, seed_int, typed_command

NAME = "bench-drift"
ALIASES = ("drift",)    # `resispec drift` = `resispec bench drift` (committed reports quote it)
HELP = "residual drift per chain step (beta_i, TV, top-mass residual, acceptance) with plots"


def add_arguments(parser):
    parser.add_argument("--families", "--family", dest="families", action=ListAction, one=True, default="softmax_noise",
                        help="pair family (one value; default softmax_noise)")
    parser.add_argument("--V", action=ListAction, one=True, item_type=int, unique=False, default=1000, help="vocabulary size (one value; default 1000)")
    parser.add_argument("--nodes", action=ListAction, one=True, item_type=int, unique=False, default=32,
                        help="number of (p, q) pairs (one value; default 32)")
    parser.add_argument("--k", action=ListAction, one=True, item_type=int, default=8, help="candidates per node (one value; default 8)")
    parser.add_argument("--temperature", type=float, default=1.0, help="temperature of p and q (default 1.0)")
    parser.add_argument("--gammas", action=ListAction, item_type=float, default=[0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2],
                        help="reserve scales to sweep (default 0,0.25,0.5,0.75,1,1.25,1.5,2)")
    parser.add_argument("--proxies", "--proxy", dest="proxies", action=ListAction, default=["all"], help="proxy names, or 'all' (default)")
    parser.add_argument("--top-level", type=float, default=0.9, help="draft mass of the top-mass set (default 0.9)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--no-progress", action="store_true",
                        help="accepted as on every bench subject (this one shows no progress)")
    parser.add_argument("--out", default="bench-out", metavar="PATH",
                        help="output folder (drift.md, .json and two PNGs inside it), or the Markdown path "
                             "(FOLDER/NAME.md: NAME.json, NAME_steps.png, NAME_gamma.png beside it); default "
                             "bench-out/, git-ignored; --out reports updates the shipped report")


def run(args) -> int:
    args.family = args.families
    if args.nodes < 1:
        raise ValueError(f"--nodes must be >= 1 (pairs), got {args.nodes}")
    args.out, args.stem = folder_and_stem(args.out, "drift")
    check_out(args.out, "--out", folder=True,                      # before any work
              files=[f"{args.stem}{s}" for s in (".md", ".json", "_steps.png", "_gamma.png")])
    import numpy as np

    from resispec.proxies import PROXIES
    from simulators.drift import drift_sweep
    from ..bench.drift import write_drift_report
    from simulators.families import get_family

    fam = get_family(args.family)
    if args.k < 1:
        raise ValueError(f"--k must be >= 1, got {args.k}")
    gammas = [float(g) for g in args.gammas]
    if any(not g >= 0 for g in gammas):
        raise ValueError(f"--gammas must be numbers >= 0, got {gammas}")
    proxies = sorted(PROXIES) if "all" in args.proxies else list(args.proxies)
    rng = np.random.default_rng(args.seed)
    p, q = fam.sample(rng, n=args.nodes, V=args.V if fam.fixed_vocab is None else None, temperature=args.temperature)
    sweep = drift_sweep(p, q, args.k, gammas=gammas, proxies=proxies, top_level=args.top_level, rng=rng)
    sweep.settings.update(family=args.family, temperature=args.temperature, seed=args.seed)
    cmd = typed_command(args, "resispec bench drift")
    paths = write_drift_report(sweep, args.out, command=cmd, stem=args.stem)
    best = max(sweep.results, key=lambda r: r.acceptance)
    rrs = next(r for r in sweep.results if r.label == "rrs")
    print(f"k = {args.k}: rrs acceptance {rrs.acceptance:.4f}, best {best.label} {best.acceptance:.4f}, "
          f"alpha* {sweep.alpha_star:.4f}")
    for key, path in paths.items():
        print(f"wrote {path}")
    return 0
