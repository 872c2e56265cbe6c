"""Stepwise certification: bound TV(verify, p) at one node by checking every step a run takes, O(V) a state.

For a sequential verifier that declares its steps (``step_plan``), such as
ResiSpec for without-replacement drafts, where a histogram test at a real
vocabulary is out of reach: every state a draw visits is checked to emit its
target, and ``verify`` is coupled to the declared chain on the same coins.
0 events in ~ln(1/alpha)/tv draws bound TV <= tv.  See docs/certify.md
("the stepwise certificate").

Examples:
  resispec certify stepwise --tv 1e-2 --V 1000
  resispec certify stepwise --pq node.npz --k 4 --tv 1e-3 --workers 2
  resispec certify stepwise --verifier mypkg.rules:MyDeclaredRule --k 3 --n 5000

Exit status: 0 PASS; 1 FAIL (a defect, or a mismatch where verify's law
differs from its declared steps': the first one and how to replay it are
printed; or a verify / step_plan that raises, calls sys.exit, hangs past
the hard time limit, returns the wrong shape or accepted index, or kills
its worker process with --workers: the cause is printed);
3 INCONCLUSIVE (undeclared states or a --time-limit stop left the bound
above --tv; or "not the same coupling": verify mismatches its declared chain
draw by draw but emits its law, as an exact verify using the coins in
another convention does); 2 bad arguments, or a verifier that cannot be
loaded or declares no steps.
"""

from __future__ import annotations

NAME = "certify-stepwise"
HELP = "stepwise certification of a verifier that declares its steps (TV bound at real vocabularies)"
#: A verdict command: run in a supervised child when run as a program (a subject ending the process is a FAIL).
SUPERVISED = True

DEFAULT_VERIFIER = "resispec[drafting=without_replacement]"


def add_arguments(parser) -> None:
    from ._args import ListAction, count, seconds, seed

    parser.add_argument("--verifier", action="append", one=True, default=[DEFAULT_VERIFIER], metavar="NAME|MODULE:OBJECT",
                        help=f"name[option=value,...] or module:object (IMPORTS AND RUNS that module) of a verifier "
                        f"with step_plan (default {DEFAULT_VERIFIER})")
    parser.add_argument("--k", action=ListAction, one=True, item_type=int, metavar="K", default=4,
                        help="candidates per node (one value; default 4)")
    parser.add_argument("--tv", type=float, default=None, metavar="X",
                        help="the TV bound to certify; the draws are planned from it (default 1e-3; not with --n)")
    parser.add_argument("--n", "--samples", dest="samples", type=count, default=None, metavar="N",
                        help="draws instead of --tv, e.g. 1e4")
    parser.add_argument("--alpha", type=float, default=1e-3, help="1 - confidence of the TV bound (default 1e-3)")
    parser.add_argument("--seed", type=seed, default=0, metavar="S",
                        help="seed: an integer >= 0 or a sequence such as 0,3; default 0")
    parser.add_argument("--V", type=int, default=None, help="vocabulary of the random node (default 1000; not with --pq)")
    parser.add_argument("--concentration", type=float, default=1.0,
                        help="Dirichlet concentration of the random p, q (default 1.0)")
    parser.add_argument("--pq", default=None, metavar="FILE.npz",
                        help="use the node in this .npz (arrays p and q, shape (V,)) instead")
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="processes sharing the draws (default 1)")
    parser.add_argument("--time-limit", "--timeout", dest="time_limit", type=seconds, default=None, metavar="SECONDS",
                        help="stop after this many seconds (at least 1; the bound uses the draws run; INCONCLUSIVE if short); "
                        "a verify or step_plan call that never returns is stopped max(10, SECONDS) later and FAILs "
                        "as a hang (without --time-limit: after 7,200 s, twice exactness.limits.MAX_SECONDS)")
    parser.add_argument("--no-progress", action="store_true",
                        help="accepted as on every certify subject (this one shows no progress)")


def run(args) -> int:
    import exactness
    from exactness.certify_run import load_verifier

    from ._args import load_node

    spec = args.verifier
    if args.samples is not None and args.tv is not None:
        raise ValueError("give --n or --tv, not both (--tv plans the draws; --n fixes them)")
    _, verifier = load_verifier(spec)
    if not callable(getattr(verifier, "step_plan", None)):
        raise ValueError(f"--verifier {spec!r} declares no step_plan(p_i, q_i, *, last): certify stepwise "
                         "needs a verifier that declares its steps (the default does); use `resispec certify` or "
                         "`resispec certify coupled` for others")
    from ._args import time_limit as check_time_limit

    args.time_limit = check_time_limit(args.time_limit)    # 0 (no limit) or [1, 5e6] seconds
    from ._args import alpha as check_alpha

    check_alpha(args.alpha)                            # a level in [MIN_ALPHA, 1)
    p, q = load_node(args, default_V=1000)
    from exactness._timeout import hard_limit
    from exactness.limits import MAX_SECONDS

    from ._supervisor import run_started

    limit = args.time_limit if args.time_limit else MAX_SECONDS
    run_started(hard_limit(limit) if 0 < limit < float("inf") else None)   # the supervisor's wall clock starts here
    cert = exactness.certify_stepwise(verifier, p, q, args.k, n=args.samples, tv=args.tv, alpha=args.alpha, seed=args.seed,
                                      time_limit=args.time_limit, workers=args.workers)
    print(cert.summary())
    return {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}[cert.verdict]
