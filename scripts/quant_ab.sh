#!/usr/bin/env bash
# One device call for a candidate block quantizer (session 42): the FP8 tests and the sanitizers
# through the candidate wheel, then the quantizer and the FP8 mode timed against the base wheel
# in alternation (A B A B, each install a few seconds), then ncu of the candidate's block
# quantizer (its per-instruction source page, to compare with run 149's of the base).
#   device run:  carry=[".carry/<base>", ".carry/<cand>"]
#                command: BASE=.carry/<base> CAND=.carry/<cand> scripts/quant_ab.sh
# Options (environment): SKIP_CHECKS=1 (no tests, no sanitizers: timings only), SKIP_NCU=1,
# AB_CAUSAL=no|yes|both, AB_HDIMS (128,256), AB_SEQLENS (4096,16384), AB_MODEL_DIM (2048),
# AB_COLUMNS (bench_fp8_mode.py's; quant-blocks,fp8-kernel-blocks,fp8-mode,bf16): the timed
# cases, every column valid on both wheels; AB_IN_SEQUENCE=1 also times each wheel's quantizer in the
# FP8 mode's own sequence (diag_quant_clock.py, 4k, each of AB_HDIMS: where an H100's quantizer
# follows the clock, run 169). The candidate stays installed at the end.
# Files under $OUT: log.txt (everything printed) and quant_ab.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT/q"
Q="$OUT/q"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "[quant_ab +$(( $(date +%s) - t0 ))s] $*"; }
install() { python3 -m pip install -q --no-deps --no-index --force-reinstall "$1"/flashcute-*.whl > "$Q/install.txt" 2>&1 || { say "install of $1 failed"; cat "$Q/install.txt"; exit 2; }; }
say "card: $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | head -1)"
if [ -z "${SKIP_CHECKS:-}" ]; then
  install "$CAND"
  say "FP8 tests through the candidate"
  timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu_fp8.py tests/test_gpu_fp8_quantize.py \
    > "$Q/tests.txt" 2>&1
  tail -3 "$Q/tests.txt"; grep -E "^FAILED" "$Q/tests.txt" | head -5
  for tool in memcheck racecheck; do
    FLASHCUTE_SANITIZE_FP8_ONLY=1 timeout "${SANITIZE_TIMEOUT:-60}" \
      compute-sanitizer --tool "$tool" --kernel-name kns=flashcute --print-limit 20 python3 scripts/sanitize_cases.py > "$Q/sanitize-$tool.txt" 2>&1
    say "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$Q/sanitize-$tool.txt" | tail -1)"
  done
fi
HD="${AB_HDIMS:-128,256}"
MODE=(python3 benchmarks/bench_fp8_mode.py --hdims "$HD" --seqlens "${AB_SEQLENS:-4096,16384}" --causal "${AB_CAUSAL:-no}"
      --model-dim "${AB_MODEL_DIM:-2048}" --columns "${AB_COLUMNS:-quant-blocks,fp8-kernel-blocks,fp8-mode,bf16}")
for pass in 1 2; do
  for w in base cand; do
    dir=$BASE; [ "$w" = cand ] && dir=$CAND
    install "$dir"
    say "pass $pass: $w ($dir)"
    timeout 120 "${MODE[@]}" --json "$Q/mode-$pass-$w.json" 2>&1 | grep -E "^\| (${HD//,/|}) " | sed "s/^/$pass $w /"
    [ -n "${AB_IN_SEQUENCE:-}" ] && for h in ${HD//,/ }; do  # the quantizer in the mode's own sequence (4k)
      timeout 60 python3 benchmarks/diag_quant_clock.py --seconds 1 --hdim "$h" --json "$Q/dqc-$pass-$w-d$h.json" 2>&1 \
        | grep -E "^\| (quant|mode|bf16|kv)" | sed "s/^/$pass $w d=$h /"
    done
  done
done
[ -z "${SKIP_NCU:-}" ] && { say "ncu of the candidate's block quantizer"; scripts/ncu_quant.sh "$Q"; }
say "done"
tar czf "$OUT/quant_ab.tgz" -C "$OUT" q
