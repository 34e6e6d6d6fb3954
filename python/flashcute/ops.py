"""PyTorch integration through torch.library (DESIGN principle 3).

`flashcute::fwd` is one custom op for the dense and the varlen layout (varlen when cu_seqlens_q /
cu_seqlens_k are given). It returns (out, lse), both allocated by torch; the kernel runs on
torch.cuda.current_stream() with no host synchronisation and no allocation outside torch's
allocator, so the op works under torch.compile(fullgraph=True) and inside CUDA-graph capture.

Shapes (FA layout):
  dense : q (b, sq, hq, d), k (b, sk, hk, d), v (b, sk, hk, dv) -> out (b, sq, hq, dv), lse (b, hq, sq)
  varlen: q (tq, hq, d),    k (tk, hk, d),    v (tk, hk, dv)    -> out (tq, hq, dv),    lse (hq, tq)
lse is float32 (natural log); out has the input dtype (bf16 for float8_e4m3fn inputs unless
out_dtype says fp16).

Copy policy: a last dimension that is not contiguous is copied (as FlashAttention does), and so
is an operand whose data pointer is not 16-byte aligned or whose strides are not multiples of 16
bytes (the kernels move 128 bits at a time). Such a copy goes through torch's allocator (so it is
legal in CUDA graphs), costs memory bandwidth, and never changes results. Views of a packed qkv
tensor and any other strided views with a contiguous last dim and 16-byte strides are used in
place, without copies.

The backward op (`flashcute::bwd`) does not exist yet: register_autograd installs a backward
that raises NotImplementedError.

Host time: the public functions reach the op through call_fwd, which in a plain eager call (no
autograd, mode, subclass, profiler or tracing: _dispatcher_adds_nothing) runs the op's
implementation directly, skipping torch's Python dispatch machinery; otherwise, and always under
torch.compile, it calls the op. The FwdArgs struct is packed in one struct.pack (_lib.fwd_args).
"""
from __future__ import annotations

import functools
import math
from typing import Optional, Sequence, Tuple

import torch

from . import _lib
from . import _validation as V

_DTYPE_CODES = {torch.float16: _lib.DTYPE_FP16, torch.bfloat16: _lib.DTYPE_BF16}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPE_CODES[torch.float8_e4m3fn] = _lib.DTYPE_E4M3


def _out_dtype_for(in_dtype: torch.dtype, out_dtype: Optional[torch.dtype]) -> torch.dtype:
    if in_dtype in (torch.float16, torch.bfloat16):
        return in_dtype
    return torch.bfloat16 if out_dtype is None else out_dtype


def _normalized_strides(shape, strides) -> list:
    """strides, with the stride of every size-1 dimension replaced by the stride a dense layout
    would give it (never read, but the library checks every stride's alignment)."""
    strides = list(strides)
    if 1 not in shape:  # the common case: nothing to replace
        return strides
    for i in range(len(shape) - 2, -1, -1):
        if shape[i] == 1:
            strides[i] = strides[i + 1] * max(shape[i + 1], 1)
    return strides


def _aligned(t: torch.Tensor, strides) -> bool:
    """Whether t's data pointer is 16-byte aligned and every stride but the last is a multiple
    of 16 bytes (the kernels move 128 bits at a time). One gcd instead of a loop: the strides
    are all multiples of vec exactly when their gcd is (gcd() of nothing is 0)."""
    vec = 16 // t.element_size()
    return t.data_ptr() % 16 == 0 and math.gcd(*strides[:-1]) % vec == 0


def _kernel_ready(t: torch.Tensor, shape: Sequence[int]) -> Tuple[torch.Tensor, Sequence[int]]:
    """(tensor, strides) such that the last dim is contiguous, the data pointer is 16-byte
    aligned and every stride is a multiple of 16 bytes; copies only when needed. shape: t.shape,
    which the caller has already read (each .shape / .stride() builds a new object, and this runs
    three times per launch)."""
    strides = t.stride()
    if strides[-1] == 1 and 1 not in shape and _aligned(t, strides):
        return t, strides  # the common case: usable in place, no size-1 stride to normalize
    if strides[-1] != 1 and shape[-1] != 1:
        t = t.clone(memory_format=torch.contiguous_format)
        strides = t.stride()
    strides = _normalized_strides(shape, strides)
    strides[-1] = 1
    if not _aligned(t, strides):
        # clone (not .contiguous(), which returns an already-contiguous but misaligned view as is)
        t = t.clone(memory_format=torch.contiguous_format)
        strides = _normalized_strides(shape, t.stride())
    return t, strides


def _output_strides(out: torch.Tensor) -> list:
    """out's (normalized) strides; ValueError unless the kernel can write it in place."""
    strides = _normalized_strides(out.shape, out.stride())
    if strides[-1] != 1 or not _aligned(out, strides):
        raise ValueError(f"out: strides {tuple(out.stride())} / alignment unusable; pass a contiguous buffer")
    return strides


@functools.lru_cache(maxsize=None)
def _sm90_sms_of(device: int) -> int:
    """The SM count of CUDA device `device` if its compute capability is 9.x, else 0."""
    if device >= 0 and torch.cuda.get_device_capability(device)[0] == 9:
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 0


def _sm90_sms(t: torch.Tensor) -> int:
    return _sm90_sms_of(t.get_device())


def _more_tiles_than_sms(q: torch.Tensor, batch: int, seqlen_q: int) -> bool:
    """Whether the sm90 kernel may have tiles to balance: more query tiles than SMs (its tiles
    have 128 or 192 rows; counting 128 errs towards passing a counter). With at most one tile per
    CTA the static order is already the dynamic one, and the counter's zeroing would be a launch
    for nothing."""
    sms = _sm90_sms(q)
    return sms > 0 and batch * q.shape[-2] * ((seqlen_q + 127) // 128) > sms


_TILE_COUNTERS = {}  # (device, stream handle) -> int32[2] that every launch leaves zero


def _tile_counter(q: torch.Tensor, stream: int) -> torch.Tensor:
    """Scratch for the sm90 kernel's dynamic hand-out of causal/local tiles
    (flashcute_fwd_args.tile_counter): two int32, zero when a launch starts. The kernel sets them
    back to zero as it finishes, so one buffer per (device, stream) serves every eager call on
    that stream (launches on one stream never overlap); zeroing fresh scratch per call costs a
    fill launch, 1.5-2.3 us a call (run 80). While a CUDA graph is being captured the scratch is
    fresh zeros, zeroed inside the graph: a graph may be replayed on any stream."""
    if torch.cuda.is_current_stream_capturing():
        return q.new_zeros(2, dtype=torch.int32)
    key = (q.get_device(), stream)
    c = _TILE_COUNTERS.get(key)
    if c is None:
        c = _TILE_COUNTERS[key] = q.new_zeros(2, dtype=torch.int32)
    return c


_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_handle(t: torch.Tensor) -> int:
    """The cudaStream_t of torch's current stream on t's device, as an int. The raw-handle query
    (what inductor's generated code uses) skips building a torch.cuda.Stream object."""
    if _current_raw_stream is not None:
        return _current_raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


# ---- V^T inputs of the sm90 FP8 kernel (FwdParams::v_colmajor) ----------------------------------
# Where the FP8 mode makes v itself, its quantizer writes V^T so that the kernel skips its
# in-smem V transpose (6-9 % of e4m3 d=256, 2-4 % of d=128: runs 67-68 in benchmarks/RESULTS.md).
# The kernel's P register layout wants each 32 keys permuted: key 16h + 8j + 2q + r (h, j, r < 2;
# q < 4) goes to position 16h + 4q + 2j + r, i.e. the index bits (h, j, q, r) reordered to
# (h, q, j, r). v_colmajor below is that layout as torch ops (the torch quantize path and the
# tests); the CUDA quantizer writes it directly (x8_vt).
VT_HEAD_DIMS = (128, 256)  # the (d, d) shapes built with a V^T kernel (sm90/fwd_launch.cuh)


def vt_key_block(d: int, seqlen_k: int) -> int:
    """The V^T kernel's key tile, i.e. the key block of block-wise FP8 descales: common/params.h's
    fp8_vt_key_block (flashcute_fp8_descale_block_keys; a test holds them equal), in Python so
    that traced code needs no library call."""
    if d == 128:
        return 192 if seqlen_k >= 4096 else 128
    return 128 if d == 256 else 0


def vt_shape(v) -> Tuple[int, int, int, int]:
    """V^T's shape for v (b, s, hk, dv): (b, hk, dv, round_up(s, 32))."""
    b, s, hk, dv = v.shape
    return (b, hk, dv, (s + 31) // 32 * 32)


def v_colmajor(v: torch.Tensor) -> torch.Tensor:
    """(b, s, hk, dv) -> (b, hk, dv, round_up(s, 32)) contiguous: V^T with each 32 keys in the
    FP8 kernel's P order (above), padding keys zero. Any dtype (float8 is moved as bytes)."""
    b, hk, dv, sp = vt_shape(v)
    s = v.shape[1]
    as_bytes = v.dtype == getattr(torch, "float8_e4m3fn", None)  # pad has no float8 kernel
    x = v.view(torch.uint8) if as_bytes else v
    if sp != s:
        x = torch.nn.functional.pad(x, (0, 0, 0, 0, 0, sp - s))  # zero keys s .. sp-1
    x = x.reshape(b, sp // 32, 2, 2, 4, 2, hk, dv)  # (b, group, h, j, q, r, hk, dv)
    vt = x.permute(0, 6, 7, 1, 2, 4, 3, 5).reshape(b, hk, dv, sp)  # (b, hk, dv, group, h, q, j, r)
    return vt.view(v.dtype) if as_bytes else vt


def _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
            softcap, top_left, backend, v_is_vt=False) -> None:
    """Fill out (and lse) with the forward attention. Inputs are already validated.
    v_is_vt: v is V^T (v_colmajor's layout; e4m3, dense; the FP8 mode makes it)."""
    if not (q.is_cuda and k.is_cuda and v.is_cuda and out.is_cuda and lse.is_cuda):
        for n, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
            V.check_cuda(n, t)
    # shapes read once (each .shape builds a torch.Size); copies for alignment keep them
    qsh, ksh = q.shape, k.shape
    varlen = cu_seqlens_q is not None
    rows_q = qsh[0] if varlen else qsh[1]
    rows_k = ksh[0] if varlen else ksh[1]
    batch = cu_seqlens_q.shape[0] - 1 if varlen else qsh[0]
    if rows_q == 0 or batch == 0 or qsh[-2] == 0:
        return
    if rows_k == 0:  # no keys anywhere: every row is fully masked
        out.zero_()
        lse.fill_(-math.inf)
        return

    vsh = v.shape
    q, qs = _kernel_ready(q, qsh)
    k, ks = _kernel_ready(k, ksh)
    v, vs = _kernel_ready(v, vsh)
    os_ = _output_strides(out)
    ls = lse.stride()
    if ls[-1] != 1 and lse.shape[-1] > 1:
        raise ValueError(f"lse: last dimension must be contiguous, got strides {tuple(ls)}")

    # keep (and the locals q, k, v, which may be copies): tensors whose pointers go to the library
    # stay alive until the launch is enqueued; the caching allocator is stream-ordered, so freeing
    # them afterwards is safe
    keep = []
    cu_q = cu_k = used = 0
    if varlen:  # (total, heads, dim): no batch stride; lse (heads, total)
        qs, ks, vs, os_ = (0, qs[0], qs[1]), (0, ks[0], ks[1]), (0, vs[0], vs[1]), (0, os_[0], os_[1])
        lse_strides = (0, ls[0])
        keep += [cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous()]
        cu_q, cu_k = keep[-2].data_ptr(), keep[-1].data_ptr()
        seqlen_q, seqlen_k, total_q, total_k = max_seqlen_q, max_seqlen_k, qsh[0], ksh[0]
    else:  # (batch, seqlen, heads, dim); lse (batch, heads, seqlen)
        qs, ks, vs, os_ = qs[:3], ks[:3], vs[:3], os_[:3]
        lse_strides = (ls[0], ls[1])
        seqlen_q, seqlen_k, total_q, total_k = qsh[1], ksh[1], 0, 0
    if seqused_k is not None:
        keep.append(seqused_k.contiguous())
        used = keep[-1].data_ptr()
    if v_is_vt:  # (b, hk, dv, keys): (batch, row = d, head) strides, dv from its third dim
        vs, vsh = (v.stride(0), v.stride(2), v.stride(1)), (vsh[0], vsh[3], vsh[1], vsh[2])
    stream = _stream_handle(q)
    counter = 0
    if (causal or window_right >= 0) and backend != "sm80" and _more_tiles_than_sms(q, batch, seqlen_q):
        keep.append(_tile_counter(q, stream))
        counter = keep[-1].data_ptr()
    descale_ptrs, descale_strides, q_descale_strides, block_keys = [0, 0, 0], (0, 0), (0, 0), 0
    if q_descale is not None or k_descale is not None or v_descale is not None:
        for i, t in enumerate((q_descale, k_descale, v_descale)):
            if t is not None:
                keep.append(t.contiguous())  # (batch, heads_k); block-wise: (batch, heads, rows / blocks)
                descale_ptrs[i] = keep[-1].data_ptr()
        descale_strides = (ksh[-2], 1)
        if v_is_vt and any(t is not None and t.dim() == 3 for t in (q_descale, k_descale, v_descale)):
            # the FP8 mode's block-wise descales (fp8.quantize_qkv(block_keys=...)): q (b, hq, sq),
            # k and v (b, hk, blocks)
            nblk = next((t.shape[-1] for t in (k_descale, v_descale) if t is not None), 0)
            descale_strides = (ksh[-2] * nblk, nblk)
            q_descale_strides = (qsh[-2] * seqlen_q, seqlen_q)
            block_keys = vt_key_block(qsh[-1], seqlen_k) if qsh[-1] == vsh[-1] else 0
    args = _lib.fwd_args(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
        qs, ks, vs, os_, lse_strides,
        batch, seqlen_q, seqlen_k, qsh[-2], ksh[-2], qsh[-1], vsh[-1],
        _DTYPE_CODES[q.dtype], _DTYPE_CODES[out.dtype],
        softmax_scale, int(bool(causal)), window_left, window_right,
        _lib.ALIGN_TOP_LEFT if top_left else _lib.ALIGN_BOTTOM_RIGHT, softcap,
        cu_q, cu_k, used, total_q, total_k,
        descale_ptrs[0], descale_ptrs[1], descale_ptrs[2], descale_strides,
        _lib.BACKENDS[backend], q.get_device(), stream, int(bool(v_is_vt)), counter, block_keys,
        q_descale_strides)
    _lib.fwd(args)
    del keep


def _alloc_outputs(q, v, varlen, out_dtype, v_is_vt=False):
    od = _out_dtype_for(q.dtype, out_dtype)
    hq, dv = q.shape[-2], v.shape[2] if v_is_vt else v.shape[-1]
    # new_empty: q's device without building a torch.device object (cheaper than device=q.device)
    if varlen:
        total_q = q.shape[0]
        out = q.new_empty((total_q, hq, dv), dtype=od)
        lse = q.new_empty((hq, total_q), dtype=torch.float32)
    else:
        b, sq = q.shape[0], q.shape[1]
        out = q.new_empty((b, sq, hq, dv), dtype=od)
        lse = q.new_empty((b, hq, sq), dtype=torch.float32)
    return out, lse


def _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
              q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
              softcap, top_left, backend, out_dtype, v_is_vt=False):
    """The op's implementation (allocate out and lse, launch); call_fwd calls it directly when
    the dispatcher would add nothing (see _dispatcher_adds_nothing)."""
    out, lse = _alloc_outputs(q, v, cu_seqlens_q is not None, out_dtype, v_is_vt)
    _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
            softcap, top_left, backend, v_is_vt)
    return out, lse


@torch.library.custom_op("flashcute::fwd", mutates_args=())
def fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: Optional[torch.Tensor],
    cu_seqlens_k: Optional[torch.Tensor],
    seqused_k: Optional[torch.Tensor],
    max_seqlen_q: int,
    max_seqlen_k: int,
    q_descale: Optional[torch.Tensor],
    k_descale: Optional[torch.Tensor],
    v_descale: Optional[torch.Tensor],
    softmax_scale: float,
    causal: bool,
    window_left: int,
    window_right: int,
    softcap: float,
    top_left: bool,
    backend: str,
    out_dtype: Optional[torch.dtype],
    v_is_vt: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    return _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                     q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
                     softcap, top_left, backend, out_dtype, v_is_vt)


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
              q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
              softcap, top_left, backend, out_dtype, v_is_vt=False):
    return _alloc_outputs(q, v, cu_seqlens_q is not None, out_dtype, v_is_vt)


def _setup_context(ctx, inputs, output):
    pass


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(
        "flashcute: the backward pass is not implemented yet (flashcute::bwd does not exist in this "
        "version; only the forward is); run the forward under torch.no_grad() / torch.inference_mode(), "
        "or detach q, k and v")


fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- the eager fast path: the op's implementation without the dispatcher ----------------------
# Calling torch.ops.flashcute.fwd costs ~35 us of host time (the autograd wrapper, redispatch,
# dynamo-disable decorators) before the implementation runs. When nothing along that way can act
# on the call -- no tracing, no autograd graph to record, no tensor subclass or mode to intercept
# the op, no profiler to name it -- calling the implementation directly gives the same outputs,
# errors and stream order. The queries are torch internals, looked up once; an older torch that
# lacks one always takes the dispatcher.
_len_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", None)  # FakeTensorMode, FlopCounterMode, ...
_function_mode_on = getattr(torch._C, "_is_torch_function_mode_enabled", None)  # TorchFunctionModes
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)  # vmap / grad wrap plain tensors
_jit_tracing_state = getattr(torch._C, "_get_tracing_state", None)  # torch.jit.trace
_profiler_on = getattr(torch.autograd, "_profiler_enabled", None)  # the profiler records the op by name
_CAN_BYPASS = None not in (_len_dispatch_modes, _function_mode_on, _functorch_active, _jit_tracing_state,
                           _profiler_on)
_Tensor = torch.Tensor


def _dispatcher_adds_nothing(tensors) -> bool:
    """Whether calling a flashcute op's implementation directly is indistinguishable from calling
    the op (torch.ops.flashcute.*): not under torch.compile / dynamo; no autograd needed (grad mode
    off, or no input requires grad: otherwise the op's registered backward must reach the graph);
    every tensor an exact torch.Tensor (no FakeTensor, DTensor or other subclass) and not on the
    meta device (where the op runs its fake kernel); and no dispatch mode, function mode, functorch
    transform, jit trace or profiler active. `tensors`: the op's tensor arguments, None allowed.
    (torch.compile first: dynamo folds it to True and traces nothing after it.)"""
    if not _CAN_BYPASS or torch.compiler.is_compiling():
        return False
    if _len_dispatch_modes() or _function_mode_on() or _functorch_active() or _profiler_on() \
            or _jit_tracing_state() is not None:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not _Tensor or t.is_meta or (grad and t.requires_grad)):
            return False
    return True


def call_fwd(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0,
             max_seqlen_k=0, descales=(None, None, None), softmax_scale, causal, window_left,
             window_right, softcap, top_left, backend, out_dtype=None, v_is_vt=False):
    """Call the op (or, in plain eager calls, its implementation: _dispatcher_adds_nothing), with
    a copy of a non-contiguous last dim done here (traceable), so the op itself only copies for
    alignment. v_is_vt: v is the FP8 mode's V^T (v_colmajor's layout)."""
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):  # (the cheap common case first)
        q, k, v = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q), int(max_seqlen_k),
            descales[0], descales[1], descales[2], float(softmax_scale), bool(causal), int(window_left),
            int(window_right), float(softcap), bool(top_left), backend, out_dtype, bool(v_is_vt))
    if _dispatcher_adds_nothing((q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, *args[8:11])):
        return _fwd_impl(*args)
    return torch.ops.flashcute.fwd(*args)


def _fwd_into(q, k, v, out, lse, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
              max_seqlen_q=0, max_seqlen_k=0, softmax_scale=None, causal=False, window_size=(-1, -1),
              softcap=0.0, top_left=False, backend="auto", descales=(None, None, None), vt=None):
    """Test hook: validate, then run the forward into caller-provided buffers (e.g. NaN-filled,
    so an element the kernel forgets to write fails the test). Not part of the public API.
    vt: V^T of v (v_colmajor's layout) to run the kernel on instead of v (v is still validated)."""
    varlen = cu_seqlens_q is not None
    blocked = vt is not None and not varlen and any(t is not None and t.dim() == 3 for t in descales)
    wl, wr = V.check_fwd(q, k, v, varlen=varlen, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q if varlen else None,
                         max_seqlen_k=max_seqlen_k if varlen else None, seqused_k=seqused_k,
                         window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                         causal=causal, allow_fp8=True, descales=descales, backend=backend,
                         descale_block_keys=vt_key_block(q.shape[-1], k.shape[1]) if blocked else 0)
    od = None if q.dtype in (torch.float16, torch.bfloat16) else out.dtype
    want_out, want_lse = _alloc_outputs(q.to("meta") if q.device.type != "meta" else q,
                                        v.to("meta") if v.device.type != "meta" else v, varlen, od)
    for n, t, w in (("out", out, want_out), ("lse", lse, want_lse)):
        if tuple(t.shape) != tuple(w.shape) or t.dtype != w.dtype:
            raise ValueError(f"{n}: got shape {tuple(t.shape)} {t.dtype}, expected {tuple(w.shape)} {w.dtype}")
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    _launch(q, k, v if vt is None else vt, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q,
            max_seqlen_k, descales[0], descales[1], descales[2], float(scale), causal, wl, wr, float(softcap),
            top_left, backend, vt is not None)
    return out, lse
