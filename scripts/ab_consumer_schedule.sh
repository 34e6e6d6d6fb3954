#!/usr/bin/env bash
# The consumer-schedule A/B kit (benchmarks/RESULTS.md runs 84-86): builds, on this machine,
#   .carry/micro/micro_turn.so   the consumer microbenchmark (benchmarks/micro_turn.py)
#   .carry/ablation/             bf16 d=128 and e4m3 d=128 (128 x 192; two P buffers: 128 x 128,
#                                where 128 x 192 has too few registers for them) variants of the
#                                schedule switches, each family with a control copy of its base
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
UD="-DFLASHCUTE_SM90_UNIFORM_DESC=1"
scripts/build_ablation.sh 90 128 base: pin:-DFLASHCUTE_SM90_PIN_PV_WAIT=1 \
  nopp_pin:-DFLASHCUTE_SM90_PINGPONG=0,-DFLASHCUTE_SM90_PIN_PV_WAIT=1 ilv:-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 \
  pfd:-DFLASHCUTE_SM90_PREFETCH_DESC=1 vbt:-DFLASHCUTE_SM90_V_BEFORE_TURN=1 \
  p2:-DFLASHCUTE_SM90_TWO_P=1 s3:$S3 p2s3:$S3,-DFLASHCUTE_SM90_TWO_P=1 \
  ud:$UD udp2:$UD,-DFLASHCUTE_SM90_TWO_P=1 \
  tr1:-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2 tr1pfd:-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2,-DFLASHCUTE_SM90_PREFETCH_DESC=1 \
  tr1p2:-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2,-DFLASHCUTE_SM90_TWO_P=1 \
  | grep -v "^-rw\|^total"
scripts/build_ablation.sh 90f8 128 base:$F8 ilv:$F8,-DFLASHCUTE_SM90_INTERLEAVE_SPV=1 pp:$F8,-DTILE_PINGPONG=1 \
  n128: p2n128:-DFLASHCUTE_SM90_TWO_P=1 ud:$F8,$UD udp2n128:$UD,-DFLASHCUTE_SM90_TWO_P=1 \
  | grep -v "^-rw\|^total"
# The uniform descriptors at the other two benchmarked head dims (two P buffers do not fit there)
scripts/build_ablation.sh 90 256 base: ud:$UD | grep -v "^-rw\|^total"
scripts/build_ablation.sh 90 64 base: ud:$UD | grep -v "^-rw\|^total"
mv .carry/ablation/*_tr1*.so .carry/trace/
cp .carry/ablation/sm90_hd128_base.so .carry/ablation/sm90_hd128_base2.so
cp .carry/ablation/sm90f8_hd128_base.so .carry/ablation/sm90f8_hd128_base2.so
du -sh .carry/ablation .carry/trace .carry/micro
cat <<'CMD'
device (carry [".carry/micro", ".carry/ablation", ".carry/trace"], ~7 min; the limit is 10):
python3 benchmarks/micro_turn.py --json $OUT/micro.json; python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 4096 --causal both --out $OUT/trace --raw-max-seqlen 0; timeout 150 python3 benchmarks/smoke_ablation.py | tail -2; python3 benchmarks/bench_ablation.py --seqlens 1024,4096,16384 --rounds 4 --rep 150 --json $OUT/ab.json | tail -20
CMD
