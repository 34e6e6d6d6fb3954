// Small device helpers shared by every arch (no arch-specific instructions here).
#pragma once

#include <cmath>
#include <cute/tensor.hpp>
#include <cutlass/numeric_conversion.h>

namespace flashcute {

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// Reduce across the kThreads consecutive lanes that share an accumulator row (4 for both the
// mma.sync m16n8k16 and the wgmma accumulator layouts), leaving the result in all of them.
template <int kThreads, typename Op>
__device__ __forceinline__ float lane_group_allreduce(float x, Op op) {
  static_assert(kThreads >= 1 && kThreads <= 32 && (kThreads & (kThreads - 1)) == 0, "power of 2");
#pragma unroll
  for (int offset = kThreads / 2; offset > 0; offset /= 2) {
    x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// Returns x unchanged, but the front-end optimiser (NVVM) can no longer see where the value came
// from. Used inside a loop on a loop-invariant per-thread value (a base address, a coordinate),
// it keeps NVVM from hoisting everything derived from that value (one address per row or per
// k-slice, per-row mask limits) out of the loop, where each hoisted copy would hold a register
// for the whole loop. The derived values are then recomputed where they are used, often for
// free (an immediate offset of the load that uses them). The empty asm emits no instruction, so
// ptxas still sees through it and may hoist arithmetic itself (see thread_index_in_loop).
template <typename T>
__device__ __forceinline__ T opaque(T x) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit values");
  if constexpr (sizeof(T) == 8) {
    asm volatile("" : "+l"(x));
  } else {
    asm volatile("" : "+r"(x));
  }
  return x;
}

// Convert a register fragment element-wise to another numeric type, keeping its layout. Uses
// cutlass's array converter so that fp32 -> bf16/fp16 packs two values per cvt instruction.
template <typename To, typename Engine, typename Layout>
__device__ __forceinline__ auto convert_fragment(cute::Tensor<Engine, Layout> const& t) {
  using From = typename Engine::value_type;
  constexpr int N = decltype(cute::size(t))::value;
  cutlass::NumericArrayConverter<To, From, N> convert;
  auto out = cute::make_fragment_like<To>(t);
  *reinterpret_cast<cutlass::Array<To, N>*>(out.data()) =
      convert(*reinterpret_cast<cutlass::Array<From, N> const*>(t.data()));
  return out;
}

}  // namespace flashcute
