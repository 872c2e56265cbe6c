"""Reserve solvers side by side: agreement with the float64 sort and passes of the fused kernel.

For each family and gamma, draws ``--B`` pairs at ``--V`` tokens and prints,
in one table, ``max |lambda - lambda_sort|`` for the fused kernel and the
tensor-op Newton (float64 and float32) and the float32 sort, plus the mean
passes per row of the fused kernel cold and warm-started from the exact
answer of the previous candidate's problem (``lambda_sort - 0.05``).

    python benchmarks/reserve_agreement.py                 # V = 151,936, B = 16
    python benchmarks/reserve_agreement.py --V 32000 --B 64
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resispec._reserve_fused import solve_reserve_rows  # noqa: E402
from resispec.verifiers.resispec import solve_reserve  # noqa: E402
from simulators import get_family  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--families", default="softmax_noise,zipf,shifted")
    ap.add_argument("--gammas", default="0.5,1.0")
    args = ap.parse_args(argv)
    import torch

    from resispec.verifiers.reserve import solve_reserve as solve   # the one definition, on tensors here

    cols = ["fused f64", "newton f64", "fused f32", "newton f32", "sort f32", "passes cold", "passes warm"]
    print(f"V = {args.V:,}, B = {args.B}; max |lambda - lambda_sort(float64)| and fused-kernel passes per row")
    print("| family | gamma | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    worst = dict.fromkeys(cols[:5], 0.0)
    for fam in args.families.split(","):
        p, q = get_family(fam).sample(np.random.default_rng(0), n=args.B, V=args.V)
        P, Q = torch.from_numpy(p), torch.from_numpy(q)
        p32, q32 = p.astype(np.float32), q.astype(np.float32)
        for gamma in (float(g) for g in args.gammas.split(",")):
            want = solve_reserve(p, q, q, gamma, method="sort")
            lam, _, cold, _, _ = solve_reserve_rows(p, q, q, gamma)
            _, _, warm, _, _ = solve_reserve_rows(p, q, q, gamma, init=np.clip(want - 0.05, 0.0, gamma))
            got = {"fused f64": lam,
                   "newton f64": solve(P, Q, Q, gamma, method="newton").numpy(),
                   "fused f32": solve_reserve_rows(p32, q32, q32, gamma)[0],
                   "newton f32": solve(P.float(), Q.float(), Q.float(), gamma, method="newton").double().numpy(),
                   "sort f32": solve(P.float(), Q.float(), Q.float(), gamma, method="sort").double().numpy()}
            err = {k: float(np.abs(v - want).max()) for k, v in got.items()}
            for k, v in err.items():
                worst[k] = max(worst[k], v)
            print(f"| {fam} | {gamma} | " + " | ".join(f"{err[k]:.1e}" for k in cols[:5])
                  + f" | {cold.mean():.1f} | {warm.mean():.1f} |")
    print("worst: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
