#!/usr/bin/env bash
# One device call for whichever card comes (session 44): on an H200 the re-time
# (scripts/retime_call.sh: the README's FP8 sweep, the FP8 mode, the protocol check); on any card
# the FP8 sanitizer cases (memcheck / racecheck / synccheck); on another card the bf16 and e4m3
# sweeps for the README's H100 figures.
#   device run:  carry=[".carry/<wheel folder>"]  command: WHEEL_DIR=.carry/<folder> scripts/any_card_call.sh
# SKIP_SANITIZE=1 leaves the sanitizers out; H200_ONLY=1 stops at once on another card.
# Files under $OUT: log.txt, retime.tgz (H200), sweeps.tgz (other cards), san_*.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
W=/tmp/any_card; rm -rf "$W"; mkdir -p "$W/s"  # work files, tarred into $OUT (at most 8 files come back)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$card" in
  *H200*) OUT="$W" SKIP_NCU=1 SKIP_TAIL=1 scripts/retime_call.sh; cp "$W/retime.tgz" "$OUT/" ;;
  *) [ -n "${H200_ONLY:-}" ] && { echo "not an H200 ($card): H200_ONLY, nothing to do"; exit 0; }
     python3 -m pip install -q --no-deps --no-index --force-reinstall "${WHEEL_DIR:-.carry}"/flashcute-*.whl > /dev/null 2>&1 \
       || { echo "install failed"; exit 2; } ;;
esac
for t in $([ -z "${SKIP_SANITIZE:-}" ] && echo memcheck racecheck synccheck); do
  FLASHCUTE_SANITIZE_FP8_ONLY=1 timeout "${SANITIZE_TIMEOUT:-100}" compute-sanitizer --tool "$t" --kernel-name kns=flashcute \
    --print-limit 20 python3 scripts/sanitize_cases.py > "$OUT/san_$t.txt" 2>&1
  echo "$t rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_$t.txt" | tail -1)"
done
case "$card" in
  *H200*) ;;
  *)
    echo "not an H200 ($card): the bf16 and e4m3 sweeps"
    nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > "$W/s/gpu.txt"
    timeout 150 python3 benchmarks/bench_attention.py --impls flashcute,cudnn --backend sm90 --hdims 64,128,256 \
      --seqlens 1024,4096,16384 --causal both --rounds 3 --json "$W/s/bf16-sweep.json" 2>&1 | grep -E "^\|"
    timeout 200 python3 benchmarks/bench_attention.py --dtype fp8 --impls flashcute,flashcute_bf16,flashcute_bf16src,cudnn \
      --backend sm90 --hdims 128,256 --seqlens 1024,4096,16384 --causal both --rounds 3 --json "$W/s/fp8-sweep.json" 2>&1 | grep -E "^\|"
    tar czf "$OUT/sweeps.tgz" -C "$W" s ;;
esac
