"""Certify a whole speculative decoder end to end (``exactness.certify_decoder``).

``--decoder module:object`` IMPORTS AND RUNS that module (current directory first on the import
path).  The object is either

- a factory: a callable taking no arguments (or a tuple) that returns ``(decoder, target, prompts)``;
- a decoder (an object with ``sample(prompts, new_tokens, rng)``, or a callable
  ``decoder(prompt, new_tokens, rng)``): then ``--target module:object`` names the target
  ``target(contexts (B, L)) -> (B, V)`` and ``--prompts`` the prompts.

Writes a terminal table, a Markdown report (default reports/certify_decoder.md) and a JSON file
next to it.  Exit status (as ``resispec certify``): 0 pass; 1 fail; 2 bad input (a module that
cannot be loaded, bad options, a decoder or target breaking the contract).

Example:
  resispec certify-decoder --decoder exactness.decoder_mutants:demo --new-tokens 3
"""

from __future__ import annotations

import inspect
import shlex
import sys
import time
from pathlib import Path

NAME = "certify-decoder"
HELP = "certify a whole speculative decoder: exact joint law of the first tokens + per-position PIT checks"


def add_arguments(parser) -> None:
    from ._args import count

    parser.add_argument("--decoder", required=True, metavar="MODULE:OBJECT",
                        help="a factory returning (decoder, target, prompts), or a decoder (then give --target and "
                             "--prompts). IMPORTS AND RUNS that module; any failure to load it is an error (exit 2)")
    parser.add_argument("--target", metavar="MODULE:OBJECT", help="target(contexts (B, L)) -> (B, V) law, when "
                        "--decoder names a decoder")
    parser.add_argument("--prompts", metavar="IDS;IDS...", help="prompts as token ids, rows separated by ';', ids "
                        "by ',' or spaces, e.g. '0,1;2,3' (equal lengths), when --decoder names a decoder")
    parser.add_argument("--new-tokens", type=int, default=2, help="tokens per continuation (default 2)")
    parser.add_argument("--samples", type=count, default=None, metavar="N",
                        help="continuations per prompt (default: the n at which the joint test detects TV 0.02)")
    parser.add_argument("--tv", type=float, default=None, help="TV to detect (plans n; warns if n is too small)")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise level over the checks (default 1e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("reports/certify_decoder.md"),
                        help="Markdown report path; the JSON goes next to it (default reports/certify_decoder.md)")


def parse_prompts(text: str):
    """``'0,1;2,3'`` -> [[0, 1], [2, 3]]; ValueError naming --prompts."""
    rows = []
    for part in text.split(";"):
        ids = part.replace(",", " ").split()
        try:
            rows.append([int(t) for t in ids])
        except ValueError:
            raise ValueError(f"--prompts {text!r}: token ids must be integers, rows separated by ';'") from None
    if not rows or any(not r for r in rows) and len(rows) > 1:
        raise ValueError(f"--prompts {text!r}: give at least one prompt, e.g. '0,1;2,3'")
    return rows


def _is_factory(obj) -> bool:
    if isinstance(obj, tuple):
        return True
    if hasattr(obj, "sample") or not callable(obj):
        return False
    try:
        inspect.signature(obj).bind()
        return True
    except (TypeError, ValueError):
        return False


def load(args):
    """(decoder, target, prompts) from the options; ValueError naming the flag."""
    from exactness.certify_run import _describe, import_object

    obj = import_object(args.decoder, "--decoder", "mymodule:make_decoder")
    if _is_factory(obj):
        if args.target or args.prompts:
            raise ValueError("--decoder names a factory returning (decoder, target, prompts): drop --target/--prompts")
        if not isinstance(obj, tuple):
            try:
                obj = obj()
            except BaseException as exc:
                raise ValueError(f"--decoder {args.decoder!r}: the factory failed: {_describe(exc)}") from exc
        if not isinstance(obj, tuple) or len(obj) != 3:
            raise ValueError(f"--decoder {args.decoder!r}: a factory must return (decoder, target, prompts), got "
                             f"{type(obj).__name__}")
        return obj
    if not args.target or not args.prompts:
        raise ValueError(f"--decoder {args.decoder!r} is a decoder: also give --target module:object and --prompts "
                         "(or name a factory returning (decoder, target, prompts))")
    target = import_object(args.target, "--target", "mymodule:target")
    return obj, target, parse_prompts(args.prompts)


def run(args) -> int:
    from .._io import check_output_path, write_markdown_and_json

    check_output_path(args.out, "--out")
    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must lie in (0, 1), got {args.alpha}")
    if args.new_tokens < 1:
        raise ValueError(f"--new-tokens must be >= 1, got {args.new_tokens}")
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--samples must be >= 1, got {args.samples}")
    import exactness
    from exactness.decoder import terminal_table, to_json, to_markdown

    decoder, target, prompts = load(args)
    t0 = time.perf_counter()
    cert = exactness.certify_decoder(decoder, target, prompts, new_tokens=args.new_tokens, n=args.samples,
                                     tv=args.tv, alpha=args.alpha, seed=args.seed)
    sec = time.perf_counter() - t0
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
    print(terminal_table(cert))
    print(cert.summary())
    md = to_markdown(cert, title=f"Decoder certificate: {args.decoder}", command=command)
    obj = {"decoder": args.decoder, "seconds": sec, **to_json(cert)}
    paths = write_markdown_and_json(str(args.out), md + f"\nRun time: {sec:.1f} s.\n", obj)
    print(f"\nreport: {paths[0]}  json: {paths[1]}  ({sec:.1f} s)")
    if not cert.passed:
        print(f"FAIL: {', '.join(cert.failed_checks())} (family-wise alpha {args.alpha:g}, Holm)")
        return 1
    return 0
