"""List the draft/target pair families with their measured TV and KL(p || q),
so you can dial the divergence; writes bench-out/families.md (git-ignored; --out reports/families.md updates
the shipped table).

Example:
  resispec bench families --V 1000 --nodes 64
  resispec bench families --dial softmax_noise noise 0.25,0.5,1,2
"""

from __future__ import annotations

from ._args import ListAction, check_out, seed_int, typed_command

NAME = "bench-families"
ALIASES = ("families",)    # `resispec families` = `resispec bench families` (committed reports quote it)
HELP = "pair families with measured TV / KL (and a divergence dial)"


def add_arguments(parser):
    parser.add_argument("--families", "--family", dest="families", action=ListAction, default=None,
                        help="families (default: all registered)")
    parser.add_argument("--temperatures", "--T", dest="temperatures", action=ListAction, item_type=float,
                        default=[0.7, 1.0, 1.5], help="temperatures the pair families are drawn at")
    parser.add_argument("--V", action=ListAction, one=True, item_type=int, unique=False, default=1000, help="vocabulary size (one value)")
    parser.add_argument("--nodes", action=ListAction, one=True, item_type=int, unique=False, default=64,
                        help="pairs per family and temperature (one value; default 64)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--no-progress", action="store_true",
                        help="accepted as on every bench subject (this one shows no progress)")
    parser.add_argument("--dial", nargs=3, metavar=("FAMILY", "PARAM", "VALUES"), action="append", default=[],
                        help="also tabulate TV / KL as PARAM of FAMILY takes comma-separated VALUES")
    parser.add_argument("--out", default="bench-out/families.md", metavar="PATH",
                        help="markdown output (default bench-out/families.md, git-ignored; --out reports/families.md "
                             "updates the shipped report)")


def run(args) -> int:
    check_out(args.out, "--out")                      # before any work
    import numpy as np

    from simulators import FAMILIES, divergence_table, family_divergence, get_family
    from simulators._io import write_text

    if args.V < 2 or args.nodes < 1:
        raise ValueError("--V must be >= 2 and --nodes >= 1")
    if not args.families:
        get_family("ngram")                   # load the lazily registered real-data family
    names = args.families or sorted(FAMILIES)
    for nm in names:
        get_family(nm)
    dials = [_dial(get_family, *d) for d in args.dial]   # every --dial checked before the table's work
    rows, md = divergence_table(names, args.temperatures, V=args.V, n=args.nodes, seed=args.seed)
    out = ["# Pair families: measured divergence", "",
           f"Command: `{_command(args)}`", "",
           f"Mean over {args.nodes} sampled pairs; TV = 1/2 sum |p - q| (single-draft acceptance is 1 - TV); "
           "KL(p‖q) in nats is inf after truncation (p keeps tokens q dropped).", "", md, ""]
    for fam, param, vals in dials:
        out += [f"## Dial: `{fam}` `{param}` (T = 1)", "", f"| {param} | TV | KL(p‖q) |", "|---|---|---|"]
        for v in vals:
            val = int(v) if param == "top_k" else v
            r = family_divergence(fam, np.random.default_rng(args.seed), n=args.nodes, V=args.V, **{param: val})
            out.append(f"| {v:g} | {r.tv:.3f} | {r.kl:.3f} |")
        out.append("")
    path = write_text(args.out, "\n".join(out))
    print(md)
    print(f"wrote {path}")
    return 0


def _command(args) -> str:
    """The command line that reproduces this table (as typed when run as ``resispec``; else rebuilt from ``args``)."""
    parts = ["resispec bench families", f"--V {args.V}", f"--nodes {args.nodes}",
             "--temperatures " + ",".join(f"{t:g}" for t in args.temperatures)]
    parts += ["--families " + ",".join(args.families)] if args.families else []
    parts += [f"--dial {' '.join(d)}" for d in args.dial]
    return typed_command(args, " ".join(parts))


def _dial(get_family, fam: str, param: str, values: str) -> tuple[str, str, list[float]]:
    """One ``--dial FAMILY PARAM VALUES`` checked: ``(family, param, values)``; ValueError naming ``--dial``."""
    import math

    f = get_family(fam)
    if param not in f.params:
        raise ValueError(f"--dial: family {fam!r} has no parameter {param!r}; known: {sorted(f.params)}")
    try:
        vals = [float(v) for v in values.split(",")]
    except ValueError:
        raise ValueError(f"--dial values must be comma-separated numbers, got {values!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"--dial values must be finite numbers, got {values!r}")
    if param == "top_k" and not all(v >= 1 and v == int(v) for v in vals):
        raise ValueError(f"--dial {fam} top_k values must be whole numbers >= 1, got {values!r}")
    return fam, param, vals
