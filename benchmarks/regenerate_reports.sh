#!/usr/bin/env bash
# Regenerate every committed report in reports/ from the current code, each with the command
# its header names (each names --out reports/...: the commands' defaults write to git-ignored folders).  Two lanes run side by side (this machine has 2 cores); each report's own
# header states its wall and CPU time where the benchmark measures them.
#   bash benchmarks/regenerate_reports.sh            # all (about an hour of CPU)
#   bash benchmarks/regenerate_reports.sh --quick    # skip the longest (bench gap, mutant power, coupled, audit)
# Not regenerated here: reports/decode*.md (they need the real model pair: `resispec models fetch`,
# then the `resispec bench decode` command in their header).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RS=("$PY" -m resispec)
QUICK=${1:-}
log=$(mktemp -d)
echo "logs: $log"

lane1() {
  "${RS[@]}" certify --no-progress --out reports/certify.md
  "${RS[@]}" certify --verifier resispec_lookahead --verifier resispec.verifiers.resispec_wor:ResiSpecWOR \
      --k 2,4 --no-mutants --no-progress --out reports/certify_gap.md
  "${RS[@]}" bench accept --no-progress --out reports/bench_accept.md
  "${RS[@]}" bench accept --families softmax_noise,zipf,shifted --V 1000 --k 2,4,8 --nodes 4 \
      --out reports/bench_gap_accept.md --no-progress
  "${RS[@]}" bench accept --families captured --k 2,4,8 --temperatures 1 --nodes 200 --verifiers rrs,kseq,resispec \
      --lp-max-V 0 --out reports/captured_accept.md --no-progress
  "${RS[@]}" bench drift --out reports
  "${RS[@]}" bench drift --family zipf --k 4 --temperature 0.7 --out reports/drift_zipf_k4.md
  "${RS[@]}" bench families --V 1000 --nodes 64 --dial softmax_noise noise 0.25,0.5,1,2,4 \
      --dial temp_mismatch ratio 0.5,0.7,0.9,1.2 --dial dirichlet mix 0.1,0.3,0.6 \
      --dial softmax_noise_top_k top_k 5,20,100 --out reports/families.md
  "$PY" benchmarks/ngram_pair.py --contexts 2000 --seed 0
  "$PY" benchmarks/bench_harness.py
  "${RS[@]}" bench verify --no-progress --out reports/bench_verify.md
  "${RS[@]}" bench verify --dtype float32 --backends torch --no-progress --out reports/bench_verify_cpu_float32.md
  "${RS[@]}" bench verify --backends torch "torch[solver=newton]" --no-progress --out reports/bench_verify_perf.md
}

lane2() {
  "${RS[@]}" bench --no-progress --out reports
  "$PY" benchmarks/gap_trees.py
  "$PY" benchmarks/tree_speed.py --V 32000 --mc 50 --solver fused
  "$PY" benchmarks/tree_speed.py --V 32000 --mc 1 --solver fused --out reports/tree_speed_reserve_newton.md
  "$PY" benchmarks/tree_speed.py --V 32000 --mc 1 --solver sort --out reports/tree_speed_reserve_sort.md
  "$PY" benchmarks/lookahead_search.py --V 1000 --B 8 --k 4 --out reports/lookahead_search.md
  if [ "$QUICK" != --quick ]; then
    "${RS[@]}" bench gap --nodes 4 --n 300 --out reports/bench_gap.md --no-progress
    "$PY" benchmarks/bench_mutants.py --seeds 20
    "$PY" benchmarks/bench_coupled.py
    "$PY" benchmarks/audit_transformers.py --n 3000 --out reports/audit_transformers_generators.md       # ~45 min on 2 cores
  fi
}

lane1 >"$log/lane1.log" 2>&1 & p1=$!
lane2 >"$log/lane2.log" 2>&1 & p2=$!
s=0
wait $p1 || { echo "lane 1 failed: see $log/lane1.log"; s=1; }
wait $p2 || { echo "lane 2 failed: see $log/lane2.log"; s=1; }
exit $s
