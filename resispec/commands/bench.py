"""Block efficiency (tokens per target call) of every verifier on token trees x
temperatures x pair families, with each verifier's ratio to the best baseline;
writes bench-out/bench.md and bench-out/bench.json (a git-ignored folder; --out reports rewrites the shipped
reports).

Shapes are branching factors per depth ("4,2,2,1"); prefix "wor:" for
without-replacement drafting ("wor:8,4").

Example:
  resispec bench                                  # full default run (~18 min on 2 shared cores)
  resispec bench --families zipf --temperatures 1.0 --trees 4,2,2,1 wor:8,4 --out /tmp/bench/small.md
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from ._args import ListAction, check_out, count, folder_and_stem, seed_int

NAME = "bench"
KIND = "trees"   # `resispec bench` = `resispec bench trees` (resispec.cli.verbs)
HELP = "block efficiency of every verifier on tree shapes x temperatures x families"
#: what `resispec --help` says of the verb (its subjects: block efficiency, acceptance, decoding, drift, ...)
VERB_HELP = "benchmarks and measurements: block efficiency, acceptance, real decoding, drift, pair families, cost"


def add_arguments(parser):
    from ..bench.defaults import TREES_FAMILIES as DEFAULT_FAMILIES
    from ..bench.defaults import TREES_SHAPES as DEFAULT_SHAPES
    from ..bench.defaults import TREES_TEMPERATURES as DEFAULT_TEMPERATURES

    parser.add_argument("--families", "--family", dest="families", action=ListAction, default=list(DEFAULT_FAMILIES), help="pair families")
    parser.add_argument("--temperatures", "--T", dest="temperatures", action=ListAction, item_type=float, default=list(DEFAULT_TEMPERATURES),
                        help="temperatures the pair families are drawn at, comma- or space-separated (default: "
                             f"{','.join(f'{t:g}' for t in DEFAULT_TEMPERATURES)})")
    parser.add_argument("--trees", "--shapes", dest="trees", action=ListAction, sep=None, default=list(DEFAULT_SHAPES),
                        help="tree shapes, e.g. 4,2,2,1 or wor:8,4 (without replacement)")
    parser.add_argument("--V", action=ListAction, one=True, item_type=int, unique=False, default=1000,
                        help="vocabulary size of synthetic families (one value; default 1000)")
    parser.add_argument("--nodes", action=ListAction, one=True, item_type=int, unique=False, default=32,
                        help="(p, q) pairs per family and temperature (one value; default 32)")
    parser.add_argument("--n", "--samples", "--n-samples", "--mc-samples", dest="samples", type=count, default=128, metavar="N",
                        help="Monte Carlo draws per cell: candidate tuples per pair (without replacement; the costly "
                             "resispec_wor row keeps its own 32) and sampled trees (the path-level rules) (at least "
                             "2; default 128)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--path-rules", action=ListAction, default=None,
                        help="path-level rules beside the node-level ones (default: every registered one: block, "
                        "token, traversal, traversal_resispec; 'none' leaves them out)")
    parser.add_argument("--out", default="bench-out", metavar="PATH",
                        help="output folder (bench.md and bench.json inside it), or the Markdown path (FOLDER/NAME.md: "
                             "NAME.json beside it); default bench-out/, git-ignored; --out reports updates the "
                             "shipped report")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--from-json", nargs="+", one=True, action="extend", type=Path, default=None, metavar="JSON",
                        help="re-render the markdown report from a previous bench JSON (no recomputation)")


def run(args) -> int:
    if args.from_json:
        from ._verb import given_options

        given = given_options(sys.modules[__name__], args, keep=("from_json", "out", "no_progress"))
        if given:
            raise ValueError(f"--from-json re-renders a finished run's report and takes only --out; drop "
                             f"{' '.join(given)}")
    args.out, args.stem = folder_and_stem(args.out, "bench")
    check_out(args.out, "--out", folder=True, files=(f"{args.stem}.md", f"{args.stem}.json"))   # before any work
    from pathlib import Path

    from simulators._io import write_json, write_text
    from ..trees import TreeShape
    from ..bench.trees import rows_from_json, rows_to_json, run_bench, to_markdown

    if args.from_json:
        import json

        try:
            text = Path(args.from_json).read_bytes()
        except OSError as exc:
            raise ValueError(f"--from-json {str(args.from_json)!r} cannot be read ({exc.strerror or exc}); pass the "
                             "bench.json a previous 'resispec bench' wrote") from None
        try:   # reading and rendering: a malformed field (a missing key, a null, a string for a number) is the file's
            data = json.loads(text.decode("utf-8"))
            rows = rows_from_json(data["rows"])
            settings = data["settings"]
            text_md = to_markdown(rows, settings, data.get("command", "resispec bench"), data.get("seconds"))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError, AttributeError, ValueError,
                RecursionError) as exc:
            raise ValueError(f"--from-json {str(args.from_json)!r} is not a bench JSON written by "
                             f"'resispec bench' ({type(exc).__name__}: {exc})") from None
        md = write_text(Path(args.out) / f"{args.stem}.md", text_md)
        print(f"wrote {md}")
        return 0

    for name, val, lo in (("--V", args.V, 2), ("--nodes", args.nodes, 1), ("--n", args.samples, 2)):
        if val < lo:
            raise ValueError(f"{name} must be >= {lo}, got {val}")
    from ..trees import MAX_TREE_NODES

    seen: dict = {}
    for s in args.trees:
        try:
            shape = TreeShape.parse(s)                      # fail before any work
        except ValueError as exc:
            raise ValueError(f"--trees {s}: {exc}") from None
        if shape.num_nodes > MAX_TREE_NODES:
            raise ValueError(f"--trees {s}: {shape.num_nodes:,} nodes, over MAX_TREE_NODES = "
                             f"{MAX_TREE_NODES:,} (resispec.trees); give a smaller shape")
        if shape.label in seen:                             # '2,1' and '2, 1': one shape, its rows counted twice
            raise ValueError(f"--trees {seen[shape.label]!r} and {s!r} are the same shape ({shape.label}); give "
                             "each shape once")
        seen[shape.label] = s
    from ..bench.trees import check_path_rules, normalise_path_rules

    rules = normalise_path_rules(args.path_rules)
    try:
        check_path_rules(rules, args.samples)
    except ValueError as exc:
        msg = str(exc)
        raise ValueError("--n" + msg[len("n_trees"):] if msg.startswith("n_trees ") else
                         f"--path-rules: {msg}") from None
    if args.path_rules is not None:                 # rules the caller named: each must decide some tree asked
        from ..bench.path_rules import serves_shape
        from ..pathlevel.registry import get_path_verifier

        shapes = [TreeShape.parse(s) for s in args.trees]
        idle = [r for r in rules if not any(serves_shape(get_path_verifier(r), sh) for sh in shapes)]
        if idle:
            raise ValueError(f"--path-rules {' '.join(idle)}: decide{'s' if len(idle) == 1 else ''} none of --trees "
                             f"{' '.join(args.trees)} (block and token decide iid chains such as 1,1,1; every path "
                             "rule needs iid drafts, not 'wor:'); add such a tree or drop the rule")
    t0 = time.perf_counter()
    rows = run_bench(families=args.families, temperatures=args.temperatures, shapes=args.trees, V=args.V,
                     n=args.nodes, n_samples=args.samples, seed=args.seed, progress=not args.no_progress,
                     path_rules=rules, n_trees=args.samples)
    seconds = time.perf_counter() - t0
    settings = {"families": list(args.families), "temperatures": list(args.temperatures), "shapes": list(args.trees),
                "V": args.V, "n": args.nodes, "n_samples": args.samples, "seed": args.seed,
                "path_rules": list(rules), "n_trees": args.samples}
    cmd = ("resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:])) if sys.argv[1:2] == ["bench"] else "resispec bench"
    out = Path(args.out)
    md = write_text(out / f"{args.stem}.md", to_markdown(rows, settings, cmd, seconds))
    js = write_json(out / f"{args.stem}.json", {"settings": settings, "seconds": seconds, "command": cmd,
                                                "rows": rows_to_json(rows)})
    lab = "resispec"
    best = max((r for r in rows if lab in r.ratio), key=lambda r: r.ratio[lab], default=None)
    if best is not None:
        print(f"largest {lab} / best-baseline ratio {best.ratio[lab]:.3f}: family {best.family}, T={best.temperature:g}, "
              f"shape {best.shape} ({best.efficiency[lab]:.3f} vs {best.best_baseline} "
              f"{best.efficiency[best.best_baseline]:.3f} tokens per call)")
    print(f"{len(rows)} configurations in {seconds:.1f} s")
    print(f"wrote {md}\nwrote {js}")
    return 0
