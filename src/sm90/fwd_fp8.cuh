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

// The producer's V -> V^T copy of one stage, with ldmatrix.trans / stmatrix.
// A block is 16 keys x 32 dv bytes (the stage has (N/16) x (dv/32) of them); the W transposing
// warps take every W-th block. ldmatrix.x4.trans reads a block as four 8x8 b16 matrices
// M0..M3 (keys 0-7 / 8-15 x bytes 0-15, then the same for bytes 16-31): thread t (p = t/4,
// q = t%4) receives from each, in one register, keys 2q and 2q+1 of the byte pair (2p, 2p+1).
// Two byte permutes of (M0, M1) give V^T rows 2p and 2p+1 at positions 4q .. 4q+3, holding keys
// 2q, 2q+1, 8+2q, 9+2q: exactly the permutation above. stmatrix.x4 then writes 4 bytes per
// thread per matrix, one 16-byte row of V^T per lane address.
// Bank conflicts: the stmatrix rows of one matrix are V^T rows d with distinct d % 8 (rows 2r
// for r < 4 and 2r + 1 for r >= 4 in S0, the others in S1), so a swizzled layout spreads them.
//
// Addresses in few registers (the role has 24): both layouts are Swizzle o (linear offset), and
// a swizzle is linear over XOR. A lane's linear offset splits into a per-lane part (its row and
// byte within the block) and a per-block part whose bits are disjoint from it, so offset =
// swizzle(lane part) ^ swizzle(block part): one register per layout, and a compile-time
// constant XORed (and, above the swizzled bits, added) per block. Each warp's block list is a
// compile-time constant too (one unrolled copy per warp rank), so any number of warps works.
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

// The lane coordinates of transpose_v_stage.
struct TransposeLane {
  int ld_key, ld_byte, st_row;
  constexpr explicit TransposeLane(int lane) : ld_key(0), ld_byte(0), st_row(0) {
    const int m = lane / 8, r = lane % 8;  // the matrix and row it addresses
    ld_key = r + 8 * (m % 2);
    ld_byte = 16 * (m / 2);
    st_row = 2 * r + ((m % 2) ^ int(r >= 4)) + 16 * (m / 2);
  }
};
// Block i of a stage: its 16-key column and 32-byte dv chunk.
template <class Traits>
struct TransposeBlocks {
  static constexpr int kKeyCols = Traits::kBlockN / 16;
  static constexpr int kCount = kKeyCols * (Traits::kHeadDimV / 32);
  static constexpr int key(int i) { return 16 * (i % kKeyCols); }
  static constexpr int byte(int i) { return 32 * (i / kKeyCols); }
};
// Compile-time check of transpose_v_stage's address split for one swizzled layout (coordinates
// (row, col, stage)): the linear (pre-swizzle) offsets of the lane parts and of the block
// parts share no bit, so swizzle(lane + block) = swizzle(lane) ^ swizzle(block); and every
// stage starts on a multiple of the swizzle's period, so adding it commutes with the swizzle.
template <class Layout, class LaneCoord, class BlockCoord>
constexpr bool offsets_split(int blocks, int stages, LaneCoord lane_rc, BlockCoord block_rc) {
  using Sw = decltype(Layout{}.layout_a());
  constexpr int kPeriod = 1 << (Sw::num_bits + Sw::num_base + Sw::num_shft);
  auto lin = Layout{}.layout_b();
  int lane_bits = 0, block_bits = 0;
  for (int t = 0; t < 32; ++t) lane_bits |= lin(lane_rc(t).first, lane_rc(t).second, 0);
  for (int b = 0; b < blocks; ++b) block_bits |= lin(block_rc(b).first, block_rc(b).second, 0);
  bool ok = (lane_bits & block_bits) == 0;
  for (int st = 0; st < stages; ++st) ok = ok && lin(0, 0, st) % kPeriod == 0;
  return ok;
}
template <class Traits>
constexpr bool transpose_offsets_split() {
  using B = TransposeBlocks<Traits>;
  struct RC { int first, second; };
  auto v_lane = [](int t) { const TransposeLane l(t); return RC{l.ld_key, l.ld_byte}; };
  auto v_block = [](int b) { return RC{B::key(b), B::byte(b)}; };
  auto vt_lane = [](int t) { const TransposeLane l(t); return RC{l.st_row, 0}; };
  auto vt_block = [](int b) { return RC{B::byte(b), B::key(b)}; };
  return offsets_split<typename Traits::SmemLayoutV>(B::kCount, Traits::kStagesV, v_lane, v_block) &&
         offsets_split<typename Traits::SmemLayoutVt>(B::kCount, Traits::kStagesV, vt_lane, vt_block);
}

// Blocks kRank, kRank + W, kRank + 2W, ... of one stage (W = transposing warps), kBatch at a
// time: the batch's loads are all in flight before its first store (one block at a time, each
// store waited for its load's latency, and the asm volatile order keeps ptxas from overlapping
// them itself).
template <class Traits, int kRank>
CUTE_DEVICE void transpose_warp_blocks(uint32_t v_base, uint32_t v_lane, uint32_t vt_base, uint32_t vt_lane,
                                      uint32_t sel_even) {
  using B = TransposeBlocks<Traits>;
  using LayoutV = typename Traits::SmemLayoutV;    // (N, dv, stage) -> byte offset, swizzled
  using LayoutVt = typename Traits::SmemLayoutVt;  // (dv, N, stage) -> byte offset, swizzled
  constexpr int kWarps = Traits::kTransposeWarps;
  constexpr int kMine = (B::kCount - kRank + kWarps - 1) / kWarps;
  constexpr int kBatch = Traits::kTransposeBatch;
  auto v_blk = [](int j) { const int i = kRank + kWarps * j; return uint32_t(LayoutV{}(B::key(i), B::byte(i), 0)); };
  auto vt_blk = [](int j) { const int i = kRank + kWarps * j; return uint32_t(LayoutVt{}(B::byte(i), B::key(i), 0)); };
  CUTE_UNROLL
  for (int j0 = 0; j0 < kMine; j0 += kBatch) {
    uint32_t v[kBatch][4];
    CUTE_UNROLL
    for (int j = 0; j < kBatch; ++j)
      if (j0 + j < kMine) ldsm_t_x4(v_base + (v_lane ^ v_blk(j0 + j)), v[j]);
    CUTE_UNROLL
    for (int j = 0; j < kBatch; ++j) {
      if (j0 + j < kMine) {
        const uint32_t sel_odd = sel_even ^ 0x1111u;  // 0x6420 <-> 0x7531: one register for both
        stsm_x4(vt_base + (vt_lane ^ vt_blk(j0 + j)), __byte_perm(v[j][0], v[j][1], sel_even),
                __byte_perm(v[j][0], v[j][1], sel_odd), __byte_perm(v[j][2], v[j][3], sel_even),
                __byte_perm(v[j][2], v[j][3], sel_odd));
      }
    }
  }
}

// f(Int<rank>{}) for a runtime, warp-uniform rank in [kRank, kCount): one copy of f per rank,
// each with its rank as a compile-time constant; the last rank is the else branch. (Register
// allocation in the 24-register transposer is touchy: a fold over all ranks, with the rank
// recomputed inside, spilled 12 B at dv = 256; this form does not.)
template <int kRank, int kCount, class F>
CUTE_DEVICE void for_rank(int rank, F&& f) {
  if constexpr (kRank + 1 >= kCount) {
    f(Int<kRank>{});
  } else if (rank == kRank) {
    f(Int<kRank>{});
  } else {
    for_rank<kRank + 1, kCount>(rank, f);
  }
}

// tt: the thread's index among the transposing threads.
template <class Traits>
CUTE_DEVICE void transpose_v_stage(typename Traits::Element* v_landing, typename Traits::Element* vt,
                                   int stage, int tt) {
  static_assert(sizeof(typename Traits::Element) == 1, "offsets below are in bytes");
  static_assert(Traits::kBlockN % 16 == 0 && Traits::kHeadDimV % 32 == 0);
  constexpr int kWarps = Traits::kTransposeWarps;
  using LayoutV = typename Traits::SmemLayoutV;
  using LayoutVt = typename Traits::SmemLayoutVt;
  static_assert(transpose_offsets_split<Traits>(), "V/V^T offsets do not split into lane ^ block parts");
  // The thread index as a value ptxas must treat as changing from call to call (stage >= 0, so
  // the added term is 0): otherwise it hoists every block's addresses out of the producer's
  // tile loop, and the 24-register role spills them.
  const int t = opaque(tt) + (opaque(stage) >> 31);
  __builtin_assume(t >= 0 && t < Traits::kTransposeThreads);
  const int lane = t % 32, rank = t / 32;
  const TransposeLane l(lane);
  const uint32_t v_lane = LayoutV{}(l.ld_key, l.ld_byte, 0);
  const uint32_t vt_lane = LayoutVt{}(l.st_row, 0, 0);
  const uint32_t v_base = cast_smem_ptr_to_uint(v_landing) + LayoutV{}(0, 0, stage);
  const uint32_t vt_base = cast_smem_ptr_to_uint(vt) + LayoutVt{}(0, 0, stage);
  // Thread t's matrix row is p = t / 4: rows 2p + (p >= 4) go to S0/S2, the others to S1/S3.
  const uint32_t sel_even = lane / 4 >= 4 ? 0x7531u : 0x6420u;
  __syncwarp();
#ifdef FLASHCUTE_SM90_SOL_SKIP_TRANSPOSE  // speed-of-light ablation only: wrong results
  return;
#endif
  // One unrolled copy per warp rank, so each block's offsets stay constants.
  for_rank<0, kWarps>(rank, [&](auto r) {
    transpose_warp_blocks<Traits, decltype(r)::value>(v_base, v_lane, vt_base, vt_lane, sel_even);
  });
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

// Block-wise descales, the FP8 V^T kernels' (Traits::kVColMajor: the FP8 mode's kernels): q's
// per query row, k's and v's per key block (FwdParams::qd_* and kvd_block; one descale per
// (batch, heads_k) comes as zero strides). The consumer reads its rows' q descales once per
// tile and each block's k and v descales one block ahead (fetch), so the loads' latency hides
// behind the block's GEMMs. Absent tensors read as 1.
struct BlockDescale {
  const float* q = nullptr;  // q_descale at (b, h), row 0
  const float* k = nullptr;  // k_descale / v_descale at (b, hk), block 0
  const float* v = nullptr;
  int64_t q_step = 0, kv_step = 0;
  float k_next = 1.f, v_next = 1.f;  // the block fetch() named

  BlockDescale() = default;
  CUTE_DEVICE BlockDescale(FwdParams const& p, int b, int h, int hk) {
    if (p.q_descale) q = p.q_descale + (int64_t(b) * p.qd_batch + int64_t(h) * p.qd_head + int64_t(hk) * p.qd_head_k);
    const int64_t i = int64_t(b) * p.descale_batch_stride + int64_t(hk) * p.descale_head_stride;
    if (p.k_descale) k = p.k_descale + i;
    if (p.v_descale) v = p.v_descale + i;
    q_step = p.qd_row;
    kv_step = p.kvd_block;
  }
  CUTE_DEVICE float q_row(int row) const { return q ? __ldg(q + row * q_step) : 1.f; }
  CUTE_DEVICE void fetch(int n) {
    k_next = k ? __ldg(k + n * kv_step) : 1.f;
    v_next = v ? __ldg(v + n * kv_step) : 1.f;
  }
};

}  // namespace flashcute::sm90
