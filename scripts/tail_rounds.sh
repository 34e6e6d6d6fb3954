#!/usr/bin/env bash
# What the last, partial round of a non-causal launch costs (benchmarks/RESULTS.md, session 41):
# the same kernels (d=128, 4k keys) on batch x heads shapes whose 128-row tiles fill the 132 SMs'
# rounds differently -- 4 x 16 (2,048 tiles, 15.52 rounds), 6 x 11 (2,112, exactly 16), 4 x 17
# (2,176, 16.48) -- in bf16 and e4m3, two passes in alternation (cuDNN in the first), TFLOP/s.
#   device run:  carry=[".carry/<wheel folder>"]  command: WHEEL_DIR=.carry/<folder> scripts/tail_rounds.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/flashcute-out}"; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-index --force-reinstall "${WHEEL_DIR:-.carry}"/flashcute-*.whl > /dev/null 2>&1 || exit 2
nvidia-smi --query-gpu=name --format=csv,noheader
for pass in 1 2; do
  impls=flashcute; [ "$pass" = 1 ] && impls=flashcute,cudnn
  for shape in 16384:2048 24576:1408 16384:2176; do  # --total-tokens:--model-dim (batch = /4096, heads = /128)
    tokens=${shape%:*}; dim=${shape#*:}
    for dtype in bf16 fp8; do
      python3 benchmarks/bench_attention.py --dtype "$dtype" --impls "$impls" --backend sm90 --hdims 128 \
        --seqlens 4096 --causal no --total-tokens "$tokens" --model-dim "$dim" --rounds 3 \
        --json "$OUT/tail-$pass-$tokens-$dim-$dtype.json" 2>&1 | grep -E "^\| 128" | sed "s/^/$pass $tokens $dim $dtype /"
    done
  done
done
