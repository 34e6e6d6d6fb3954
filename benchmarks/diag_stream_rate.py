"""What one streaming pass over the FP8 mode's inputs can cost on this GPU (a floor for any
one-visit quantizer): q, k, v of the mode's d=128 case as one bf16 tensor, read once and written
once as e4m3 by torch's elementwise cast, next to a bf16 copy. Prints ms and effective TB/s.
    python3 benchmarks/diag_stream_rate.py [--tokens 16384] [--model-dim 2048]"""
import argparse
import json

import torch
from triton.testing import do_bench


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--model-dim", type=int, default=2048)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    n = 3 * a.tokens * a.model_dim  # q, k and v
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y8 = torch.empty(n, device="cuda", dtype=torch.float8_e4m3fn)
    y16 = torch.empty_like(x)
    rows = {}
    for name, fn, nbytes in [
        ("cast bf16->e4m3", lambda: y8.copy_(x), 3 * n),
        ("copy bf16", lambda: y16.copy_(x), 4 * n),
        ("max bf16 (read only)", lambda: x.amax(), 2 * n),
    ]:
        ms = do_bench(fn, warmup=25, rep=100)
        rows[name] = {"ms": ms, "TBps": nbytes / ms / 1e9}
        print(f"{name:18s} {ms:.4f} ms  {nbytes / 1e6:.0f} MB  {nbytes / ms / 1e9:.2f} TB/s")
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
