"""How often certify_decoder's batch checks catch a decoder wrong at ONE row position of its batches.

Usage (from the repository root):

    python benchmarks/tile_rows_power.py [--rows 8 16 256 512 1024 1536 2048 3072 4095 1024@4096] [--seeds 3]

Each row spec ``R`` (or ``R@B``: only in batches of ``B`` rows) plants
``exactness.decoder_mutants.Shifted``: an exact token chain (V = 4, 3 prompts, 3 new tokens) whose every token of
batch row ``R`` is shifted by one id.  It is certified at the default ``n`` under seeds 0.. and the table prints
how many seeds FAIL and the ``tile_rows`` p-value of each (nan where the tree has no such check): what
docs/decoders.md states of ``tile_rows``.  It measures the tree it sits in, so a copy in an older checkout measures
that checkout.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]        # this tree's packages, whatever is installed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=["8", "16", "256", "512", "1024", "1536", "2048", "3072", "4095",
                                                  "1024@4096"])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()

    import exactness
    from exactness.decoder_mutants import Shifted
    from _decoder_cases import setup

    model, target, prompts = setup()
    print("| row | FAIL / seeds | tile_rows p per seed | seconds |")
    print("|---|---|---|---|")
    for spec in args.rows:
        r, b = (int(x) for x in spec.split("@")) if "@" in spec else (int(spec), 0)
        when = (lambda r, b: lambda pr, B: (np.arange(B) == r) & ((B == b) if b else True))(r, b)
        fails, ps, t0 = 0, [], time.perf_counter()
        for seed in range(args.seeds):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cert = exactness.certify_decoder(Shifted(model, when), target, prompts, new_tokens=3, seed=seed)
            fails += not cert.passed
            ps.append(f"{cert.checks.get('tile_rows', float('nan')):.2g}")
        label = f"{r}" + (f" (batches of {b:,} only)" if b else "")
        print(f"| {label} | {fails} / {args.seeds} | {', '.join(ps)} | {time.perf_counter() - t0:.0f} |", flush=True)


if __name__ == "__main__":
    main()
