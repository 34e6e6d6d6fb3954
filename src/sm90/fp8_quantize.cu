// FP8 (e4m3) quantization of fp16/bf16 tensors, one scale per (batch, heads_k) slot (or, with
// block_rows, per block of rows: block_quantize_kernel, each block read once), with an
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
// across threads are butterflies through __shfl_xor_sync. Head dims 128 and 256 contract four
// of the coordinate bits on the tensor cores instead (hadamard_row_mma: about half the
// instructions per rotated value; FLASHCUTE_FP8_QUANTIZE_MMA=0 goes back to the butterflies).
// Head dims 96 and 192 (H = Paley's order 12 (x) Sylvester's, per-slot scales only): a row's
// units in a block of 4 or 8 lanes (RowLayout), the order-12 factor on the tensor cores, the
// Sylvester factor as butterflies (hadamard_pair_paley), with or without the switch.
//
// Files: fp8_quantize_types.cuh (constants, switches, arguments), fp8_quantize_rotation.cuh (the
// per-unit arithmetic and the rotation), fp8_quantize_schedule.cuh (counter positions, items),
// fp8_quantize_item.cuh (the per-slot kernel), fp8_quantize_blocks.cuh (the block-wise kernel);
// here the varlen plan kernel and the host side.
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

#include "sm90/fp8_quantize_blocks.cuh"
#include "sm90/fp8_quantize_item.cuh"
#include "sm90/fp8_quantize_schedule.cuh"
#include "sm90/fp8_quantize_types.cuh"

namespace flashcute::sm90::quant {

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

// Whether the environment variable `name` is exactly "0" (the A/B switches below turn a default off
// that way; unset or anything else leaves it on).
bool env_is_zero(const char* name) {
  const char* s = std::getenv(name);
  return s && s[0] == '0' && !s[1];
}

// FLASHCUTE_FP8_QUANTIZE_MMA (environment, read per call): "0" rotates q and k with hadamard_row's
// butterflies (the A/B switch and a fallback); unset or anything else: on the tensor cores
// (hadamard_row_mma) at head dims 128 / 256, both kernels (benchmarks/RESULTS.md run 141).
bool mma_rotation() { return !env_is_zero("FLASHCUTE_FP8_QUANTIZE_MMA"); }

// FLASHCUTE_FP8_QUANTIZE_ONE_D (environment, read per call): "0" runs the block kernel that
// dispatches on each item's head dim even where the launch's tensors share one (the A/B switch);
// otherwise such launches at head dims 128 / 256 take the instantiation for that head dim.
bool one_head_dim_kernel() { return !env_is_zero("FLASHCUTE_FP8_QUANTIZE_ONE_D"); }

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
    t.fd_items_per_slot = cutlass::FastDivmod(t.items_per_slot);  // >= 1
    t.fd_heads_k = cutlass::FastDivmod(std::max(1, s.heads_k));
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
    stage_units = std::max(stage_units, staged_stride(t.rows_per_item, t.head_dim));
    if (t.vt) stage_units = std::max(stage_units, kFp8QuantizeMaxBlockElems / kUnitElems / 2);
  }
  const int smem = 2 * stage_units * kGroups * int(sizeof(uint4));
  // The head dim every tensor of the launch shares (0: they differ), for the kernel built for it.
  int d = a.t[0].head_dim;
  for (int i = 1; i < a.num_tensors; ++i) d = a.t[i].head_dim == d ? d : 0;
  const bool mma = mma_rotation();
  auto kernel = mma ? block_quantize_kernel<In, true> : block_quantize_kernel<In, false>;
  // bf16 only: ptxas spilled 8 bytes of the item loop's state in fp16's one-head-dim kernels
  // (session 45), and bf16 is what the FP8 mode's users hold.
  if constexpr (std::is_same<In, Bf16>::value) {
    if (mma && one_head_dim_kernel()) {
      if (d == 128) kernel = block_quantize_kernel<In, true, 128>;
      if (d == 256) kernel = block_quantize_kernel<In, true, 256>;
    }
  }
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
  // A rotated tensor of head dim 96 or 192: the kernel that rotates those (with kMma set, so a
  // rotated 2^k tensor in the same launch takes the tensor cores whatever the switch says).
  bool paley = false;
  for (int i = 0; i < a.num_tensors; ++i) paley |= a.t[i].rotate && paley_head_dim(a.t[i].head_dim);
  const auto run = [&](Mode mode, int grid) {
    if (paley) quantize_kernel<In, kVarlen, true, true><<<grid, kThreads, 0, stream>>>(a, mode);
    else if (mma) quantize_kernel<In, kVarlen, true><<<grid, kThreads, 0, stream>>>(a, mode);
    else quantize_kernel<In, kVarlen, false><<<grid, kThreads, 0, stream>>>(a, mode);
  };

  // Resident CTAs (launch bounds: kMinBlocks per SM fit); more would only queue behind (and the
  // fused schedule's waits need every CTA resident).
  const int resident = std::max(1, p.num_sms) * (paley ? kMinBlocksPerSmPaley : kMinBlocksPerSm);
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
