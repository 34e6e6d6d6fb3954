#!/usr/bin/env bash
# scripts/gpu_check.sh once per carried wheel folder, in one device call: each folder holds a
# wheel and its ptxas.txt (scripts/build_carry.sh's output, moved aside), e.g. two candidate
# trees checked side by side. Each check's files are packed into $OUT/<folder name>.tgz (a call
# brings back at most 8 files).
#   device run:  carry=[".carry/cand", ".carry/candov"]
#                command: scripts/gpu_check_wheels.sh .carry/cand .carry/candov -- <gpu_check.sh args>
# The environment (PYTEST_TIMEOUT, EXTRA_CMD, ...) is passed on to every check.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_ROOT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT_ROOT"
dirs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do dirs+=("$1"); shift; done
[ $# -gt 0 ] && shift  # the "--"
for d in "${dirs[@]}"; do
  name=$(basename "$d")
  echo "===== $name"
  rm -f .carry/flashcute-*.whl .carry/ptxas.txt
  cp "$d"/*.whl "$d"/ptxas.txt .carry/ || { echo "$name: no wheel"; continue; }
  # A machine kept warm from an earlier call may still hold .carry/ablation: not timed here.
  OUT="$OUT_ROOT/$name" NO_ABLATION=1 scripts/gpu_check.sh "$@"
  tar czf "$OUT_ROOT/$name.tgz" -C "$OUT_ROOT" "$name" && rm -rf "${OUT_ROOT:?}/$name"
done
ls -l "$OUT_ROOT"
