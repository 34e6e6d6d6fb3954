#!/usr/bin/env bash
# Builds the kit for the next device call here (2 cores: ~8-12 min for a wheel, ~1.2 min per
# harness variant), then prints the call. The call itself is scripts/kit_one_call.sh: the wheel's
# full test run and sanitizers, the FP8 mode, the bf16 bars in steady state, the harness A/B.
#   scripts/kit_next_call.sh
# The candidate (session 26, benchmarks/RESULTS.md runs 93-94): bf16/fp16 d=64's short-causal tile
# (causal/local, seqlen_q < 1536) with Q a tile ahead (FLASHCUTE_SM90_SHORT_CAUSAL_Q_AHEAD=1):
# +2.6-4.3 % at causal 1k in the harness, where issue 5's d=64 causal 1k bar misses by 0.2 %
# (0.898 against 0.9, run 93). Land it (flip the macro's default) once the candidate's full test
# run and sanitizers pass and bench_bf16.json's d=64 causal 1k ratio gains.
# The harness pair (.carry/ab: the library's dispatch with the tile's choice off / on, both with
# the dynamic hand-out the library uses for these calls) times the same thing side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
EXTRA_CUDA_FLAGS="-DFLASHCUTE_SM90_SHORT_CAUSAL_Q_AHEAD=1" CARRY_DIR=.carry/cand scripts/build_carry.sh
rm -rf .carry/ab && mkdir -p .carry/ab
c=-DABL_TILE_COUNTER=2
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 64 base:$c scqa:$c,-DFLASHCUTE_SM90_SHORT_CAUSAL_Q_AHEAD=1
du -sh .carry/cand .carry/ab
cat <<'EOF'
Device call (one, ~6 min): carry [".carry/cand", ".carry/ab"], command:
  CAND=.carry/cand ABL=.carry/ab scripts/kit_one_call.sh
(shorter where little device time is left: FLASHCUTE_TEST_BACKENDS=sm90 KIT_BUDGET=400 KIT_AB_ROUNDS=2 [KIT_NO_SANITIZE=1]).
EOF
