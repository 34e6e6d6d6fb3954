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
import flashcute.flash_attn_interface as fai
from flashcute import fp8 as F


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


def dynamic_cases(d):
    """sm90 causal/local cases with the dynamic tile hand-out forced on (Python passes a counter
    only for more tiles than SMs, which these small cases do not have): the claims, the tile
    header and the counter's reset run under the sanitizers too."""
    from flashcute import ops
    rule = ops._more_tiles_than_sms
    ops._more_tiles_than_sms = lambda q, batch, seqlen_q: True
    try:
        return [dense_case("sm90", d, 203, 113, causal=True), dense_case("sm90", d, 130, 300, window_size=(40, 7)),
                dense_case("sm90", d, 1000, 300, hq=4, hk=2, causal=True)]
    finally:
        ops._more_tiles_than_sms = rule


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


def fp8_mode_errors(seed, q_shape, kv_shape, cfgs=(True,)):
    """The FP8 mode end to end (causal) against float64 on its bf16 inputs: the max error per
    FP8Config (NaN counts as 1e9, so an unwritten output fails)."""
    torch.manual_seed(seed)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16) for shape in (q_shape, kv_shape, kv_shape))
    ref, _ = attention_ref(q, k, v, causal=True)
    return [(flashcute.flash_attn_func(q, k, v, causal=True, fp8=cfg).double() - ref).abs().nan_to_num(1e9).max().item()
            for cfg in cfgs]


def fp8_case(d, sq, sk, hq=2, hk=1, batch=2, **kw):
    """FP8 kernel vs the float64 reference on the dequantized inputs (q/k/v with descales != 1)."""
    torch.manual_seed(sq * 17 + sk + d)
    q = torch.randn(batch, sq, hq, d, device="cuda", dtype=torch.bfloat16) * 3
    k = torch.randn(batch, sk, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, sk, hk, d, device="cuda", dtype=torch.bfloat16) * 2
    (q8, qd), (k8, kd), (v8, vd) = (F.quantize(x, hk) for x in (q, k, v))  # per (batch, k/v head)
    out = fai.flash_attn_func(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, **kw)

    def deq(x8, ds, h):
        return x8.double() * ds.double().repeat_interleave(h // hk, dim=1)[:, None, :, None]

    ref, _ = attention_ref(deq(q8, qd, hq), deq(k8, kd, hk), deq(v8, vd, hk), **kw)
    return (out.double() - ref).abs().max().item()


def fp8_vt_case(d, sq, sk, **kw):
    """The FP8 kernel on V^T (the FP8 mode's path, flashcute.ops.v_colmajor; block-wise
    descales, here all 1) against the same kernel transposing V itself: they agree to rounding
    (returns the max difference)."""
    from flashcute import ops
    torch.manual_seed(sq + 3 * sk + d)
    q8, k8, v8 = (torch.randn(2, s, h, d, device="cuda").to(torch.float8_e4m3fn) for s, h in ((sq, 4), (sk, 2), (sk, 2)))
    outs = []
    for vt in (None, ops.v_colmajor(v8)):
        out = torch.full((2, sq, 4, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        lse = torch.full((2, 4, sq), float("nan"), device="cuda")
        ops._fwd_into(q8, k8, v8, out, lse, vt=vt, **kw)
        outs.append(out.float())
    return (outs[0] - outs[1]).abs().nan_to_num(1e9).max().item()


def fp8_cases():
    info = flashcute.build_info()
    if not info.get("fp8"):
        return 0.0
    worst = 0.0
    for d in sorted({k["head_dim"] for k in info["kernels"]["sm90"] if k["dtype"] == "e4m3" and k["head_dim"] == k["head_dim_v"]}):
        errs = [
            fp8_case(d, 1, 1),
            fp8_case(d, 113, 203),
            fp8_case(d, 203, 113, causal=True),
            fp8_case(d, 130, 300, window_size=(40, 7)),
            fp8_case(d, 77, 77, softcap=15.0, causal=True),
            fp8_case(d, 300, 300, hq=4, hk=2),
            fp8_case(d, 64, 0),
        ]
        print(f"sm90 e4m3 hdim {d}: max errors {['%.2e' % e for e in errs]}", flush=True)
        worst = max(worst, max(errs))
    for d in (128, 256):  # the V^T kernels (dense, bf16 out)
        if flashcute.supported(-1, "sm90", "e4m3", d):
            diffs = [fp8_vt_case(d, 113, 203), fp8_vt_case(d, 203, 113, causal=True),
                     fp8_vt_case(d, 130, 300, window_size=(40, 7))]
            print(f"sm90 e4m3 V^T hdim {d}: max |V^T - transposing| {['%.2e' % e for e in diffs]}", flush=True)
            worst = max(worst, max(diffs) * 4)  # rounding only: a garbage or unwritten output fails
            # the FP8 mode end to end: the CUDA quantizer writes V^T (x8_vt) with block-wise scales
            # (its block kernel), the kernel reads them; 300 keys: a partial block and V^T padding.
            # Against float64 on the bf16 inputs, as the FP8 cases above (the two paths quantize
            # differently, so they are not compared with each other).
            errs = fp8_mode_errors(d, (2, 300, 2, d), (2, 300, 2, d), (True, F.FP8Config(v_colmajor=False)))
            print(f"sm90 e4m3 FP8 mode hdim {d}: max errors (block scales, per head) {['%.2e' % e for e in errs]}",
                  flush=True)
            worst = max(worst, max(errs))
    for d in (96, 192):  # the FP8 mode with Paley's rotation in the per-slot quantizer (GQA: a slot of 2 heads)
        if flashcute.supported(-1, "sm90", "e4m3", d):
            err, = fp8_mode_errors(d, (2, 300, 4, d), (2, 300, 2, d))
            print(f"sm90 e4m3 FP8 mode hdim {d} (rotated in the quantizer): max error {err:.2e}", flush=True)
            worst = max(worst, err)
    if flashcute.supported(-1, "sm90", "e4m3", 128):
        # 4099 keys at d=128: the quantizer's 192-key blocks (the kernel's tile from 4096 keys),
        # a partial last block and V^T padding
        err, = fp8_mode_errors(4099, (1, 4099, 2, 128), (1, 4099, 2, 128))
        print(f"sm90 e4m3 FP8 mode hdim 128, 4099 keys: max error {err:.2e}", flush=True)
        worst = max(worst, err)
    return worst


def main():
    # e4m3 rounds P (and q, k, v) to 3 mantissa bits: ~0.1 from float64 is expected there; the
    # check only has to catch an unwritten (NaN) or garbage output (tests/test_gpu_fp8.py is exact).
    fp8_worst = fp8_cases() if "sm90" in backends() else 0.0
    if not fp8_worst < 0.25:
        print(f"FP8 cases: worst error {fp8_worst:.3e}")
        return 1
    if os.environ.get("FLASHCUTE_SANITIZE_FP8_ONLY"):  # e.g. a quantizer A/B under the sanitizers
        print("sanitize cases done (FP8 only), worst error %.3e" % fp8_worst)
        return 0
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
            ] + (dynamic_cases(d) if backend == "sm90" else [])
            print(f"{backend} hdim {d}: max errors {['%.2e' % e for e in errs]}", flush=True)
            worst = max(worst, max(errs))
    torch.cuda.synchronize()
    print("sanitize cases done, worst error %.3e" % worst)
    return 0 if worst < 5e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
