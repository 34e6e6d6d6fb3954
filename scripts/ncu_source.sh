#!/usr/bin/env bash
# Per-instruction profile of one launch per case: ncu's full set with source counters, printed as
# the details page and the SASS source page (stall samples per instruction) under $OUT.
#   device run: carry=[".carry"]  command: scripts/ncu_source.sh bf16:128:16384:full fp8:128:16384:full
# (install the carried wheel first, e.g. via scripts/gpu_check.sh, or pass --install; or profile
# a kernel variant of scripts/build_ablation.sh without the wheel: NCU_ABLATION=.carry/ablation/X.so).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
if [ "${1:-}" = --install ]; then
  shift
  python3 -m pip install -q --no-deps --no-index --force-reinstall .carry/flashcute-*.whl || exit 1
fi
for c in "$@"; do
  IFS=: read -r dt d s m <<< "$c"
  name="${dt}_d${d}_s${s}_${m}"
  rep="/tmp/$name"
  timeout "${NCU_TIMEOUT:-150}" ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 \
    --launch-count 1 --set full --import-source no -f -o "$rep" python3 scripts/profile_case.py \
    --dtype "$dt" --hdim "$d" --seqlen "$s" $([ "$m" = causal ] && echo --causal) \
    --backend "${NCU_BACKEND:-sm90}" ${NCU_ABLATION:+--ablation "$NCU_ABLATION"} > "$OUT/ncu_$name.log" 2>&1
  echo "ncu rc=$?" >> "$OUT/ncu_$name.log"
  ncu --import "$rep.ncu-rep" --page details >> "$OUT/ncu_$name.log" 2>&1
  ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/src_$name.csv" 2>&1
  gzip -f "$OUT/src_$name.csv"
done
