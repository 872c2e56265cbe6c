"""Audit an inference engine's speculative decoding: its own law (speculation off) vs its speculative paths.

Builds tiny local models (nothing downloaded), converts them to the engine's format, and for each sampling setting
(``--settings``, one per ';'-separated item, fields as ``temperature=0.7,top_k=3``) and speculative option
(``--options``) certifies the engine's speculative decoder against the engine's own non-speculative law, with a
budget that aims at ``--tv`` per position within ``--cell-seconds`` of engine time. Writes ``audit_<engine>.md``,
``.json``, ``.png`` and a reproduction script per FAIL under ``--out`` (default audit-out/, git-ignored), after every
cell. ``resispec audit list`` shows the known engines, which are installed, and how to install the others. docs/audit.md.

Exit status: 0 every cell PASS; 1 a FAIL (the engine is biased, or raised / hung while decoding); 3 no FAIL but a
cell INCONCLUSIVE (a setting the engine does not implement, a model it cannot load), a law finding (the engine's own
law differs from the float64 law) or an incomplete run; 2 bad input (an unknown engine, option or setting, or an
engine that is not installed: the message names the install command).

Example:
  resispec audit list
  resispec audit transformers --settings "T=1;top_k=3" --options off,draft --cell-seconds 60
"""

from __future__ import annotations

import os
import sys

from ._args import count, seed_int

NAME = "audit"
HELP = "audit an inference engine's speculative decoding for exactness (tiny local models, its sampling settings)"


def add_arguments(parser) -> None:
    from ._args import JoinAction, ListAction

    parser.add_argument("engine", nargs="?", help="the engine (resispec audit list shows them), 'list' (the known engines, which are installed, how to "
                        "install the others), or MODULE:CLASS, your own "
                        "exactness.engines.base.Engine subclass (IMPORTS AND RUNS that module)")
    parser.add_argument("--summary", nargs="+", metavar=("DIR", "PAGE"), help="write DIR/audit.md: one row per "
                        "audit_*.json report in DIR (runs nothing); with PAGE also replace the table between the "
                        "markers <!-- audit-summary --> and <!-- /audit-summary --> of that page (docs/audit.md)")
    parser.add_argument("--settings", action="append", help="sampling settings, ';'-separated and/or repeated "
                        "(default: the built-in grid), e.g. "
                        "'T=1;temperature=0.7,top_k=3;logit_bias=2:2 3:-2;bad_words=4|5 6' (logit_bias: TOKEN:BIAS "
                        "items separated by spaces; bad_words: words separated by '|', a word's tokens by spaces); "
                        "the report's setting labels read back as they are")
    parser.add_argument("--options", action=ListAction, default=None, help="speculative options (default: all the "
                        "engine has; 'off' is plain sampling, which must pass)")
    parser.add_argument("--tv", type=float, default=None, help="detectable TV per position to aim at (default 0.02)")
    parser.add_argument("--cell-seconds", type=float, default=None, help="engine time per cell the budget may use "
                        "(default 600)")
    parser.add_argument("--n", type=count, default=None, metavar="N", help="continuations per prompt (overrides the planned budget)")
    parser.add_argument("--new-tokens", type=int, default=None, help="tokens per continuation (default 3)")
    parser.add_argument("--V", "--vocab", dest="vocab", type=int, default=None, metavar="N",
                        help="vocabulary of the tiny models (default 16)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed: an integer >= 0")
    parser.add_argument("--hang-seconds", type=float, default=None, help="seconds past a cell's budget before a call "
                        "of the engine that has not returned is a hang (default 300)")
    parser.add_argument("--plant", metavar="BUG", help="plant a known bug in the engine (a negative control the "
                        "audit must FAIL; exactness.engines.mutants.PLANTED lists them, e.g. argmax_draft)")
    parser.add_argument("--no-shrink", action="store_true", help="do not search the smallest failing setting")
    parser.add_argument("--target", "--model", dest="model", metavar="MODEL", help="your own target instead of the "
                        "built tiny one: a Hugging Face folder (loaded offline), or for llama-cpp-python a .gguf file "
                        "or a built-in model name (resispec models list; fetched beforehand); needs --prompt-ids")
    parser.add_argument("--draft", "--draft-model", dest="draft_model", metavar="MODEL", help="your own draft (same "
                        "forms as --target) for the 'draft' options (default: --target itself)")
    parser.add_argument("--prompt-ids", "--prompts", dest="prompts", metavar="IDS;IDS", action=JoinAction,
                        help="prompts as token ids with --target, rows separated by "
                        "';', ids by ',' (equal lengths), e.g. '1,2,3;4,5,6'")
    parser.add_argument("--out", default="audit-out", help="report folder (default audit-out/, git-ignored)")


def _settings(texts):
    """``--settings`` (each occurrence ';'-separated, occurrences adding up; one string too) -> the setting items."""
    if texts is None:
        return None
    text = texts if isinstance(texts, str) else ";".join(texts)
    items = [part.strip() for part in text.split(";") if part.strip()]
    if not items:
        raise ValueError(f"--settings {text!r} names no setting; e.g. --settings 'T=1;temperature=0.7'")
    return items


def _gguf_or_dir(value, flag):
    """An existing file (a GGUF) or folder (Hugging Face), else a built-in real model's cached GGUF (never downloads).

    Returns ``(path, is_gguf)``; raises ``ValueError`` naming ``flag`` for anything else.
    """
    from pathlib import Path

    from resispec.decoding.fetch import MODELS, ModelNotFetchedError, fetch_model

    path = Path(value).expanduser()
    if path.exists():                            # a path wins over a built-in name spelled the same
        return path, path.is_file()
    if value in MODELS:
        try:
            return fetch_model(value, download=False, progress=False), True
        except ModelNotFetchedError as exc:
            raise ValueError(f"{flag} {value}: {exc}") from None
    raise ValueError(f"{flag} {value}: no such file or folder, and not a built-in model ({', '.join(sorted(MODELS))}; "
                     "resispec models list)")


def _user_models(args):
    """``TinyModels`` for --target / --draft / --prompt-ids (None without --target)."""
    if args.vocab is not None and args.model is not None:
        raise ValueError("--V sets the vocabulary of the built tiny models; --target brings its own: drop --V")
    if args.vocab is not None and args.vocab < 2:
        raise ValueError(f"--V must be >= 2 (the tiny models' vocabulary), got {args.vocab}")
    if args.model is None:
        if args.draft_model or args.prompts:
            raise ValueError("--draft and --prompt-ids go with --target (your own checkpoint)")
        return None
    import json

    import numpy as np

    from exactness.engines.tiny import TinyModels

    (target, is_gguf), (draft, draft_gguf) = (_gguf_or_dir(args.model, "--target"),
                                              _gguf_or_dir(args.draft_model or args.model, "--draft"))
    if is_gguf != draft_gguf:
        raise ValueError("--target and --draft must both be GGUF (files / built-in names) or both folders")
    if not is_gguf:
        for flag, d in (("--target", target), ("--draft", draft)):
            if not (d / "config.json").is_file():
                raise ValueError(f"{flag} {d} is not a Hugging Face checkpoint folder (no config.json) or a GGUF "
                                 "file")
    if not args.prompts:
        raise ValueError("--target needs --prompt-ids (token ids, e.g. '1,2,3;4,5,6')")
    try:
        rows = [[int(t) for t in r.replace(",", " ").split()] for r in args.prompts.split(";") if r.strip()]
        prompts = np.array(rows, dtype=np.int64)
    except (ValueError, OverflowError):
        raise ValueError(f"--prompt-ids {args.prompts!r}: give token ids, rows separated by ';' of equal length") from None
    if prompts.ndim != 2 or prompts.shape[1] == 0:
        raise ValueError(f"--prompt-ids {args.prompts!r}: rows must be non-empty and of equal length")
    if is_gguf:
        from exactness.engines.llamacpp import gguf_models

        return gguf_models(target, draft, prompts, args.seed)
    try:
        cfg = json.loads((target / "config.json").read_text())
        vocab = int(cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size") or 0)
        eos = cfg.get("eos_token_id")
        eos = int((eos[0] if eos else 0) if isinstance(eos, list) else eos or 0)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ValueError(f"--target {target}/config.json is not a model config ({type(exc).__name__}: {exc})") from None
    if vocab < 2 or prompts.max() >= vocab or prompts.min() < 0:
        raise ValueError(f"--prompt-ids: token ids must lie in [0, {vocab}) (the vocabulary of --target)")
    return TinyModels(target, draft, vocab, eos, prompts, args.seed)


#: Set in the audit's child process to the supervisor's process id (see :func:`_supervise`); a value left in a
#: user's environment names no parent of theirs, so it never turns supervision off.
CHILD = "RESISPEC_AUDIT_CHILD"
#: Seconds a child may keep running after its report is complete (an engine's non-daemon thread keeps a Python
#: process alive at exit) before the supervisor ends it; the report's status stands.
EXIT_GRACE = 60.0
#: The child's status for bad input it refused (the supervisor exits 2): a plain 2 from the child is the engine
#: ending the process (``os._exit(2)``), never read as bad input.
REFUSED = 202
#: Seconds of slack on every phase limit of the supervisor's watchdog (a Python start, an engine import).
WATCH_SLACK = 300.0


def _is_child() -> bool:
    return os.environ.get(CHILD) == str(os.getppid())


def _fresh_report(out, run_id: str):
    """This run's audit report under ``out`` (its ``run_id``; another run's report in the same folder is not it),
    with its path and modification time, or (None, None, None)."""
    import json
    from pathlib import Path

    from exactness.engines.audit import AuditReport

    for path in sorted(Path(out).glob("audit_*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            mtime = path.stat().st_mtime
            report = AuditReport.from_json(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if report.run_id == run_id:
            return report, path, mtime
    return None, None, None


def _phase_limit(args, report) -> float:
    """Seconds the watchdog allows without a report rewrite in the phase ``report`` is in (None: before the first
    report), beyond the audit's own in-process limits: those rest on SIGALRM, which an engine can block or ignore."""
    from exactness.engines import audit as A

    cell = args.cell_seconds if args.cell_seconds is not None else A.CELL_SECONDS
    hang = args.hang_seconds if args.hang_seconds is not None else A.HANG_SLACK
    if report is None:                    # starting Python, importing the engine, building the tiny models
        return hang + WATCH_SLACK + 120.0
    if report.status == A.PREPARING:      # converting the models (limited to PREPARE_SECONDS in the child)
        return A.PREPARE_SECONDS + hang + WATCH_SLACK
    return 4 * cell + 3 * hang + WATCH_SLACK   # one cell: its pilot, draws and checks, each limited in the child


def _die_with_parent() -> None:
    """In the child, before it runs: the kernel sends it SIGKILL when the supervisor dies (Linux PR_SET_PDEATHSIG;
    a decoder holding the GIL would starve :func:`_watch_parent`); elsewhere nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))   # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _watch_parent(ppid: int) -> None:
    """In the child: end this process group (the engine's workers with it) when the supervisor is gone."""
    import signal
    import threading
    import time

    def watch():
        while True:
            time.sleep(2.0)
            if os.getppid() != ppid:
                try:
                    os.killpg(os.getpgrp(), signal.SIGTERM)
                finally:
                    os._exit(3)

    threading.Thread(target=watch, name="resispec-audit-parent-watch", daemon=True).start()


def _supervise(args) -> int:
    """Run the audit in a child process and take the exit status from its report, not from the process.

    An engine may end the process itself (``os._exit(0)`` in its C code or its Python, at import, in its
    constructor, in a decoder, at exit): a report on disk says INCOMPLETE RUN, but a process exit of 0 would read as
    "every cell PASS" to CI, and an exit of 2 as bad input.  So the audit runs in a child (the same command, with
    ``RESISPEC_AUDIT_CHILD`` set to this process's id and ``RESISPEC_AUDIT_RUN`` to a fresh run id that its report
    records) before the engine is even imported, and whenever the child wrote this run's report the status is the
    report's: 1 a FAIL cell, 3 an incomplete run or an INCONCLUSIVE cell, 0 only for a complete report of passes.
    Without one: 2 when the child refused bad input (its status :data:`REFUSED`), else 3.  A watchdog ends the child
    (with its process group) when the report has not moved for its phase's limit (:func:`_phase_limit`: a hang the
    audit's SIGALRM limits could not stop), or :data:`EXIT_GRACE` seconds after the report is complete (an engine's
    non-daemon thread).  The child ends itself when this process dies.  Ctrl-C gives 130; SIGTERM ends the child.
    """
    import signal
    import subprocess
    import time
    import uuid
    from pathlib import Path

    from exactness.engines.audit import RUN_ENV

    start = time.time()
    run_id = uuid.uuid4().hex
    child = subprocess.Popen([sys.executable, "-m", "resispec.cli", *sys.argv[1:]],
                             env={**os.environ, CHILD: str(os.getpid()), RUN_ENV: run_id}, start_new_session=True,
                             preexec_fn=_die_with_parent)

    def end_child():
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(child.pid, sig)        # the engine's own workers go with it
            except (ProcessLookupError, PermissionError):
                pass
            try:
                return child.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
        return child.poll()

    def stop(signum, frame):  # a cancelled CI job: the child goes with us
        end_child()
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    report, moved, seen, mine, ended = None, start, None, None, None
    try:
        while True:
            try:
                rc = child.wait(timeout=1.0)
                try:
                    os.killpg(child.pid, signal.SIGTERM)   # workers the engine left in the child's group
                except (ProcessLookupError, PermissionError):
                    pass
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            stamp = max((p.stat().st_mtime for p in Path(args.out).glob("audit_*.json")), default=None)
            if stamp is not None and stamp != seen:      # a report moved: parse only then (not every second)
                seen = stamp
                got, _, mtime = _fresh_report(args.out, run_id)
                if got is not None and mtime != mine:    # this run's report moved: the run makes progress
                    report, mine, moved = got, mtime, now
            if report is not None and report.status == "complete" and now - moved > EXIT_GRACE:
                ended = (f"the engine kept the audit process running {EXIT_GRACE:.0f} s after its report was "
                         "complete (a thread it left running)")
            elif report is None or report.status != "complete":
                limit = _phase_limit(args, report)
                if now - moved > limit:
                    phase = "before its first report" if report is None else report.status
                    ended = (f"no progress for {limit:.0f} s ({phase}): a hang the audit's own time limits could "
                             "not stop (an engine blocking or ignoring SIGALRM)")
            if ended:
                rc = end_child()
                print(f"resispec audit: {ended}; ended it", file=sys.stderr)
                break
    except KeyboardInterrupt:
        end_child()
        return 130
    finally:
        signal.signal(signal.SIGTERM, old)
    report, path, _ = _fresh_report(args.out, run_id)
    if report is None:
        if rc == REFUSED:
            return 2
        print(f"resispec audit: INCOMPLETE RUN: the audit process ended (exit {rc}) before it wrote a report under "
              f"{args.out}", file=sys.stderr)
        return 3
    code = report.exit_code
    if code != rc and not ended:
        print(f"resispec audit: the audit process ended with exit {rc}, but its report ({path}) says "
              f"{'INCOMPLETE RUN (' + report.status + ')' if report.status != 'complete' else report.outcome}: "
              f"exit {code}", file=sys.stderr)
    return code


def run(args) -> int:

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")   # the engines' loaders, not the audit's lines
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from exactness.engines import audit as A

    from ._args import check_out

    if args.engine == "list":
        for r in A.engine_table():  # one block per engine: nothing cut, whatever the terminal width
            print(f"{r['engine']}\n  installed: {r['installed']}\n  install:   {r['install']}")
        return 0
    if args.summary:
        from pathlib import Path

        from resispec._io import atomic_write

        if len(args.summary) > 2:
            raise ValueError(f"--summary takes DIR and at most one PAGE, got {len(args.summary)} values")
        if any(not str(v).strip() for v in args.summary):
            raise ValueError("--summary: an empty path; give the folder of audit_*.json reports (and a PAGE)")
        if args.engine and args.engine != "list":
            raise ValueError(f"--summary runs nothing: drop the engine {args.engine!r}, or drop --summary to audit it")
        args.summary, args.docs = args.summary[0], (args.summary[1:] or [None])[0]
        if args.docs and Path(args.docs).resolve() == (Path(args.summary) / "audit.md").resolve():
            raise ValueError(f"--summary {args.summary} {args.docs}: the PAGE is DIR/audit.md, which the summary "
                             "itself writes; give another page (docs/audit.md)")
        if not Path(args.summary).is_dir():
            raise ValueError(f"--summary {args.summary} is not a folder of audit reports (audit_*.json)")
        table = A.summary(args.summary)
        if args.docs:                         # checked before anything is written
            if not Path(args.docs).is_file():
                raise ValueError(f"--summary {args.summary} {args.docs}: {args.docs} is not a file (a Markdown page "
                                 "with an <!-- audit-summary --> block)")
            page = Path(args.docs).read_text()
            head, sep, rest = page.partition("<!-- audit-summary -->")
            _, sep2, tail = rest.partition("<!-- /audit-summary -->")
            if not (sep and sep2):
                raise ValueError(f"--summary {args.summary} {args.docs}: {args.docs} has no <!-- audit-summary --> ... "
                                 "<!-- /audit-summary --> block")
        atomic_write(str(Path(args.summary) / "audit.md"), "# Engine audits on this machine\n\nRegenerate: "
                     f"`resispec audit --summary {args.summary}`; each row links its report.\n\n" + table)
        if args.docs:
            rel = table.replace("](audit_", "](../reports/audit_") if Path(args.summary).name == "reports" else table
            atomic_write(args.docs, head + sep + "\n" + rel + sep2 + tail)
        print(table)
        return 0
    if not args.engine:
        raise ValueError("name an engine (resispec audit list shows them)")
    if args.plant is not None and not args.plant.strip():
        raise ValueError("--plant names no bug; give one (exactness.engines.mutants.PLANTED) or leave it out")
    check_out(args.out, "--out", folder=True)
    args.out = os.path.abspath(args.out)       # an engine calling os.chdir cannot move the reports
    if getattr(args, "_program", False) and not _is_child():
        return _supervise(args)     # before the engine is imported: whatever it does, the report decides
    if _is_child():
        _watch_parent(os.getppid())
        try:
            return _audit(args)
        except (ValueError, TypeError, OSError) as exc:   # bad input refused: the supervisor exits 2
            print(f"resispec audit: error: {_flagged(str(exc))}", file=sys.stderr)
            return REFUSED
    return _audit(args)


#: the library's parameter -> the flag the user typed (a refusal names the flag)
_FLAGS = {"cell_seconds": "--cell-seconds", "new_tokens": "--new-tokens", "vocab": "--V", "tv": "--tv", "n": "--n",
          "seed": "--seed"}


def _flagged(msg: str) -> str:
    """``"n must be ..."`` -> ``"--n must be ..."``: the library names its parameter, the user typed a flag."""
    for name, flag in _FLAGS.items():
        if msg.startswith(name + " must "):
            return flag + msg[len(name):]
    return msg


def _audit(args) -> int:
    from exactness.engines import audit as A
    from exactness.engines.base import EngineUnavailable

    if args.hang_seconds is not None:
        import math

        if not (math.isfinite(args.hang_seconds) and 0 < args.hang_seconds <= 1e6):
            raise ValueError(f"--hang-seconds must be a number of seconds in (0, 1e6], got {args.hang_seconds}")
        A.HANG_SLACK = float(args.hang_seconds)
    kw = {k: v for k, v in dict(tv=args.tv, cell_seconds=args.cell_seconds, n=args.n, new_tokens=args.new_tokens,
                                vocab=args.vocab).items() if v is not None}
    import shlex

    command = ("resispec audit " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 and sys.argv[1] == "audit"
               else f"resispec audit {args.engine}")
    engine = A.get_engine(args.engine)
    if args.plant:
        from exactness.engines.mutants import planted

        engine = planted(engine, args.plant)
    # every argument checked before a model is read (a GGUF's metadata takes seconds): a typo is refused at once
    A.check_request(engine, settings=_settings(args.settings), options=args.options, seed=args.seed,
                    **{k: v for k, v in kw.items() if k != "vocab"})
    models = _user_models(args)
    import time

    started = time.time()
    try:
        report = A.audit(engine, settings=_settings(args.settings), options=args.options, seed=args.seed,
                         out=args.out, shrink=not args.no_shrink, command=command,
                         progress=lambda line: print(line, file=sys.stderr, flush=True), models=models, **kw)
    except EngineUnavailable as exc:
        raise ValueError(str(exc)) from None
    print(report.to_markdown())
    if report.write_error:
        print(f"INCOMPLETE: {report.write_error} (the report is printed above)", file=sys.stderr)
    else:
        from pathlib import Path

        stem = Path(args.out) / f"audit_{report.engine.replace('.', '_')}"
        made = [ext for ext in (".md", ".json", ".png") if stem.with_suffix(ext).exists()
                and stem.with_suffix(ext).stat().st_mtime >= started - 1]     # this run's, not a stale PNG
        print(f"wrote {stem}{made[0] if made else '.md'}" + (f" ({', '.join(made[1:])})" if made[1:] else ""),
              file=sys.stderr)
    return report.exit_code
