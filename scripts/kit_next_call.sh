#!/usr/bin/env bash
# Builds the kit for the next device call here (2 cores: ~8-12 min for a wheel, ~1.2 min per
# harness variant), then prints the call. The call itself is scripts/kit_one_call.sh: the wheel's
# full test run and sanitizers, the FP8 mode, the bf16 bars in steady state, the harness A/B.
#   scripts/kit_next_call.sh            # harness variants only (the library wheel: CAND below)
#   WHEEL=1 scripts/kit_next_call.sh    # and the library's wheel into .carry/final
# The current experiment (session 27, benchmarks/RESULTS.md run 95 and after): bf16 d=64's
# short-causal tile (128 rows, 2 consumer warpgroups, N=128; the library's choice for causal/local
# calls with seqlen_q < 1536) now loads Q a tile ahead; does it want 3 or 4 K/V stages on top
# (run 93, without Q ahead: s3 +1.0 %, s4 +2.7 % at causal 1k)? `qas2` is the library's tile
# through the harness's own configuration path (the control); compare the causal 1k rows (the
# harness's tiles run at every length, the library's only for causal seqlen_q < 1536). All three
# with the dynamic hand-out the library uses for causal tiles.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${WHEEL:-0}" = 1 ]; then CARRY_DIR=.carry/final scripts/build_carry.sh; fi
rm -rf .carry/ab && mkdir -p .carry/ab
t=-DTILE_N=128,-DTILE_ALIAS=0,-DFLASHCUTE_SM90_Q_AHEAD=1,-DABL_TILE_COUNTER=2
ABL_DIR=.carry/ab scripts/build_ablation.sh 90 64 qas2:$t,-DTILE_STAGES=2 qas3:$t,-DTILE_STAGES=3 \
  qas4:$t,-DTILE_STAGES=4
du -sh .carry/ab
cat <<'EOF2'
Device call (~2 min without the tests): carry [".carry/ab"], command:
  python3 benchmarks/smoke_ablation.py --dir .carry/ab --bitwise && python3 benchmarks/bench_ablation.py \
    --dir .carry/ab --seqlens 1024,4096 --rounds 3 --rep 100 --json $OUT/ab.json
EOF2
