#!/usr/bin/env bash
# Builds the kit for the next device call here (2 cores: ~8-12 min for a wheel, ~1.2 min per
# harness variant), then prints the call. scripts/kit_one_call.sh runs a wheel's full test run
# and sanitizers, the FP8 mode, the bf16 bars in steady state, the harness A/B and the traces.
#   scripts/kit_next_call.sh            # harness variants and traces only
#   WHEEL=1 scripts/kit_next_call.sh    # and the library's wheel into .carry/final (needed)
# Measured in run 103 (benchmarks/RESULTS.md: the early claim takes 0.28 block off d=128's causal
# 4k boundary, the deferred epilogue nothing; neither reaches +3 %). Kept to rebuild and re-time
# the boundary variants below; the kit measured two things at once:
# 1. Issue 5's tile boundary (RESULTS, "Where the tile boundary stands after runs 96-102"): trace
#    the library's own configuration, bf16 d=128 and d=64 with the dynamic hand-out
#    (ABL_TILE_COUNTER=2) and the multiply-shift divisors, to see whether the next tile's Q (read
#    from HBM, issued only after the claim and the coordinates) is now what the consumers wait
#    for; and A/B the early claim (FLASHCUTE_SM90_EARLY_CLAIM) under it. Read the raw traces with
#    benchmarks/trace_boundary.py.
# 2. The deferred epilogue (FLASHCUTE_SM90_DEFER_EPILOGUE: a tile's O stored once the next
#    tile's first S GEMM is issued), alone and with Q a tile ahead (FLASHCUTE_SM90_Q_AHEAD), which
#    it needs so that the consumers do not just wait for Q sooner (RESULTS, session 28). In its
#    trace (trdynqadef) a tile's epilogue event comes after the next tile's first S: read it with
#    trace_boundary.py (header, Q, first S, last P V), not with trace_report's epilogue segment.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${WHEEL:-0}" = 1 ]; then CARRY_DIR=.carry/final scripts/build_carry.sh; fi
rm -rf .carry/trace .carry/ab && mkdir -p .carry/trace .carry/ab
c=-DABL_TILE_COUNTER=2
tr=-DFLASHCUTE_SM90_TRACE=1,$c
ec=-DFLASHCUTE_SM90_EARLY_CLAIM=1
qa=-DFLASHCUTE_SM90_Q_AHEAD=1
def=-DFLASHCUTE_SM90_DEFER_EPILOGUE=1
ABL_DIR=.carry/trace scripts/build_ablation.sh 90 128 trdyn:$tr trdynec:$tr,$ec trdynqadef:$tr,$qa,$def \
  trdynecqadef:$tr,$ec,$qa,$def
ABL_DIR=.carry/trace scripts/build_ablation.sh 90 64 trdyn:$tr
# And the early claim again (run 94 measured it before the divisors), the deferred epilogue and
# Q a tile ahead: the library's dynamic path with and without them.
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 128 dyn:$c dynec:$c,$ec dyndef:$c,$def dynqa:$c,$qa dynqadef:$c,$qa,$def \
  dynecqa:$c,$ec,$qa dynecqadef:$c,$ec,$qa,$def
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 64 dyn:$c dynec:$c,$ec dyndef:$c,$def
# The deciding d=128 variants alone, for a short call (below).
rm -rf .carry/abs && mkdir -p .carry/abs
for v in dyn dyndef dynqadef dynecqa dynecqadef; do cp .carry/ab/sm90_hd128_$v.so .carry/abs/; done
du -sh .carry/trace .carry/ab .carry/abs
cat <<'EOF2'
Device call (~9 min; carry [".carry/final", ".carry/ab", ".carry/trace"]), command:
  FLASHCUTE_TEST_BACKENDS=sm90 KIT_BUDGET=560 KIT_AB_SEQLENS=1024,4096 \
    CAND=.carry/final ABL=.carry/ab TRACE_DIR=.carry/trace scripts/kit_one_call.sh 2>&1 | tail -150
or, with ~400 s of device time left (the deciding measurements first, the tests with the rest;
carry [".carry/final", ".carry/abs"]):
  FLASHCUTE_TEST_BACKENDS=sm90 KIT_BUDGET=300 KIT_TESTS_LAST=1 KIT_NO_BF16=1 KIT_AB_ROUNDS=2 \
    KIT_AB_SEQLENS=1024,4096 CAND=.carry/final ABL=.carry/abs TRACE_DIR=.carry/none scripts/kit_one_call.sh 2>&1 | tail -150
then here: python3 benchmarks/trace_boundary.py <kit>/trace.npz sm90_d128_trdyn_s4096_causal ...
EOF2
