// Host side of the sm80 forward kernel: tile configuration per head dim and the launch.
#pragma once

#include <cuda_runtime.h>
#include <type_traits>
#include <cutlass/numeric_types.h>
#include "common/kernel_registry.h"
#include "common/params.h"
#include "sm80/fwd_kernel.cuh"

namespace flashcute {

namespace sm80 {

// Tiles per head dim (BlockM x BlockN, warps, CTAs/SM promised to ptxas). O and S live in
// registers (kBlockM*D/threads + kBlockM*BN/threads fp32 per thread); smem =
// (BlockM + 2*BlockN) * D * 2 bytes <= 99 KB so that one build runs on every sm8x GPU.
//   d=64 : 64 x 128, 4 warps, 3 CTAs/SM (40 KB; 16 rows per warp keep O at 32 and S at 64
//          fp32 regs, so the 168-register cap buys 12 warps/SM to hide the softmax. Measured on
//          the H200 (benchmarks/RESULTS.md): +4-7% over 128 x 64 at 3 CTAs/SM, which spills;
//          128 x 128 (FA2's tile) spills at 255 registers and runs 20% slower)
//   d=96 : 128 x 64, 4 warps  (48 KB)
//   d=128: 128 x 64, 4 warps  (64 KB; O 128 + S 64 fp32 regs per thread)
//   d=192: 128 x 64, 8 warps  (96 KB; 16 rows/warp keeps O at 96 regs)
//   d=256: 64 x 64,  4 warps  (96 KB; 128 x 64 would need 128 KB of smem)
template <int D> struct TileConfig;
template <> struct TileConfig<64>  { static constexpr int kM = 64,  kN = 128, kWarps = 4, kMinBlocks = 3; };
template <> struct TileConfig<96>  { static constexpr int kM = 128, kN = 64, kWarps = 4, kMinBlocks = 1; };
template <> struct TileConfig<128> { static constexpr int kM = 128, kN = 64, kWarps = 4, kMinBlocks = 1; };
template <> struct TileConfig<192> { static constexpr int kM = 128, kN = 64, kWarps = 8, kMinBlocks = 1; };
template <> struct TileConfig<256> { static constexpr int kM = 64,  kN = 64, kWarps = 4, kMinBlocks = 1; };

}  // namespace sm80

namespace sm80 {

template <class Element, int D, int kM, int kN, int kWarps, int kMinBlocks = 1>
int launch_fwd(const FwdParams& p) {
  using Traits = FwdTraits<Element, D, kM, kN, kWarps, kMinBlocks>;
  if (p.batch <= 0 || p.heads_q <= 0 || p.seqlen_q <= 0) return int(cudaSuccess);  // nothing to do
  auto kernel = fwd_kernel<Traits>;
  constexpr int kSmem = Traits::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return int(err);
  }
  dim3 grid((p.seqlen_q + kM - 1) / kM, p.heads_q, p.batch);
  kernel<<<grid, Traits::kNThreads, kSmem, static_cast<cudaStream_t>(p.stream)>>>(p);
  return int(cudaGetLastError());
}

}  // namespace sm80

template <int DTYPE, int HDIM, int HDIM_V>
int run_fwd_sm80(const FwdParams& p) {
  static_assert(HDIM == HDIM_V, "sm80 forward supports head_dim_v == head_dim");
  static_assert(DTYPE == 0 || DTYPE == 1, "sm80 forward supports fp16 and bf16");
  using Element = std::conditional_t<DTYPE == 0, cutlass::half_t, cutlass::bfloat16_t>;
  using Cfg = sm80::TileConfig<HDIM>;
  return sm80::launch_fwd<Element, HDIM, Cfg::kM, Cfg::kN, Cfg::kWarps, Cfg::kMinBlocks>(p);
}

}  // namespace flashcute
