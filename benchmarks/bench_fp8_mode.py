#!/usr/bin/env python3
"""FP8 mode benchmark (CUDA only): what the bf16-input FP8 mode costs, piece by piece, next to the
bf16 kernel and cuDNN, in one process on the same inputs.

Columns (median of triton.testing.do_bench, L2 flushed, as benchmarks/bench_attention.py):
  quant         flashcute.fp8.quantize_qkv of q and k (rotated) and v, impl="auto": the mode's
                overhead (the compiled CUDA kernel where the library has it, else torch ops)
  quant-cuda    the same forced onto the compiled kernel (impl="cuda"): one launch for q, k, v
  quant-vt      quant with v written as V^T (v_colmajor=True: what fp8-mode ran at d 128/256
                before block-wise scales)
  quant-blocks  quant-vt with block-wise scales (q per row, k and v per key block, each block
                read once: what fp8-mode runs at d 128/256 with FP8Config(block_scales=True))
  quant-blocks-bfly  quant-blocks with q's and k's rotation as butterflies
                (FLASHCUTE_FP8_QUANTIZE_MMA=0 around each call) instead of on the tensor cores
                (the library's default since run 141)
  quant-blocks-anyd  quant-blocks with FLASHCUTE_FP8_QUANTIZE_ONE_D=0 around each call: the block
                kernel that dispatches on each item's head dim, instead of the one built for the
                launch's single head dim (bf16 at d 128/256, the library's default since session 45)
  fp8-kernel-blocks  the V^T kernel alone on quant-blocks' outputs (block-wise descales)
  quant-torch   the same through the torch ops (impl="torch"), for comparison
  fp8-kernel    the FP8 kernel alone on pre-quantized e4m3 q, k, v with descales
  fp8-mode      flashcute.flash_attn_func(q, k, v, fp8=True): quantize + rotate + attention
  fp8-mode-norot  the same with FP8Config(rotate=False)
  fp8-mode-vtrans the same with FP8Config(v_colmajor=False): V transposed inside the kernel
                rather than handed over as V^T (the default where it applies: d 128/256, bf16)
  fp8-mode-heads  the same with FP8Config(block_scales=False): V^T, one scale per (batch, head)
  fp8-mode-bfly  fp8-mode with FLASHCUTE_FP8_QUANTIZE_MMA=0, as quant-blocks-bfly
  fp8-mode-anyd  fp8-mode with FLASHCUTE_FP8_QUANTIZE_ONE_D=0, as quant-blocks-anyd
  quant-varlen-cuda, quant-varlen-torch  quantize_qkv of the same q, k, v as packed varlen rows
                (cu_seqlens, every sequence seqlen long) on the CUDA kernel's varlen path / on torch ops
                (what impl="auto" takes for varlen until the CUDA path has run on a GPU)
  bf16          flashcute.flash_attn_func on the bf16 inputs
  cudnn         torch SDPA with the cuDNN backend, bf16, contiguous (b, h, s, d) inputs
plus fp8-mode's speedup over bf16 (the target: >= 1.1x at seqlen >= 4k, hdim 128) and
quant-cuda's rate in GB/s of the least traffic any quantizer needs (x read once, x8 written
once: 3 bytes per element; the kernel reads x twice, the second time mostly from L2). The
kernel's schedule can be switched for an A/B run with FLASHCUTE_FP8_QUANTIZE_LAG (-1: two
launches, x read twice from HBM; see src/sm90/fp8_quantize.cu).

Shapes: FlashAttention's convention, batch * seqlen = --total-tokens (16384), heads * hdim =
--model-dim (2048), heads_k = heads (use --gqa for heads_k = heads / ratio).

    python benchmarks/bench_fp8_mode.py --json fp8_mode.json
    python benchmarks/bench_fp8_mode.py --seqlens 4096 --hdims 128 --causal both
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_attention import environment, make_timer, tflops, with_cooldown  # noqa: E402  (same folder)

COLUMNS = ("quant", "quant-cuda", "quant-vt", "quant-blocks", "quant-blocks-bfly", "quant-blocks-anyd",
           "quant-kv-blocks", "quant-torch", "quant-varlen-cuda", "quant-varlen-torch", "fp8-kernel",
           "fp8-kernel-blocks", "fp8-mode", "fp8-mode-bfly", "fp8-mode-anyd", "fp8-mode-norot", "fp8-mode-vtrans",
           "fp8-mode-heads", "bf16", "cudnn")
MMA_ENV = "FLASHCUTE_FP8_QUANTIZE_MMA"  # read by the library per call (src/sm90/fp8_quantize.cu)
ONE_D_ENV = "FLASHCUTE_FP8_QUANTIZE_ONE_D"  # likewise


def _ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seqlens", type=_ints, default=[1024, 4096, 16384])
    p.add_argument("--hdims", type=_ints, default=[128, 256])
    p.add_argument("--causal", choices=("no", "yes", "both"), default="no")
    p.add_argument("--total-tokens", type=int, default=16384)
    p.add_argument("--model-dim", type=int, default=2048)
    p.add_argument("--gqa", type=int, default=1, help="heads / heads_k (1: MHA)")
    p.add_argument("--columns", default=",".join(COLUMNS))
    p.add_argument("--warmup", type=float, default=25)
    p.add_argument("--rep", type=float, default=100)
    p.add_argument("--cooldown", type=float, default=0.0, metavar="S",
                   help="sleep S seconds before every timing (bench_attention.py --cooldown)")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--dry-run", action="store_true", help="list the cases; no GPU needed")
    a = p.parse_args(argv)
    a.columns = [c for c in a.columns.split(",") if c]
    bad = [c for c in a.columns if c not in COLUMNS]
    if bad:
        p.error(f"--columns: unknown {bad}; allowed {COLUMNS}")
    return a


def make_cases(a):
    cases = []
    for d in a.hdims:
        for c in {"no": [False], "yes": [True], "both": [False, True]}[a.causal]:
            for s in a.seqlens:
                b, h = max(1, a.total_tokens // s), a.model_dim // d
                flops = 4 * b * h * s * s * d // (2 if c else 1)
                cases.append(dict(hdim=d, causal=c, seqlen=s, batch=b, heads=h, heads_k=max(1, h // a.gqa),
                                  flops=flops))
    return cases


def with_env(fn, name, value):
    """fn with os.environ[name] = value during each call (restored after)."""
    def run():
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn()
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    return run


def runners(case, torch, flashcute):
    """{column: fn} on fresh inputs for one case."""
    from flashcute import fp8 as F
    from flashcute import flash_attn_interface as fai

    b, s, h, hk, d, causal = (case[k] for k in ("batch", "seqlen", "heads", "heads_k", "hdim", "causal"))
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, hk, d, device="cuda", dtype=torch.bfloat16)
    q8, qd = F.quantize(q, hk, rotate=True)
    k8, kd = F.quantize(k, hk, rotate=True)
    v8, vd = F.quantize(v, hk)
    bhsd = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    norot = F.FP8Config(rotate=False)
    vtrans = F.FP8Config(v_colmajor=False)
    heads = F.FP8Config(block_scales=False)
    from flashcute import ops
    block = ops.vt_key_block(d, s) if hk == h else 0

    def quant(impl, vt=False, block_keys=0):
        def fn():
            return F.quantize_qkv(q, k, v, rotate=True, impl=impl, v_colmajor=vt, block_keys=block_keys)
        return fn

    def kernel_blocks():
        return ops.call_fwd(bq8, bk8, bvt8, descales=bds, softmax_scale=d ** -0.5, causal=causal,
                            window_left=-1, window_right=0 if causal else -1, softcap=0.0, top_left=False,
                            backend="auto", out_dtype=torch.bfloat16, v_is_vt=True)

    def quant_kv(rows):
        def fn():
            return F._quantize_cuda_blocks([(k, True, rows), (v, False, rows)], 0, vt_last=True)
        return fn

    if block:
        bq8, bk8, bvt8, bds = F.quantize_qkv(q, k, v, rotate=True, v_colmajor=True, block_keys=block)

    cu = torch.arange(0, (b + 1) * s, s, device="cuda", dtype=torch.int32)
    packed = [t.reshape(b * s, t.shape[2], d) for t in (q, k, v)]

    def quant_varlen(impl):
        def fn():
            return F.quantize_qkv(*packed, rotate=True, impl=impl, cu_seqlens_q=cu, cu_seqlens_k=cu)
        return fn

    def cudnn():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(*bhsd, is_causal=causal, enable_gqa=hk != h)

    return {
        "quant": quant("auto"),
        "quant-cuda": quant("cuda"),
        # V^T only where the mode writes it (flashcute.fp8.v_colmajor_applies): n/a elsewhere
        "quant-vt": quant("auto", vt=True) if d in (128, 256) and hk == h else None,
        "quant-blocks": quant("auto", vt=True, block_keys=block) if block else None,
        "quant-blocks-bfly": with_env(quant("auto", vt=True, block_keys=block), MMA_ENV, "0") if block else None,
        "quant-blocks-anyd": with_env(quant("auto", vt=True, block_keys=block), ONE_D_ENV, "0") if block else None,
        "fp8-kernel-blocks": kernel_blocks if block else None,
        # k and v only (q left out): the quantizer's part that stays if q's rotation and cast move
        # into the attention kernel (session 48's question: what fusing q could save at most)
        "quant-kv-blocks": quant_kv(block) if block else None,
        "quant-torch": quant("torch"),
        "quant-varlen-cuda": quant_varlen("cuda"),
        "quant-varlen-torch": quant_varlen("torch"),
        "fp8-kernel": lambda: fai.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                                  v_descale=vd),
        "fp8-mode": lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=True),
        "fp8-mode-bfly": with_env(lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=True), MMA_ENV, "0"),
        "fp8-mode-anyd": with_env(lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=True), ONE_D_ENV, "0"),
        "fp8-mode-norot": lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=norot),
        "fp8-mode-vtrans": lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=vtrans),
        "fp8-mode-heads": lambda: flashcute.flash_attn_func(q, k, v, causal=causal, fp8=heads),
        "bf16": lambda: flashcute.flash_attn_func(q, k, v, causal=causal),
        "cudnn": cudnn,
    }


def quant_bytes(case):
    """The least HBM traffic of quantizing q, k, v: each read once (bf16) and written once (e4m3)."""
    n_q = case["batch"] * case["seqlen"] * case["heads"] * case["hdim"]
    n_kv = case["batch"] * case["seqlen"] * case["heads_k"] * case["hdim"]
    return (n_q + 2 * n_kv) * (2 + 1)


def table(results, cols):
    head = ["hdim", "causal", "seqlen"] + [f"{c} ms" for c in cols] + ["fp8-mode÷bf16", "fp8-mode-bfly÷bf16",
                                                                        "quant-cuda GB/s", "quant-cuda ÷ fp8-kernel"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ms = r["ms"]
        row = [str(r["hdim"]), "yes" if r["causal"] else "no", str(r["seqlen"])]
        row += ["n/a" if ms.get(c) is None else f"{ms[c]:.3f}" for c in cols]
        for mode in ("fp8-mode", "fp8-mode-bfly"):
            sp = (ms["bf16"] / ms[mode]) if ms.get("bf16") and ms.get(mode) else None
            row.append("n/a" if sp is None else f"{sp:.2f}x")
        gbs = quant_bytes(r) / (ms["quant-cuda"] * 1e-3) / 1e9 if ms.get("quant-cuda") else None
        row.append("n/a" if gbs is None else f"{gbs:.0f}")
        share = ms["quant-cuda"] / ms["fp8-kernel"] if ms.get("quant-cuda") and ms.get("fp8-kernel") else None
        row.append("n/a" if share is None else f"{100 * share:.1f} %")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(argv)
    cases = make_cases(a)
    if a.dry_run:
        for c in cases:
            print(c)
        return 0
    import torch
    if not torch.cuda.is_available():
        sys.exit("bench_fp8_mode: needs a CUDA device (--dry-run lists the cases)")
    import triton
    import flashcute

    bench, timer = make_timer(torch, triton, a.warmup, a.rep)
    if a.cooldown > 0:
        bench, timer = with_cooldown(bench, a.cooldown), f"{timer}, {a.cooldown} s idle before each"
    env = environment(torch, triton, flashcute, None, None, "not used")
    print(f"# {env.get('gpu')} | torch {env['torch']} | triton {env['triton']} | {timer}", flush=True)
    results = []
    for case in cases:
        rec = dict(case, ms={}, tflops={}, errors={})
        fns = runners(case, torch, flashcute)
        for col in a.columns:
            fn = fns.get(col)
            if fn is None:  # not applicable to this case
                rec["ms"][col] = None
                continue
            try:
                fn()
                torch.cuda.synchronize()
                ms = bench(fn)
                rec["ms"][col] = ms
                if col in ("fp8-kernel", "fp8-mode", "fp8-mode-bfly", "fp8-mode-anyd", "fp8-mode-norot",
                           "fp8-mode-vtrans", "bf16", "cudnn"):
                    rec["tflops"][col] = tflops(case["flops"], ms)
            except Exception as e:  # noqa: BLE001  one column failing must not stop the sweep
                rec["errors"][col] = f"{type(e).__name__}: {e}"[:300]
                rec["ms"][col] = None
        print(f"hdim={case['hdim']} causal={case['causal']} seqlen={case['seqlen']}: "
              + " ".join(f"{c}={rec['ms'][c]:.3f}ms" if rec["ms"].get(c) else f"{c}=n/a" for c in a.columns),
              flush=True)
        results.append(rec)
        del fns
        gc.collect()
        torch.cuda.empty_cache()
    print()
    print(table(results, a.columns))
    for r in results:
        for c, e in r["errors"].items():
            print(f"- n/a {c} (hdim {r['hdim']}, seqlen {r['seqlen']}): {e}")
    if a.json:
        report = {"command": " ".join(shlex.quote(x) for x in sys.argv),
                  "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "environment": env, "timer": timer, "config": vars(a), "results": results}
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
