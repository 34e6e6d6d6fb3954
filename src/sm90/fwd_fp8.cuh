// FP8 (e4m3) pieces of the sm90 forward kernel: the in-smem V transpose that the producer
// warpgroup runs, the packing of P into the A operand of P V, and the descale factors.
//
// Why a transpose: FP8 WGMMA only reads K-major operands. For O += P V the "K" of the GEMM is the
// key index, so B = V^T must have the keys contiguous, while V arrives from HBM with dv
// contiguous. FA3's answer, followed here: TMA lands V as it is and the otherwise idle producer
// warps write V^T into a second buffer, overlapped with the consumers' GEMMs. No extra pass over
// V in HBM.
//
// Why a permutation: the S accumulator of an m64nNk32 FP8 WGMMA gives a thread, per row and per
// 8-column group g, the columns 8g + 2q and 8g + 2q + 1 (q = lane % 4). The A operand of the next
// WGMMA wants, per row and per 32-wide k-step, the positions 4q .. 4q+3 in one register and
// 16 + 4q .. 16 + 4q + 3 in another. Rather than shuffle P between lanes, V^T's columns are
// permuted within each 32-key group so that position 16h + 4q + v holds key
//     16h + 8 (v / 2) + 2q + (v % 2)
// i.e. a thread's own columns {2q, 2q+1, 8+2q, 9+2q} (h = 0) and {16+2q, ..., 25+2q} (h = 1).
// P then needs only an in-register pack (pack_p_fp8), the masks act on S as for 16-bit inputs,
// and P V sums the same products in another order.
#pragma once

#include <cstdint>
#include <cute/tensor.hpp>
#include "common/params.h"
#include "common/utils.cuh"

namespace flashcute::sm90 {

using namespace cute;

// Four fp32 -> four e4m3 (round to nearest even, saturating), byte i = x_i.
CUTE_DEVICE uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t r;
  // cvt ... e4m3x2.f32 d, a, b puts a in the upper byte of d, b in the lower one.
  asm("{\n .reg .b16 lo, hi;\n"
      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}

// S (an m64nN fp32 accumulator fragment, values (column pair, row half, 8-column group) in
// compact order) -> the e4m3 A fragment of the k32 WGMMA (values (4 positions, row half, k half)
// per k-step), under the V^T permutation above: in-register, no lane exchange.
template <class TensorS, class TensorP>
CUTE_DEVICE void pack_p_fp8(TensorS const& s, TensorP& p) {
  constexpr int kGroups = decltype(size(s))::value / 4;  // 8-column groups
  static_assert(kGroups % 4 == 0, "k-steps of 32 columns");
  static_assert(decltype(size(p))::value == decltype(size(s))::value);
  Tensor p32 = recast<uint32_t>(p);
  CUTE_UNROLL
  for (int kc = 0; kc < kGroups / 4; ++kc) {
    CUTE_UNROLL
    for (int h = 0; h < 2; ++h) {
      CUTE_UNROLL
      for (int rh = 0; rh < 2; ++rh) {
        const int g = 4 * kc + 2 * h;  // groups g (keys +0, +1) and g + 1 (keys +8, +9)
        p32(rh + 2 * h + 4 * kc) = pack_e4m3x4(s(2 * rh + 4 * g), s(1 + 2 * rh + 4 * g),
                                               s(2 * rh + 4 * (g + 1)), s(1 + 2 * rh + 4 * (g + 1)));
      }
    }
  }
}

// The producer warpgroup's V -> V^T copy of one stage, with ldmatrix.trans / stmatrix.
// A block is 16 keys x 32 dv bytes (the stage has (N/16) x (dv/32) of them, 4 warps take every
// 4th). ldmatrix.x4.trans reads it as four 8x8 b16 matrices M0..M3 (keys 0-7 / 8-15 x bytes 0-15,
// then the same for bytes 16-31): thread t (p = t/4, q = t%4) receives from each, in one
// register, keys 2q and 2q+1 of the byte pair (2p, 2p+1). Two byte permutes of (M0, M1) give
// V^T rows 2p and 2p+1 at positions 4q .. 4q+3, holding keys 2q, 2q+1, 8+2q, 9+2q: exactly the
// permutation above. stmatrix.x4 then writes 4 bytes per thread per matrix, one 16-byte row of
// V^T per lane address. Per block and warp: 1 LDSM, 4 PRMT, 1 STSM and ~4 address instructions
// (the previous byte-by-word copy spent ~90 per 64 bytes, and the producer's instructions take
// issue slots from the consumer warps on the same schedulers).
// Bank conflicts: the stmatrix rows of one matrix are V^T rows d with distinct d % 8 (rows 2r
// for r < 4 and 2r + 1 for r >= 4 in S0, the others in S1), so a swizzled layout spreads them.
CUTE_DEVICE void ldsm_t_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
CUTE_DEVICE void stsm_x4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

template <class Traits>
CUTE_DEVICE void transpose_v_stage(typename Traits::Element* v_landing, typename Traits::Element* vt,
                                   int src_stage, int dst_stage, int ptid) {
  static_assert(sizeof(typename Traits::Element) == 1, "offsets below are in bytes");
  constexpr int kBlockN = Traits::kBlockN, kHeadDimV = Traits::kHeadDimV;
  static_assert(kBlockN % 16 == 0 && kHeadDimV % 32 == 0);
  constexpr int kKeyBlocks = kBlockN / 16;
  constexpr int kBlocks = kKeyBlocks * (kHeadDimV / 32);
  static_assert(kBlocks % 4 == 0, "every producer warp takes the same number of blocks");
  typename Traits::SmemLayoutV layout_v;    // (N, dv, stage) -> byte offset, swizzled
  typename Traits::SmemLayoutVt layout_vt;  // (dv, N, stage) -> byte offset, swizzled
  const uint32_t v_base = cast_smem_ptr_to_uint(v_landing);
  const uint32_t vt_base = cast_smem_ptr_to_uint(vt);
  // The thread index as a value ptxas must treat as changing from call to call (dst_stage >= 0,
  // so the added term is 0): otherwise it hoists every block's two addresses out of the
  // producer's tile loop, and the 56-register producer role spills them.
  const int t = opaque(ptid) + (opaque(dst_stage) >> 31);
  __builtin_assume(t >= 0 && t < 128);
  const int warp = t / 32, lane = t % 32;
  const int m = lane / 8, r = lane % 8;  // the matrix and row this lane gives the address of
  const int ld_key = r + 8 * (m % 2), ld_byte = 16 * (m / 2);
  const int st_row = 2 * r + ((m % 2) ^ int(r >= 4)) + 16 * (m / 2);
  // Thread t's matrix row is p = t / 4: rows 2p + (p >= 4) go to S0/S2, the others to S1/S3.
  const bool high = lane / 4 >= 4;
  const uint32_t sel_even = high ? 0x7531u : 0x6420u, sel_odd = high ? 0x6420u : 0x7531u;
  __syncwarp();  // ldmatrix/stmatrix are .aligned: thread 0 may come back from a TMA issue
  CUTE_UNROLL
  for (int i = 0; i < kBlocks / 4; ++i) {
    const int b = warp + 4 * i;
    const int kb = b % kKeyBlocks, db = b / kKeyBlocks;
    uint32_t v[4];
    ldsm_t_x4(v_base + layout_v(16 * kb + ld_key, 32 * db + ld_byte, src_stage), v);
    stsm_x4(vt_base + layout_vt(32 * db + st_row, 16 * kb, dst_stage),
            __byte_perm(v[0], v[1], sel_even), __byte_perm(v[0], v[1], sel_odd),
            __byte_perm(v[2], v[3], sel_even), __byte_perm(v[2], v[3], sel_odd));
  }
}

// Descale factors of one (batch, k/v head): FA3's convention, (batch, heads_k) fp32 tensors,
// absent = 1. Scores scale by q * k, the output by v.
struct Descale {
  float qk = 1.f, v = 1.f;
  Descale() = default;
  CUTE_DEVICE Descale(FwdParams const& p, int b, int hk) {
    const int64_t i = int64_t(b) * p.descale_batch_stride + int64_t(hk) * p.descale_head_stride;
    if (p.q_descale) qk *= p.q_descale[i];
    if (p.k_descale) qk *= p.k_descale[i];
    if (p.v_descale) v = p.v_descale[i];
  }
};

}  // namespace flashcute::sm90
