#!/usr/bin/env bash
# ncu of the installed library's block quantizer at d=128 4k (full set, clocks not locked): the
# details page into DIR/ncu_quant.txt and the per-instruction source page into
# DIR/src_quant.csv.gz (read it with scripts/ncu_stalls_by_op.py); prints the headline figures.
#   scripts/ncu_quant.sh DIR        (device; retime_call.sh and quant_ab.sh call it)
set -uo pipefail
cd "$(dirname "$0")/.."
dir="$1"; mkdir -p "$dir"
timeout 90 ncu --clock-control none --kernel-name regex:block_quantize --launch-skip 2 --launch-count 1 \
  --set full --import-source no -f -o /tmp/quant python3 scripts/profile_case.py --quantize --blocks \
  --hdim 128 --seqlen 4096 > "$dir/ncu_quant.txt" 2>&1
ncu --import /tmp/quant.ncu-rep --page details >> "$dir/ncu_quant.txt" 2>&1
ncu --import /tmp/quant.ncu-rep --page source --csv --print-source sass 2>&1 | gzip > "$dir/src_quant.csv.gz"
grep -E "Duration|DRAM Throughput|Issued Warp|No Eligible|Active Warps Per|SM Frequency|Executed Instructions  " \
  "$dir/ncu_quant.txt" | head -12
