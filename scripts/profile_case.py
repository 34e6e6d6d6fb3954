"""One forward case in the benchmark's convention (batch*seqlen = 16k, heads*hdim = 2048), run a few
times, for a profiler to look at (scripts/gpu_check.sh runs it under ncu when NCU_CASES is set):
    ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_case.py --hdim 128 --seqlen 1024 --causal --backend sm90
--ablation LIB.so runs a kernel variant of scripts/build_ablation.sh instead of the installed package
(no wheel needed: benchmarks/bench_ablation.py's loader).
--dtype fp8vt runs the FP8 mode's own kernel (V^T input, block-wise descales) on q, k, v quantized
once by the mode's quantizer beforehand (run 112 profiles it next to --dtype fp8, the transposing kernel).
--quantize runs the FP8 mode's quantization of the same bf16 q, k, v instead (flashcute.fp8.quantize_qkv:
q and k rotated, v written as V^T where the mode does), one launch per run:
    ncu --kernel-name regex:quantize --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_case.py --quantize --hdim 128 --seqlen 4096
"""
import argparse
import os
import sys

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backend", default="sm90")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp8", "fp8vt"],
                    help="fp8vt: the FP8 mode's V^T kernel on its quantizer's block-wise outputs")
    ap.add_argument("--ablation", help="a variant library of scripts/build_ablation.sh")
    ap.add_argument("--quantize", action="store_true", help="the FP8 mode's quantization, not attention")
    ap.add_argument("--blocks", action="store_true", help="with --quantize: block-wise scales (the mode's default)")
    a = ap.parse_args()
    b, h = 16384 // a.seqlen, 2048 // a.hdim
    torch.manual_seed(0)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn, "fp8vt": torch.bfloat16}[a.dtype]
    if a.quantize:
        dt = torch.bfloat16 if a.dtype == "fp8" else dt
    q, k, v = (torch.randn(b, a.seqlen, h, a.hdim, device="cuda").to(dt) for _ in range(3))
    # e4m3 inputs take FA3's interface (unit descales); 16-bit ones the plain API.
    if a.quantize:
        from flashcute import fp8 as F
        from flashcute.ops import vt_key_block
        blocks = vt_key_block(a.hdim, a.seqlen) if a.blocks else 0
        fn = lambda: F.quantize_qkv(q, k, v, rotate=True, impl="cuda", v_colmajor=True, block_keys=blocks)  # noqa: E731
    elif a.ablation:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
        import bench_ablation
        out = torch.empty(b, a.seqlen, h, a.hdim, device="cuda", dtype=torch.bfloat16)
        lse = torch.empty(b, h, a.seqlen, device="cuda", dtype=torch.float32)
        fn = bench_ablation.launcher(bench_ablation.load(a.ablation), q, k, v, out, lse, a.causal,
                                     torch.cuda.get_device_properties(0).multi_processor_count)
    elif a.dtype == "fp8vt":  # quantized once, before the profiled launches
        from flashcute import fp8 as F
        from flashcute import ops
        block = ops.vt_key_block(a.hdim, a.seqlen)
        q8, k8, vt8, ds = F.quantize_qkv(q, k, v, rotate=True, v_colmajor=True, block_keys=block)
        fn = lambda: ops.call_fwd(q8, k8, vt8, descales=ds, softmax_scale=a.hdim ** -0.5, causal=a.causal,  # noqa: E731
                                  window_left=-1, window_right=0 if a.causal else -1, softcap=0.0, top_left=False,
                                  backend="auto", out_dtype=torch.bfloat16, v_is_vt=True)
    elif a.dtype == "fp8":
        import flashcute.flash_attn_interface
        fn = lambda: flashcute.flash_attn_interface.flash_attn_func(q, k, v, causal=a.causal)  # noqa: E731
    else:
        import flashcute
        fn = lambda: flashcute.flash_attn_func(q, k, v, causal=a.causal, backend=a.backend)  # noqa: E731
    for _ in range(a.runs):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
