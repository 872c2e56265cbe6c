"""The house's measures (issue 39), before and after, side by side in one table.

Usage (from the repository root):

    python benchmarks/house_measures.py [--base REV] [--after REV] [--repeat 5] [--out reports/house_measures.md]

``--base`` and ``--after`` are git revisions (``--after`` defaults to the working tree).  Each is exported with
``git archive`` into a temporary folder and measured by the SAME child script with that folder first on
``sys.path`` (imports never mix the two trees), so the two columns are measured in one run on one machine.

Measures (over the three import packages ``resispec/``, ``exactness/``, ``simulators/``):

- source lines (non-blank), and the share of them that are comments;
- functions (``def`` and methods, by ``ast``) over 50 and over 100 lines, and the longest one; the same without
  the docstring's lines (a function documented at length is not orchestration);
- torch lines mirroring numpy: lines of ``resispec/torch_backend/`` whose normalised form (``torch.`` -> ``np.``,
  whitespace dropped, at least 20 characters) also occurs in the numpy code of ``resispec/`` -- a lower bound on
  the code written twice (a renamed variable hides a twin);
- public certify entry points: top-level public functions named ``certify_*``, ``assert_*`` or ``validate_*`` in
  ``exactness``;
- CLI subcommand parsers (before: every name that parses, each kind its own; after: a verb's kinds share one
  parser, ``resispec/commands/_verb.py``, the hyphenated names still parse), those listed by ``resispec --help``
  (a verb's subjects folded under it), options (every optional flag of every parser, summed: an option shared by
  a verb's kinds counts once) and distinct option names;
- verifier cost: microseconds per node of ``verify`` (B = 64 nodes, V = 32,000, k = 4 iid candidates, shared
  uniforms; best of ``--repeat`` calls in each of ``--repeat`` fresh interpreters per tree, the trees interleaved;
  one torch thread) for ``rrs``, ``kseq``, ``target_only`` and ``resispec`` on numpy and torch, and each one's cost
  relative to ``rrs`` on the same backend (``bench-verify``'s ratio);
- seconds to ``import exactness`` and to ``resispec --help`` in a fresh interpreter (median of ``--repeat`` runs,
  after one untimed run that compiles the tree's ``.pyc`` files; the two trees interleaved so machine load falls on
  both alike; wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("resispec", "exactness", "simulators")

#: The child: measures the tree in sys.argv[1] (already first on sys.path), prints one JSON object.
CHILD = r'''
import ast, json, re, sys
from pathlib import Path

root = Path(sys.argv[1])
sys.path.insert(0, str(root))
packages = ("resispec", "exactness", "simulators")
out = {"lines": 0, "comment_lines": 0, "functions": 0, "over_50": 0, "over_100": 0, "longest": ["", 0],
       "over_100_code": 0, "longest_code": ["", 0]}
numpy_lines, torch_lines = set(), []


def norm(line):
    s = line.split("#", 1)[0].strip()
    s = s.replace("torch.", "np.").replace("xp.", "np.")
    return re.sub(r"\s+", "", s)


for pkg in packages:
    for path in sorted((root / pkg).rglob("*.py")):
        text = path.read_text()
        rel = path.relative_to(root).as_posix()
        lines = [l for l in text.splitlines() if l.strip()]
        out["lines"] += len(lines)
        out["comment_lines"] += sum(l.strip().startswith("#") for l in lines)
        in_torch = rel.startswith("resispec/torch_backend/")
        for l in lines:
            n = norm(l)
            if len(n) < 20:
                continue
            (torch_lines.append(n) if in_torch else numpy_lines.add(n) if rel.startswith("resispec/") else None)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                out["functions"] += 1
                out["over_50"] += size > 50
                out["over_100"] += size > 100
                if size > out["longest"][1]:
                    out["longest"] = [f"{rel}:{node.name}", size]
                body = node.body[0] if node.body else None
                doc = (body.end_lineno - body.lineno + 1 if isinstance(body, ast.Expr)
                       and isinstance(body.value, ast.Constant) and isinstance(body.value.value, str) else 0)
                out["over_100_code"] += size - doc > 100
                if size - doc > out["longest_code"][1]:
                    out["longest_code"] = [f"{rel}:{node.name}", size - doc]
out["torch_lines"] = len(torch_lines)
out["torch_mirroring"] = sum(n in numpy_lines for n in torch_lines)

entry = set()
for path in sorted((root / "exactness").rglob("*.py")):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and re.match(r"(certify|assert|validate)_", node.name):
            entry.add(node.name)
out["entry_points"] = sorted(entry)

from resispec.cli import build_parser
import argparse
parser = build_parser()
subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0].choices
opts = []
for name, sp in subs.items():
    for a in sp._actions:
        opts += [o for o in a.option_strings if o.startswith("--") and o != "--help"][:1]
out["subcommands"] = len(subs)
try:                                        # trees before the verbs (issue 39): every subcommand was listed
    from resispec.cli import verbs
    kinds = {n for ks in verbs().values() for n in ks.values() if "-" in n} & set(subs)   # a kind with a parser
except ImportError:
    kinds = set()
out["listed"] = len(subs) - len(kinds)
out["options"] = len(opts)
out["option_names"] = len(set(opts))
print(json.dumps(out))
'''

#: The verifier-cost child: prints {"name/backend": seconds per node}, best of argv[1] calls per cell.
VERIFY_CHILD = r'''
import json, sys, time
import numpy as np
import torch
from resispec import get_verifier
from resispec.sampling import draw_candidates

torch.set_num_threads(1)
reps = int(sys.argv[1])
B, V, k = 64, 32000, 4
rng = np.random.default_rng(0)
logits = 3.0 * rng.standard_normal((B, V))
def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
p, q = softmax(logits), softmax(logits + rng.standard_normal((B, V)))
c = draw_candidates(q, k, "iid", rng)
u = rng.random((B, k + 1))
out = {}
for backend in ("numpy", "torch"):
    args = (p, q, c, u) if backend == "numpy" else tuple(torch.from_numpy(a) for a in (p, q, c, u))
    for name in ("rrs", "kseq", "target_only", "resispec"):
        v = get_verifier(name, backend=backend)
        v.verify(*args[:3], uniforms=args[3])                     # warm-up (numba compiles, caches fill)
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            v.verify(*args[:3], uniforms=args[3])
            best = min(best, time.perf_counter() - t0)
        out[f"{name}/{backend}"] = best / B
print(json.dumps(out))
'''

TIMED = {"import exactness": [sys.executable, "-c", "import exactness"],
         "resispec --help": [sys.executable, "-c", "import sys; from resispec.cli import main; "
                                                   "sys.argv = ['resispec', '--help']; main(['--help'])"]}


def export(rev: str | None, dest: Path) -> Path:
    """The tree at ``rev`` (None: the working tree's tracked and untracked files) under ``dest``."""
    dest.mkdir(parents=True)
    if rev is None:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", *PACKAGES], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.split()
        for f in files:
            if (ROOT / f).is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                (dest / f).write_bytes((ROOT / f).read_bytes())
        return dest
    data = subprocess.run(["git", "archive", "--format=tar", rev, *PACKAGES], cwd=ROOT, check=True,
                          capture_output=True).stdout
    tar = dest / "tree.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    return dest


def run_child(tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    res = subprocess.run([sys.executable, "-c", CHILD, str(tree)], env=env, capture_output=True, text=True,
                         cwd=tree)
    if res.returncode:
        raise SystemExit(f"measuring {tree} failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def timings(trees: dict, repeat: int) -> dict:
    """Median wall seconds of each timed command per tree, the trees interleaved run by run."""
    got = {label: {k: [] for k in TIMED} for label in trees}
    for label, tree in trees.items():  # untimed: the first run of a fresh tree compiles its .pyc files
        for cmd in TIMED.values():
            subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, capture_output=True, check=True)
    for _ in range(repeat):
        for label, tree in trees.items():
            env = {**os.environ, "PYTHONPATH": str(tree)}
            for key, cmd in TIMED.items():
                t0 = time.perf_counter()
                subprocess.run(cmd, env=env, cwd=tree, capture_output=True, check=True)
                got[label][key].append(time.perf_counter() - t0)
    return {label: {k: statistics.median(v) for k, v in d.items()} for label, d in got.items()}


def verify_costs(trees: dict, repeat: int) -> dict:
    """Seconds per node of each ``name/backend`` per tree: the best over ``repeat`` interleaved fresh interpreters."""
    got = {label: {} for label in trees}
    for _ in range(repeat):
        for label, tree in trees.items():
            res = subprocess.run([sys.executable, "-c", VERIFY_CHILD, str(repeat)], cwd=tree, capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": str(tree)})
            if res.returncode:
                raise SystemExit(f"timing verify in {tree} failed:\n{res.stderr[-2000:]}")
            for key, sec in json.loads(res.stdout.strip().splitlines()[-1]).items():
                got[label][key] = min(sec, got[label].get(key, float("inf")))
    return got


def table(base_rev: str, after_rev: str, m: dict, t: dict, cost: dict) -> str:
    b, a = m["base"], m["after"]
    rows = [("source lines (non-blank)", b["lines"], a["lines"]),
            ("comment lines, % of source", f"{100 * b['comment_lines'] / b['lines']:.1f}",
             f"{100 * a['comment_lines'] / a['lines']:.1f}"),
            ("functions", b["functions"], a["functions"]),
            ("functions over 50 lines", b["over_50"], a["over_50"]),
            ("functions over 100 lines", b["over_100"], a["over_100"]),
            ("longest function (lines)", f"{b['longest'][1]} `{b['longest'][0]}`",
             f"{a['longest'][1]} `{a['longest'][0]}`"),
            ("functions over 100 lines, docstring not counted", b["over_100_code"], a["over_100_code"]),
            ("longest function, docstring not counted", f"{b['longest_code'][1]} `{b['longest_code'][0]}`",
             f"{a['longest_code'][1]} `{a['longest_code'][0]}`"),
            ("torch backend lines (>= 20 chars)", b["torch_lines"], a["torch_lines"]),
            ("  of which mirror a numpy line", b["torch_mirroring"], a["torch_mirroring"]),
            ("public certify_* / assert_* / validate_*", len(b["entry_points"]), len(a["entry_points"])),
            ("CLI subcommand parsers (a verb's kinds in one: after issue 39's one option set per verb)",
             b["subcommands"], a["subcommands"]),
            ("  listed by `resispec --help` (verbs)", b["listed"], a["listed"]),
            ("CLI options (summed over the parsers)", b["options"], a["options"]),
            ("distinct option names", b["option_names"], a["option_names"])]
    rows += [(f"seconds to `{k}` (median)", f"{t['base'][k]:.2f}", f"{t['after'][k]:.2f}") for k in TIMED]
    for key in cost["base"]:
        rrs = key.split("/")[0] == "rrs"
        cells = [f"{1e6 * cost[s][key]:.1f}" + ("" if rrs else f" ({cost[s][key] / cost[s]['rrs/' + key.split('/')[1]]:.2f}x rrs)")
                 for s in ("base", "after")]
        rows.append((f"verify us/node `{key}` (after / before {cost['after'][key] / cost['base'][key]:.2f})", *cells))
    lines = [f"| measure | before (`{base_rev}`) | after (`{after_rev}`) |", "|---|---|---|"]
    lines += [f"| {name} | {x} | {y} |" for name, x, y in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="2881f9f", help="git revision measured as 'before' (default 2881f9f: the "
                                                      "last commit before issue 39's first piece)")
    ap.add_argument("--after", default=None, help="git revision measured as 'after' (default: the working tree)")
    ap.add_argument("--repeat", type=int, default=5, help="fresh interpreters per timed command and tree")
    ap.add_argument("--out", default=None, help="also write the table (with the command and load) to this file")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    for flag, rev in (("--base", args.base), ("--after", args.after)):
        if rev is not None and subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                                              cwd=ROOT, capture_output=True).returncode:
            ap.error(f"{flag} {rev!r} is not a git revision of this repository (e.g. HEAD~3 or a commit hash)")
    if args.out and not Path(args.out).resolve().parent.is_dir():
        ap.error(f"--out {args.out!r}: folder {str(Path(args.out).resolve().parent)!r} does not exist; create it or "
                 "pick another path")
    with tempfile.TemporaryDirectory(prefix="house-") as tmp:
        trees = {"base": export(args.base, Path(tmp) / "base"), "after": export(args.after, Path(tmp) / "after")}
        m = {label: run_child(tree) for label, tree in trees.items()}
        load = os.getloadavg()[0]
        t = timings(trees, args.repeat)
        cost = verify_costs(trees, args.repeat)
    after = args.after or "working tree"
    text = table(args.base, after, m, t, cost)
    print(text)
    print(f"\nentry points before: {', '.join(m['base']['entry_points'])}\nentry points after: "
          f"{', '.join(m['after']['entry_points'])}\nload average at the start of the timings: {load:.1f}")
    if args.out:
        cmd = "python benchmarks/house_measures.py " + " ".join(argv if argv is not None else sys.argv[1:])
        tmp = Path(args.out).with_name(Path(args.out).name + ".tmp")
        tmp.write_text(f"# The house's measures (issue 39)\n\n`{cmd.strip()}` ({os.cpu_count()} cores, "
                                  f"load average {load:.1f} at the start of the timings; times are wall seconds in "
                                  f"a fresh interpreter, median of {args.repeat}, the two trees interleaved).\n\n"
                                  + text + "\n")
        tmp.replace(args.out)  # atomic: a stopped run leaves no half-written report
    return 0


if __name__ == "__main__":
    sys.exit(main())
