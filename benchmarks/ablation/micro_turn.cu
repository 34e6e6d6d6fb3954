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

// Mode bits (compile time, one per warpgroup: a runtime branch around the WGMMAs makes ptxas
// serialise them, C7518): 1 S GEMM, 2 P V GEMM, 4 softmax of the S fragment, 8 the key loop's
// schedule (16 ping-pong, 32 pinned P V wait, 64 S and P V k-steps alternated), 128 S and P V
// alternated (GEMMs only).
template <int mode>
__device__ __forceinline__ void run_mode(typename MT::SharedStorage& ss, int wg, int iters, long long* out, float* sink) {
  const int tid = int(threadIdx.x) - 128;
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
  if constexpr (mode == 0) {
  } else if constexpr ((mode & 8) != 0) {
    // The key loop's schedule (no loads): S(n) and P(n+1) V issued in one turn, then the
    // softmax of S(n). Bits: 16 ping-pong turns between the two warpgroups (named barriers 2, 3),
    // 32 the P V wait pinned after the softmax's exponentials (warpgroup_wait_after), else the
    // plain wait that ptxas hoists.
    constexpr bool pp = (mode & 16) != 0;
    if constexpr (pp) if (wg == 1) named_bar_arrive(2, 256);
    for (int it = 0; it < iters; ++it) {
      if constexpr (pp) named_bar_sync(2 + wg, 256);
      if constexpr ((mode & 64) != 0) {  // S's and P V's k-steps alternated (the library's pair)
        wgmma_issue_pair(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true, mma_pv, tOrP,
                         tOrV(_, _, _, it & 1), tOrO, false);
      } else {
        wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true);
        wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, it & 1), tOrO, false);
      }
      if constexpr (pp) named_bar_arrive(2 + (1 - wg), 256);
      if constexpr ((mode & 64) != 0) warpgroup_wait<0>(); else warpgroup_wait<1>();
      warpgroup_fence_operand(tSrS);
      softmax.online(sRowCol, 0.125f, corr);
      if constexpr ((mode & 32) != 0) {
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
    if constexpr (pp) if (wg == 0) named_bar_sync(2, 256);
  } else {
  for (int it = 0; it < iters; ++it) {
    if constexpr ((mode & 128) != 0) {  // S and P V alternated k-step by k-step (one commit group)
      wgmma_issue_pair(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true, mma_pv, tOrP,
                       tOrV(_, _, _, it & 1), tOrO, false);
    } else {
      if constexpr ((mode & 1) != 0) wgmma_issue<false>(mma_qk, tSrQ, tSrK(_, _, _, it & 1), tSrS, true);
      if constexpr ((mode & 2) != 0) wgmma_issue<true>(mma_pv, tOrP, tOrV(_, _, _, it & 1), tOrO, false);
    }
    if constexpr ((mode & 3) != 0) {
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      warpgroup_fence_operand(tOrO);
    }
    if constexpr ((mode & 4) != 0) {
      softmax.online(sRowCol, 0.125f, corr);
      softmax.rescale(oRowCol, corr);
      Tensor rP = convert_fragment<cutlass::bfloat16_t>(tSrS);
      for (int i = 0; i < size(rP); ++i) tOrP(i) = rP(i);
      // Keep the next block's scores data-dependent on this P (no GEMM refills them here).
      if constexpr (!(mode & 1))
        for (int i = 0; i < size(tSrS); ++i) tSrS(i) = float(tOrP(i)) * 3.f + float(i & 7);
    }
  }
  }
  const long long t1 = clock64();
  if ((tid & 127) == 0) out[wg] = t1 - t0;
  float acc = softmax.row_sum[0];
  for (int i = 0; i < size(tOrO); ++i) acc += tOrO(i);
  for (int i = 0; i < size(tSrS); ++i) acc += tSrS(i);
  if (acc == 12345.f) sink[tid] = acc;
}
template <int M0, int M1>
__global__ void __launch_bounds__(384, 1) micro_turn(int iters, long long* out, float* sink) {
  extern __shared__ __align__(1024) char smem_raw[];
  auto& ss = *reinterpret_cast<typename MT::SharedStorage*>(smem_raw);
  const int wg = int(threadIdx.x) / 128 - 1;
  if (wg < 0) {
    cutlass::arch::warpgroup_reg_dealloc<24>();
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<240>();
  if (wg == 0) run_mode<M0>(ss, 0, iters, out, sink);
  else run_mode<M1>(ss, 1, iters, out, sink);
}
}  // namespace flashcute::sm90

#define FC_MICRO_MODES(X) X(1, 0) X(2, 0) X(3, 0) X(3, 3) X(131, 0) X(131, 131) X(4, 0) X(4, 3) X(7, 0) X(7, 7) \
  X(24, 24) X(56, 56) X(8, 8) X(40, 40) X(40, 0) X(8, 0) X(88, 88) X(72, 72) X(72, 0)

extern "C" __attribute__((visibility("default"))) int fc_micro_turn(int mode0, int mode1, int iters,
                                                                    long long* out, float* sink) {
  using namespace flashcute::sm90;
  const int smem = int(sizeof(typename MT::SharedStorage));
#define FC_MICRO_CASE(a, b)                                                                        \
  if (mode0 == a && mode1 == b) {                                                                  \
    cudaFuncSetAttribute(micro_turn<a, b>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);     \
    micro_turn<a, b><<<1, 384, smem>>>(iters, out, sink);                                          \
    return int(cudaDeviceSynchronize());                                                           \
  }
  FC_MICRO_MODES(FC_MICRO_CASE)
  return -1;  // a mode pair not instantiated
}
