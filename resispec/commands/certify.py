"""Certify verifiers zero-bias: every verifier x pair family x k, exact and Monte Carlo.

Per cell: the exact output law by enumeration where it fits (TV < 1e-9), a
Monte Carlo chi-square / G-test of sampled tokens against the target p with
the conditional checks (stop position, accepted count, residual, two-token
tree law, seeded determinism, batched == one-at-a-time), and the exact
acceptance against alpha* and against rrs.  Cell p-values are corrected with
Holm (verdict) and Benjamini-Hochberg (reported) over the whole run.  The
mutant catalogue (known-biased verifiers) shows the harness's power.

Writes a Markdown report (default reports/certify.md) with a p-value QQ plot
and the detectable-TV figure, and a JSON file next to it.

Exit status: 0 all verifiers pass; 1 a verifier fails; 3 a mutant escaped
detection (the harness lost power); 2 bad arguments.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

NAME = "certify"
HELP = "certify verifiers zero-bias (exact enumeration + Monte Carlo, with mutant detection)"


def add_arguments(parser) -> None:
    parser.add_argument("--verifier", action="append", metavar="NAME|MODULE:OBJECT",
                        help="verifier to certify: a registry name or an import path module:object "
                             "(repeatable; default: every built-in verifier)")
    parser.add_argument("--proxy", action="append", metavar="NAME",
                        help="also certify resispec with this built-in proxy (repeatable; 'all' = every proxy)")
    parser.add_argument("--k", action="append", type=int, metavar="K",
                        help="candidates per node (repeatable; default 1 2 4 8)")
    parser.add_argument("--samples", type=int, default=None,
                        help="Monte Carlo draws per cell (default: 200,000, capped for O(V) samplers)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise level over all cells (default 1e-3)")
    parser.add_argument("--family", action="append", metavar="NAME",
                        help="pair family (repeatable; default softmax_noise zipf shifted at V=8, and ngram)")
    parser.add_argument("--out", type=Path, default=Path("reports/certify.md"),
                        help="Markdown report path; JSON and PNGs are written next to it (default reports/certify.md)")
    parser.add_argument("--json", type=Path, default=None, help="JSON path (default: --out with .json)")
    m = parser.add_mutually_exclusive_group()
    m.add_argument("--mutants", dest="mutants", action="store_true", default=None,
                   help="run the mutant catalogue (default: on when no --verifier is given)")
    m.add_argument("--no-mutants", dest="mutants", action="store_false", help="skip the mutant catalogue")
    parser.add_argument("--mutant-seeds", type=int, default=1,
                        help="seeded runs per mutant (detection power = flagged / runs; default 1)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from exactness.certify_run import FAMILIES, K_VALUES, run_certify, run_mutants
    from exactness.report import terminal_table, write_reports

    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must lie in (0, 1), got {args.alpha}")
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    if args.mutant_seeds < 1:
        raise ValueError(f"--mutant-seeds must be >= 1, got {args.mutant_seeds}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    for flag, path in (("--out", args.out), ("--json", args.json)):
        if path is not None and Path(path).is_dir():
            raise ValueError(f"{flag} {str(path)!r} is a directory; give a file path such as {Path(path) / 'certify.md'}")
        if path is not None:  # fail now, not after the whole run (nothing is written on failure)
            parent = Path(path).parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ValueError(f"{flag} {str(path)!r}: cannot create its folder ({exc})") from exc
            if not os.access(parent, os.W_OK):
                raise ValueError(f"{flag} {str(path)!r}: folder {str(parent)!r} is not writable")
    ks = tuple(args.k) if args.k else K_VALUES
    if any(k < 1 for k in ks):
        raise ValueError(f"--k must be >= 1, got {list(ks)}")
    families = FAMILIES
    if args.family:
        from simulators.families import get_family

        known = {f[0]: f for f in FAMILIES}
        for name in args.family:
            get_family(name)  # unknown name: ValueError listing the families (never an empty, passing run)
        families = tuple(known.get(name, (name, 8, {})) for name in args.family)
    progress = not args.no_progress and sys.stderr.isatty()
    t0 = time.perf_counter()
    specs = list(args.verifier or [])
    if args.proxy:
        from resispec import PROXIES

        names = sorted(PROXIES) if "all" in args.proxy else args.proxy
        for name in names:
            if name not in PROXIES:
                raise ValueError(f"--proxy {name!r}: choose one of {sorted(PROXIES)} or 'all'")
        if not specs:
            import resispec

            specs = resispec.available_verifiers()
        specs += [f"resispec[proxy={name}]" for name in names if name != "draft"]
    grid = run_certify(specs or None, ks=ks, n=args.samples, alpha=args.alpha, seed=args.seed,
                       families=families, progress=progress)
    do_mutants = args.mutants if args.mutants is not None else not args.verifier
    mutants, t_mut = None, None
    if do_mutants:
        t1 = time.perf_counter()
        mutants = run_mutants(seeds=args.mutant_seeds, n=args.samples, alpha=args.alpha, seed=args.seed,
                              progress=progress)
        t_mut = time.perf_counter() - t1
    meta = {"command": "resispec certify " + " ".join(shlex.quote(a) for a in sys.argv[2:]) if len(sys.argv) > 1
            and sys.argv[1] == NAME else "resispec certify", "seed": args.seed, "samples": args.samples,
            "k": list(ks), "mutant_seconds": t_mut, "total_seconds": time.perf_counter() - t0}
    print(terminal_table(grid))
    for note in grid.notes:
        print(f"note: {note}")
    cal = grid.calibration
    if cal is not None:
        print(f"calibration: {cal.n} MC p-values, KS p = {cal.ks_pvalue:.3g}, false-positive rate at {cal.level:g} "
              f"= {cal.fpr:.3f} (95% CI [{cal.ci_low:.3f}, {cal.ci_high:.3f}])")
    escaped = []
    if mutants:
        print("\nmutant             flagged  MC-only  bug")
        for m in mutants:
            print(f"{m.name:<28} {m.flagged}/{m.runs:<5} {m.flagged_mc}/{m.runs:<5} {m.bug}")
            if m.flagged < m.runs:
                escaped.append(m.name)
    paths = write_reports(grid, args.out, mutants, meta, args.json)
    print(f"\nreport: {paths['markdown']}  json: {paths['json']}  ({time.perf_counter() - t0:.1f} s)")
    if not grid.passed:
        print(f"FAIL: {', '.join(grid.failed_verifiers())} (family-wise alpha {args.alpha:g}, Holm)")
        return 1
    if escaped:
        print(f"HARNESS WARNING: mutants not flagged in every run: {', '.join(escaped)}")
        return 3
    print("PASS: every verifier certified")
    return 0
