#!/usr/bin/env bash
# One device call that re-times the library on whatever card comes (session 42): the FP8 sweep
# the README's FP8 table needs (e4m3 / flashcute bf16 / cuDNN, 1k-16k), the FP8 mode end to end,
# FA3's protocol at 4k-16k (scripts/protocol_check.sh), ncu of the block quantizer at d=128 4k, and
# scripts/tail_rounds.sh. On another card only the card-independent parts run (the FP8 mode, the
# ncu, the tail rounds): the README's tables are H200 figures.
#   device run:  carry=[".carry/<wheel folder>"]  command: WHEEL_DIR=.carry/<folder> scripts/retime_call.sh
# Options (environment): QUANT_BASE=<wheel folder> (carry it too) times the quantizer and the FP8
# mode against that wheel first (scripts/quant_ab.sh, timings only; H200 only); SKIP_NCU=1,
# SKIP_TAIL=1, SKIP_PROTOCOL=1; H200_ONLY=1 stops at once on another card.
# Files under $OUT: log.txt (everything printed) and retime.tgz (the JSONs and text files).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT/r"
R="$OUT/r"
t0=$(date +%s)
say() { echo "[retime +$(( $(date +%s) - t0 ))s] $*"; }
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "card: $card"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > "$R/gpu.txt"
python3 -m pip install -q --no-deps --no-index --force-reinstall "${WHEEL_DIR:-.carry}"/flashcute-*.whl > "$R/install.txt" 2>&1 || { say "install failed"; cat "$R/install.txt"; exit 2; }
MODE=(python3 benchmarks/bench_fp8_mode.py --hdims 128,256 --seqlens 4096,16384 --causal both
      --columns quant-blocks,fp8-kernel-blocks,fp8-mode,bf16,cudnn)
case "$card" in
  *H200*)
    if [ -n "${QUANT_BASE:-}" ]; then  # the quantizer against a base wheel first (A B A B; ends on WHEEL_DIR's)
      OUT="$R/quant_ab" BASE="$QUANT_BASE" CAND="${WHEEL_DIR:-.carry}" SKIP_CHECKS=1 SKIP_NCU=1 scripts/quant_ab.sh
    fi
    say "fp8 sweep (steady state)"
    timeout 200 python3 benchmarks/bench_attention.py --dtype fp8 --impls flashcute,flashcute_bf16,flashcute_bf16src,cudnn \
      --backend sm90 --hdims 128,256 --seqlens 1024,4096,16384 --causal both --rounds 3 --json "$R/fp8-sweep.json" 2>&1 | grep -E "^\|"
    say "fp8 mode"
    timeout 120 "${MODE[@]}" --json "$R/fp8_mode.json" 2>&1 | grep -E "^\|"
    [ -z "${SKIP_NCU:-}" ] && { say "ncu of the block quantizer"; scripts/ncu_quant.sh "$R"; }
    if [ -z "${SKIP_PROTOCOL:-}" ]; then
      say "protocol check 4k/16k"
      OUT="$R/protocol" SEQLENS=4096,16384 BF16_HDIMS=128 FP8_HDIMS=128,256 COOL_ROUNDS=1 WHEEL_DIR="${WHEEL_DIR:-.carry}" \
        timeout 240 scripts/protocol_check.sh > "$R/protocol.txt" 2>&1
      tail -40 "$R/protocol.txt"
    fi
    ;;
  *)
    [ -n "${H200_ONLY:-}" ] && { say "not an H200: nothing to do (H200_ONLY)"; exit 0; }
    say "not an H200: the FP8 mode only, then the tail rounds"
    timeout 120 "${MODE[@]}" --json "$R/fp8_mode.json" 2>&1 | grep -E "^\|"
    say "ncu of the block quantizer"; scripts/ncu_quant.sh "$R"
    ;;
esac
if [ -z "${SKIP_TAIL:-}" ]; then
  say "tail rounds"
  OUT="$R/tail" WHEEL_DIR="${WHEEL_DIR:-.carry}" timeout 200 scripts/tail_rounds.sh
fi
say "done"
tar czf "$OUT/retime.tgz" -C "$OUT" r
