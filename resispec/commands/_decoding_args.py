"""Options shared by the decoding commands (decode, bench-decode, capture)."""

from __future__ import annotations

from pathlib import Path


def add_model_args(p) -> None:
    from ..decoding.fetch import DEFAULT_DRAFT, DEFAULT_TARGET

    g = p.add_argument_group("models")
    g.add_argument("--target", default=DEFAULT_TARGET, help="target model p: built-in name or local path "
                   f"(default {DEFAULT_TARGET})")
    g.add_argument("--draft", default=DEFAULT_DRAFT, help=f"draft model q: built-in name or local path (default {DEFAULT_DRAFT})")
    g.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="weight dtype (default float32)")
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    g.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads (0 = torch default; 1 is faster on an oversubscribed machine)")
    g.add_argument("--wheels-from", type=Path, default=None, help="local directory of model wheels (offline)")


def add_sampling_args(p) -> None:
    g = p.add_argument_group("sampling (applied identically to target and draft)")
    g.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (default 1)")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    g.add_argument("--max-new-tokens", type=int, default=48)
    g.add_argument("--seed", type=int, default=0)


def add_prompt_args(p, *, default_limit: int) -> None:
    g = p.add_argument_group("prompts")
    g.add_argument("--prompts", default="humaneval", help="'humaneval' (default) or a .jsonl / text file")
    g.add_argument("--limit", type=int, default=default_limit, help=f"number of prompts (default {default_limit})")
    g.add_argument("--skip", type=int, default=0, help="skip the first N prompts of the set (default 0)")
    g.add_argument("--chat", action="store_true", help="wrap prompts in the chat template (default: raw continuation)")


def sampling_config(args):
    from ..decoding.laws import SamplingConfig

    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def load_pair(args):
    from ..decoding.pair import load_pair as _load

    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0, got {args.threads}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    return _load(args.target, args.draft, dtype=args.dtype, device=args.device, wheels_from=args.wheels_from)


def encoded_prompts(pair, args) -> list[list[int]]:
    from ..decoding.prompts import load_prompts

    if args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    if args.skip < 0:
        raise ValueError(f"--skip must be >= 0, got {args.skip}")
    texts = load_prompts(args.prompts)[args.skip:args.skip + args.limit]
    if not texts:
        raise ValueError(f"--skip {args.skip} leaves no prompts in {args.prompts!r}")
    return [pair.encode(t, chat=args.chat) for t in texts]
