// The forward parameters every kernel receives, already validated and normalised by src/api.
// Plain data (no CUDA or CuTe types) so that the API layer compiles with the host compiler.
#pragma once

#include <cstdint>

namespace flashcute {

// Head dims (d = dv) with e4m3 kernels that read V^T (FwdParams::v_colmajor) and for which the FP8
// quantizer writes V^T (flashcute_fp8_quantize_args.x8_vt): one rule for the API checks, the
// kernel dispatch and the quantizer (flashcute.ops.VT_HEAD_DIMS mirrors it in Python).
constexpr bool fp8_vt_head_dim(int d) { return d == 128 || d == 256; }

// The key tile of the FP8 V^T kernels (sm90/fwd_launch.cuh's TileConfigFp8 / TileConfigFp8Long,
// which static_assert against this), and so the key block of block-wise descales
// (flashcute_fwd_args.descale_block_keys): one rule for the API and the kernel (flashcute.ops.
// vt_key_block mirrors it for the quantizer's callers).
constexpr int kFp8VtLongMinSeqlenK = 4096;
constexpr int fp8_vt_key_block(int d, int seqlen_k) {
  return d == 128 ? (seqlen_k >= kFp8VtLongMinSeqlenK ? 192 : 128) : d == 256 ? 128 : 0;
}

struct FwdParams {
  // Tensors. Strides are in elements; the last dimension is contiguous.
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // nullptr: do not write LSE

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride;  // varlen: lse_batch_stride unused (row = cu_q[b] + i)

  int batch;
  int seqlen_q, seqlen_k;  // dense: the lengths; varlen: the maxima (grid sizing only)
  int heads_q, heads_k;
  int head_group;          // heads_q / heads_k: K/V head = q head / head_group
  int head_dim, head_dim_v;
  int dtype, out_dtype;    // flashcute_dtype

  // Softmax. scale_log2 = softmax_scale * log2(e) is folded once here, so kernels use exp2.
  // With softcap > 0 the kernel computes softcap * tanh(s * softmax_scale / softcap), and then
  // multiplies by log2(e): softcap_inv = softmax_scale / softcap, softcap_log2 = softcap * log2(e).
  float softmax_scale;
  float scale_log2;
  float softcap;  // 0 = off
  float softcap_inv;
  float softcap_log2;

  // Masks, in the general FA form: query row i (within its sequence) sees key j iff
  //   j >= i + diag_offset - window_left   (when window_left  >= 0)
  //   j <= i + diag_offset + window_right  (when window_right >= 0)
  // where diag_offset = seqlen_k_b - seqlen_q_b (bottom-right, align_top_left == false) or 0.
  // Causal is window_right == 0. Keys j >= seqlen_k_b never count.
  int window_left;   // -1 = unbounded
  int window_right;  // -1 = unbounded
  bool is_causal;    // informational; already folded into window_right = 0
  bool align_top_left;

  // Varlen (all nullptr for dense). Sequence b's rows are [cu_seqlens_q[b], cu_seqlens_q[b+1]).
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqused_k;  // optional: keys used in sequence b (<= its cu_seqlens_k length)

  // FP8 descales (nullptr = 1), indexed [b * descale_batch_stride + hk * descale_head_stride].
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t descale_batch_stride, descale_head_stride;

  int num_sms;  // of the device, for persistent grids
  void* stream; // cudaStream_t

  // Added for the sm90 kernel (appended; zero = not filled in): rows of the packed q/out and k/v
  // tensors in the varlen layout (flashcute_fwd_args.total_q / total_k). TMA descriptors need the
  // true extent so that a tail tile never reads past the allocation. Dense: ignored.
  int64_t total_q = 0;
  int64_t total_k = 0;
  // e4m3, dense only: v holds V^T, (batch, heads_k, head_dim_v, round_up(seqlen_k, 32)) with
  // strides v_batch_stride, v_head_stride, v_row_stride (from one d to the next) and 1; within
  // each 32 keys, position 16h + 4q + i holds key 16h + 8(i / 2) + 2q + i % 2 (the P layout of
  // sm90/fwd_fp8.cuh); padding keys are zero. The sm90 FP8 kernel then skips its V transpose.
  bool v_colmajor = false;
  // Optional scratch of two int32 on the device, zero at launch (flashcute_fwd_args.tile_counter):
  // the sm90 kernel then hands causal/local tiles out dynamically and leaves it zero again.
  int* tile_counter = nullptr;
  // FP8 V^T kernels (v_colmajor) take their descales block-wise: q's of row `row` of head h at
  // q_descale[b * qd_batch + h * qd_head + hk * qd_head_k + row * qd_row], k's and v's of key
  // block n at [b * descale_batch_stride + hk * descale_head_stride + n * kvd_block]. fwd.cpp
  // sets these from flashcute_fwd_args: block-wise descales (descale_block_keys > 0, the key
  // block then the kernel's, checked there) or, as zero row / block strides, one per (batch,
  // heads_k).
  int64_t qd_batch = 0, qd_head = 0, qd_head_k = 0, qd_row = 0, kvd_block = 0;
};

}  // namespace flashcute
