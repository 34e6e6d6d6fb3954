#!/usr/bin/env bash
# Builds the kit for the next device call here (2 cores: ~12 min for the wheel, ~1.5 min per
# harness variant), then prints the call. The call itself is scripts/kit_one_call.sh: the wheel's
# full test run and sanitizers, the FP8 mode, the bf16 bars in steady state, the harness A/B.
#   scripts/kit_next_call.sh
# The current experiments (session 26, benchmarks/RESULTS.md):
#   - Q a tile ahead (FLASHCUTE_SM90_Q_AHEAD, two Q buffers; run 92's trace: ~3,000 cycles per
#     tile waiting for the next tile's Q and first K): qa at bf16 d=128 and d=64 against base,
#     and traced (.carry/trace2: tr, trqa) to see the header -> Q segment go;
#   - bf16 d=64's short-causal tile (128 rows, 2 consumer warpgroups, N=128) with 3 and 4 K/V
#     stages (s3, s4; qas3 with Q ahead too): s2 is the library's tile through the harness's own
#     configuration path (the control); compare the causal 1k rows (the harness's s* tiles run at
#     every length, the library's only for causal seqlen_q < 1536).
# A candidate with compile-time switches goes in its own folder:
#   EXTRA_CUDA_FLAGS="-D..." CARRY_DIR=.carry/cand scripts/build_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CARRY_DIR=.carry/final scripts/build_carry.sh
rm -rf .carry/ab2 .carry/trace2 && mkdir -p .carry/ab2 .carry/trace2
t=-DTILE_N=128,-DTILE_ALIAS=0
qa=-DFLASHCUTE_SM90_Q_AHEAD=1
ABL_DIR=.carry/ab2 scripts/build_ablation.sh 90 64 base: qa:$qa s2:$t,-DTILE_STAGES=2 s3:$t,-DTILE_STAGES=3 \
  s4:$t,-DTILE_STAGES=4 qas3:$t,-DTILE_STAGES=3,$qa
ABL_DIR=.carry/ab2 scripts/build_ablation.sh 90 128 base: qa:$qa
tr=-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2
ABL_DIR=.carry/trace2 scripts/build_ablation.sh 90 128 tr:$tr trqa:$tr,$qa
du -sh .carry/final .carry/ab2 .carry/trace2
cat <<'EOF'
Device call (one, ~7 min): carry [".carry/final", ".carry/ab2", ".carry/trace2"], command:
  ABL=.carry/ab2 TRACE_DIR=.carry/trace2 scripts/kit_one_call.sh
(shorter where little device time is left: FLASHCUTE_TEST_BACKENDS=sm90 KIT_BUDGET=400 KIT_AB_ROUNDS=2 [KIT_NO_SANITIZE=1]).
EOF
