"""Where flashcute's host time per call goes, layer by layer (bf16 d=128 causal; host time of
300 calls without a sync, in us):

  api          flashcute.flash_attn_func (a plain eager call takes the fast path: the op's
               implementation without torch's dispatcher, ops._dispatcher_adds_nothing)
  api_fp16 / varlen / sdpa / fa3_fp8 / fp8_mode
               the other public entry points (fa3_fp8: flash_attn_interface.flash_attn_func on
               float8_e4m3fn inputs with descales; fp8_mode: flash_attn_func(fp8=True), which adds
               the quantization launch). varlen includes its host read of cu_seqlens (a sync).
  api_grad     flash_attn_func with q.requires_grad: autograd needs the op, so the dispatcher path
  op           torch.ops.flashcute.fwd called directly (the dispatcher path without validation)
  check        _validation.check_fwd alone
  impl         ops._fwd_impl: allocate out/lse + _launch (what the fast path runs after validation)
  launch_py    ops._launch with preallocated out/lse (strides, packing, C call, kernel launch)
  pack         _lib.fwd_args alone (the struct.pack of FwdArgs)
  c_only       _lib.fwd on a prebuilt FwdArgs (the C library + the kernel launch)
  empty_x2     two torch.empty (what allocating out and lse costs)
  noop_kernel  a tiny torch kernel launch (out.zero_())
    python3 benchmarks/diag_host_split.py
"""
import time

import torch

import flashcute
from flashcute import _lib, ops
from flashcute import _validation as V
from flashcute import flash_attn_interface as fai


def host_us(fn, n=300):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main(device="cuda"):
    for s in (1024, 4096):
        b, h, d = 16384 // s, 16, 128
        q, k, v = (torch.randn(b, s, h, d, device=device, dtype=torch.bfloat16) for _ in range(3))
        qh, kh, vh = (t.half() for t in (q, k, v))
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        ds = torch.ones(b, h, device=device)
        ql, kl, vl = (t.reshape(b * s, h, d) for t in (q, k, v))
        cu = torch.arange(0, b * s + 1, s, device=device, dtype=torch.int32)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        qg = q.detach().clone().requires_grad_()
        out = torch.empty_like(q)
        lse = torch.empty(b, h, s, device=device)
        sc = d ** -0.5
        launch_args = (q, k, v, out, lse, None, None, None, 0, 0, None, None, None, sc, True, -1, 0, 0.0, False,
                       "auto")
        captured = {}
        real = _lib.fwd

        def cap(a):
            captured["a"] = a
            return real(a)

        _lib.fwd = cap
        ops._launch(*launch_args)
        _lib.fwd = real
        a = captured["a"]
        pack_args = (a.q, a.k, a.v, a.out, a.lse, (a.q_batch_stride, a.q_row_stride, a.q_head_stride),
                     (a.k_batch_stride, a.k_row_stride, a.k_head_stride),
                     (a.v_batch_stride, a.v_row_stride, a.v_head_stride),
                     (a.out_batch_stride, a.out_row_stride, a.out_head_stride), (a.lse_batch_stride, a.lse_head_stride),
                     a.batch, a.seqlen_q, a.seqlen_k, a.heads_q, a.heads_k, a.head_dim, a.head_dim_v, a.dtype,
                     a.out_dtype, a.softmax_scale, a.causal, a.window_left, a.window_right, a.mask_align, a.softcap,
                     0, 0, 0, 0, 0, 0, 0, 0, (0, 0), a.backend, a.device, a.stream)
        r = {
            "api": host_us(lambda: flashcute.flash_attn_func(q, k, v, softmax_scale=sc, causal=True)),
            "api_fp16": host_us(lambda: flashcute.flash_attn_func(qh, kh, vh, softmax_scale=sc, causal=True)),
            "varlen": host_us(lambda: flashcute.flash_attn_varlen_func(ql, kl, vl, cu, cu, s, s, softmax_scale=sc,
                                                                       causal=True)),
            "sdpa": host_us(lambda: flashcute.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=sc)),
            "fa3_fp8": host_us(lambda: fai.flash_attn_func(q8, k8, v8, softmax_scale=sc, causal=True, q_descale=ds,
                                                           k_descale=ds, v_descale=ds)),
            "fp8_mode": host_us(lambda: flashcute.flash_attn_func(q, k, v, softmax_scale=sc, causal=True, fp8=True)),
            "api_grad": host_us(lambda: flashcute.flash_attn_func(qg, k, v, softmax_scale=sc, causal=True)),
            "op": host_us(lambda: torch.ops.flashcute.fwd(q, k, v, None, None, None, 0, 0, None, None, None, sc, True,
                                                          -1, 0, 0.0, False, "auto", None)),
            "check": host_us(lambda: V.check_fwd(q, k, v, softmax_scale=sc, causal=True)),
            "impl": host_us(lambda: ops._fwd_impl(q, k, v, None, None, None, 0, 0, None, None, None, sc, True, -1, 0,
                                                  0.0, False, "auto", None)),
            "launch_py": host_us(lambda: ops._launch(*launch_args)),
            "pack": host_us(lambda: _lib.fwd_args(*pack_args)),
            "c_only": host_us(lambda: _lib.fwd(a)),
            "empty_x2": host_us(lambda: (torch.empty_like(q), torch.empty(b, h, s, device=device))),
            "noop_kernel": host_us(lambda: out.zero_()),
        }
        print(s, {k_: round(v_, 1) for k_, v_ in r.items()}, flush=True)


if __name__ == "__main__":
    main()
