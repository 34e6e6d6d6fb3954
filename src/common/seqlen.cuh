// Where sequence b lives and how long it is, for the dense and the varlen layouts alike.
#pragma once

#include <cstdint>
#include "common/params.h"

namespace flashcute {

struct SeqInfo {
  int seqlen_q;       // rows of this sequence
  int seqlen_k;       // keys actually used (seqused_k caps it)
  int diag_offset;    // seqlen_k - seqlen_q (bottom-right) or 0 (top-left)
  int64_t q_row0;     // first row of the sequence in the q/out row index (varlen) or 0
  int64_t k_row0;     // same for k/v
  bool varlen;
  int b;

  __device__ __forceinline__ SeqInfo(const FwdParams& p, int b_) : b(b_) {
    varlen = p.cu_seqlens_q != nullptr;
    if (varlen) {
      q_row0 = p.cu_seqlens_q[b];
      seqlen_q = p.cu_seqlens_q[b + 1] - static_cast<int>(q_row0);
      k_row0 = p.cu_seqlens_k[b];
      seqlen_k = p.cu_seqlens_k[b + 1] - static_cast<int>(k_row0);
    } else {
      q_row0 = 0;
      k_row0 = 0;
      seqlen_q = p.seqlen_q;
      seqlen_k = p.seqlen_k;
    }
    if (p.seqused_k != nullptr) seqlen_k = p.seqused_k[b];
    diag_offset = p.align_top_left ? 0 : seqlen_k - seqlen_q;
  }

  // Element offsets of this sequence's first row (head offset not included).
  __device__ __forceinline__ int64_t q_offset(int64_t batch_stride, int64_t row_stride) const {
    return varlen ? q_row0 * row_stride : int64_t(b) * batch_stride;
  }
  __device__ __forceinline__ int64_t k_offset(int64_t batch_stride, int64_t row_stride) const {
    return varlen ? k_row0 * row_stride : int64_t(b) * batch_stride;
  }
  // Offset of row 0 of (b, h) in the lse tensor: (batch, heads, seqlen) dense, (heads, total_q) varlen.
  __device__ __forceinline__ int64_t lse_offset(const FwdParams& p, int h) const {
    return varlen ? int64_t(h) * p.lse_head_stride + q_row0
                  : int64_t(b) * p.lse_batch_stride + int64_t(h) * p.lse_head_stride;
  }
};

}  // namespace flashcute
