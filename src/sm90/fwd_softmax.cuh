// Online softmax for the sm90 schedule, and the WGMMA fragment views it works on.
//
// Why not common/softmax.cuh's OnlineSoftmax::update: it rescales O in the same call that
// computes the new row max, but with intra-warpgroup overlap O is still being written by the
// in-flight P V wgmma at that point. So the step is split: online() computes the new max, turns
// the scores into P and returns the per-row correction; rescale() applies it to O once the
// P V wgmma has been waited for. Semantics (log2 domain, -inf guards, LSE) match the common one.
#pragma once

#include <cmath>
#include <cute/tensor.hpp>
#include "common/utils.cuh"

namespace flashcute::sm90 {

using namespace cute;

// A wgmma accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) viewed as (rows, cols):
// mode 0.1 (+8 rows) and MMA_M are rows; 0.0 (column pair), 0.2 (8-column groups), MMA_N cols.
template <class Layout>
CUTE_HOST_DEVICE auto acc_rowcol(Layout const& l) {
  auto l0 = get<0>(l);
  return make_layout(make_layout(get<1>(l0), get<1>(l)),
                     make_layout(get<0>(l0), get<2>(l0), get<2>(l)));
}

// The same accumulator viewed as the register A operand of a following wgmma (k-steps of 16):
// ((2, 2, N/8), M, 1) -> ((2, 2, 2), M, N/16). Two adjacent 8-column groups form one k-step.
template <class Layout>
CUTE_HOST_DEVICE auto acc_as_operand_a(Layout const& l) {
  auto l0 = get<0>(l);
  auto groups = logical_divide(get<2>(l0), Int<2>{});  // (2, N/16)
  return make_layout(make_layout(get<0>(l0), get<1>(l0), get<0>(groups)), get<1>(l),
                     make_layout(get<1>(groups), get<2>(l)));
}

// Row r of s folded left to right with op, init joined last (the max's chain then does not
// wait for the running max). One dependent chain: 4 or 8 independent chains and a tree measured
// -5..+2 % (run 20; the consumers' other warps already hide that latency).
template <class TensorS, class Op>
CUTE_DEVICE float row_fold(TensorS const& s, int r, float init, Op op) {
  float acc = s(r, 0);
#pragma unroll
  for (int c = 1; c < size<1>(s); ++c) acc = op(acc, s(r, c));
  return op(init, acc);
}

#ifndef FLASHCUTE_SM90_LAZY_RESCALE
#define FLASHCUTE_SM90_LAZY_RESCALE 1  // A/B switch: 0 = rescale O whenever a row max grows
#endif

// Lazy rescaling: a row's running max only moves when the row sees it grow by more than kLazyLog2
// (log2 units), and O is only rescaled (64 FMULs per thread at dv = 128) when some row of the
// warp moved. Otherwise the block's P is computed against the stale max, so P may exceed
// 2^offset by up to 2^kLazyLog2; the row sum carries the same factor, so O / sum and the LSE stay
// exact. The decision is per row, so a row's rounding never depends on other rows' data. After
// the first blocks a row max rarely grows by that much, and each skipped step saves the 2 x rows
// exponentials of the correction and one FMUL per O element (64 per thread at dv = 128).
// Bounds: 16-bit P up to 2^8 (bf16/fp16 and the fp32 sums have range to spare); e4m3 P (offset
// 2^8) at most 2^8.75 = 430 < 448, e4m3's largest.
//
// kPOffsetLog2: P is computed as exp2(x - max + offset), i.e. scaled by 2^offset, and the row sum
// with it (the scale cancels in O / sum; LSE subtracts it). FP8 uses 8: P in [0, 256] keeps the
// small probabilities out of e4m3's subnormal range when P is rounded for P V (in emulation the
// outlier test's P rounding error fell from 2.6e-3 to 1.0e-3).
template <int kRows, int kPOffsetLog2 = 0>
struct Sm90OnlineSoftmax {
  static constexpr float kLazyLog2 = !FLASHCUTE_SM90_LAZY_RESCALE ? 0.f : (kPOffsetLog2 > 0 ? 0.75f : 8.f);
  float row_max[kRows];  // running max of raw scores; -inf while the row saw no visible key
  float row_sum[kRows];  // this thread's partial sum of exp2 (the 4 lanes of a row reduce last)
  bool rescaled = true;  // the last online() moved some row max of the warp: rescale O (warp-uniform)

  CUTE_DEVICE Sm90OnlineSoftmax() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // s: (rows, cols) view of the raw scores. On return s holds P = exp2(s*scale - max*scale) and,
  // when `rescaled`, corr[r] the factor by which O must be rescaled (the row sum already is).
  template <class TensorS>
  CUTE_DEVICE void online(TensorS&& s, float scale_log2, float (&corr)[kRows]) {
    static_assert(decltype(size<0>(s))::value == kRows);
    bool grow[kRows];
    bool any_grow = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#ifdef FLASHCUTE_SM90_SOL_NOMAX  // speed-of-light ablation only: wrong results
      float m = lane_group_allreduce<4>(MaxOp{}(row_max[r], s(r, 0)), MaxOp{});
#else
      float m = lane_group_allreduce<4>(row_fold(s, r, row_max[r], MaxOp{}), MaxOp{});
#endif
      // -inf -> finite gives +inf (grow); -inf -> -inf gives NaN (no growth, nothing to scale).
      grow[r] = (m - row_max[r]) * scale_log2 > kLazyLog2;
      // A row with every score masked so far keeps max -inf: offset 0 keeps exp2(-inf) = 0.
      const float m_scaled = (m == -INFINITY) ? 0.f : m * scale_log2;
      corr[r] = grow[r] ? exp2f(row_max[r] * scale_log2 - m_scaled) : 1.f;
      if (grow[r]) row_max[r] = m;
      row_sum[r] *= corr[r];
      any_grow |= grow[r];
    }
    // Each row decides on its own (its result depends on its own scores only, not on the other
    // rows of the tile, e.g. the padding rows past a sequence's end); the warp skips the O
    // rescale only when none of its rows moved (a row that did not move has corr 1).
    rescaled = __any_sync(0xffffffffu, any_grow);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m_scaled = (row_max[r] == -INFINITY) ? 0.f : row_max[r] * scale_log2;
      const float offset = float(kPOffsetLog2) - m_scaled;
      // MUFU.EX2 for every score: moving 2 or 4 of each 8 to an FMA-pipe polynomial measured
      // -3..-15 % (run 20): the softmax is short of issue slots, not of MUFU cycles.
#pragma unroll
#ifdef FLASHCUTE_SM90_SOL_NOEXP  // speed-of-light ablation only: wrong results
      for (int c = 0; c < size<1>(s); ++c) s(r, c) = fmaf(s(r, c), scale_log2, offset);
#else
      for (int c = 0; c < size<1>(s); ++c) s(r, c) = exp2f(fmaf(s(r, c), scale_log2, offset));
#endif
#ifdef FLASHCUTE_SM90_SOL_NOSUM  // speed-of-light ablation only: wrong results
      row_sum[r] += s(r, 0);
#else
      row_sum[r] = row_fold(s, r, row_sum[r], SumOp{});
#endif
    }
  }

  // online() for block-wise FP8 descales (the V^T kernels, BlockDescale in fwd_fp8.cuh). The
  // block's scores scale by sc[r] (log2 units: softmax scale x q's row descale x the block's k
  // descale) and the block's v descale w^-1 enters as bias = log2(1 / w) on the exponent, so
  // that P V adds v's scale without a pass over O. row_max is then in these log2 units (bias
  // included) and the row sum gains P * w: O / sum and the LSE (finalize with scale_log2 = 1 and
  // o_scale = 1) stay those of the unbiased scores. Lazy rescaling and the P offset as online().
  template <class TensorS>
  CUTE_DEVICE void online_scaled(TensorS&& s, float const (&sc)[kRows], float bias, float w, float (&corr)[kRows]) {
    static_assert(decltype(size<0>(s))::value == kRows);
    bool any_grow = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m = lane_group_allreduce<4>(row_fold(s, r, -INFINITY, MaxOp{}), MaxOp{});
      const float m_new = fmaxf(row_max[r], fmaf(m, sc[r], bias));  // -inf scores stay -inf
      // -inf -> finite: +inf (grow); -inf -> -inf: NaN (no growth)
      const bool grow = m_new - row_max[r] > kLazyLog2;
      corr[r] = grow ? exp2f(row_max[r] - m_new) : 1.f;
      if (grow) row_max[r] = m_new;
      row_sum[r] *= corr[r];
      any_grow |= grow;
    }
    rescaled = __any_sync(0xffffffffu, any_grow);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float offset = float(kPOffsetLog2) + bias - (row_max[r] == -INFINITY ? 0.f : row_max[r]);
#pragma unroll
      for (int c = 0; c < size<1>(s); ++c) s(r, c) = exp2f(fmaf(s(r, c), sc[r], offset));
      float sum = s(r, 0);
#pragma unroll
      for (int c = 1; c < size<1>(s); ++c) sum += s(r, c);
      row_sum[r] = fmaf(sum, w, row_sum[r]);
    }
  }

  // A value that depends on every P of the last online() (for warpgroup_wait_after); >= 0.
  CUTE_DEVICE float sum_dependency() const {
    float d = row_sum[0];
#pragma unroll
    for (int r = 1; r < kRows; ++r) d += row_sum[r];
#ifdef FLASHCUTE_SM90_SOL_NOEXP
    d = fabsf(d);
#endif
    return d;
  }

  template <class TensorO>
  CUTE_DEVICE void rescale(TensorO&& o, float const (&corr)[kRows]) const {
    if (!rescaled) return;  // warp-uniform
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= corr[r];
  }

  // Normalise O (and multiply it by o_scale); lse[r] = natural-log LSE of the row; empty rows
  // give O = 0, LSE = -inf.
  template <class TensorO>
  CUTE_DEVICE void finalize(TensorO&& o, float scale_log2, float (&lse)[kRows], float o_scale = 1.f) {
    constexpr float kLn2 = 0.6931471805599453f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sum = lane_group_allreduce<4>(row_sum[r], SumOp{});
      const bool empty = !(sum > 0.f);
      const float inv = empty ? 0.f : o_scale / sum;
      lse[r] = empty ? -INFINITY : (row_max[r] * scale_log2 + __log2f(sum) - float(kPOffsetLog2)) * kLn2;
#pragma unroll
      for (int c = 0; c < size<1>(o); ++c) o(r, c) *= inv;
    }
  }
};

}  // namespace flashcute::sm90
