// Online softmax in the log2 domain (FlashAttention-2 style), arch-agnostic.
//
// The caller views its score accumulator as a (rows, cols) register tensor and its output
// accumulator as (rows, ocols) with the same rows; kThreadsPerRow lanes share each row (4 for
// mma.sync m16n8k16 and wgmma). Scores arrive unscaled: scale_log2 (softmax_scale * log2 e, or
// softcap * log2 e after tanh) is applied inside the exponent with one FFMA per element.
#pragma once

#include <cmath>
#include <cute/tensor.hpp>
#include "common/utils.cuh"

namespace flashcute {

template <int kRows, int kThreadsPerRow = 4>
struct OnlineSoftmax {
  float row_max[kRows];  // running max of the raw (unscaled) scores, -inf while none seen
  float row_sum[kRows];  // running sum of exp2, this thread's columns only (reduced at the end)

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // Fold one block of scores in: scores become P = exp2(s*scale - max*scale) in place and the
  // output accumulator is rescaled once by exp2(old_max - new_max).
  template <class TensorS, class TensorO>
  __device__ __forceinline__ void update(TensorS&& s, TensorO&& o, float scale_log2) {
    static_assert(decltype(cute::size<0>(s))::value == kRows);
    static_assert(decltype(cute::size<0>(o))::value == kRows);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
#pragma unroll
      for (int c = 0; c < cute::size<1>(s); ++c) m = fmaxf(m, s(r, c));
      m = lane_group_allreduce<kThreadsPerRow>(m, MaxOp{});
      // A row with every score masked so far keeps max -inf; use 0 as its offset so that
      // exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
      const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
      const float correction = exp2f(row_max[r] * scale_log2 - m_scaled);
      row_max[r] = m;
      float sum = row_sum[r] * correction;
#pragma unroll
      for (int c = 0; c < cute::size<1>(s); ++c) {
        s(r, c) = exp2f(s(r, c) * scale_log2 - m_scaled);
        sum += s(r, c);
      }
      row_sum[r] = sum;
#pragma unroll
      for (int c = 0; c < cute::size<1>(o); ++c) o(r, c) *= correction;
    }
  }

  // Normalise the output accumulator and return each row's LSE (natural log). A row that saw
  // no visible key (sum 0) gets output 0 and LSE -inf, never NaN.
  template <class TensorO>
  __device__ __forceinline__ void finalize(TensorO&& o, float scale_log2, float (&lse)[kRows]) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = lane_group_allreduce<kThreadsPerRow>(row_sum[r], SumOp{});
      const bool empty = !(sum > 0.f);  // also catches NaN
      const float inv = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] * scale_log2 + __log2f(sum)) * kLn2;
#pragma unroll
      for (int c = 0; c < cute::size<1>(o); ++c) o(r, c) *= inv;
    }
  }
};

}  // namespace flashcute
