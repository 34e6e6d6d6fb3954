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
