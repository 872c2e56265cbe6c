"""GPU check of the torch backend: exactness, decision parity and bench-verify on CUDA float32.

Run on a machine with a CUDA device, from the repository root::

    python benchmarks/device_verify.py [--out DIR] [--repeats 5] [--numpy-B 16]

Steps (about 2-4 minutes on one H200; the numpy reference dominates):

1. exact law by enumeration of every torch verifier on CUDA in float32
   (V = 6, k = 3): max |law - p| must stay below 2e-6;
2. decision parity: CUDA float32 against the numpy float64 reference on the
   same uniforms (V = 32000, B = 256, k = 4); rows may differ only at
   near-ties (a uniform within 1e-5 of a threshold);
3. ``resispec bench-verify --device cuda --dtype float32`` at
   B = 256, V = 151,936, k in {2, 4, 8}: nodes/s and the ResiSpec-over-rrs
   cost ratio, numpy and torch side by side.

Writes ``DIR/device_verify.md`` (+ ``bench_verify_cuda.md/.json``); exits 1
if a check fails, 2 if no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "reports"), help="output folder (default: $OUT or reports)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--numpy-B", type=int, default=16)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)

    import torch

    import resispec
    from resispec.torch_backend import draw_candidates

    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        print("device_verify: no CUDA device visible", file=sys.stderr)
        return 2
    dev = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    lines = [f"# device_verify on {torch.cuda.get_device_name(dev) if dev.type == 'cuda' else dev}", "",
             f"torch {torch.__version__}", ""]
    ok = True

    # 1. exactness by enumeration on the device, float32
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(6))
    q = rng.dirichlet(np.ones(6))
    lines += [f"## exact law by enumeration ({dev} float32, V = 6, k = 3)", "", "| verifier | max abs(law - p) |",
              "|---|---|"]
    for name in resispec.available_verifiers("torch"):
        v = resispec.get_verifier(name, backend="torch", dtype=torch.float32, device=dev)
        err = float(np.max(np.abs(resispec.exact_output_law(v, p, q, 3) - p)))
        ok &= err < 2e-6
        lines.append(f"| {name} | {err:.2e} |")

    # 2. decision parity with the numpy reference (float32 on the device)
    from simulators.families import get_family

    P, Q = get_family("softmax_noise").sample(rng, n=256, V=32000)
    C = resispec.draw_candidates(Q, 4, "iid", rng)
    U = rng.random((256, 5))
    lines += ["", f"## decisions vs numpy float64 ({dev} float32, B = 256, V = 32000, k = 4)", "",
              "| verifier | rows differing | of which not near-ties (1e-5) |", "|---|---|---|"]
    for name in ["sps", "rrs", "kseq", "target_only", "resispec"]:
        vn = resispec.get_verifier(name)
        vt = resispec.get_verifier(name, backend="torch")
        rn = vn.verify(P, Q, C, uniforms=U)
        Pt = torch.from_numpy(P).to(dev, torch.float32)
        Qt = torch.from_numpy(Q).to(dev, torch.float32)
        rt = vt.verify(Pt, Qt, torch.from_numpy(C).to(dev), uniforms=torch.from_numpy(U).to(dev))
        diff = (rt.tokens.cpu().numpy() != rn.tokens) | (rt.accepted.cpu().numpy() != rn.accepted)
        a, r = vn._chain(P, Q, C)
        near = (np.abs(U[:, :4] - a) <= 1e-5).any(1)
        cdf = np.cumsum(r, 1)
        near |= (np.abs(cdf - U[:, 4:5] * cdf[:, -1:]) <= 1e-5).any(1)
        bad = int((diff & ~near).sum())
        ok &= bad == 0
        lines.append(f"| {name} | {int(diff.sum())} | {bad} |")

    # sampling on the device with a CUDA generator
    g = torch.Generator(device=dev).manual_seed(0)
    c = draw_candidates(torch.from_numpy(Q[:8]).to(dev, torch.float32), 4, "iid", g)
    ok &= c.device.type == dev.type

    # 3. bench-verify, CUDA float32
    t0 = time.time()
    cmd = [sys.executable, "-m", "resispec", "bench-verify", "--device", str(dev), "--dtype", "float32",
           "--repeats", str(args.repeats), "--B", "256", str(args.numpy_B), "--no-progress",
           "--out", os.path.join(args.out, "bench_verify_cuda.md")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    print(res.stdout, res.stderr, sep="\n")
    ok &= res.returncode == 0
    lines += ["", f"## bench-verify ({dev} float32)", "", "    " + " ".join(cmd[1:]), "", res.stdout,
              f"({time.time() - t0:.0f} s)", "", f"**all checks {'passed' if ok else 'FAILED'}**"]
    with open(os.path.join(args.out, "device_verify.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
