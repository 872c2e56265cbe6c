"""Record the (p, q) laws at real decoding nodes for study without the models.

    resispec capture --limit 8 --max-new-tokens 48 --out captured.npz

Stores, at every node the verifier visits, the union of the top-N tokens of
the target law p and the draft law q (renormalised on reading).  The file
is read by the pair family ``captured`` (``RESISPEC_CAPTURE=file.npz`` makes
``certify``, ``drift`` and ``bench-accept`` use it with ``--family captured``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._decoding_args import (add_model_args, add_prompt_args, add_sampling_args, check_models, check_prompt_source,
                             encode_prompts, load_pair, positive, prompt_texts, validate)

NAME = "capture"
HELP = "record (p, q) at real decoding nodes into an .npz read by the 'captured' family"


def add_arguments(p) -> None:
    add_model_args(p)
    add_sampling_args(p)
    add_prompt_args(p, default_limit=8)
    p.add_argument("--verifier", default="resispec")
    p.add_argument("--tree", default="4,2,1")
    p.add_argument("--top-n", type=int, default=64, help="keep the union of the top-N tokens of p and q (default 64)")
    p.add_argument("--out", type=Path, default=Path("captured.npz"))


def run(args) -> int:
    from .._io import check_output_path
    from ..decoding.capture import capture
    from ..trees import TreeShape
    from ..verifiers.registry import get_verifier

    sampling = validate(args)  # every option, then the models, checked before anything is loaded
    positive(args, "top_n")
    try:
        TreeShape.parse(args.tree)
    except ValueError as exc:
        raise ValueError(f"--tree: {exc}") from None
    check_output_path(args.out, "--out", suffix=".npz")
    verifier = get_verifier(args.verifier)
    positive(args, "limit")
    positive(args, "skip", 0)
    check_prompt_source(args.prompts)
    check_models(args)
    texts = prompt_texts(args)
    pair = load_pair(args)
    prompts = encode_prompts(pair, texts, args)
    path, n = capture(pair, prompts, args.out, verifier=verifier, tree=args.tree, sampling=sampling,
                      max_new_tokens=args.max_new_tokens, seed=args.seed, top_n=args.top_n,
                      prompt_names=[f"{args.prompts}[{args.skip + i}]" for i in range(len(prompts))])
    print(f"captured {n} nodes -> {path} ({path.stat().st_size / 2**20:.2f} MiB)", file=sys.stderr)
    return 0
