"""(Needs runs/2026-12-04-run67-v-colmajor.patch applied: flashcute.ops.v_colmajor and vt_ok.)
Where the FP8 mode's V^T handoff spends its time (CUDA only): the V^T copy alone
(flashcute.ops.v_colmajor), the e4m3 kernel transposing V itself, and the kernel on a V^T made
beforehand (the copy excluded), per case; do_bench medians (L2 flushed), TFLOP/s of the kernels.

    python benchmarks/diag_vt.py [--hdims 128,256] [--seqlens 4096,16384] [--json out.json]
"""
import argparse
import json
import math

import torch
from triton.testing import do_bench

from flashcute import flash_attn_interface as fai
from flashcute import fp8 as F
from flashcute import ops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdims", default="128,256")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for d in (int(x) for x in a.hdims.split(",")):
        for s in (int(x) for x in a.seqlens.split(",")):
            for causal in (False, True):
                b, h = 16384 // s, 2048 // d
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                torch.manual_seed(0)
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
                (q8, qd), (k8, kd), (v8, vd) = (F.quantize(x, h) for x in (q, k, v))
                out = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
                real = ops.v_colmajor
                vt = real(v8)
                t_copy = do_bench(lambda: real(v8), warmup=25, rep=200)
                t_trans = do_bench(lambda: fai.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd,
                                                              causal=causal), warmup=25, rep=200)
                ops.v_colmajor = lambda _v: vt  # the kernel alone on the V^T made above
                try:
                    run = lambda: ops._fwd_into(q8, k8, v8, out, lse, causal=causal, descales=(qd, kd, vd), vt_ok=True)
                    t_vt = do_bench(run, warmup=25, rep=200)
                finally:
                    ops.v_colmajor = real
                row = dict(hdim=d, seqlen=s, causal=causal, copy_ms=round(t_copy, 4),
                           copy_gbs=round(2 * v8.numel() / t_copy / 1e6), kernel_transposing=round(flops / t_trans / 1e9, 1),
                           kernel_vt=round(flops / t_vt / 1e9, 1), kernel_vt_gain=round(t_trans / t_vt - 1, 3))
                print(json.dumps(row), flush=True)
                rows.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
