// The FP8 quantizer's block-wise kernel (fp8_quantize.cu; Tensor::block_rows > 0): each item
// read once through a ring of two shared-memory stages, scaled per row or per key block.
#pragma once

#include <cstdint>

#include "sm90/fp8_quantize_item.cuh"
#include "sm90/fp8_quantize_rotation.cuh"
#include "sm90/fp8_quantize_schedule.cuh"
#include "sm90/fp8_quantize_types.cuh"

namespace flashcute::sm90::quant {

// ---- block-wise scales (Tensor::block_rows > 0) -------------------------------------------------
// No scale spans more than one work item, so there is no second pass, no counter and no waiting:
// each item is read from memory once. An item's rows of one head are copied into a shared-memory
// stage by cp.async, one item ahead (two stages: the next item's copies are in flight while this
// one is cast), so no registers hold x across the wait. stage[k * stride + u] holds group k of
// unit u (16 bytes; consecutive units consecutive: the unit-per-thread reads are conflict-free),
// stride = the units of a whole item of the tensor in whole steps (staged_stride; zeros past the
// item's units).
//   block_rows == 1 (q's per-row scales): an item is rows_per_item rows, each row's amax reduced
//     over its NU lanes.
//   block_rows > 1 (k's and v's per key block): an item is one block: its amax, the CTA's
//     maximum, then the cast (V^T through a tile laid over the item's own stage).
// (Runs 105-106: waiting with x held in registers left nothing in flight; a block held in
// registers spilled at 128 registers; a block staged once per CTA with no copies ahead ran at
// the two-visit kernel's speed.)
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(uint32_t(__cvta_generic_to_shared(smem))), "l"(gmem)
               : "memory");
}

// The V^T tile over a stage: kFp8QuantizeMaxBlockElems bytes, kKeys keys per d row (the stage
// of a V^T item has at least that many bytes: launch_blocks).
template <int D>
constexpr int kBlockVtKeys = kFp8QuantizeMaxBlockElems / D;

// The item's units, the stage's stride and the steps of kThreads units that cover it (uniform).
struct StagedItem {
  int row0, units, stride, steps;
  template <int D>
  __device__ __forceinline__ static StagedItem of(const Tensor& t, const Item& it) {
    constexpr int NU = D / kUnitElems;
    StagedItem s;
    s.row0 = it.chunk * t.rows_per_item;
    s.units = max(0, min(t.rows_per_item, t.seqlen - s.row0)) * NU;  // group == 1
    s.stride = staged_stride(t.rows_per_item, D);
    s.steps = s.stride / kThreads;
    return s;
  }
};

// V^T items (t.vt) are staged with their rows permuted within each 32-key group, so that
// cast_block_vt's loads are conflict-free: key 16h + 8j + 2q + r0 at stage row 8 (2j + r0) + 4h + q.
// A thread of cast_block_vt takes keys {2q, 2q + 1, 2q + 8, 2q + 9} + 16h (V^T positions 16h + 4q
// .. + 3: one 32-bit word per d), i.e. stage rows 8 jj + 4h + q, jj = 0..3, and a warp's load jj
// reads 8 consecutive stage rows of every lane. (The amax pass reads the units in any order.)
__device__ __forceinline__ int vt_stage_row(int r) {
  return (r & ~31) | ((r & 8) << 1) | ((r & 1) << 3) | ((r & 16) >> 2) | ((r & 6) >> 1);
}

template <int D>
__device__ __forceinline__ void stage_item_d(const Tensor& t, const Item& it, uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  const bool vt = fp8_vt_head_dim(D) && t.vt;
  const uint16_t* x = t.x + (it.b * t.xs_b + int64_t(si.row0) * t.xs_r + int64_t(it.hk) * t.xs_h);
  // Unit u's copies (or zeros past the item's rows, a partial item: plain stores, read after the
  // same barrier as the copies) from its source px to its stage place dst.
  const auto stage_unit = [&](int u, const uint16_t* px, uint4* dst) {
    if (u < si.units) {
#pragma unroll
      for (int k = 0; k < kGroups; ++k) cp_async_16(dst + k * si.stride, px + k * NU * kGroupElems);
    } else {
#pragma unroll
      for (int k = 0; k < kGroups; ++k) dst[k * si.stride] = make_uint4(0, 0, 0, 0);
    }
  };
  const auto place = [&](int u, const uint16_t*& px, uint4*& dst) {
    const int row = int(unsigned(u) / NU), lane = int(unsigned(u) % NU);
    dst = stage + (vt ? vt_stage_row(row) : row) * NU + lane;
    px = x + (int64_t(row) * t.xs_r + int64_t(lane) * kGroupElems);
  };
  if constexpr (kThreads % NU == 0 && (!fp8_vt_head_dim(D) || (kThreads / NU) % 32 == 0)) {
    // A thread's units are kThreads / NU rows apart in the same lane, and V^T's row permutation
    // stays within 32-row groups: its places step by constants, worked out once (run 163's
    // source page: the copies' address arithmetic was ~4.6 % of the executed instructions).
    const uint16_t* px;
    uint4* dst;
    place(int(threadIdx.x), px, dst);
    const int64_t px_step = int64_t(kThreads / NU) * t.xs_r;
    for (int u = threadIdx.x; u < si.stride; u += kThreads, px += px_step, dst += kThreads) stage_unit(u, px, dst);
  } else {  // head dims 96 and 192 (3 and 6 units a row): the lane changes from step to step
    for (int u = threadIdx.x; u < si.stride; u += kThreads) {
      const uint16_t* px;
      uint4* dst;
      place(u, px, dst);
      stage_unit(u, px, dst);
    }
  }
}

// Item it's copies into stage, as one cp.async group (empty for threads with no units).
template <int kD>
__device__ __forceinline__ void stage_item(const Args& a, const Item& it, uint4* stage) {
  const Tensor& t = a.t[it.tensor];
  with_launch_head_dim<kD>(t.head_dim, [&](auto d) { stage_item_d<decltype(d)::value>(t, it, stage); });
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The staged groups of unit u (zeros past the item's units: stage_item_d wrote them).
__device__ __forceinline__ void staged_unit(const uint4* stage, int stride, int u, uint4 (&raw)[kGroups]) {
#pragma unroll
  for (int k = 0; k < kGroups; ++k) raw[k] = stage[k * stride + u];
}

// Unit u's values from the stage (zeros past the item's units), with the rotation's signs and
// transform when kRotate (unit_values; hb: mma_fragments).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void staged_values(const uint4* stage, const StagedItem& si, int u, const uint32_t* masks,
                                              const uint32_t (&hb)[2][2], float (&v)[kUnitElems]) {
  uint4 raw[kGroups];
  staged_unit(stage, si.stride, u, raw);
  unit_values<D, kRotate, kMma, In>(raw, masks, hb, v);
}

// x8's offset of unit u of a staged item (group == 1: unit / NU is the row, unit % NU the lane).
template <int D>
__device__ __forceinline__ int64_t staged_x8_offset(const Tensor& t, const Item& it, const StagedItem& si, int u) {
  constexpr int NU = D / kUnitElems;
  return it.b * t.os_b + int64_t(si.row0 + int(unsigned(u) / NU)) * t.os_r + int64_t(it.hk) * t.os_h +
         int64_t(unsigned(u) % NU) * kGroupElems;
}

// Where this thread's unit of step s goes in x8: its step-0 unit's place plus s steps of
// kThreads / NU rows (kThreads is a multiple of NU, so the lane stays). Worked out once per item:
// per unit, the offset's 64-bit products and their constant loads were ~15 instructions of a
// ~230-instruction unit (run 149's source page).
template <int D>
struct StagedX8 {
  uint8_t* first;
  int64_t step;
  __device__ __forceinline__ StagedX8(const Tensor& t, const Item& it, const StagedItem& si)
      : first(t.x8 + staged_x8_offset<D>(t, it, si, int(threadIdx.x))),
        step(int64_t(kThreads / (D / kUnitElems)) * t.os_r) {}
  __device__ __forceinline__ uint8_t* at(int s) const { return first + s * step; }
};

// Per-row scales: each row's amax over its lanes (with the rotation the slot path's bound for one
// row, sqrt(D * sum x^2) = sqrt(sum y^2), y unnormalised: from x on the tensor cores where the
// rotation runs there, as the torch path computes it; else from y), descale[b, h, row], the cast.
template <int D, bool kRotate, bool kMma, class In, class G>
__device__ void cast_rows_staged(const Tensor& t, const Item& it, Shared<G>& sm, const uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  const uint32_t* masks = sm.masks[it.tensor] + mask_word(threadIdx.x % NU, 0);
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);
  float* descale = t.descale + (it.b * t.ds_b + it.hk * t.ds_h + si.row0);
  const StagedX8<D> x8(t, it, si);
  for (int s = 0; s < si.steps; ++s) {
    const int u = s * kThreads + int(threadIdx.x);
    uint4 raw[kGroups];
    staged_unit(stage, si.stride, u, raw);
    float v[kUnitElems];
    unit_values<D, kRotate, kMma, In>(raw, masks, hb, v);  // (raw now has the signs: same squares)
    float m;  // on every lane of the row (the shuffles are uniform; inactive units hold zeros)
    if constexpr (kMmaRotation<D, kRotate, kMma>) {  // as the torch path: sqrt(D * sum x^2)
      m = __fsqrt_rn(__fmul_rn(row_sum_squares_mma<NU, In>(raw), float(D)));
    } else if constexpr (kRotate) {
      m = __fsqrt_rn(row_sum_squares<NU>(v));
    } else {
      m = 0.f;
#pragma unroll
      for (int i = 0; i < kUnitElems; ++i) m = fmaxf(m, fabsf(v[i]));
#pragma unroll
      for (int w = 1; w < NU; w <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, w));
    }
    float d;
    const float scale = scale_of(m, t.descale_factor, &d);
    if (u >= si.units) continue;
    if (unsigned(u) % NU == 0) descale[unsigned(u) / NU] = d;  // group == 1: unit / NU is the row
    cast_store_unit<D>(v, scale, x8.at(s));
  }
}

// A V^T quad: group k (8 coordinates d0 .. d0 + 7) of lane `lane` for keys {2q, 2q + 1, 2q + 8,
// 2q + 9} + 16h of the 32-key group blk (hq = 4h + q). Quads are numbered lane fastest, then hq,
// then k, then blk, so that a warp's loads cover whole runs of the stage (vt_stage_row).
struct VtQuad {
  int k, lane, hq, blk;
  template <int NU>
  __device__ __forceinline__ static VtQuad of(int quad) {
    const unsigned x = unsigned(quad);
    return {int(x / (8 * NU) % kGroups), int(x % NU), int(x / NU % 8), int(x / (8 * NU * kGroups))};
  }
  // stage row of key jj (= 2j + r0: 2q, 2q + 1, 2q + 8, 2q + 9); V^T position of key 2q; first d
  __device__ __forceinline__ int stage_row(int jj) const { return blk * 32 + 8 * jj + hq; }
  __device__ __forceinline__ int position() const { return blk * 32 + 16 * (hq >> 2) + 4 * (hq & 3); }
  template <int NU>
  __device__ __forceinline__ int d0() const { return (k * NU + lane) * kGroupElems; }
};

// V^T of a staged block, a quad per thread and step: its four keys' groups read (in registers: at
// most kMaxSteps quads a thread, 8 words each), then, the stage read by every thread, the tile
// laid over it, each d's 4 bytes (4 consecutive V^T positions) as one 32-bit store, then the
// tile's rows out. (Per unit and byte before: 32 one-byte stores a unit, run 163's source page
// ~6.5 % of the block kernel's instructions.)
template <int D, class In>
__device__ void cast_block_vt(const Tensor& t, const Item& it, const StagedItem& si, float scale, uint4* stage) {
  constexpr int NU = D / kUnitElems;
  constexpr int kKeys = kBlockVtKeys<D>;
  constexpr int kMaxSteps = kFp8QuantizeMaxBlockElems / kUnitElems / kThreads;
  uint32_t w[kMaxSteps][kGroupElems];  // step s: d0 + e's 4 bytes, e = 0 .. 7
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    if (s < si.steps) {
      const VtQuad qd = VtQuad::of<NU>(s * kThreads + int(threadIdx.x));
      float v[4][kGroupElems];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const uint4 g = stage[qd.k * si.stride + qd.stage_row(jj) * NU + qd.lane];
        const uint32_t gw[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
        for (int p = 0; p < 4; ++p) unpack2(In{}, gw[p], v[jj][2 * p], v[jj][2 * p + 1]);
      }
#pragma unroll
      for (int e = 0; e < kGroupElems; ++e)  // bytes in V^T order: keys 2q, 2q + 1, 2q + 8, 2q + 9
        w[s][e] = e4m3x2(__fmul_rn(v[0][e], scale), __fmul_rn(v[1][e], scale)) |
                  e4m3x2(__fmul_rn(v[2][e], scale), __fmul_rn(v[3][e], scale)) << 16;
    }
  }
  __syncthreads();  // the stage is read: the tile may overwrite it
  uint8_t* tile = reinterpret_cast<uint8_t*>(stage);
  vt_zero_padding<D, kKeys>(t, it, tile);
  // (keys past a partial item's rows are zeros in the stage, so their bytes are the padding's)
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    if (s < si.steps) {
      const VtQuad qd = VtQuad::of<NU>(s * kThreads + int(threadIdx.x));
      // the group's 8 rows share one swizzle (d0 is a multiple of 8): one address, 8 offsets
      uint32_t* rows = reinterpret_cast<uint32_t*>(tile + vt_tile_offset<kKeys>(qd.d0<NU>(), qd.position()));
#pragma unroll
      for (int e = 0; e < kGroupElems; ++e) rows[e * (kKeys / 4)] = w[s][e];
    }
  }
  __syncthreads();
  vt_store_tile<D, kKeys, true>(t, it, tile);
}

// One block (it.chunk): amax from the stage (with the rotation the bound from the unrotated rows,
// as amax_item), the CTA's maximum, descale[b, h, chunk], then the cast (rotated when kRotate).
template <int D, bool kRotate, bool kMma, class In, class G>
__device__ void cast_block_staged(const Tensor& t, const Item& it, Shared<G>& sm, uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  float m = 0.f;
  const auto unit_raw = [&](int s, uint4 (&raw)[kGroups]) {
    staged_unit(stage, si.stride, s * kThreads + int(threadIdx.x), raw);
  };
  if constexpr (kMmaRotation<D, kRotate, kMma>) {
#pragma unroll 1  // unrolled, its units' loads went ahead of the tensor-core sums and spilled
    for (int s = 0; s < si.steps; ++s) {
      uint4 raw[kGroups];
      unit_raw(s, raw);
      m = fmaxf(m, row_sum_squares_mma<NU, In>(raw));  // the bound's sum of squares (no signs)
    }
  } else {
    for (int s = 0; s < si.steps; ++s) {
      uint4 raw[kGroups];
      unit_raw(s, raw);
      if constexpr (kRotate) {
        float v[kUnitElems];
        unpack_unit<In, false>(raw, nullptr, v);  // the bound needs no signs
        track_unit_amax<NU, kRotate>(m, v);
      } else {
        m = fmaxf(m, raw_unit_amax<In>(raw));
      }
    }
  }
  // every thread works the scale out itself (a barrier fewer than thread 0 handing it on)
  const float amax = cta_amax<D, kRotate, true>(m, sm);
  float d;
  const float scale = scale_of(amax, t.descale_factor, &d);
  if (threadIdx.x == 0 && si.units > 0) t.descale[it.b * t.ds_b + it.hk * t.ds_h + it.chunk] = d;
  if constexpr (fp8_vt_head_dim(D) && !kRotate) {
    if (t.vt) {  // V^T: v, never rotated (the API refuses both)
      cast_block_vt<D, In>(t, it, si, scale, stage);
      return;
    }
  }
  const uint32_t* masks = sm.masks[it.tensor] + mask_word(threadIdx.x % NU, 0);
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);
  const StagedX8<D> x8(t, it, si);
  for (int s = 0; s < si.steps; ++s) {
    const int u = s * kThreads + int(threadIdx.x);
    float v[kUnitElems];
    staged_values<D, kRotate, kMma, In>(stage, si, u, masks, hb, v);
    if (u >= si.units) continue;
    cast_store_unit<D>(v, scale, x8.at(s));
  }
}

template <int D, bool kMma, class In, class G>
__device__ __forceinline__ void run_block_item_d(const Tensor& t, const Item& it, Shared<G>& sm, uint4* stage) {
  constexpr bool kCanRotate = (D & (D - 1)) == 0;
  const auto go = [&](auto rotate) {
    constexpr bool kRotate = decltype(rotate)::value;
    if (t.block_rows == 1) cast_rows_staged<D, kRotate, kMma, In>(t, it, sm, stage);
    else cast_block_staged<D, kRotate, kMma, In>(t, it, sm, stage);
  };
  if (kCanRotate && t.rotate) {
    if constexpr (kCanRotate) go(std::true_type{});
  } else {
    go(std::false_type{});
  }
}

// Dynamic shared memory: two stages of stage_units units (launch_blocks). kMma: the rotation of
// head dims 128 and 256 on the tensor cores (hadamard_row_mma). kD: every tensor of the launch
// has head dim kD (0: any; with_launch_head_dim).
template <class In, bool kMma, int kD = 0>
__global__ void __launch_bounds__(kThreads, 2) block_quantize_kernel(const __grid_constant__ Args a, int stage_units) {
  using G = BlockGeometry;
  __shared__ __align__(16) Shared<G> sm;
  extern __shared__ uint4 stages[];
  const int per_stage = stage_units * kGroups;
  build_sign_masks(a, sm);
  int j = blockIdx.x;
  // Each item is decoded once, when its copies are issued, and kept for its cast one item later
  // (decoding it again after the barrier put its dependent chain on every warp's critical path).
  Item it = {};
  if (j < a.items) {
    it = decode_item<G>(a, j);
    stage_item<kD>(a, it, stages);
  }
  // One barrier an item: after it, item j's copies (every thread's, the only group in flight)
  // have landed, and every thread is done with the previous item's stage (and the tile over it),
  // so the next item's copies may go there; they are in flight while item j is cast. (A barrier
  // before and one after each item's cast, with the next copies issued before the first, kept
  // the same one item ahead: session 47.)
  for (int buf = 0; j < a.items; j += gridDim.x, buf ^= 1) {
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();  // also: the sign masks are built
    Item next = {};
    if (j + int(gridDim.x) < a.items) {  // the next item's copies, into the other stage
      next = decode_item<G>(a, j + gridDim.x);
      stage_item<kD>(a, next, stages + (buf ^ 1) * per_stage);
    }
    const Tensor& t = a.t[it.tensor];
    with_launch_head_dim<kD>(t.head_dim, [&](auto d) {
      run_block_item_d<decltype(d)::value, kMma, In>(t, it, sm, stages + buf * per_stage);
    });
    it = next;
  }
}

}  // namespace flashcute::sm90::quant
