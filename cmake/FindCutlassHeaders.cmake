# Locates the CUTLASS / CuTe headers.
#   -DCUTLASS_DIR=<a CUTLASS checkout>   use that checkout (include/ and tools/util/include/)
#   otherwise                            ask Python for the `nvidia-cutlass` package
#                                        (cutlass_library.source_path), a build requirement
# Defines the INTERFACE target flashcute_cutlass and CUTLASS_VERSION_STRING.
include_guard(GLOBAL)

set(CUTLASS_DIR "" CACHE PATH "CUTLASS source tree; empty = the nvidia-cutlass Python package")

if(NOT CUTLASS_DIR)
  find_package(Python COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "import cutlass_library, sys; sys.stdout.write(cutlass_library.source_path)"
    OUTPUT_VARIABLE _fc_cutlass_src
    RESULT_VARIABLE _fc_cutlass_rc
    ERROR_VARIABLE _fc_cutlass_err)
  if(NOT _fc_cutlass_rc EQUAL 0 OR NOT EXISTS "${_fc_cutlass_src}/include/cute")
    message(FATAL_ERROR
      "flashcute needs the CUTLASS/CuTe headers. Either `pip install nvidia-cutlass` "
      "(it is a build requirement, so `pip install .` does this) or pass -DCUTLASS_DIR=<checkout>.\n"
      "Python (${Python_EXECUTABLE}) said: ${_fc_cutlass_err}")
  endif()
  set(CUTLASS_DIR "${_fc_cutlass_src}" CACHE PATH "" FORCE)
endif()

if(NOT EXISTS "${CUTLASS_DIR}/include/cutlass/version.h")
  message(FATAL_ERROR "CUTLASS_DIR=${CUTLASS_DIR} has no include/cutlass/version.h")
endif()

file(STRINGS "${CUTLASS_DIR}/include/cutlass/version.h" _fc_ver REGEX "#define CUTLASS_(MAJOR|MINOR|PATCH) [0-9]+")
string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*" "\\1" _fc_major "${_fc_ver}")
string(REGEX REPLACE ".*CUTLASS_MINOR ([0-9]+).*" "\\1" _fc_minor "${_fc_ver}")
string(REGEX REPLACE ".*CUTLASS_PATCH ([0-9]+).*" "\\1" _fc_patch "${_fc_ver}")
set(CUTLASS_VERSION_STRING "${_fc_major}.${_fc_minor}.${_fc_patch}")
message(STATUS "flashcute: CUTLASS ${CUTLASS_VERSION_STRING} at ${CUTLASS_DIR}")

add_library(flashcute_cutlass INTERFACE)
target_include_directories(flashcute_cutlass SYSTEM INTERFACE
  "${CUTLASS_DIR}/include" "${CUTLASS_DIR}/tools/util/include")
