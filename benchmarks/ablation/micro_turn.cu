// Microbenchmark of the sm90 consumer's building blocks, in isolation and in pairs (bf16, d = 128,
// 64 x 128 per warpgroup, the library's FwdTraits and softmax): how many SM cycles a warpgroup
// spends on S = Q K^T (SS WGMMA), O += P V (RS WGMMA), both, and the online softmax of one block,
// alone and while the other consumer warpgroup keeps the tensor cores busy. The figures bound the
// key loop's turn (benchmarks/diag_trace.py measures the real one).
//   nvcc ... -o micro_turn.so; python benchmarks/micro_turn.py
#include <cute/tensor.hpp>
#include "sm90/fwd_mainloop.cuh"
#include "sm90/fwd_softmax.cuh"
#include "sm90/fwd_traits.cuh"
#include <cutlass/arch/reg_reconfig.h>

namespace flashcute::sm90 {
using namespace cute;
using MT = FwdTraits<cutlass::bfloat16_t, 128, 128, 128, 2, kOSeparate>;

// mode bits per warpgroup (wg 0, 1): 1 = S GEMM, 2 = P V GEMM, 4 = softmax of the S fragment.
__global__ void __launch_bounds__(384, 1) micro_turn(int mode0, int mode1, int iters, long long* out, float* sink) {
  extern __shared__ __align__(1024) char smem_raw[];
  auto& ss = *reinterpret_cast<typename MT::SharedStorage*>(smem_raw);
  const int wg = int(threadIdx.x) / 128 - 1;
  if (wg < 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<240>();
  const int tid = int(threadIdx.x) - 128;
  const int mode = wg == 0 ? mode0 : mode1;
  typename MT::TiledMmaQK mma_qk;
  typename MT::TiledMmaPV mma_pv;
  auto thr_qk = mma_qk.get_thread_slice(tid);
  auto thr_pv = mma_pv.get_thread_slice(tid);
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename MT::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename MT::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(ss.v.data()), typename MT::SmemLayoutVt{});
  Tensor tSrQ = thr_qk.partition_fragment_A(sQ);
  Tensor tSrK = thr_qk.partition_fragment_B(sK);
  Tensor tOrV = thr_pv.partition_fragment_B(sVt);
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<128>, Int<128>>{});
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<128>, Int<128>>{});
  Tensor tOrP = make_tensor<cutlass::bfloat16_t>(acc_as_operand_a(tSrS.layout()));
  Tensor sRowCol = make_tensor(tSrS.data(), acc_rowcol(tSrS.layout()));
  Tensor oRowCol = make_tensor(tOrO.data(), acc_rowcol(tOrO.layout()));
  clear(tOrO);
  for (int i = 0; i < size(tSrS); ++i) tSrS(i) = float((tid * 7 + i) % 13) * 0.1f;
  for (int i = 0; i < size(tOrP); ++i) tOrP(i) = cutlass::bfloat16_t(0.01f * (i % 5));
  Sm90OnlineSoftmax<decltype(size<0>(sRowCol))::value, 0> softmax;
  float corr[decltype(size<0>(sRowCol))::value];
  __syncwarp();
  named_bar_sync(1, 256);  // both consumer warpgroups start together
  const long long t0 = clock64();
  if (mode & 8) {
    // The key loop's schedule (no loads): S(n) and P(n+1) V issued in one turn, then the
    // softmax of S(n). Bits: 16 ping-pong turns between the two warpgroups (named barriers 2, 3),
    // 32 the P V wait pinned after the softmax's exponentials (warpgroup_wait_after), else the
    // plain wait that ptxas hoists.
    const bool pp = mode & 16;
    if (pp && wg == 1) named_bar_arrive(2, 256);
    for (int it = 0; it < iters; ++it) {
      if (pp) named_bar_sync(2 + wg, 256);
      wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true);
      wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, it & 1), tOrO, false);
      if (pp) named_bar_arrive(2 + (1 - wg), 256);
      warpgroup_wait<1>();
      warpgroup_fence_operand(tSrS);
      softmax.online(sRowCol, 0.125f, corr);
      if (mode & 32) {
        warpgroup_wait_after<0>(softmax.sum_dependency());
      } else {
        warpgroup_wait<0>();
      }
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);
      softmax.rescale(oRowCol, corr);
      Tensor rP = convert_fragment<cutlass::bfloat16_t>(tSrS);
      for (int i = 0; i < size(rP); ++i) tOrP(i) = rP(i);
    }
    if (pp && wg == 0) named_bar_sync(2, 256);
  } else
  for (int it = 0; it < iters; ++it) {
    if (mode & 1) wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true);
    if (mode & 2) wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, it & 1), tOrO, false);
    if (mode & 3) {
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      warpgroup_fence_operand(tOrO);
    }
    if (mode & 4) {
      softmax.online(sRowCol, 0.125f, corr);
      softmax.rescale(oRowCol, corr);
      Tensor rP = convert_fragment<cutlass::bfloat16_t>(tSrS);
      for (int i = 0; i < size(rP); ++i) tOrP(i) = rP(i);
      // Keep the next block's scores data-dependent on this P (no GEMM refills them here).
      if (!(mode & 1))
        for (int i = 0; i < size(tSrS); ++i) tSrS(i) = float(tOrP(i)) * 3.f + float(i & 7);
    }
  }
  const long long t1 = clock64();
  if ((tid & 127) == 0) out[wg] = t1 - t0;
  float acc = softmax.row_sum[0];
  for (int i = 0; i < size(tOrO); ++i) acc += tOrO(i);
  for (int i = 0; i < size(tSrS); ++i) acc += tSrS(i);
  if (acc == 12345.f) sink[tid] = acc;
}
}  // namespace flashcute::sm90

extern "C" __attribute__((visibility("default"))) int fc_micro_turn(int mode0, int mode1, int iters,
                                                                    long long* out, float* sink) {
  using namespace flashcute::sm90;
  const int smem = int(sizeof(typename MT::SharedStorage));
  cudaFuncSetAttribute(micro_turn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  micro_turn<<<1, 384, smem>>>(mode0, mode1, iters, out, sink);
  return int(cudaDeviceSynchronize());
}
