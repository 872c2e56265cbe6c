"""Certify a whole speculative decoder end to end (``exactness.certify_decoder``).

``--decoder module:object`` IMPORTS AND RUNS that module (current directory first on the import
path).  The object is either

- a factory: a callable taking no arguments (or a tuple) that returns ``(decoder, target, prompts)``;
- a decoder (an object with ``sample(prompts, new_tokens, rng)``, or a callable
  ``decoder(prompt, new_tokens, rng)``): then ``--target module:object`` names the target
  ``target(contexts (B, L)) -> (B, V)`` and ``--prompt-ids`` the prompts.

Without ``--decoder``, ``--target PATH [--draft PATH]`` certifies transformers ``generate(do_sample=True)``
on saved models (folders, loaded offline) through ``exactness.adapters.hf``: ``HFDecoder`` against
``hf_target`` with the same generation options (``--temperature``, ``--top-k``, ``--top-p``,
``--num-assistant-tokens``, the latter with a constant schedule); prompts from ``--prompt-ids`` (ids)
or ``--prompt`` (tokenised with the target's tokenizer; repeat for several).

Writes a terminal table (under a line naming the sample: ``n = 150,000 continuations (50,000 per prompt x 3
prompts)``; ``--n`` is per prompt, the summary's ``n`` the pooled total), a Markdown report (default
certify-out/certify_decoder.md, git-ignored), a JSON file and a PNG figure (per-position PIT p-values and detectable TV) next
to it; progress of slow phases on stderr.
Exit status (as ``resispec certify``): 0 no bias detected; 1 bias found or the decoder misbehaved (it
raised, called ``sys.exit`` while decoding, returned the wrong shape / dtype, ids outside [0, V), a token of
target probability 0, or did not return within --time-limit: the cause is printed); 2 bad input (a module
that cannot be loaded, even one that calls ``sys.exit`` at import or in its factory, bad options, a target
that raises or returns a bad law).

Example:
  resispec certify decoder --decoder exactness.decoder_mutants:demo --new-tokens 3
  resispec certify decoder --target ./target --draft ./draft --top-k 3 --prompt "hello" --n 2000
    (./target, ./draft: folders written by save_pretrained, the target's with its tokenizer; docs/decoders.md)
"""

from __future__ import annotations

import inspect
import io
import shlex
import sys
import time
from pathlib import Path

from ._args import seed

NAME = "certify-decoder"
HELP = "certify a whole speculative decoder: exact joint law of the first tokens + per-position PIT checks"
#: A verdict command: run in a supervised child when run as a program (a subject ending the process is a FAIL).
SUPERVISED = True


def add_arguments(parser) -> None:
    from ._args import JoinAction, count, out_path, seconds

    parser.add_argument("--decoder", metavar="MODULE:OBJECT",
                        help="a factory returning (decoder, target, prompts), or a decoder (then give --target and "
                             "--prompt-ids). IMPORTS AND RUNS that module; any failure to load it is an error (exit 2)")
    parser.add_argument("--target", help="with --decoder naming a decoder: MODULE:OBJECT, the target(contexts "
                        "(B, L)) -> (B, V) law; without --decoder: a saved transformers causal LM (folder, loaded "
                        "offline) whose generate(do_sample=True) is certified against its own processed "
                        "next-token law")
    parser.add_argument("--prompt-ids", "--prompts", dest="prompts", metavar="IDS;IDS...", action=JoinAction,
                        help="prompts as token ids, rows separated by ';', ids "
                        "by ',' or spaces, e.g. '0,1;2,3' (equal lengths), when --decoder names a decoder")
    hf = parser.add_argument_group("Hugging Face generate (--target FOLDER instead of --decoder)")
    hf.add_argument("--draft", help="the assistant model folder for --target (assisted generation); omit for plain "
                    "sampling")
    hf.add_argument("--temperature", type=float, help="sampling temperature (> 0), for decoder and target alike")
    hf.add_argument("--top-k", type=int, help="top-k (>= 1), for decoder and target alike")
    hf.add_argument("--top-p", type=float, help="top-p in (0, 1], for decoder and target alike")
    hf.add_argument("--num-assistant-tokens", type=int, help="draft tokens per round (>= 1, constant schedule; "
                    "needs --draft)")
    hf.add_argument("--prompt", action="append", dest="prompt_text", metavar="TEXT", help="a prompt as text, tokenised with "
                    "--target's tokenizer; repeat for several (they must tokenise to equal lengths)")
    parser.add_argument("--new-tokens", type=int, default=2, help="tokens per continuation (default 2)")
    parser.add_argument("--n", "--samples", dest="samples", type=count, default=None, metavar="N",
                        help="continuations per prompt (default: the n at which the joint test detects TV 0.02); "
                             "the summary's n is the total over the prompts")
    parser.add_argument("--tv", type=float, default=None, metavar="X", help="TV to detect (plans n; warns if n is too small)")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise level over the checks (default 1e-3)")
    parser.add_argument("--seed", type=seed, default=0, metavar="S", help="seed: an integer >= 0 or a sequence such as 0,3 (default 0)")
    parser.add_argument("--time-limit", "--timeout", dest="time_limit", type=seconds, default=3600.0, metavar="SECONDS",
                        help="no new call of the decoder starts after this many seconds: the run ends with exit 2 "
                             "(nothing decided: raise it, or ask fewer draws); a call still running max(10, SECONDS) "
                             "later is a hang, a FAIL naming it (default 3600; 0 = no limit)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress on stderr (default: slow phases show a bar on a terminal, else a line "
                             "every ~10 s)")
    parser.add_argument("--out", type=out_path, default=Path("certify-out/certify_decoder.md"),
                        help="Markdown report path; the JSON and the PNG figure go next to it (default "
                             "certify-out/certify_decoder.md, git-ignored)")


def parse_prompts(text: str):
    """``'0,1;2,3'`` -> [[0, 1], [2, 3]]; ValueError naming --prompt-ids."""
    rows = []
    for part in text.split(";"):
        ids = part.replace(",", " ").split()
        try:
            rows.append([int(t) for t in ids])
        except ValueError:
            raise ValueError(f"--prompt-ids {text!r}: token ids must be integers, rows separated by ';'") from None
    if not rows or any(not r for r in rows):
        raise ValueError(f"--prompt-ids {text!r}: give at least one prompt, e.g. '0,1;2,3'")
    return rows


def _is_factory(obj) -> bool:
    if isinstance(obj, tuple):
        return True
    try:
        has_sample = hasattr(obj, "sample")     # a property that raises: a decoder (its sample is read guarded later)
    except BaseException as exc:
        from exactness._checks import ctrl_c

        if ctrl_c(exc):
            raise
        return False
    if has_sample or not callable(obj):
        return False
    try:
        inspect.signature(obj).bind()
        return True
    except (TypeError, ValueError):
        return False


HF_OPTIONS = ("temperature", "top_k", "top_p", "num_assistant_tokens")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def hf_options(args) -> dict:
    """The generation options of the ``--hf-*`` flags (validated; ValueError naming the flag)."""
    opts = {k: getattr(args, k) for k in HF_OPTIONS if getattr(args, k) is not None}
    if "temperature" in opts and not opts["temperature"] > 0:
        raise ValueError(f"--temperature must be > 0 (greedy decoding is not a law to certify), got "
                         f"{opts['temperature']}")
    if "top_k" in opts and opts["top_k"] < 1:
        raise ValueError(f"--top-k must be >= 1, got {opts['top_k']}")
    if "top_p" in opts and not 0 < opts["top_p"] <= 1:
        raise ValueError(f"--top-p must lie in (0, 1], got {opts['top_p']}")
    if "num_assistant_tokens" in opts:
        if opts["num_assistant_tokens"] < 1:
            raise ValueError(f"--num-assistant-tokens must be >= 1, got {opts['num_assistant_tokens']}")
        if not args.draft:
            raise ValueError("--num-assistant-tokens configures the assistant: also give --draft PATH")
        opts["num_assistant_tokens_schedule"] = "constant"   # reproducible: the heuristic schedule keeps state
    return opts


def _load_model(path: str, flag: str):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    except Exception as exc:
        raise ValueError(f"{flag} {path!r}: cannot load a transformers causal LM from it ({type(exc).__name__}: "
                         f"{exc}); give a folder written by model.save_pretrained") from exc


def load_hf(args):
    """(decoder, target, prompts) for ``--target FOLDER``: ``HFDecoder`` / ``hf_target`` with the same options."""
    if args.prompts and args.prompt_text:
        raise ValueError("give the prompts once: --prompt-ids ('0,1;2,3') or --prompt TEXT, not both")
    if not args.prompts and not args.prompt_text:
        raise ValueError("--target FOLDER (transformers generate) needs prompts: give --prompt-ids ('0,1;2,3') or --prompt TEXT "
                         "(one of the two)")
    opts = hf_options(args)
    ids = parse_prompts(args.prompts) if args.prompts else None     # malformed rows refused before any model loads
    if args.prompt_text and any(not t for t in args.prompt_text):
        raise ValueError("--prompt: an empty prompt; give a non-empty text")
    from exactness.adapters.hf import HFDecoder, hf_target

    target = _load_model(args.target, "--target")
    draft = _load_model(args.draft, "--draft") if args.draft else None
    if args.prompt_text:
        from transformers import AutoTokenizer

        files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
        why = None if any((Path(args.target) / f).is_file() for f in files) else f"none of {', '.join(files)}"
        if why is None:
            try:
                tok = AutoTokenizer.from_pretrained(args.target, local_files_only=True)
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            raise ValueError(f"--prompt needs the tokenizer saved with --target {args.target!r} ({why}); "
                             "save it there (tokenizer.save_pretrained) or pass --prompt-ids")
        prompts = [list(tok(t)["input_ids"]) for t in args.prompt_text]
        if any(not p for p in prompts):
            raise ValueError("--prompt: a prompt tokenised to no tokens; give a non-empty text")
        lens = sorted({len(p) for p in prompts})
        if len(lens) > 1:
            raise ValueError(f"--prompt: the prompts tokenise to unequal lengths {lens}; certify-decoder "
                             "needs equal lengths (certify each length in its own run)")
    else:
        prompts = ids
    decoder = HFDecoder(target, draft, **opts)
    return decoder, hf_target(target, **opts), prompts


def load(args):
    """(decoder, target, prompts) from the options; ValueError naming the flag."""
    from exactness.certify_run import _describe, import_object

    for flag, value in (("--target", args.target), ("--draft", args.draft), ("--decoder", args.decoder)):
        if value is not None and not str(value).strip():
            raise ValueError(f"{flag} is empty; give a path (or leave {flag} out)")
    if not args.decoder and args.target:
        return load_hf(args)
    extra = [_flag(k) for k in HF_OPTIONS if getattr(args, k) is not None] + (["--prompt"]
                                                                            if args.prompt_text else [])
    extra += ["--draft"] if args.draft else []
    if extra:
        raise ValueError(f"{', '.join(extra)} appl{'ies' if len(extra) == 1 else 'y'} to transformers generate "
                         "(--target FOLDER without --decoder) "
                         "only; with --decoder configure the decoder in its module")
    if not args.decoder:
        raise ValueError("give --decoder module:object (a factory or a decoder) or --target FOLDER (a saved "
                         "transformers model)")
    from exactness._checks import ctrl_c

    obj = import_object(args.decoder, "--decoder", "mymodule:make_decoder")
    if _is_factory(obj):
        if args.target or args.prompts:
            raise ValueError("--decoder names a factory returning (decoder, target, prompts): drop --target/--prompt-ids")
        if not isinstance(obj, tuple):
            try:
                obj = obj()
            except BaseException as exc:
                if ctrl_c(exc):  # the user's Ctrl-C while loading: it stops the run
                    raise
                raise ValueError(f"--decoder {args.decoder!r}: the factory failed: {_describe(exc)}") from exc
        if not isinstance(obj, tuple) or len(obj) != 3:
            raise ValueError(f"--decoder {args.decoder!r}: a factory must return (decoder, target, prompts), got "
                             f"{type(obj).__name__}")
        return obj
    if not args.target or not args.prompts:
        raise ValueError(f"--decoder {args.decoder!r} is a decoder: also give --target module:object and --prompt-ids "
                         "(or name a factory returning (decoder, target, prompts))")
    target = import_object(args.target, "--target", "mymodule:target")
    return obj, target, parse_prompts(args.prompts)


def run(args) -> int:
    from .._io import atomic_write, check_output_path, write_markdown_and_json

    check_output_path(args.out, "--out")
    if args.out.suffix.lower() in (".png", ".json"):
        raise ValueError(f"--out {str(args.out)!r} names the Markdown report; the JSON and PNG go next to it: "
                         "give a .md path")
    for p in (args.out.with_suffix(".json"), args.out.with_suffix(".png")):
        check_output_path(p, "--out")
    from ._args import alpha as check_alpha

    check_alpha(args.alpha)                            # a level in [MIN_ALPHA, 1)
    if args.new_tokens < 1:
        raise ValueError(f"--new-tokens must be >= 1, got {args.new_tokens}")
    if args.samples is not None and args.samples < 1:
        raise ValueError(f"--n must be >= 1, got {args.samples}")
    from ._args import time_limit as check_time_limit

    time_limit = check_time_limit(args.time_limit)   # 0 (no limit) or [MIN_CELL_TIMEOUT, 5e6] seconds
    if args.tv is not None and not 0 < args.tv <= 1:  # also NaN; before any model or decoder is loaded
        raise ValueError(f"--tv must lie in (0, 1] (the TV per position to detect, e.g. 0.02), got {args.tv}")
    import exactness
    from exactness.decoder import figure, terminal_table, to_json, to_markdown

    decoder, target, prompts = load(args)
    from exactness._timeout import hard_limit

    from ._supervisor import run_started

    run_started(hard_limit(time_limit) if time_limit else None)    # the supervisor's wall clock starts here
    t0 = time.perf_counter()
    cert = exactness.certify_decoder(decoder, target, prompts, new_tokens=args.new_tokens, n=args.samples,
                                     tv=args.tv, alpha=args.alpha, seed=args.seed, time_limit=time_limit,
                                     progress=not args.no_progress)
    sec = time.perf_counter() - t0
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else None
    print(terminal_table(cert))
    from exactness.result import MORE

    print(cert.summary().replace(MORE, " (more: the Markdown report)"))
    name = args.decoder or f"hf:{args.target}" + (f" + {args.draft}" if args.draft else "")
    md = to_markdown(cert, title=f"Decoder certificate: {name}", command=command)
    png = io.BytesIO()
    figure(cert, title=name).savefig(png, format="png", dpi=110)       # rendered before anything is written
    png_path = args.out.with_suffix(".png")
    md += f"\n![per-position PIT p-values and detectable TV]({png_path.name})\n"
    obj = {"decoder": name, "seconds": sec, "figure": png_path.name, **to_json(cert)}
    paths = write_markdown_and_json(str(args.out), md + f"\nRun time: {sec:.1f} s.\n", obj)
    atomic_write(png_path, png.getvalue())
    print(f"\nreport: {paths[0]}  json: {paths[1]}  figure: {png_path}  ({sec:.1f} s)")
    if not cert.passed:
        cause = (cert.details.get("subject") or {}).get("error")
        bad = cert.failing_order()
        print(f"FAIL: {cause}" if cause else
              f"FAIL: {', '.join(bad)} (family-wise alpha {args.alpha:g}, Holm; strongest first)\n"
              + "\n".join(f"  {cert.describe(k)}" for k in bad))
        return 1
    return 0
