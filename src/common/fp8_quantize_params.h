// Parameters of the fused FP8 quantization (flashcute_fp8_quantize) shared by the API layer and
// its kernel. A header of its own, not params.h / kernel_registry.h: every attention kernel
// includes those, and a change here should not recompile them.
#pragma once

#include <cstdint>

namespace flashcute {

// FP8 quantization (flashcute_fp8_quantize): the validated tensors of one call. Element
// strides; x8 is float8_e4m3fn (1 byte), x fp16/bf16.
struct Fp8QuantizeTensor {
  const void* x;
  void* x8;
  float* descale;
  int64_t x_batch_stride, x_row_stride, x_head_stride;
  int64_t x8_batch_stride, x8_row_stride, x8_head_stride;
  int64_t descale_batch_stride, descale_head_stride;
  int batch, seqlen, heads, heads_k, head_dim;
  bool rotate;
  uint32_t rotation_signs[8];  // bit i set: coordinate i is negated before the Hadamard transform
  float descale_factor;        // fp32(norm / 448), norm = 1/sqrt(head_dim) with the rotation, else 1
  bool x8_vt;                  // x8 is V^T (flashcute_fp8_quantize_args.x8_vt): x8_row_stride steps d
  const int32_t* row_bounds;   // varlen (flashcute_fp8_quantize_args.row_bounds): batch + 1 entries, or NULL
  int block_rows;              // > 0: one scale per block of rows (flashcute_fp8_quantize_args.block_rows)
};

struct Fp8QuantizeParams {
  static constexpr int kMaxTensors = 4;  // = FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS
  Fp8QuantizeTensor tensors[kMaxTensors];
  int num_tensors;
  int dtype;         // flashcute_dtype of every x
  void* workspace;   // fp8_quantize_workspace_bytes(slots) bytes; the launch zeroes it
  int device;        // the CUDA ordinal the API resolved (and made current)
  int num_sms;
  void* stream;      // cudaStream_t
};

// Workspace of one call: per (tensor, batch, head_k) slot an fp32 amax and a u32 count of the
// amax work items done, then one u32 work counter, then per varlen tensor batch + 1 ints (the
// prefix of its slots' work items) and, if there is any, one int (the schedule's lag); rounded
// up to 16 bytes. prefix_entries: the sum of those batch + 1.
inline uint64_t fp8_quantize_workspace_bytes(int64_t slots, int64_t prefix_entries = 0) {
  const uint64_t lag = prefix_entries > 0 ? 4u : 0u;
  return ((uint64_t)slots * 8u + 4u + (uint64_t)prefix_entries * 4u + lag + 15u) / 16u * 16u;
}

// Block-wise scales (block_rows > 1) hold a block in registers between its amax and its cast:
// at most kMaxBlockElems elements per block (4 units of 32 per thread of a 256-thread CTA).
constexpr int kFp8QuantizeMaxBlockElems = 32768;

// FP8 quantization (src/sm90/fp8_quantize.cu; built with the FP8 kernels). Returns a cudaError_t
// as int.
int run_fp8_quantize_sm90(const Fp8QuantizeParams& params);

}  // namespace flashcute
