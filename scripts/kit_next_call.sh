#!/usr/bin/env bash
# The kit for the next device call (benchmarks/RESULTS.md, session 23), built here (~10 min on
# 2 cores), then the two device commands that check and time it:
#   1. split Q (FLASHCUTE_SM90_SPLIT_Q, fwd_traits.cuh): harness builds of each sm90 family with
#      and without it into .carry/ablation, and two traced bf16 d=128 builds into .carry/trace;
#   2. the FP8 mode's V^T-input kernel (harness -DABL_VT=1, variants vt*): 24 producer
#      registers (consumers 240) and two P buffers, at its 192-key (>= 4k keys) and 128-key tiles;
#   3. (session 24) the FP8 quantizer's staged kernel (src/sm90/fp8_quantize.cu, selected per call
#      by FLASHCUTE_FP8_QUANTIZE_STAGED=1 with bulk copies, =2 with cp.async): in the candidate
#      wheel; its tests run with every kernel (tests/test_gpu_fp8_quantize.py), the sanitizer cases
#      compare both loaders with the direct kernel, and bench_fp8_mode.py times them in their own
#      columns (quant-vt-staged / -async, fp8-mode-staged / -async).
#   scripts/kit_next_call.sh          # builds, then prints the device commands and their carry
# The candidate wheel (the library with both switches on, for the full test run) is built apart:
#   EXTRA_CUDA_FLAGS="-DFLASHCUTE_SM90_SPLIT_Q=1 -DFLASHCUTE_SM90_VT_TILE=1" CARRY_DIR=.carry/candsq scripts/build_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f .carry/ablation/*.so
sq=-DFLASHCUTE_SM90_SPLIT_Q=1
sq2=-DFLASHCUTE_SM90_SPLIT_Q=2  # also the transposing e4m3 kernels at 24 producer registers (they spill 8 bytes)
n192=-DTILE_N=192,-DTILE_STAGES=2  # e4m3 d=128's tile from 4k keys (TileConfigFp8Long)
scripts/build_ablation.sh 90 128 base: base2: sq:$sq
scripts/build_ablation.sh 90 64 base: sq:$sq
scripts/build_ablation.sh 90 256 base: sq:$sq
scripts/build_ablation.sh 90f8 128 base: sq:$sq2 n192:$n192,-DTILE_PREGS=40 n192sq:$n192,-DTILE_PREGS=40,$sq
scripts/build_ablation.sh 90f8 256 base: sq:$sq2
vt=-DABL_VT=1
scripts/build_ablation.sh 90f8 128 vt:$n192,-DTILE_PREGS=40,$vt vt24:$n192,-DTILE_PREGS=24,$vt vt24p2:$n192,-DTILE_PREGS=24,-DTILE_TWOP=1,$vt \
  vtn128:$vt vtn128p2:-DTILE_TWOP=1,$vt
# (session 25) the direct-store epilogue (fwd_epilogue.cuh, FLASHCUTE_SM90_EPI_DIRECT), alone and
# with split Q; =2 stores 16-byte chunks after a quad transpose.
ep=-DFLASHCUTE_SM90_EPI_DIRECT=1; ep16=-DFLASHCUTE_SM90_EPI_DIRECT=2
scripts/build_ablation.sh 90 128 ep:$ep sqep:$ep,$sq ep16:$ep16 sqep16:$ep16,$sq
scripts/build_ablation.sh 90 64 ep:$ep sqep:$ep,$sq
scripts/build_ablation.sh 90f8 128 n192ep:$n192,-DTILE_PREGS=40,$ep vt24p2ep:$n192,-DTILE_PREGS=24,-DTILE_TWOP=1,$vt,$ep
# Traced builds (src/sm90/trace.cuh): the tile boundary's segments with and without the switch.
mkdir -p .carry/trace && rm -f .carry/trace/*.so
tr=-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2
scripts/build_ablation.sh 90 128 tr:$tr trsq:$tr,$sq trsqep:$tr,$sq,$ep
mv .carry/ablation/sm90_hd128_tr.so .carry/ablation/sm90_hd128_trsq.so .carry/ablation/sm90_hd128_trsqep.so .carry/trace/
du -sh .carry/ablation .carry/trace .carry/candsq2 2>/dev/null || true
cat <<'EOF'
Session 25: the whole kit runs in ONE call (candidate wheel in .carry/candsq2, built apart with
  EXTRA_CUDA_FLAGS="-DFLASHCUTE_SM90_SPLIT_Q=1 -DFLASHCUTE_SM90_VT_TILE=1" CARRY_DIR=.carry/candsq2 scripts/build_carry.sh):
carry [".carry/ablation", ".carry/trace", ".carry/candsq2"], command: scripts/kit_one_call.sh
(shorter where little device time is left: FLASHCUTE_TEST_BACKENDS=sm90 KIT_BUDGET=400 KIT_AB_ROUNDS=2 [KIT_NO_SANITIZE=1]).
The two-call form below is the older one (candsq = the same switches before session 25's fixes).
Device calls (carry [".carry/ablation", ".carry/trace", ".carry/candsq"]), one after the other:
1. the candidate (split Q wherever it fits without spills; the FP8 V^T kernel at 24/240 registers with
   two P at d=128; the staged quantizer beside the direct one): every test, the sanitizers, the FP8 mode
   end to end with both quantizer kernels, and the staged kernel's lag (~8 min)
cp .carry/candsq/*.whl .carry/candsq/ptxas.txt .carry/ && PYTEST_TIMEOUT=300 SANITIZE_TIMEOUT=120 scripts/gpu_check.sh --tests-only; \
  timeout 100 python3 benchmarks/bench_fp8_mode.py --hdims 128 --seqlens 4096,16384 --causal both --json $OUT/fp8_mode.json; \
  for L in 400 800 3000; do FLASHCUTE_FP8_QUANTIZE_LAG=$L timeout 40 python3 benchmarks/bench_fp8_mode.py --hdims 128 --seqlens 4096 --columns quant-vt,quant-vt-staged,quant-vt-async | grep '^hdim'; done
2. the kit: traces, smoke (all), racecheck (split-Q variants, 5 CTAs), timings, then ncu of the three
   quantizer kernels at d=128 4k (~7 min)
timeout 60 python3 benchmarks/diag_trace.py --dir .carry/trace --seqlens 1024,4096 --out $OUT/trace; \
  timeout 100 python3 benchmarks/smoke_ablation.py --dir .carry/ablation && \
  { timeout 120 compute-sanitizer --tool racecheck python3 benchmarks/smoke_ablation.py --dir .carry/ablation --only sq --small --num-sms 5 > $OUT/racecheck_kit.txt 2>&1; tail -3 $OUT/racecheck_kit.txt; \
    timeout 270 python3 benchmarks/bench_ablation.py --dir .carry/ablation --seqlens 1024,4096,16384 --rounds 3 --rep 100 --json $OUT/ab.json; }; \
  python3 -m pip install -q --no-deps --no-index --force-reinstall .carry/candsq/flashcute-*.whl && for K in 0 1 2; do \
    FLASHCUTE_FP8_QUANTIZE_STAGED=$K timeout 50 ncu --clock-control none --kernel-name regex:quantize --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      python3 scripts/profile_case.py --quantize --hdim 128 --seqlen 4096; done > $OUT/ncu_quant.txt 2>&1; tail -3 $OUT/ncu_quant.txt

If machines are scarce (one call only, ~8 min; carry [".carry/ablation", ".carry/candsq"]): the quantizer's
and the FP8 mode's tests on the candidate (all three quantizer kernels, varlen), the FP8 mode's timings,
the smoke test and a 2-round A/B of the kit (no sanitizers, traces or ncu):
python3 -m pip install -q --no-deps --no-index --force-reinstall .carry/candsq/flashcute-*.whl > $OUT/install.txt 2>&1; timeout 240 python3 -m pytest -q tests/test_gpu_fp8_quantize.py tests/test_gpu_fp8.py -k "quantize or colmajor or mode" -p no:cacheprovider > $OUT/pytest_quant.txt 2>&1; tail -4 $OUT/pytest_quant.txt; timeout 90 python3 benchmarks/bench_fp8_mode.py --hdims 128 --seqlens 4096,16384 --causal no --json $OUT/fp8_mode.json > $OUT/fp8_mode.txt 2>&1; tail -6 $OUT/fp8_mode.txt; timeout 60 python3 benchmarks/smoke_ablation.py --dir .carry/ablation > $OUT/smoke.txt 2>&1; tail -2 $OUT/smoke.txt; timeout 200 python3 benchmarks/bench_ablation.py --dir .carry/ablation --seqlens 1024,4096,16384 --rounds 2 --rep 100 --json $OUT/ab.json > $OUT/ab.txt 2>&1; tail -60 $OUT/ab.txt
EOF
