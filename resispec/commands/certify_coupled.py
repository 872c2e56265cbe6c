"""Coupled certification: does a kernel implement a rule X draw by draw under the same coins?

Runs the kernel and the reference rule on the same candidates and the same
uniforms (in the kernel's coin convention) and counts the draws where the
token or the accepted index differ.  Zero mismatches bounds TV(kernel, X)
by an exact binomial bound; a mismatch is a failure with the first
mismatching draw and a shrunk counterexample (Python that reproduces it).
See docs/coupled.md.

Examples:
  resispec certify coupled --verifier mypkg.kernels:MyRRS --reference rrs --k 2 --V 32000 --n 1e5
  resispec certify coupled --verifier exactness.mutants:CATALOGUE.bf16_ratio --reference rrs --stop-after 1
  resispec certify coupled --verifier mine:SGLangStyle --convention sglang --pq node.npz --fallback

A pass bounds the kernel's distance from p only when the reference is
trusted: a registry rule (exact by proof), or a user's reference whose law is
checked in this run (enumerated when its candidate tuples fit, else
certified by Monte Carlo).  With --reference-check none it is not checked:
zero mismatches then bound TV(kernel, reference) only, and are INCONCLUSIVE;
a user's reference found biased fails.

Exit status: 0 no bias detected (or, with --fallback, "not the same
coupling" and certify_verifier of the kernel detected no bias); 1 FAIL:
mismatches from a biased kernel or another rule, a biased user reference,
or a kernel that raises, calls sys.exit, hangs past the time limit, writes
into its read-only inputs (--copies gives it writable copies) or returns
the wrong shape, dtype or accepted index (the cause is printed); 2 bad
arguments or a kernel that cannot be loaded; 3 INCONCLUSIVE: "not the same
coupling" (mismatches, but no law differs: rerun with --fallback), or a
reference that was not checked (--reference-check none).
"""

from __future__ import annotations

NAME = "certify-coupled"
HELP = "coupled certification of a kernel against a reference rule (same coins; TV bound; counterexample)"
#: A verdict command: run in a supervised child when run as a program (a subject ending the process is a FAIL).
SUPERVISED = True


def add_arguments(parser) -> None:
    from ._args import ListAction, count, out_path, seconds, seed

    parser.add_argument("--verifier", action="append", one=True, required=True, metavar="NAME|MODULE:OBJECT",
                        help="the kernel under test (a verifier: a fused, ported or engine implementation of the "
                        "--reference rule): module:object (IMPORTS AND RUNS that module) or a registry name")
    parser.add_argument("--reference", default="rrs", metavar="NAME",
                        help="the rule the kernel implements: registry name, name[option=value], or module:object (your "
                        "own reference, IMPORTS AND RUNS that module; its law is checked, see --reference-check) "
                        "(default rrs)")
    parser.add_argument("--convention", default=None, choices=["resispec", "sglang", "generator"],
                        help="how the kernel takes its coins (default: from its verify signature -- resispec for "
                        "uniforms=(B, k + 1), sglang for uniform_samples=, else generator: a seeded rng)")
    parser.add_argument("--k", action=ListAction, one=True, item_type=int, metavar="K", default=2,
                        help="candidates per node (one value; default 2)")
    parser.add_argument("--n", "--samples", dest="samples", type=count, default=None, metavar="N",
                        help="coupled draws, e.g. 1e5 (default 100,000; not with --tv)")
    parser.add_argument("--tv", type=float, default=None, metavar="X",
                        help="the TV bound a pass must establish, in (0, 1): plans the draws, "
                             "n = ceil(ln(1 / alpha) / tv) (zero mismatches in n draws bound TV(kernel, reference) "
                             "by tv at confidence 1 - alpha)")
    parser.add_argument("--alpha", type=float, default=1e-3, help="1 - confidence of the TV bound (default 1e-3)")
    parser.add_argument("--seed", type=seed, default=0, metavar="S",
                        help="seed: an integer >= 0 or a sequence such as 0,3 (= SeedSequence([0, 3])); default 0")
    parser.add_argument("--V", type=int, default=None,
                        help="vocabulary of the random node (default 50; not with --pq)")
    parser.add_argument("--concentration", type=float, default=1.0,
                        help="Dirichlet concentration of the random p, q (default 1.0)")
    parser.add_argument("--pq", default=None, metavar="FILE.npz",
                        help="use the node(s) in this .npz (arrays p and q, shape (V,) or (R, V)) instead")
    parser.add_argument("--stop-after", type=count, default=None, help="stop once this many mismatches were seen (checked after each batch of draws, so a "
                        "batch may add a few more)")
    parser.add_argument("--fallback", action="store_true",
                        help="on a mismatch also run certify_verifier on the kernel: it decides a 'not the same "
                        "coupling' verdict (its pass: exit 0; its failure: exit 1)")
    parser.add_argument("--copies", action="store_true",
                        help="give the kernel writable (B, V) copies of p, q (default: read-only broadcast views)")
    parser.add_argument("--time-limit", "--timeout", dest="time_limit", type=seconds, default=3600.0, metavar="SECONDS",
                        help="stop the coupled pass after this many seconds (default 3600, at least 1; 0 = no limit); a kernel call that "
                        "never returns is stopped max(10, SECONDS) later and FAILs as a hang")
    parser.add_argument("--reference-check", default="auto", choices=["auto", "montecarlo", "none"],
                        help="how a reference that is not a registry rule is checked: auto (enumerate its law when "
                        "it fits, else certify it by Monte Carlo), montecarlo (the same), none (not checked: a pass "
                        "is INCONCLUSIVE, exit 3) (default auto). A registry rule (a name, or an instance of a "
                        "registry class such as resispec.get_verifier('rrs')) is exact by proof and never checked: "
                        "its pass is a pass whatever this option says")
    parser.add_argument("--no-progress", action="store_true",
                        help="accepted as on every certify subject (this one shows no progress)")
    parser.add_argument("--out", type=out_path, default=None,
                        help="write the counterexample's Python (on a FAIL) to this path (default: print it)")


def run(args) -> int:
    import exactness

    from ._args import load_node

    if args.k < 1:
        raise ValueError(f"--k must be >= 1, got {args.k}")
    from ._args import alpha as check_alpha

    check_alpha(args.alpha)                            # a level in [MIN_ALPHA, 1)
    from ._args import time_limit as check_time_limit

    time_limit = check_time_limit(getattr(args, "time_limit", 3600.0))   # 0 (no limit) or [1, 5e6] seconds
    from exactness._checks import as_seed_sequence

    as_seed_sequence(args.seed, name="--seed")      # a caller's namespace may hold what the parser refuses
    if args.out:
        from .._io import check_output_path

        check_output_path(args.out, "--out")
    p, q = load_node(args, default_V=50)
    from exactness._timeout import hard_limit
    from exactness.coupled.certify import _load

    from ._supervisor import run_started

    kernel = _load(args.verifier, "verifier")              # its module imported before the clock (a slow import is
    run_started(None if time_limit is None else hard_limit(time_limit))   # not a hang); the supervisor's clock starts
    if args.samples is not None and args.tv is not None:
        raise ValueError("give --n or --tv, not both (--tv plans the coupled draws; --n fixes them)")
    cert = exactness.certify_coupled(kernel, args.reference, p, q, args.k, n=args.samples, tv=args.tv, alpha=args.alpha,
                                     seed=args.seed, convention=args.convention, fallback=args.fallback,
                                     stop_after=args.stop_after, kernel_spec=args.verifier, copies=args.copies,
                                     time_limit=time_limit, reference_check=getattr(args, "reference_check", "auto"))
    print(cert.verdict)
    print(f"({cert.n:,} coupled draws in {cert.seconds:.2f} s, reference path: {cert.path})")
    if cert.counterexample:
        if args.out:
            from .._io import atomic_write

            atomic_write(args.out, cert.counterexample + "\n")
            print(f"counterexample written to {args.out}")
        else:
            print("\n# counterexample (python):\n" + cert.counterexample)
    return 0 if cert.passed else 3 if cert.inconclusive else 1
