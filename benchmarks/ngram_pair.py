"""Statistics of the real stdlib n-gram draft/target pair (simulators.ngram).

Prints and writes ``reports/ngram_pair.md``: vocabulary, corpus sizes, build
time (cold, into a fresh temporary cache) against cache-load time, the time
of ``laws`` on a batch of contexts, held-out cross-entropy of target and
draft, and the distribution of TV(p, q) and of alpha* at real held-out
contexts for each temperature.

    python benchmarks/ngram_pair.py [--contexts 2000] [--seed 0] [--out reports/ngram_pair.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import resispec  # noqa: E402
from resispec._io import atomic_write as write_atomic  # noqa: E402
from simulators import ngram  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="reports/ngram_pair.md")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        old = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = tmp
        try:
            t0 = time.perf_counter()
            ngram.load_pair(use_cache=True)
            cold = time.perf_counter() - t0
            ngram.load_pair.cache_clear()
            t0 = time.perf_counter()
            pair = ngram.load_pair(use_cache=True)
            warm = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("XDG_CACHE_HOME", None)
            else:
                os.environ["XDG_CACHE_HOME"] = old
    rng = np.random.default_rng(args.seed)
    ctx, nxt = pair.heldout_contexts(args.contexts, rng, return_next=True)
    t0 = time.perf_counter()
    p, q = pair.laws(ctx)
    t_laws = time.perf_counter() - t0
    rows = np.arange(ctx.shape[0])
    xent_p = float(-np.log(p[rows, nxt]).mean())
    xent_q = float(-np.log(q[rows, nxt]).mean())
    info = pair.info
    lines = ["# Real n-gram pair (`simulators.ngram`)", "",
             f"Command: `python benchmarks/ngram_pair.py --contexts {args.contexts} --seed {args.seed}`", "",
             f"- Vocabulary V = {pair.V} (regex lexer for Python source, `<unk>` + top {pair.V - 1} tokens)",
             f"- Corpus: {info['corpus_chars']:,} characters of stdlib source; {info['train_files']} training files "
             f"({info['train_tokens']:,} tokens), {info['heldout_files']} held-out files "
             f"({info['heldout_tokens']:,} tokens)",
             f"- Target KN order {info['target_order']}, draft KN order {info['draft_order']}",
             f"- Build (cold, counts + cache write): {cold:.2f} s; load from cache: {warm:.3f} s "
             f"(ratio {cold / warm:.0f}x); `laws` on {args.contexts} contexts: {t_laws:.2f} s",
             f"- Held-out next-token cross-entropy: target {xent_p:.3f} nats, draft {xent_q:.3f} nats", "",
             "| T | mean TV(p,q) | TV p10 | p25 | median | p75 | p90 | mean alpha* k=1 | k=2 | k=4 | k=8 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for T in (0.7, 1.0, 1.5):
        pt, qt = ngram._temper(p, T), ngram._temper(q, T)
        tv = 0.5 * np.abs(pt - qt).sum(axis=1)
        qs = np.quantile(tv, [0.1, 0.25, 0.5, 0.75, 0.9])
        al = [float(np.mean(resispec.optimal_acceptance(pt, qt, k))) for k in (1, 2, 4, 8)]
        lines.append(f"| {T:g} | {tv.mean():.3f} | " + " | ".join(f"{x:.3f}" for x in qs) + " | "
                     + " | ".join(f"{a:.3f}" for a in al) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
