/* flashcute — the C ABI.
 *
 * This header is the whole contract between the compiled core (libflashcute.so) and its callers
 * (the Python package through ctypes, C/C++ programs through CMake). The core knows nothing of
 * PyTorch or Python. Rules:
 *   - every entry point returns a flashcute_status; on failure flashcute_last_error() (thread-local)
 *     says which argument was wrong and why. Nothing is printed, nothing aborts, no C++ exception
 *     crosses this boundary.
 *   - argument structs start with their own size (struct_size = sizeof(the caller's struct)).
 *     Fields are only ever appended, so a caller built against an older header keeps working: the
 *     library treats fields the caller did not send as zero.
 *   - strides are in elements, not bytes; the last dimension must be contiguous.
 */
#ifndef FLASHCUTE_FLASHCUTE_H
#define FLASHCUTE_FLASHCUTE_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FLASHCUTE_API __declspec(dllexport)
#else
#define FLASHCUTE_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define FLASHCUTE_ABI_VERSION 1

typedef enum flashcute_status {
  FLASHCUTE_OK = 0,
  FLASHCUTE_ERROR_INVALID_ARGUMENT = 1, /* a caller error: shape, stride, pointer, value */
  FLASHCUTE_ERROR_UNSUPPORTED = 2,      /* valid, but not compiled in or not possible on this GPU */
  FLASHCUTE_ERROR_CUDA = 3,             /* a CUDA runtime call or a kernel launch failed */
  FLASHCUTE_ERROR_INTERNAL = 4          /* a bug in flashcute: please report it */
} flashcute_status;

typedef enum flashcute_dtype {
  FLASHCUTE_DTYPE_FP16 = 0,
  FLASHCUTE_DTYPE_BF16 = 1,
  FLASHCUTE_DTYPE_E4M3 = 2 /* float8_e4m3fn; inputs only, needs compute capability 9.0 */
} flashcute_dtype;

typedef enum flashcute_backend {
  FLASHCUTE_BACKEND_AUTO = 0, /* sm90 kernels on compute capability 9.0, sm80 kernels on 8.x */
  FLASHCUTE_BACKEND_SM80 = 1, /* the Ampere-class kernels (run on 8.x and on 9.0) */
  FLASHCUTE_BACKEND_SM90 = 2  /* the Hopper kernels (9.0 only) */
} flashcute_backend;

typedef enum flashcute_mask_align {
  FLASHCUTE_ALIGN_BOTTOM_RIGHT = 0, /* FlashAttention's convention: query i sees keys <= i + sk - sq */
  FLASHCUTE_ALIGN_TOP_LEFT = 1      /* torch SDPA's convention:      query i sees keys <= i */
} flashcute_mask_align;

/* Forward attention: out = softmax(scale * q k^T [+ masks, softcap]) v, and lse = logsumexp of
 * the (scaled, capped, masked) scores, natural log, fp32.
 *
 * Dense layout ("FA layout"): q (batch, seqlen_q, heads_q, head_dim), k (batch, seqlen_k, heads_k,
 * head_dim), v (batch, seqlen_k, heads_k, head_dim_v), out (batch, seqlen_q, heads_q, head_dim_v),
 * lse (batch, heads_q, seqlen_q) with strides lse_batch_stride, lse_head_stride and 1.
 * Varlen layout (cu_seqlens_q != NULL): q (total_q, heads_q, head_dim), k/v (total_k, heads_k, .),
 * batch strides are ignored, sequence b occupies rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of q
 * and cu_seqlens_k[b] .. of k/v; seqlen_q/seqlen_k give the maximum lengths; lse is
 * (heads_q, total_q) with strides lse_head_stride and 1.
 */
typedef struct flashcute_fwd_args {
  uint64_t struct_size; /* = sizeof(flashcute_fwd_args) as the caller compiled it */

  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse; /* may be NULL: then no LSE is written */

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t out_batch_stride, out_row_stride, out_head_stride;
  int64_t lse_batch_stride, lse_head_stride;

  int32_t batch;
  int32_t seqlen_q; /* dense: the length; varlen: max_seqlen_q */
  int32_t seqlen_k; /* dense: the length; varlen: max_seqlen_k */
  int32_t heads_q;
  int32_t heads_k; /* heads_q % heads_k == 0 (GQA / MQA) */
  int32_t head_dim;
  int32_t head_dim_v;
  int32_t dtype;     /* flashcute_dtype of q, k, v */
  int32_t out_dtype; /* flashcute_dtype of out: equal to dtype for fp16/bf16; fp16 or bf16 for e4m3 */

  float softmax_scale; /* usually 1/sqrt(head_dim) */
  int32_t causal;      /* nonzero: causal, aligned by mask_align */
  int32_t window_left; /* sliding window: keys in [i + off - window_left, i + off + window_right], */
  int32_t window_right;/*   off = seqlen_k - seqlen_q (bottom-right) or 0 (top-left); -1 = unbounded */
  int32_t mask_align;  /* flashcute_mask_align */
  float softcap;       /* > 0: scores become softcap * tanh(scores / softcap); 0 = off */

  /* varlen: all three NULL for the dense layout. int32, on the device. */
  const int32_t* cu_seqlens_q; /* batch + 1 entries, cu_seqlens_q[0] = 0, non-decreasing */
  const int32_t* cu_seqlens_k; /* batch + 1 entries */
  const int32_t* seqused_k;    /* optional, batch entries: keys actually used per sequence */
  int64_t total_q;             /* varlen: rows of q/out; dense: ignored */
  int64_t total_k;             /* varlen: rows of k/v;   dense: ignored */

  /* FP8 descale factors (fp32, on the device, may be NULL = 1.0), indexed
   * [b * descale_batch_stride + h_k * descale_head_stride] (FA3: shape (batch, heads_k)). */
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t descale_batch_stride, descale_head_stride;

  int32_t backend; /* flashcute_backend */
  int32_t device;  /* CUDA device ordinal the pointers live on; -1 = the current device */
  void* stream;    /* cudaStream_t; NULL = the legacy default stream */

  /* Appended in 0.1 (older callers send a smaller struct_size: 0).
   * v_colmajor nonzero: v is V^T, for e4m3 inputs in the dense layout on the sm90 backend, with
   * (head_dim, head_dim_v) (128, 128) or (256, 256) and bf16 out:
   * (batch, heads_k, head_dim_v, round_up(seqlen_k, 32)) with strides v_batch_stride,
   * v_head_stride, v_row_stride (from one d to the next) and 1; within each 32 keys, position
   * 16h + 4q + i holds key 16h + 8(i / 2) + 2q + i % 2 (h < 2, q < 4, i < 4: the register layout
   * of P in the FP8 kernel); padding keys are zero. The kernel then skips its V transpose. */
  int32_t v_colmajor;

  /* Appended in 0.1. Optional scratch: two int32 in device memory, zero when the launch starts
   * (e.g. zeroed for each call). With it the sm90 kernel hands causal and local tiles out to its
   * persistent CTAs dynamically (balanced to within a light tile, on every SM); the launch leaves
   * it zero again once it completes. Launches that may run concurrently need separate scratch.
   * NULL: a static tile order. Other calls ignore it. */
  int32_t* tile_counter;

  /* Appended in 0.1. Block-wise FP8 descales (descale_block_keys > 0; with v_colmajor only, the
   * kernels of the FP8 mode): q_descale holds one factor per query row,
   * [b * q_descale_batch_stride + h_q * q_descale_head_stride + row] (contiguous: shape (batch,
   * heads_q, seqlen_q)); k_descale and v_descale one per block of descale_block_keys keys,
   * [b * descale_batch_stride + h_k * descale_head_stride + key / descale_block_keys] (contiguous:
   * (batch, heads_k, ceil(seqlen_k / descale_block_keys))). descale_block_keys must be
   * flashcute_fp8_descale_block_keys(head_dim, head_dim_v, seqlen_k), the kernel's key block.
   * 0: the descales above, one per (batch, heads_k). */
  int32_t descale_block_keys;
  int64_t q_descale_batch_stride, q_descale_head_stride;
} flashcute_fwd_args;

/* The key block of block-wise FP8 descales (flashcute_fwd_args.descale_block_keys) for these
 * head dims and seqlen_k: the sm90 FP8 V^T kernel's key tile. 0 where block-wise descales are not
 * built (head dims other than (128, 128) and (256, 256)). */
FLASHCUTE_API int flashcute_fp8_descale_block_keys(int head_dim, int head_dim_v, int seqlen_k);

/* The library's own sizeof(flashcute_fwd_args); callers compare it with theirs. */
FLASHCUTE_API size_t flashcute_fwd_args_size(void);

/* Run the forward pass. Asynchronous on args->stream; no allocation, no host synchronisation. */
FLASHCUTE_API flashcute_status flashcute_fwd(const flashcute_fwd_args* args);

/* The message of the last failure on this thread ("" if none). Valid until the next call. */
FLASHCUTE_API const char* flashcute_last_error(void);

/* Introspection. */
FLASHCUTE_API const char* flashcute_version(void);    /* "0.1.0" */
FLASHCUTE_API int flashcute_abi_version(void);        /* FLASHCUTE_ABI_VERSION */
FLASHCUTE_API const char* flashcute_build_info(void); /* JSON: archs, head dims, dtypes, CUTLASS, CUDA */

/* Whether a forward with this (backend, dtype, head_dim, head_dim_v) can run on `device`
 * (-1 = current). FLASHCUTE_OK if yes; otherwise UNSUPPORTED (or INVALID_ARGUMENT) and
 * flashcute_last_error() says why and which CMake option would build the missing piece.
 * If resolved_backend is not NULL it receives the backend AUTO resolves to. */
FLASHCUTE_API flashcute_status flashcute_fwd_supported(int device, int backend, int dtype,
                                                       int head_dim, int head_dim_v,
                                                       int* resolved_backend);

/* ---- FP8 (e4m3) quantization -------------------------------------------------------------------
 * Makes the FP8 kernel's inputs from fp16/bf16 tensors: one scale per (batch, heads_k) slot,
 * with an optional random Hadamard rotation first (flashcute.fp8.quantize's arithmetic, bit for
 * bit without the rotation):
 *   y       = x                      (rotate == 0), or
 *             x @ (diag(s) H)        H the +-1 Hadamard matrix of order head_dim: Sylvester's
 *                                    for a power of two, kron(P12, Sylvester's of head_dim / 12)
 *                                    for 96 and 192 (P12 = Paley's order 12, flashcute.fp8's
 *                                    _paley12); s_i = -1 where bit i of rotation_signs is set
 *                                    (word i / 32, bit i % 32), else +1; fp32, unnormalised
 *   amax    = max |x| over the slot (rotate == 0): its seqlen rows and the heads / heads_k q heads
 *             of its group; with the rotation, the bound sqrt(fp32(head_dim * m)) >= max |y|,
 *             m = max over the slot's rows and heads of the sum of x^2 over the row, in fp32
 *             (summed pairwise; the torch path sums in fp64 and rounds: m, and so descale,
 *             may differ from its value by a few ulps)
 *   safe    = amax > 0 ? amax : 448
 *   x8      = e4m3(clamp(y * (fp32(1 / safe) * 448), -448, 448)), round to nearest even
 *   descale = safe * fp32(norm / 448), norm = 1 / sqrt(head_dim) with the rotation, else 1
 * so that x8 * descale ~= x (or ~= x @ R, R = diag(s) H / sqrt(head_dim) orthogonal).
 * Dense layout: x (batch, seqlen, heads, head_dim), x8 the same shape (float8_e4m3fn), descale
 * (batch, heads_k) fp32 with strides descale_batch_stride and descale_head_stride; packed varlen
 * rows with row_bounds (below).
 * Rows 16-byte aligned: pointers x and x8 16-byte aligned, strides multiples of 16 bytes. */
#define FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS 4

typedef struct flashcute_fp8_quantize_args {
  uint64_t struct_size; /* = sizeof(flashcute_fp8_quantize_args) as the caller compiled it */

  const void* x; /* fp16 or bf16 input */
  void* x8;      /* float8_e4m3fn output, x's shape */
  float* descale;/* fp32 output, (batch, heads_k) */

  int64_t x_batch_stride, x_row_stride, x_head_stride;
  int64_t x8_batch_stride, x8_row_stride, x8_head_stride;
  int64_t descale_batch_stride, descale_head_stride;

  int32_t batch;
  int32_t seqlen;
  int32_t heads;
  int32_t heads_k;  /* heads % heads_k == 0: a slot spans the heads / heads_k heads of a group */
  int32_t head_dim; /* 64, 96, 128, 192 or 256 */
  int32_t dtype;    /* flashcute_dtype of x: FP16 or BF16 (all tensors of one call alike) */
  int32_t rotate;   /* nonzero: rotate first (any head_dim; with block_rows > 0: 64, 128 or 256) */
  uint32_t rotation_signs[8]; /* the signs s of the rotation, one bit per coordinate (see above) */

  /* Appended in 0.1 (older callers send a smaller struct_size: 0).
   * x8_vt nonzero (heads == heads_k, head_dim 128 or 256, no rotation): x8 is written as V^T for the FP8
   * kernel (flashcute_fwd_args.v_colmajor): (batch, heads, head_dim, round_up(seqlen, 32)) with
   * strides x8_batch_stride, x8_head_stride, x8_row_stride (from one d to the next) and 1, the
   * keys of each 32 permuted as flashcute_fwd_args.v_colmajor says, padding keys zero. */
  int32_t x8_vt;

  /* Appended in 0.1 (older callers send a smaller struct_size: NULL).
   * row_bounds non-NULL (varlen; not with x8_vt): x and x8 hold packed rows (seqlen = their number of
   * rows; x_batch_stride and x8_batch_stride are ignored) and slot (b, h_k) covers rows
   * [row_bounds[b], row_bounds[b + 1]) for b < batch: device memory, batch + 1 nondecreasing int32
   * entries within [0, seqlen]. Rows outside every slot are neither read nor written. Bounds that
   * decrease somewhere are an error the library cannot see without a host sync: the tensor's
   * slots are then left unwritten (x8 and descale), never a hang or an access outside x. */
  const int32_t* row_bounds;

  /* Appended in 0.1 (older callers send a smaller struct_size: 0).
   * block_rows > 0 (dense, heads == heads_k; every tensor of the call alike, all > 0 or all 0):
   * block-wise scales, one per block of block_rows rows of each (batch, head) instead of one per
   * slot: descale is (batch, heads, ceil(seqlen / block_rows)) with strides descale_batch_stride,
   * descale_head_stride and 1, and amax above is taken over the block's rows (block_rows = 1:
   * per row, q's for the FP8 kernel's block-wise descales; block_rows =
   * flashcute_fp8_descale_block_keys(...): k's and v's, a multiple of 32 with x8_vt). Each block
   * is read from memory once, and such a call needs no workspace (its size is 0; NULL is fine).
   * block_rows * head_dim <= 32768. */
  int32_t block_rows;
} flashcute_fp8_quantize_args;

/* The library's own sizeof(flashcute_fp8_quantize_args). */
FLASHCUTE_API size_t flashcute_fp8_quantize_args_size(void);

/* Bytes of device workspace flashcute_fp8_quantize needs for these tensors (0 if count is out of
 * range or a pointer is NULL). The workspace need not be initialised: the call zeroes it on the
 * stream. */
FLASHCUTE_API size_t flashcute_fp8_quantize_workspace_size(const flashcute_fp8_quantize_args* const* tensors,
                                                           int count);

/* Quantize `count` (1..FLASHCUTE_FP8_QUANTIZE_MAX_TENSORS) tensors in one launch, e.g. q, k and v
 * of the FP8 mode. Asynchronous on `stream` (cudaStream_t; NULL = the legacy default stream); no
 * allocation, no host synchronisation, deterministic; capturable in a CUDA graph. `workspace`:
 * at least flashcute_fp8_quantize_workspace_size() bytes on `device`, 16-byte aligned, used by
 * one call at a time. device: the CUDA ordinal of the pointers, -1 = the current device.
 * Needs compute capability 9.0 and a build with the FP8 kernels (FLASHCUTE_FP8 with 90a). */
FLASHCUTE_API flashcute_status flashcute_fp8_quantize(const flashcute_fp8_quantize_args* const* tensors, int count,
                                                      void* workspace, size_t workspace_bytes, int device,
                                                      void* stream);

/* Whether flashcute_fp8_quantize can run for (dtype, head_dim, rotate) on `device` (-1 =
 * current): FLASHCUTE_OK, or UNSUPPORTED / INVALID_ARGUMENT with the reason in
 * flashcute_last_error() (not compiled in, not Hopper, an unsupported dtype or head dim). Every
 * head dim rotates with per-slot scales; block-wise scales rotate head dims 64, 128 and 256. */
FLASHCUTE_API flashcute_status flashcute_fp8_quantize_supported(int device, int dtype, int head_dim, int rotate);

#ifdef __cplusplus
}
#endif

#endif /* FLASHCUTE_FLASHCUTE_H */
