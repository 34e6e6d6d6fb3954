"""Diagnostic: FP8 mode dense (CUDA quantize) vs varlen (torch quantize) on the same inputs:
are the quantized inputs equal, and where do the outputs differ?"""
import torch
import flashcute
from flashcute import fp8 as F
from flashcute.ops import _fwd_into  # noqa: F401

torch.manual_seed(0)
d = 128
q, k, v = (torch.randn(2, 257, 8, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for name, x in (("q", q), ("k", k), ("v", v)):
    a8, ad = F.quantize(x, 8, impl="cuda")
    b8, bd = F.quantize(x, 8, impl="torch")
    cu = torch.tensor([0, 257, 514], dtype=torch.int32, device="cuda")
    c8, cd = F.quantize(x.flatten(0, 1), 8, layout="thd", cu_seqlens=cu, impl="torch")
    print(name, "cuda==torch bytes", torch.equal(a8.view(torch.uint8), b8.view(torch.uint8)),
          "descale", torch.equal(ad, bd), "| varlen==dense bytes",
          torch.equal(c8.view(torch.uint8).view_as(b8.view(torch.uint8)), b8.view(torch.uint8)),
          "descale", torch.equal(cd, bd), (cd - bd).abs().max().item())
cfg = F.FP8Config(rotate=False)
cu = torch.tensor([0, 257, 514], dtype=torch.int32, device="cuda")
dense = flashcute.flash_attn_func(q, k, v, causal=True, fp8=cfg)
var = flashcute.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, 257, 257,
                                       causal=True, fp8=cfg).view_as(dense)
diff = (var.float() - dense.float()).abs()
print("mode dense vs varlen: max diff", diff.max().item(), "n diff", int((diff > 0).sum()),
      "of", diff.numel())
if (diff > 0).any():
    idx = (diff > 0).nonzero()
    print("first diffs (b, s, h, d):", idx[:8].tolist())
    print("rows with diffs per batch:", [sorted(set(idx[idx[:, 0] == b][:, 1].tolist()))[:20] for b in (0, 1)])
# the kernel alone on identical (torch-quantized) inputs: dense vs varlen
(q8, qd), (k8, kd), (v8, vd) = (F.quantize(x, 8, impl="torch") for x in (q, k, v))
from flashcute import flash_attn_interface as fai
o1 = fai.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, causal=True)
o1 = o1[0] if isinstance(o1, tuple) else o1
o2 = fai.flash_attn_varlen_func(q8.flatten(0, 1), k8.flatten(0, 1), v8.flatten(0, 1), cu, cu, 257, 257,
                                q_descale=qd, k_descale=kd, v_descale=vd, causal=True)
o2 = (o2[0] if isinstance(o2, tuple) else o2).view_as(o1)
dd = (o1.float() - o2.float()).abs()
print("kernel dense vs varlen on identical e4m3 inputs: max diff", dd.max().item(), "n", int((dd > 0).sum()))
if (dd > 0).any():
    idx = (dd > 0).nonzero()
    print("  rows:", [sorted(set(idx[idx[:, 0] == b][:, 1].tolist()))[:20] for b in (0, 1)])
