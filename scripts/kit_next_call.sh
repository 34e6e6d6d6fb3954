#!/usr/bin/env bash
# Builds the kit for the next device call here (2 cores: ~8-12 min for a wheel, ~1.2 min per
# harness variant), then prints the call. scripts/kit_one_call.sh runs a wheel's full test run
# and sanitizers, the FP8 mode, the bf16 bars in steady state, the harness A/B and the traces.
#   scripts/kit_next_call.sh            # harness variants and traces only
#   WHEEL=1 scripts/kit_next_call.sh    # and the library's wheel into .carry/final
# The next experiment (benchmarks/RESULTS.md, "Where the tile boundary stands after runs
# 96-102"): trace the library's own configuration at the tile boundary, bf16 d=128 and d=64 with
# the dynamic hand-out (ABL_TILE_COUNTER=2) and the multiply-shift divisors, to see whether the
# next tile's Q (read from HBM, issued only after the claim and the coordinates) is now what the
# consumers wait for; if it is, first the early claim (FLASHCUTE_SM90_EARLY_CLAIM, back as an A/B
# switch: the atomic's round trip is now the larger part of the producer's gap), then the
# prepared next tile and early Q (runs/2026-12-05-run96-prep-next-early-q.patch; its dynamic
# form spilled, RESULTS). Read the raw traces with benchmarks/trace_boundary.py.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${WHEEL:-0}" = 1 ]; then CARRY_DIR=.carry/final scripts/build_carry.sh; fi
rm -rf .carry/trace .carry/ab && mkdir -p .carry/trace .carry/ab
c=-DABL_TILE_COUNTER=2
tr=-DFLASHCUTE_SM90_TRACE=1,$c
ec=-DFLASHCUTE_SM90_EARLY_CLAIM=1
ABL_DIR=.carry/trace scripts/build_ablation.sh 90 128 trdyn:$tr trdynec:$tr,$ec
ABL_DIR=.carry/trace scripts/build_ablation.sh 90 64 trdyn:$tr
# And the early claim again (run 94 measured it before the divisors): the library's dynamic
# path with and without it.
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 128 dyn:$c dynec:$c,$ec
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 64 dyn:$c dynec:$c,$ec
du -sh .carry/trace .carry/ab
cat <<'EOF2'
Device call (~2 min): carry [".carry/trace", ".carry/ab"], command:
  python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 1024,4096 --causal both --out $OUT/trace;
  python3 benchmarks/smoke_ablation.py --dir .carry/ab --bitwise && python3 benchmarks/bench_ablation.py \
    --dir .carry/ab --seqlens 1024,4096,16384 --rounds 3 --rep 100 --json $OUT/ab.json
then here: python3 benchmarks/trace_boundary.py <files_at>/trace.npz sm90_d128_trdyn_s4096_causal ...
EOF2
