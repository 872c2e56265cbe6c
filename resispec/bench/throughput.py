"""Verification throughput: nodes verified per second, numpy and torch side by side.

For each backend, verifier and candidate count ``k`` the same batch of
``(p, q, candidates)`` (a ``softmax_noise`` pair family, V = 151,936 by
default) is verified through the public ``Verifier.verify``.  Backend by
backend: one untimed warm-up call per cell, then ``repeats`` rounds that
time every cell once, interleaved (a change of machine load hits all cells
of the backend alike).  The best time
gives nodes per second, and the cost of every verifier is reported relative
to ``rrs`` of the same backend and ``k`` (``resispec / rrs`` is the figure of
merit: target <= 2).

The numpy reference may verify a sub-batch (``numpy_B``); nodes per second
is a per-node rate either way.  Throughput claims are ratios measured in one
run.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from ._report import md_table, write_markdown_and_json

from .defaults import VERIFY_K as DEFAULT_K  # noqa: E402
from .defaults import VERIFY_VERIFIERS as DEFAULT_VERIFIERS  # noqa: E402
#: The reference of the cost ratios for each way of drafting the candidates.
DRAFTING_BASE = {"iid": "rrs", "without_replacement": "rrs_wor"}
BACKENDS = ("numpy", "torch")


@dataclass(frozen=True)
class BenchCell:
    """One measurement.

    Attributes
    ----------
    backend, verifier : str
    k, B : int
        Candidates per node; nodes per call.
    seconds : float
        Median wall time of one ``verify`` call (s).
    nodes_per_s : float
        ``B / seconds``.
    cost_vs_rrs : float or None
        ``seconds_per_node / base seconds_per_node`` in the same backend and ``k``; the base is ``rrs``
        (``rrs_wor`` when the candidates are drafted without replacement).
    acceptance_rate : float
        Fraction of the nodes that accepted a candidate (sanity check).
    reserve_iterations : int or None
        Evaluations of ``g`` in the last torch ResiSpec reserve solve.
    """

    backend: str
    verifier: str
    k: int
    B: int
    seconds: float
    nodes_per_s: float
    cost_vs_rrs: float | None
    acceptance_rate: float
    reserve_iterations: int | None = None


@dataclass(frozen=True)
class BenchResult:
    """All cells plus the configuration (``config``: V, dtype, device, repeats, ...)."""

    cells: list
    config: dict = field(default_factory=dict)

    def cell(self, backend, verifier, k) -> BenchCell | None:
        for c in self.cells:
            if (c.backend, c.verifier, c.k) == (backend, verifier, k):
                return c
        return None

    def ratio(self, backend, k, verifier="resispec") -> float | None:
        """Per-node cost of ``verifier`` over the base (``rrs``, or ``rrs_wor``) in ``backend`` at ``k``."""
        c = self.cell(backend, verifier, k)
        return None if c is None else c.cost_vs_rrs

    def table(self) -> str:
        """Markdown table: one row per (verifier, k), backends side by side."""
        backends = [b for b in BACKENDS if any(c.backend == b for c in self.cells)]
        ks = sorted({c.k for c in self.cells})
        names = [v for v in self.config.get("verifiers", DEFAULT_VERIFIERS)]
        base = self.config.get("base", "rrs")
        head = ["verifier", "k"] + [h for b in backends for h in (f"{b} nodes/s", f"{b} cost / {base}")]
        rows = []
        for name in names:
            for k in ks:
                row = [name, str(k)]
                for b in backends:
                    c = self.cell(b, name, k)
                    row += (["-", "-"] if c is None else
                            [f"{c.nodes_per_s:,.1f}", "-" if c.cost_vs_rrs is None else f"{c.cost_vs_rrs:.2f}"])
                rows.append(row)
        return "\n".join(md_table(head, rows))

    def to_dict(self) -> dict:
        return {"config": self.config, "cells": [asdict(c) for c in self.cells]}


def _torch_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.float64 if device == "cpu" else torch.float32
    table = {"float64": torch.float64, "float32": torch.float32}
    if dtype not in table:
        raise ValueError(f"dtype must be 'auto', 'float64' or 'float32', got {dtype!r}")
    return table[dtype]


def bench_verify(*, B: int = 256, V: int = 151_936, ks=DEFAULT_K, verifiers=DEFAULT_VERIFIERS,
                 backends=BACKENDS, device: str = "cpu", dtype: str = "auto", repeats: int = 3,
                 numpy_B: int | None = None, numpy_repeats: int | None = None, family: str = "softmax_noise",
                 temperature: float = 1.0, seed: int = 0, progress: bool = True,
                 torch_solvers=("auto",), drafting: str = "iid") -> BenchResult:
    """Measure nodes verified per second for every (backend, verifier, k).

    Parameters
    ----------
    B, V : int
        Nodes per ``verify`` call and vocabulary size (default 256 x 151,936).
    ks : sequence of int
        Candidate counts (default 2, 4, 8).
    verifiers : sequence of str
        Registry names; ``rrs`` is added (it is the reference of the ratios).
    backends : subset of {"numpy", "torch"}
    device : str
        Torch device (``"cpu"``, ``"cuda"``, ...).
    dtype : {"auto", "float64", "float32"}
        Torch working dtype; ``auto`` = float64 on CPU, float32 elsewhere.
        The numpy backend is always float64.
    repeats : int
        Timed calls per cell (best of; every cell gets one untimed warm-up
        call first, and the timed calls of a backend's cells are interleaved).
    numpy_B, numpy_repeats : int, optional
        Sub-batch and timed calls for the numpy reference; default ``B`` and
        ``max(repeats, 5)`` (its calls are short, so more of them are cheap
        and steady the best-of).
    family, temperature, seed
        Pair family of :mod:`simulators.families` and its draw.
    progress : bool
        tqdm progress bar.
    torch_solvers : sequence of {"auto", "fused", "newton", "sort"}
        Torch ResiSpec reserve solvers to time; each one other than
        ``"auto"`` adds a torch-only row ``resispec[solver=...]`` (e.g.
        ``("auto", "newton")`` puts the fused CPU kernel and the tensor-op
        Newton side by side in one run).
    drafting : {"iid", "without_replacement"}
        How the candidates are drawn.  ``without_replacement`` times the
        rules for successive-sampling drafts: the reference of the ratios is
        ``rrs_wor`` (instead of ``rrs``) and ``resispec`` is the
        without-replacement rule (:mod:`resispec.verifiers.resispec_wor`,
        target: at most 3x ``rrs_wor``); every verifier must draft that way.

    Returns
    -------
    BenchResult

    Raises
    ------
    ValueError
        Unknown backend, verifier, dtype or family; bad sizes; device unavailable.
    """
    import resispec
    from simulators.families import get_family

    verifiers, opts, extra, ks, numpy_B, numpy_repeats = _check_request(
        B=B, V=V, ks=ks, verifiers=verifiers, backends=backends, device=device, repeats=repeats, numpy_B=numpy_B,
        numpy_repeats=numpy_repeats, torch_solvers=torch_solvers, drafting=drafting)
    base_name = DRAFTING_BASE[drafting]
    rng = np.random.default_rng(seed)
    p, q = get_family(family).sample(rng, n=B, V=V, temperature=temperature)       # (B, V) float64 each
    cands = {k: resispec.draw_candidates(q, k, drafting, rng) for k in ks}           # (B, k) int64
    uniforms = {k: rng.random((B, k + 1)) for k in ks}                               # (B, k + 1) float64

    config = {"B": B, "V": V, "ks": ks, "verifiers": verifiers + extra, "backends": list(backends), "family": family,
              "temperature": temperature, "seed": seed, "repeats": repeats, "numpy_B": numpy_B,
              "drafting": drafting, "base": base_name,
              "numpy_repeats": numpy_repeats,
              "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
              "cpu_count": os.cpu_count()}
    torch_side = _torch_side(p, q, device, dtype, drafting, config) if "torch" in backends else None
    if any(n.startswith("resispec") for n in verifiers + extra):
        from .._reserve_fused import warmup

        # one-time JIT compile / cache load of the fused reserve kernel, kept out of the timings
        config["reserve_kernel_warmup_s"] = round(warmup(), 3)
    jobs = [(b, n, k) for b in backends for k in ks for n in verifiers + (extra if b == "torch" else [])]
    calls = {}   # job -> (nodes, fn, sync, verifier, repeats)
    for backend, name, k in jobs:
        if backend == "numpy":
            v = resispec.get_verifier(name, **opts[name])
            n = numpy_B
            args = (p[:n], q[:n], cands[k][:n])
            fn = lambda v=v, args=args, u=uniforms[k][:n]: v.verify(*args, uniforms=u)  # noqa: E731
            calls[(backend, name, k)] = (n, fn, None, v, numpy_repeats)
        else:
            torch, dev, tdt, sync, P, Q = torch_side
            base, _, opt = name.partition("[solver=")
            v = resispec.get_verifier(base, backend="torch", **({"solver": opt.rstrip("]")} if opt else {}),
                                      **opts.get(base, {}))
            C = torch.from_numpy(cands[k]).to(dev)
            gen = torch.Generator(device=dev).manual_seed(seed)
            fn = lambda v=v, C=C, gen=gen: v.verify(P, Q, C, gen)  # noqa: E731
            calls[(backend, name, k)] = (B, fn, sync, v, repeats)
    times, outs = _time_calls(jobs, calls, backends, progress)
    return BenchResult(cells=_cells(jobs, calls, times, outs, base_name), config=config)


def _check_request(*, B, V, ks, verifiers, backends, device, repeats, numpy_B, numpy_repeats, torch_solvers,
                   drafting):
    """:func:`bench_verify`'s arguments checked: ``(verifiers, opts, extra, ks, numpy_B, numpy_repeats)``
    (``verifiers`` with the base first; ``opts``: each one's registry options; ``extra``: the torch-only
    ``resispec[solver=...]`` rows).  ValueError naming the argument."""
    import resispec

    for name, val in (("B", B), ("V", V), ("repeats", repeats)):
        if isinstance(val, bool) or not isinstance(val, int) or val < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")
    unknown = set(backends) - set(BACKENDS)
    if unknown or not backends:
        raise ValueError(f"backends must be a non-empty subset of {BACKENDS}, got {list(backends)}")
    if drafting not in DRAFTING_BASE:
        raise ValueError(f"drafting must be one of {sorted(DRAFTING_BASE)}, got {drafting!r}")
    verifiers = list(dict.fromkeys([DRAFTING_BASE[drafting], *verifiers]))
    for name in verifiers:
        if name not in resispec.available_verifiers():
            raise ValueError(f"unknown verifier {name!r}; choose from {resispec.available_verifiers()}")
    opts = {n: ({"drafting": drafting} if n == "resispec" and drafting != "iid" else {}) for n in verifiers}
    wrong = [n for n in verifiers if resispec.get_verifier(n, **opts[n]).drafting not in (drafting, "any")]
    if wrong:
        raise ValueError(f"verifiers {wrong} do not draft {drafting!r}; with drafting={drafting!r} time "
                         + ("rrs_wor, target_only and resispec" if drafting != "iid" else "the iid rules"))
    torch_solvers = list(dict.fromkeys(torch_solvers))
    extra = [f"resispec[solver={s}]" for s in torch_solvers if s != "auto"]
    if extra and drafting != "iid":
        raise ValueError("torch_solvers other than 'auto' are the iid reserve's solvers; drop them with "
                         "drafting='without_replacement'")
    if extra:
        if "torch" not in backends:
            raise ValueError("torch_solvers other than 'auto' need the torch backend")
        from ..verifiers.reserve import SOLVERS

        bad = [s for s in torch_solvers if s not in SOLVERS]
        if bad:
            raise ValueError(f"torch_solvers must be among {SOLVERS}, got {bad}")
    ks = list(dict.fromkeys(int(k) for k in ks))
    if any(k < 1 for k in ks):
        raise ValueError(f"k values must be >= 1, got {ks}")
    for name, val in (("numpy_B", numpy_B), ("numpy_repeats", numpy_repeats)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {val!r}")
    numpy_B = B if numpy_B is None else min(int(numpy_B), B)
    numpy_repeats = max(repeats, 5) if numpy_repeats is None else int(numpy_repeats)
    if "torch" in backends:
        import torch

        try:
            torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {device!r} is not a torch device ({exc}); use cpu, cuda or cuda:N") from exc
    return verifiers, opts, extra, ks, numpy_B, numpy_repeats


def _torch_side(p, q, device, dtype, drafting, config):
    """``(torch, device, dtype, sync, P, Q)``: the laws (B, V) on the torch device in its working dtype; records the
    device, dtype, torch version, threads and GPU in ``config``."""
    import resispec
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
    tdt = _torch_dtype(dtype, dev.type)
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    P = torch.from_numpy(p).to(device=dev, dtype=tdt).contiguous()
    Q = torch.from_numpy(q).to(device=dev, dtype=tdt).contiguous()
    if drafting == "iid":
        config["torch_resispec_solver"] = resispec.get_verifier("resispec_myopic", backend="torch").solver_for(P)
    config.update({"device": str(dev), "dtype": str(tdt).replace("torch.", ""),
                   "torch": torch.__version__, "threads": torch.get_num_threads(),
                   "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None})
    return torch, dev, tdt, sync, P, Q


def _time_calls(jobs, calls, backends, progress):
    """``(times, outs)``: each job's timed seconds (a list) and its last output.  Per backend (ratios are within
    a backend; switching backends leaves the other one's thread pool spinning for a while): one untimed warm-up
    call per cell (allocator, page faults, kernel caches), then rounds that time every cell once each, interleaved
    so that a load change hits all cells alike."""
    rounds = max(c[4] for c in calls.values())
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs) + sum(c[4] for c in calls.values()), desc="bench-verify", unit="call",
                   leave=False, disable=None)             # None: no bar off a terminal
    times = {job: [] for job in jobs}
    outs = {}
    for backend in backends:
        block = [job for job in jobs if job[0] == backend]
        for r in range(-1, rounds):
            for job in block:
                n, fn, sync, v, reps = calls[job]
                if r >= reps:
                    continue
                if bar:
                    bar.set_postfix_str(f"{job[0]} {job[1]} k={job[2]}" + (" warm-up" if r < 0 else ""))
                t0 = time.perf_counter()
                outs[job] = fn()
                if sync:
                    sync()
                if r >= 0:
                    times[job].append(time.perf_counter() - t0)
                if bar:
                    bar.update(1)
    if bar:
        bar.close()
    return times, outs


def _cells(jobs, calls, times, outs, base_name) -> list:
    """One :class:`BenchCell` per job: best time, nodes per second, cost per node relative to ``base_name`` in the
    same backend and k, acceptance rate, the torch reserve's iterations."""
    raw = {}
    for job in jobs:
        n, fn, sync, v, reps = calls[job]
        out = outs[job]
        if job[0] == "numpy":
            acc, its = float(np.mean(out.accepted >= 0)), None
        else:
            acc = float((out.accepted >= 0).double().mean())
            info = getattr(v, "last_reserve", None)
            its = None if info is None else info.iterations
        raw[job] = (n, min(times[job]), acc, its)
    cells = []
    for (backend, name, k), (n, sec, acc, its) in raw.items():
        rn, rsec, _, _ = raw[(backend, base_name, k)]
        cells.append(BenchCell(backend=backend, verifier=name, k=k, B=n, seconds=sec, nodes_per_s=n / sec,
                               cost_vs_rrs=(sec / n) / (rsec / rn), acceptance_rate=acc,   # (s/node) / (s/node of base)
                               reserve_iterations=its))
    return cells


def write_reports(result: BenchResult, path: str, *, command: str | None = None) -> tuple[str, str]:
    """Write the markdown table to ``path`` and JSON beside it (atomically). Returns both paths."""
    c = result.config
    lines = ["# bench-verify: nodes verified per second", ""]
    if command:
        lines += ["Command:", "", f"    {command}", ""]
    has_numpy = "numpy" in c["backends"]
    lines += [f"B = {c['B']} nodes" + (f" (numpy: {c['numpy_B']})" if has_numpy else "")
              + f", V = {c['V']:,}, family `{c['family']}` T = {c['temperature']}; best of {c['repeats']}"
              + (f" (numpy: {c['numpy_repeats']})" if has_numpy else "")
              + " calls per cell, a backend's cells interleaved, after one untimed warm-up call each.",
              f"torch: {c.get('torch', '-')}, device {c.get('device', '-')}, dtype {c.get('dtype', '-')}, "
              f"threads {c.get('threads', '-')}" + (f", GPU {c['gpu']}" if c.get("gpu") else "")
              + (f"; {c['cpu_count']} CPUs, 1-min load average {c['load_average_1min']:.1f} at start"
                 if c.get("load_average_1min") is not None else ""), "",
              result.table(), ""]
    if c.get("drafting", "iid") != "iid":
        lines += [f"Candidates drafted without replacement. `cost / rrs_wor`: time per node relative to `rrs_wor` in "
                  "the same backend and k (target for `resispec`: at most 3). `resispec` is the without-replacement "
                  "rule: numpy runs its non-last steps in the compiled kernel of `resispec._wor_fused` (rows without "
                  "a rank-one leftover plan go to the numpy reference); the torch twin runs the same kernel on the "
                  "host.", ""]
        return write_markdown_and_json(path, "\n".join(lines), result.to_dict())
    lines += ["`cost / rrs`: time per node relative to `rrs` in the same backend and k "
              "(ResiSpec target: at most 2).", "",
              "ResiSpec reserves: `resispec` (the default) and `resispec_lookahead` are the look-ahead (the compiled "
              "kernel of `resispec._lookahead_fused`, one schedule solve a node); `resispec_myopic` is the fixed "
              "point, numpy: the fused per-row kernel of `resispec._reserve_fused` (`solver=\"auto\"`), "
              f"torch: `{c.get('torch_resispec_solver', '-')}` (`solver=\"auto\"`). "
              + (f"The kernel's one-time JIT compile / cache load ({c['reserve_kernel_warmup_s']} s) ran before "
                 "timing." if c.get("reserve_kernel_warmup_s") is not None else ""), ""]
    md = "\n".join(lines)
    return write_markdown_and_json(path, md, result.to_dict())
