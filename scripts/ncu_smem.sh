#!/usr/bin/env bash
# Shared-memory traffic of kernel variants (scripts/build_ablation.sh): ncu's shared-memory table
# (wavefronts and bank conflicts per instruction kind), compute and speed-of-light sections, one
# launch per case, written under $OUT.
#   device run: carry=[".carry/ablation"]
#   command: scripts/ncu_smem.sh .carry/ablation/sm90f8_hd256_base.so:fp8:256:16384 [LIB:DTYPE:HDIM:SEQLEN ...]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
for spec in "$@"; do
  IFS=: read -r lib dt d s <<< "$spec"
  n="$(basename "$lib" .so)_s$s"
  timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 \
    --launch-count 1 --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
    --section SpeedOfLight --print-details all \
    python3 scripts/profile_case.py --dtype "$dt" --hdim "$d" --seqlen "$s" --ablation "$lib" > "$OUT/smem_$n.txt" 2>&1
  echo "ncu rc=$?" >> "$OUT/smem_$n.txt"
done
