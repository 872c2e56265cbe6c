"""Same-process A/B of two torch ResiSpec implementations against rrs (interleaved, best of N).

The torch reserve solver changed on branch ``perf``; to compare with an older
version in ONE process (the machine is shared, separate runs are noisy)::

    git show main:resispec/torch_backend/resispec.py > /tmp/old_resispec.py
    python benchmarks/reserve_ab.py --old /tmp/old_resispec.py --B 64 --k 8

Prints the reserve evaluations per candidate of both, whether their decisions
agree (same uniforms), the largest acceptance-probability difference, and
each one's cost relative to rrs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="path to an older copy of resispec/torch_backend/resispec.py")
    ap.add_argument("--B", type=int, default=64)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import torch

    import resispec
    from resispec.torch_backend import resispec as new
    from simulators.families import get_family

    src = Path(args.old).read_text().replace('@register("resispec", backend="torch")', "")
    mod_path = Path(new.__file__).with_name("_ab_old_resispec.py")
    mod_path.write_text(src)               # inside the package so its relative imports resolve
    try:
        spec = importlib.util.spec_from_file_location("resispec.torch_backend._ab_old_resispec", mod_path)
        old = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = old
        spec.loader.exec_module(old)
    finally:
        mod_path.unlink()
    rng = np.random.default_rng(0)
    p, q = get_family("softmax_noise").sample(rng, n=args.B, V=args.V, temperature=1.0)
    c = resispec.draw_candidates(q, args.k, "iid", rng)
    P, Q, C = torch.from_numpy(p), torch.from_numpy(q), torch.from_numpy(c)
    u = rng.random((args.B, args.k + 1))
    vs = {"rrs": resispec.get_verifier("rrs", backend="torch"), "old": old.ResiSpecTorch(), "new": new.ResiSpecTorch()}
    ro, rn = vs["old"].verify(P, Q, C, uniforms=u), vs["new"].verify(P, Q, C, uniforms=u)
    print("same decisions:", bool((ro.tokens == rn.tokens).all() and (ro.accepted == rn.accepted).all()))
    diff = (vs["old"].chain(P, Q, C).accept_probs - vs["new"].chain(P, Q, C).accept_probs).abs().max()
    print(f"max |accept prob old - new|: {float(diff):.2e}")
    times = {n: [] for n in vs}
    for _ in range(args.repeats):                      # interleaved: load changes hit all three alike
        for n, v in vs.items():
            t = time.perf_counter()
            v.verify(P, Q, C, uniforms=u)
            times[n].append(time.perf_counter() - t)
    best = {n: min(t) for n, t in times.items()}
    print(f"B={args.B} V={args.V} k={args.k}: rrs {best['rrs']:.3f} s | old / rrs {best['old'] / best['rrs']:.2f} "
          f"| new / rrs {best['new'] / best['rrs']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
