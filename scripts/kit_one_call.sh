#!/usr/bin/env bash
# The whole prepared kit in ONE device call (carry the wheel's folder, the harness folder and, if
# built, .carry/trace; scripts/kit_next_call.sh builds them and prints the call),
# steps in order of what a decision needs most, each under its own timeout, so that a call cut short
# (or a machine taken back late) still returns the first results. Measured on run 89: the full test
# run + sanitizers ~200 s, the benchmarks a few seconds per case; the whole script ~8-9 min.
#   device run:  scripts/kit_one_call.sh
# Files under $OUT (at most 8 come back): log.txt, pytest-sm80.txt, pytest-sm90.txt, sanitize.txt
# (gpu_check.sh), fp8_mode.json, bench_bf16.json, ab.json and kit.tgz (everything else).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT" "$OUT/kit"
K="$OUT/kit"
t0=$(date +%s)
say() { echo "[kit +$(( $(date +%s) - t0 ))s] $*" | tee -a "$K/steps.txt"; }
# The device call may run 600 s: steps after the A/B run only while enough of KIT_BUDGET is left,
# each with a timeout cut to what is left, so that the tarball is always written.
KIT_BUDGET="${KIT_BUDGET:-560}"
left() { echo $(( KIT_BUDGET - ($(date +%s) - t0) )); }
fits() {  # fits NEED_S NAME: true if NEED_S seconds are left, else says it skips NAME
  if [ "$(left)" -ge "$1" ]; then return 0; fi
  say "skip $2 ($(left) s left)"; return 1
}
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $(( l > 5 ? l - 5 : 1 )); }

CAND="${CAND:-.carry/final}"  # the candidate wheel folder (carry it)
ABL="${ABL:-.carry/ablation}"  # the harness variants (scripts/build_ablation.sh; carry it)
cp "$CAND"/*.whl "$CAND"/ptxas.txt .carry/
# Installed up front, whatever the order below (gpu_check.sh installs it again, a few seconds).
python3 -m pip install -q --no-deps --no-index --force-reinstall .carry/flashcute-*.whl > "$K/install.txt" 2>&1

# 1. The candidate wheel: every test and the sanitizers (gpu_check.sh installs it from .carry/).
# KIT_NO_SANITIZE=1 / KIT_AB_ROUNDS=2: a shorter call where little device time is left.
# KIT_TESTS_LAST=1: after the benchmarks and the A/B instead (a short call then returns the
# measurements that decide first; the tests get what is left, at most their usual timeouts).
run_tests() {
  say "tests + sanitizers (candidate)"
  PYTEST_TIMEOUT="$(cap "${PYTEST_TIMEOUT:-240}")" SANITIZE_TIMEOUT="$(cap "${SANITIZE_TIMEOUT:-90}")" \
    scripts/gpu_check.sh --tests-only ${KIT_NO_SANITIZE:+--no-sanitize}
}
[ "${KIT_TESTS_LAST:-0}" = 1 ] || run_tests

# 2. The FP8 mode end to end (issue 6's mode bar), and the bf16 bars of issue 5 with the
#    candidate library, three rounds per case (steady state).
say "FP8 mode"
# KIT_FP8_COLUMNS: bench_fp8_mode.py's columns.
timeout 100 python3 benchmarks/bench_fp8_mode.py --hdims 128 --seqlens 4096,16384 --causal both \
  --columns "${KIT_FP8_COLUMNS:-quant-vt,quant-blocks,fp8-kernel,fp8-kernel-blocks,fp8-mode,fp8-mode-heads,bf16,cudnn}" \
  --json "$OUT/fp8_mode.json" > "$K/fp8_mode.txt" 2>&1; tail -12 "$K/fp8_mode.txt"
# KIT_NCU_QUANT=1: ncu of the quantizer's kernel on the mode's d=128 4k inputs (block-wise
# scales, the mode's default: block_quantize_kernel).
if [ "${KIT_NCU_QUANT:-0}" = 1 ]; then
  say "ncu quantizer"
  timeout 60 ncu --clock-control none --kernel-name regex:quantize \
    --launch-skip 2 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section SchedulerStats \
    python3 scripts/profile_case.py --quantize --blocks --hdim 128 --seqlen 4096 > "$K/ncu_quant.txt" 2>&1
  grep -E "quantize_kernel|Duration|DRAM Throughput|L2 Cache Throughput|Issued Warp|SM Active Cycles|Achieved Occupancy" "$K/ncu_quant.txt"
fi
# KIT_NO_BF16=1: skip it (a short call whose A/B carries its own cuDNN column).
if [ "${KIT_NO_BF16:-0}" != 1 ]; then
  say "bf16 steady state (candidate)"
  timeout 90 python3 benchmarks/bench_attention.py --impls flashcute,cudnn --backend sm90 --hdims 64,128 \
    --seqlens 1024,4096 --causal both --rounds 3 --json "$OUT/bench_bf16.json" > "$K/bench_bf16.txt" 2>&1
  tail -12 "$K/bench_bf16.txt"
fi

# 3. The harness A/B (its variants' outputs grouped by bitwise equality too).
say "smoke + A/B"
# A variant with a wrong result is set aside (into $ABL.failed) and the others are timed; a hang
# or a crash stops the smoke test, and then nothing is timed (it would cost the A/B's timeout).
if timeout 100 python3 benchmarks/smoke_ablation.py --dir "$ABL" --bitwise --failed-out "$K/smoke_failed.txt" \
    > "$K/smoke.txt" 2>&1; then smoke_ok=1; else smoke_ok=0; fi
grep -E "^bitwise|FAILED|Error" "$K/smoke.txt"; tail -1 "$K/smoke.txt"
if [ "$smoke_ok" = 0 ] && [ -s "$K/smoke_failed.txt" ]; then
  mkdir -p "$ABL.failed" && xargs -a "$K/smoke_failed.txt" mv -t "$ABL.failed/" && smoke_ok=1
  say "set aside (wrong results): $(ls "$ABL.failed" | tr '\n' ' ')"
fi
[ "$smoke_ok" = 1 ] || say "smoke failed: no A/B"
[ "$smoke_ok" = 1 ] && timeout "$(cap 200)" python3 benchmarks/bench_ablation.py --dir "$ABL" \
  --seqlens "${KIT_AB_SEQLENS:-1024,4096,16384}" \
  --rounds "${KIT_AB_ROUNDS:-3}" \
  --rep 100 --json "$OUT/ab.json" > "$K/ab.txt" 2>&1
tail -60 "$K/ab.txt"
if [ "${KIT_TESTS_LAST:-0}" = 1 ] && fits 60 "tests"; then run_tests; fi

# 4. The traces (if $TRACE_DIR was carried), racecheck and memcheck of
#    the harness builds (small cases, 5 CTAs).
TRACE_DIR="${TRACE_DIR:-.carry/trace}"  # traced harness builds (carry it)
if [ -d "$TRACE_DIR" ] && [ "$smoke_ok" = 1 ] && fits 60 "traces"; then
  say "traces"
  timeout "$(cap 90)" python3 benchmarks/diag_trace.py --dir "$TRACE_DIR" --seqlens 1024,4096 --out "$K/trace" \
    > "$K/trace.txt" 2>&1; tail -8 "$K/trace.txt"
fi
if fits 50 "racecheck"; then
  say "racecheck (harness builds)"
  timeout "$(cap 120)" compute-sanitizer --tool racecheck python3 benchmarks/smoke_ablation.py --dir "$ABL" \
    --only "${KIT_RACE_ONLY:-}" --small --num-sms 5 > "$K/racecheck_kit.txt" 2>&1; tail -3 "$K/racecheck_kit.txt"
fi
if fits 40 "memcheck"; then
  say "memcheck (harness builds)"
  timeout "$(cap 100)" compute-sanitizer --tool memcheck python3 benchmarks/smoke_ablation.py --dir "$ABL" \
    --only "${KIT_RACE_ONLY:-}" --small --num-sms 5 > "$K/memcheck_kit.txt" 2>&1; tail -3 "$K/memcheck_kit.txt"
fi
say "done"
tar czf "$OUT/kit.tgz" -C "$OUT" kit && rm -rf "$K"
