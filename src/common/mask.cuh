// Attention masks in the general window form of params.h, applied to one thread's score
// fragment. Arch-agnostic: the caller passes its scores as a (rows, cols) register view plus a
// view of the same shape holding each element's (row, col) coordinate inside the tile (an
// identity tensor partitioned like the accumulator), so mma.sync and wgmma layouts both work.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <cute/tensor.hpp>
#include "common/params.h"
#include "common/seqlen.cuh"

namespace flashcute {

// Whether a thread's score columns, relative to its first, are 0, 1, 8, 9, 16, 17, ... in order
// (column pairs of 8-column groups: the accumulator layout of both mma.sync and wgmma), checked
// at compile time on the coordinate layout.
template <class Offsets, int... Cs>
constexpr bool cols_in_pairs_of_eight(std::integer_sequence<int, Cs...>) {
  return ((decltype(cute::get<1>(Offsets{}(cute::Int<0>{}, cute::Int<Cs>{})))::value == 8 * (Cs / 2) + Cs % 2) && ...);
}

// How many of those columns lie below h (relative to the thread's first column), 0 .. n.
__device__ __forceinline__ int visible_in_pairs_of_eight(int h, int n) {
  if (h <= 0) return 0;
  const int k = 2 * (h >> 3) + min(h & 7, 2);
  return min(k, n);
}

// scores(r, c) = -inf for c >= k. The keep-bits are made once per 32 columns and each element
// is a select on one bit, which ptxas turns into R2P (7 predicates per instruction) + FSEL:
// about 1.2 instructions per element instead of two compares and a select.
template <class TensorS>
__device__ __forceinline__ void keep_prefix(TensorS&& scores, int r, int k) {
  constexpr int kCols = decltype(cute::size<1>(scores))::value;
  constexpr int kWords = (kCols + 31) / 32;
  uint32_t bits[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) {
    const int kw = k - 32 * w;
    bits[w] = kw >= 32 ? 0xffffffffu : (kw <= 0 ? 0u : (1u << kw) - 1u);
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    scores(r, c) = ((bits[c / 32] >> (c % 32)) & 1u) ? scores(r, c) : -INFINITY;
  }
}

struct WindowMask {
  int seqlen_k;
  int diag_offset;
  int window_left;   // -1 = unbounded
  int window_right;  // -1 = unbounded

  __device__ __forceinline__ WindowMask(const FwdParams& p, const SeqInfo& s)
      : seqlen_k(s.seqlen_k), diag_offset(s.diag_offset),
        window_left(p.window_left), window_right(p.window_right) {}

  // Key blocks [n_min, n_max) of width kBlockN that rows [row_begin, row_end) can see at all;
  // blocks outside are neither loaded nor computed. row_end > row_begin.
  template <int kBlockN>
  __device__ __forceinline__ void key_block_range(int row_begin, int row_end, int& n_min,
                                                  int& n_max) const {
    const int end = key_end(row_end - 1 + diag_offset);  // the last row's
    n_max = end <= 0 ? 0 : (end + kBlockN - 1) / kBlockN;
    n_min = 0;
    if (window_left >= 0) n_min = max(0, row_begin + diag_offset - window_left) / kBlockN;
  }

  // Whether key block n_block needs per-element masking for rows [row_begin, row_end):
  // it crosses the end of the keys or a window edge for some row of the tile.
  template <int kBlockN>
  __device__ __forceinline__ bool block_needs_mask(int n_block, int row_begin, int row_end) const {
    int col_begin = n_block * kBlockN, col_last = col_begin + kBlockN - 1;
    bool need = col_last >= seqlen_k;
    if (window_right >= 0) need |= col_last > row_begin + diag_offset + window_right;
    if (window_left >= 0) need |= col_begin < row_end - 1 + diag_offset - window_left;
    return need;
  }

  // The end (exclusive) of the keys visible from query row `row` (diagonal offset applied).
  __device__ __forceinline__ int key_end(int row) const {
    int end = seqlen_k;
    if (window_right >= 0) end = min(end, row + window_right + 1);
    return end;
  }

  // scores(r, c) = -inf where key col0 + col(r, c) is not visible from query row0 + row(r, c), on
  // (rows, cols) views of the scores and of their coordinates inside the tile. The row's visible
  // key range [lo, hi) is computed once per row and each element is a branch-free select;
  // kPrefixForm (no left window edge, the accumulator's column order): the select reads one bit
  // of a prefix mask (keep_prefix) instead of comparing against both edges. The
  // coordinates enter only as this thread's base plus the layout's compile-time offsets, and each
  // element is compared against a per-row limit relative to that base, i.e. against an immediate:
  // no per-element coordinate is materialised in a register.
  template <bool kPrefixForm, class TensorS, class TensorC>
  __device__ __forceinline__ void apply(TensorS&& scores, TensorC const& coords, int row0,
                                               int col0) const {
    static_assert(decltype(cute::rank(scores))::value == 2);
    const auto base = coords(0, 0);
    const auto offsets = coords.layout();  // (r, c) -> static (row, col) offset from base
    const int row_base = row0 + int(cute::get<0>(base)) + diag_offset;
    const int col_base = col0 + int(cute::get<1>(base));
    constexpr int kCols = decltype(cute::size<1>(scores))::value;
    if constexpr (kPrefixForm && cols_in_pairs_of_eight<decltype(offsets)>(std::make_integer_sequence<int, kCols>{})) {
      if (window_left < 0) {  // every row sees a prefix of the thread's (sorted) columns
#pragma unroll
        for (int r = 0; r < cute::size<0>(scores); ++r) {
          const int row = row_base + int(cute::get<0>(offsets(r, 0)));
          keep_prefix(scores, r, visible_in_pairs_of_eight(key_end(row) - col_base, kCols));
        }
        return;
      }
    }
#pragma unroll
    for (int r = 0; r < cute::size<0>(scores); ++r) {
      const int row = row_base + int(cute::get<0>(offsets(r, 0)));
      const int hi = key_end(row);
      const int lo = window_left >= 0 ? row - window_left : -(1 << 30);
      const int hi_rel = hi - col_base, lo_rel = lo - col_base;
#pragma unroll
      for (int c = 0; c < cute::size<1>(scores); ++c) {
        const int col = int(cute::get<1>(offsets(r, c)));
        scores(r, c) = (col >= lo_rel && col < hi_rel) ? scores(r, c) : -INFINITY;
      }
    }
  }
};

// Logit soft-capping: s <- tanh(s * softcap_inv). The factor softcap * log2(e) is then folded
// into the softmax scale (softcap_log2), so the capped scores go straight to the log2 domain.
template <class TensorS>
__device__ __forceinline__ void apply_softcap(TensorS&& scores, float softcap_inv) {
#pragma unroll
  for (int i = 0; i < cute::size(scores); ++i) scores(i) = tanhf(scores(i) * softcap_inv);
}

}  // namespace flashcute
