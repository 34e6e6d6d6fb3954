#!/usr/bin/env python3
"""FP8 accuracy study in emulation (CPU or GPU, no flashcute kernel needed): FlashAttention-3's
outlier test, RMSE of the output against float64 attention on the unquantized inputs, for
several quantization schemes, through flashcute.reference.attention_fp8_emulated (the FP8
kernel's arithmetic: exact e4m3 products, fp32 softmax, P rounded to e4m3).

Inputs (FA3 paper, section 4.3): q, k, v ~ N(0, 1) + N(0, 100) * Bernoulli(0.001), i.e. 0.1 % of
the entries get an extra N(0, 10^2) term; rounded to bf16 (what the FP8 mode receives).

Schemes:
  per-tensor          one scale per tensor (broadcast into the kernel's (batch, heads_k) slots)
  per-head            one scale per (batch, head): flashcute.fp8.quantize
  per-head+rot        the same after the random Hadamard rotation of q and k (the FP8 mode)
  block128+rot        one scale per (batch, 128-row block, head) after rotation -- NOT
                      expressible by the kernel's descales; for information (emulated through
                      dequantized fp32 inputs, which is what block scales would compute)
each with P = exp(s - max) in [0, 1] (p_offset 0) and with P shifted by 2^8 (p_offset 8, the row
sum too, so it cancels: keeps small probabilities out of e4m3's subnormal range).

--scale-rules adds the rotated per-head scheme with other choices of the per-head scale (q and
k; v as the mode quantizes it), p_offset 8:
  amax        448 / max|y| over the (batch, head), y the rotated values (the mode until run 47)
  norm-bound  448 / (sqrt(d) * max_row ||x_row||_2): a bound on max|y| from the unrotated rows
              (|y_i| <= sqrt(d) ||x||_2 for the +-1 rotation), so the quantizer's amax pass needs
              no rotation (what the mode does since run 47; it sums the squares in fp64);
              several times more range than needed, and e4m3 is floating point
  l1-bound    448 / max_row ||x_row||_1: the tight bound (|y_i| <= ||x||_1, reached when the
              signs line up), <= the norm bound; also needs no rotation
  pow2        amax's scale rounded down to a power of two (rounding then ignores the scale)

--kernel (CUDA) runs flashcute's FP8 mode itself on the same inputs and splits its error into the
quantization (the exact-arithmetic emulation of the same e4m3 inputs) and the kernel's own excess
(kernel vs that emulation: the tensor cores' accumulation, the running max): RMSE against the
float64 reference, the kernel-emulation RMSE, and the mean signed kernel-emulation difference
relative to |out| (a bias from truncating accumulation shows there).

--attribution adds where the FP8 mode's error comes from: float64 attention with only one part
rounded to e4m3 the way the mode rounds it (q and k per head, with and without the rotation; v
per head; P shifted by 2^8, its row sum unrounded), everything else exact.

    python benchmarks/fp8_outlier_rmse.py --heads 4 --seqlen 4096 --hdim 128 [--attribution] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import time

import torch


def outlier_inputs(batch, seqlen, heads, hdim, seed, device):
    g = torch.Generator(device=device).manual_seed(seed)

    def one():
        base = torch.randn(batch, seqlen, heads, hdim, generator=g, device=device)
        spike = torch.randn(batch, seqlen, heads, hdim, generator=g, device=device) * 10.0
        hit = torch.rand(batch, seqlen, heads, hdim, generator=g, device=device) < 0.001
        return (base + spike * hit).to(torch.bfloat16)
    return one(), one(), one()


def rmse(a, b):
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


def per_tensor(x):
    from flashcute.fp8 import E4M3_MAX
    amax = x.float().abs().amax()
    x8 = (x.float() * (E4M3_MAX / amax)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, (amax / E4M3_MAX).expand(x.shape[0], x.shape[2]).contiguous()


def per_block(x, block):
    """dequantized fp32 values of per-(batch, block rows, head) scaling."""
    from flashcute.fp8 import E4M3_MAX
    b, s, h, d = x.shape
    xf = x.float()
    pad = (-s) % block
    xp = torch.nn.functional.pad(xf, (0, 0, 0, 0, 0, pad))
    xb = xp.view(b, (s + pad) // block, block, h, d)
    amax = xb.abs().amax(dim=(2, 4), keepdim=True).clamp_min(1e-30)
    q = (xb * (E4M3_MAX / amax)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
    return (q * (amax / E4M3_MAX)).view(b, s + pad, h, d)[:, :s]


def quantize_rotated(x, rule, seed):
    """Per-(batch, head) e4m3 of the rotated x with the scale rule of --scale-rules (heads_k ==
    heads); returns (x8, descale) in flashcute.fp8.quantize's convention."""
    import flashcute.fp8 as F
    d = x.shape[-1]
    y = F._rotated_fp32(x, True, seed)  # x @ (diag(signs) H), H unnormalised (+-1)
    if rule == "norm-bound":
        amax = x.float().norm(dim=3).amax(dim=1) * math.sqrt(d)
    elif rule == "l1-bound":
        amax = x.float().abs().sum(dim=3).amax(dim=1)
    else:
        amax = y.abs().amax(dim=(1, 3))
        if rule == "pow2":
            amax = torch.exp2(torch.ceil(torch.log2(amax / F.E4M3_MAX))) * F.E4M3_MAX
    descale, scale = F._descale_and_scale(amax, 1.0 / math.sqrt(d))  # the mode's arithmetic
    return F._cast_e4m3(y * scale[:, None, :, None]), descale


def dequantized(x8, descale):
    """float64 values of per-(batch, head) e4m3 x8 (heads_k == heads)."""
    return x8.double() * descale.double()[:, None, :, None]


def attention_p_rounded(q, k, v, p_offset_log2=8.0):
    """float64 attention (non-causal) with only P rounded to e4m3, after the kernel's shift by
    2^p_offset_log2 (the row sum from the unrounded P)."""
    qt, kt, vt = (x.double().transpose(1, 2) for x in (q, k, v))
    s = qt @ kt.transpose(-1, -2) / math.sqrt(q.shape[-1])
    p = torch.exp(s - s.amax(-1, keepdim=True)) * 2.0 ** p_offset_log2
    rowsum = p.sum(-1, keepdim=True)
    p8 = p.float().to(torch.float8_e4m3fn).double()
    return ((p8 @ vt) / rowsum).transpose(1, 2)


def kernel_excess(q, k, v, ref, a, results):
    """The FP8 mode's kernel on the outlier inputs: its RMSE, the emulation's on the very same
    quantized inputs (exact fp32 scores; and scores with the tensor cores' accumulation), and the
    kernel's distance from the exact emulation."""
    import flashcute
    import flashcute.fp8 as F
    from flashcute import flash_attn_interface as fa3
    from flashcute.reference import attention_fp8_emulated
    out = flashcute.flash_attn_func(q, k, v, causal=a.causal, fp8=F.FP8Config(seed=a.seed))
    q8, k8, v8, (qd, kd, vd) = F.quantize_qkv(q, k, v, seed=a.seed)
    direct = fa3.flash_attn_func(q8, k8, v8, causal=a.causal, q_descale=qd, k_descale=kd, v_descale=vd)
    assert torch.equal(out, direct), "the FP8 mode and the kernel on quantize_qkv's inputs differ"
    emu, _ = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=a.causal, p_offset_log2=8.0,
                                    out_dtype=None)
    emu_tc, _ = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=a.causal, p_offset_log2=8.0,
                                       out_dtype=None, tensor_core_scores=True)
    diff = out.double() - emu.double()
    rows = {"kernel (FP8 mode)": rmse(out, ref), "emulation, exact fp32": rmse(emu.to(out.dtype), ref),
            "emulation, tensor-core scores": rmse(emu_tc.to(out.dtype), ref),
            "kernel - emulation": rmse(out, emu),
            "kernel - emulation(tc scores)": rmse(out, emu_tc),
            "mean signed (kernel - emu) * sign(emu) / mean|emu|":
                ((diff * emu.double().sign()).mean() / emu.double().abs().mean()).item()}
    for name, e in rows.items():
        results["schemes"][name] = e
        print(f"{name}: {e:.3e}", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--hdim", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--offsets", default="0,8", help="p_offset_log2 values to try")
    p.add_argument("--device", default="cpu")
    p.add_argument("--attribution", action="store_true", help="one part rounded at a time (non-causal)")
    p.add_argument("--kernel", action="store_true", help="flashcute's FP8 mode vs its emulation (CUDA)")
    p.add_argument("--scale-rules", default=None, help="e.g. amax,norm-bound,pow2 (see above)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    import flashcute.fp8 as F
    from flashcute.reference import attention_fp8_emulated, attention_ref

    torch.manual_seed(a.seed)
    q, k, v = outlier_inputs(a.batch, a.seqlen, a.heads, a.hdim, a.seed, a.device)
    t0 = time.time()
    ref, _ = attention_ref(q, k, v, causal=a.causal)
    out_bf16, _ = attention_ref(q, k, v, causal=a.causal, upcast=False)
    print(f"# outlier test: b={a.batch} s={a.seqlen} h={a.heads} d={a.hdim} causal={a.causal} seed={a.seed}; "
          f"float64 reference {time.time() - t0:.1f}s", flush=True)
    results = {"config": vars(a), "bf16_lowprec_reference": rmse(out_bf16, ref), "schemes": {}}
    print(f"bf16 (attention_ref in bf16, for scale): RMSE {results['bf16_lowprec_reference']:.3e}", flush=True)

    def emulate(name, q8, k8, v8, qd=None, kd=None, vd=None):
        for off in [float(x) for x in a.offsets.split(",")]:
            t = time.time()
            out, _ = attention_fp8_emulated(q8, k8, v8, qd, kd, vd, causal=a.causal, p_offset_log2=off)
            e = rmse(out, ref)
            results["schemes"][f"{name} p_offset={off:g}"] = e
            print(f"{name:<16} p_offset={off:g}: RMSE {e:.3e}   ({time.time() - t:.1f}s)", flush=True)

    v8h, vdh = F.quantize(v)
    emulate("per-tensor", *per_tensor(q)[:1], per_tensor(k)[0], per_tensor(v)[0],
            per_tensor(q)[1], per_tensor(k)[1], per_tensor(v)[1])
    q8, qd = F.quantize(q)
    k8, kd = F.quantize(k)
    emulate("per-head", q8, k8, v8h, qd, kd, vdh)
    q8, qd = F.quantize(q, rotate=True, seed=a.seed)
    k8, kd = F.quantize(k, rotate=True, seed=a.seed)
    emulate("per-head+rot", q8, k8, v8h, qd, kd, vdh)
    qr = F.hadamard(q.float(), seed=a.seed)
    kr = F.hadamard(k.float(), seed=a.seed)
    emulate("block128+rot", per_block(qr, 128), per_block(kr, 128), per_block(v, 128))
    for rule in a.scale_rules.split(",") if a.scale_rules else []:
        t = time.time()
        (q8r, qdr), (k8r, kdr) = (quantize_rotated(x, rule, a.seed) for x in (q, k))
        out, _ = attention_fp8_emulated(q8r, k8r, v8h, qdr, kdr, vdh, causal=a.causal, p_offset_log2=8.0)
        e = rmse(out, ref)
        results["schemes"][f"per-head+rot scale={rule} p_offset=8"] = e
        print(f"per-head+rot, scale {rule:<10}: RMSE {e:.3e}   ({time.time() - t:.1f}s)", flush=True)
    if a.kernel:
        kernel_excess(q, k, v, ref, a, results)
    if a.attribution and not a.causal:
        parts = {
            "q, k (rotated)": attention_ref(dequantized(q8, qd), dequantized(k8, kd), v)[0],
            "q, k (plain)": attention_ref(*(dequantized(*F.quantize(x)) for x in (q, k)), v)[0],
            "v": attention_ref(q, k, dequantized(v8h, vdh))[0],
            "P (p_offset=8)": attention_p_rounded(q, k, v),
            # FP8 in P V only (scores from the bf16 q, k, exact): what a bf16 S / e4m3 P V kernel would keep
            "P and v": attention_p_rounded(q, k, dequantized(v8h, vdh)),
        }
        for name, out in parts.items():
            e = rmse(out, ref)
            results["schemes"][f"only {name} rounded"] = e
            print(f"only {name} rounded: RMSE {e:.3e}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
