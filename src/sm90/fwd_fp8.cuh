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

// First key of V^T position group `quad` (positions 4 quad .. 4 quad + 3 hold the keys
// key, key + 1, key + 8, key + 9; see the permutation above).
CUTE_DEVICE int vt_quad_first_key(int quad) {
  return 32 * (quad / 8) + 16 * ((quad % 8) / 4) + 2 * (quad % 4);
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

// The producer warpgroup's V -> V^T copy of one stage: 128 threads, each unit 4 keys x 16
// columns (four 16-byte loads, a 4x4 byte transpose per word, sixteen 4-byte stores). Lanes take
// consecutive position groups, so each store instruction writes one whole row of V^T (no bank
// conflicts); the loads have at most 2-way conflicts.
// Shared-space accesses by byte address (a generic pointer into smem would compile to generic
// LD/ST, which take the address-space check on every access).
CUTE_DEVICE uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
CUTE_DEVICE void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

template <class Traits>
CUTE_DEVICE void transpose_v_stage(typename Traits::Element* v_landing, typename Traits::Element* vt,
                                   int src_stage, int dst_stage, int ptid) {
  static_assert(sizeof(typename Traits::Element) == 1, "offsets below are in bytes");
  constexpr int kBlockN = Traits::kBlockN, kHeadDimV = Traits::kHeadDimV;
  constexpr int kQuads = kBlockN / 4;
  constexpr int kUnits = kQuads * (kHeadDimV / 16);
  typename Traits::SmemLayoutV layout_v;    // (N, dv, stage) -> byte offset, swizzled
  typename Traits::SmemLayoutVt layout_vt;  // (dv, N, stage) -> byte offset, swizzled
  const uint32_t v_base = cast_smem_ptr_to_uint(v_landing);
  const uint32_t vt_base = cast_smem_ptr_to_uint(vt);
  CUTE_UNROLL
  for (int u = ptid; u < kUnits; u += 128) {  // kUnits % 128 != 0 (e.g. N 96): a partial last pass
    const int quad = u % kQuads, d0 = (u / kQuads) * 16;
    const int key0 = vt_quad_first_key(quad);
    // 16-byte chunks stay contiguous under every GMMA swizzle (it permutes 16-byte units).
    const uint4 r[4] = {lds128(v_base + layout_v(key0, d0, src_stage)),
                        lds128(v_base + layout_v(key0 + 1, d0, src_stage)),
                        lds128(v_base + layout_v(key0 + 8, d0, src_stage)),
                        lds128(v_base + layout_v(key0 + 9, d0, src_stage))};
    CUTE_UNROLL
    for (int w = 0; w < 4; ++w) {
      auto word = [&](int k) {
        return w == 0 ? r[k].x : w == 1 ? r[k].y : w == 2 ? r[k].z : r[k].w;
      };
      // rows a, b, c, d (4 columns each) -> columns (a_j, b_j, c_j, d_j), j = 0..3
      const uint32_t ab01 = __byte_perm(word(0), word(1), 0x5140);  // a0 b0 a1 b1
      const uint32_t ab23 = __byte_perm(word(0), word(1), 0x7362);  // a2 b2 a3 b3
      const uint32_t cd01 = __byte_perm(word(2), word(3), 0x5140);
      const uint32_t cd23 = __byte_perm(word(2), word(3), 0x7362);
      const int d = d0 + 4 * w;
      sts32(vt_base + layout_vt(d + 0, 4 * quad, dst_stage), __byte_perm(ab01, cd01, 0x5410));
      sts32(vt_base + layout_vt(d + 1, 4 * quad, dst_stage), __byte_perm(ab01, cd01, 0x7632));
      sts32(vt_base + layout_vt(d + 2, 4 * quad, dst_stage), __byte_perm(ab23, cd23, 0x5410));
      sts32(vt_base + layout_vt(d + 3, 4 * quad, dst_stage), __byte_perm(ab23, cd23, 0x7632));
    }
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
