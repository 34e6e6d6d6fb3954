#!/usr/bin/env bash
# One device call for a block-quantizer change on whichever card comes (session 46): the candidate's
# FP8 tests and sanitizers, the do_bench A B A B with each wheel's quantizer also timed in the FP8
# mode's own sequence (quant_ab.sh with AB_IN_SEQUENCE=1; its ncu on an H200 only), then, on an
# H200, the protocol check with the candidate. H200_ONLY=1 does nothing on another card;
# SKIP_PROTOCOL=1 leaves the protocol check out (~3 min); quant_ab.sh's options pass through.
#   device run:  carry=[".carry/<base>", ".carry/<cand>"]
#                command: BASE=.carry/<base> CAND=.carry/<cand> scripts/quant_card_call.sh
# Files under $OUT: quant_ab.tgz, protocol.tgz (H200); the log is the output.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
W=/tmp/quant_card; rm -rf "$W"; mkdir -p "$W"
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
h200=; case "$card" in *H200*) h200=1 ;; esac
[ -z "$h200" ] && [ -n "${H200_ONLY:-}" ] && { echo "not an H200: H200_ONLY, nothing to do"; exit 0; }
[ -z "$h200" ] && export SKIP_NCU=1
OUT="$W" AB_IN_SEQUENCE=1 scripts/quant_ab.sh 2>&1 | tail -50; cp "$W/quant_ab.tgz" "$OUT/" 2>/dev/null
[ -z "$h200" ] || [ -n "${SKIP_PROTOCOL:-}" ] && exit 0
SEQLENS=4096,16384 BF16_HDIMS=128 FP8_HDIMS=128,256 COOL_ROUNDS=1 WHEEL_DIR="$CAND" OUT="$W/protocol" \
  timeout 240 scripts/protocol_check.sh 2>&1 | tail -30
tar czf "$OUT/protocol.tgz" -C "$W" protocol
