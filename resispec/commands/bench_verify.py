"""Nodes verified per second for rrs, kseq and resispec, numpy and torch side by side.

Verifies the same batch (B x V, softmax-noise pairs) through each backend's
public ``verify`` and prints nodes/s with each verifier's per-node cost
relative to ``rrs`` in the same backend (ResiSpec target: at most 2), and one
summary line per backend for each ResiSpec reserve rule in ``--verifiers``
(``resispec``, ``resispec_lookahead``, ``resispec_myopic``) side by side.
Writes a markdown report and a JSON file beside it.
"""

from __future__ import annotations

import shlex
import sys

from ._args import DTYPES, ListAction, allowed, check_out, seed_int  # noqa: E402

NAME = "bench-verify"
HELP = "nodes verified per second, numpy vs torch, with the ResiSpec-over-rrs cost ratio"


def add_arguments(parser):
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 ... (default: %(default)s)")
    parser.add_argument("--dtype", default="auto", choices=DTYPES,
                        help="torch working dtype; auto = float64 on CPU, float32 on GPU (default: %(default)s)")
    parser.add_argument("--B", action=ListAction, item_type=int, unique=False, default=[256, 32], metavar=("B", "NUMPY_B"),
                        help="nodes per verify call: torch's, then the slow numpy reference's sub-batch (rates are per "
                             "node; default 256 32; one value: numpy's is min(it, 32))")
    parser.add_argument("--V", action=ListAction, one=True, item_type=int, unique=False, default=151_936,
                        help="vocabulary size (one value; default: %(default)s)")
    parser.add_argument("--k", action=ListAction, item_type=int, default=[2, 4, 8], help="comma-separated candidate counts (default: 2,4,8)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed calls per cell, best of; cells interleaved after one untimed warm-up call each "
                             "(default %(default)s; the numpy reference, on its smaller batch: max(--repeats, 5))")
    parser.add_argument("--verifiers", action=ListAction, default=None,
                        help="comma-separated verifiers (default: rrs,kseq,resispec; with --drafting "
                             "without_replacement: rrs_wor,resispec)")
    parser.add_argument("--backends", "--torch-solvers", dest="backends", action=BackendsAction,
                        default=["numpy", "torch"], unique=False,
                        help="numpy, torch, and torch[solver=S]: on torch also time resispec[solver=S], the "
                             "fixed-point reserve by solver S (fused, newton or sort), beside the default resispec "
                             "row (the look-ahead reserve; S = auto is that row), e.g. --backends torch "
                             "'torch[solver=newton]' (default: numpy torch)")
    parser.add_argument("--drafting", default="iid", choices=["iid", "without_replacement"],
                        help="how candidates are drawn; without_replacement times rules for such drafts (rrs_wor, "
                             "target_only, the without-replacement resispec) against rrs_wor (default: %(default)s)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--out", default="bench-out/bench_verify.md", metavar="PATH",
                        help="markdown report; JSON beside it (default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


class BackendsAction(ListAction):
    """``--backends``: items split at the commas outside brackets (``torch[solver=newton],numpy``).  Its old
    spelling ``--torch-solvers S,...`` (committed reports quote it) adds ``torch[solver=S]`` for each S to the
    backends given so far (the default numpy and torch when none were)."""

    def __init__(self, *args, **kwargs):
        kwargs["sep"] = None                             # split here, at the commas outside brackets
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        import re

        values = [part for raw in ([values] if isinstance(values, str) else values)
                  for part in re.split(r",(?![^\[]*\])", str(raw))]
        if option_string == "--torch-solvers":
            values = [f"torch[solver={v.strip()}]" for v in values if v.strip()]
            if not isinstance(getattr(namespace, self.dest, None), list):   # before any --backends: the defaults
                kinds = getattr(parser, "kind_defaults", {})               # (a verb's parser keeps them per kind)
                default = kinds.get(getattr(parser, "kind", None), {}).get(self.dest, self.default)
                setattr(namespace, self.dest, list(default) if isinstance(default, (list, tuple)) else [])
        super().__call__(parser, namespace, values, option_string)


def backends_and_solvers(specs) -> tuple:
    """``["numpy", "torch", "torch[solver=newton]"]`` -> ``(["numpy", "torch"], ["auto", "newton"])``: the backends
    in order, and torch's reserve solvers to time (``torch`` alone is ``auto``).  ValueError naming --backends."""
    from resispec.verifiers.registry import parse_spec
    from resispec.verifiers.reserve import SOLVERS

    backends, solvers = [], []
    for spec in specs:
        name, opts = parse_spec(spec, "--backends")
        if name not in ("numpy", "torch"):
            raise ValueError(f"--backends {spec!r}: choose numpy, torch or torch[solver=S]")
        if opts and name != "torch":
            raise ValueError(f"--backends {spec!r}: only torch takes an option, solver (torch[solver=newton])")
        if set(opts) - {"solver"}:
            raise ValueError(f"--backends {spec!r}: torch takes one option, solver (torch[solver=newton]), not "
                             f"{', '.join(sorted(set(opts) - {'solver'}))}")
        if name not in backends:
            backends.append(name)
        if name == "torch":
            solver = str(opts.get("solver", "auto"))
            if solver not in SOLVERS:
                raise ValueError(f"--backends {spec!r}: solver must be one of {', '.join(SOLVERS)}")
            if solver not in solvers:                    # torch and torch[solver=auto] are one column
                solvers.append(solver)
    return backends, solvers or ["auto"]


def _check_device(device: str) -> None:
    """``--device`` as torch parses it, of a kind this build can run (cpu, or cuda when it is there): else a
    ValueError naming the flag, before any work (``meta`` / ``mps`` / ``xpu`` were tracebacks from inside torch)."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"--device {device!r} is not a torch device ({exc}); give cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device!r}: this torch build or machine has no CUDA; give --device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"--device {device!r}: bench verify runs on cpu or cuda (cuda:N), not {dev.type}")


def run(args) -> int:
    if len(args.B) > 2 or min(args.B) < 1:
        raise ValueError(f"--B takes one or two whole numbers >= 1 (torch's batch, then numpy's), got "
                         f"{' '.join(map(str, args.B))}")
    args.B, args.numpy_B = args.B[0], (args.B[1] if len(args.B) == 2 else min(args.B[0], 32))
    allowed(args.dtype, ("auto", "float64", "float32"), "--dtype", "bench verify")
    check_out(args.out, "--out", json_beside=True)     # before any work
    args.backends, torch_solvers = backends_and_solvers(args.backends)
    if "torch" in args.backends:
        _check_device(args.device)
    else:
        unused = [f"--{name} {value}" for name, value, default in (("device", args.device, "cpu"),
                                                                 ("dtype", args.dtype, "auto")) if value != default]
        if unused:
            raise ValueError(f"{' and '.join(unused)} set the torch backend, which --backends leaves out; add torch "
                             "to --backends or drop them")
    from ..bench.throughput import bench_verify, write_reports

    wor = args.drafting != "iid"
    verifiers = args.verifiers or (["rrs_wor", "resispec"] if wor else ["rrs", "kseq", "resispec"])
    res = bench_verify(B=args.B, V=args.V, ks=args.k, verifiers=verifiers, backends=args.backends,
                       device=args.device, dtype=args.dtype, repeats=args.repeats, numpy_B=args.numpy_B,
                       seed=args.seed, progress=not args.no_progress,
                       torch_solvers=torch_solvers, drafting=args.drafting)
    c = res.config
    np_b = f" (numpy {c['numpy_B']})" if "numpy" in c["backends"] else ""
    print(f"B={c['B']}{np_b}  V={c['V']:,}  device={c.get('device', '-')}  "
          f"dtype={c.get('dtype', '-')}  repeats={c['repeats']}")
    print(res.table())
    target = 3 if wor else 2
    for b in c["backends"]:
        for name in ("resispec", "resispec_lookahead", "resispec_myopic"):
            ratios = [res.ratio(b, k, name) for k in c["ks"] if res.ratio(b, k, name) is not None]
            if ratios and name in c["verifiers"]:
                print(f"{b}: {name} / {c['base']} cost "
                      + ", ".join(f"k={k}: {res.ratio(b, k, name):.2f}" for k in c["ks"])
                      + f"  (target <= {target}: {'met' if max(ratios) <= target else 'NOT met'})")
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
    md, js = write_reports(res, args.out, command=command)
    print(f"wrote {md} and {js}")
    return 0
