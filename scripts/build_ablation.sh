#!/usr/bin/env bash
# Build kernel variants (bf16, one head dim) into .carry/ablation/ for benchmarks/bench_ablation.py
# on the GPU machine, which times them side by side (with cuDNN, and torch's FA2 for sm80).
#   scripts/build_ablation.sh                       # the sm90 ablation: full, no ping-pong, no intra-WG overlap (hdim 128)
#   scripts/build_ablation.sh 80 64 base: t64:-DTILE_M=64,-DTILE_N=64,-DTILE_WARPS=4,-DTILE_MINBLOCKS=4
#                                                   # FAMILY HDIM NAME:FLAGS... (flags comma-separated)
#   scripts/build_ablation.sh 90f8 128 n128: n192:-DTILE_N=192,-DTILE_STAGES=2
#                                                   # FP8 (e4m3 in, bf16 out) variants
set -euo pipefail
cd "$(dirname "$0")/.."
family="${1:-90}"; hd="${2:-128}"; shift $(( $# >= 2 ? 2 : $# ))
specs=("$@")
if [ ${#specs[@]} -eq 0 ]; then
  specs=(full: no_pingpong:-DFLASHCUTE_SM90_PINGPONG=0 no_intrawg_overlap:-DFLASHCUTE_SM90_INTRAWG_OVERLAP=0)
fi
# Both families are built for sm_90a: the variants are timed on the H200.
arch="-gencode=arch=compute_90a,code=sm_90a"
cut=$(python3 -c "import cutlass_library; print(cutlass_library.source_path)")
famnum="$family"; fp8=()
if [ "$family" = 90f8 ]; then famnum=90; fp8=(-DABL_FP8=1); fi
dir="${ABL_DIR:-.carry/ablation}"  # ABL_DIR: another output folder (e.g. a second kit)
mkdir -p "$dir"
build() {  # name:flag1,flag2
  local name=${1%%:*} flags=${1#*:}
  IFS=, read -r -a extra <<< "$flags"
  nvcc -std=c++17 --expt-relaxed-constexpr --use_fast_math -O3 -DNDEBUG -lineinfo $arch -Xptxas -v \
    -Isrc -Iinclude -I"$cut/include" -I"$cut/tools/util/include" -DFAMILY="$famnum" "${fp8[@]}" -DHD="$hd" -DHDV="$hd" \
    -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -shared -Xcompiler -fPIC -Xcompiler -fvisibility=hidden \
    -Xlinker --exclude-libs,ALL "${extra[@]}" benchmarks/ablation/harness.cu \
    -o "$dir/sm${family}_hd${hd}_${name}.so" 2>&1 | grep -E "spill|Used|C75" | sed "s/^/[$name] /"
}
# Two compile jobs at a time (the 2-core build machine).
i=0
for s in "${specs[@]}"; do
  build "$s" & i=$((i + 1))
  if [ $((i % 2)) -eq 0 ]; then wait; fi
done
wait
ls -l "$dir"
