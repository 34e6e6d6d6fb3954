// Speed-of-light ablation only (FLASHCUTE_SM90_SOL_QROT=1, harness builds; wrong results are not
// possible from it, but it does useless work): what quantizing q inside the FP8 attention kernel
// would cost per tile. Each consumer thread takes its 2 units (32 coordinates of one row: a
// warpgroup's 64 rows x 128 d), reads them (from Q's e4m3 buffer, as if they were bf16: the same
// shared-memory loads a bf16 Q tile would need), applies the rotation's signs and the transform
// of fp8_quantize_rotation.cuh (hadamard_row_mma), its row's sum of squares, the scale, the e4m3
// conversion, and stores the bytes to a scratch buffer; then the proxy fence and the warpgroup
// barrier that an S GEMM reading them would need. (benchmarks/RESULTS.md, session 38.)
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include "sm90/fp8_quantize_item.cuh"
#include "sm90/fp8_quantize_rotation.cuh"
#include "sm90/fwd_traits.cuh"

namespace flashcute::sm90 {

constexpr int kSolQrotUnits = 2;  // units a consumer thread quantizes per tile (d = 128)
constexpr int kSolQrotBarrier = 8;  // + wg: a named barrier no other role uses

// scratch: this warpgroup's 128 * kSolQrotUnits * 32 bytes (the masks are read from it too); tid:
// the thread in its warpgroup. The per-unit steps are the quantizer's own (cast_rows_staged's).
template <int kScratchBytes>
CUTE_DEVICE void sol_q_quantize(const uint4* q16, int q16_n, uint8_t (&scratch)[kScratchBytes], int wg, int tid) {
  namespace qz = flashcute::sm90::quant;
  static_assert(kScratchBytes == 128 * kSolQrotUnits * qz::kUnitElems, "one e4m3 unit per thread and step");
  uint32_t hb[2][2];
  qz::hadamard16_fragments<qz::Bf16>(hb);
  const uint32_t* masks = reinterpret_cast<const uint32_t*>(scratch) + (tid % 4) * qz::kMaskWords;
  CUTE_UNROLL
  for (int i = 0; i < kSolQrotUnits; ++i) {
    const int u = i * 128 + tid;
    uint4 raw[qz::kGroups];
    CUTE_UNROLL
    for (int k = 0; k < qz::kGroups; ++k) raw[k] = q16[(u * qz::kGroups + k) & (q16_n - 1)];
    float v[qz::kUnitElems];
    qz::unit_values<128, true, true, qz::Bf16>(raw, masks, hb, v);
    float descale;
    const float scale = qz::scale_of(__fsqrt_rn(qz::row_sum_squares<4>(v)), 1.f, &descale);
    uint32_t b[qz::kUnitWords];
    qz::vt_cast_bytes(v, scale, b);
    uint4* dst = reinterpret_cast<uint4*>(scratch + u * qz::kUnitElems);
    dst[0] = make_uint4(b[0], b[1], b[2], b[3]);
    dst[1] = make_uint4(b[4], b[5], b[6], b[7]);
  }
  cutlass::arch::fence_view_async_shared();
  named_bar_sync(kSolQrotBarrier + wg, 128);
}

}  // namespace flashcute::sm90
