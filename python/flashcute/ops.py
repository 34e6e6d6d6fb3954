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
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

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


def _normalized_strides(t: torch.Tensor) -> list:
    """t's strides, with the stride of every size-1 dimension replaced by the stride a dense
    layout would give it (never read, but the library checks every stride's alignment)."""
    sizes, strides = list(t.shape), list(t.stride())
    for i in range(t.dim() - 2, -1, -1):
        if sizes[i] == 1:
            strides[i] = strides[i + 1] * max(sizes[i + 1], 1)
    return strides


def _kernel_ready(t: torch.Tensor) -> Tuple[torch.Tensor, list]:
    """(tensor, strides) such that the last dim is contiguous, the data pointer is 16-byte
    aligned and every stride is a multiple of 16 bytes; copies only when needed."""
    vec = 16 // t.element_size()
    if t.stride(-1) != 1 and t.shape[-1] != 1:
        t = t.clone(memory_format=torch.contiguous_format)
    strides = _normalized_strides(t)
    strides[-1] = 1
    if t.data_ptr() % 16 != 0 or any(s % vec for s in strides[:-1]):
        # clone (not .contiguous(), which returns an already-contiguous but misaligned view as is)
        t = t.clone(memory_format=torch.contiguous_format)
        strides = _normalized_strides(t)
    return t, strides


def _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
            softcap, top_left, backend) -> None:
    """Fill out (and lse) with the forward attention. Inputs are already validated."""
    for n, t in (("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)):
        V.check_cuda(n, t)
    varlen = cu_seqlens_q is not None
    rows_q = q.shape[0] if varlen else q.shape[1]
    rows_k = k.shape[0] if varlen else k.shape[1]
    batch = cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0]
    if rows_q == 0 or batch == 0 or q.shape[-2] == 0:
        return
    if rows_k == 0:  # no keys anywhere: every row is fully masked
        out.zero_()
        lse.fill_(-math.inf)
        return

    q, qs = _kernel_ready(q)
    k, ks = _kernel_ready(k)
    v, vs = _kernel_ready(v)
    if out.stride(-1) != 1 or out.data_ptr() % 16 or any(s % (16 // out.element_size()) for s in _normalized_strides(out)[:-1]):
        raise ValueError(f"out: strides {tuple(out.stride())} / alignment unusable; pass a contiguous buffer")
    os_ = _normalized_strides(out)
    if lse.stride(-1) != 1 and lse.shape[-1] > 1:
        raise ValueError(f"lse: last dimension must be contiguous, got strides {tuple(lse.stride())}")

    a = _lib.FwdArgs()
    a.q, a.k, a.v, a.out, a.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()
    if varlen:
        a.q_row_stride, a.q_head_stride = qs[0], qs[1]
        a.k_row_stride, a.k_head_stride = ks[0], ks[1]
        a.v_row_stride, a.v_head_stride = vs[0], vs[1]
        a.out_row_stride, a.out_head_stride = os_[0], os_[1]
        a.lse_head_stride = lse.stride(0)
        cu_q = cu_seqlens_q.contiguous()
        cu_k = cu_seqlens_k.contiguous()
        a.cu_seqlens_q, a.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
        a.total_q, a.total_k = q.shape[0], k.shape[0]
        a.seqlen_q, a.seqlen_k = max_seqlen_q, max_seqlen_k
    else:
        a.q_batch_stride, a.q_row_stride, a.q_head_stride = qs[0], qs[1], qs[2]
        a.k_batch_stride, a.k_row_stride, a.k_head_stride = ks[0], ks[1], ks[2]
        a.v_batch_stride, a.v_row_stride, a.v_head_stride = vs[0], vs[1], vs[2]
        a.out_batch_stride, a.out_row_stride, a.out_head_stride = os_[0], os_[1], os_[2]
        a.lse_batch_stride, a.lse_head_stride = lse.stride(0), lse.stride(1)
        a.seqlen_q, a.seqlen_k = q.shape[1], k.shape[1]
    if seqused_k is not None:
        used = seqused_k.contiguous()
        a.seqused_k = used.data_ptr()
    a.batch = batch
    a.heads_q, a.heads_k = q.shape[-2], k.shape[-2]
    a.head_dim, a.head_dim_v = q.shape[-1], v.shape[-1]
    a.dtype = _DTYPE_CODES[q.dtype]
    a.out_dtype = _DTYPE_CODES[out.dtype]
    a.softmax_scale = softmax_scale
    a.causal = int(bool(causal))
    a.window_left, a.window_right = window_left, window_right
    a.mask_align = _lib.ALIGN_TOP_LEFT if top_left else _lib.ALIGN_BOTTOM_RIGHT
    a.softcap = softcap
    keep = []
    if any(t is not None for t in (q_descale, k_descale, v_descale)):
        for name, t in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
            if t is not None:
                t = t.contiguous()  # (batch, heads_k)
                keep.append(t)
                setattr(a, name, t.data_ptr())
        a.descale_batch_stride, a.descale_head_stride = k.shape[-2], 1
    a.backend = _lib.BACKENDS[backend]
    a.device = q.get_device()
    a.stream = torch.cuda.current_stream(q.device).cuda_stream
    _lib.fwd(a)
    del keep  # the copies stay alive until the launch is enqueued; the caching allocator is stream-ordered


def _alloc_outputs(q, v, varlen, out_dtype):
    od = _out_dtype_for(q.dtype, out_dtype)
    hq, dv = q.shape[-2], v.shape[-1]
    if varlen:
        total_q = q.shape[0]
        out = torch.empty((total_q, hq, dv), dtype=od, device=q.device)
        lse = torch.empty((hq, total_q), dtype=torch.float32, device=q.device)
    else:
        b, sq = q.shape[0], q.shape[1]
        out = torch.empty((b, sq, hq, dv), dtype=od, device=q.device)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
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
) -> Tuple[torch.Tensor, torch.Tensor]:
    out, lse = _alloc_outputs(q, v, cu_seqlens_q is not None, out_dtype)
    _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
            softcap, top_left, backend)
    return out, lse


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
              q_descale, k_descale, v_descale, softmax_scale, causal, window_left, window_right,
              softcap, top_left, backend, out_dtype):
    return _alloc_outputs(q, v, cu_seqlens_q is not None, out_dtype)


def _setup_context(ctx, inputs, output):
    pass


def _backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(
        "flashcute: the backward pass is not implemented yet (flashcute::bwd does not exist in this "
        "version; only the forward is); run the forward under torch.no_grad() / torch.inference_mode(), "
        "or detach q, k and v")


fwd.register_autograd(_backward, setup_context=_setup_context)


def call_fwd(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, max_seqlen_q=0,
             max_seqlen_k=0, descales=(None, None, None), softmax_scale, causal, window_left,
             window_right, softcap, top_left, backend, out_dtype=None):
    """Call the op, with a copy of a non-contiguous last dim done here (traceable), so the op
    itself only copies for alignment."""
    q, k, v = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    return torch.ops.flashcute.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, int(max_seqlen_q),
                                   int(max_seqlen_k), descales[0], descales[1], descales[2],
                                   float(softmax_scale), bool(causal), int(window_left), int(window_right),
                                   float(softcap), bool(top_left), backend, out_dtype)


def _fwd_into(q, k, v, out, lse, *, cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None,
              max_seqlen_q=0, max_seqlen_k=0, softmax_scale=None, causal=False, window_size=(-1, -1),
              softcap=0.0, top_left=False, backend="auto", descales=(None, None, None)):
    """Test hook: validate, then run the forward into caller-provided buffers (e.g. NaN-filled,
    so an element the kernel forgets to write fails the test). Not part of the public API."""
    varlen = cu_seqlens_q is not None
    wl, wr = V.check_fwd(q, k, v, varlen=varlen, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                         max_seqlen_q=max_seqlen_q if varlen else None,
                         max_seqlen_k=max_seqlen_k if varlen else None, seqused_k=seqused_k,
                         window_size=window_size, softcap=softcap, softmax_scale=softmax_scale,
                         causal=causal, allow_fp8=True, descales=descales, backend=backend)
    od = None if q.dtype in (torch.float16, torch.bfloat16) else out.dtype
    want_out, want_lse = _alloc_outputs(q.to("meta") if q.device.type != "meta" else q,
                                        v.to("meta") if v.device.type != "meta" else v, varlen, od)
    for n, t, w in (("out", out, want_out), ("lse", lse, want_lse)):
        if tuple(t.shape) != tuple(w.shape) or t.dtype != w.dtype:
            raise ValueError(f"{n}: got shape {tuple(t.shape)} {t.dtype}, expected {tuple(w.shape)} {w.dtype}")
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else softmax_scale
    _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
            descales[0], descales[1], descales[2], float(scale), causal, wl, wr, float(softcap),
            top_left, backend)
    return out, lse
