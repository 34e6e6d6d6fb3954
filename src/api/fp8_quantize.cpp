// flashcute_fp8_quantize: validates the caller's tensors (again: Python validated first),
// normalises them into Fp8QuantizeParams and launches the sm90 quantization kernel when this
// build has it (the FP8 kernels: FLASHCUTE_FP8 with 90a). A bad argument never reaches the
// kernel; every failure returns a status with a message naming the tensor and the field.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/fp8_quantize_params.h"
#include "common/params.h"
#include "device.h"
#include "errors.h"
#include "flashcute/flashcute.h"
#include "flashcute_build_config.h"

namespace flashcute::api {
namespace {

static_assert(Fp8QuantizeParams::kMaxTensors == FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS, "header and params agree");

// The first layout: everything up to rotation_signs (x8_vt was appended after it).
constexpr uint64_t kQuantArgsSizeV1 = offsetof(flashcute_fp8_quantize_args, rotation_signs) + 8 * sizeof(uint32_t);
constexpr const char* kBuildHint =
    "the FP8 quantization kernel is built with the FP8 kernels (CMake: FLASHCUTE_FP8=ON and 90a in "
    "FLASHCUTE_CUDA_ARCHS, with FLASHCUTE_BUILD_KERNELS=ON)";

bool quantize_head_dim(int head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 192 || head_dim == 256;
}

// The block-wise kernel rotates Sylvester head dims only; the per-slot kernel every head dim
// (96 and 192: Paley's order-12 matrix times Sylvester's).
bool block_rotation_in_kernel(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

// As fwd.cpp's read_args: a smaller (older) caller's missing fields read as zero; a larger
// (newer) caller is accepted when what this library does not know is zero.
flashcute_status read_tensor(int i, const flashcute_fp8_quantize_args* in, flashcute_fp8_quantize_args* out) {
  if (!in) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors[%d]: is NULL", i);
  std::memset(out, 0, sizeof(*out));
  const uint64_t n = in->struct_size;
  if (n < kQuantArgsSizeV1) {
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                "tensors[%d].struct_size: %llu is smaller than the oldest supported layout (%llu bytes); set it "
                "to sizeof(flashcute_fp8_quantize_args)",
                i, (unsigned long long)n, (unsigned long long)kQuantArgsSizeV1);
  }
  if (tail_bytes_set(in, n, sizeof(*out))) {
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "tensors[%d].struct_size: %llu bytes, and fields beyond this library's %zu bytes are set: "
                "the caller was built against a newer flashcute; upgrade the library",
                i, (unsigned long long)n, sizeof(*out));
  }
  std::memcpy(out, in, sizeof(*out) < n ? sizeof(*out) : n);
  return FLASHCUTE_OK;
}

// One (batch, seqlen, heads, head_dim) operand: 16-byte aligned pointer and row strides (the
// kernel moves 16 bytes of x and 8 bytes of x8 at a time), non-negative strides, no int64
// overflow of the largest offset.
// x8 as V^T (vt): rows are the head_dim coordinates, each round_up(seqlen, 32) keys long.
flashcute_status check_operand(int i, const char* name, const void* ptr, int elem_bytes, int64_t batch_stride,
                               int64_t row_stride, int64_t head_stride, const flashcute_fp8_quantize_args& a,
                               bool vt = false) {
  if (!ptr) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors[%d].%s: pointer is NULL", i, name);
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors[%d].%s: data pointer %p is not 16-byte aligned", i, name, ptr);
  const int64_t vec = 16 / elem_bytes;
  const int64_t strides[3] = {batch_stride, row_stride, head_stride};
  const int64_t counts[3] = {a.batch, vt ? a.head_dim : a.seqlen, a.heads};
  const char* which[3] = {"batch", "row", "head"};
  int64_t extent = (vt ? (int64_t(a.seqlen) + 31) / 32 * 32 : a.head_dim) - 1, term;
  for (int s = 0; s < 3; ++s) {
    if (strides[s] < 0)
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors[%d].%s: %s stride %lld is negative", i, name, which[s],
                  (long long)strides[s]);
    if (strides[s] % vec != 0)
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                  "tensors[%d].%s: %s stride %lld is not a multiple of %lld elements (16 bytes)", i, name, which[s],
                  (long long)strides[s], (long long)vec);
    if (__builtin_mul_overflow(counts[s] - 1, strides[s], &term) || __builtin_add_overflow(extent, term, &extent))
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors[%d].%s: strides overflow a 64-bit offset", i, name);
  }
  return FLASHCUTE_OK;
}

flashcute_status validate_tensor(int i, const flashcute_fp8_quantize_args& a, int dtype0) {
  const flashcute_status bad = FLASHCUTE_ERROR_INVALID_ARGUMENT;
  if (a.dtype != FLASHCUTE_DTYPE_FP16 && a.dtype != FLASHCUTE_DTYPE_BF16)
    return fail(bad, "tensors[%d].dtype: %s (%d); quantize takes fp16 (0) or bf16 (1)", i, dtype_name(a.dtype), a.dtype);
  if (a.dtype != dtype0)
    return fail(bad, "tensors[%d].dtype: %s, but tensors[0] is %s; one call quantizes one dtype", i,
                dtype_name(a.dtype), dtype_name(dtype0));
  if (a.batch < 0) return fail(bad, "tensors[%d].batch: %d is negative", i, a.batch);
  if (a.seqlen < 0) return fail(bad, "tensors[%d].seqlen: %d is negative", i, a.seqlen);
  if (a.heads <= 0) return fail(bad, "tensors[%d].heads: %d must be positive", i, a.heads);
  if (a.heads_k <= 0 || a.heads % a.heads_k != 0)
    return fail(bad, "tensors[%d].heads_k: %d must be positive and divide heads (%d)", i, a.heads_k, a.heads);
  if (!quantize_head_dim(a.head_dim))
    return fail(bad, "tensors[%d].head_dim: %d; allowed: 64, 96, 128, 192, 256", i, a.head_dim);
  if (a.x8_vt && a.row_bounds)
    return fail(FLASHCUTE_ERROR_UNSUPPORTED, "tensors[%d].x8_vt: V^T output is for dense inputs, not with row_bounds", i);
  if (a.row_bounds && reinterpret_cast<uintptr_t>(a.row_bounds) % 4)
    return fail(bad, "tensors[%d].row_bounds: pointer is not 4-byte aligned", i);
  if (a.x8_vt && (a.heads != a.heads_k || !flashcute::fp8_vt_head_dim(a.head_dim) || a.rotate))
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "tensors[%d].x8_vt: V^T output takes head dims 128 and 256, heads == heads_k and no rotation "
                "(got head dim %d, heads %d / %d, rotate %d)", i, a.head_dim, a.heads, a.heads_k, a.rotate);
  if (a.block_rows < 0) return fail(bad, "tensors[%d].block_rows: %d is negative", i, a.block_rows);
  if (a.block_rows > 0) {
    if (a.row_bounds || a.heads != a.heads_k)
      return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                  "tensors[%d].block_rows: block-wise scales are for dense tensors with heads == heads_k", i);
    if (int64_t(a.block_rows) * a.head_dim > flashcute::kFp8QuantizeMaxBlockElems)
      return fail(FLASHCUTE_ERROR_UNSUPPORTED, "tensors[%d].block_rows: %d rows of head dim %d exceed %d elements",
                  i, a.block_rows, a.head_dim, flashcute::kFp8QuantizeMaxBlockElems);
    if (a.rotate && !block_rotation_in_kernel(a.head_dim))
      return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                  "tensors[%d].block_rows: block-wise scales with the rotation take head dims 64, 128 and 256; head "
                  "dim %d needs per-(batch, heads_k) scales (block_rows 0) or the torch path", i, a.head_dim);
    if (a.x8_vt && a.block_rows % 32)
      return fail(bad, "tensors[%d].block_rows: %d; with x8_vt a multiple of 32 (whole V^T key groups)", i,
                  a.block_rows);
  }
  if (a.batch == 0) return FLASHCUTE_OK;  // nothing is read or written
  if (!a.descale) return fail(bad, "tensors[%d].descale: pointer is NULL", i);
  if (reinterpret_cast<uintptr_t>(a.descale) % 4)
    return fail(bad, "tensors[%d].descale: pointer is not 4-byte aligned", i);
  if (a.descale_batch_stride < 0 || a.descale_head_stride < 0)
    return fail(bad, "tensors[%d].descale: strides must be non-negative", i);
  if (a.seqlen == 0) return FLASHCUTE_OK;  // only the descale is written
  flashcute_status s;
  if ((s = check_operand(i, "x", a.x, 2, a.x_batch_stride, a.x_row_stride, a.x_head_stride, a)) != FLASHCUTE_OK)
    return s;
  return check_operand(i, "x8", a.x8, 1, a.x8_batch_stride, a.x8_row_stride, a.x8_head_stride, a, a.x8_vt != 0);
}

int64_t slots_of(const flashcute_fp8_quantize_args& a) { return int64_t(a.batch) * a.heads_k; }

// Workspace ints of a varlen tensor's item prefix (fp8_quantize_workspace_bytes).
int64_t prefix_entries_of(const flashcute_fp8_quantize_args& a) { return a.row_bounds ? int64_t(a.batch) + 1 : 0; }

// A bound on the work items of one pass for this tensor (check_size): every item covers at
// least one row of one slot, or is the one item of an empty slot; varlen items also include
// up to one partial item per slot.
int64_t item_bound_of(const flashcute_fp8_quantize_args& a) {
  return a.row_bounds ? int64_t(a.heads_k) * (int64_t(a.seqlen) + a.batch + 1) : slots_of(a) * (a.seqlen + 1);
}

// Varlen: the batch strides are ignored (every row of a packed tensor is addressed by its row).
void normalise(flashcute_fp8_quantize_args& a) {
  if (a.row_bounds) a.x_batch_stride = a.x8_batch_stride = 0;
}

// The kernel counts its work items in an int, up to 2 * items + its grid; an item is at least
// one row of one slot, so sum(slots * (seqlen + 1)) bounds the items.
flashcute_status check_size(int64_t slots, int64_t rows_total) {
  if (slots > (1 << 28) || rows_total > (int64_t(1) << 30) - (int64_t(1) << 22))
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                "tensors: too large for one call (%lld slots, %lld rows of slots); split the batch",
                (long long)slots, (long long)rows_total);
  return FLASHCUTE_OK;
}

flashcute_status check_device(int device, DeviceInfo* dev) {
  flashcute_status s = query_device(device, dev);
  if (s != FLASHCUTE_OK) return s;
  if (!(dev->major == 9 && dev->minor == 0))
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "device %d has compute capability %d.%d; the FP8 quantization kernel is compiled for 9.0 "
                "(sm_90a) only (flashcute.fp8.quantize falls back to torch ops elsewhere)",
                dev->ordinal, dev->major, dev->minor);
  return FLASHCUTE_OK;
}

void fill_tensor(const flashcute_fp8_quantize_args& a, Fp8QuantizeTensor* t) {
  t->x = a.x;
  t->x8 = a.x8;
  t->descale = a.descale;
  t->x_batch_stride = a.x_batch_stride, t->x_row_stride = a.x_row_stride, t->x_head_stride = a.x_head_stride;
  t->x8_batch_stride = a.x8_batch_stride, t->x8_row_stride = a.x8_row_stride, t->x8_head_stride = a.x8_head_stride;
  t->descale_batch_stride = a.descale_batch_stride, t->descale_head_stride = a.descale_head_stride;
  t->batch = a.batch, t->seqlen = a.seqlen, t->heads = a.heads, t->heads_k = a.heads_k, t->head_dim = a.head_dim;
  t->rotate = a.rotate != 0;
  t->x8_vt = a.x8_vt != 0;
  t->row_bounds = a.row_bounds;
  t->block_rows = a.block_rows;
  std::memcpy(t->rotation_signs, a.rotation_signs, sizeof(t->rotation_signs));
  // The torch path's descale = amax * (norm / 448): norm / 448 in double (Python floats), then
  // rounded to fp32 once (torch multiplies an fp32 tensor by the scalar in fp32).
  const double norm = a.rotate ? 1.0 / std::sqrt(double(a.head_dim)) : 1.0;
  t->descale_factor = float(norm / 448.0);
}

}  // namespace
}  // namespace flashcute::api

extern "C" size_t flashcute_fp8_quantize_args_size(void) { return sizeof(flashcute_fp8_quantize_args); }

extern "C" size_t flashcute_fp8_quantize_workspace_size(const flashcute_fp8_quantize_args* const* tensors, int count) {
  using namespace flashcute::api;
  if (!tensors || count < 1 || count > FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS) return 0;
  int64_t slots = 0, prefix = 0;
  bool blocks = false;
  for (int i = 0; i < count; ++i) {
    flashcute_fp8_quantize_args a;
    if (read_tensor(i, tensors[i], &a) != FLASHCUTE_OK) return 0;
    if (a.batch < 0 || a.heads_k < 0) return 0;
    slots += slots_of(a);
    prefix += prefix_entries_of(a);
    blocks |= a.block_rows > 0;
  }
  return blocks ? 0 : size_t(flashcute::fp8_quantize_workspace_bytes(slots, prefix));
}

extern "C" flashcute_status flashcute_fp8_quantize(const flashcute_fp8_quantize_args* const* tensors, int count,
                                                   void* workspace, size_t workspace_bytes, int device, void* stream) {
  using namespace flashcute::api;
  try {
    clear_error();
    if (!tensors) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "tensors: is NULL");
    if (count < 1 || count > FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS)
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "count: %d is outside [1, %d]", count,
                  FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS);
    flashcute::Fp8QuantizeParams p{};
    flashcute_fp8_quantize_args a[FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS];
    int64_t slots = 0, rows_total = 0, prefix = 0;
    flashcute_status s;
    for (int i = 0; i < count; ++i) {
      if ((s = read_tensor(i, tensors[i], &a[i])) != FLASHCUTE_OK) return s;
      normalise(a[i]);
      if ((s = validate_tensor(i, a[i], a[0].dtype)) != FLASHCUTE_OK) return s;
      if ((a[i].block_rows > 0) != (a[0].block_rows > 0))
        return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                    "tensors[%d].block_rows: %d, tensors[0]'s %d: one call quantizes block-wise or per slot", i,
                    a[i].block_rows, a[0].block_rows);
      slots += slots_of(a[i]);
      rows_total += item_bound_of(a[i]);
      prefix += prefix_entries_of(a[i]);
    }
    if ((s = check_size(slots, rows_total)) != FLASHCUTE_OK) return s;
    if (slots == 0) return FLASHCUTE_OK;  // batch 0 everywhere: nothing to do
    // Block-wise scales need no workspace (no slot amax, no counter): block_quantize_kernel.
    if (a[0].block_rows == 0) {
      const uint64_t need = flashcute::fp8_quantize_workspace_bytes(slots, prefix);
      if (!workspace) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "workspace: is NULL (%llu bytes needed)",
                                  (unsigned long long)need);
      if (reinterpret_cast<uintptr_t>(workspace) % 16)
        return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "workspace: pointer is not 16-byte aligned");
      if (workspace_bytes < need)
        return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "workspace_bytes: %zu, but these tensors need %llu",
                    workspace_bytes, (unsigned long long)need);
    }

#if FLASHCUTE_BUILD_FP8_QUANTIZE
    DeviceInfo dev;
    if ((s = check_device(device, &dev)) != FLASHCUTE_OK) return s;
    DeviceGuard guard(device);
    if (!guard.ok()) return fail(FLASHCUTE_ERROR_CUDA, "device: cudaSetDevice(%d) failed", device);
    for (int i = 0; i < count; ++i) fill_tensor(a[i], &p.tensors[i]);
    p.num_tensors = count;
    p.dtype = a[0].dtype;
    p.workspace = workspace;
    p.device = dev.ordinal;
    p.num_sms = dev.num_sms;
    p.stream = stream;
    const int err = flashcute::run_fp8_quantize_sm90(p);
    if (err != 0) {
      const cudaError_t e = static_cast<cudaError_t>(err);
      return fail(FLASHCUTE_ERROR_CUDA, "kernel flashcute_fp8_quantize_sm90<%s> failed: %s (%s)",
                  dtype_name(a[0].dtype), cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return FLASHCUTE_OK;
#else
    (void)p;
    (void)device;
    (void)stream;
    return fail(FLASHCUTE_ERROR_UNSUPPORTED, "fp8 quantize: not compiled into this build; %s", kBuildHint);
#endif
  } catch (...) {
    return fail(FLASHCUTE_ERROR_INTERNAL, "unexpected C++ exception in flashcute_fp8_quantize");
  }
}

extern "C" flashcute_status flashcute_fp8_quantize_supported(int device, int dtype, int head_dim, int rotate) {
  using namespace flashcute::api;
  try {
    clear_error();
    if (dtype != FLASHCUTE_DTYPE_FP16 && dtype != FLASHCUTE_DTYPE_BF16)
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "dtype: %s (%d); quantize takes fp16 (0) or bf16 (1)",
                  dtype_name(dtype), dtype);
    if (!quantize_head_dim(head_dim))
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "head_dim: %d; allowed: 64, 96, 128, 192, 256", head_dim);
    (void)rotate;  // every head dim above rotates (block-wise scales: block_rotation_in_kernel)
#if FLASHCUTE_BUILD_FP8_QUANTIZE
    DeviceInfo dev;
    return check_device(device, &dev);
#else
    (void)device;
    return fail(FLASHCUTE_ERROR_UNSUPPORTED, "fp8 quantize: not compiled into this build; %s", kBuildHint);
#endif
  } catch (...) {
    return fail(FLASHCUTE_ERROR_INTERNAL, "unexpected C++ exception in flashcute_fp8_quantize_supported");
  }
}
