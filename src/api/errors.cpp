#include "errors.h"

#include <cstdarg>
#include <cstdio>
#include <string>

namespace flashcute::api {

namespace {
thread_local std::string t_last_error;
}

flashcute_status fail(flashcute_status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  t_last_error.assign(buf);
  return status;
}

void clear_error() { t_last_error.clear(); }

const char* last_error() { return t_last_error.c_str(); }

const char* dtype_name(int dtype) {
  switch (dtype) {
    case FLASHCUTE_DTYPE_FP16: return "fp16";
    case FLASHCUTE_DTYPE_BF16: return "bf16";
    case FLASHCUTE_DTYPE_E4M3: return "e4m3";
    default: return "unknown";
  }
}

const char* backend_name(int backend) {
  switch (backend) {
    case FLASHCUTE_BACKEND_AUTO: return "auto";
    case FLASHCUTE_BACKEND_SM80: return "sm80";
    case FLASHCUTE_BACKEND_SM90: return "sm90";
    default: return "unknown";
  }
}

}  // namespace flashcute::api

extern "C" const char* flashcute_last_error(void) {
  // Never throws: std::string::c_str is noexcept.
  return flashcute::api::last_error();
}
