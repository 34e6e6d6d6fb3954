// Which compiled kernel runs a forward: backend resolution (auto -> sm90 / sm80) and the table of
// instantiations that CMake generated (flashcute_build_config.h).
#pragma once

#include "common/params.h"
#include "device.h"
#include "flashcute/flashcute.h"

namespace flashcute::api {

using FwdKernelFn = int (*)(const FwdParams&);

// The compiled kernel for (backend, dtype, hdim, hdim_v), or nullptr. backend is SM80 or SM90.
FwdKernelFn find_fwd_kernel(int backend, int dtype, int head_dim, int head_dim_v);

// Resolves `requested` (AUTO / SM80 / SM90) on `dev` for the given problem kind into a backend
// whose kernel is compiled and whose machine code runs on this GPU. On failure the message says
// what is missing and which CMake option builds it.
flashcute_status resolve_fwd_backend(int requested, const DeviceInfo& dev, int dtype, int head_dim,
                                     int head_dim_v, int* resolved);

}  // namespace flashcute::api
