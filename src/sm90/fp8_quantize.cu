// FP8 (e4m3) quantization of fp16/bf16 tensors, one scale per (batch, heads_k) slot (or, with
// block_rows, per block of rows: block_quantize_kernel below, each block read once), with an
// optional Hadamard rotation: flashcute_fp8_quantize (include/flashcute/flashcute.h states the
// arithmetic; it is flashcute.fp8._quantize_torch's, bit for bit without the rotation, for all
// inputs but bf16 values below fp32's normal range, which the kernel library's -ftz flushes).
//
// The kernel is memory-bound: the goal is to read x from HBM about once and write x8 once.
// A slot's scale needs the slot's amax before any of its values can be written, so every slot
// is visited twice, in work items of a few rows of one slot (~32 KB of x):
//   A (amax): read the chunk, max |x| (with the rotation: the bound sqrt(D) * max row norm of x
//             on max |y|, no rotation needed; amax_item); atomicMax into the slot's amax, count.
//   B (cast): wait until all A items of the slot are counted, read the chunk again, rotate,
//             scale, convert to e4m3 (saturating, round to nearest even), write; the first
//             chunk's item also writes the descale.
// One persistent launch hands out items from a global counter in an order where the B items
// of a slot come about `lag` items after its A items, so that the second read of a chunk
// finds it in L2 (the lag window is ~20 MB; H100/H200 have 50 MB of L2).
//
// Why this cannot deadlock, without assuming that all CTAs are resident: a CTA waits only in
// a B item, only for A items handed out at earlier counter positions (lag >= items per slot
// guarantees that: see item_at), and every earlier position went to a CTA that is already
// running. A items never wait. A wait that still exceeds kWaitTimeoutNs is a bug: the kernel
// traps (a launch error) instead of hanging the process.
//
// The kernel loads each thread's 64 bytes of x into registers, waits, computes, and loads again.
// At d=128 (16k tokens of q, k, v) it takes ~0.14 ms on an H100, bounded by L2's throughput
// (89 %, run 104): every chunk passes L2 three times (the amax read, the cast's second read, the
// writes). Three designs that read x once were measured and removed (benchmarks/RESULTS.md):
// a staged kernel (a warp copying items into a ring of shared-memory stages: 0.314 ms, its warps
// stalled at CTA barriers; runs 91-92), a resident one (items in shared memory, cast once the
// slot's amax was complete, a cooperative launch: 0.179 ms, 30 % more instructions; run 103) and
// a one-visit one (items held in registers: 0.211 ms, 41 % of its stalls at the barrier behind
// the slot's wait; run 105). Waiting for a slot's amax with x held leaves nothing in flight.
//
// Varlen tensors (row_bounds): slots are packed row ranges of different lengths, so a slot has
// max(1, ceil(rows / rows_per_item)) items; a one-CTA plan kernel writes their prefix into the
// workspace, decode_varlen finds an item's slot in it, and the host sizes the schedule with a
// bound (the items past the prefix's total do nothing). The same kernel writes the lag of the
// launch (Args::lag_dev) from the slots' real item counts: the host's floor for it would be the
// bound (one slot holding every row), too far apart for a chunk's second read to hit L2. Such
// launches use the kernels' varlen instantiations (Geometry::kVarlen); the dense ones keep their
// code.
//
// FLASHCUTE_FP8_QUANTIZE_LAG (environment, read per call) overrides the lag: an integer >= 0
// (clamped up to the smallest safe lag; very large = every A item before every B item), or -1:
// the two passes as two launches, with no waiting at all (x is then read twice from HBM).
// An A/B switch and a fallback.
//
// Rotation: y = x @ (diag(s) H), H the Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i&j)),
// i.e. the fast Walsh-Hadamard transform of x * s, in fp32: each thread holds 32 coordinates of
// a row (4 groups of 8, one 16-byte load each), the D/32 threads of a row are adjacent lanes of
// one warp. The 5 index bits inside a thread are butterflies in registers, the log2(D/32) bits
// across threads are butterflies through __shfl_xor_sync. Power-of-two head dims only (64, 128,
// 256); 96 and 192 (Paley) are quantized here only without rotation. Head dims 128 and 256
// contract four of the coordinate bits on the tensor cores instead (hadamard_row_mma: about half
// the instructions per rotated value; FLASHCUTE_FP8_QUANTIZE_MMA=0 goes back to the butterflies).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/fp8_quantize_params.h"
#include "common/params.h"
#include "flashcute/flashcute.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#error "fp8_quantize.cu needs sm_89 or newer (cvt.rn.satfinite.e4m3x2.f32)"
#endif

namespace flashcute::sm90::quant {

constexpr int kMaxTensors = Fp8QuantizeParams::kMaxTensors;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
// Compile-time A/B switches. 4 CTAs of 256 threads per SM leave 64 registers a thread: one
// unit (32 fp32 values, 64 bytes of loads in flight) fits without spills; two units per step
// spill even at 80 registers (ptxas, sm_90a). With the rotation the cast pass is about as much
// issue-bound (~12 instructions per element) as memory-bound, so occupancy, not more loads per
// thread, is what hides the latency.
#ifndef FLASHCUTE_FP8_QUANTIZE_BLOCKS_PER_SM
#define FLASHCUTE_FP8_QUANTIZE_BLOCKS_PER_SM 4
#endif
#ifndef FLASHCUTE_FP8_QUANTIZE_UNITS_PER_STEP
#define FLASHCUTE_FP8_QUANTIZE_UNITS_PER_STEP 1
#endif
constexpr int kMinBlocksPerSm = FLASHCUTE_FP8_QUANTIZE_BLOCKS_PER_SM;
constexpr int kGroupElems = 8;           // one 16-byte load of fp16/bf16
constexpr int kGroups = 4;               // groups per thread and unit
constexpr int kUnitElems = kGroupElems * kGroups;  // 32 coordinates of one row per thread
constexpr int kUnitsPerStep = FLASHCUTE_FP8_QUANTIZE_UNITS_PER_STEP;  // units loaded before computing
constexpr int kItemUnits = 512;  // target units per item: 32 KB of fp16/bf16 x
constexpr int kMaxLanes = 256 / kUnitElems;           // threads per row at head dim 256
constexpr int kMaskWords = kGroups * kGroupElems / 2; // sign masks per thread: one per 2 elements
constexpr float kE4m3Max = 448.f;
constexpr unsigned long long kWaitTimeoutNs = 10ull * 1000 * 1000 * 1000;
constexpr int64_t kLagBudgetBytes = 24ll << 20;  // x bytes between a chunk's two reads (L2 share)


// The kernel's instantiation: kVarlen, row ranges from Tensor::bounds (a launch with a varlen
// tensor), has its own, so that the dense kernel's code (and registers) stay as they are.
// kVtTileBytes: the V^T staging tile, e4m3 bytes of the largest V^T item (the block-wise
// kernel lays its tile over the item's shared-memory stage instead: kBlockVtKeys).
template <bool kVarlen_, int kVtTileBytes_ = kItemUnits * kUnitElems>
struct Geometry {
  static constexpr bool kVarlen = kVarlen_;
  static constexpr int kVtTileBytes = kVtTileBytes_;
};
using BlockGeometry = Geometry<false, 16>;  // its V^T tile lies over a stage (block_quantize_kernel)

// One tensor as the kernel sees it (element strides; x8 elements are bytes).
struct Tensor {
  const uint16_t* x;
  uint8_t* x8;
  float* descale;
  int64_t xs_b, xs_r, xs_h;
  int64_t os_b, os_r, os_h;
  int64_t ds_b, ds_h;
  int seqlen, heads_k, group, head_dim;
  int rotate;
  int vt;  // x8 is V^T (os_r steps d; keys contiguous, permuted by 32): cast_item_vt
  int block_rows;  // > 0: block-wise scales (block_quantize_kernel); rows_per_item is then the block's
  float descale_factor;
  uint32_t signs[8];
  // schedule
  int rows_per_item;   // rows of the slot per item (all `group` heads of each row)
  int items_per_slot;  // >= 1 (a slot with no rows still has one item: it writes the descale);
                       // varlen: a bound (slots differ; the plan kernel's prefix has each one's)
  int first_item;      // position of this tensor's first item in each pass
  int first_slot;      // index of its first slot in the workspace
  // varlen (row_bounds): x, x8 are packed rows (xs_b = os_b = 0) and slot (b, hk) covers rows
  // [bounds[b], bounds[b + 1]); prefix[b] = items of the slots (b', any hk) before b, per hk
  // (written by plan_kernel); the tensor's items past prefix[batch] * heads_k do nothing.
  const int* bounds;
  int* prefix;
  int batch;
};

struct Args {
  Tensor t[kMaxTensors];
  int num_tensors;
  unsigned* amax;   // per slot: bits of max |y| (non-negative floats order like their bits)
  unsigned* done;   // per slot: A items finished
  unsigned* next;   // the work counter (fused launch)
  int items;        // items per pass
  int lag;          // fused launch: positions between a slot's A items and its B items
  // Varlen launches: the lag the kernels use, in the workspace, written by plan_kernel once the
  // slots' real item counts are known (the host knows only a bound: one slot may hold every
  // row, and a lag that large would put a chunk's two reads too far apart for L2). a.lag is
  // then the host's lag before that floor (dense tensors' floor included).
  int* lag_dev;
};

enum class Mode : int { kFused = 0, kAmaxOnly = 1, kCastOnly = 2 };

struct Item {
  int tensor, slot, b, hk, chunk;  // chunk < 0: a varlen tensor's spare item, which does nothing
  int row0, rows, slot_items;      // varlen only (decode_varlen): first packed row, rows, the slot's items
};

struct Bf16 {};
struct Fp16 {};

// ---- small device helpers ------------------------------------------------------------------
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Publishes this thread's earlier writes (the atomicMax on the amax) with the count.
__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Two fp32 values -> two e4m3 bytes (lo at the lower address), round to nearest even, finite
// values beyond +-448 saturate to +-448 (= clamp, then round: what the torch path does).
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));  // 1st operand -> upper byte
  return r;
}

// A group of 8 elements (16 bytes) of x. The first read of a chunk (A) keeps it in L2 for the
// second; the second (B) is its last use, so its lines may go first.
template <bool kLastUse>
__device__ __forceinline__ uint4 load_group(const uint16_t* p) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  return kLastUse ? __ldcs(q) : __ldcg(q);
}

// 16-bit pairs -> fp32 (exact), after flipping the sign bits in `mask` (bits 15 and 31).
__device__ __forceinline__ void unpack2(Bf16, uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void unpack2(Fp16, uint32_t w, float& lo, float& hi) {
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
  lo = f.x;
  hi = f.y;
}

// The rotation's signs s on a unit's packed pairs, by an XOR: masks (this thread's 16 words, one
// 16-byte shared load per group, read per unit rather than held in 16 registers) has bit 15 / 31
// set where a coordinate flips.
__device__ __forceinline__ void apply_signs(uint4 (&raw)[kGroups], const uint32_t* masks) {
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const uint4 m = reinterpret_cast<const uint4*>(masks)[k];
    raw[k].x ^= m.x, raw[k].y ^= m.y, raw[k].z ^= m.z, raw[k].w ^= m.w;
  }
}

// One unit (4 groups of 8) -> fp32, with the rotation's signs applied first (in place: apply_signs).
template <class In, bool kRotate>
__device__ __forceinline__ void unpack_unit(uint4 (&raw)[kGroups], const uint32_t* masks, float (&v)[kUnitElems]) {
  if constexpr (kRotate) apply_signs(raw, masks);
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const uint4 g = raw[k];
    const uint32_t w[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
    for (int p = 0; p < 4; ++p) unpack2(In{}, w[p], v[k * kGroupElems + 2 * p], v[k * kGroupElems + 2 * p + 1]);
  }
}

// Walsh-Hadamard transform of a row spread over NU adjacent lanes, 32 coordinates per lane.
// Register i of lane l holds coordinate ((i / 8) * NU + l) * 8 + i % 8: register index bits
// 0-2 and 3-4 and the lane bits are all coordinate bits, and the transform is one butterfly
// (a, b) -> (a + b, a - b) per coordinate bit, in any order.
// The butterflies of register index bits log2(kFirst) .. 4 (the others are done elsewhere).
template <int kFirst>
__device__ __forceinline__ void register_butterflies(float (&v)[kUnitElems]) {
#pragma unroll
  for (int h = kFirst; h < kUnitElems; h <<= 1) {
#pragma unroll
    for (int i = 0; i < kUnitElems; ++i) {
      if (!(i & h)) {
        const float a = v[i], b = v[i + h];
        v[i] = a + b;
        v[i + h] = a - b;
      }
    }
  }
}

template <int NU>
__device__ __forceinline__ void hadamard_row(float (&v)[kUnitElems]) {
  register_butterflies<1>(v);
  const int lane = threadIdx.x % NU;
#pragma unroll
  for (int m = 1; m < NU; m <<= 1) {
    // the lower lane of a pair keeps a + b, the upper one a - b: fma(v, -+1, partner) is the
    // sum or difference, rounded once (exactly as the add / subtract would be)
    const float sign = (lane & m) ? -1.f : 1.f;
#pragma unroll
    for (int i = 0; i < kUnitElems; ++i) v[i] = fmaf(v[i], sign, __shfl_xor_sync(0xffffffffu, v[i], m));
  }
}

// ---- the rotation on the tensor cores (both kernels, head dims 128 and 256) --------------------
// Sylvester's H is a Kronecker product over the coordinate bits (H[i][j] = (-1)^popcount(i & j)),
// so the transform may contract any 4 of them with one 16 x 16 matrix product and the rest with
// butterflies. The units stay where hadamard_row has them (one per thread, a row's NU units on
// adjacent lanes): register i of lane l holds coordinate ((i / 8) NU + l) 8 + e, e = i % 8. In a
// warp's mma.m16n8k16 (thread t = 4 g + q) the contracted k16 is (e0, q0, q1, e1) -- A's register
// pair is e0, q the lane in its group of 4 (lane bits 0-1 = coordinate bits 3-4), the second
// register pair e1 -- and n the same four bits (C's pair e0, its n-tile e1). A's 16 rows are the
// warp's 8 units (g) times e2: each thread's unit is its own row pair, no data moves between
// lanes. One product per group i / 8 (4, of 2 n-tiles: 8 per warp and 32 units). The 16-bit
// values and the +-1 entries are exact, accumulated in fp32; then the butterflies of e2 and i / 8
// (register index bits 2-4) and, at D = 256, lane bit 2 through one shuffle: in place of 5
// register and 2-3 shuffled stages (the shuffles were a quarter of the quantizer's instructions).
template <class In>
__device__ __forceinline__ uint32_t pm1_pair(bool neg_lo, bool neg_hi) {
  constexpr uint32_t kOne = std::is_same<In, Bf16>::value ? 0x3F80u : 0x3C00u;  // 1.0 in bf16 / fp16
  return (kOne | (neg_lo ? 0x8000u : 0u)) | (kOne | (neg_hi ? 0x8000u : 0u)) << 16;
}

// This lane's B fragments of H16 (.col: registers {k = 2q, 2q + 1} and {2q + 8, 2q + 9}, column
// n = 8 nt + g): b[nt][r].
template <class In>
__device__ __forceinline__ void hadamard16_fragments(uint32_t (&b)[2][2]) {
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int k0 = 2 * q + 8 * r, n = 8 * nt + g;
      b[nt][r] = pm1_pair<In>(__popc(k0 & n) & 1, __popc((k0 + 1) & n) & 1);
    }
  }
}

template <class In>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same<In, Bf16>::value) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "f"(0.f));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%10, %10, %10, %10};"
        : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b[0]), "r"(b[1]), "f"(0.f));
  }
}

// A unit's signed 16-bit values (raw, apply_signs done) -> y = its row's transform (unnormalised),
// as hadamard_row<NU> computes it up to the order of the fp32 sums. Uniform over the warp.
template <int NU, class In>
__device__ __forceinline__ void hadamard_row_mma(const uint4 (&raw)[kGroups], const uint32_t (&hb)[2][2],
                                                 float (&v)[kUnitElems]) {
  static_assert(NU == 4 || NU == 8, "head dims 128 and 256");
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    // A = {e 0-1, e 4-5 (row g + 8: e2 = 1), e 2-3 (e1 = 1), e 6-7}
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float c[4];
      mma_16816<In>(c, raw[k].x, raw[k].z, raw[k].y, raw[k].w, hb[nt]);
      const int i = k * kGroupElems + 2 * nt;  // C: (e2 = 0, e1 = nt, e0), then e2 = 1
      v[i] = c[0], v[i + 1] = c[1];
      v[i + 4] = c[2], v[i + 5] = c[3];
    }
  }
  register_butterflies<4>(v);
  if constexpr (NU == 8) {  // lane bit 2, as hadamard_row's shuffled stages
    const float sign = (threadIdx.x & 4) ? -1.f : 1.f;
#pragma unroll
    for (int i = 0; i < kUnitElems; ++i) v[i] = fmaf(v[i], sign, __shfl_xor_sync(0xffffffffu, v[i], 4));
  }
}

// Whether the rotated casts of head dim D use hadamard_row_mma (kMma: the launch's choice,
// FLASHCUTE_FP8_QUANTIZE_MMA) rather than hadamard_row.
template <int D, bool kRotate, bool kMma>
constexpr bool kMmaRotation = kMma && kRotate && (D == 128 || D == 256);

// The B fragments for hadamard_row_mma where kMmaRotation (otherwise unused, no instructions).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void mma_fragments(uint32_t (&hb)[2][2]) {
  if constexpr (kMmaRotation<D, kRotate, kMma>) hadamard16_fragments<In>(hb);
  else hb[0][0] = hb[0][1] = hb[1][0] = hb[1][1] = 0;
}

// A unit's values y from its raw 16-bit groups: with the rotation (signs, transform) when kRotate,
// on the tensor cores where kMmaRotation (uniform over the warp either way).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void unit_values(uint4 (&raw)[kGroups], const uint32_t* masks, const uint32_t (&hb)[2][2],
                                            float (&v)[kUnitElems]) {
  if constexpr (kMmaRotation<D, kRotate, kMma>) {
    apply_signs(raw, masks);
    hadamard_row_mma<D / kUnitElems, In>(raw, hb, v);
  } else {
    unpack_unit<In, kRotate>(raw, masks, v);
    if constexpr (kRotate) hadamard_row<D / kUnitElems>(v);
  }
}

// ---- the schedule ----------------------------------------------------------------------------
// Counter position -> (is B, index in its pass). The first `lag` positions are A items; then
// A and B alternate (A(lag + n), B(n)); then the remaining B items. B(j) waits for A items of
// its own slot, at most A(j + items_per_slot - 1); with lag >= items_per_slot they all sit at
// earlier positions (2m - lag < lag + 2j + 1 for m <= j + lag - 1).
template <bool kVarlen>
__device__ __forceinline__ void item_at(const Args& a, int pos, bool& cast, int& j) {
  const int n = a.items, lag = kVarlen ? __ldg(a.lag_dev) : a.lag;
  if (lag >= n) {
    cast = pos >= n;
    j = cast ? pos - n : pos;
  } else if (pos < lag) {
    cast = false;
    j = pos;
  } else if (pos < 2 * n - lag) {
    const int k = pos - lag;
    cast = k & 1;
    j = cast ? k >> 1 : lag + (k >> 1);
  } else {
    cast = true;
    j = pos - n;
  }
}

// bounds[b], clamped to the packed rows (the API documents [0, seqlen]; a wrong entry then
// costs rows, never an access outside x; decreasing bounds are caught by plan_kernel).
__device__ __forceinline__ int bound_at(const Tensor& t, int b) { return min(max(__ldg(t.bounds + b), 0), t.seqlen); }

// A varlen tensor's item `local` (its items run slot by slot, b-major, then hk): the slot b with
// prefix[b] * heads_k <= local < prefix[b + 1] * heads_k, by binary search.
__device__ __forceinline__ void decode_varlen(const Tensor& t, int local, Item& it) {
  const int hk_n = t.heads_k;
  // A spare item past the tensor's work decodes as slot 0's first item with chunk -1 (and no rows).
  const bool spare = local >= __ldg(t.prefix + t.batch) * hk_n;
  if (spare) local = 0;
  // The largest lo < batch with prefix[lo] <= local / hk_n (the same as prefix[lo] * hk_n <=
  // local), bit by bit from the top one of batch - 1. Unrolled over every bit a batch can have,
  // skipping those above batch's: the forms with a data-dependent trip count made ptxas spill
  // a kernel's loop counter (the staged kernel's, since removed).
  const int c = local / hk_n;
  const int top = t.batch > 1 ? 31 - __clz(t.batch - 1) : -1;
  int lo = 0;
#pragma unroll
  for (int i = 27; i >= 0; --i) {
    if (i > top) continue;
    const int mid = lo + (1 << i);
    if (mid < t.batch && __ldg(t.prefix + mid) <= c) lo = mid;
  }
  const int first = __ldg(t.prefix + lo), n = __ldg(t.prefix + lo + 1) - first;  // n >= 1
  const int rem = local - first * hk_n;
  it.b = lo;
  it.hk = rem / n;
  it.chunk = rem - it.hk * n;
  it.slot = t.first_slot + lo * hk_n + it.hk;
  it.slot_items = n;
  it.row0 = bound_at(t, lo) + it.chunk * t.rows_per_item;
  it.rows = spare ? 0 : max(0, min(t.rows_per_item, bound_at(t, lo + 1) - it.row0));
  if (spare) it.chunk = -1;
}

template <class G>
__device__ __forceinline__ Item decode_item(const Args& a, int j) {
  Item it;
  it.tensor = 0;
#pragma unroll
  for (int i = 1; i < kMaxTensors; ++i) {
    if (i < a.num_tensors && j >= a.t[i].first_item) it.tensor = i;
  }
  const Tensor& t = a.t[it.tensor];
  const int local = j - t.first_item;
  if constexpr (G::kVarlen) {
    if (t.bounds) {
      decode_varlen(t, local, it);
      return it;
    }
  }
  const int slot = local / t.items_per_slot;
  it.chunk = local - slot * t.items_per_slot;
  it.b = slot / t.heads_k;
  it.hk = slot - it.b * t.heads_k;
  it.slot = t.first_slot + slot;
  if constexpr (G::kVarlen) {  // a dense tensor beside varlen ones: the same fields, so that their users do not branch
    it.row0 = it.chunk * t.rows_per_item;
    it.rows = max(0, min(t.rows_per_item, t.seqlen - it.row0));
    it.slot_items = t.items_per_slot;
  }
  return it;
}

// The item's first row (of the slot's sequence; varlen: of the packed rows) and its row count.
template <class G>
__device__ __forceinline__ int item_row0(const Tensor& t, const Item& it) {
  if constexpr (G::kVarlen) return it.row0;
  return it.chunk * t.rows_per_item;
}
template <class G>
__device__ __forceinline__ int item_rows(const Tensor& t, const Item& it, int row0) {
  if constexpr (G::kVarlen) return it.rows;
  return max(0, min(t.rows_per_item, t.seqlen - row0));
}

// The items of the item's slot (the A items a B item waits for).
template <class G>
__device__ __forceinline__ unsigned slot_items(const Tensor& t, const Item& it) {
  if constexpr (G::kVarlen) return unsigned(it.slot_items);
  return unsigned(t.items_per_slot);
}

// ---- one item --------------------------------------------------------------------------------
// Calls fn(v, active, x8_offset, u) for every unit u (32 coordinates of one row and head) of the
// item, v the fp32 values y (rotated when kRotate). The loop and the shuffles inside it are
// uniform over the CTA; units past the item's end have active == false and zeros.
template <int D, bool kRotate, bool kMma, bool kLastUse, class In, class G, class Fn>
__device__ __forceinline__ void for_each_unit(const Tensor& t, const Item& it, const uint32_t* smem_masks,
                                              Fn&& fn) {
  constexpr int NU = D / kUnitElems;  // threads per row
  static_assert(D % kUnitElems == 0, "head dim must be a multiple of 32");
  static_assert(!kRotate || (kThreads % NU == 0 && 32 % NU == 0), "a rotated row must sit in one warp");
  const int group = t.group;
  const int row0 = item_row0<G>(t, it);
  const int rows = item_rows<G>(t, it, row0);
  const int units = rows * group * NU;
  const int head0 = it.hk * group;
  const uint16_t* x = t.x + it.b * t.xs_b + int64_t(row0) * t.xs_r + int64_t(head0) * t.xs_h;
  const int64_t o_base = it.b * t.os_b + int64_t(row0) * t.os_r + int64_t(head0) * t.os_h;

  const uint32_t* masks = smem_masks + (threadIdx.x % NU) * kMaskWords;  // used only with kRotate
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);

  for (int base = 0; base < units; base += kThreads * kUnitsPerStep) {
    uint4 raw[kUnitsPerStep][kGroups];
    int64_t o_off[kUnitsPerStep];
    bool active[kUnitsPerStep];
#pragma unroll
    for (int s = 0; s < kUnitsPerStep; ++s) {  // issue every load of the step first
      // unsigned: u / NU and u % NU are a shift and a mask (signed, they need sign fix-ups)
      const unsigned u = unsigned(base + s * kThreads) + threadIdx.x;
      active[s] = int(u) < units;
      const unsigned lane = u % NU, rh = u / NU;
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
    for (int s = 0; s < kUnitsPerStep; ++s) {
      float v[kUnitElems];
      unit_values<D, kRotate, kMma, In>(raw[s], masks, hb, v);
      fn(v, active[s], o_off[s], base + s * kThreads + int(threadIdx.x));
    }
  }
}

// A V^T item (x8_vt, head dims 128 / 256) is rows_per_item = kItemUnits * 32 / D keys of one
// slot: their e4m3 bytes, (D, keys), staged here so that V^T's rows go out as 16-byte stores.
template <class G>
struct Shared {
  uint32_t masks[kMaxTensors][kMaxLanes * kMaskWords];  // XOR masks of the rotation signs
  unsigned warp_max[kWarps];
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

// One unit's 32 values, scaled, as e4m3 to x8 + o (4 groups of 8 bytes, D / 32 groups apart).
template <int D>
__device__ __forceinline__ void cast_store_unit(const float (&v)[kUnitElems], float scale, uint8_t* x8) {
#pragma unroll
  for (int k = 0; k < kGroups; ++k) {
    const float* g = v + k * kGroupElems;
    uint2 packed;
    packed.x = e4m3x2(__fmul_rn(g[0], scale), __fmul_rn(g[1], scale)) |
               e4m3x2(__fmul_rn(g[2], scale), __fmul_rn(g[3], scale)) << 16;
    packed.y = e4m3x2(__fmul_rn(g[4], scale), __fmul_rn(g[5], scale)) |
               e4m3x2(__fmul_rn(g[6], scale), __fmul_rn(g[7], scale)) << 16;
    // streaming store: x8 is not read again, L2 is better spent on x
    __stcs(reinterpret_cast<uint2*>(x8 + k * (D / kUnitElems) * kGroupElems), packed);
  }
}

// An amax's scale (torch's arithmetic: fp32 reciprocal, then times 448; not 448 / amax, which
// rounds differently for about a quarter of all amax values) and descale (*descale).
__device__ __forceinline__ float scale_of(float amax, float descale_factor, float* descale) {
  const float safe = amax > 0.f ? amax : kE4m3Max;
  *descale = __fmul_rn(safe, descale_factor);
  return __fmul_rn(__frcp_rn(safe), kE4m3Max);
}

// One unit into a running amax m over unrotated values: its row's sum of squares (with the
// rotation, for the bound sqrt(D * m)), else each |v| of its 32 values.
template <int NU, bool kRotate>
__device__ __forceinline__ void track_unit_amax(float& m, const float (&v)[kUnitElems]) {
  if constexpr (kRotate) {
    m = fmaxf(m, row_sum_squares<NU>(v));
  } else {
#pragma unroll
    for (int i = 0; i < kUnitElems; ++i) m = fmaxf(m, fabsf(v[i]));
  }
}

// The CTA's amax from each thread's m (>= 0: max |x|, or with the rotation the largest row sum
// of squares, whose bound sqrt(D * m) it then returns); valid in thread 0, after a barrier.
template <int D, bool kRotate, class G>
__device__ __forceinline__ float cta_amax(float m, Shared<G>& sm) {
  const unsigned w = __reduce_max_sync(0xffffffffu, __float_as_uint(m));  // non-negative floats order like their bits
  if (threadIdx.x % 32 == 0) sm.warp_max[threadIdx.x / 32] = w;
  __syncthreads();
  unsigned cta = 0;
  if (threadIdx.x == 0) {
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
  constexpr int NU = D / kUnitElems;  // adjacent lanes holding one row
  // With the rotation, sum(x^2) in fp32: 4 partial sums of 8 squares each, a tree over them and
  // over the row's lanes, so every term passes through at most 8 + 2 + log2(NU) roundings: a
  // relative error below 13 x 2^-24 = 7.7e-7 on the sum, half that on amax (D = 256; the torch
  // path sums in fp64, and the descale's test tolerance is 1e-6). Was fp64: F2F.F64.F32 + DFMA
  // per element and an FTZ multiply before each convert, 3 instructions per element where this
  // is 1 (run 103's SASS). (8 partial sums made ptxas spill the item loop's state at 64 registers.)
  float m = 0.f;
  const auto track = [&](const float (&v)[kUnitElems], bool, int64_t, int) { track_unit_amax<NU, kRotate>(m, v); };
  for_each_unit<D, false, false, false, In, G>(t, it, sm.masks[it.tensor], track);
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
// The V^T cast in three steps, shared by the slot and the block-wise kernels: zero the tile's
// padding keys (the slot's tail item), cast each unit into the tile, store the tile's rows.
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
// padding up to the 32-key boundary included.
template <int D, int kKeys>
__device__ __forceinline__ void vt_store_tile(const Tensor& t, const Item& it, const uint8_t* tile) {
  int row0;
  const int keys = (vt_item_rows(t, it, row0) + 31) / 32 * 32;
  uint8_t* out = t.x8 + it.b * t.os_b + int64_t(it.hk) * t.os_h + row0;
  const int vecs = keys / 16;  // per d
  for (int i = threadIdx.x; i < D * vecs; i += kThreads) {
    const int d = i / vecs, c = i - d * vecs;
    __stcs(reinterpret_cast<uint4*>(out + int64_t(d) * t.os_r + c * 16),
           *reinterpret_cast<const uint4*>(tile + vt_tile_offset<kKeys>(d, c * 16)));
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
  for_each_unit<D, false, false, true, In, G>(t, it, sm.masks[it.tensor], cast_to_tile);
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
  const auto cast_and_store = [&](const float (&v)[kUnitElems], bool active, int64_t o, int) {
    if (active) cast_store_unit<D>(v, scale, x8 + o);
  };
  for_each_unit<D, kRotate, kMma, true, In, G>(t, it, sm.masks[it.tensor], cast_and_store);
}

template <int D, bool kMma, class In, class G>
__device__ __forceinline__ void run_item_d(const Args& a, const Tensor& t, const Item& it, bool cast, bool wait,
                                           Shared<G>& sm) {
  constexpr bool kCanRotate = (D & (D - 1)) == 0;
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
    const int w = idx % kMaskWords, k = w / 4, p = w % 4;
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
    sm.masks[ti][lane * kMaskWords + w] = mask;
  }
}

template <class In, bool kVarlen, bool kMma>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    quantize_kernel(const __grid_constant__ Args a, Mode mode) {
  using G = Geometry<kVarlen>;
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

// ---- block-wise scales (Tensor::block_rows > 0) -------------------------------------------------
// No scale spans more than one work item, so there is no second pass, no counter and no waiting:
// each item is read from memory once. An item's rows of one head are copied into a shared-memory
// stage by cp.async, one item ahead (two stages: the next item's copies are in flight while this
// one is cast), so no registers hold x across the wait. stage[k * stride + u] holds group k of
// unit u (16 bytes; consecutive units consecutive: the unit-per-thread reads are conflict-free),
// stride = the units of a whole item of the tensor.
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
    s.stride = t.rows_per_item * NU;
    s.steps = (s.stride + kThreads - 1) / kThreads;
    return s;
  }
};

template <int D>
__device__ __forceinline__ void stage_item_d(const Tensor& t, const Item& it, uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  const uint16_t* x = t.x + (it.b * t.xs_b + int64_t(si.row0) * t.xs_r + int64_t(it.hk) * t.xs_h);
  for (int u = threadIdx.x; u < si.units; u += kThreads) {
    const uint16_t* px = x + (int64_t(unsigned(u) / NU) * t.xs_r + int64_t(unsigned(u) % NU) * kGroupElems);
#pragma unroll
    for (int k = 0; k < kGroups; ++k) cp_async_16(stage + k * si.stride + u, px + k * NU * kGroupElems);
  }
}

// Item j's copies into stage, as one cp.async group (empty for threads with no units).
__device__ __forceinline__ void stage_item(const Args& a, int j, uint4* stage) {
  const Item it = decode_item<BlockGeometry>(a, j);
  const Tensor& t = a.t[it.tensor];
  with_head_dim(t.head_dim, [&](auto d) { stage_item_d<decltype(d)::value>(t, it, stage); });
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The staged groups of unit u (zeros past the item's units).
__device__ __forceinline__ void staged_unit(const uint4* stage, int stride, int u, int units, uint4 (&raw)[kGroups]) {
#pragma unroll
  for (int k = 0; k < kGroups; ++k) raw[k] = u < units ? stage[k * stride + u] : make_uint4(0, 0, 0, 0);
}

// Unit u's values from the stage (zeros past the item's units), with the rotation's signs and
// transform when kRotate (unit_values; hb: mma_fragments).
template <int D, bool kRotate, bool kMma, class In>
__device__ __forceinline__ void staged_values(const uint4* stage, const StagedItem& si, int u, const uint32_t* masks,
                                              const uint32_t (&hb)[2][2], float (&v)[kUnitElems]) {
  uint4 raw[kGroups];
  staged_unit(stage, si.stride, u, si.units, raw);
  unit_values<D, kRotate, kMma, In>(raw, masks, hb, v);
}

// x8's offset of unit u of a staged item (group == 1: unit / NU is the row, unit % NU the lane).
template <int D>
__device__ __forceinline__ int64_t staged_x8_offset(const Tensor& t, const Item& it, const StagedItem& si, int u) {
  constexpr int NU = D / kUnitElems;
  return it.b * t.os_b + int64_t(si.row0 + int(unsigned(u) / NU)) * t.os_r + int64_t(it.hk) * t.os_h +
         int64_t(unsigned(u) % NU) * kGroupElems;
}

// Per-row scales: each row's amax over its lanes (with the rotation the slot path's bound for one
// row, sqrt(D * sum x^2) = sqrt(sum y^2), y unnormalised), descale[b, h, row], the cast.
template <int D, bool kRotate, bool kMma, class In, class G>
__device__ void cast_rows_staged(const Tensor& t, const Item& it, Shared<G>& sm, const uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  const uint32_t* masks = sm.masks[it.tensor] + (threadIdx.x % NU) * kMaskWords;
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);
  float* descale = t.descale + (it.b * t.ds_b + it.hk * t.ds_h + si.row0);
  for (int s = 0; s < si.steps; ++s) {
    const int u = s * kThreads + int(threadIdx.x);
    float v[kUnitElems];
    staged_values<D, kRotate, kMma, In>(stage, si, u, masks, hb, v);
    float m;  // on every lane of the row (the shuffles are uniform; inactive units hold zeros)
    if constexpr (kRotate) {
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
    cast_store_unit<D>(v, scale, t.x8 + staged_x8_offset<D>(t, it, si, u));
  }
}

// V^T of a staged block: every unit's bytes first (in registers: at most kMaxSteps units a
// thread), then, the stage read by every thread, the tile laid over it, then the tile's rows out.
template <int D, class In>
__device__ void cast_block_vt(const Tensor& t, const Item& it, const StagedItem& si, float scale, uint4* stage) {
  constexpr int kKeys = kBlockVtKeys<D>;
  constexpr int kMaxSteps = kFp8QuantizeMaxBlockElems / kUnitElems / kThreads;
  uint32_t b[kMaxSteps][kUnitWords];
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    if (s < si.steps) {
      uint4 raw[kGroups];
      staged_unit(stage, si.stride, s * kThreads + int(threadIdx.x), si.units, raw);
      float v[kUnitElems];
      unpack_unit<In, false>(raw, nullptr, v);
      vt_cast_bytes(v, scale, b[s]);
    }
  }
  __syncthreads();  // the stage is read: the tile may overwrite it
  uint8_t* tile = reinterpret_cast<uint8_t*>(stage);
  vt_zero_padding<D, kKeys>(t, it, tile);
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    const int u = s * kThreads + int(threadIdx.x);
    if (s < si.steps && u < si.units) vt_place_unit<D, kKeys>(b[s], u, tile);
  }
  __syncthreads();
  vt_store_tile<D, kKeys>(t, it, tile);
}

// One block (it.chunk): amax from the stage (with the rotation the bound from the unrotated rows,
// as amax_item), the CTA's maximum, descale[b, h, chunk], then the cast (rotated when kRotate).
template <int D, bool kRotate, bool kMma, class In, class G>
__device__ void cast_block_staged(const Tensor& t, const Item& it, Shared<G>& sm, uint4* stage) {
  constexpr int NU = D / kUnitElems;
  const StagedItem si = StagedItem::of<D>(t, it);
  float m = 0.f;
  for (int s = 0; s < si.steps; ++s) {
    uint4 raw[kGroups];
    staged_unit(stage, si.stride, s * kThreads + int(threadIdx.x), si.units, raw);
    float v[kUnitElems];
    unpack_unit<In, false>(raw, nullptr, v);  // the bound needs no signs
    track_unit_amax<NU, kRotate>(m, v);
  }
  const float amax = cta_amax<D, kRotate>(m, sm);
  if (threadIdx.x == 0) {
    float d;
    sm.scale = scale_of(amax, t.descale_factor, &d);
    if (si.units > 0) t.descale[it.b * t.ds_b + it.hk * t.ds_h + it.chunk] = d;
  }
  __syncthreads();
  const float scale = sm.scale;
  if constexpr (fp8_vt_head_dim(D) && !kRotate) {
    if (t.vt) {  // V^T: v, never rotated (the API refuses both)
      cast_block_vt<D, In>(t, it, si, scale, stage);
      return;
    }
  }
  const uint32_t* masks = sm.masks[it.tensor] + (threadIdx.x % NU) * kMaskWords;
  uint32_t hb[2][2];
  mma_fragments<D, kRotate, kMma, In>(hb);
  for (int s = 0; s < si.steps; ++s) {
    const int u = s * kThreads + int(threadIdx.x);
    float v[kUnitElems];
    staged_values<D, kRotate, kMma, In>(stage, si, u, masks, hb, v);
    if (u >= si.units) continue;
    cast_store_unit<D>(v, scale, t.x8 + staged_x8_offset<D>(t, it, si, u));
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
// head dims 128 and 256 on the tensor cores (hadamard_row_mma).
template <class In, bool kMma>
__global__ void __launch_bounds__(kThreads, 2) block_quantize_kernel(const __grid_constant__ Args a, int stage_units) {
  using G = BlockGeometry;
  __shared__ __align__(16) Shared<G> sm;
  extern __shared__ uint4 stages[];
  const int per_stage = stage_units * kGroups;
  build_sign_masks(a, sm);
  int j = blockIdx.x;
  if (j < a.items) stage_item(a, j, stages);
  for (int buf = 0; j < a.items; j += gridDim.x, buf ^= 1) {
    if (j + int(gridDim.x) < a.items) {  // the next item's copies, into the other stage
      stage_item(a, j + gridDim.x, stages + (buf ^ 1) * per_stage);
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    __syncthreads();  // item j's copies (every thread's) have landed; the sign masks are built
    const Item it = decode_item<G>(a, j);
    const Tensor& t = a.t[it.tensor];
    with_head_dim(t.head_dim, [&](auto d) {
      run_block_item_d<decltype(d)::value, kMma, In>(t, it, sm, stages + buf * per_stage);
    });
    __syncthreads();  // the stage (and the tile over it) is free for the item after next
  }
}

// ---- varlen: the item prefix ------------------------------------------------------------------
// One warp per varlen tensor: prefix[b] = the items of slots b' < b (per hk), each slot
// max(1, ceil(rows / rows_per_item)) items; prefix[batch] = all of them. Launched before the
// quantization kernel, which decodes its items with it (decode_varlen).
__global__ void __launch_bounds__(32 * kMaxTensors) plan_kernel(const __grid_constant__ Args a) {
  __shared__ int max_items;  // the most items any varlen slot of the launch has
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) max_items = 1;
  __syncthreads();
  if (w < a.num_tensors && a.t[w].bounds) {
    const Tensor& t = a.t[w];
    int carry = 0, most = 1;
    for (int base = 0; base < t.batch; base += 32) {
      const int b = base + lane;
      int n = 0;
      if (b < t.batch) n = max(1, (max(0, bound_at(t, b + 1) - bound_at(t, b)) + t.rows_per_item - 1) / t.rows_per_item);
      most = max(most, n);
      int x = n;  // inclusive scan over the warp
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      if (b < t.batch) t.prefix[b] = carry + x - n;
      carry += __shfl_sync(0xffffffffu, x, 31);
    }
    // Bounds that decrease somewhere (the API asks for nondecreasing ones; nothing can check that
    // without a host sync) can give more items than the host sized the schedule for, and a cast
    // item would then wait for amax items that are never handed out (a hang, then the timeout's
    // trap). For valid bounds the total is at most ceil(seqlen / rows_per_item) + batch. Past
    // it, every item of the tensor is a spare (total 0): nothing is written, nothing waits. (Only
    // the total changes: decode_varlen still finds slot 0 with prefix[1] - prefix[0] >= 1 items,
    // and batch >= 2 wherever the bound can be exceeded.)
    if (lane == 0) t.prefix[t.batch] = carry > t.items_per_slot + t.batch ? 0 : carry;
    atomicMax(&max_items, most);
  }
  __syncthreads();
  // The lag: the host's, raised to the largest slot's items (a cast item may only wait for amax
  // items handed out before it: item_at), at most the items per pass.
  if (threadIdx.x == 0) *a.lag_dev = min(max(a.lag, max_items), a.items);
}

// ---- host side -------------------------------------------------------------------------------
// FLASHCUTE_FP8_QUANTIZE_LAG: unset or empty = automatic; an integer (see the top of the file).
bool lag_override(long* lag) {
  const char* s = std::getenv("FLASHCUTE_FP8_QUANTIZE_LAG");
  if (!s || !*s) return false;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end) return false;  // not a number: ignored
  *lag = v;
  return true;
}

// FLASHCUTE_FP8_QUANTIZE_MMA (environment, read per call): "0" rotates q and k with hadamard_row's
// butterflies (the A/B switch and a fallback); unset or anything else: on the tensor cores
// (hadamard_row_mma) at head dims 128 / 256, both kernels (benchmarks/RESULTS.md run 141).
bool mma_rotation() {
  const char* s = std::getenv("FLASHCUTE_FP8_QUANTIZE_MMA");
  return !(s && s[0] == '0' && !s[1]);
}

// Item geometry (kItemUnits units per item) and positions of every tensor; returns the number
// of slots.
int64_t plan(const Fp8QuantizeParams& p, Args& a, int* max_items_per_slot, int64_t* item_bytes) {
  int64_t items = 0, slots = 0;
  *max_items_per_slot = 1;  // dense tensors' slots only: a varlen launch's plan_kernel adds its own
  *item_bytes = 0;
  for (int i = 0; i < p.num_tensors; ++i) {
    const Fp8QuantizeTensor& s = p.tensors[i];
    Tensor& t = a.t[i];
    t.x = static_cast<const uint16_t*>(s.x);
    t.x8 = static_cast<uint8_t*>(s.x8);
    t.descale = s.descale;
    t.xs_b = s.x_batch_stride, t.xs_r = s.x_row_stride, t.xs_h = s.x_head_stride;
    t.os_b = s.x8_batch_stride, t.os_r = s.x8_row_stride, t.os_h = s.x8_head_stride;
    t.ds_b = s.descale_batch_stride, t.ds_h = s.descale_head_stride;
    t.seqlen = s.seqlen, t.heads_k = s.heads_k, t.group = s.heads / s.heads_k, t.head_dim = s.head_dim;
    t.rotate = s.rotate ? 1 : 0;
    t.vt = s.x8_vt ? 1 : 0;  // the API allows it at D 128 / 256 with group 1: whole 32-key groups per item
    t.descale_factor = s.descale_factor;
    std::copy(s.rotation_signs, s.rotation_signs + 8, t.signs);
    const int units_per_row = t.group * (s.head_dim / kUnitElems);
    t.block_rows = s.block_rows;
    // block-wise: an item is one block (per-row scales: rows as in the slot schedule)
    t.rows_per_item = s.block_rows > 1 ? s.block_rows : std::max(1, kItemUnits / units_per_row);
    t.items_per_slot = std::max(1, (s.seqlen + t.rows_per_item - 1) / t.rows_per_item);
    t.first_item = int(items);
    t.first_slot = int(slots);
    t.bounds = s.row_bounds;
    t.prefix = nullptr;  // launch() places it in the workspace
    t.batch = s.batch;
    const int64_t n_slots = int64_t(s.batch) * s.heads_k;
    // Varlen: each slot has max(1, ceil(rows / rows_per_item)) items, which sum to at most
    // ceil(seqlen / rows_per_item) + batch per hk (seqlen = the packed rows); the host knows
    // only that bound (the slots' rows are in device memory), and one slot may have them all.
    items += t.bounds ? (s.batch > 0 ? int64_t(s.heads_k) * (t.items_per_slot + s.batch) : 0)
                      : n_slots * t.items_per_slot;
    slots += n_slots;
    if (!t.bounds) *max_items_per_slot = std::max(*max_items_per_slot, t.items_per_slot);
    *item_bytes = std::max<int64_t>(*item_bytes, int64_t(t.rows_per_item) * units_per_row * kUnitElems * 2);
  }
  a.num_tensors = p.num_tensors;
  a.items = int(items);  // the API bounds it (2 * items fits in an int)
  return slots;
}

// Points the counters, the varlen tensors' item prefixes and the lag into the workspace and
// zeroes it on the stream; *prefix_entries > 0: a varlen launch (plan_kernel must run first).
cudaError_t bind_workspace(const Fp8QuantizeParams& p, Args& a, int64_t slots, int64_t* prefix_entries) {
  a.amax = static_cast<unsigned*>(p.workspace);
  a.done = a.amax + slots;
  a.next = a.done + slots;
  *prefix_entries = 0;
  for (int i = 0; i < a.num_tensors; ++i) {
    if (!a.t[i].bounds) continue;
    a.t[i].prefix = reinterpret_cast<int*>(a.next + 1) + *prefix_entries;
    *prefix_entries += a.t[i].batch + 1;
  }
  a.lag_dev = *prefix_entries > 0 ? reinterpret_cast<int*>(a.next + 1) + *prefix_entries : nullptr;
  return cudaMemsetAsync(p.workspace, 0, fp8_quantize_workspace_bytes(slots, *prefix_entries),
                         static_cast<cudaStream_t>(p.stream));
}

// The block kernel's dynamic shared memory attribute and its CTAs per SM at `smem` bytes, per
// device (the API's resolved ordinal, current during the launch): two driver calls the first
// time a (kernel, device, stage size) is seen, a table lookup after that (not on every launch).
// The attribute is only ever raised, so a launch that read a smaller size from the table still
// finds its own size allowed.
cudaError_t block_launch_setup(const void* kernel, int device, int smem, int* per_sm) {
  cudaError_t err = cudaSuccess;
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int>, int> known;  // (kernel, device, smem) -> CTAs per SM
  static std::map<std::pair<const void*, int>, int> allowed;      // (kernel, device) -> the attribute set
  std::lock_guard<std::mutex> lock(mu);
  const auto hit = known.find(std::make_tuple(kernel, device, smem));
  if (hit != known.end()) {
    *per_sm = hit->second;
    return cudaSuccess;
  }
  int& set = allowed[std::make_pair(kernel, device)];
  if (smem > set) {
    if ((err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess)
      return err;
    set = smem;
  }
  if ((err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, kThreads, smem)) != cudaSuccess) return err;
  known.emplace(std::make_tuple(kernel, device, smem), *per_sm);
  return cudaSuccess;
}

// Block-wise scales: no workspace, one launch. Its shared memory: the static part plus two
// stages, each the largest item of the launch (bf16/fp16 bytes; at least the V^T tile where a
// tensor is written as V^T); as many CTAs per SM as that leaves room for, at most 2 (launch
// bounds) -- run on the whole GPU, the CTAs striding over the items.
template <class In>
int launch_blocks(const Fp8QuantizeParams& p, const Args& a) {
  // A stage holds the largest item of the launch (units of 64 bytes), and a V^T tile where some
  // tensor is written as V^T.
  int stage_units = 0;
  for (int i = 0; i < a.num_tensors; ++i) {
    const Tensor& t = a.t[i];
    stage_units = std::max(stage_units, t.rows_per_item * (t.head_dim / kUnitElems));
    if (t.vt) stage_units = std::max(stage_units, kFp8QuantizeMaxBlockElems / kUnitElems / 2);
  }
  const int smem = 2 * stage_units * kGroups * int(sizeof(uint4));
  const auto kernel = mma_rotation() ? block_quantize_kernel<In, true> : block_quantize_kernel<In, false>;
  int per_sm = 0;
  const cudaError_t err = block_launch_setup(reinterpret_cast<const void*>(kernel), p.device, smem, &per_sm);
  if (err != cudaSuccess) return int(err);
  const int grid = std::min(a.items, std::max(1, p.num_sms) * std::max(1, per_sm));
  kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(p.stream)>>>(a, stage_units);
  return int(cudaGetLastError());
}

// kVarlen: some tensor has row_bounds (the kernels' varlen instantiations).
template <class In, bool kVarlen>
int launch(const Fp8QuantizeParams& p) {
  Args a{};
  int max_items_per_slot = 1;
  int64_t item_bytes = 0;
  const int64_t slots = plan(p, a, &max_items_per_slot, &item_bytes);
  if (a.items == 0) return int(cudaSuccess);  // batch 0: nothing to write
  cudaStream_t stream = static_cast<cudaStream_t>(p.stream);
  if constexpr (!kVarlen) {
    if (p.tensors[0].block_rows > 0) return launch_blocks<In>(p, a);  // (the API: every tensor alike, all dense)
  }
  int64_t prefix_entries = 0;
  cudaError_t err = bind_workspace(p, a, slots, &prefix_entries);
  if (err != cudaSuccess) return int(err);
  // Varlen: the slots' item prefix (and the lag, from a.lag) before the quantization launches.
  const auto plan_varlen = [&] {
    if (prefix_entries > 0) plan_kernel<<<1, 32 * kMaxTensors, 0, stream>>>(a);
  };
  const bool mma = mma_rotation();
  const auto run = [&](Mode mode, int grid) {
    if (mma) quantize_kernel<In, kVarlen, true><<<grid, kThreads, 0, stream>>>(a, mode);
    else quantize_kernel<In, kVarlen, false><<<grid, kThreads, 0, stream>>>(a, mode);
  };

  // Resident CTAs (launch bounds: kMinBlocksPerSm per SM fit); more would only queue behind.
  const int resident = std::max(1, p.num_sms) * kMinBlocksPerSm;
  long lag = -2;
  const bool forced = lag_override(&lag);
  if (forced && lag < 0) {  // two launches: every amax, then every cast
    const int grid = std::min(resident, a.items);
    plan_varlen();
    run(Mode::kAmaxOnly, grid);
    run(Mode::kCastOnly, grid);
    return int(cudaGetLastError());
  }
  if (!forced) {
    // Enough positions that the A items a B item needs were handed out about two item times
    // earlier (no waiting), few enough that the chunks read in between stay in L2.
    lag = max_items_per_slot + long(resident);
    lag = std::min<long>(lag, std::max<long>(max_items_per_slot, kLagBudgetBytes / std::max<int64_t>(item_bytes, 1)));
  }
  a.lag = int(std::min<long>(std::max<long>(lag, max_items_per_slot), a.items));
  plan_varlen();
  run(Mode::kFused, std::min(resident, 2 * a.items));
  return int(cudaGetLastError());
}

template <class In>
int launch_any(const Fp8QuantizeParams& p) {
  bool varlen = false;
  for (int i = 0; i < p.num_tensors; ++i) varlen |= p.tensors[i].row_bounds != nullptr;
  return varlen ? launch<In, true>(p) : launch<In, false>(p);
}

}  // namespace flashcute::sm90::quant

namespace flashcute {

int run_fp8_quantize_sm90(const Fp8QuantizeParams& params) {
  if (params.dtype == FLASHCUTE_DTYPE_BF16) return sm90::quant::launch_any<sm90::quant::Bf16>(params);
  if (params.dtype == FLASHCUTE_DTYPE_FP16) return sm90::quant::launch_any<sm90::quant::Fp16>(params);
  return int(cudaErrorInvalidValue);
}

}  // namespace flashcute
