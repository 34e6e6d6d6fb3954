#!/usr/bin/env bash
# Which timing protocol reproduces ANCHORS.md's cuDNN figures (benchmarks/compare_anchors.py)?
# One device call: the wheel in .carry/ (or $WHEEL_DIR), bf16 and e4m3 timed in the sustained state
# (back to back, --rounds 3) and with FlashAttention-3's benchmark protocol (1 s idle before each
# timing, do_bench warmup 5 ms, rep 10 ms); then session 34's cool start (1 s idle, rep 100 ms) for
# bf16. JSONs and the comparison under $OUT. COOL_ROUNDS (default 2): rounds of the FA3-protocol timings.
# A shorter call: SEQLENS (default 1024,4096,16384), BF16_HDIMS (64,128,256), FP8_HDIMS (128,256).
#   device run:  carry=[".carry/now"]  command: WHEEL_DIR=.carry/now scripts/protocol_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-deps --no-index --force-reinstall "${WHEEL_DIR:-.carry}"/flashcute-*.whl || exit 2
B=(python3 benchmarks/bench_attention.py --backend sm90 --seqlens "${SEQLENS:-1024,4096,16384}" --causal both)
BF=(--impls flashcute,cudnn --hdims "${BF16_HDIMS:-64,128,256}")
F8=(--dtype fp8 --impls flashcute,flashcute_bf16,flashcute_bf16src,cudnn --hdims "${FP8_HDIMS:-128,256}")
FA3P=(--cooldown 1 --warmup 5 --rep 10)
"${B[@]}" "${BF[@]}" --rounds 3 --json "$OUT/steady-bf16.json" > "$OUT/log.txt" 2>&1
"${B[@]}" "${F8[@]}" --rounds 3 --json "$OUT/steady-fp8.json" >> "$OUT/log.txt" 2>&1
"${B[@]}" "${BF[@]}" --rounds "${COOL_ROUNDS:-2}" "${FA3P[@]}" --json "$OUT/fa3p-bf16.json" >> "$OUT/log.txt" 2>&1
"${B[@]}" "${F8[@]}" --rounds "${COOL_ROUNDS:-2}" "${FA3P[@]}" --json "$OUT/fa3p-fp8.json" >> "$OUT/log.txt" 2>&1
"${B[@]}" "${BF[@]}" --rounds 1 --cooldown 1 --json "$OUT/cool-bf16.json" >> "$OUT/log.txt" 2>&1
python3 benchmarks/compare_anchors.py "$OUT"/steady-bf16.json "$OUT"/fa3p-bf16.json "$OUT"/cool-bf16.json \
  --fp8 "$OUT"/steady-fp8.json "$OUT"/fa3p-fp8.json | tee "$OUT/compare.txt"
