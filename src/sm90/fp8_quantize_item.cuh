// One work item of the FP8 quantizer's per-slot kernel (fp8_quantize.cu): the amax pass, the
// cast pass (rows, or V^T through a shared-memory tile), and quantize_kernel itself. The
// helpers for shared memory, scales and V^T tiles serve the block-wise kernel too.
#pragma once

#include <cstdint>

#include "sm90/fp8_quantize_rotation.cuh"
#include "sm90/fp8_quantize_schedule.cuh"
#include "sm90/fp8_quantize_types.cuh"

namespace flashcute::sm90::quant {

// ---- one item --------------------------------------------------------------------------------
// Where a row's NU = D / 32 units sit. Plain: on NU adjacent lanes, unit u at lane u % NU. The
// rows of a rotated tensor must sit in one warp each (the transform's shuffles and mma), which
// NU = 3 or 6 (the Paley head dims 96 and 192) does not give: under the rotation such a row takes
// a block of kLanes = 4 or 8 lanes, block lane t holding the unit of lane l = p (D 96) or 2p + h
// (D 192), p = t % 4 and h = t / 4; p = 3 is idle (zeros, no store). Its coordinates are then
// 8 (k NU + l) + e = (D / 12)(3k + p) + 8h + e, as hadamard_pair_paley needs them.
template <int D, bool kRotatedRows>
struct RowLayout {
  static constexpr int NU = D / kUnitElems;
  static constexpr bool kPadded = kRotatedRows && kPaleyDim<D>;
  static constexpr int kLanes = !kPadded ? NU : (NU == 3 ? 4 : 8);
  // Unit u -> (row-and-head index, lane l); false for an idle lane.
  __device__ __forceinline__ static bool place(unsigned u, unsigned& rh, unsigned& l) {
    rh = u / kLanes;  // unsigned: / and % are a shift and a mask where kLanes is a power of two
    const unsigned t = u % kLanes;
    if constexpr (!kPadded) {
      l = t;
      return true;
    } else {
      const unsigned p = t % 4;
      l = NU == 6 ? 2 * p + t / 4 : p;
      return p < 3;
    }
  }
};

// Calls fn(raw, active, x8_offset, u) for every unit u (32 coordinates of one row and head) of
// the item, raw its 16-bit values as loaded (4 groups of 8), placed by RowLayout<D, kRotatedRows>
// (the tensor's rotation decides the layout, also in a pass that does not rotate). The loop is
// uniform over the CTA; units past the item's end, and idle lanes, have active == false and zeros.
template <int D, bool kLastUse, class G, bool kRotatedRows, class Fn>
__device__ __forceinline__ void for_each_unit_raw(const Tensor& t, const Item& it, Fn&& fn) {
  using Rows = RowLayout<D, kRotatedRows>;
  constexpr int NU = D / kUnitElems;  // units per row
  constexpr int NL = Rows::kLanes;    // lanes per row (NU, or a Paley row's padded block)
  static_assert(D % kUnitElems == 0, "head dim must be a multiple of 32");
  static_assert(!kRotatedRows || (kThreads % NL == 0 && 32 % NL == 0), "a rotated row must sit in one warp");
  const int group = t.group;
  const int row0 = item_row0<G>(t, it);
  const int rows = item_rows<G>(t, it, row0);
  const int units = rows * group * NL;
  const int head0 = it.hk * group;
  const uint16_t* x = t.x + it.b * t.xs_b + int64_t(row0) * t.xs_r + int64_t(head0) * t.xs_h;
  const int64_t o_base = it.b * t.os_b + int64_t(row0) * t.os_r + int64_t(head0) * t.os_h;

  for (int base = 0; base < units; base += kThreads * kUnitsPerStep) {
    uint4 raw[kUnitsPerStep][kGroups];
    int64_t o_off[kUnitsPerStep];
    bool active[kUnitsPerStep];
#pragma unroll
    for (int s = 0; s < kUnitsPerStep; ++s) {  // issue every load of the step first
      const unsigned u = unsigned(base + s * kThreads) + threadIdx.x;
      unsigned rh, lane;
      active[s] = Rows::place(u, rh, lane) && int(u) < units;
      const unsigned r = group == 1 ? rh : rh / unsigned(group), g = rh - r * unsigned(group);
      const int64_t lane_off = lane * kGroupElems;
      // one address for the unit's four loads (written per load, ptxas rebuilt it from x each time)
      const uint16_t* px = x + (int64_t(r) * t.xs_r + int64_t(g) * t.xs_h + lane_off);
      o_off[s] = o_base + int64_t(r) * t.os_r + int64_t(g) * t.os_h + lane_off;
#pragma unroll
      for (int k = 0; k < kGroups; ++k) {
        raw[s][k] = active[s] ? load_group<kLastUse>(px + k * NU * kGroupElems) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int s = 0; s < kUnitsPerStep; ++s) fn(raw[s], active[s], o_off[s], base + s * kThreads + int(threadIdx.x));
  }
}

// The rotation's sign masks of this thread's lane (the same for every unit of the thread:
// kThreads is a multiple of the row's lanes).
template <int D, bool kRotatedRows>
__device__ __forceinline__ const uint32_t* lane_masks(const uint32_t* smem_masks) {
  unsigned rh, lane;
  RowLayout<D, kRotatedRows>::place(threadIdx.x, rh, lane);
  return smem_masks + mask_word(lane, 0);
}

// for_each_unit_raw with fn(v, active, x8_offset, u): v the unit's fp32 values y (rotated when
// kRotate, which needs kRotatedRows).
template <int D, bool kRotate, bool kMma, bool kLastUse, class In, class G, bool kRotatedRows, class Fn>
__device__ __forceinline__ void for_each_unit(const Tensor& t, const Item& it, const uint32_t* smem_masks,
                                              Fn&& fn) {
  static_assert(kRotatedRows || !kRotate, "the rotation needs its rows in one warp");
  const uint32_t* masks = lane_masks<D, kRotatedRows>(smem_masks);  // used only with kRotate
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);
  for_each_unit_raw<D, kLastUse, G, kRotatedRows>(t, it, [&](uint4 (&raw)[kGroups], bool active, int64_t o, int u) {
    float v[kUnitElems];
    unit_values<D, kRotate, kMma, In>(raw, masks, hb, v);
    fn(v, active, o, u);
  });
}

// A V^T item (x8_vt, head dims 128 / 256) is rows_per_item = kItemUnits * 32 / D keys of one
// slot: their e4m3 bytes, (D, keys), staged here so that V^T's rows go out as 16-byte stores.
template <class G>
struct Shared {
  uint32_t masks[kMaxTensors][kMaxLanes * kMaskWords];  // XOR masks of the rotation signs
  alignas(16) unsigned warp_max[kWarps];
  float scale;
  int next[2];
  alignas(16) uint8_t vt_tile[G::kVtTileBytes];
};

// Byte offset of (d, key position p) in the V^T tile: rows of kKeys bytes, the 16-byte chunks of
// row d XOR-swizzled by d / 8. A thread's 32 coordinates are d = 8 (k NU + lane) + e, so the
// lanes of one key (same p) write rows 8 apart: unswizzled all in one bank (the row pitch is a
// multiple of 128 bytes), 4- to 8-way conflicts on every byte store; swizzled, different chunks.
template <int kKeys>
__device__ __forceinline__ int vt_tile_offset(int d, int p) {
  constexpr int kChunks = kKeys / 16;
  return d * kKeys + (p ^ (((d >> 3) & (kChunks - 1)) << 4));
}

// Position of key r (within its 32) in V^T: key bits (h, j, q, r0) = 16h + 8j + 2q + r0 go to
// 16h + 4q + 2j + r0, the P register order of the FP8 attention kernel (sm90/fwd_fp8.cuh).
__device__ __forceinline__ int vt_position(int r) {
  return (r & ~15) | ((r & 6) << 1) | ((r & 8) >> 2) | (r & 1);
}

// sum(v^2) over the row a unit is part of (its NU adjacent lanes; every lane gets it), in fp32:
// 4 partial sums of 8 squares each, a tree over them and over the row's lanes, so every term
// passes through at most 8 + 2 + log2(NU) roundings (amax_item says why that is enough).
template <int NU>
__device__ __forceinline__ float row_sum_squares(const float (&v)[kUnitElems]) {
  constexpr int kParts = 4;  // (8 partial sums made ptxas spill the item loop's state at 64 registers)
  float part[kParts];
#pragma unroll
  for (int i = 0; i < kParts; ++i) part[i] = v[i] * v[i];
#pragma unroll
  for (int i = kParts; i < kUnitElems; ++i) part[i % kParts] = fmaf(v[i], v[i], part[i % kParts]);
#pragma unroll
  for (int w = kParts / 2; w > 0; w /= 2) {
#pragma unroll
    for (int i = 0; i < w; ++i) part[i] += part[i + w];
  }
  float ss = part[0];
#pragma unroll
  for (int o = 1; o < NU; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  return ss;
}

// Groups k0 .. k0 + kN - 1 of a unit (g: their 8 kN values), scaled, as e4m3 to x8 + o, the
// unit's first group (groups of 8 bytes, D / 32 groups apart).
template <int D, int kN = kGroups>
__device__ __forceinline__ void cast_store_groups(const float* g, float scale, uint8_t* x8, int k0 = 0) {
#pragma unroll
  for (int k = 0; k < kN; ++k, g += kGroupElems) {
    uint2 packed;
    packed.x = e4m3x2(__fmul_rn(g[0], scale), __fmul_rn(g[1], scale)) |
               e4m3x2(__fmul_rn(g[2], scale), __fmul_rn(g[3], scale)) << 16;
    packed.y = e4m3x2(__fmul_rn(g[4], scale), __fmul_rn(g[5], scale)) |
               e4m3x2(__fmul_rn(g[6], scale), __fmul_rn(g[7], scale)) << 16;
    // streaming store: x8 is not read again, L2 is better spent on x
    __stcs(reinterpret_cast<uint2*>(x8 + (k0 + k) * (D / kUnitElems) * kGroupElems), packed);
  }
}

// One unit's 32 values, scaled, as e4m3 to x8 + o.
template <int D>
__device__ __forceinline__ void cast_store_unit(const float (&v)[kUnitElems], float scale, uint8_t* x8) {
  cast_store_groups<D>(v, scale, x8);
}

// An amax's scale (torch's arithmetic: fp32 reciprocal, then times 448; not 448 / amax, which
// rounds differently for about a quarter of all amax values) and descale (*descale).
__device__ __forceinline__ float scale_of(float amax, float descale_factor, float* descale) {
  const float safe = amax > 0.f ? amax : kE4m3Max;
  *descale = __fmul_rn(safe, descale_factor);
  return __fmul_rn(__frcp_rn(safe), kE4m3Max);
}

// One unit into a running amax m over unrotated values: its row's sum of squares over the row's
// NL lanes (with the rotation, for the bound sqrt(D * m)), else each |v| of its 32 values.
template <int NL, bool kRotate>
__device__ __forceinline__ void track_unit_amax(float& m, const float (&v)[kUnitElems]) {
  if constexpr (kRotate) {
    m = fmaxf(m, row_sum_squares<NL>(v));
  } else {
#pragma unroll
    for (int i = 0; i < kUnitElems; ++i) m = fmaxf(m, fabsf(v[i]));
  }
}

// The CTA's amax from each thread's m (>= 0: max |x|, or with the rotation the largest row sum
// of squares, whose bound sqrt(D * m) it then returns), after a barrier: valid in thread 0, or
// in every thread with kEveryThread (the warps' maxima read by all, broadcast loads: no second
// barrier to hand thread 0's result on). sm.warp_max is written again only after the caller's
// next barrier (every thread has read it by then).
template <int D, bool kRotate, bool kEveryThread = false, class G>
__device__ __forceinline__ float cta_amax(float m, Shared<G>& sm) {
  const unsigned w = __reduce_max_sync(0xffffffffu, __float_as_uint(m));  // non-negative floats order like their bits
  if (threadIdx.x % 32 == 0) sm.warp_max[threadIdx.x / 32] = w;
  __syncthreads();
  unsigned cta = 0;
  if (kEveryThread || threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < kWarps; ++i) cta = max(cta, sm.warp_max[i]);
  }
  float amax = __uint_as_float(cta);
  if constexpr (kRotate) amax = __fsqrt_rn(__fmul_rn(amax, float(D)));
  return amax;
}

// The A pass. Without the rotation: max |x|. With it: not max |y| but the bound
// sqrt(D * max_row sum(x^2)) >= max |y| (each y_i is a +-1 combination of the row's D values),
// read from the unrotated rows: ~3 instructions per element instead of the transform's ~12.
// (The bound leaves up to sqrt(D) more range than max |y|; e4m3 is floating point, so that
// costs precision only below 2^-6 of the range: RMSE unchanged, benchmarks/RESULTS.md.)
template <int D, bool kRotate, class In, class G>
__device__ void amax_item(const Args& a, const Tensor& t, const Item& it, Shared<G>& sm) {
  // With the rotation, sum(x^2) in fp32: 4 partial sums of 8 squares each, a tree over them and
  // over the row's lanes, so every term passes through at most 8 + 2 + log2(NL) roundings: a
  // relative error below 13 x 2^-24 = 7.7e-7 on the sum, half that on amax (D = 256; the torch
  // path sums in fp64, and the descale's test tolerance is 1e-6). Was fp64: F2F.F64.F32 + DFMA
  // per element and an FTZ multiply before each convert, 3 instructions per element where this
  // is 1 (run 103's SASS). (8 partial sums made ptxas spill the item loop's state at 64 registers.)
  float m = 0.f;
  constexpr int NL = RowLayout<D, kRotate>::kLanes;  // a row's lanes (its sum of squares' shuffles)
  const auto track = [&](const float (&v)[kUnitElems], bool, int64_t, int) { track_unit_amax<NL, kRotate>(m, v); };
  for_each_unit<D, false, false, false, In, G, kRotate>(t, it, sm.masks[it.tensor], track);
  const float amax = cta_amax<D, kRotate>(m, sm);
  if (threadIdx.x == 0) {
    // sqrt(D * ss) is monotonic in ss: the slot's max over items is the bound of its max row
    atomicMax(a.amax + it.slot, __float_as_uint(amax));
    add_release(a.done + it.slot, 1u);
  }
}

// Thread 0: the slot's scale (torch's arithmetic: fp32 reciprocal, then times 448; not 448 /
// amax, which rounds differently for about a quarter of all amax values), and the descale.
template <class G>
__device__ __forceinline__ float slot_scale(const Args& a, const Tensor& t, const Item& it, bool wait) {
  if (wait) {
    const unsigned need = slot_items<G>(t, it);
    if (load_acquire(a.done + it.slot) < need) {
      const unsigned long long start = global_timer_ns();
      while (load_acquire(a.done + it.slot) < need) {
        __nanosleep(128);
        if (global_timer_ns() - start > kWaitTimeoutNs) __trap();  // a schedule bug: fail, don't hang
      }
    }
  }
  float descale;
  const float scale = scale_of(__uint_as_float(load_relaxed(a.amax + it.slot)), t.descale_factor, &descale);
  if (it.chunk == 0) t.descale[it.b * t.ds_b + it.hk * t.ds_h] = descale;
  return scale;
}

// The cast pass of a V^T item: each thread's 32 bytes of a key go to the smem tile (D rows of
// keys, in V^T's order), then the tile's rows leave as 16-byte stores, one V^T row segment per
// d; the slot's last item also writes the zero padding up to its 32-key boundary.
// The V^T cast in three steps: zero the tile's padding keys (the slot's tail item), cast each
// unit into the tile, store the tile's rows. The block kernel shares the first and the last and
// casts by quads of keys instead (fp8_quantize_blocks.cuh, cast_block_vt).
// tile: kKeys keys (bytes) per d row. The item's rows, padding included, are computed again
// where needed rather than held (held through the cast loop, they spilled at the 64 registers
// of 4 CTAs per SM).
__device__ __forceinline__ int vt_item_rows(const Tensor& t, const Item& it, int& row0) {
  row0 = it.chunk * t.rows_per_item;
  return max(0, min(t.rows_per_item, t.seqlen - row0));
}

// Zeroes the whole tile where the item ends in padding keys (then a barrier); uniform.
template <int D, int kKeys>
__device__ __forceinline__ void vt_zero_padding(const Tensor& t, const Item& it, uint8_t* tile) {
  int row0;
  const int rows = vt_item_rows(t, it, row0);
  if ((rows + 31) / 32 * 32 != rows) {
    for (int i = threadIdx.x; i < D * kKeys / 16; i += kThreads) reinterpret_cast<uint4*>(tile)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
}

// Unit u's 32 values, scaled, as e4m3 bytes in register order: byte i of the 32 is value i
// (coordinate 8 (i / 8 * NU + lane) + i % 8), four to a word.
constexpr int kUnitWords = kUnitElems / 4;
__device__ __forceinline__ void vt_cast_bytes(const float (&v)[kUnitElems], float scale, uint32_t (&b)[kUnitWords]) {
#pragma unroll
  for (int i = 0; i < kUnitWords; ++i)
    b[i] = e4m3x2(__fmul_rn(v[4 * i], scale), __fmul_rn(v[4 * i + 1], scale)) |
           e4m3x2(__fmul_rn(v[4 * i + 2], scale), __fmul_rn(v[4 * i + 3], scale)) << 16;
}

// Unit u's bytes (group == 1: a unit is (key, lane)) into the tile at the key's V^T position.
template <int D, int kKeys>
__device__ __forceinline__ void vt_place_unit(const uint32_t (&b)[kUnitWords], int u, uint8_t* tile) {
  constexpr int NU = D / kUnitElems;
  static_assert(kKeys % 32 == 0, "V^T items hold whole 32-key groups (the P permutation's span)");
  // unsigned, so that / and % are a shift and a mask
  const int pos = vt_position(int(unsigned(u) / NU)), lane = int(unsigned(u) % NU);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    // the group's 8 rows d0 .. d0 + 7 share one swizzle (d0 is a multiple of 8): one address,
    // and the 8 stores at constant offsets from it
    const int d0 = (k * NU + lane) * kGroupElems;
    uint8_t* rows = tile + vt_tile_offset<kKeys>(d0, pos);
#pragma unroll
    for (int e = 0; e < kGroupElems; ++e) rows[e * kKeys] = uint8_t(b[(k * kGroupElems + e) / 4] >> (8 * (e % 4)));
  }
}

// After a CTA barrier: the tile's rows leave as 16-byte stores, one V^T row segment per d, the
// padding up to the 32-key boundary included. Threads walk the tile's kVecs vectors per d (a
// power of two: / and % are a shift and a mask; a division by the item's own vector count ran
// once per vector: run 149); those past the item's keys store nothing.
// kStepped (the block kernel): kThreads is a multiple of kVecs, so a thread keeps one vector
// position c and walks its rows kThreads / kVecs apart, its pointer stepped rather than worked
// out per vector (run 150's source page: 25 instructions a vector). The slot kernels keep the
// plain walk: at their 64 registers the stepped one spilled 8 bytes in one of them.
template <int D, int kKeys, bool kStepped = false>
__device__ __forceinline__ void vt_store_tile(const Tensor& t, const Item& it, const uint8_t* tile) {
  constexpr int kVecs = kKeys / 16;
  static_assert((kVecs & (kVecs - 1)) == 0 && kThreads % kVecs == 0, "the tile's vectors per d");
  int row0;
  const int keys = (vt_item_rows(t, it, row0) + 31) / 32 * 32;
  uint8_t* out = t.x8 + it.b * t.os_b + int64_t(it.hk) * t.os_h + row0;
  const int vecs = keys / 16;  // per d
  if constexpr (kStepped) {
    constexpr int kRowsPerStep = kThreads / kVecs;
    const int c = int(threadIdx.x) % kVecs;
    if (c >= vecs) return;
    int d = int(threadIdx.x) / kVecs;
    out += int64_t(d) * t.os_r + c * 16;
    const int64_t out_step = int64_t(kRowsPerStep) * t.os_r;
    for (; d < D; d += kRowsPerStep, out += out_step)
      __stcs(reinterpret_cast<uint4*>(out), *reinterpret_cast<const uint4*>(tile + vt_tile_offset<kKeys>(d, c * 16)));
  } else {
#pragma unroll 1  // (unrolled, the slot kernels spilled at their 64 registers)
    for (int i = threadIdx.x; i < D * kVecs; i += kThreads) {
      const int d = i / kVecs, c = i % kVecs;
      if (c < vecs)
        __stcs(reinterpret_cast<uint4*>(out + int64_t(d) * t.os_r + c * 16),
               *reinterpret_cast<const uint4*>(tile + vt_tile_offset<kKeys>(d, c * 16)));
    }
  }
}

template <int D, class In, class G>
__device__ void cast_item_vt(const Tensor& t, const Item& it, Shared<G>& sm) {
  constexpr int kKeys = G::kVtTileBytes / D;  // keys per item: 128 (D 128), 64 (D 256)
  vt_zero_padding<D, kKeys>(t, it, sm.vt_tile);
  const float scale = sm.scale;
  const auto cast_to_tile = [&](const float (&v)[kUnitElems], bool active, int64_t, int u) {
    if (!active) return;
    uint32_t b[kUnitWords];
    vt_cast_bytes(v, scale, b);
    vt_place_unit<D, kKeys>(b, u, sm.vt_tile);
  };
  for_each_unit<D, false, false, true, In, G, false>(t, it, sm.masks[it.tensor], cast_to_tile);
  __syncthreads();
  vt_store_tile<D, kKeys>(t, it, sm.vt_tile);
}

template <int D, bool kRotate, bool kMma, class In, class G>
__device__ void cast_item(const Args& a, const Tensor& t, const Item& it, bool wait, Shared<G>& sm) {
  if (threadIdx.x == 0) sm.scale = slot_scale<G>(a, t, it, wait);
  __syncthreads();
  if constexpr (fp8_vt_head_dim(D) && !kRotate) {  // V^T: v, never rotated (the API refuses both)
    if (t.vt) {
      cast_item_vt<D, In, G>(t, it, sm);
      return;
    }
  }
  const float scale = sm.scale;
  uint8_t* x8 = t.x8;
  if constexpr (kRotate && kPaleyDim<D>) {  // Paley rows: the transform and the cast in two halves
    const uint32_t* masks = lane_masks<D, true>(sm.masks[it.tensor]);
    uint32_t pb[2][2];
    paley12_fragments<In>(pb);
    for_each_unit_raw<D, true, G, true>(t, it, [&](uint4 (&raw)[kGroups], bool active, int64_t o, int) {
      apply_signs(raw, masks);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        float v[2 * kGroupElems];
        hadamard_pair_paley<D, In>(raw, pb[nt], v);
        if (active) cast_store_groups<D, 2>(v, scale, x8 + o, 2 * nt);
      }
    });
  } else {
    const auto cast_and_store = [&](const float (&v)[kUnitElems], bool active, int64_t o, int) {
      if (active) cast_store_unit<D>(v, scale, x8 + o);
    };
    for_each_unit<D, kRotate, kMma, true, In, G, kRotate>(t, it, sm.masks[it.tensor], cast_and_store);
  }
}

template <int D, bool kMma, class In, class G>
__device__ __forceinline__ void run_item_d(const Args& a, const Tensor& t, const Item& it, bool cast, bool wait,
                                           Shared<G>& sm) {
  // Sylvester head dims rotate in every instantiation, Paley's (96, 192) in G::kPaley's only (the
  // host launches that one for them).
  constexpr bool kCanRotate = !kPaleyDim<D> || G::kPaley;
  if (kCanRotate && t.rotate) {
    if constexpr (kCanRotate) {
      if (cast) cast_item<D, true, kMma, In>(a, t, it, wait, sm);
      else amax_item<D, true, In>(a, t, it, sm);
    }
  } else {
    if (cast) cast_item<D, false, kMma, In>(a, t, it, wait, sm);
    else amax_item<D, false, In>(a, t, it, sm);
  }
}

// f(std::integral_constant<int, D>{}) for the tensor's head dim D (validated by the API: one of
// these), so that per-element work sees D as a constant.
template <class F>
__device__ __forceinline__ void with_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 96: f(std::integral_constant<int, 96>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    case 192: f(std::integral_constant<int, 192>{}); break;
    case 256: f(std::integral_constant<int, 256>{}); break;
    default: break;
  }
}

// with_head_dim where a launch's tensors all have head dim kD (kD = 0: any, dispatched per item):
// the block kernel's instantiation for one head dim has no per-item switch (run 163's source page:
// ~8 % of the warps' stall samples sat on the cast's and the copies' switches, at ~2 % of the
// instructions) and only that head dim's code.
template <int kD, class F>
__device__ __forceinline__ void with_launch_head_dim(int head_dim, F&& f) {
  if constexpr (kD != 0) {
    f(std::integral_constant<int, kD>{});
  } else {
    with_head_dim(head_dim, static_cast<F&&>(f));
  }
}

template <class In, bool kMma, class G>
__device__ void run_item(const Args& a, bool cast, int j, bool wait, Shared<G>& sm) {
  const Item it = decode_item<G>(a, j);
  if (it.chunk < 0) return;  // a varlen tensor's spare item (uniform over the CTA)
  const Tensor& t = a.t[it.tensor];
  with_head_dim(t.head_dim, [&](auto d) { run_item_d<decltype(d)::value, kMma, In>(a, t, it, cast, wait, sm); });
}

// Sign masks of the rotation for every (tensor, lane of a row, pair of elements): bit 15 and/or
// bit 31 set where the coordinate's sign flips (XOR on the packed 16-bit pair, before unpacking).
template <class G>
__device__ void build_sign_masks(const Args& a, Shared<G>& sm) {
  for (int idx = threadIdx.x; idx < kMaxTensors * kMaxLanes * kMaskWords; idx += kThreads) {
    const int ti = idx / (kMaxLanes * kMaskWords);
    const int lane = idx / kMaskWords % kMaxLanes;
    const int w = idx % kMaskWords, k = w / kGroupMaskWords, p = w % kGroupMaskWords;
    uint32_t mask = 0;
    if (ti < a.num_tensors) {
      const Tensor& t = a.t[ti];
      const int nu = t.head_dim / kUnitElems;
      if (t.rotate && lane < nu) {
        const int i0 = (k * nu + lane) * kGroupElems + 2 * p;
        const uint32_t bits = t.signs[i0 / 32] >> (i0 % 32);  // i0 even: i0 + 1 is in the same word
        mask = (bits & 1u) << 15 | ((bits >> 1) & 1u) << 31;
      }
    }
    sm.masks[ti][mask_word(lane, w)] = mask;
  }
}

template <class In, bool kVarlen, bool kMma, bool kPaley = false>
__global__ void __launch_bounds__(kThreads, Geometry<kVarlen, kItemUnits * kUnitElems, false, kPaley>::kMinBlocks)
    quantize_kernel(const __grid_constant__ Args a, Mode mode) {
  using G = Geometry<kVarlen, kItemUnits * kUnitElems, false, kPaley>;
  __shared__ __align__(16) Shared<G> sm;
  build_sign_masks(a, sm);
  if (mode != Mode::kFused) {  // one pass, items statically strided over the grid
    __syncthreads();
    const bool cast = mode == Mode::kCastOnly;
    for (int j = blockIdx.x; j < a.items; j += gridDim.x) {
      run_item<In, kMma, G>(a, cast, j, /*wait=*/false, sm);
      __syncthreads();  // the item's shared memory (warp maxima, scale) is free again
    }
    return;
  }
  // Fused: items from the counter, one fetched ahead so that its round trip overlaps the item.
  int buf = 0;
  if (threadIdx.x == 0) sm.next[0] = int(atomicAdd(a.next, 1u));
  __syncthreads();
  const int positions = 2 * a.items;
  for (;;) {
    const int pos = sm.next[buf];
    if (pos >= positions) break;
    if (threadIdx.x == 0) sm.next[buf ^ 1] = int(atomicAdd(a.next, 1u));
    bool cast;
    int j;
    item_at<kVarlen>(a, pos, cast, j);
    run_item<In, kMma, G>(a, cast, j, /*wait=*/true, sm);
    __syncthreads();  // the prefetched position is visible; the item's shared memory is free
    buf ^= 1;
  }
}

}  // namespace flashcute::sm90::quant
