#!/usr/bin/env bash
# The A/B kit of the sm90 switches still to be measured (benchmarks/RESULTS.md, the section
# "what the next device call measures"): builds, on this machine (~12 min; ~60 MiB of the
# 64 MiB carry),
#   .carry/micro/micro_turn.so   the consumer microbenchmark (benchmarks/micro_turn.py)
#   .carry/ablation/             variants of bf16 d=128, e4m3 d=128 (128 x 192; two P buffers:
#                                128 x 128, where 128 x 192 has too few registers for them),
#                                bf16 d=256 and d=64, e4m3 d=256; d=128 families with a control
#                                copy of base
#   .carry/trace/                bf16 d=128 traced builds (benchmarks/diag_trace.py)
# and prints the one device command that measures them all (carry the three folders).
set -euo pipefail
cd "$(dirname "$0")/.."
cut=$(python3 -c "import cutlass_library; print(cutlass_library.source_path)")
rm -rf .carry/ablation .carry/trace .carry/micro
mkdir -p .carry/micro .carry/trace
nvcc -std=c++17 --expt-relaxed-constexpr --use_fast_math -O3 -DNDEBUG -lineinfo -gencode=arch=compute_90a,code=sm_90a \
  -Xptxas -v -Isrc -Iinclude -I"$cut/include" -I"$cut/tools/util/include" -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED \
  -shared -Xcompiler -fPIC benchmarks/ablation/micro_turn.cu -o .carry/micro/micro_turn.so 2>&1 | grep -E "spill|C75" | sort | uniq -c
F8="-DTILE_N=192,-DTILE_STAGES=2,-DTILE_PREGS=40"
# bf16 d=128 with a third V stage (O in its own buffer: 224 KB of shared memory)
S3="-DTILE_N=128,-DTILE_STAGES=2,-DTILE_STAGES_V=3,-DTILE_ALIAS=0"
UD="-DFLASHCUTE_SM90_UNIFORM_DESC=1"    # operand descriptors in uniform registers
VK="-DFLASHCUTE_SM90_VT_KEYS_FIRST=1"   # 16-bit V^T: one TMA box per 64-wide dv slab
OR="-DFLASHCUTE_SM90_O_ROWS_FIRST=1"    # O: one TMA store box per 64-wide dv slab
P2="-DFLASHCUTE_SM90_TWO_P=1"           # two P register buffers
TR="-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2"
scripts/build_ablation.sh 90 128 base: pin:-DFLASHCUTE_SM90_PIN_PV_WAIT=1 ilv:-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 \
  pfd:-DFLASHCUTE_SM90_PREFETCH_DESC=1 vbt:-DFLASHCUTE_SM90_V_BEFORE_TURN=1 p2:$P2 p2s3:$S3,$P2 \
  ud:$UD udp2:$UD,$P2 vk:$VK vkud:$VK,$UD vkudp2:$VK,$UD,$P2 or:$OR vkudor:$VK,$UD,$OR vkudorp2:$VK,$UD,$OR,$P2 \
  vkudor176:-DTILE_N=176,-DTILE_STAGES=2,-DTILE_ALIAS=1,$VK,$UD,$OR \
  tr1:$TR tr1pfd:$TR,-DFLASHCUTE_SM90_PREFETCH_DESC=1 tr1p2:$TR,$P2 tr1vk:$TR,$VK \
  | grep -v "^-rw\|^total"
# e4m3 d=128: 128 x 192 (the library's tile from 4096 keys) and 128 x 128 (below, and where two
# P buffers fit); V^T is K-major there, so VK does not apply
scripts/build_ablation.sh 90f8 128 base:$F8 ilv:$F8,-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 pp:$F8,-DTILE_PINGPONG=1 \
  ud:$F8,$UD or:$F8,$OR n128: p2n128:$P2 udp2n128:$UD,$P2 \
  udorn224pp:-DTILE_N=224,-DTILE_STAGES=2,-DTILE_PREGS=40,-DTILE_PINGPONG=1,$UD,$OR \
  udorn224:-DTILE_N=224,-DTILE_STAGES=2,-DTILE_PREGS=40,-DTILE_PINGPONG=0,$UD,$OR \
  | grep -v "^-rw\|^total"
# The other two benchmarked head dims. Two P buffers do not fit there. At d=64 V^T and O are one
# atom wide, so VK and OR change nothing.
scripts/build_ablation.sh 90 256 base: ud:$UD vk:$VK vkud:$VK,$UD or:$OR vkudor:$VK,$UD,$OR | grep -v "^-rw\|^total"
scripts/build_ablation.sh 90 64 base: ud:$UD | grep -v "^-rw\|^total"
# e4m3 d=256 (issue 6: causal 16k is 1 % short of its bar): O's 32 stores per warpgroup -> 4
scripts/build_ablation.sh 90f8 256 base: udor:$UD,$OR | grep -v "^-rw\|^total"
mv .carry/ablation/*_tr1*.so .carry/trace/
cp .carry/ablation/sm90_hd128_base.so .carry/ablation/sm90_hd128_base2.so
cp .carry/ablation/sm90f8_hd128_base.so .carry/ablation/sm90f8_hd128_base2.so
du -sh .carry/ablation .carry/trace .carry/micro
cat <<'CMD'
device (carry [".carry/micro", ".carry/ablation", ".carry/trace"], ~6 min; the limit is 10):
python3 benchmarks/micro_turn.py --json $OUT/micro.json; python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 4096 --causal both --out $OUT/trace --raw-max-seqlen 0; timeout 240 python3 benchmarks/smoke_ablation.py | tail -2; python3 benchmarks/bench_ablation.py --seqlens 1024,4096,16384 --rounds 4 --rep 150 --json $OUT/ab.json | tail -20
CMD
