// Thread-local error reporting for the C ABI: every failing entry point records why, and returns
// a status. Nothing is printed and nothing is thrown across the ABI.
#pragma once

#include "flashcute/flashcute.h"

namespace flashcute::api {

// Records a printf-style message as this thread's last error and returns `status`.
flashcute_status fail(flashcute_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

void clear_error();

const char* last_error();

const char* dtype_name(int dtype);
const char* backend_name(int backend);

}  // namespace flashcute::api
