#!/usr/bin/env bash
# Session 35's kit: Q from registers (FLASHCUTE_SM90_Q_REGS) against the library's tiles, and,
# on an H200, which timing protocol reproduces ANCHORS.md's cuDNN (scripts/protocol_check.sh).
#   scripts/kit_qregs.sh build     # here, ~4 min (5 harness variants; copies as controls)
#   device run, carry [".carry/qr", ".carry/qrb", ".carry/now"]:  scripts/kit_qregs.sh run
# (.carry/now: the library's wheel, scripts/build_carry.sh; needed only for the protocol check.)
set -uo pipefail
cd "$(dirname "$0")/.."
c=-DABL_TILE_COUNTER=2
f192=-DTILE_N=192,-DTILE_PREGS=40,-DTILE_STAGES=2,$c   # the transposing e4m3 d=128 tile from 4k keys
vt=-DTILE_N=192,-DTILE_STAGES=2,-DTILE_PREGS=24,-DABL_VT=1,$c  # the FP8 mode's V^T kernel
qr1=-DFLASHCUTE_SM90_Q_REGS=1; qr2=-DFLASHCUTE_SM90_Q_REGS=2; np=-DFLASHCUTE_SM90_TWO_P=-1
case "${1:-}" in
build)
  set -e
  rm -rf .carry/qr .carry/qrb
  ABL_DIR=.carry/qr scripts/build_ablation.sh 90f8 128 n192:$f192 n192qr:$f192,$qr1 vt:$vt vtqr:$vt,$qr1
  cp .carry/qr/sm90f8_hd128_n192.so .carry/qr/sm90f8_hd128_n192b.so
  cp .carry/qr/sm90f8_hd128_vt.so .carry/qr/sm90f8_hd128_vtb.so
  # bf16: with two P buffers Q in registers serialises the WGMMAs (ptxas C7512), so one P buffer
  ABL_DIR=.carry/qrb scripts/build_ablation.sh 90 128 base:$c np:$c,$np qrnp:$c,$qr2,$np
  cp .carry/qrb/sm90_hd128_base.so .carry/qrb/sm90_hd128_base2.so ;;
run)
  OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
  nvidia-smi -L
  for d in .carry/qr .carry/qrb; do timeout 100 python3 benchmarks/smoke_ablation.py --dir $d 2>&1 | tail -7; done
  timeout 150 python3 benchmarks/bench_ablation.py --dir .carry/qr --seqlens 4096,16384 --causal both --rounds 3 \
    --json "$OUT/qr.json" 2>&1 | tail -14
  timeout 120 python3 benchmarks/bench_ablation.py --dir .carry/qrb --seqlens 4096,16384 --causal both --rounds 3 \
    --json "$OUT/qrb.json" 2>&1 | tail -14
  timeout 60 python3 benchmarks/diag_clocks_ablation.py --dir .carry/qr --seqlens 16384 --causal no 2>&1 | tail -9
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ -d .carry/now ]; then
    mkdir -p "$OUT/proto"
    COOL_ROUNDS=1 OUT="$OUT/proto" WHEEL_DIR=.carry/now timeout 300 scripts/protocol_check.sh
  fi ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
