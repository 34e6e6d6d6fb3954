"""Where the FP8 mode's error comes from, on FlashAttention-3's outlier inputs (CPU, float64).

q, k, v ~ N(0, 1) + N(0, 100) * Bernoulli(0.001) in bf16, hdim 128, as tests/test_gpu_fp8.py's
test_fp8_outlier_rmse. Each line rounds one part of the computation to e4m3 the way the FP8
mode does (per-(batch, head) scale to 448, round to nearest even; q and k optionally after the
random-sign Hadamard rotation; P = exp(s - max) * 2^8 rounded for P V, the row sum unrounded)
and keeps everything else exact; the RMSE is against float64 attention on the bf16 inputs.

    python scripts/fp8_error_attribution.py [--seqlen 4096] [--heads 2] [--seeds 0,1,2]
"""
import argparse
import math

import torch


def outliers(shape, g):
    x = torch.randn(shape, generator=g)
    spike = torch.randn(shape, generator=g) * 10.0
    return (x + spike * (torch.rand(shape, generator=g) < 0.001)).to(torch.bfloat16).double()


def rotation(d, g):
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    signs = torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0).double()
    return torch.diag(signs) @ h / math.sqrt(d)


def e4m3(x):
    """Per-(batch, head) scale to 448, e4m3 round to nearest even, dequantized."""
    scale = 448.0 / x.abs().amax(dim=(1, 3), keepdim=True)
    return (x * scale).float().to(torch.float8_e4m3fn).double() / scale


def attention(q, k, v, round_p=False):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    s = qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
    p = torch.exp(s - s.amax(-1, keepdim=True)) * 256.0
    rowsum = p.sum(-1, keepdim=True)
    if round_p:
        p = p.float().to(torch.float8_e4m3fn).double()
    return ((p @ vt) / rowsum).transpose(1, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args()
    d = 128
    for seed in (int(x) for x in a.seeds.split(",")):
        g = torch.Generator().manual_seed(seed)
        shape = (1, a.seqlen, a.heads, d)
        q, k, v = (outliers(shape, g) for _ in range(3))
        r = rotation(d, g)
        ref = attention(q, k, v)
        qr, kr = q @ r, k @ r  # (q R)(k R)^T = q k^T: the rotation alone changes nothing
        rmse = lambda o: (o - ref).pow(2).mean().sqrt().item()  # noqa: E731
        rows = [
            ("q, k rounded (rotated)", attention(e4m3(qr), e4m3(kr), v)),
            ("q, k rounded (plain)", attention(e4m3(q), e4m3(k), v)),
            ("v rounded", attention(q, k, e4m3(v))),
            ("P rounded", attention(q, k, v, round_p=True)),
            ("all, rotated (the FP8 mode)", attention(e4m3(qr), e4m3(kr), e4m3(v), round_p=True)),
            ("all, plain per-head", attention(e4m3(q), e4m3(k), e4m3(v), round_p=True)),
        ]
        print(f"seed {seed}: |ref| rms {ref.pow(2).mean().sqrt().item():.4f}")
        for name, o in rows:
            print(f"  {name:30s} RMSE {rmse(o):.3e}")


if __name__ == "__main__":
    main()
