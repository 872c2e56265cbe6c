"""Decode one prompt with tree speculative sampling, streaming the text (on a terminal; into a pipe or a file
the text is written once, at the end).

    resispec decode --prompt "def fib(n):" --verifier resispec --tree 4,2,1
    resispec decode --prompts humaneval --skip 3 --temperature 0

Prints the text as it is accepted, then the tokens per target call (block
efficiency).  The emitted tokens follow the target's law exactly; at
temperature 0 they are the target's greedy output.
"""

from __future__ import annotations

import sys

from ._decoding_args import add_model_args, add_sampling_args, check_models, check_prompt_source, load_pair, validate

NAME = "decode"
HELP = "decode with tree speculative sampling (streams text, prints tokens per target call)"
#: the tree `decode` drafts when --tree is not given
TREE_DEFAULT = "4,2,1"


def add_arguments(p) -> None:
    add_model_args(p)
    add_sampling_args(p)
    g = p.add_argument_group("prompt")
    g.add_argument("--prompt", default=None, help="prompt text (default: a HumanEval prompt)")
    g.add_argument("--prompts", default="humaneval", help="prompt set when --prompt is not given")
    g.add_argument("--skip", type=int, default=0, help="decode the prompt after the first N of the set (default 0: "
                   "its first)")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    g = p.add_argument_group("speculation")
    g.add_argument("--verifier", default="resispec", help="registry verifier, with options as "
                   "name[option=value,...] (default resispec; e.g. 'resispec[proxy=tempered,gamma=0.5]': the "
                   "ResiSpec proxy and reserve scale); 'autoregressive' = target-only decoding; a path-level rule "
                   "('block', 'token') decides a chain tree such as --tree 1,1,1 at once; 'traversal' any iid tree")
    g.add_argument("--tree", default=TREE_DEFAULT, help=f"branching per depth (default {TREE_DEFAULT})")
    g.add_argument("--drafting", default=None, choices=["iid", "without_replacement"],
                   help="candidate law (default: the verifier's)")


def run(args) -> int:
    import numpy as np

    from ..decoding.engine import autoregressive_decode, speculative_decode
    from ..decoding.prompts import load_prompts

    sampling = validate(args)  # every option, then the models, checked before anything is loaded
    verifier = _verifier(args)   # None: autoregressive; every check of --tree / --drafting / --verifier done
    text = args.prompt
    if text is not None and not text:
        raise ValueError("--prompt must be a non-empty string")
    if text is not None and args.skip:
        raise ValueError("--skip picks a prompt of --prompts; with --prompt TEXT give no --skip")
    if text is not None and args.prompts != "humaneval":
        raise ValueError(f"--prompt TEXT is the prompt; --prompts {args.prompts} would pick another: give one")

    def pick():
        prompts = load_prompts(args.prompts, download=False)
        if not 0 <= args.skip < len(prompts):
            raise ValueError(f"--skip {args.skip} leaves no prompt; the set has {len(prompts)} prompts")
        return prompts[args.skip]

    if text is None:
        check_prompt_source(args.prompts)
        if args.prompts != "humaneval":      # a prompt file: --skip checked before the models are
            text = pick()
    check_models(args)
    if text is None:
        text = pick()
    pair = load_pair(args)
    ids = pair.encode(text, chat=args.chat)
    out = sys.stdout
    streaming = out.isatty()            # text as it is decoded on a terminal; once, at the end, into a pipe or file
    out.write(text)
    out.flush()
    emitted: list[int] = []
    shown = [0]

    def stream(tokens):
        emitted.extend(tokens)
        if not streaming:
            return
        s = pair.tokenizer.decode(emitted, skip_special_tokens=True)
        out.write(s[shown[0]:])
        out.flush()
        shown[0] = len(s)

    rng = np.random.default_rng(args.seed)
    kw = dict(sampling=sampling, max_new_tokens=args.max_new_tokens, rng=rng, eos_token_id=pair.eos_ids(),
              on_tokens=stream)
    if verifier is None:
        res = autoregressive_decode(pair.target, ids, **kw)
    else:
        res = speculative_decode(pair.target, pair.draft, ids, verifier, args.tree, drafting=args.drafting, **kw)
    if not streaming:
        out.write(pair.tokenizer.decode(emitted, skip_special_tokens=True))
    out.write("\n")
    hist = np.bincount(np.asarray(res.tokens_per_call, dtype=np.int64), minlength=2)  # tokens kept, not drafted
    print(f"\n[{args.verifier} tree={args.tree if verifier else '-'} T={sampling.temperature}] "
          f"{len(res.tokens)} tokens / {res.target_calls} target calls = {res.block_efficiency:.3f} tokens per "
          f"target call; {res.tokens_per_second:.2f} tokens/s ({res.target_seconds:.1f} s target, "
          f"{res.draft_seconds:.1f} s draft); tokens per call histogram (1..): {hist[1:].tolist()}",
          file=sys.stderr)
    return 0


def _verifier(args):
    """The verifier ``--verifier`` names (None for ``autoregressive``), with ``--tree`` and ``--drafting`` checked
    against it; ValueError naming the option, before any model is loaded."""
    from ..trees import TreeShape
    from ..pathlevel import available_path_verifiers, get_path_verifier
    from ..verifiers.registry import get_verifier

    try:
        tree = TreeShape.parse(args.tree)
    except ValueError as exc:
        raise ValueError(f"--tree: {exc}") from None
    from ..trees import MAX_TREE_NODES

    if tree.num_nodes > MAX_TREE_NODES:               # before any model loads, as bench checks its --trees
        raise ValueError(f"--tree {args.tree}: {tree.num_nodes:,} nodes, over MAX_TREE_NODES = {MAX_TREE_NODES:,} "
                         "(resispec.trees); give a smaller tree")
    if args.drafting == "iid" and tree.drafting == "without_replacement":
        raise ValueError(f"--tree {args.tree} drafts without replacement and --drafting iid says otherwise; give one "
                         "(drop 'wor:' or --drafting iid)")
    if args.skip < 0:
        raise ValueError(f"--skip must be >= 0, got {args.skip}")
    verifier = None
    from ..verifiers.registry import available_verifiers, parse_spec

    known = available_verifiers() + available_path_verifiers() + ["autoregressive"]
    spec = args.verifier
    name, opts = parse_spec(spec)                     # resispec[proxy=tempered,gamma=0.5]
    if name not in known:
        raise ValueError(f"unknown --verifier {name!r}; choose one of {sorted(known)}")
    if opts and name in available_path_verifiers() + ["autoregressive"]:
        raise ValueError(f"--verifier {args.verifier}: {name} takes no options; drop [...]")
    args.verifier = name
    if name == "autoregressive" and (args.drafting is not None or args.tree != TREE_DEFAULT):
        raise ValueError("--verifier autoregressive decodes the target alone: it drafts nothing, so --tree and "
                         "--drafting do not apply; drop them")
    if args.verifier in available_path_verifiers():
        shape = TreeShape.parse(args.tree)
        if any(k != 1 for k in shape.branching) and not hasattr(get_path_verifier(args.verifier), "verify_tree"):
            raise ValueError(f"--verifier {args.verifier} is a path-level rule for chains; pass --tree "
                             f"{','.join(['1'] * shape.depth)} (one draft per depth), not --tree {args.tree}")
        verifier = get_path_verifier(args.verifier)
    elif args.verifier != "autoregressive":
        try:
            verifier = get_verifier(args.verifier, **opts)
        except (TypeError, ValueError) as exc:
            if not opts:
                raise
            raise ValueError(f"--verifier {spec}: {str(exc).removesuffix(' or pass a callable')}") from None
    if verifier is not None:                 # a drafting law the verifier is not exact for: before any model loads
        from ..decoding.engine import resolve_drafting

        shape = TreeShape.parse(args.tree, args.drafting or "iid")
        if (shape.drafting == "without_replacement" and getattr(verifier, "drafting", None) == "iid"
                and args.verifier not in available_path_verifiers()):
            try:                             # the rule's without-replacement form, as bench-decode picks on wor: trees
                verifier = get_verifier(args.verifier, drafting="without_replacement", **opts)
            except (TypeError, ValueError):
                pass                         # none (rrs, kseq): resolve_drafting below says so
        if args.drafting is not None or shape.drafting == "without_replacement":   # as speculative_decode decides
            try:
                resolve_drafting(verifier, shape, explicit=True)
            except ValueError as exc:
                if args.drafting is None:    # the 'wor:' prefix asked for it, not --drafting
                    raise ValueError(f"--tree {args.tree}: --verifier {args.verifier} is not exact for "
                                     "without-replacement drafts; drop 'wor:' or use rrs_wor, resispec or "
                                     "target_only") from None
                raise ValueError(f"--tree {args.tree} / --drafting: {exc}") from None
    return verifier
