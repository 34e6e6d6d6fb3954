#!/usr/bin/env bash
# One device call for the quantizers' tensor-core rotation (the default; FLASHCUTE_FP8_QUANTIZE_MMA=0:
# the butterflies):
# its tests both ways, the FP8-mode tests and the outlier RMSE through it, the sanitizers on the
# FP8 cases through it, and bench_fp8_mode.py's A/B columns. Results under $OUT.
#   device run:  carry=[".carry/mma"]  command: WHEEL_DIR=.carry/mma scripts/mma_rotation_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-deps --no-index --force-reinstall "${WHEEL_DIR:-.carry}"/flashcute-*.whl || exit 2
T=${TEST_TIMEOUT:-150}
# both paths side by side (the tests set the switch per case), then every FP8 test through the
# tensor-core path (the mode's accuracy and outlier tests, varlen and per-head quantizers included)
timeout "$T" python3 -m pytest -q tests/test_gpu_fp8.py tests/test_gpu_fp8_quantize.py \
  -k "block_quantize or cuda_quantize_matches" > "$OUT/tests-both.txt" 2>&1
tail -3 "$OUT/tests-both.txt"
FLASHCUTE_FP8_QUANTIZE_MMA=1 timeout "$T" python3 -m pytest -q tests/test_gpu_fp8.py tests/test_gpu_fp8_quantize.py \
  > "$OUT/tests-mma.txt" 2>&1
tail -3 "$OUT/tests-mma.txt"
timeout "${BENCH_TIMEOUT:-200}" python3 benchmarks/bench_fp8_mode.py --hdims 128,256 --seqlens 4096,16384 --causal both \
  --columns quant-blocks,quant-blocks-bfly,fp8-kernel-blocks,fp8-mode,fp8-mode-bfly,bf16,cudnn \
  --json "$OUT/fp8_mode.json" > "$OUT/bench.txt" 2>&1
tail -12 "$OUT/bench.txt"
for tool in memcheck racecheck; do
  FLASHCUTE_FP8_QUANTIZE_MMA=1 FLASHCUTE_SANITIZE_FP8_ONLY=1 timeout "${SANITIZE_TIMEOUT:-60}" \
    compute-sanitizer --tool "$tool" --kernel-name kns=flashcute --print-limit 20 python3 scripts/sanitize_cases.py > "$OUT/sanitize-$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool.txt" | tail -1)"
done
