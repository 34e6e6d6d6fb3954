"""One forward case in the benchmark's convention (batch*seqlen = 16k, heads*hdim = 2048), run a few
times, for a profiler to look at (scripts/gpu_check.sh runs it under ncu when NCU_CASES is set):
    ncu --clock-control none --kernel-name regex:fwd_kernel --launch-skip 2 --launch-count 1 \\
        python3 scripts/profile_case.py --hdim 128 --seqlen 1024 --causal --backend sm90
"""
import argparse

import torch

import flashcute
import flashcute.flash_attn_interface  # noqa: F401  (the e4m3 entry point)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backend", default="sm90")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp8"])
    a = ap.parse_args()
    b, h = 16384 // a.seqlen, 2048 // a.hdim
    torch.manual_seed(0)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}[a.dtype]
    q, k, v = (torch.randn(b, a.seqlen, h, a.hdim, device="cuda").to(dt) for _ in range(3))
    # e4m3 inputs take FA3's interface (unit descales); 16-bit ones the plain API.
    if a.dtype == "fp8":
        fn = lambda: flashcute.flash_attn_interface.flash_attn_func(q, k, v, causal=a.causal)  # noqa: E731
    else:
        fn = lambda: flashcute.flash_attn_func(q, k, v, causal=a.causal, backend=a.backend)  # noqa: E731
    for _ in range(a.runs):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
