#!/usr/bin/env bash
# Historical: the kit of run 87 (benchmarks/RESULTS.md). Its switches have since landed (V^T
# keys-first, O rows-first, warpgroup-sliced descriptors: now unconditional, so VK/UD/OR below
# are no-ops) or been removed (tile overlap, OV). To rebuild it as measured, check out 28af807.
# The A/B kit of the sm90 switches still to be measured (benchmarks/RESULTS.md, the section
# "what the next device call measures"): builds, on this machine (~12 min; what travels, with the tracked
# tree, must stay under 64 MiB),
#   .carry/micro/micro_turn.so   the consumer microbenchmark (benchmarks/micro_turn.py; MICRO=1 only)
#   .carry/ablation/             variants of bf16 d=128, e4m3 d=128 (128 x 192; two P buffers:
#                                128 x 128, where 128 x 192 has too few registers for them),
#                                bf16 d=256 and d=64, e4m3 d=256; d=128 families with a control
#                                copy of base
#   .carry/trace/                bf16 d=128 traced builds (benchmarks/diag_trace.py)
#   .carry/ov/                   tile overlap (FLASHCUTE_SM90_TILE_OVERLAP) on bf16 d=128 (base and
#                                the layout candidate), e4m3 d=128 (128 x 192) and bf16 d=64: a new
#                                schedule across tiles, smoke-tested on its own first (a hang
#                                there must not cost the kit's timings), then timed with the kit
#   .carry/trace_ov/             the same traced (run only once that smoke test passed)
# and prints the one device command that measures them all (carry the four folders).
set -euo pipefail
cd "$(dirname "$0")/.."
cut=$(python3 -c "import cutlass_library; print(cutlass_library.source_path)")
rm -rf .carry/ablation .carry/trace .carry/micro .carry/ov .carry/trace_ov
mkdir -p .carry/micro .carry/trace .carry/ov .carry/trace_ov
# The consumer microbenchmark (.carry/micro, 3.4 MB) is left out: with the tile-overlap variants
# the kit would not fit the carry (64 MiB with the tracked tree, 4.6 MB). MICRO=1 builds it.
if [ "${MICRO:-0}" = 1 ]; then
nvcc -std=c++17 --expt-relaxed-constexpr --use_fast_math -O3 -DNDEBUG -lineinfo -gencode=arch=compute_90a,code=sm_90a \
  -Xptxas -v -Isrc -Iinclude -I"$cut/include" -I"$cut/tools/util/include" -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED \
  -shared -Xcompiler -fPIC benchmarks/ablation/micro_turn.cu -o .carry/micro/micro_turn.so 2>&1 | grep -E "spill|C75" | sort | uniq -c
fi
F8="-DTILE_N=192,-DTILE_STAGES=2,-DTILE_PREGS=40"
UD="-DFLASHCUTE_SM90_UNIFORM_DESC=1"    # operand descriptors in uniform registers
VK="-DFLASHCUTE_SM90_VT_KEYS_FIRST=1"   # 16-bit V^T: one TMA box per 64-wide dv slab
OR="-DFLASHCUTE_SM90_O_ROWS_FIRST=1"    # O: one TMA store box per 64-wide dv slab
P2="-DFLASHCUTE_SM90_TWO_P=1"           # two P register buffers
TR="-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2"
OV="-DFLASHCUTE_SM90_TILE_OVERLAP=1"     # a tile's first S with the last tile's last P V
# (Left out for the carry's size: pin, vbt, p2s3.)
scripts/build_ablation.sh 90 128 base: ilv:-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 \
  pfd:-DFLASHCUTE_SM90_PREFETCH_DESC=1 p2:$P2 \
  ud:$UD udp2:$UD,$P2 vk:$VK vkud:$VK,$UD vkudp2:$VK,$UD,$P2 or:$OR vkudor:$VK,$UD,$OR vkudorp2:$VK,$UD,$OR,$P2 \
  vkudor176:-DTILE_N=176,-DTILE_STAGES=2,-DTILE_ALIAS=1,$VK,$UD,$OR \
  tr1:$TR tr1vk:$TR,$VK ov:$OV vkudorov:$VK,$UD,$OR,$OV tr1ov:$TR,$OV \
  | grep -v "^-rw\|^total"
# e4m3 d=128: 128 x 192 (the library's tile from 4096 keys) and 128 x 128 (below, and where two
# P buffers fit); V^T is K-major there, so VK does not apply
scripts/build_ablation.sh 90f8 128 base:$F8 ilv:$F8,-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 pp:$F8,-DTILE_PINGPONG=1 \
  ud:$F8,$UD or:$F8,$OR n128: p2n128:$P2 udp2n128:$UD,$P2 \
  udorn224pp:-DTILE_N=224,-DTILE_STAGES=2,-DTILE_PREGS=40,-DTILE_PINGPONG=1,$UD,$OR \
  udorn224:-DTILE_N=224,-DTILE_STAGES=2,-DTILE_PREGS=40,-DTILE_PINGPONG=0,$UD,$OR ov:$F8,$OV udorov:$F8,$UD,$OR,$OV \
  | grep -v "^-rw\|^total"
# The other two benchmarked head dims. Two P buffers do not fit there. At d=64 V^T and O are one
# atom wide, so VK and OR change nothing.
scripts/build_ablation.sh 90 256 base: ud:$UD vk:$VK vkud:$VK,$UD or:$OR vkudor:$VK,$UD,$OR | grep -v "^-rw\|^total"
scripts/build_ablation.sh 90 64 base: ud:$UD ov:$OV | grep -v "^-rw\|^total"
# e4m3 d=256 (issue 6: causal 16k is 1 % short of its bar): O's 32 stores per warpgroup -> 4
scripts/build_ablation.sh 90f8 256 base: udor:$UD,$OR | grep -v "^-rw\|^total"
mv .carry/ablation/*_tr1ov.so .carry/trace_ov/
mv .carry/ablation/*_tr1*.so .carry/trace/
mv .carry/ablation/*ov.so .carry/ov/
cp .carry/ablation/sm90_hd128_base.so .carry/ablation/sm90_hd128_base2.so
cp .carry/ablation/sm90f8_hd128_base.so .carry/ablation/sm90f8_hd128_base2.so
du -sh .carry/ablation .carry/trace .carry/ov .carry/trace_ov
# What travels: the tracked tree plus the carried folders, at most 64 MiB = 67108864 bytes.
echo "travels: $(( $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) + $(du -cb .carry/ablation .carry/trace .carry/ov .carry/trace_ov | tail -1 | cut -f1) )) bytes"
cat <<'CMD'
device (carry [".carry/ablation", ".carry/trace", ".carry/ov", ".carry/trace_ov"], ~8 min; the limit is 10):
python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 4096 --causal both --out $OUT/trace --raw-max-seqlen 0; timeout 240 python3 benchmarks/smoke_ablation.py | tail -2; D=.carry/ablation; if timeout 60 python3 benchmarks/smoke_ablation.py --dir .carry/ov > $OUT/ov_smoke.txt 2>&1; then D=$D,.carry/ov; timeout 60 python3 benchmarks/diag_trace.py --dir .carry/trace_ov --seqlens 4096 --causal both --out $OUT/trace_ov --raw-max-seqlen 0; fi; tail -2 $OUT/ov_smoke.txt; python3 benchmarks/bench_ablation.py --dir $D --seqlens 1024,4096,16384 --rounds 4 --rep 150 --json $OUT/ab.json | tail -24; for t in racecheck memcheck; do timeout 100 compute-sanitizer --tool $t --print-limit 20 python3 benchmarks/smoke_ablation.py --dir .carry/ov --small --num-sms 5 > $OUT/ov_$t.txt 2>&1; tail -1 $OUT/ov_$t.txt; done
CMD
