#!/usr/bin/env bash
# One device call for a block-quantizer change on whichever card comes (session 46): the candidate's
# FP8 tests and sanitizers, the do_bench A B A B (quant_ab.sh; its ncu on an H200 only), the
# quantizer in the FP8 mode's own sequence for both wheels (diag_quant_clock.py, d=128 and d=256,
# A B A B: where an H100's quantizer follows the clock, run 169), then, on an H200, the protocol
# check with the candidate. H200_ONLY=1 does nothing on another card; SKIP_PROTOCOL=1 leaves the
# protocol check out (~3 min); quant_ab.sh's options (SKIP_CHECKS, SKIP_NCU) pass through.
#   device run:  carry=[".carry/<base>", ".carry/<cand>"]
#                command: BASE=.carry/<base> CAND=.carry/<cand> scripts/quant_card_call.sh
# Files under $OUT: quant_ab.tgz, dqc.tgz, protocol.tgz (H200); the log is the output.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
W=/tmp/quant_card; rm -rf "$W"; mkdir -p "$W/dqc"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
install() { python3 -m pip install -q --no-deps --no-index --force-reinstall "$1"/flashcute-*.whl > /dev/null 2>&1 || { echo "install of $1 failed"; exit 2; }; }
in_sequence() {  # the A B of the quantizer in the mode's sequence, both head dims
  for pass in 1 2; do
    for w in base cand; do
      dir=$BASE; [ "$w" = cand ] && dir=$CAND
      install "$dir"
      for h in 128 256; do
        echo "== pass $pass $w d=$h"
        timeout 60 python3 benchmarks/diag_quant_clock.py --seconds 1 --hdim "$h" --json "$W/dqc/pass$pass-$w-d$h.json" 2>&1 \
          | grep -E "^# |^\| (quant|mode|bf16)"
      done
    done
  done
  tar czf "$OUT/dqc.tgz" -C "$W" dqc
}
h200=; case "$card" in *H200*) h200=1 ;; esac
[ -z "$h200" ] && [ -n "${H200_ONLY:-}" ] && { echo "not an H200: H200_ONLY, nothing to do"; exit 0; }
[ -z "$h200" ] && export SKIP_NCU=1
OUT="$W" scripts/quant_ab.sh 2>&1 | tail -32; cp "$W/quant_ab.tgz" "$OUT/" 2>/dev/null
in_sequence
[ -z "$h200" ] || [ -n "${SKIP_PROTOCOL:-}" ] && exit 0
SEQLENS=4096,16384 BF16_HDIMS=128 FP8_HDIMS=128,256 COOL_ROUNDS=1 WHEEL_DIR="$CAND" OUT="$W/protocol" \
  timeout 240 scripts/protocol_check.sh 2>&1 | tail -30
tar czf "$OUT/protocol.tgz" -C "$W" protocol
