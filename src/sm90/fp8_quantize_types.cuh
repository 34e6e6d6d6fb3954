// The FP8 quantizer's (fp8_quantize.cu) compile-time constants and A/B switches, and the kernel
// arguments: one tensor as the kernels see it, the launch's tensors and counters, a work item.
#pragma once

#include <cutlass/fast_math.h>

#include <cstdint>

#include "common/fp8_quantize_params.h"

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
// The per-slot kernel's instantiation for launches with a rotated Paley tensor (head dims 96 and
// 192, Geometry::kPaley): its transform (hadamard_pair_paley, in two halves of a unit) spills
// the item loop's addresses at 64 registers (ptxas); 3 CTAs per SM leave 80. The other
// instantiations keep 4 and never compile that path.
constexpr int kMinBlocksPerSmPaley = 3;
constexpr int kGroupElems = 8;           // one 16-byte load of fp16/bf16
constexpr int kGroups = 4;               // groups per thread and unit
constexpr int kUnitElems = kGroupElems * kGroups;  // 32 coordinates of one row per thread
constexpr int kUnitsPerStep = FLASHCUTE_FP8_QUANTIZE_UNITS_PER_STEP;  // units loaded before computing
constexpr int kItemUnits = 512;  // target units per item: 32 KB of fp16/bf16 x
constexpr int kMaxLanes = 256 / kUnitElems;           // threads per row at head dim 256
constexpr int kGroupMaskWords = kGroupElems / 2;       // sign masks per group: one per 2 elements
constexpr int kMaskWords = kGroups * kGroupMaskWords;  // sign masks per thread

// The block kernel's stage stride for items of rows_per_item rows at head_dim: the item's units
// rounded up to whole steps of kThreads. The units past an item's own are staged as zeros, so
// every step reads its unit without a bound check (run 163's source page: the bound's selects
// were ~6 % of the block kernel's executed instructions). Host and device.
__host__ __device__ constexpr int staged_stride(int rows_per_item, int head_dim) {
  return (rows_per_item * (head_dim / kUnitElems) + kThreads - 1) / kThreads * kThreads;
}

// The masks in shared memory are group-major: group k's 4 words of every lane, lane after lane
// (kMaskGroupWords words a group), so that one group's 16-byte loads by a row's lanes are one
// contiguous span. Lane-major (a lane's 16 words together) put lanes 0 and 2 (1 and 3) 128
// bytes apart, on the same banks: each load 2-way conflicted (run 163's source page, H200).
constexpr int kMaskGroupWords = kMaxLanes * kGroupMaskWords;
__host__ __device__ constexpr int mask_word(int lane, int w) {
  return (w / kGroupMaskWords) * kMaskGroupWords + lane * kGroupMaskWords + w % kGroupMaskWords;
}
constexpr float kE4m3Max = 448.f;
constexpr unsigned long long kWaitTimeoutNs = 10ull * 1000 * 1000 * 1000;
constexpr int64_t kLagBudgetBytes = 24ll << 20;  // x bytes between a chunk's two reads (L2 share)


// The kernel's instantiation: kVarlen, row ranges from Tensor::bounds (a launch with a varlen
// tensor), has its own, so that the dense kernel's code (and registers) stay as they are.
// kVtTileBytes: the V^T staging tile, e4m3 bytes of the largest V^T item (the block-wise
// kernel lays its tile over the item's shared-memory stage instead: kBlockVtKeys).
// kFastDecode: decode_item divides by the tensor's multiply-shift divisors. The block kernel
// only, where runs 150-153 measured it; the slot kernels compile without spills with it too
// (ptxas, session 42) but keep the hardware-less division until a GPU run has tested them.
// kPaley: the launch has a rotated tensor of head dim 96 or 192 (hadamard_pair_paley); only this
// instantiation compiles that path, at kMinBlocksPerSmPaley CTAs per SM.
template <bool kVarlen_, int kVtTileBytes_ = kItemUnits * kUnitElems, bool kFastDecode_ = false, bool kPaley_ = false>
struct Geometry {
  static constexpr bool kVarlen = kVarlen_;
  static constexpr int kVtTileBytes = kVtTileBytes_;
  static constexpr bool kFastDecode = kFastDecode_;
  static constexpr bool kPaley = kPaley_;
  static constexpr int kMinBlocks = kPaley_ ? kMinBlocksPerSmPaley : kMinBlocksPerSm;
};
using BlockGeometry = Geometry<false, 16, true>;  // its V^T tile lies over a stage (block_quantize_kernel)

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
  // items_per_slot and heads_k as multiply-shift divisors (Geometry::kFastDecode): a dense item's
  // slot, chunk, b and hk without two ~25-instruction signed divisions per item and warp.
  cutlass::FastDivmod fd_items_per_slot, fd_heads_k;
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

}  // namespace flashcute::sm90::quant
