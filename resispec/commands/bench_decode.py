"""Benchmark real-model decoding: target-only vs every verifier, side by side.

    resispec bench decode --limit 3 --new-tokens 48 --trees 2,1 4,1 2,2,1

Runs target-only autoregressive decoding and every verifier on the same
prompts, seeds and tree shapes; prints block efficiency, target calls,
tokens/s and the ratio of each to target-only decoding and to the best
baseline verifier; writes ``--out`` (default ``bench-decode.md`` in the
current folder, the strict JSON beside it) after EVERY finished run, marked
partial until the end, so a killed run keeps what it finished.  The shipped
``reports/decode.md`` changes only when asked (``--out reports/decode.md``).
An estimate is printed before starting and a progress bar (tokens) while running.

    resispec bench decode --from-json runs/T0.7.json runs/T1.json --out decode.md

renders one table from finished runs (one section per run; nothing recomputed, no model loaded).

    resispec bench decode --limit 8 --verifiers resispec --trees 4,2,1 --scores none --capture nodes.npz

also records the (p, q) laws at every verified node, for study without the models (the pair family
``captured``; ``RESISPEC_CAPTURE=nodes.npz`` makes ``certify``, ``drift`` and ``bench accept`` use it with
``--families captured``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from ._args import DTYPES, ListAction
from ._decoding_args import (add_model_args, add_prompt_args, add_sampling_args, check_models, check_prompt_source,
                             encode_prompts, load_pair, positive, prompt_texts, validate)

NAME = "bench-decode"
HELP = "benchmark real decoding: target-only vs every verifier (block efficiency, tokens/s, ratios)"


def add_arguments(p) -> None:
    from ..bench.defaults import DECODE_VERIFIERS as DEFAULT_VERIFIERS

    add_model_args(p, DTYPES)
    add_sampling_args(p)
    add_prompt_args(p, default_limit=3)
    p.add_argument("--verifiers", action=ListAction, default=list(DEFAULT_VERIFIERS),
                   help="registry verifiers, each run (timed) on every tree it serves; the path-level rules 'block' "
                   "and 'token' run on the chain trees (e.g. --trees 1,1,1) only, 'traversal' on every iid tree")
    p.add_argument("--scores", "--score", dest="score", action=ListAction, default=[],
                   help="what the paired Rao-Blackwellised estimator scores besides every verifier run (each one's "
                   "exact expected accepted length on every drafted tree; no extra target pass, kept out of the "
                   "timings): verifiers scored only, not run, with a projected speed-up ('all' = every built-in "
                   "verifier that needs no options), or 'none' (no paired estimator at all) (default: the run "
                   "verifiers only)")
    p.add_argument("--trees", "--shapes", dest="trees", action=ListAction, sep=None, default=["2,1", "4,1", "2,2,1"],
                   help="tree shapes (default 2,1 4,1 2,2,1); 'wor:2,1' drafts without replacement and runs only "
                   "the rules exact for it (resispec becomes ResiSpec WOR; rrs and kseq are left out)")
    p.add_argument("--seeds", action=ListAction, item_type=int, default=None, help="seeds (default: --seed)")
    p.add_argument("--proxies", "--proxy", dest="proxies", action=ListAction, one=True, default=None,
                   help="the ResiSpec reserve proxy (one name of resispec.proxies; default: the verifier's own)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--ignore-eos", action="store_true", help="always generate --new-tokens tokens")
    p.add_argument("--capture", type=Path, default=None, metavar="FILE.npz",
                   help="also record (p, q) at every node each verifier verified into this .npz: the union of the "
                   "top-64 tokens of p and q per node, read by the pair family 'captured' (RESISPEC_CAPTURE="
                   "FILE.npz, then --families captured in certify, bench drift or bench accept); e.g. --verifiers "
                   "resispec --trees 4,2,1 --scores none --capture nodes.npz")
    p.add_argument("--repeats", type=int, default=1, help="runs per (prompt, seed) for timing (default 1)")
    p.add_argument("--from-json", nargs="+", action="extend", type=Path, default=None, metavar="JSON",
                   help="render one summary table from the JSONs of finished bench-decode runs (e.g. one per "
                   "temperature) into --out: every verifier's paired block efficiency, ratio to the best baseline, "
                   "projected and memory-bound speed-up; no model is loaded")
    p.add_argument("--resume", action="store_true",
                   help="continue the stopped run whose report is --out: keep its finished prompts (every method "
                   "done), run the rest; the same options are required (a different one is an error naming it)")
    p.add_argument("--out", default="bench-decode.md", metavar="PATH",
                   help="markdown report, strict JSON beside it (default bench-decode.md; the shipped report is "
                   "reports/decode.md, written only when named here)")


def run(args) -> int:
    args.out = Path(args.out)
    from .._io import check_output_path, check_report_path
    from ..bench.decode import format_table, run_bench, score_names, write_report
    from ..trees import TreeShape
    from ..pathlevel.registry import available_path_verifiers, get_any_verifier

    if args.from_json:
        return _summarize(args)
    sampling = validate(args)  # every option, then the models, checked before anything is loaded
    for t in args.trees:
        try:
            TreeShape.parse(t)
        except ValueError as exc:
            raise ValueError(f"--trees {t}: {exc}") from None
    for s in args.seeds or []:
        if s < 0:
            raise ValueError(f"--seeds must be >= 0, got {s}")
    if args.proxies is not None:
        from ..proxies import PROXIES

        if args.proxies not in PROXIES:
            raise ValueError(f"--proxies {args.proxies!r}: unknown proxy; choose one of {', '.join(sorted(PROXIES))}")
    for v in args.verifiers:
        get_any_verifier(v, **({"proxy": args.proxies} if args.proxies and v == "resispec" else {}))
    path = [v for v in args.verifiers if v in available_path_verifiers()
            and not hasattr(get_any_verifier(v), "verify_tree")]
    if path and not any(all(k == 1 for k in TreeShape.parse(t).branching) for t in args.trees):
        raise ValueError(f"--verifiers {','.join(path)}: path-level rules decide chains only; add a chain to "
                         "--trees, e.g. --trees 4,2,1 1,1,1")
    from ..bench.decode import shape_verifiers

    for t in args.trees:
        if not shape_verifiers(args.verifiers, TreeShape.parse(t), args.proxies):
            raise ValueError(f"--trees {t}: none of --verifiers {','.join(args.verifiers)} is exact for this tree "
                             "(a wor: tree needs a without-replacement rule: rrs_wor, resispec or target_only; "
                             "block and token need a chain)")
    shapes = [TreeShape.parse(t) for t in args.trees]
    labels = [s.label for s in shapes]
    for what, vals in (("--trees", labels), ("--seeds", list(args.seeds or []))):
        twice = sorted({str(v) for v in vals if vals.count(v) > 1})
        if twice:                   # a repeat would count one unit twice and shrink every standard error
            raise ValueError(f"{what} names {', '.join(twice)} more than once; give each once (--repeats repeats "
                             "runs on purpose)")
    args.no_paired = "none" in args.score               # --scores none: no paired estimator at all
    if args.no_paired and len(args.score) > 1:
        raise ValueError(f"--scores {' '.join(args.score)}: 'none' (no paired estimator) takes no other name; give "
                         "--scores none alone, or the names to score")
    args.score = [] if args.no_paired else args.score
    named = [m for m in args.score if m != "all"]
    try:
        args.score = score_names(args.score)
    except ValueError as exc:
        raise ValueError(f"--scores: {exc}") from None
    if args.proxies is not None and "resispec" not in args.verifiers and "resispec" not in args.score:
        raise ValueError(f"--proxies {args.proxies} applies to the resispec verifier only, which neither --verifiers "
                         "nor --scores names; add resispec or drop --proxies")
    if named:                       # a scored rule no tree's drafting serves would be dropped without a word
        from ..bench.decode import _servable

        runners = {s.label: shape_verifiers(args.verifiers, s, args.proxies) for s in shapes}
        served = {m for s in shapes for m in _servable(shape_verifiers(named, s, args.proxies), runners[s.label], s)}
        unserved = [m for m in dict.fromkeys(named) if m not in served and m not in args.verifiers]
        if unserved:
            raise ValueError(f"--scores {' '.join(unserved)}: exact for none of --trees {' '.join(args.trees)} "
                             "(block and token need a chain; rrs, kseq and the tree rules need iid drafts, not "
                             "'wor:'); drop them or add a tree they fit")
    check_report_path(args.out, "--out")
    previous, first = _stopped_run(args, sampling) if args.resume else (None, None)
    if not args.resume:
        _refuse_overwriting_a_stopped_run(args.out)
    if args.capture is not None:
        check_output_path(args.capture, "--capture", suffix=".npz")
        written = {Path(args.out).resolve(), Path(args.out).with_suffix(".json").resolve()}
        if Path(args.capture).resolve() in written:
            raise ValueError(f"--capture {str(args.capture)!r} is where the report goes (--out {str(args.out)!r} and "
                             "its .json): the capture would overwrite it; give another path")
    positive(args, "limit")
    positive(args, "skip", 0)
    positive(args, "repeats")
    check_prompt_source(args.prompts)
    texts = prompt_texts(args) if args.prompts != "humaneval" else None   # --skip / --limit checked before the models
    check_models(args)
    texts = texts or prompt_texts(args)
    pair = load_pair(args)
    prompts = encode_prompts(pair, texts, args)
    captured = [] if args.capture is not None else None
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""
    if first:                       # a resumed run keeps the command that started it (rerunnable from scratch)
        command = first
    js = args.out.with_suffix(".json")
    finished = []

    def on_run(partial):
        write_report(partial, args.out, js, command=command)
        finished[:] = [len(partial.runs)]

    try:
        result = run_bench(pair, prompts, verifiers=args.verifiers, trees=args.trees, sampling=sampling,
                           max_new_tokens=args.max_new_tokens, seeds=args.seeds or [args.seed], proxy=args.proxies,
                           stop_at_eos=not args.ignore_eos, capture=captured, repeats=args.repeats,
                           paired=not args.no_paired, score=args.score, resume=previous, on_run=on_run,
                           progress=not args.no_progress)
    except KeyboardInterrupt:
        kept = (f"{args.out} and {js} keep the {finished[0]} finished runs (marked PARTIAL)" if finished
                else "no run had finished, nothing was written")
        again = command + ("" if " --resume" in f" {command} " or not finished else " --resume")
        print(f"\ninterrupted: {kept}" + (f"; continue with: {again}" if finished else ""), file=sys.stderr)
        return 130
    print(format_table(result))
    write_report(result, args.out, js, command=command)
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}", file=sys.stderr)
    if captured:
        import numpy as np

        from simulators.captured import save_capture

        meta = dict(result.config, source="resispec bench decode", command=command, top_n=64)
        save_capture(args.capture, *(np.concatenate([c[j] for c in captured]) for j in range(4)), meta)
        print(f"captured {sum(len(c[0]) for c in captured)} nodes -> {args.capture}", file=sys.stderr)
    return 0


def _refuse_overwriting_a_stopped_run(out) -> None:
    """ValueError when ``out``'s JSON holds a stopped (PARTIAL) bench-decode run: a new run would overwrite the
    hours it holds; ``--resume`` continues it, another ``--out`` keeps it."""
    import json

    js = out.with_suffix(".json")
    if not js.is_file():
        return
    try:
        data = json.loads(js.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return
    if isinstance(data, dict) and "raw" in data and data.get("complete") is False:
        raise ValueError(f"{js} holds a stopped bench-decode run ({len(data.get('runs') or [])} runs kept); a new "
                         "run would overwrite it: add --resume to continue it, or choose another --out")


def _stopped_run(args, sampling):
    """``--resume``: the stopped run in ``--out``'s JSON, read and checked against every setting known before a
    model is loaded (the rest -- dtype, weights, prompts, machine -- is checked by ``run_bench``)."""
    import json

    from ..bench.decode import config_differences
    from ..bench.decode_summary import load_result
    from ..trees import TreeShape

    js = args.out.with_suffix(".json")
    if not js.is_file():
        raise ValueError(f"--resume: {js} (the JSON beside --out {args.out}) does not exist; give the --out of "
                         "the stopped run, or drop --resume")
    if args.capture is not None:
        raise ValueError("--resume cannot be combined with --capture (the stopped run's nodes were not kept); "
                         "drop one of them")
    old = load_result(js, need_speculative=False)
    if old.complete:
        raise ValueError(f"--resume: {js} is a complete run; nothing to resume (choose another --out for a new run)")
    try:
        command = json.loads(js.read_text(encoding="utf-8")).get("command") or ""
    except (OSError, ValueError, AttributeError):
        command = ""
    try:
        words = shlex.split(command) if isinstance(command, str) else []
    except ValueError:
        words = []
    rest = (words[3:] if words[:3] == ["resispec", "bench", "decode"] else     # as typed today
            words[2:] if words[:2] == ["resispec", NAME] else None)           # older files
    if rest is None:
        raise ValueError(f"--resume: {js} does not record the bench decode command that made it; start a new run")
    if "stop_at_eos" not in old.config or "paired" not in old.config:   # older files: parse their command
        from ._verb import parse_kind

        try:
            rest = [w for a in rest for w in (["--scores", "none"] if a == "--no-paired" else [a])]   # its old name
            before = parse_kind(sys.modules[__name__], rest)    # this kind's options alone (no verb around them)
        except (SystemExit, ValueError):
            raise ValueError(f"--resume: the command stored in {js} does not parse; start a new run") from None
        old.config.setdefault("stop_at_eos", not before.ignore_eos)
        old.config.setdefault("paired", "none" not in before.score)
    now = {"target": str(args.target), "draft": str(args.draft), "trees": [TreeShape.parse(t).label for t in args.trees],
           "verifiers": list(args.verifiers), "scored": [m for m in args.score if m not in args.verifiers],
           "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
           "max_new_tokens": args.max_new_tokens, "seeds": list(args.seeds or [args.seed]), "repeats": args.repeats,
           "proxy": args.proxies, "stop_at_eos": not args.ignore_eos, "paired": not args.no_paired}
    if args.threads:
        now["threads"] = args.threads
    diff = config_differences(old.config, now)
    if diff:
        raise ValueError(f"--resume: {js} was made with other settings (" + "; ".join(diff) + "); its command was: "
                         f"{command}")
    return old, command


def _summarize(args) -> int:
    """``--from-json``: the combined table of finished runs (no model loaded)."""
    from .._io import atomic_write, check_report_path
    import json

    from ..bench.decode import strict
    from ..bench.decode_summary import load_result, summary_markdown

    import os

    from ._verb import given_options

    given = given_options(sys.modules[__name__], args, keep=("from_json", "out"))
    if given:
        raise ValueError(f"--from-json renders finished runs and takes only --out; drop {' '.join(given)}")
    check_report_path(args.out, "--out")
    js = args.out.with_suffix(".json")
    for p in args.from_json:                             # a FIFO or a device would block or never end
        if p.exists() and not p.is_file():
            raise ValueError(f"--from-json {p} is not a regular file; pass the .json a bench-decode run wrote")
    inputs = [p.resolve() for p in args.from_json]
    ids = [(st.st_dev, st.st_ino) for st in (os.stat(p) for p in inputs if p.exists())]
    if len(set(inputs)) != len(inputs) or len(set(ids)) != len(ids):   # also a hard link to the same file
        raise ValueError("--from-json names the same file twice; pass each run once")
    if {args.out.resolve(), js.resolve()} & set(inputs):
        raise ValueError(f"--out {args.out} (or its .json) is one of the --from-json inputs; write the summary to "
                         "another file")
    if js.exists():
        try:
            old = json.loads(js.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if isinstance(old, dict) and "raw" in old:
            raise ValueError(f"{js} (the JSON --out {args.out} writes) holds a bench-decode RUN; the summary would "
                             "overwrite it: choose another --out, or move that run first")
    results = [load_result(p) for p in args.from_json]   # every input read before anything is written
    command = "resispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else ""
    sources = [str(p) for p in args.from_json]
    payload = {"command": command, "runs": [{"source": s, "config": r.config, "complete": r.complete,
                                             "rows": r.table()} for s, r in zip(sources, results)]}
    atomic_write(js, json.dumps(strict(payload), indent=2, allow_nan=False))
    atomic_write(args.out, summary_markdown(results, sources, command))
    print(f"wrote {args.out} and {js}", file=sys.stderr)
    return 0
