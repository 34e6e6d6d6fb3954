#!/usr/bin/env bash
# The readings still owed to the H200 (benchmarks/RESULTS.md, session 37): the quantizers'
# tensor-core rotation against the butterflies in the FP8 mode (bench_fp8_mode.py, ~1 min), then
# the short protocol check (scripts/protocol_check.sh, ~3 min). Stops at once on another card
# (exit 3), so that a call that gets an H100 costs only its start.
#   device run:  kind="nvidia-h200"  carry=[".carry/now"]  command: scripts/h200_next_call.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 3; }
WHEEL_DIR=${WHEEL_DIR:-.carry/now}
python3 -m pip install -q --no-deps --no-index --force-reinstall "$WHEEL_DIR"/flashcute-*.whl || exit 2
timeout 150 python3 benchmarks/bench_fp8_mode.py --hdims 128,256 --seqlens 4096,16384 --causal both \
  --columns quant-blocks,quant-blocks-bfly,fp8-kernel-blocks,fp8-mode,fp8-mode-bfly,bf16,cudnn \
  --json "$OUT/fp8_mode.json" > "$OUT/bench.txt" 2>&1
tail -11 "$OUT/bench.txt"
mkdir -p "$OUT/pc"
OUT="$OUT/pc" SEQLENS=4096,16384 BF16_HDIMS=128,256 FP8_HDIMS=128,256 COOL_ROUNDS=1 WHEEL_DIR="$WHEEL_DIR" \
  timeout 270 scripts/protocol_check.sh > /dev/null 2>&1
echo "protocol_check rc=$?"
tail -60 "$OUT/pc/compare.txt"
# The comparison has what is needed; the raw JSONs would exceed the count of files that come back.
rm -f "$OUT"/pc/*.json "$OUT"/pc/log.txt
