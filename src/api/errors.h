// Thread-local error reporting for the C ABI: every failing entry point records why, and returns
// a status. Nothing is printed and nothing is thrown across the ABI.
#pragma once

#include <cstdint>

#include "flashcute/flashcute.h"

namespace flashcute::api {

// Records a printf-style message as this thread's last error and returns `status`.
flashcute_status fail(flashcute_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

void clear_error();

const char* last_error();

// Whether any of the bytes of a caller's argument struct past `known` (this library's sizeof) are
// set: a caller built against a newer header sets fields this library cannot honour.
inline bool tail_bytes_set(const void* args, uint64_t struct_size, uint64_t known) {
  const unsigned char* b = static_cast<const unsigned char*>(args);
  for (uint64_t i = known; i < struct_size; ++i)
    if (b[i] != 0) return true;
  return false;
}

const char* dtype_name(int dtype);
const char* backend_name(int backend);

}  // namespace flashcute::api
