// Building blocks of the sm80 forward mainloop: tile loads (cp.async), the two GEMMs
// (ldmatrix + mma.sync) and the views that let the arch-agnostic softmax/mask code see the
// mma.sync accumulator as (rows, cols).
#pragma once

#include <cute/tensor.hpp>
#include "common/utils.cuh"
#include "sm80/fwd_traits.cuh"

namespace flashcute::sm80 {

using namespace cute;

// mma.sync C fragment ((2 cols, 2 rows), MMA_M, MMA_N) -> ((2 rows, MMA_M), (2 cols, MMA_N)).
template <class Layout>
__device__ __forceinline__ auto acc_rowcol_layout(Layout const& acc) {
  static_assert(decltype(size<0>(acc))::value == 4 && decltype(rank(acc))::value == 3);
  auto l = logical_divide(acc, Shape<_2>{});  // ((2, 2), MMA_M, MMA_N)
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<2>(l)));
}

template <class Tensor_>
__device__ __forceinline__ auto rowcol_view(Tensor_&& t) {
  return make_tensor(t.data(), acc_rowcol_layout(t.layout()));
}

// The C fragment of two neighbouring n8 atoms is exactly the A fragment of one k16 atom, so P
// can feed O += P V from registers: ((2,2), MMA_M, MMA_N) -> ((2,2,2), MMA_M, MMA_N / 2).
template <class Layout>
__device__ __forceinline__ auto acc_as_a_layout(Layout const& acc) {
  static_assert(decltype(size<2>(acc))::value % 2 == 0);
  auto l = logical_divide(acc, Shape<Underscore, Underscore, _2>{});
  return make_layout(make_layout(get<0>(l), get<2, 0>(l)), get<1>(l), get<2, 1>(l));
}

// Key block n of K or V: the (kBlockN, D) gmem tile g0 of block 0 moved by n blocks.
template <int kBlockN, class Tensor0>
__device__ __forceinline__ auto key_block(Tensor0 const& g0, int n, int64_t row_stride) {
  return make_tensor(g0.data() + int64_t(n) * kBlockN * row_stride, g0.layout());
}

// The thread index for the partitions used inside the key loop, equal to tid; k is any value
// that changes from one iteration to the next and is known to be >= 0 (a key block index, the
// iteration count). Every per-thread offset the loop needs (the K/V gmem address of each row,
// the cp.async and ldmatrix smem addresses, the mask coordinates) derives from it. Derived from a
// plain threadIdx.x, they are loop-invariant, and the compilers hoisted each of them out of the
// loop: one register per row, k-slice and row block, held across the whole loop (the d=128 kernel
// spilled 228 bytes). Here they are recomputed where they are used, a few integer instructions
// per iteration instead of ~20 registers:
//  - opaque() hides tid's origin from NVVM (the front end), which otherwise hoists;
//  - adding k >> 31, which is 0 for k >= 0 but not known to be 0 by ptxas, makes the index
//    loop-variant for ptxas too (opaque alone is invisible to ptxas, and ptxas hoisted the
//    ldmatrix base addresses itself: 80 bytes of spills at d=128 without this term).
// Each phase of the loop (V load + S GEMM, K load, P V GEMM) takes its own index with its own k,
// so that ptxas cannot merge them into one value kept alive through the whole iteration (that
// cost the last spills at d=64 and at d=96 on sm_80).
template <int kNThreads>
__device__ __forceinline__ int thread_index_in_loop(int tid, int k) {
  const int t = opaque(tid) + (opaque(k) >> 31);
  __builtin_assume(t >= 0 && t < kNThreads);  // no sign handling in t / 8, t % 8, ...
  return t;
}

// Copy a (CPY, CPY_ROWS, CPY_K) partition of one tile gmem -> smem with cp.async. Rows at or
// past rows_left are not read (no access past the end of the tensor) and are zero-filled, so
// padded keys contribute 0 * V = 0 and never NaN.
template <class TiledCopy, class TS, class TD, class TC>
__device__ __forceinline__ void load_tile(TiledCopy const& tiled_copy, TS const& src, TD& dst,
                                          TC const& coord, int rows_left, bool full) {
  if (full) {
    copy(tiled_copy, src, dst);
    return;
  }
#pragma unroll
  for (int m = 0; m < size<1>(dst); ++m) {
    if (int(get<0>(coord(0, m, 0))) < rows_left) {
      copy(tiled_copy, src(_, m, _), dst(_, m, _));
    } else {
      clear(dst(_, m, _));
    }
  }
}

// Like load_tile, without a branch: every row is one cp.async whose zero-fill predicate is
// "row < rows_left" (a row past the end reads nothing and writes zeros). Used for the V load
// inside the key loop: ptxas if-converted load_tile's "full" branch there, and the registers that
// predicated code writes stay live around the whole loop (8 at d=128). Row m of this thread is
// its first row row0 plus a compile-time offset; the test row0 < rows_left - offset keeps the
// per-thread part to one value (row0 + offset per row was hoisted: one register per row).
template <class TiledCopyZfill, class TS, class TD, class TC>
__device__ __forceinline__ void load_tile_zfill(TiledCopyZfill const& tiled_copy, TS const& src,
                                                TD& dst, TC const& coord, int rows_left) {
  const int row0 = int(get<0>(coord(0, 0, 0)));
#pragma unroll
  for (int m = 0; m < size<1>(dst); ++m) {
    const int offset = int(get<0>(coord.layout()(0, m, 0)));  // compile-time
    copy(tiled_copy.with(row0 < rows_left - offset), src(_, m, _), dst(_, m, _));
  }
}

// acc += A B^T with both operands in shared memory; the ldmatrix of k-slice i+1 is issued
// before the mma of slice i so that the tensor cores never wait on shared memory.
template <class TiledMma, class TA, class TB, class TAs, class TBs, class TAv, class TBv,
          class CopyA, class CopyB, class TC>
__device__ __forceinline__ void gemm_ss(TiledMma const& mma, TC& acc, TA& rA, TB& rB,
                                        TAs const& sA, TBs const& sB, TAv& rA_view, TBv& rB_view,
                                        CopyA const& copy_a, CopyB const& copy_b) {
  copy(copy_a, sA(_, _, 0), rA_view(_, _, 0));
  copy(copy_b, sB(_, _, 0), rB_view(_, _, 0));
#pragma unroll
  for (int k = 0; k < size<2>(rA); ++k) {
    if (k + 1 < size<2>(rA)) {
      copy(copy_a, sA(_, _, k + 1), rA_view(_, _, k + 1));
      copy(copy_b, sB(_, _, k + 1), rB_view(_, _, k + 1));
    }
    gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// acc += A B^T with A already in registers (P) and B in shared memory (V^T).
template <class TiledMma, class TA, class TB, class TBs, class TBv, class CopyB, class TC>
__device__ __forceinline__ void gemm_rs(TiledMma const& mma, TC& acc, TA const& rA, TB& rB,
                                        TBs const& sB, TBv& rB_view, CopyB const& copy_b) {
  copy(copy_b, sB(_, _, 0), rB_view(_, _, 0));
#pragma unroll
  for (int k = 0; k < size<2>(rA); ++k) {
    if (k + 1 < size<2>(rA)) copy(copy_b, sB(_, _, k + 1), rB_view(_, _, k + 1));
    gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

}  // namespace flashcute::sm80
