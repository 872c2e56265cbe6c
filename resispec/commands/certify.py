"""Certify verifiers zero-bias: every verifier x pair family x k, exact and Monte Carlo.

Per cell: the exact output law by enumeration where it fits (TV < 1e-9), a
Monte Carlo chi-square / G-test of sampled tokens against the target p with
the conditional checks (stop position, accepted count, residual, two-token
tree law, seeded determinism, batched == one-at-a-time), and the exact
acceptance against alpha* and against rrs.  Cell p-values are corrected with
Holm (verdict) and Benjamini-Hochberg (reported) over the whole run.  The
mutant catalogue (known-biased verifiers) shows the harness's power.

Writes a Markdown report (default certify-out/certify.md, a git-ignored folder; the shipped
reports/certify.md is rewritten only with --out reports/certify.md) with a p-value QQ plot
and the detectable-TV figure, and a JSON file next to it.

Each cell runs under a wall-clock limit (``--time-limit``, default 600 s): past
it no new verify call starts and the cell is NOT RUN (the caller's limit:
exit 2 when nothing else failed); a call still running max(10 s, timeout)
later, or a verifier that raises, is a FAILED cell with the reason shown.  ``--verifier module:object`` imports and runs that module
(current directory first on the import path); a module or factory that
fails to load -- any exception, even ``sys.exit()`` -- is an error (exit 2).
``--proxies module:object`` loads a rejection-dependent proxy ``(R, q, x, *, step)`` the same way and
certifies ``rejection_proxy[proxy=module:object]`` (``docs/verifiers.md``).

Exit status: 0 all verifiers pass; 1 a verifier fails (a cell failed its
checks, raised, or hung past --time-limit plus its grace); 3 a mutant escaped detection (the harness lost
power); 2 bad arguments (including a verifier that cannot be loaded), or cells
NOT RUN (their --n / --tv budget or --time-limit too small) and nothing else failed.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from exactness.limits import CELL_TIMEOUT, MIN_CELL_TIMEOUT  # light: the exactness package imports its modules lazily

NAME = "certify"
KIND = "verifiers"   # `resispec certify` = `resispec certify verifiers` (resispec.cli.verbs)
HELP = "certify verifiers zero-bias (exact enumeration + Monte Carlo, with mutant detection)"
#: what `resispec --help` says of the verb
VERB_HELP = "certify a verifier, a kernel, a decoder or declared steps zero-bias"
#: A verdict command: run in a supervised child when run as a program (a subject ending the process is a FAIL).
SUPERVISED = True
#: Fewer Monte Carlo p-values than this and the calibration line says they are too few to judge it.
CALIBRATION_FEW = 30


def add_arguments(parser) -> None:
    from ._args import ListAction, Switch, count, out_path, seconds, seed

    parser.add_argument("--verifier", action="append", default=None, metavar="NAME|MODULE:OBJECT",
                        help="verifier to certify: a registry name, name[option=value,...], or an import path "
                             "module:object naming a Verifier instance, class or factory. module:object IMPORTS "
                             "AND RUNS that module's code (and the class or factory); the current directory is "
                             "searched first, as pytest does. Any failure to load it is an error (exit 2). "
                             "Repeatable (not comma-separated: specs contain commas); default: every built-in "
                             "verifier")
    parser.add_argument("--proxies", "--proxy", dest="proxy", action=ListAction, metavar="NAME|MODULE:OBJECT",
                        help="also certify resispec with these built-in proxies (comma-separated and/or "
                             "repeatable; 'all' = every proxy); or module:object naming a rejection-dependent "
                             "proxy(R, q, x, *, step) (IMPORTS AND RUNS that module; a failure to load it is exit 2), "
                             "certified as rejection_proxy[proxy=module:object] (only these verifiers unless "
                             "--verifier or a built-in proxy name is given)")
    parser.add_argument("--k", action=ListAction, item_type=int, metavar="K",
                        help="candidates per node: --k 2,4 or --k 2 --k 4 (default 1,2,4,8)")
    parser.add_argument("--n", "--samples", dest="samples", type=count, default=None, metavar="N",
                        help="Monte Carlo draws per cell, e.g. 200000 or 2e5 (default: 200,000, capped for O(V) "
                             "samplers; at most 1e9, and refused when the estimated memory exceeds half of this "
                             "machine's)")
    parser.add_argument("--tv", type=float, default=None, metavar="X",
                        help="smallest TV bias to detect per cell, in (0, 1]: without --n it plans each "
                             "cell's draws (power 0.99 at --alpha; n grows like 1/X^2), states the estimated time "
                             "on stderr and refuses a plan over the time or memory limit (that cell is NOT RUN with "
                             "the reason); with --n it only warns when --n is too small. The report "
                             "gives each cell's equivalence statement 'TV <= x at confidence 1 - alpha'")
    parser.add_argument("--sequential", action="store_true",
                        help="anytime-valid sequential marginal test (e-process): each cell stops drawing as "
                             "soon as a bias is evident, else draws its whole budget (--n or the plan for "
                             "--tv); the level holds under this optional stopping")
    parser.add_argument("--seed", type=seed, default=0, metavar="S",
                        help="base seed: an integer >= 0 or a sequence such as 0,3 (= SeedSequence([0, 3])); "
                             "default 0")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise level over all cells (default 1e-3)")
    parser.add_argument("--families", "--family", dest="family", action=ListAction, metavar="NAME",
                        help="pair families, comma-separated and/or repeatable (default softmax_noise, zipf, "
                             "shifted at V=8, and ngram)")
    parser.add_argument("--time-limit", "--timeout", dest="time_limit", type=seconds, default=CELL_TIMEOUT, metavar="SECONDS",
                        help=f"wall-clock limit per cell (default {CELL_TIMEOUT:g}, at least {MIN_CELL_TIMEOUT:g}; "
                             "0 = none): past it no new verify call of the cell starts, and the cell is NOT RUN (your "
                             "limit, not the verifier's fault: exit 2 when nothing else failed); a call still running "
                             "max(10, SECONDS) later is a hang, a FAILED cell (exit 1), as is a verifier that raises, "
                             "returns the wrong shape or emits a token outside the vocabulary. Uses SIGALRM: on "
                             "platforms without it (Windows) the limit is off; a hang in one long C call is killed by "
                             "the supervisor, ending the run")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes for each cell's Monte Carlo draws (default 1; for slow verifiers: the "
                             "draws are split over N forked processes, each with its own SeedSequence child, so a "
                             "run is reproducible for a given --seed and --workers)")
    parser.add_argument("--executor", default="process", metavar="KIND",
                        help="who runs the work: process (default: cells here, each cell's draws over --workers "
                             "forked processes), local (everything in this process), ray (every cell a Ray task: "
                             "a local cluster of --workers CPUs), or ray[address=HOST:PORT] (join a running Ray "
                             "cluster: the address `ray start --head` prints, ray://HOST:PORT, or auto = the cluster "
                             'this node belongs to); ray needs pip install "resispec[ray]". The same --seed and '
                             "--workers give the same counts and verdicts with every executor")
    parser.add_argument("--out", type=out_path, default=Path("certify-out/certify.md"),
                        help="Markdown report path; JSON and PNGs are written next to it (default "
                             "certify-out/certify.md, git-ignored; --out reports/certify.md updates the shipped report)")
    parser.add_argument("--mutants", "--no-mutants", dest="mutants", action=Switch, type=int, bare=1,
                        default=None, metavar="N", spellings={"--no-mutants": 0},
                        help="seeded runs of each mutant of the catalogue (detection power = flagged / runs): "
                             "--mutants alone is 1, --mutants 0 skips the catalogue (default: 1 when no --verifier "
                             "is given, else 0)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress on stderr (default: a bar on a terminal, else a line every ~10 s)")


def _check_output(flag: str, path) -> None:
    """Fail now, not after the whole run: ``path`` must be a creatable, writable file path (nothing is created)."""
    from .._io import check_output_path

    if Path(path).is_dir():
        raise ValueError(f"{flag} {str(path)!r} is a directory; give a file path such as {Path(path) / 'certify.md'}")
    check_output_path(path, flag)


def _check_samples(n: int, ks, given: bool = True) -> None:
    """Refuse an absurd ``--n`` before running.

    Refused: more than ``exactness.limits.MAX_CELL_SAMPLES`` (1e9) draws per
    cell, or an estimated peak (``exactness.certify_run.sample_memory`` at the
    largest k) above half of this machine's physical memory (headroom for the
    checks' working copies).  The message states the estimate.
    """
    from exactness.budget import count_text
    from exactness.certify_run import sample_memory
    from exactness.limits import MAX_CELL_SAMPLES

    kmax = max(ks)
    if n > 10**15:              # no float overflow below, and no 400-digit number in the message
        raise ValueError(f"--n {count_text(n)} exceeds the limit of {MAX_CELL_SAMPLES:,} draws per cell; pass "
                         "a smaller --n (the default 200,000 detects TV ~ 0.01)")
    mem = sample_memory(n, kmax)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        ram = None
    why = (f"exceeds the limit of {MAX_CELL_SAMPLES:,} draws per cell" if n > MAX_CELL_SAMPLES
           else f"needs more than half of this machine's {ram / 2**30:.1f} GiB of memory" if ram and mem > ram / 2
           else None)
    if why:
        raise ValueError(f"{'--n' if given else 'the default --n'} {n:,} {why}: one cell at k = {kmax} would hold "
                         f"~{mem / 2**30:,.1f} GiB "
                         f"(16 bytes per draw for tokens and accepted indices, plus 8 x (2k+1) bytes per draw of "
                         f"uniforms per chunk); pass a smaller --n (the default 200,000 detects TV ~ 0.01) or --k")


def _check_executor(spec: str) -> tuple:
    """``--executor KIND`` or ``ray[address=...]`` -> ``(kind, address or None)``: a registered kind, an address only
    with ray and well formed, ray installed (nothing runs)."""
    import importlib.util

    from exactness.executors import EXECUTORS, RAY_INSTALL, check_address
    from resispec.verifiers.registry import parse_spec

    executor, options = parse_spec(spec, "--executor")
    if executor not in EXECUTORS:
        raise ValueError(f"--executor {executor!r}: choose one of {', '.join(sorted(EXECUTORS))}")
    unknown = sorted(set(options) - {"address"})
    if unknown or (options and executor != "ray"):
        raise ValueError(f"--executor {spec!r}: only ray takes an option, address (ray[address=HOST:PORT] joins a "
                         f"running Ray cluster); {executor} takes none" if executor != "ray" else
                         f"--executor {spec!r}: ray takes address only (ray[address=HOST:PORT]), not "
                         f"{', '.join(unknown)}")
    address = options.get("address")
    if "address" in options and not isinstance(address, str):   # ray[address=None] or [address=6379]: not an address
        raise ValueError(f"--executor {spec!r}: address must be HOST:PORT, ray://HOST:PORT or auto, got {address!r}")
    try:
        check_address(address)
    except ValueError as exc:
        raise ValueError(f"--executor {spec!r}: {exc}") from None
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError(f"--executor ray needs the ray package, which is not installed: {RAY_INSTALL} "
                         "(or use --executor process)")
    return executor, address


def run(args) -> int:
    """``resispec certify``: check the options, run the grid and the mutant panel, write the reports, print the
    verdict (exit 0 no bias detected, 1 a FAIL, 3 a mutant escaped; bad options raise ValueError, and a budget
    refused in every failing cell -- too few draws for a test, over the time or memory limit -- returns 2: the
    caller's request)."""
    ks, do_mutants, families, tv = _check_args(args)
    progress = not args.no_progress
    if tv is not None and args.samples is None:
        import logging

        logging.getLogger("exactness.plan").setLevel(logging.INFO)  # the planned n and time of each cell
        if not logging.getLogger("exactness.plan").handlers:
            h = logging.StreamHandler(sys.stderr)
            h.setFormatter(logging.Formatter("resispec certify: %(message)s"))
            logging.getLogger("exactness.plan").addHandler(h)
    from exactness._timeout import limit_available

    if args.time_limit and not limit_available():
        print(f"resispec certify: note: --time-limit {args.time_limit:g} is off here (no SIGALRM on this platform, or "
              "not the main thread); a hanging verifier will not be stopped", file=sys.stderr)
    from exactness.certify_run import run_certify, run_mutants

    t0 = time.perf_counter()
    specs = _verifier_specs(args)
    grid = run_certify(specs or None, ks=ks, n=args.samples, alpha=args.alpha, seed=args.seed,
                       families=families, progress=progress, timeout=args.time_limit, workers=args.workers,
                       executor=args.executor, address=args.address, tv=tv,
                       sequential=bool(getattr(args, "sequential", False)))
    mutants, t_mut = None, None
    if do_mutants:
        t1 = time.perf_counter()
        mutants = run_mutants(seeds=args.mutants, n=args.samples, alpha=args.alpha, seed=args.seed,
                              progress=progress)
        t_mut = time.perf_counter() - t1
    meta = {"command": ("resispec certify " + " ".join(shlex.quote(a) for a in sys.argv[2:])).strip()
            if len(sys.argv) > 1 and sys.argv[1] == NAME else "resispec certify", "seed": args.seed, "samples": args.samples,
            "k": list(ks), "tv": tv, "sequential": bool(getattr(args, "sequential", False)),
            "timeout": args.time_limit or None, "workers": args.workers,
            "executor": args.executor, "address": args.address,
            "mutant_seconds": t_mut,
            "total_seconds": time.perf_counter() - t0}
    return _print_outcome(grid, mutants, meta, args, t0)


#: most seeded runs per mutant (--mutants): each runs the whole mutant catalogue once (about 10 s at the default n)
MAX_MUTANT_RUNS = 1000


def _check_args(args):
    """``(ks, do_mutants, families, tv)`` from the parsed options; ValueError naming the flag (exit 2)."""
    from ._args import time_limit as check_time_limit

    _check_output("--out", args.out)
    from exactness.report import report_paths

    for name, path in report_paths(args.out).items():
        if name in ("json", "qq", "detectable_tv"):
            _check_output(f"--out (its {path.name})", path)
    from ._args import alpha as check_alpha

    check_alpha(args.alpha)                            # a level in [MIN_ALPHA, 1)
    tv = getattr(args, "tv", None)
    if tv is not None and not 0 < tv <= 1:  # also NaN
        raise ValueError(f"--tv must lie in (0, 1] (the smallest TV bias to detect, e.g. 0.001), got {tv}")
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--n must be >= 1, got {args.samples}")
    if args.mutants is not None and not 0 <= args.mutants <= MAX_MUTANT_RUNS:
        raise ValueError(f"--mutants must be a whole number in [0, {MAX_MUTANT_RUNS}] (seeded runs per mutant; 0 "
                         f"skips them), got {args.mutants}")
    if isinstance(args.seed, int) and args.seed < 0:  # the parser refuses these; a caller's namespace may not
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1 (processes for the Monte Carlo draws), got {args.workers}")
    args.executor, args.address = _check_executor(args.executor)
    check_time_limit(args.time_limit)                    # 0 (no limit) or [MIN_CELL_TIMEOUT, 5e6] seconds

    from exactness.certify_run import FAMILIES, K_VALUES, MUTANT_KS

    from resispec._validation import MAX_K

    ks = tuple(args.k) if args.k else K_VALUES
    if any(k < 1 or k > MAX_K for k in ks):
        raise ValueError(f"--k must lie in [1, {MAX_K}] (candidates per node), got {list(ks)}")
    if args.mutants is None:
        args.mutants = 0 if args.verifier else 1
    do_mutants = args.mutants > 0
    if args.samples is not None or tv is None:        # the default budget too: --k 9999 at 200,000 draws is ~30 GiB
        from exactness.verifier_cert import DEFAULT_N

        _check_samples(DEFAULT_N if args.samples is None else args.samples, ks + (MUTANT_KS if do_mutants else ()),
                       given=args.samples is not None)
    families = FAMILIES
    if args.family:
        from simulators.families import get_family

        known = {f[0]: f for f in FAMILIES}
        for name in args.family:
            get_family(name)  # unknown name: ValueError listing the families (never an empty, passing run)
        families = tuple(known.get(name, (name, 8, {})) for name in args.family)
    return ks, do_mutants, families, tv


def _verifier_specs(args) -> list:
    """The verifier specs to certify: ``--verifier``, plus ``resispec[proxy=NAME]`` / ``rejection_proxy[proxy=...]``
    for ``--proxies`` (every module:object proxy loaded now, so a bad one exits 2 before any cell runs)."""
    specs = list(args.verifier or [])
    if args.proxy:
        from resispec import PROXIES

        from exactness._timeout import loading
        from exactness.certify_run import load_proxy

        paths = [name for name in args.proxy if ":" in name]   # rejection-dependent proxies (module:object)
        for path in paths:
            with loading(args.time_limit, f"loading --proxies {path}"):   # an import that hangs: the run's FAIL
                load_proxy(path, "--proxies")   # fail now (exit 2), before any cell runs
        names = sorted(PROXIES) if "all" in args.proxy else [name for name in args.proxy if ":" not in name]
        for name in names:
            if name not in PROXIES:
                raise ValueError(f"--proxies {name!r}: choose one of {sorted(PROXIES)}, 'all', or module:object "
                                 "for a rejection-dependent proxy(R, q, x, *, step)")
        if not specs and names:
            import resispec

            specs = resispec.available_verifiers()
        specs += [f"resispec[proxy={name}]" for name in names if name != "draft"]
        specs += [f"rejection_proxy[proxy={path}]" for path in paths]
    return specs


def _print_outcome(grid, mutants, meta, args, t0) -> int:
    """Print the table, notes, calibration and mutant panel, write the reports; the exit status."""
    from exactness.report import terminal_table, write_reports

    print(terminal_table(grid))
    for c in grid.cells:
        if c.certificate is not None and "error" in c.certificate.details:
            print(f"{'NOT RUN' if c.certificate.details.get('refused') else 'FAILED'} cell {c.verifier} {c.family} "
                  f"k={c.k}: {c.certificate.details['error']}")
    for note in grid.notes:
        print(f"note: {note}")
    cal = grid.calibration
    if cal is not None:
        few = (f"; only {cal.n} p-values: too few to judge the calibration (the interval is wide), it is shown "
               "for the reader and never changes the verdict" if cal.n < CALIBRATION_FEW else "")
        print(f"calibration: {cal.n} MC p-values, KS p = {cal.ks_pvalue:.3g}, false-positive rate at {cal.level:g} "
              f"= {cal.fpr:.3f} (95% CI [{cal.ci_low:.3f}, {cal.ci_high:.3f}]){few}")
    escaped = []
    if mutants:
        print()
        print(mutant_table(mutants))
        escaped = [m.name for m in mutants if m.flagged < m.runs]
    from exactness.grid import REFUSED

    refused = grid.refused_cells()
    if refused and len(refused) == len(grid.failed_cells()) and not grid.untested_verifiers():
        first = refused[0].certificate.details["error"].removeprefix(REFUSED)
        print(f"resispec certify: error: the budget was refused for {len(refused)} cell(s) (NOT RUN: the --n / --tv "
              f"asked does not fit the limits, or --time-limit is too short), nothing else failed: {first} (give a "
              "smaller --n, a larger --tv, more --workers, or a longer --time-limit)", file=sys.stderr)
        return 2                                      # the caller's request: no verdict, no report
    paths = write_reports(grid, args.out, mutants, meta)
    print(f"\nreport: {paths['markdown']}  json: {paths['json']}  ({time.perf_counter() - t0:.1f} s)")
    if not grid.passed:
        untested = grid.untested_verifiers()
        if untested:
            print(f"NOT TESTED (every cell skipped; see the table): {', '.join(untested)}")
        for line in failing_cells(grid):
            print(line)
        print(fail_line(grid, args.alpha))
        return 1
    if escaped:
        print(f"HARNESS WARNING: mutants not flagged in every run: {', '.join(escaped)}")
        return 3
    dets = [c.certificate.detectable_tv for c in grid.cells if c.certificate is not None]
    unsupported = [c for c in grid.cells if c.certificate is None and c.skipped.startswith("not supported")]
    print(f"NO BIAS DETECTED in any verifier (each cell's detectable TV {min(dets):.3g} to {max(dets):.3g} at power "
          f"0.99: column 'detect. TV'; {'lower --tv' if getattr(args, 'tv', None) else 'raise --n'} to see smaller "
          "biases)"
          + (f"; {len(unsupported)} cell(s) not supported by the verifier (its supported_k), listed as skipped, "
             "not certified" if unsupported else ""))
    return 0


def failing_cells(grid, most: int = 10) -> list[str]:
    """A line per cell that found a bias (not one whose verifier misbehaved: those were printed as FAILED cells):
    its strongest failing checks with their numbers (``Certificate.describe``), at most ``most`` cells."""
    out = []
    for c in grid.failed_cells():
        cert = c.certificate
        if "error" in cert.details:               # printed as a FAILED / NOT RUN cell above
            continue
        bad = cert.failing_order()
        what = [cert.describe(k) for k in bad[:3]] + ([f"and {len(bad) - 3} more"] if len(bad) > 3 else [])
        if not c.acceptance_ok:
            what.append(f"acceptance {c.acceptance:.6g} above alpha* {c.alpha_star:.6g}")
        out.append(f"  {c.verifier} / {c.family} / k = {c.k}: " + "; ".join(what or ["see the report"]))
    if len(out) > most:
        out = out[:most] + [f"  ... and {len(out) - most} more failing cells: see the report"]
    return out


def fail_line(grid, alpha: float) -> str:
    """The last line of a failing run: the verifiers whose cells found a bias (family-wise, Holm), then each
    verifier whose cells failed because it misbehaved, with the first cause (``GridResult.subject_causes``):
    ``FAIL: mine:Raises: Raises.verify raised RuntimeError: boom (in verify, mine.py:3) (subject misbehaved)``."""
    causes = grid.subject_causes()
    biased = [v for v in grid.failed_verifiers() if v not in causes]
    parts = [f"{', '.join(biased)} (family-wise alpha {alpha:g}, Holm)"] if biased else []
    for v, (cause, m) in causes.items():
        more = f"; {m} cells" if m > 1 else ""
        parts.append(f"{v}: {cause} (subject misbehaved{more})")
    not_run = grid.not_run_verifiers()
    return "FAIL: " + "; ".join(parts) + (f"; NOT RUN (raise --time-limit / --n; nothing decided): {', '.join(not_run)}"
                                          if not_run else "")


def mutant_table(mutants) -> str:
    """The mutant panel as an aligned text table (columns sized to their widest entry)."""
    head = ("mutant", "flagged", "MC-only", "bug")
    rows = [(m.name, f"{m.flagged}/{m.runs}", f"{m.flagged_mc}/{m.runs}", m.bug) for m in mutants]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda r: "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head)] + [fmt(r) for r in rows])
