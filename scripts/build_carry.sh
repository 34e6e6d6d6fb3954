#!/usr/bin/env bash
# Build the wheel here (no GPU needed) into .carry/ for the GPU machine, reusing a persistent
# build directory so that only changed kernels recompile.
#   scripts/build_carry.sh                      # the full default build
#   scripts/build_carry.sh "128" "90a;80"       # FLASHCUTE_HDIMS, FLASHCUTE_CUDA_ARCHS
# A candidate with compile-time switches, in its own build directory and carry folder:
#   EXTRA_CUDA_FLAGS="-DFLASHCUTE_SM90_SPLIT_Q=1" CARRY_DIR=.carry/candsq scripts/build_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
hdims="${1:-64;96;128;192;256}"
archs="${2:-90a;80}"
extra="${EXTRA_CUDA_FLAGS:-}"
carry="${CARRY_DIR:-.carry}"
tag=$(echo "${hdims}_${archs}" | tr ';' '-')
if [ -n "$extra" ]; then tag="${tag}_$(echo "$extra" | md5sum | cut -c1-8)"; fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
# The wheel is built aside and moved in at the end, and .carry/ablation (scripts/build_ablation.sh)
# is left alone, so a device call may carry .carry while this runs.
mkdir -p "$carry" build && rm -rf build/wheel-tmp
start=$(date +%s)
python3 -m pip wheel . -v --no-deps --no-build-isolation -w build/wheel-tmp \
  -C build-dir="build/carry-${tag}" \
  -C cmake.define.FLASHCUTE_HDIMS="${hdims}" \
  -C cmake.define.FLASHCUTE_CUDA_ARCHS="${archs}" \
  ${extra:+-C "cmake.define.CMAKE_CUDA_FLAGS=${extra}"} \
  -C build.verbose=true > "build/carry-${tag}.log" 2>&1 || { tail -50 "build/carry-${tag}.log"; exit 1; }
rm -f "$carry"/*.whl && mv build/wheel-tmp/*.whl "$carry"/
echo "built in $(( $(date +%s) - start )) s: $(ls -s --block-size=K "$carry"/*.whl)"
# Keep the ptxas report (registers, spills) next to the wheel: it travels to the GPU machine.
# (An incremental build that compiled nothing keeps the previous report.)
if grep -qE "ptxas info *: Used" "build/carry-${tag}.log"; then
  grep -E "ptxas info *: (Compiling|Function properties|Used)|spill" "build/carry-${tag}.log" > "$carry"/ptxas.txt || true
fi
if grep -E "[1-9][0-9]* bytes spill" "$carry"/ptxas.txt; then echo "WARNING: spills (above)"; fi
