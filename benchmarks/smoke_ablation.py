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


def reference(q, k, v, causal):
    """float32 attention, causal aligned bottom-right (flashcute's convention); rows with no
    key give 0."""
    sq, sk = q.shape[1], k.shape[1]
    qt, kt, vt = (x.transpose(1, 2).float() for x in (q, k, v))
    s = qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), -math.inf)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return (p @ vt).transpose(1, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".carry/ablation")
    a = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    # (batch, seqlen_q, seqlen_k, heads): several tiles per CTA; then fewer keys than queries, so
    # that causal tiles of the first query rows have no work (the roles must skip the same ones),
    # and tile counts that do not divide the grid.
    shapes = [(3, 1024, 1024, 16), (2, 1000, 300, 20)]
    for path in sorted(glob.glob(os.path.join(a.dir, "sm90*_hd*_*.so"))):
        fam, hd = os.path.basename(path).split("_")[:2]
        d = int(hd[2:])
        fp8 = fam.endswith("f8")
        f = bench_ablation.load(path)
        for (b, sq, sk, h) in shapes:
            for causal in (False, True):
                torch.manual_seed(0)
                q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
                k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
                ins = (q, k, v)
                if fp8:
                    ins = tuple(x.to(torch.float8_e4m3fn) for x in ins)
                    q, k, v = (x.to(torch.bfloat16) for x in ins)
                out = torch.full_like(q, math.nan)
                lse = torch.full((b, h, sq), math.nan, device="cuda", dtype=torch.float32)
                t0 = time.time()
                bench_ablation.launcher(f, *ins, out, lse, causal, num_sms)()
                torch.cuda.synchronize()
                err = (out.float() - reference(q, k, v, causal)).abs().max().item()
                print(f"{os.path.basename(path)} {b}x{sq}x{sk}x{h} causal={causal} max|err|={err:.3g} "
                      f"({time.time() - t0:.2f} s)", flush=True)
                if not err < (0.25 if fp8 else 2e-2):  # NaN fails
                    raise SystemExit("FAILED")


if __name__ == "__main__":
    main()
