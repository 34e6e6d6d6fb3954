#!/usr/bin/env bash
# The whole GPU check in one device call: install the carried wheel, run every test (GPU tests
# included, and the C++ consumer), the sanitizers on small cases, and the benchmark. Results land
# under $OUT (pytest summary, sanitizer logs, benchmark JSON + PNG).
#   device run:  carry=[".carry"]  command: scripts/gpu_check.sh [--tests-only|--bench-only] [-- bench args]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
mode=all
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --tests-only) mode=tests ;;
    --bench-only) mode=bench ;;
    --no-sanitize) nosan=1 ;;
    --) shift; bench_args=("$@"); break ;;
  esac
  shift
done
log="$OUT/log.txt"
t0=$(date +%s)
stamp() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*" | tee -a "$log"; }

stamp "install"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >> "$log" 2>&1
python3 -m pip install -q --no-deps --no-index --force-reinstall .carry/flashcute-*.whl >> "$log" 2>&1 \
  || { stamp "wheel install failed"; exit 1; }
python3 -X faulthandler -c "import flashcute, json; print(json.dumps(flashcute.build_info()))" >> "$log" 2>&1 \
  || { echo "import flashcute (before torch) failed, rc=$?" >> "$log"; tail -30 "$log"; }
[ -f .carry/ptxas.txt ] && grep -c "bytes spill" .carry/ptxas.txt >/dev/null && \
  { echo "ptxas spill lines with nonzero spills:"; grep -E "[1-9][0-9]* bytes spill" .carry/ptxas.txt; } >> "$log"

if [ "$mode" != bench ]; then
  # One pytest process per backend, each under a timeout: a hang or a fault in one kernel family
  # cannot take the other's results (or the benchmark) down with it.
  # The CPU tests run with the first backend only (-m gpu afterwards).
  sel=()
  for b in ${FLASHCUTE_TEST_BACKENDS:-sm80 sm90}; do
    stamp "pytest backend=$b ${sel[*]}"
    FLASHCUTE_TEST_BACKENDS=$b timeout "${PYTEST_TIMEOUT:-200}" python3 -m pytest tests "${sel[@]}" -q -rs \
      -p no:cacheprovider --maxfail=40 > "$OUT/pytest-$b.txt" 2>&1
    echo "pytest backend=$b rc=$?" >> "$OUT/pytest-$b.txt"
    tail -15 "$OUT/pytest-$b.txt"
    sel=(-m gpu)
  done
fi
if [ "$mode" != tests ]; then
  stamp "benchmark ${bench_args[*]}"
  timeout "${BENCH_TIMEOUT:-240}" python3 benchmarks/bench_attention.py "${bench_args[@]}" --json "$OUT/bench.json" --plot "$OUT/bench.png" \
    > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.txt"
  tail -60 "$OUT/bench.txt"
  cat "$OUT/bench.txt" >> "$log" && rm "$OUT/bench.txt"  # (at most 8 files come back from $OUT)
  if [ -n "${FP8_MODE_ARGS:-}" ]; then  # e.g. FP8_MODE_ARGS="--hdims 128,256 --seqlens 1024,4096,16384"
    stamp "FP8 mode benchmark (bench_fp8_mode.py $FP8_MODE_ARGS)"
    timeout "${FP8_MODE_TIMEOUT:-180}" python3 benchmarks/bench_fp8_mode.py $FP8_MODE_ARGS --json "$OUT/fp8_mode.json" \
      > "$OUT/fp8_mode.txt" 2>&1
    echo "fp8 mode bench rc=$?" >> "$OUT/fp8_mode.txt"
    tail -40 "$OUT/fp8_mode.txt"
    cat "$OUT/fp8_mode.txt" >> "$log" && rm "$OUT/fp8_mode.txt"
  fi
  if [ -z "${NO_ABLATION:-}" ] && [ -d .carry/ablation ]; then  # scripts/build_ablation.sh
    stamp "kernel variants (bench_ablation.py)"
    timeout "${ABLATION_TIMEOUT:-120}" python3 benchmarks/bench_ablation.py --json "$OUT/ablation.json" \
      > "$OUT/ablation.txt" 2>&1
    echo "ablation rc=$?" >> "$OUT/ablation.txt"
    tail -40 "$OUT/ablation.txt"
    cat "$OUT/ablation.txt" >> "$log" && rm "$OUT/ablation.txt"
  fi
fi
# EXTRA_CMD="python3 scripts/fp8_lse_probe.py": one more diagnostic, its output into log.txt.
if [ -n "${EXTRA_CMD:-}" ]; then
  stamp "extra: $EXTRA_CMD"
  timeout "${EXTRA_TIMEOUT:-90}" bash -c "$EXTRA_CMD" >> "$log" 2>&1
  echo "extra rc=$?" | tee -a "$log"
fi
# NCU_CASES="128:1024:causal 128:1024:full": profile one launch of each (hdim:seqlen:causal|full).
for c in ${NCU_CASES:-}; do
  IFS=: read -r d s m <<< "$c"
  stamp "ncu $c"
  timeout "${NCU_TIMEOUT:-90}" ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section Occupancy python3 scripts/profile_case.py --hdim "$d" \
    --seqlen "$s" $([ "$m" = causal ] && echo --causal) --backend "${NCU_BACKEND:-sm90}" \
    > "$OUT/ncu_one.txt" 2>&1
  echo "ncu $c rc=$?" >> "$OUT/ncu_one.txt"
  { echo "===== ncu $c"; cat "$OUT/ncu_one.txt"; } >> "$OUT/ncu.txt" && rm "$OUT/ncu_one.txt"
done
if [ "$mode" != bench ]; then
  if [ -z "${nosan:-}" ]; then
    for tool in memcheck racecheck synccheck; do
      stamp "compute-sanitizer $tool"
      timeout "${SANITIZE_TIMEOUT:-90}" compute-sanitizer --tool "$tool" --kernel-name kns=flashcute --print-limit 20 \
        python3 scripts/sanitize_cases.py >> "$OUT/sanitize.txt" 2>&1
      echo "$tool rc=$?" | tee -a "$OUT/sanitize.txt"
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitize.txt" | tail -1
    done
  fi
fi
stamp "done"
