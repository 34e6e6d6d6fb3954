#include "dispatch.h"

#include <cstring>

#include "common/kernel_registry.h"
#include "errors.h"
#include "flashcute_build_config.h"

namespace flashcute::api {

namespace {

struct FwdEntry {
  int dtype, head_dim, head_dim_v;
  FwdKernelFn fn;
};

#define FLASHCUTE_SM80_ENTRY(DT, D, DV) {DT, D, DV, &run_fwd_sm80<DT, D, DV>},
#define FLASHCUTE_SM90_ENTRY(DT, D, DV) {DT, D, DV, &run_fwd_sm90<DT, D, DV>},
// A sentinel keeps the arrays non-empty when a family is not built.
const FwdEntry kSm80[] = {FLASHCUTE_SM80_FWD_VARIANTS(FLASHCUTE_SM80_ENTRY){-1, 0, 0, nullptr}};
const FwdEntry kSm90[] = {FLASHCUTE_SM90_FWD_VARIANTS(FLASHCUTE_SM90_ENTRY){-1, 0, 0, nullptr}};
#undef FLASHCUTE_SM80_ENTRY
#undef FLASHCUTE_SM90_ENTRY

template <size_t N>
FwdKernelFn lookup(const FwdEntry (&table)[N], int dtype, int d, int dv) {
  for (const FwdEntry& e : table) {
    if (e.fn && e.dtype == dtype && e.head_dim == d && e.head_dim_v == dv) return e.fn;
  }
  return nullptr;
}

// Does the sm80 family carry machine code this GPU can run? sm_8x SASS runs on 8.y with y >= x;
// Hopper needs the 90a copy. Nothing here runs on other majors (no PTX is embedded).
bool sm80_code_runs_on(const DeviceInfo& dev) {
  const char* archs = FLASHCUTE_BUILD_SM80_ARCHS;  // e.g. "80,90a,"
  if (dev.major == 9 && dev.minor == 0) return std::strstr(archs, "90a") != nullptr;
  if (dev.major != 8) return false;
  for (const char* p = archs; *p;) {
    if (p[0] == '8' && p[1] >= '0' && p[1] <= '9' && (p[1] - '0') <= dev.minor) return true;
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return false;
}

flashcute_status missing_kernel(const char* family, int dtype, int d, int dv) {
  if (d != dv) {
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "head_dim %d with head_dim_v %d: the %s kernels are not compiled for this pair "
                "(hdim_v != hdim exists only as (192, 128) on sm90; build with FLASHCUTE_HDIMS "
                "containing 192 and FLASHCUTE_CUDA_ARCHS containing 90a)",
                d, dv, family);
  }
  return fail(FLASHCUTE_ERROR_UNSUPPORTED,
              "head_dim %d, dtype %s: no %s kernel was compiled into this build "
              "(compiled head dims: %s, dtypes: %s, archs: %s); rebuild with "
              "-DFLASHCUTE_HDIMS=... / -DFLASHCUTE_DTYPES=... / -DFLASHCUTE_CUDA_ARCHS=... "
              "(pip: -C cmake.define.FLASHCUTE_HDIMS=%d)",
              d, dtype_name(dtype), family, FLASHCUTE_BUILD_HDIMS, FLASHCUTE_BUILD_DTYPES,
              FLASHCUTE_BUILD_ARCHS, d);
}

}  // namespace

FwdKernelFn find_fwd_kernel(int backend, int dtype, int d, int dv) {
  if (backend == FLASHCUTE_BACKEND_SM80) return lookup(kSm80, dtype, d, dv);
  if (backend == FLASHCUTE_BACKEND_SM90) return lookup(kSm90, dtype, d, dv);
  return nullptr;
}

flashcute_status resolve_fwd_backend(int requested, const DeviceInfo& dev, int dtype, int d, int dv,
                                     int* resolved) {
  const bool hopper = dev.major == 9 && dev.minor == 0;
  if (dev.major < 8) {
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "device %d has compute capability %d.%d; flashcute needs 8.0 or newer (Ampere, Ada, Hopper)",
                dev.ordinal, dev.major, dev.minor);
  }
  if (dtype == FLASHCUTE_DTYPE_E4M3 && !hopper) {
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "dtype e4m3: FP8 attention needs compute capability 9.0 (Hopper); device %d is %d.%d",
                dev.ordinal, dev.major, dev.minor);
  }
  switch (requested) {
    case FLASHCUTE_BACKEND_SM90: {
      if (!hopper) {
        return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                    "backend sm90 needs compute capability 9.0 (H100/H200); device %d is %d.%d "
                    "(use backend=\"sm80\" or \"auto\")",
                    dev.ordinal, dev.major, dev.minor);
      }
      if (!find_fwd_kernel(FLASHCUTE_BACKEND_SM90, dtype, d, dv)) return missing_kernel("sm90", dtype, d, dv);
      *resolved = FLASHCUTE_BACKEND_SM90;
      return FLASHCUTE_OK;
    }
    case FLASHCUTE_BACKEND_SM80: {
      if (dtype == FLASHCUTE_DTYPE_E4M3) {
        return fail(FLASHCUTE_ERROR_UNSUPPORTED, "dtype e4m3: the sm80 backend has no FP8 kernels (use sm90)");
      }
      if (!find_fwd_kernel(FLASHCUTE_BACKEND_SM80, dtype, d, dv)) return missing_kernel("sm80", dtype, d, dv);
      if (!sm80_code_runs_on(dev)) {
        return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                    "backend sm80: this build has sm80-kernel machine code for archs [%s], none of "
                    "which runs on device %d (compute capability %d.%d); add it to FLASHCUTE_CUDA_ARCHS",
                    FLASHCUTE_BUILD_SM80_ARCHS, dev.ordinal, dev.major, dev.minor);
      }
      *resolved = FLASHCUTE_BACKEND_SM80;
      return FLASHCUTE_OK;
    }
    case FLASHCUTE_BACKEND_AUTO: {
      // Hopper prefers its own kernels; where a shape has none yet it falls back to the
      // Ampere-class kernel rather than failing (both are exact).
      if (hopper && find_fwd_kernel(FLASHCUTE_BACKEND_SM90, dtype, d, dv)) {
        *resolved = FLASHCUTE_BACKEND_SM90;
        return FLASHCUTE_OK;
      }
      if (dtype != FLASHCUTE_DTYPE_E4M3 && find_fwd_kernel(FLASHCUTE_BACKEND_SM80, dtype, d, dv) &&
          sm80_code_runs_on(dev)) {
        *resolved = FLASHCUTE_BACKEND_SM80;
        return FLASHCUTE_OK;
      }
      if (dev.major > 9 || (dev.major == 9 && dev.minor != 0)) {
        return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                    "device %d has compute capability %d.%d, for which this build carries no machine "
                    "code (flashcute targets 8.x and 9.0: FLASHCUTE_CUDA_ARCHS=90a;80)",
                    dev.ordinal, dev.major, dev.minor);
      }
      return missing_kernel(hopper ? "sm90 or sm80" : "sm80", dtype, d, dv);
    }
    default:
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "backend: %d is not one of auto (0), sm80 (1), sm90 (2)",
                  requested);
  }
}

}  // namespace flashcute::api
