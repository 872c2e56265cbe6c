"""Harness fast paths at a real vocabulary: which path each built-in verifier takes, draws/s, the budget for TV 1e-3.

For every built-in verifier (``resispec.available_verifiers()`` plus ResiSpec for without-replacement
drafts) at one node with V = 151,936 (Qwen2.5's vocabulary), k = 4, and a black-box ``rrs`` (a wrapper
with ``drafting`` and ``verify(p, q, c, rng)`` only, declaring ``handles_shared_nodes``) at V = 32,000,
side by side in one run:

- the sampling path ``NodeSampler`` picks (``table``, a fast path of ``exactness.fast_paths``, or
  ``generic``: O(V) ``verify`` per draw);
- draws per CPU second (``time.process_time``, one process, after a warm-up call that pays the
  first run-time recheck; the faster of two timed calls on a fast path), and the cost of that first call.
  The timed call is ``--draws`` (default 2^21 =
  two of the sampler's 2^20-draw chunks, each rechecking 4 draws through ``verify`` and ``chain``, as the
  first 16 chunks of a long run do): shorter calls are dominated by the O(V) recheck (at 65,536 draws
  ``rrs_wor`` read 4.7e5 draws/s, at 2^21 1.8e6);
- the draws ``certify_verifier(..., tv=1e-3)`` plans (``exactness.budget.plan_for_tv``, alpha 1e-3,
  power 0.99) and the projected CPU time on 1 and 2 workers (``workers=2`` splits the draws over two
  processes; wall time on a shared machine is longer by the load).

ResiSpec for without-replacement drafts has no fast path (its residual after a rejection depends on the
rejected token through an O(V) transport plan, so every distinct rejected prefix costs O(V); see
``exactness/fast_paths.py``).  Its row is followed by the coupled route (``exactness.certify_coupled``: the
verifier's ``verify`` against the rule's ``chain`` on the same coins, TV <= P(mismatch), about
ln(1/alpha) / TV clean draws instead of ~1/TV^2): coupled draws per CPU second with the rule's reference
(numpy) solver and with its compiled solver as the reference, and the projected time for TV 1e-3.  Then the
stepwise route (``exactness.certify_stepwise``: the rule declares each step in O(V) form, every state a
run visits is checked to emit its target and ``verify`` is coupled to the declared chain, so TV(verify, p)
<= P(event) and 0 events in ln(1/alpha) / TV draws bound it, without trusting the rule's proof): draws per
CPU second over the first ``--coupled-draws`` draws (each a fresh state: pessimistic, a long run reuses
states).

The node: ``p`` Zipf(1) over the vocabulary, ``q = 0.7 p + 0.3 perm(p)`` (a random permutation, seed 0),
so the acceptance is high and the residual is rarely drawn -- the pass that matters is the O(k log V)
candidate and accept step.  ``--certify NAME`` also runs ``certify_verifier(verifier, p, q, 4, tv=1e-3,
workers=2, tree=False)`` for that verifier and prints its wall and CPU time and verdict (minutes);
``--certify stepwise_wor`` runs ``certify_stepwise(resispec[drafting=without_replacement], p, q, 4,
tv=1e-3)``, ``coupled_wor`` the coupled route.

Usage::

    python benchmarks/fast_paths.py [--draws 2097152] [--coupled-draws 32] [--certify rrs_wor|coupled_wor|stepwise_wor]
                                    [--out reports/fast_paths.md]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exactness.budget import plan_for_tv  # noqa: E402
from exactness.sampling import NodeSampler  # noqa: E402
from resispec import available_verifiers, get_verifier  # noqa: E402

K = 4
TV = 1e-3
ARGS = ""


def node(V: int, seed: int = 0):
    """``p`` Zipf(1) over V tokens, ``q = 0.7 p + 0.3 perm(p)`` (V,) float64 each."""
    p = 1.0 / np.arange(1, V + 1)
    p /= p.sum()
    q = 0.7 * p + 0.3 * np.random.default_rng(seed).permutation(p)
    return p, q / q.sum()


class BlackBoxRRS:
    """``rrs`` as a black box: ``drafting`` and ``verify(p, q, candidates, rng)`` only (no chain, no uniforms)."""

    drafting = "iid"
    handles_shared_nodes = True   # its verify does O(V) work a call on broadcast views of one node

    def __init__(self):
        self._v = get_verifier("rrs")

    def verify(self, p, q, candidates, rng):
        return self._v.verify(p, q, candidates, rng)


def verifiers():
    out = [(name, get_verifier(name)) for name in available_verifiers()]
    out.append(("resispec[drafting=without_replacement]", get_verifier("resispec", drafting="without_replacement")))
    return out


def measure(label, v, p, q, draws: int, generic_draws: int):
    t0 = time.process_time()
    s = NodeSampler(v, p, q, K)
    build = time.process_time() - t0
    fast = s.path != "generic"
    m = draws if fast else generic_draws
    t0 = time.process_time()
    s.draws(np.random.default_rng(1), min(m, 4096) if fast else 8)   # first call: GUARD recheck through verify
    first = time.process_time() - t0
    best = np.inf
    for rep in range(2 if fast else 1):        # the faster of two timed calls: a pause of the machine cannot slow it
        t0 = time.process_time()
        s.draws(np.random.default_rng(2 + rep), m)
        best = min(best, time.process_time() - t0)
    rate = m / max(best, 1e-9)
    n, df = plan_for_tv(p, TV, alpha=1e-3, power=0.99)
    return {"verifier": label, "V": p.size, "path": s.path, "build_s": build, "first_call_s": first,
            "draws_per_s": rate, "n_for_tv": n, "df": df, "cpu_s_1": n / rate, "cpu_s_2": n / rate / 2}


def measure_coupled(p, q, draws: int):
    """Coupled draws/s of ResiSpec WOR's ``verify`` against its ``chain`` (reference and compiled solvers)."""
    import math

    import exactness

    v = get_verifier("resispec", drafting="without_replacement")
    n_tv = math.ceil(math.log(1 / 1e-3) / TV)          # 0 mismatches in n draws: TV <= ln(1/alpha) / n
    out = []
    for solver in ("reference", "fused"):
        t0 = time.process_time()
        c = exactness.certify_coupled(v, f"resispec[drafting=without_replacement,solver={solver}]", p, q, K, n=draws,
                                      seed=0)
        rate = draws / max(time.process_time() - t0, 1e-9)
        out.append({"verifier": f"coupled: verify vs chain (solver={solver})", "V": p.size, "path": "coupled",
                    "draws_per_s": rate, "first_call_s": float("nan"), "n_for_tv": n_tv, "passed": c.passed,
                    "cpu_s_1": n_tv / rate, "cpu_s_2": n_tv / rate / 2})
    return out


def measure_stepwise(p, q, draws: int):
    """Stepwise draws/s of ResiSpec WOR (compiled solver) over its first ``draws`` draws (fresh states)."""
    from exactness.stepwise import certify_stepwise, draws_for_tv

    t0 = time.process_time()
    c = certify_stepwise(get_verifier("resispec", drafting="without_replacement"), p, q, K, n=draws, seed=0)
    rate = c.n / max(time.process_time() - t0, 1e-9)
    n_tv = draws_for_tv(TV, 1e-3, 0.99)
    return [{"verifier": "stepwise: declared steps checked, verify coupled to them", "V": p.size,
             "path": "stepwise", "draws_per_s": rate, "first_call_s": float("nan"), "n_for_tv": n_tv,
             "passed": c.passed, "cpu_s_1": n_tv / rate, "cpu_s_2": float("nan")}]


def markdown(rows, load, cert=None) -> str:
    lines = ["# Harness fast paths: draws/s and the budget for a detectable TV of 1e-3", "",
             f"Command: `python benchmarks/fast_paths.py{ARGS}` (k = {K}; load average at the start {load}). CPU seconds",
             "of one process (`time.process_time`); projected times are CPU seconds for the planned draws.", "",
             "| verifier | V | path | draws/s (CPU) | first call (recheck) s | n for TV 1e-3 | projected 1 worker | "
             "projected 2 workers |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        first = "-" if r["first_call_s"] != r["first_call_s"] else f"{r['first_call_s']:.2f}"
        lines.append(f"| {r['verifier']} | {r['V']:,} | {r['path']} | {r['draws_per_s']:.3g} | {first} | "
                     f"{r['n_for_tv']:.3g} | {_t(r['cpu_s_1'])} | {_t(r['cpu_s_2'])} |")
    if any(r["path"] == "coupled" for r in rows):
        lines += ["", "Coupled rows: ResiSpec for without-replacement drafts has no fast path (each distinct rejected "
                  "prefix costs an O(V) transport plan). `exactness.certify_coupled` drives its `verify` and the "
                  "rule's `chain_until_accept` (= `chain` with the steps after each row's first acceptance skipped; "
                  "reference numpy solver, or the compiled one) with the same coins; 0 mismatches in "
                  "n draws bound TV <= ln(1/alpha) / n, so n for TV 1e-3 at alpha 1e-3 is 6,908, not ~1/TV^2. "
                  "It proves `verify` implements the rule; the rule's exactness rests on its proof and the "
                  "exact-enumeration tests (docs/coupled.md)."]
    if any(r["path"] == "stepwise" for r in rows):
        lines += ["", "Stepwise row: `exactness.certify_stepwise` checks, at every state a run visits, that the "
                  "step ResiSpec WOR declares (`step_plan`: accepted mass and rank-two residual rows) emits its "
                  "target (an O(V) balance), and that `verify` takes the declared steps on the same coins; "
                  "TV(verify, p) <= P(event), so 0 events in 6,905 draws bound TV <= 1e-3 at confidence 1 - 1e-3 "
                  "(power 0.99 for TV 1e-3). Unlike the coupled route it does not rest on the rule's proof. "
                  "Projected for one worker (`workers=2` measured in `benchmarks/stepwise_wor.py`); the rate is over the "
                  "first draws, each a fresh state, so the projection is pessimistic (docs/certify.md)."]
    if cert and cert.get("stepwise"):
        lines += ["", f"Measured: `certify_stepwise(resispec[drafting=without_replacement], p, q, 4, tv=1e-3)`: "
                  f"{cert['summary']} (wall {cert['wall_s']:.0f} s, CPU {cert['cpu_s']:.0f} s)"]
    elif cert and cert.get("coupled"):
        lines += ["", f"Measured: `certify_coupled(resispec[drafting=without_replacement], "
                  f"'resispec[drafting=without_replacement,solver={cert['solver']}]', p, q, 4, n={cert['n']})`: "
                  f"wall {cert['wall_s']:.0f} s, CPU {cert['cpu_s']:.0f} s, mismatches {cert['mismatches']}, "
                  f"TV <= {cert['tv_upper']:.3g} at confidence 1 - 1e-3, passed {cert['passed']}."]
    elif cert:
        lines += ["", f"Measured: `certify_verifier({cert['verifier']}, p, q, 4, tv=1e-3, workers=2, tree=False)`: "
                  f"wall {cert['wall_s']:.0f} s, CPU of this process {cert['cpu_s']:.0f} s, n = {cert['n']:,}, "
                  f"detectable TV {cert['detectable_tv']:.3g}, passed {cert['passed']}, path {cert['path']}, "
                  f"run-time check {cert['check']}."]
    return "\n".join(lines) + "\n"


def _t(s: float) -> str:
    if s != s:
        return "-"
    return f"{s:.0f} s" if s < 7200 else f"{s / 3600:.1f} h"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=1 << 21, help="draws timed on a fast path (default 2**21)")
    ap.add_argument("--coupled-draws", type=int, default=32,
                    help="coupled draws timed for ResiSpec WOR per solver (default 32; 0 skips)")
    ap.add_argument("--generic-draws", type=int, default=64, help="draws timed on the generic path (default 64)")
    ap.add_argument("--certify", default=None,
                    help="also run certify_verifier(..., tv=1e-3, workers=2) for NAME (a verifier of the table or "
                    "blackbox_rrs), coupled_wor[:reference] for ResiSpec WOR's coupled route at TV 1e-3, or "
                    "stepwise_wor for its stepwise route (certify_stepwise, tv=1e-3)")
    ap.add_argument("--out", default=None, help="write the table as Markdown here")
    args = ap.parse_args(argv)
    global ARGS
    ARGS = "".join(" " + a for a in (sys.argv[1:] if argv is None else argv))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    big = node(151_936)
    rows = [measure(label, v, *big, args.draws, args.generic_draws) for label, v in verifiers()]
    if args.coupled_draws > 0:
        rows += measure_coupled(*big, args.coupled_draws)
        rows += measure_stepwise(*big, max(args.coupled_draws, 64))
    rows.append(measure("black-box rrs (handles_shared_nodes)", BlackBoxRRS(), *node(32_000), args.draws,
                        args.draws))
    print(markdown(rows, load), flush=True)   # the table first: the certificate below takes minutes
    cert = None
    if args.certify:
        import exactness

        t0, c0 = time.time(), time.process_time()
        if args.certify == "stepwise_wor":
            from exactness.stepwise import certify_stepwise

            c = certify_stepwise(get_verifier("resispec", drafting="without_replacement"), *big, K, tv=TV, seed=0)
            cert = {"stepwise": True, "summary": c.summary(), "wall_s": time.time() - t0,
                    "cpu_s": time.process_time() - c0, "passed": c.passed}
        elif args.certify.startswith("coupled_wor"):      # coupled_wor or coupled_wor:reference
            import math

            solver = args.certify.partition(":")[2] or "fused"
            n = math.ceil(math.log(1 / 1e-3) / TV)
            c = exactness.certify_coupled(get_verifier("resispec", drafting="without_replacement"),
                                          f"resispec[drafting=without_replacement,solver={solver}]", *big, K, n=n,
                                          seed=0)
            cert = {"coupled": True, "solver": solver, "n": c.n, "wall_s": time.time() - t0,
                    "cpu_s": time.process_time() - c0, "mismatches": c.mismatches, "tv_upper": c.tv_upper,
                    "passed": c.passed}
        else:
            v = BlackBoxRRS() if args.certify == "blackbox_rrs" else dict(verifiers())[args.certify]
            p, q = node(32_000) if args.certify == "blackbox_rrs" else big
            c = exactness.certify_verifier(v, p, q, K, tv=TV, workers=2, tree=False)
            cert = {"verifier": args.certify, "wall_s": time.time() - t0, "cpu_s": time.process_time() - c0,
                    "n": c.n, "detectable_tv": c.detectable_tv, "passed": c.passed, "path": c.details["path"],
                    "check": c.details.get("fast_path_check")}
    text = markdown(rows, load, cert)
    if cert:
        print(text.rsplit("\n\n", 1)[-1])
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
