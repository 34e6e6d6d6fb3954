"""Where the benchmark's time goes besides the kernel: host time per call, do_bench's median
(L2 flushed between calls: host time beyond the flush kernel's duration shows up in it), and
back-to-back kernel time from a CUDA graph of 20 calls (no host in the loop).
    python3 benchmarks/diag_launch_overhead.py --hdim 128 --seqlens 1024,4096 --json OUT.json
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from diag_host_split import host_us  # (benchmarks/ is the script's directory: on sys.path)


def flops(b, s, h, d, causal):
    f = 4 * b * s * s * h * d
    return f / 2 if causal else f


def graph_ms(fn, n=20, reps=10):
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / n)
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlens", default="1024,4096")
    ap.add_argument("--json")
    a = ap.parse_args()
    import flashcute
    rows = []
    for s in [int(x) for x in a.seqlens.split(",")]:
        for causal in (False, True):
            b, h, d = 16384 // s, 2048 // a.hdim, a.hdim
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            sc = 1 / math.sqrt(d)
            fns = {
                "flashcute": lambda: flashcute.flash_attn_func(q, k, v, softmax_scale=sc, causal=causal),
                "cudnn": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=sc),
            }
            for name, fn in fns.items():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    fl = flops(b, s, h, d, causal)
                    r = {"impl": name, "seqlen": s, "causal": causal, "host_us": host_us(fn)}
                    r["do_bench_ms"] = float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
                    r["graph_ms"] = graph_ms(fn)
                    r["do_bench_tflops"] = fl / r["do_bench_ms"] / 1e9
                    r["graph_tflops"] = fl / r["graph_ms"] / 1e9
                rows.append(r)
                print(f"{name:10s} s={s:6d} causal={int(causal)} host {r['host_us']:6.1f} us  "
                      f"do_bench {r['do_bench_tflops']:6.1f}  graph {r['graph_tflops']:6.1f} TFLOP/s", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
