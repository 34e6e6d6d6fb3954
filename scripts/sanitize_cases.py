"""Small forward cases, one per feature, for compute-sanitizer (memcheck / racecheck / synccheck).
Run under the sanitizer by scripts/gpu_check.sh; also checks each output against the reference so
that a case that silently computes nothing is noticed.
    compute-sanitizer --tool memcheck --kernel-name kns=flashcute python3 scripts/sanitize_cases.py
"""
import os
import sys

import torch

import flashcute
from flashcute.reference import attention_ref


def backends():
    want = os.environ.get("FLASHCUTE_SANITIZE_BACKENDS", "sm80,sm90").split(",")
    kernels = flashcute.build_info()["kernels"]
    return [b for b in want if kernels.get(b)]


def hdims(backend):
    return sorted({k["head_dim"] for k in flashcute.build_info()["kernels"][backend] if k["head_dim"] == k["head_dim_v"]})


def dense_case(backend, d, sq, sk, hq=2, hk=1, **kw):
    torch.manual_seed(sq * 31 + sk)
    q = torch.randn(2, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(2, sk, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(2, sk, hk, d, device="cuda", dtype=torch.bfloat16)
    out = flashcute.flash_attn_func(q, k, v, backend=backend, **kw)
    ref, _ = attention_ref(q, k, v, **kw)
    return (out.float() - ref.float()).abs().max().item()


def varlen_case(backend, d):
    torch.manual_seed(7)
    lens_q = torch.tensor([0, 1, 37, 130], dtype=torch.int32)
    lens_k = torch.tensor([5, 0, 64, 200], dtype=torch.int32)
    cu_q = torch.nn.functional.pad(lens_q.cumsum(0), (1, 0)).int().cuda()
    cu_k = torch.nn.functional.pad(lens_k.cumsum(0), (1, 0)).int().cuda()
    q = torch.randn(int(lens_q.sum()), 2, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(int(lens_k.sum()), 1, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = flashcute.flash_attn_varlen_func(q, k, v, cu_q, cu_k, int(lens_q.max()), int(lens_k.max()),
                                           causal=True, backend=backend)
    ref, _ = attention_ref(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    return (out.float() - ref.float()).abs().max().item()


def main():
    worst = 0.0
    for backend in backends():
        for d in hdims(backend):
            errs = [
                dense_case(backend, d, 1, 1),
                dense_case(backend, d, 113, 203),
                dense_case(backend, d, 203, 113, causal=True),
                dense_case(backend, d, 130, 300, window_size=(40, 7)),
                dense_case(backend, d, 77, 77, softcap=15.0, causal=True),
                dense_case(backend, d, 64, 0),
                varlen_case(backend, d),
            ]
            print(f"{backend} hdim {d}: max errors {['%.2e' % e for e in errs]}", flush=True)
            worst = max(worst, max(errs))
    torch.cuda.synchronize()
    print("sanitize cases done, worst error %.3e" % worst)
    return 0 if worst < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
