#!/usr/bin/env bash
# The split-Q kit (FLASHCUTE_SM90_SPLIT_Q, fwd_traits.cuh): harness builds of each sm90 family
# with and without it into .carry/ablation (+ two traced bf16 d=128 builds into .carry/trace),
# then the one device command that checks and times them. Build here (~8 min on 2 cores):
#   scripts/kit_split_q.sh            # builds, then prints the device command and its carry
# The candidate wheel (the library with the switch on, for the full test run) is built apart:
#   see benchmarks/RESULTS.md, "split Q" (build dir build/carry-sq, wheel in .carry/candsq).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f .carry/ablation/*.so
sq=-DFLASHCUTE_SM90_SPLIT_Q=1
n192=-DTILE_N=192,-DTILE_STAGES=2,-DTILE_PREGS=40  # e4m3 d=128's tile from 4k keys (TileConfigFp8Long)
scripts/build_ablation.sh 90 128 base: base2: sq:$sq
scripts/build_ablation.sh 90 64 base: sq:$sq
scripts/build_ablation.sh 90 256 base: sq:$sq
scripts/build_ablation.sh 90f8 128 base: sq:$sq n192:$n192 n192sq:$n192,$sq
scripts/build_ablation.sh 90f8 256 base: sq:$sq
# Traced builds (src/sm90/trace.cuh): the tile boundary's segments with and without the switch.
mkdir -p .carry/trace && rm -f .carry/trace/*.so
tr=-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2
scripts/build_ablation.sh 90 128 tr:$tr trsq:$tr,$sq
mv .carry/ablation/sm90_hd128_tr.so .carry/ablation/sm90_hd128_trsq.so .carry/trace/
du -sh .carry/ablation .carry/trace .carry/candsq 2>/dev/null || true
cat <<'EOF'
Device command (carry [".carry/ablation", ".carry/trace", ".carry/candsq"]):
cp .carry/candsq/*.whl .carry/candsq/ptxas.txt .carry/ && NO_ABLATION=1 PYTEST_TIMEOUT=300 SANITIZE_TIMEOUT=120 \
  scripts/gpu_check.sh --tests-only; \
  timeout 60 python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 1024,4096 --out $OUT/trace; \
  timeout 100 python3 benchmarks/smoke_ablation.py --dir .carry/ablation && \
  timeout 200 compute-sanitizer --tool racecheck python3 benchmarks/smoke_ablation.py --dir .carry/ablation --small --num-sms 5 > $OUT/racecheck_kit.txt 2>&1; \
  timeout 300 python3 benchmarks/bench_ablation.py --dir .carry/ablation --seqlens 1024,4096,16384 --rounds 3 --rep 100 --json $OUT/ab.json
EOF
