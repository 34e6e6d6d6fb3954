// Declarations of the kernel entry points that the generated instantiation files define.
// DTYPE is a flashcute_dtype value, HDIM / HDIM_V the head dims of q/k and of v. Each returns a
// cudaError_t as int (0 = success) so that this header needs no CUDA headers.
#pragma once

#include "params.h"

namespace flashcute {

template <int DTYPE, int HDIM, int HDIM_V>
int run_fwd_sm80(const FwdParams& params);

template <int DTYPE, int HDIM, int HDIM_V>
int run_fwd_sm90(const FwdParams& params);

}  // namespace flashcute

namespace flashcute {

// FP8 quantization (src/sm90/fp8_quantize.cu; built with the FP8 kernels). Returns a cudaError_t
// as int.
int run_fp8_quantize_sm90(const Fp8QuantizeParams& params);

}  // namespace flashcute
