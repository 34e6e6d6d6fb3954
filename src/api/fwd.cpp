// flashcute_fwd: validates the caller's arguments (again: Python validated first), normalises
// them into FwdParams and launches the compiled kernel that dispatch picks. A bad argument never
// reaches a kernel; every failure returns a status with a message naming the argument.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/params.h"
#include "device.h"
#include "dispatch.h"
#include "errors.h"
#include "flashcute/flashcute.h"

namespace flashcute::api {
namespace {

// The size of the first released struct (ABI version 1). Callers send at least this much.
// The first layout: everything up to stream (v_colmajor and tile_counter were appended after it).
constexpr uint64_t kFwdArgsSizeV1 = offsetof(flashcute_fwd_args, stream) + sizeof(void*);
constexpr float kLog2e = 1.4426950408889634f;

int element_bytes(int dtype) { return dtype == FLASHCUTE_DTYPE_E4M3 ? 1 : 2; }

bool is_input_dtype(int dtype) {
  return dtype == FLASHCUTE_DTYPE_FP16 || dtype == FLASHCUTE_DTYPE_BF16 || dtype == FLASHCUTE_DTYPE_E4M3;
}

// Copies the caller's struct into a zero-initialised current one. Fields a smaller (older) caller
// did not send stay zero; a larger (newer) caller is accepted when what we don't know is zero.
flashcute_status read_args(const flashcute_fwd_args* in, flashcute_fwd_args* out) {
  if (!in) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "args: is NULL");
  std::memset(out, 0, sizeof(*out));
  const uint64_t n = in->struct_size;
  if (n < kFwdArgsSizeV1) {
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                "args.struct_size: %llu is smaller than the oldest supported layout (%llu bytes); "
                "set it to sizeof(flashcute_fwd_args)",
                (unsigned long long)n, (unsigned long long)kFwdArgsSizeV1);
  }
  if (tail_bytes_set(in, n, sizeof(*out))) {
    return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                "args.struct_size: %llu bytes, and fields beyond this library's %zu bytes are set: "
                "the caller was built against a newer flashcute; upgrade the library",
                (unsigned long long)n, sizeof(*out));
  }
  std::memcpy(out, in, sizeof(*out) < n ? sizeof(*out) : n);
  return FLASHCUTE_OK;
}

// One q/k/v/out operand: pointer alignment, non-negative strides, 16-byte vector alignment of
// every row (the kernels load and store 128 bits at a time), and an int64-safe extent.
flashcute_status check_operand(const char* name, const void* ptr, int elem_bytes, bool varlen,
                               int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                               int64_t batch, int64_t rows, int64_t heads, int64_t dim) {
  if (rows == 0 || batch == 0) return FLASHCUTE_OK;  // an empty operand is never read
  if (!ptr) return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "%s: pointer is NULL", name);
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) {
    return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "%s: data pointer %p is not 16-byte aligned", name, ptr);
  }
  const int64_t vec = 16 / elem_bytes;
  const int64_t strides[3] = {varlen ? 0 : batch_stride, row_stride, head_stride};
  const char* which[3] = {"batch", "row (seqlen)", "head"};
  for (int i = 0; i < 3; ++i) {
    if (strides[i] < 0) {
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "%s: %s stride %lld is negative", name, which[i],
                  (long long)strides[i]);
    }
    if (strides[i] % vec != 0) {
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT,
                  "%s: %s stride %lld is not a multiple of %lld elements (16 bytes)", name, which[i],
                  (long long)strides[i], (long long)vec);
    }
  }
  // Largest element offset; must not overflow int64 (kernels index in 64 bits).
  int64_t extent = dim - 1, term;
  const int64_t counts[3] = {varlen ? 1 : batch, rows, heads};
  for (int i = 0; i < 3; ++i) {
    if (__builtin_mul_overflow(counts[i] - 1, strides[i], &term) ||
        __builtin_add_overflow(extent, term, &extent)) {
      return fail(FLASHCUTE_ERROR_INVALID_ARGUMENT, "%s: strides overflow a 64-bit offset", name);
    }
  }
  return FLASHCUTE_OK;
}

flashcute_status validate(const flashcute_fwd_args& a) {
  using S = flashcute_status;
  const S bad = FLASHCUTE_ERROR_INVALID_ARGUMENT;
  if (!is_input_dtype(a.dtype)) return fail(bad, "dtype: %d is not fp16 (0), bf16 (1) or e4m3 (2)", a.dtype);
  if (a.dtype == FLASHCUTE_DTYPE_E4M3) {
    if (a.out_dtype != FLASHCUTE_DTYPE_BF16 && a.out_dtype != FLASHCUTE_DTYPE_FP16)
      return fail(bad, "out_dtype: %s; with e4m3 inputs the output is bf16 or fp16", dtype_name(a.out_dtype));
  } else {
    if (a.out_dtype != a.dtype)
      return fail(bad, "out_dtype: %s must equal dtype (%s)", dtype_name(a.out_dtype), dtype_name(a.dtype));
    if (a.q_descale || a.k_descale || a.v_descale)
      return fail(bad, "q_descale/k_descale/v_descale: only e4m3 inputs take descale factors (dtype is %s)",
                  dtype_name(a.dtype));
  }
  if (a.batch < 0) return fail(bad, "batch: %d is negative", a.batch);
  if (a.seqlen_q < 0) return fail(bad, "seqlen_q: %d is negative", a.seqlen_q);
  if (a.seqlen_k < 0) return fail(bad, "seqlen_k: %d is negative", a.seqlen_k);
  if (a.heads_q <= 0) return fail(bad, "heads_q: %d must be positive", a.heads_q);
  if (a.heads_k <= 0) return fail(bad, "heads_k: %d must be positive", a.heads_k);
  if (a.heads_q % a.heads_k != 0)
    return fail(bad, "heads_k: heads_q (%d) must be a multiple of heads_k (%d)", a.heads_q, a.heads_k);
  if (a.head_dim <= 0 || a.head_dim % 8 != 0)
    return fail(bad, "head_dim: %d must be a positive multiple of 8", a.head_dim);
  if (a.head_dim_v <= 0 || a.head_dim_v % 8 != 0)
    return fail(bad, "head_dim_v: %d must be a positive multiple of 8", a.head_dim_v);
  if (!std::isfinite(a.softmax_scale)) return fail(bad, "softmax_scale: must be finite");
  if (!(a.softcap >= 0.0f) || !std::isfinite(a.softcap))
    return fail(bad, "softcap: %g must be finite and >= 0", (double)a.softcap);
  if (a.window_left < -1) return fail(bad, "window_left: %d must be >= -1 (-1 = unbounded)", a.window_left);
  if (a.window_right < -1) return fail(bad, "window_right: %d must be >= -1 (-1 = unbounded)", a.window_right);
  if (a.mask_align != FLASHCUTE_ALIGN_BOTTOM_RIGHT && a.mask_align != FLASHCUTE_ALIGN_TOP_LEFT)
    return fail(bad, "mask_align: %d is not bottom-right (0) or top-left (1)", a.mask_align);
  if (a.backend < FLASHCUTE_BACKEND_AUTO || a.backend > FLASHCUTE_BACKEND_SM90)
    return fail(bad, "backend: %d is not auto (0), sm80 (1) or sm90 (2)", a.backend);

  const bool varlen = a.cu_seqlens_q || a.cu_seqlens_k;
  if (varlen) {
    if (!a.cu_seqlens_q || !a.cu_seqlens_k)
      return fail(bad, "cu_seqlens_q / cu_seqlens_k: give both or neither");
    if (reinterpret_cast<uintptr_t>(a.cu_seqlens_q) % 4 || reinterpret_cast<uintptr_t>(a.cu_seqlens_k) % 4)
      return fail(bad, "cu_seqlens_q / cu_seqlens_k: int32 pointers must be 4-byte aligned");
    if (a.total_q < 0 || a.total_q > INT32_MAX) return fail(bad, "total_q: %lld is outside [0, 2^31)", (long long)a.total_q);
    if (a.total_k < 0 || a.total_k > INT32_MAX) return fail(bad, "total_k: %lld is outside [0, 2^31)", (long long)a.total_k);
    if (a.seqlen_q > a.total_q) return fail(bad, "max_seqlen_q (seqlen_q): %d exceeds total_q %lld", a.seqlen_q, (long long)a.total_q);
  }
  if (a.seqused_k && reinterpret_cast<uintptr_t>(a.seqused_k) % 4)
    return fail(bad, "seqused_k: int32 pointer must be 4-byte aligned");

  const int eb = element_bytes(a.dtype);
  const int64_t rows_q = varlen ? a.total_q : a.seqlen_q;
  const int64_t rows_k = varlen ? a.total_k : a.seqlen_k;
  S s;
  if ((s = check_operand("q", a.q, eb, varlen, a.q_batch_stride, a.q_row_stride, a.q_head_stride, a.batch,
                         rows_q, a.heads_q, a.head_dim)) != FLASHCUTE_OK) return s;
  if ((s = check_operand("k", a.k, eb, varlen, a.k_batch_stride, a.k_row_stride, a.k_head_stride, a.batch,
                         rows_k, a.heads_k, a.head_dim)) != FLASHCUTE_OK) return s;
  if (a.v_colmajor) {  // V^T: head_dim_v rows of round_up(seqlen_k, 32) keys per (batch, head)
    if (a.dtype != FLASHCUTE_DTYPE_E4M3 || varlen || a.out_dtype != FLASHCUTE_DTYPE_BF16 ||
        a.head_dim != a.head_dim_v || !flashcute::fp8_vt_head_dim(a.head_dim) ||
        a.backend == FLASHCUTE_BACKEND_SM80)
      return fail(FLASHCUTE_ERROR_UNSUPPORTED,
                  "v_colmajor: V^T inputs are e4m3, dense, bf16 out, head dims (128, 128) or (256, 256), "
                  "on the sm90 backend");
    if (a.seqlen_k > 0 && (s = check_operand("v (V^T)", a.v, eb, false, a.v_batch_stride, a.v_row_stride,
                                             a.v_head_stride, a.batch, a.head_dim_v, a.heads_k,
                                             (int64_t(a.seqlen_k) + 31) / 32 * 32)) != FLASHCUTE_OK) return s;
  } else if ((s = check_operand("v", a.v, eb, varlen, a.v_batch_stride, a.v_row_stride, a.v_head_stride, a.batch,
                                rows_k, a.heads_k, a.head_dim_v)) != FLASHCUTE_OK) return s;
  if ((s = check_operand("out", a.out, element_bytes(a.out_dtype), varlen, a.out_batch_stride, a.out_row_stride,
                         a.out_head_stride, a.batch, rows_q, a.heads_q, a.head_dim_v)) != FLASHCUTE_OK) return s;
  if (reinterpret_cast<uintptr_t>(a.tile_counter) % 4)
    return fail(bad, "tile_counter: pointer must be 4-byte aligned");
  if (a.descale_block_keys != 0) {  // block-wise descales: the FP8 V^T kernels only
    if (!a.v_colmajor)
      return fail(FLASHCUTE_ERROR_UNSUPPORTED, "descale_block_keys: block-wise descales need v_colmajor (V^T) inputs");
    const int want = flashcute::fp8_vt_key_block(a.head_dim, a.seqlen_k);
    if (a.descale_block_keys != want)
      return fail(bad, "descale_block_keys: %d, but the kernel's key block for head_dim %d and seqlen_k %d is %d "
                  "(flashcute_fp8_descale_block_keys)", a.descale_block_keys, a.head_dim, a.seqlen_k, want);
    if (a.q_descale_batch_stride < 0 || a.q_descale_head_stride < 0)
      return fail(bad, "q_descale_batch_stride / q_descale_head_stride: must be >= 0");
  }
  if (a.descale_batch_stride < 0 || a.descale_head_stride < 0)
    return fail(bad, "descale_batch_stride / descale_head_stride: must be >= 0");
  if (a.lse) {
    if (reinterpret_cast<uintptr_t>(a.lse) % 4) return fail(bad, "lse: pointer must be 4-byte aligned");
    if (a.lse_head_stride < 0 || (!varlen && a.lse_batch_stride < 0))
      return fail(bad, "lse: strides must be non-negative");
  }
  return FLASHCUTE_OK;
}

FwdParams make_params(const flashcute_fwd_args& a, const DeviceInfo& dev) {
  FwdParams p{};
  p.q = a.q;
  p.k = a.k;
  p.v = a.v;
  p.out = a.out;
  p.lse = a.lse;
  p.q_batch_stride = a.q_batch_stride;
  p.q_row_stride = a.q_row_stride;
  p.q_head_stride = a.q_head_stride;
  p.k_batch_stride = a.k_batch_stride;
  p.k_row_stride = a.k_row_stride;
  p.k_head_stride = a.k_head_stride;
  p.v_batch_stride = a.v_batch_stride;
  p.v_row_stride = a.v_row_stride;
  p.v_head_stride = a.v_head_stride;
  p.o_batch_stride = a.out_batch_stride;
  p.o_row_stride = a.out_row_stride;
  p.o_head_stride = a.out_head_stride;
  p.lse_batch_stride = a.lse_batch_stride;
  p.lse_head_stride = a.lse_head_stride;
  p.batch = a.batch;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q;
  p.heads_k = a.heads_k;
  p.head_group = a.heads_q / a.heads_k;
  p.head_dim = a.head_dim;
  p.head_dim_v = a.head_dim_v;
  p.dtype = a.dtype;
  p.out_dtype = a.out_dtype;
  p.softmax_scale = a.softmax_scale;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.softcap = a.softcap;
  p.softcap_inv = a.softcap > 0.f ? a.softmax_scale / a.softcap : 0.f;
  p.softcap_log2 = a.softcap > 0.f ? a.softcap * kLog2e : 0.f;
  p.is_causal = a.causal != 0;
  p.window_left = a.window_left;
  p.window_right = p.is_causal ? 0 : a.window_right;  // causal = a window that ends at the diagonal
  p.align_top_left = a.mask_align == FLASHCUTE_ALIGN_TOP_LEFT;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqused_k = a.seqused_k;
  // Packed row counts (varlen only): the sm90 TMA descriptors need the true extents.
  p.total_q = a.cu_seqlens_q ? a.total_q : 0;
  p.total_k = a.cu_seqlens_q ? a.total_k : 0;
  p.q_descale = a.q_descale;
  p.k_descale = a.k_descale;
  p.v_descale = a.v_descale;
  p.descale_batch_stride = a.descale_batch_stride;
  p.descale_head_stride = a.descale_head_stride;
  if (a.descale_block_keys > 0) {  // q per row (of head h), k and v per key block
    p.qd_batch = a.q_descale_batch_stride, p.qd_head = a.q_descale_head_stride, p.qd_row = 1;
    p.kvd_block = 1;
  } else {  // one per (batch, heads_k), as zero row and block strides
    p.qd_batch = a.descale_batch_stride, p.qd_head_k = a.descale_head_stride;
  }
  p.num_sms = dev.num_sms;
  p.stream = a.stream;
  p.v_colmajor = a.v_colmajor != 0;
  p.tile_counter = a.tile_counter;
  return p;
}

}  // namespace
}  // namespace flashcute::api

extern "C" size_t flashcute_fwd_args_size(void) { return sizeof(flashcute_fwd_args); }

extern "C" int flashcute_fp8_descale_block_keys(int head_dim, int head_dim_v, int seqlen_k) {
  if (head_dim != head_dim_v || !flashcute::fp8_vt_head_dim(head_dim)) return 0;
  return flashcute::fp8_vt_key_block(head_dim, seqlen_k < 0 ? 0 : seqlen_k);
}

extern "C" flashcute_status flashcute_fwd(const flashcute_fwd_args* args) {
  using namespace flashcute::api;
  try {
    clear_error();
    flashcute_fwd_args a;
    flashcute_status s = read_args(args, &a);
    if (s != FLASHCUTE_OK) return s;
    if ((s = validate(a)) != FLASHCUTE_OK) return s;

    DeviceInfo dev;
    if ((s = query_device(a.device, &dev)) != FLASHCUTE_OK) return s;
    int backend = 0;
    if ((s = resolve_fwd_backend(a.backend, dev, a.dtype, a.head_dim, a.head_dim_v, &backend)) != FLASHCUTE_OK)
      return s;

    const bool varlen = a.cu_seqlens_q != nullptr;
    if (a.batch == 0 || a.seqlen_q == 0 || (varlen && a.total_q == 0)) return FLASHCUTE_OK;  // nothing to do

    DeviceGuard guard(a.device);
    if (!guard.ok()) return fail(FLASHCUTE_ERROR_CUDA, "device: cudaSetDevice(%d) failed", a.device);

    const flashcute::FwdParams p = make_params(a, dev);
    if (a.v_colmajor && backend != FLASHCUTE_BACKEND_SM90)
      return fail(FLASHCUTE_ERROR_UNSUPPORTED, "v_colmajor: V^T inputs need the sm90 backend (resolved: %s)",
                  backend_name(backend));
    FwdKernelFn kernel = find_fwd_kernel(backend, a.dtype, a.head_dim, a.head_dim_v);
    if (!kernel) return fail(FLASHCUTE_ERROR_INTERNAL, "resolved backend %s has no kernel", backend_name(backend));
    const int err = kernel(p);
    if (err != 0) {
      const cudaError_t e = static_cast<cudaError_t>(err);
      return fail(FLASHCUTE_ERROR_CUDA, "kernel flashcute_fwd_%s<%s, hdim %d, hdim_v %d> failed: %s (%s)",
                  backend_name(backend), dtype_name(a.dtype), a.head_dim, a.head_dim_v, cudaGetErrorName(e),
                  cudaGetErrorString(e));
    }
    return FLASHCUTE_OK;
  } catch (...) {  // e.g. std::bad_alloc; never let it cross the ABI
    return fail(FLASHCUTE_ERROR_INTERNAL, "unexpected C++ exception in flashcute_fwd");
  }
}
