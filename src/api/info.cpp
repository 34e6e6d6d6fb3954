// Introspection: version, build description, and "would this forward run here?".
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "device.h"
#include "dispatch.h"
#include "errors.h"
#include "flashcute/flashcute.h"
#include "flashcute_build_config.h"

namespace flashcute::api {
namespace {

std::string variants_json(int backend) {
  std::string out = "[";
  bool first = true;
  auto add = [&](int dt, int d, int dv) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s{\"dtype\":\"%s\",\"head_dim\":%d,\"head_dim_v\":%d}", first ? "" : ",",
                  dtype_name(dt), d, dv);
    out += buf;
    first = false;
  };
#define FLASHCUTE_ADD(DT, D, DV) add(DT, D, DV);
  if (backend == FLASHCUTE_BACKEND_SM80) {
    FLASHCUTE_SM80_FWD_VARIANTS(FLASHCUTE_ADD)
  } else {
    FLASHCUTE_SM90_FWD_VARIANTS(FLASHCUTE_ADD)
  }
#undef FLASHCUTE_ADD
  return out + "]";
}

std::string csv_json(const char* csv, bool quote = true) {  // "a,b," -> ["a","b"] (or [a,b])
  std::string out = "[", item;
  bool first = true;
  for (const char* p = csv;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!item.empty()) {
        const char* q = quote ? "\"" : "";
        out += (first ? "" : ",") + std::string(q) + item + q;
        first = false;
      }
      item.clear();
      if (*p == '\0') break;
    } else {
      item += *p;
    }
  }
  return out + "]";
}

std::string build_info_json() {
  char cuda[32];
  std::snprintf(cuda, sizeof(cuda), "%d.%d", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
  std::string s = "{";
  s += "\"version\":\"" FLASHCUTE_VERSION_STRING "\"";
  s += ",\"abi_version\":" + std::to_string(FLASHCUTE_ABI_VERSION);
  s += ",\"cuda_archs\":" + csv_json(FLASHCUTE_BUILD_ARCHS);
  s += ",\"sm80_archs\":" + csv_json(FLASHCUTE_BUILD_SM80_ARCHS);
  s += ",\"head_dims\":" + csv_json(FLASHCUTE_BUILD_HDIMS, false);
  s += ",\"dtypes\":" + csv_json(FLASHCUTE_BUILD_DTYPES);
  s += std::string(",\"fp8\":") + (FLASHCUTE_BUILD_FP8 ? "true" : "false");
  s += std::string(",\"fp8_quantize\":") + (FLASHCUTE_BUILD_FP8_QUANTIZE ? "true" : "false");
  s += ",\"cutlass_version\":\"" FLASHCUTE_BUILD_CUTLASS_VERSION "\"";
  s += ",\"cuda_runtime_version\":\"" + std::string(cuda) + "\"";
  s += ",\"cuda_compiler_version\":\"" FLASHCUTE_BUILD_CUDA_COMPILER "\"";
  s += ",\"kernels\":{\"sm80\":" + variants_json(FLASHCUTE_BACKEND_SM80) +
       ",\"sm90\":" + variants_json(FLASHCUTE_BACKEND_SM90) + "}";
  return s + "}";
}

}  // namespace
}  // namespace flashcute::api

extern "C" const char* flashcute_version(void) { return FLASHCUTE_VERSION_STRING; }

extern "C" int flashcute_abi_version(void) { return FLASHCUTE_ABI_VERSION; }

extern "C" const char* flashcute_build_info(void) {
  static const std::string info = flashcute::api::build_info_json();  // built once, thread-safe
  return info.c_str();
}

extern "C" flashcute_status flashcute_fwd_supported(int device, int backend, int dtype, int head_dim,
                                                    int head_dim_v, int* resolved_backend) {
  using namespace flashcute::api;
  try {
    clear_error();
    if (dtype < FLASHCUTE_DTYPE_FP16 || dtype > FLASHCUTE_DTYPE_E4M3)
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "dtype: %d is not fp16 (0), bf16 (1) or e4m3 (2)", dtype);
    DeviceInfo dev;
    flashcute_status s = query_device(device, &dev);
    if (s != FLASHCUTE_OK) return s;
    int resolved = 0;
    s = resolve_fwd_backend(backend, dev, dtype, head_dim, head_dim_v, &resolved);
    if (s == FLASHCUTE_OK && resolved_backend) *resolved_backend = resolved;
    return s;
  } catch (...) {
    return fail(FLASHCUTE_ERROR_INTERNAL, "unexpected C++ exception in flashcute_fwd_supported");
  }
}
