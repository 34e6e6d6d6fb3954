// Epilogue of the sm80 forward kernel: O (already normalised, fp32 registers) is converted,
// staged through shared memory (Q's buffer) and written with 128-bit coalesced stores; LSE is
// written by the one lane of each row group that holds the row's column 0.
#pragma once

#include <cute/tensor.hpp>
#include "common/params.h"
#include "common/seqlen.cuh"
#include "common/utils.cuh"
#include "sm80/fwd_mainloop.cuh"

namespace flashcute::sm80 {

using namespace cute;

template <class Traits, class TiledMma, class TensorAcc, int kRows>
__device__ __forceinline__ void store_o_and_lse(const FwdParams& p, const SeqInfo& seq,
                                                int m_block, int h, TiledMma const& tiled_mma,
                                                TensorAcc const& acc_o, const float (&lse)[kRows],
                                                typename Traits::Element* smem, int tid) {
  using Element = typename Traits::Element;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kHeadDim = Traits::kHeadDim;
  const int rows_left = seq.seqlen_q - m_block * kBlockM;

  // registers -> smem. Q's buffer is free: its last reader (S = Q K^T of the last block) was
  // followed by a __syncthreads in the mainloop.
  Tensor sO = make_tensor(make_smem_ptr(smem), typename Traits::SmemLayoutO{});
  Tensor rO = convert_fragment<Element>(acc_o);
  auto smem_tiled_copy_o = make_tiled_copy_C(typename Traits::SmemCopyAtomO{}, tiled_mma);
  auto smem_copy_o = smem_tiled_copy_o.get_thread_slice(tid);
  copy(smem_tiled_copy_o, smem_copy_o.retile_S(rO), smem_copy_o.partition_D(sO));
  __syncthreads();

  // smem -> gmem, one 128-bit store per thread and row chunk; rows past the sequence are skipped.
  Element* out = static_cast<Element*>(p.out) + seq.q_offset(p.o_batch_stride, p.o_row_stride) +
                 int64_t(h) * p.o_head_stride;
  Tensor mO = make_tensor(make_gmem_ptr(out), make_shape(seq.seqlen_q, Int<kHeadDim>{}),
                          make_stride(p.o_row_stride, _1{}));
  Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
  typename Traits::GmemTiledCopyO gmem_tiled_copy_o;
  auto gmem_copy_o = gmem_tiled_copy_o.get_thread_slice(tid);
  Tensor tOsO = gmem_copy_o.partition_S(sO);
  Tensor tOgO = gmem_copy_o.partition_D(gO);
  Tensor tOcO = gmem_copy_o.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  Tensor tOrO = make_fragment_like(tOsO);
  copy(gmem_tiled_copy_o, tOsO, tOrO);
#pragma unroll
  for (int m = 0; m < size<1>(tOrO); ++m) {
    if (int(get<0>(tOcO(0, m, 0))) < rows_left) copy(gmem_tiled_copy_o, tOrO(_, m, _), tOgO(_, m, _));
  }

  if (p.lse != nullptr) {
    float* lse_ptr = p.lse + seq.lse_offset(p, h) + int64_t(m_block) * kBlockM;
    Tensor cO = rowcol_view(tiled_mma.get_thread_slice(tid).partition_C(
        make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{})));
    static_assert(decltype(size<0>(cO))::value == kRows);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = get<0>(cO(r, 0));
      if (get<1>(cO(r, 0)) == 0 && row < rows_left) lse_ptr[row] = lse[r];
    }
  }
}

}  // namespace flashcute::sm80
