"""Where does the FP8 kernel's LSE error come from? Compares, on the same e4m3 inputs, the
kernel's LSE with float64 LSE and with LSE computed from torch._scaled_mm scores (cuBLAS FP8
tensor-core GEMM, fast accumulation and not): if _scaled_mm's fast-accumulation scores are as far
from float64 as the kernel's, the error is the tensor cores' FP8 accumulation, not a bug.
    python scripts/fp8_lse_probe.py
"""
import torch

import flashcute.flash_attn_interface as fai
from flashcute import fp8 as F


def lse_from_scores(s, scale):
    return torch.logsumexp(s.double() * scale, dim=-1)


def probe(d, s, outliers, seed=0):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(1, s, 1, d, device="cuda") * (1 + i) for i in range(3))
    if outliers:
        for x in (q, k, v):
            x.view(-1)[::997] *= 20
    (q8, qd), (k8, kd), (v8, vd) = (F.quantize(x.bfloat16(), 1) for x in (q, k, v))
    scale = d ** -0.5
    _, lse = fai.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, return_attn_probs=True)
    lse = lse[0, 0].double()
    a, b = q8[0, :, 0], k8[0, :, 0]
    qk = float(qd[0, 0]) * float(kd[0, 0])
    exact = lse_from_scores(a.double() @ b.double().t() * qk, scale)
    pad = (-s) % 16
    ap = torch.nn.functional.pad(a.view(torch.uint8), (0, 0, 0, pad)).view(torch.float8_e4m3fn)
    bp = torch.nn.functional.pad(b.view(torch.uint8), (0, 0, 0, pad)).view(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    res = {}
    for fast in (True, False):
        sm = torch._scaled_mm(ap, bp.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                              use_fast_accum=fast)[:s, :s]
        res[fast] = (lse_from_scores(sm.double() * qk, scale) - exact).abs().max().item()
    err = (lse - exact).abs()
    i = int(err.argmax())
    mag = (a.double().abs() @ b.double().abs().t() * qk * scale).max().item()
    print(f"d={d} s={s} outliers={outliers}: kernel |dLSE| max {err.max().item():.3e} (row {i}, lse {exact[i].item():.3f}); "
          f"_scaled_mm fast-accum {res[True]:.3e}, slow-accum {res[False]:.3e}; max sum|q||k|*scale {mag:.1f}",
          flush=True)


if __name__ == "__main__":
    for d in (64, 128, 256):
        for s in (1, 16, 1024):
            for o in (False, True):
                probe(d, s, o)
