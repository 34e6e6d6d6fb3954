"""One small call of every ablation variant, checked against SDPA, each synchronised: a variant
that hangs or faults shows here within seconds (run it under `timeout` before bench_ablation.py).
    timeout 60 python3 benchmarks/smoke_ablation.py [--dir .carry/ablation]
"""
import argparse
import glob
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ablation  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".carry/ablation")
    a = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for path in sorted(glob.glob(os.path.join(a.dir, "sm90_hd*_*.so"))):
        d = int(os.path.basename(path).split("_")[1][2:])
        f = bench_ablation.load(path)
        for causal in (False, True):
            torch.manual_seed(0)
            b, s, h = 3, 1024, 16
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            out = torch.full_like(q, math.nan)
            lse = torch.full((b, h, s), math.nan, device="cuda", dtype=torch.float32)
            t0 = time.time()
            bench_ablation.launcher(f, q, k, v, out, lse, causal, num_sms)()
            torch.cuda.synchronize()
            ref = F.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, k, v)),
                                                 is_causal=causal).transpose(1, 2)
            err = (out.float() - ref).abs().max().item()
            print(f"{os.path.basename(path)} causal={causal} max|err|={err:.3g} "
                  f"({time.time() - t0:.2f} s)", flush=True)
            if not err < 2e-2:
                raise SystemExit("FAILED")


if __name__ == "__main__":
    main()
