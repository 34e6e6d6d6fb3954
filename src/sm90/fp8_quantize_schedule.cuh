// The FP8 quantizer's work schedule (fp8_quantize.cu): which item a counter position is, and
// the decoding of an item into its tensor, slot and rows (dense and varlen).
#pragma once

#include "sm90/fp8_quantize_types.cuh"

namespace flashcute::sm90::quant {

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
  int slot;
  if constexpr (G::kFastDecode) {
    t.fd_items_per_slot.fast_divmod(slot, it.chunk, local);  // local >= 0: j >= the tensor's first item
    t.fd_heads_k.fast_divmod(it.b, it.hk, slot);
  } else {
    slot = local / t.items_per_slot;
    it.chunk = local - slot * t.items_per_slot;
    it.b = slot / t.heads_k;
    it.hk = slot - it.b * t.heads_k;
  }
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

}  // namespace flashcute::sm90::quant
