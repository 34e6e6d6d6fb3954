"""SM clock and board power while each ablation variant runs back to back (bench_ablation.py's
libraries): does a variant win by its schedule, or because it draws less power (e.g. a
speed-of-light build whose GEMM operands are stale or zero) and so runs at a higher clock under
the board's power limit? ~2 s of back-to-back calls per variant and case, nvidia-smi polled every
100 ms; prints TFLOP/s, the median SM clock (MHz), power (W) and TFLOP/s per GHz.
    python3 benchmarks/diag_clocks_ablation.py --dir .carry/ablation [--seqlens 4096,16384] [--causal no]
"""
import argparse
import glob
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ablation import case_grid, is_vt, launcher, load, variant_inputs, variant_parts  # noqa: E402
from diag_clocks import run_case  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=".carry/ablation")
    ap.add_argument("--seqlens", default="4096,16384")
    ap.add_argument("--causal", choices=["both", "no", "yes"], default="no")
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for path in sorted(glob.glob(os.path.join(a.dir, "sm*_hd*_*.so"))):
        fam, d, name = variant_parts(path)
        f = load(path)
        for causal, s in case_grid(a.causal, a.seqlens):
            b, h = 16384 // s, 2048 // d
            vt = fam.endswith("f8") and is_vt(name)
            q, k, v = variant_inputs(fam, s, d, vt)
            out = torch.empty(b, s, h, d, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
            run = launcher(f, q, k, v, out, lse, causal, num_sms, vt=vt)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            run_case(f"{fam} d{d} {name} s{s} {'causal' if causal else 'nc'}", run, flops, a.seconds)


if __name__ == "__main__":
    main()
