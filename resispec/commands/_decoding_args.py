"""Options shared by the decoding commands (decode, bench-decode, capture).

Every option is validated (:func:`validate`, then the command's own
options and output paths, then :func:`check_models`) before any model is loaded
or anything is downloaded; a built-in model that is not cached is an error
naming ``resispec models fetch NAME`` (only ``resispec models`` downloads: one way in for a model).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._args import allowed, seed_int


#: the weight dtypes a model loads in (``--dtype``, whose values are shared with ``bench verify``: DTYPES)
MODEL_DTYPES = ("float32", "bfloat16", "float16")


def add_model_args(p, dtypes=MODEL_DTYPES) -> None:
    """The model options; ``dtypes``: ``--dtype``'s choices (``bench decode`` shares the option with ``bench verify``:
    ``DTYPES``, the model's own refused at run time by :func:`validate`).  ``--dtype`` and ``--device`` sit outside
    the "models" group: a verb's other kinds take them too."""
    from ..decoding.fetch import DEFAULT_DRAFT, DEFAULT_TARGET

    g = p.add_argument_group("models")
    g.add_argument("--target", default=DEFAULT_TARGET, help="target model p: built-in name or local path "
                   f"(default {DEFAULT_TARGET})")
    g.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft q: built-in model name or local path (default "
                   f"{DEFAULT_DRAFT}), or 'ngram' (a cheap smoothed n-gram over the target's tokenizer, built once "
                   "from the Python standard library; options as ngram:order=4,delta=0.5,prompt_weight=4,power=2), "
                   "or 'head' (an EAGLE-style head reading the target's own features, trained once here on the "
                   "standard library: ~30 min on 2 idle cores (target forwards, then training; over 1 h when the cores are "
                   "busy); docs/decoding.md)")
    p.add_argument("--dtype", default="float32", choices=dtypes,
                   help="weight dtype: float32, bfloat16 or float16 (default float32; on a CPU without AVX512-BF16 / "
                        "AMX half precision is emulated and multi-token passes are slow: a warning says so, "
                        "docs/decoding.md)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    g.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads (0 = torch default; 1 is faster on an oversubscribed machine)")
    g.add_argument("--linear", default="auto", choices=["auto", "small-batch", "streamed", "torch"],
                   help="linear-layer kernel: auto (default) computes CPU float32 passes of 1-12 tokens by a "
                   "compiled kernel that reads each weight block once (streamed; small-batch = W @ x.T without "
                   "numba), faster than torch's F.linear there (measured per CPU: benchmarks/cpu_linear.py); "
                   "torch = unchanged")


def add_sampling_args(p) -> None:
    g = p.add_argument_group("sampling (applied identically to target and draft)")
    g.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1)")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--new-tokens", "--max-new-tokens", dest="max_new_tokens", type=int, default=48,
                   help="at most this many new tokens (fewer at an end-of-sequence token) (default 48)")
    g.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")


def add_prompt_args(p, *, default_limit: int) -> None:
    g = p.add_argument_group("prompts")
    g.add_argument("--prompts", default="humaneval", help="'humaneval' (default) or a .jsonl / text file")
    g.add_argument("--limit", type=int, default=default_limit, help=f"number of prompts (default {default_limit})")
    g.add_argument("--skip", type=int, default=0, help="skip the first N prompts of the set (default 0)")
    g.add_argument("--chat", action="store_true", help="wrap prompts in the chat template (default: raw continuation)")


def sampling_config(args):
    """The SamplingConfig of ``--temperature/--top-k/--top-p`` (ValueError naming the option)."""
    from ..decoding.laws import SamplingConfig

    try:
        return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    except ValueError as exc:
        flag = next((f for f in ("temperature", "top_k", "top_p") if str(exc).startswith(f)), None)
        raise ValueError(f"--{flag.replace('_', '-')}: {exc}" if flag else str(exc)) from None


#: dest -> the option's name where they differ
_FLAG = {"max_new_tokens": "--new-tokens"}


def positive(args, name: str, minimum: int = 1) -> int:
    """``args.<name>`` as an int >= ``minimum`` (ValueError naming its option, ``--<name>``)."""
    v = getattr(args, name)
    if v < minimum:
        raise ValueError(f"{_FLAG.get(name, '--' + name.replace('_', '-'))} must be >= {minimum}, got {v}")
    return v


def validate(args):
    """Check the model and sampling options; returns the SamplingConfig.

    Loads nothing and downloads nothing.  Raises ValueError naming the option.
    """
    from ..decoding.models import resolve_device

    allowed(args.dtype, MODEL_DTYPES, "--dtype", "a model (its weights)")
    sampling = sampling_config(args)
    positive(args, "max_new_tokens")
    positive(args, "seed", 0)
    positive(args, "threads", 0)
    try:
        resolve_device(args.device)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None
    return sampling


def check_models(args) -> None:
    """Check that ``--target`` and ``--draft`` can be loaded from the cache (nothing is downloaded here).

    A ``--draft`` naming a draft kind (``ngram...``) has its options and corpus checked instead.

    Raises ModelNotFetchedError (a ValueError naming ``resispec models
    fetch NAME``) or FileNotFoundError / ValueError for a bad path.
    """
    from ..decoding.fetch import ModelNotFetchedError
    from ..decoding.models import check_model_source

    from ..decoding.drafts import check_draft_spec

    missing = []
    try:
        draft_is_model = check_draft_spec(args.draft) == "model"
    except ValueError as exc:
        raise ValueError(f"--draft: {exc}") from None
    for flag, name in (("--target", args.target), ("--draft", args.draft))[:2 if draft_is_model else 1]:
        try:
            check_model_source(name, download=False)
        except ModelNotFetchedError as exc:
            missing.append((name, exc))
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{flag}: {exc}") from None
    names = list(dict.fromkeys(n for n, _ in missing))
    if len(names) == 1:
        raise missing[0][1]
    if names:
        raise ModelNotFetchedError(f"models {names} are not in the cache; nothing is downloaded implicitly: run "
                                   f"`resispec models fetch {' '.join(names)}` first")


def check_prompt_source(source: str, flag: str = "--prompts") -> None:
    """A prompt file (anything but ``humaneval``) must exist; checked before any model is loaded."""
    if source != "humaneval" and not Path(source).expanduser().is_file():
        raise FileNotFoundError(f"{flag} {source}: no such file (give a .jsonl / text file, or 'humaneval')")


def prompt_texts(args) -> list[str]:
    """The prompts selected by ``--prompts/--skip/--limit`` (read before any model is loaded)."""
    from ..decoding.prompts import load_prompts

    positive(args, "limit")
    positive(args, "skip", 0)
    texts = load_prompts(args.prompts, download=False)
    texts = texts[args.skip:args.skip + args.limit]
    if not texts:
        raise ValueError(f"--skip {args.skip} leaves no prompts in {args.prompts!r}")
    return texts


def load_pair(args):
    """Load the validated pair (call :func:`validate` first)."""
    from ..decoding.pair import load_pair as _load

    positive(args, "threads", 0)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    pair = _load(args.target, args.draft, dtype=args.dtype, device=args.device, download=False,
                 linear=getattr(args, "linear", "auto"))
    from ..decoding.models import half_precision_warning

    note = half_precision_warning(args.dtype, str(next(pair.target.parameters()).device))
    if note:
        print(f"warning: {note}", file=sys.stderr)
    return pair


def encode_prompts(pair, texts: list[str], args) -> list[list[int]]:
    """Token ids of each prompt text (``--chat`` applies the chat template)."""
    return [pair.encode(t, chat=args.chat) for t in texts]
