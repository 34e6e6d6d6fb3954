#!/usr/bin/env python3
"""Forward-attention benchmark: flashcute side by side with cuDNN, FA2, FlexAttention (and FA3).

Everything runs in one process, on the same inputs, one case after another, so the numbers are
comparable (absolute TFLOP/s drift a few percent between runs and machines; ratios within one
run do not).

Convention (FlashAttention's): batch * seqlen = --total-tokens (16384), heads * hdim =
--model-dim (2048), FLOPs = 4 * batch * heads * seqlen^2 * hdim, halved for causal; time is the
median of ``triton.testing.do_bench`` (L2 flushed between calls).

Layouts: flashcute and FA3 take (batch, seqlen, heads, hdim) contiguous tensors. The SDPA-style
baselines (cuDNN, torch FA2, FlexAttention) take (batch, heads, seqlen, hdim); we give them
*contiguous* (b, h, s, d) tensors holding the same values (their best case: no strided
transposed view), so their numbers are not penalised by our layout.

--dtype fp8: flashcute (and FA3, if present) take float8_e4m3fn q, k, v; the baselines have no fp8
forward and run bf16 on the same (dequantized) values. TFLOP/s are then not like for like: the
output says so.

Examples:
    python benchmarks/bench_attention.py                         # the default sweep
    python benchmarks/bench_attention.py --hdims 128 --seqlens 1024,4096,16384 --causal no
    python benchmarks/bench_attention.py --backend sm90,sm80 --check --json out.json --plot out.png
    python benchmarks/bench_attention.py --dry-run               # cases and FLOPs, no GPU needed

This file must import and answer --help / --dry-run on a CPU-only machine: torch, triton,
matplotlib, flashcute and FA3 are imported only when a real run needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import gc
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback

# For --dtype fp8 (FP8 against bf16 in the same run), flashcute's 16-bit kernel on
#   flashcute_bf16:    the e4m3 inputs' values, upcast (the same numbers as the FP8 kernel sees);
#   flashcute_bf16src: the bf16 tensors the e4m3 inputs were cast from, i.e. what a bf16 user runs,
#                      and how FA3's "FP8 is 1.14-1.38x its own bf16" compares (its bf16 figures
#                      come from randn bf16 inputs). The bf16 kernel draws less power on e4m3-valued
#                      inputs and runs 4-8 % faster on them (RESULTS.md run 131), so the two differ.
FP8_BF16_IMPLS = ("flashcute_bf16", "flashcute_bf16src")
IMPL_CHOICES = ("flashcute",) + FP8_BF16_IMPLS + ("cudnn", "fa2", "flex", "fa3")
BACKEND_CHOICES = ("auto", "sm80", "sm90")
PRETTY = {"cudnn": "cuDNN", "fa2": "FA2", "flex": "Flex", "fa3": "FA3", "flashcute_bf16": "flashcute bf16",
          "flashcute_bf16src": "flashcute bf16 (source)"}
DEVICE = "cuda"  # a module attribute only so that a CPU smoke test can swap it
# Default --check-atol per input dtype (a heuristic flag only; the raw diffs are always recorded).
CHECK_ATOL = {"bf16": 2e-2, "fp16": 1e-2, "fp8": 2.5e-1}


# ---------------------------------------------------------------------------------------------
# command line and cases
# ---------------------------------------------------------------------------------------------


def _int_list(text):
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _choice_list(choices, allow_all=False):
    def parse(text):
        if allow_all and text.strip() == "all":
            return None
        vals = [x.strip() for x in text.split(",") if x.strip()]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {','.join(choices)}, got {text!r}")
        return list(dict.fromkeys(vals))  # dedupe, keep order
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Forward attention TFLOP/s: flashcute vs cuDNN / FA2 / FlexAttention / FA3 "
                    "(FA convention: batch*seqlen and heads*hdim fixed).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--impls", type=_choice_list(IMPL_CHOICES, allow_all=True), default="all",
                   help="implementations to run, comma-separated from "
                        f"{','.join(IMPL_CHOICES)}, or 'all' (fa3 is then included only if "
                        "flash_attn_interface imports; others that fail show as n/a)")
    p.add_argument("--backend", type=_choice_list(BACKEND_CHOICES), default="auto",
                   help="flashcute backend(s), comma-separated; each is its own column "
                        "(auto -> 'flashcute', sm80 -> 'flashcute-sm80', ...)")
    p.add_argument("--hdims", type=_int_list, default="64,128,256", help="head dims")
    p.add_argument("--seqlens", type=_int_list, default="512,1024,2048,4096,8192,16384",
                   help="sequence lengths (seqlen_q = seqlen_k)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both",
                   help="causal masking: both runs each case non-causal then causal")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), default="bf16",
                   help="input dtype; fp8 = float8_e4m3fn for flashcute/FA3, bf16 for baselines")
    p.add_argument("--total-tokens", type=int, default=16384, help="batch * seqlen")
    p.add_argument("--model-dim", type=int, default=2048, help="heads * hdim")
    p.add_argument("--warmup", type=float, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=float, default=100, help="do_bench measurement time, ms")
    p.add_argument("--rounds", type=int, default=1,
                   help="time every column of a case this many times, the column order reversed "
                        "every other round, and report the median (ms_rounds has them all): two "
                        "timings of one kernel in one run differed by up to ~7 %% (run 89)")
    p.add_argument("--cooldown", type=float, default=0.0, metavar="S",
                   help="sleep S seconds before every timing, so that each implementation starts "
                        "from the same idle power state (FlashAttention-3's benchmark sleeps 1 s); "
                        "default 0: back-to-back timings, the board's sustained (power-limited) state")
    p.add_argument("--check", action="store_true",
                   help="once per case, compare every output with cuDNN's (FA2's if cuDNN "
                        "fails) and report the max abs diff")
    p.add_argument("--check-atol", type=float, default=None,
                   help="flag a diff above max(4 * FA2-vs-cuDNN diff, atol) as SUSPECT "
                        "(default: per dtype, "
                        + ", ".join(f"{k} {v:g}" for k, v in CHECK_ATOL.items()) + ")")
    p.add_argument("--flex-dynamic", action="store_true",
                   help="compile FlexAttention with dynamic=True (fewer recompiles, possibly "
                        "slower kernels); default: static shapes, one compile per case")
    p.add_argument("--json", metavar="PATH", help="write environment and all measurements here")
    p.add_argument("--plot", metavar="PATH",
                   help="write a PNG: TFLOP/s vs seqlen, one subplot per (hdim, causal)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the cases and FLOP counts and exit (no GPU needed)")
    args = p.parse_args(argv)
    if args.total_tokens <= 0 or args.model_dim <= 0:
        p.error("--total-tokens and --model-dim must be positive")
    bad = [d for d in args.hdims if args.model_dim % d]
    if bad:
        p.error(f"--model-dim {args.model_dim} is not a multiple of hdim(s) {bad}")
    if args.cooldown < 0:
        p.error("--cooldown must be >= 0")
    if args.warmup < 0 or args.rep <= 0:
        p.error("--warmup must be >= 0 and --rep > 0")
    if args.check_atol is None:
        args.check_atol = CHECK_ATOL[args.dtype]
    return args


def make_cases(args):
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    cases = []
    for d in args.hdims:
        for c in causals:
            for s in args.seqlens:
                b = max(1, args.total_tokens // s)
                h = args.model_dim // d
                flops = 4 * b * h * s * s * d
                if c:
                    flops //= 2
                cases.append(dict(hdim=d, causal=c, seqlen=s, batch=b, heads=h, flops=flops))
    return cases


def column_names(impls, backends):
    cols = []
    for impl in impls:
        if impl == "flashcute":
            cols += ["flashcute" if b == "auto" else f"flashcute-{b}" for b in backends]
        else:
            cols.append(impl)
    return cols


def tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12


# ---------------------------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------------------------


def _run_quiet(cmd, cwd=None):
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
        return r.returncode, r.stdout.strip()
    except Exception:
        return None, ""


def git_info():
    commit = os.environ.get("FLASHCUTE_COMMIT")
    info = {"commit": commit, "commit_source": "FLASHCUTE_COMMIT" if commit else None}
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not commit:
        rc, out = _run_quiet(["git", "rev-parse", "HEAD"], cwd=repo)
        if rc == 0 and out:
            info.update(commit=out, commit_source="git rev-parse")
            # plumbing, read-only: tracked files differ from HEAD (untracked files not counted)
            rc2, _ = _run_quiet(["git", "diff-index", "--quiet", "HEAD", "--"], cwd=repo)
            info["dirty"] = None if rc2 is None else rc2 != 0
    return info


def environment(torch, triton_mod, flashcute_mod, flashcute_err, fa3_mod, fa3_err):
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": None,
        "triton": getattr(triton_mod, "__version__", None) if triton_mod else None,
        "git": git_info(),
    }
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001
        env["cudnn"] = f"unavailable: {e}"
    if torch.cuda.is_available():
        prop = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": prop.name,
            "capability": f"{prop.major}.{prop.minor}",
            "sm_count": prop.multi_processor_count,
            "memory_gib": round(prop.total_memory / 2**30, 1),
            "device_count": torch.cuda.device_count(),
        }
        rc, out = _run_quiet(["nvidia-smi", "--query-gpu=driver_version,power.limit,clocks.max.sm",
                              "--format=csv,noheader", "-i", "0"])
        if rc == 0 and out:
            env["gpu"]["nvidia_smi"] = out
    if flashcute_mod is not None:
        env["flashcute_file"] = getattr(flashcute_mod, "__file__", None)
        try:
            env["flashcute_build_info"] = flashcute_mod.build_info()
        except Exception as e:  # noqa: BLE001
            env["flashcute_build_info"] = f"error: {type(e).__name__}: {e}"
    else:
        env["flashcute_build_info"] = f"flashcute not importable: {flashcute_err}"
    if fa3_mod is not None:
        env["fa3_file"] = getattr(fa3_mod, "__file__", None)
    elif fa3_err:
        env["fa3"] = f"not importable: {fa3_err}"
    return env


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------


def with_cooldown(bench, seconds):
    """bench, after `seconds` of idle GPU (no work queued): every timing starts from the same
    power state instead of inheriting the previous kernel's (the board is power-limited)."""
    def cooled(fn):
        time.sleep(seconds)
        return bench(fn)
    return cooled


def make_timer(torch, triton_mod, warmup, rep):
    """Returns (bench(fn) -> median ms, description)."""
    if triton_mod is not None:
        from triton.testing import do_bench

        def bench(fn):
            try:
                return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
            except TypeError:  # very old triton: no return_mode
                return float(do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])[0])
        return bench, f"triton.testing.do_bench(warmup={warmup}, rep={rep}, median)"

    # Fallback when triton is absent: same idea as do_bench (L2 flush, CUDA events, median).
    flush = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device="cuda")

    def bench(fn):
        fn()
        torch.cuda.synchronize()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(5):
            flush.zero_()
            fn()
        t1.record()
        torch.cuda.synchronize()
        est = max(t0.elapsed_time(t1) / 5, 1e-3)
        for _ in range(max(1, int(warmup / est))):
            fn()
        n = max(1, int(rep / est))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            flush.zero_()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends))
        return float(times[len(times) // 2])
    return bench, f"CUDA-event fallback timer (no triton; warmup={warmup}, rep={rep}, median)"


# ---------------------------------------------------------------------------------------------
# implementations: each returns (fn, context manager factory, output layout)
# ---------------------------------------------------------------------------------------------


class Unavailable(Exception):
    """The implementation cannot run at all in this environment (not a per-case failure)."""


def _causal_mask_mod(b, h, q_idx, kv_idx):  # module level: stable for torch.compile guards
    return q_idx >= kv_idx


class Impls:
    def __init__(self, torch, args):
        self.torch = torch
        self.args = args
        self.flashcute = None
        self.flashcute_err = None
        self.fa3 = None
        self.fa3_err = None
        self._flex = None
        self._flex_err = None
        self._flex_ok_once = False
        self.flex_disabled = None
        try:
            import flashcute  # noqa: F401
            self.flashcute = flashcute
        except Exception as e:  # noqa: BLE001
            self.flashcute_err = f"{type(e).__name__}: {e}"
        try:
            import flash_attn_interface  # FA3 (hopper/ of flash-attention), optional
            self.fa3 = flash_attn_interface
        except Exception as e:  # noqa: BLE001
            self.fa3_err = f"{type(e).__name__}: {e}"

    # -- inputs ---------------------------------------------------------------------------------
    def make_inputs(self, case):
        """q, k, v: bshd for flashcute/FA3 (dtype may be fp8), contiguous bhsd for baselines."""
        torch = self.torch
        b, s, h, d = case["batch"], case["seqlen"], case["heads"], case["hdim"]
        base_dtype = torch.float16 if self.args.dtype == "fp16" else torch.bfloat16
        gen = torch.Generator(device=DEVICE)
        gen.manual_seed(1234 + 7 * s + d + (1 if case["causal"] else 0))
        bshd = [torch.randn(b, s, h, d, device=DEVICE, dtype=base_dtype, generator=gen)
                for _ in range(3)]
        src = None
        if self.args.dtype == "fp8":
            fa = [t.to(torch.float8_e4m3fn) for t in bshd]
            src = bshd
            # baselines see exactly the values flashcute sees, dequantized to bf16
            bshd = [t.to(torch.bfloat16) for t in fa]
        else:
            fa = bshd
        bhsd = [t.transpose(1, 2).contiguous() for t in bshd]
        return {"bshd": fa, "bhsd": bhsd, "bshd16": bshd, "bshd_src": src}

    # -- runners --------------------------------------------------------------------------------
    def runner(self, col, case, inputs):
        causal = case["causal"]
        scale = 1.0 / math.sqrt(case["hdim"])
        if col.startswith("flashcute"):
            if self.flashcute is None:
                raise Unavailable(f"import flashcute failed: {self.flashcute_err}")
            if col in FP8_BF16_IMPLS:  # the 16-bit kernel (see FP8_BF16_IMPLS)
                if inputs["bshd_src"] is None:
                    raise Unavailable(f"{col} needs --dtype fp8")
                backend = "auto"
                q, k, v = inputs["bshd16"] if col == "flashcute_bf16" else inputs["bshd_src"]
            else:
                backend = col.split("-", 1)[1] if "-" in col else "auto"
                q, k, v = inputs["bshd"]
            fc = self.flashcute
            if q.dtype == getattr(self.torch, "float8_e4m3fn", None):
                # e4m3 inputs go through the FA3-compatible entry point (unit descales)
                from flashcute import flash_attn_interface as fai

                def fn():
                    return fai.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
            else:
                def fn():
                    return fc.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal,
                                              backend=backend)
            return fn, contextlib.nullcontext, "bshd"
        if col == "fa3":
            if self.fa3 is None:
                raise Unavailable(f"import flash_attn_interface failed: {self.fa3_err}")
            q, k, v = inputs["bshd"]
            fa3 = self.fa3

            def fn():
                return fa3.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal)
            return fn, contextlib.nullcontext, "bshd"
        if col in ("cudnn", "fa2"):
            from torch.nn.attention import SDPBackend, sdpa_kernel
            import torch.nn.functional as F
            backend = SDPBackend.CUDNN_ATTENTION if col == "cudnn" else SDPBackend.FLASH_ATTENTION
            q, k, v = inputs["bhsd"]

            def fn():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            return fn, (lambda: sdpa_kernel([backend])), "bhsd"
        if col == "flex":
            flex, create_block_mask = self._flex_fns()
            q, k, v = inputs["bhsd"]
            s = case["seqlen"]
            block_mask = (create_block_mask(_causal_mask_mod, B=None, H=None, Q_LEN=s, KV_LEN=s,
                                            device=DEVICE) if causal else None)

            def fn():
                return flex(q, k, v, block_mask=block_mask, scale=scale)
            return fn, contextlib.nullcontext, "bhsd"
        raise ValueError(col)

    def _flex_fns(self):
        if self.flex_disabled:
            raise Unavailable(self.flex_disabled)
        if self._flex is None:
            try:
                import torch._dynamo
                from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            except Exception as e:  # noqa: BLE001
                self.flex_disabled = f"FlexAttention unavailable: {type(e).__name__}: {e}"
                raise Unavailable(self.flex_disabled)
            # one static-shape compile per case: lift dynamo's recompile limits so that later
            # cases don't silently fall back to the (very slow) eager flex path
            for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                         "accumulated_recompile_limit"):
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name,
                            max(getattr(torch._dynamo.config, name), 1024))
            compiled = self.torch.compile(flex_attention, dynamic=bool(self.args.flex_dynamic))
            self._flex = (compiled, create_block_mask)
        return self._flex

    def flex_failed(self, reason):
        # If flex never worked in this run, its failure is environmental (compiler, triton...):
        # stop paying compile attempts for every remaining case.
        if not self._flex_ok_once:
            self.flex_disabled = f"FlexAttention disabled after first failure: {reason}"

    def flex_succeeded(self):
        self._flex_ok_once = True


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------


def _short(e, limit=300):
    msg = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _fmt_tf(x):
    return "n/a" if x is None else f"{x:.1f}"


def _to_bshd(out, layout):
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out if layout == "bshd" else out.transpose(1, 2)


def run(args, cases, cols):
    import torch

    if not torch.cuda.is_available():
        sys.exit("bench_attention: no CUDA device (use --dry-run to list the cases without one)")
    try:
        import triton
    except Exception:  # noqa: BLE001
        triton = None
        print("note: triton not importable; using a CUDA-event fallback timer", flush=True)

    impls = Impls(torch, args)
    bench, timer_desc = make_timer(torch, triton, args.warmup, args.rep)
    if args.cooldown > 0:
        bench, timer_desc = with_cooldown(bench, args.cooldown), f"{timer_desc}, {args.cooldown} s idle before each"
    env = environment(torch, triton, impls.flashcute, impls.flashcute_err, impls.fa3,
                      impls.fa3_err)

    notes = []
    if args.impls is None and impls.fa3 is None:
        cols = [c for c in cols if c != "fa3"]
        notes.append(f"fa3 skipped: {impls.fa3_err}")
    if impls.flashcute is None and any(c.startswith("flashcute") for c in cols):
        notes.append(f"flashcute not importable: {impls.flashcute_err}")
    if args.dtype == "fp8":
        notes.append("dtype fp8: flashcute/FA3 get float8_e4m3fn q,k,v; cuDNN/FA2/Flex run bf16 "
                     "on the same dequantized values (no fp8 SDPA baseline) - ratios compare "
                     "fp8 against bf16")
    notes.append("baselines (cuDNN, FA2, Flex) get contiguous (b,h,s,d) tensors (their best "
                 "case); flashcute/FA3 get contiguous (b,s,h,d)")

    gpu = env.get("gpu", {})
    print(f"# GPU {gpu.get('name')} (cc {gpu.get('capability')}, {gpu.get('sm_count')} SMs) | "
          f"torch {env['torch']} | cuDNN {env['cudnn']} | triton {env['triton']} | "
          f"commit {env['git'].get('commit')}", flush=True)
    print(f"# flashcute build_info: {env['flashcute_build_info']}", flush=True)
    print(f"# timer: {timer_desc}; columns: {', '.join(cols)}; dtype {args.dtype}", flush=True)
    for n in notes:
        print(f"# note: {n}", flush=True)

    results = []  # one record per (case, column)
    checks = []   # one record per case when --check
    context_lost = None
    t_start = time.perf_counter()
    try:
        for ci, case in enumerate(cases):
            tag = (f"[{ci + 1:>{len(str(len(cases)))}}/{len(cases)}] hdim={case['hdim']:<3} "
                   f"causal={'yes' if case['causal'] else 'no ':<3} seqlen={case['seqlen']:<5} "
                   f"b={case['batch']:<3} h={case['heads']:<3}")
            print(tag, end="", flush=True)
            t_case = time.perf_counter()
            inputs = None
            inputs_err = None
            ref = None
            ref_src = None
            case_check = {"hdim": case["hdim"], "causal": case["causal"],
                          "seqlen": case["seqlen"], "diffs": {}}
            if context_lost is None:
                try:
                    inputs = impls.make_inputs(case)
                except Exception as e:  # noqa: BLE001  e.g. out of memory: this case only
                    inputs_err = f"making inputs failed: {_short(e)}"
                    try:
                        torch.cuda.synchronize()
                    except Exception as e2:  # noqa: BLE001
                        context_lost = f"making inputs: {_short(e2, 120)}"
            if args.check and inputs is not None:
                for src in ("cudnn", "fa2"):
                    try:
                        fn, ctx, layout = impls.runner(src, case, inputs)
                        with ctx():
                            ref = _to_bshd(fn(), layout).float()
                        torch.cuda.synchronize()
                        ref_src = src
                        break
                    except Exception as e:  # noqa: BLE001
                        case_check.setdefault("reference_errors", {})[src] = _short(e)
                        ref = None
                case_check["reference"] = ref_src
            timed = []  # (rec, fn, ctx) of the columns that ran, for --rounds
            for col in cols:
                rec = dict(case)
                rec.update(impl=col, ms=None, tflops=None, error=None)
                if context_lost is not None or inputs is None:
                    rec["error"] = (f"skipped: CUDA context unusable ({context_lost})"
                                    if context_lost is not None else inputs_err)
                    results.append(rec)
                    print(f" | {col} n/a", end="", flush=True)
                    continue
                try:
                    fn, ctx, layout = impls.runner(col, case, inputs)
                    with ctx():
                        t0 = time.perf_counter()
                        out = fn()  # first call: errors surface here; flex compiles here
                        torch.cuda.synchronize()
                        rec["first_call_s"] = round(time.perf_counter() - t0, 3)
                        if ref is not None and col != ref_src:
                            o = _to_bshd(out, layout).float()
                            diff = (o - ref).abs().max().item()
                            case_check["diffs"][col] = {
                                "max_abs_diff": diff,
                                "nonfinite": int((~torch.isfinite(o)).sum().item()),
                            }
                            del o
                        del out
                        ms = bench(fn)
                    if args.rounds > 1:
                        rec["ms_rounds"] = [ms]
                        timed.append((rec, fn, ctx))
                    rec["ms"] = ms
                    rec["tflops"] = tflops(case["flops"], ms)
                    if col == "flex":
                        impls.flex_succeeded()
                except Exception as e:  # noqa: BLE001
                    rec["error"] = _short(e)
                    if not isinstance(e, Unavailable):
                        rec["traceback"] = traceback.format_exc(limit=4)
                    if col == "flex" and not isinstance(e, Unavailable):
                        impls.flex_failed(rec["error"])
                    try:
                        torch.cuda.synchronize()
                    except Exception as e2:  # noqa: BLE001  sticky CUDA error: nothing more runs
                        context_lost = f"after {col}: {_short(e2, 120)}"
                results.append(rec)
                extra = f" ({rec['ms']:.3f} ms)" if rec["ms"] is not None else ""
                if col == "flex" and rec.get("first_call_s", 0) > 1:
                    extra += f" [compile {rec['first_call_s']:.1f}s]"
                print(f" | {col} {_fmt_tf(rec['tflops'])}{extra}", end="", flush=True)
            if timed:
                _more_rounds(timed, bench, args.rounds, torch)
                print(" | median of " + str(args.rounds) + ": " + " ".join(
                    f"{r['impl']} {_fmt_tf(r['tflops'])}" for r, _, _ in timed), end="", flush=True)
            if args.check:
                _judge_check(case_check, cols, args.check_atol)
                checks.append(case_check)
                flagged = [c for c, d in case_check["diffs"].items()
                           if isinstance(d, dict) and d.get("suspect")]
                shown = " ".join(f"{c}={d['max_abs_diff']:.2e}"
                                 for c, d in case_check["diffs"].items()
                                 if isinstance(d, dict))
                print(f" | maxdiff vs {ref_src or 'none'}: {shown or 'n/a'}"
                      + (f" SUSPECT: {','.join(flagged)}" if flagged else ""), end="")
            print(f" | {time.perf_counter() - t_case:.1f}s", flush=True)
            # free memory between cases
            del inputs, ref
            gc.collect()
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    except KeyboardInterrupt:
        print("\ninterrupted: reporting what was measured", flush=True)
        notes.append("run interrupted")
    elapsed = time.perf_counter() - t_start

    if impls.flex_disabled and "flex" in cols:
        notes.append(impls.flex_disabled)
    if context_lost:
        notes.append(f"CUDA context lost ({context_lost}); later cases skipped")

    print()
    print(markdown_table(results, checks, cols, args))
    for n in notes:
        print(f"- note: {n}")
    errors = {}
    for r in results:
        if r["error"] and not r["error"].startswith("skipped"):
            errors.setdefault((r["impl"], r["error"]), []).append(
                f"{r['hdim']}/{'c' if r['causal'] else 'nc'}/{r['seqlen']}")
    for (col, err), where in errors.items():
        print(f"- n/a {col} ({len(where)} case(s), e.g. {where[0]}): {err}")
    print(f"\nelapsed: {elapsed:.1f} s ({len(cases)} cases x {len(cols)} columns)", flush=True)

    report = {
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "argv": sys.argv,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "config": {k: v for k, v in vars(args).items()},
        "timer": timer_desc,
        "flop_convention": "4*batch*heads*seqlen^2*hdim, halved for causal",
        "columns": cols,
        "notes": notes,
        "elapsed_s": round(elapsed, 1),
        "results": results,
        "checks": checks,
    }
    if args.json:
        write_json(args.json, report)
    if args.plot:
        plot(args.plot, results, cols, args)
    return report


def _more_rounds(timed, bench, rounds, torch):
    """Rounds 2..N of one case's timings, the column order reversed every other round (so that
    no column always runs first or last after the GPU's clocks settle); ms becomes the median."""
    import statistics
    for rnd in range(1, rounds):
        for rec, fn, ctx in (timed[::-1] if rnd % 2 else timed):
            try:
                with ctx():
                    rec["ms_rounds"].append(bench(fn))
            except Exception as e:  # noqa: BLE001
                rec.setdefault("round_errors", []).append(_short(e))
                with contextlib.suppress(Exception):
                    torch.cuda.synchronize()
    for rec, _, _ in timed:
        rec["ms"] = statistics.median(rec["ms_rounds"])
        rec["tflops"] = tflops(rec["flops"], rec["ms"])


def _judge_check(case_check, cols, atol):
    diffs = case_check["diffs"]
    noise = None
    # FA2 vs cuDNN (same dtype, two independent exact kernels) is the noise level of the case
    if case_check.get("reference") == "cudnn" and isinstance(diffs.get("fa2"), dict):
        noise = diffs["fa2"]["max_abs_diff"]
    tol = max(4 * noise, atol) if noise is not None and math.isfinite(noise) else atol
    case_check["tolerance"] = tol
    for c, d in diffs.items():
        if isinstance(d, dict):
            md = d["max_abs_diff"]
            d["suspect"] = bool(d["nonfinite"] or not math.isfinite(md) or md > tol)


def markdown_table(results, checks, cols, args):
    by = {(r["hdim"], r["causal"], r["seqlen"], r["impl"]): r for r in results}
    keys = list(dict.fromkeys((r["hdim"], r["causal"], r["seqlen"]) for r in results))
    fc_cols = [c for c in cols if c.startswith("flashcute")]
    ratio_cols = []
    for c in fc_cols:
        if "cudnn" in cols:
            ratio_cols.append((c, "cudnn"))
        if c == "flashcute-sm80" and "fa2" in cols:
            ratio_cols.append((c, "fa2"))
        if args.dtype == "fp8" and c not in FP8_BF16_IMPLS:  # e4m3 against the bf16 kernel
            ratio_cols += [(c, b) for b in FP8_BF16_IMPLS if b in cols]
    chk = {(c["hdim"], c["causal"], c["seqlen"]): c for c in checks}

    def name(c):
        return PRETTY.get(c, c)
    head = ["hdim", "causal", "seqlen"] + [name(c) for c in cols]
    head += [f"{name(a)}÷{name(b)}" for a, b in ratio_cols]
    if checks:
        head += [f"Δ{name(c)}" for c in fc_cols]
    lines = [f"TFLOP/s, forward, {args.dtype}"
             + (" (baselines bf16)" if args.dtype == "fp8" else "")
             + f", batch*seqlen={args.total_tokens}, heads*hdim={args.model_dim}",
             "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        d, c, s = key
        row = [str(d), "yes" if c else "no", str(s)]
        row += [_fmt_tf(by.get(key + (col,), {}).get("tflops")) for col in cols]
        for a, b in ratio_cols:
            ta = by.get(key + (a,), {}).get("tflops")
            tb = by.get(key + (b,), {}).get("tflops")
            row.append(f"{ta / tb:.2f}" if ta and tb else "n/a")
        if checks:
            cc = chk.get(key, {}).get("diffs", {})
            for col in fc_cols:
                x = cc.get(col)
                row.append("n/a" if not isinstance(x, dict)
                           else f"{x['max_abs_diff']:.1e}" + (" ⚠" if x.get("suspect") else ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_json(path, report):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    print(f"wrote {path}", flush=True)


def plot(path, results, cols, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        print(f"note: --plot skipped, matplotlib not importable ({_short(e)})", flush=True)
        return
    hdims = list(dict.fromkeys(r["hdim"] for r in results))
    causals = list(dict.fromkeys(r["causal"] for r in results))
    if not hdims:
        print("note: --plot skipped, nothing measured", flush=True)
        return
    fig, axes = plt.subplots(len(hdims), len(causals), squeeze=False,
                             figsize=(5.5 * len(causals), 3.8 * len(hdims)))
    for i, d in enumerate(hdims):
        for j, c in enumerate(causals):
            ax = axes[i][j]
            for col in cols:
                pts = sorted((r["seqlen"], r["tflops"]) for r in results
                             if r["hdim"] == d and r["causal"] == c and r["impl"] == col
                             and r["tflops"] is not None)
                if pts:
                    style = "-o" if col.startswith("flashcute") else "--s"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=4,
                            color=f"C{cols.index(col) % 10}", label=PRETTY.get(col, col))
            ax.set_xscale("log", base=2)
            seqs = sorted({r["seqlen"] for r in results})
            ax.set_xticks(seqs)
            ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 and s % 1024 == 0 else str(s)
                                for s in seqs])
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"hdim {d}, {'causal' if c else 'non-causal'}")
            ax.set_xlabel("seqlen")
            ax.set_ylabel("TFLOP/s")
            ax.legend(fontsize=8)
    fig.suptitle(f"forward attention, {args.dtype}"
                 + (" (baselines bf16)" if args.dtype == "fp8" else "")
                 + f", batch·seqlen={args.total_tokens}, heads·hdim={args.model_dim}")
    fig.tight_layout()
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}", flush=True)


def dry_run(args, cases, cols):
    print(f"dry run: {len(cases)} cases x {len(cols)} columns ({', '.join(cols)}); "
          f"dtype {args.dtype}; batch*seqlen={args.total_tokens}, heads*hdim={args.model_dim}; "
          f"do_bench warmup={args.warmup} ms rep={args.rep} ms")
    if args.dtype == "fp8":
        print("note: fp8 -> flashcute/FA3 take float8_e4m3fn inputs, baselines run bf16")
    if args.impls is None:
        print("note: fa3 is dropped at run time unless flash_attn_interface imports")
    print(f"{'hdim':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'heads':>5} {'GFLOP':>10}")
    for c in cases:
        print(f"{c['hdim']:>4} {'yes' if c['causal'] else 'no':>6} {c['seqlen']:>6} "
              f"{c['batch']:>5} {c['heads']:>5} {c['flops'] / 1e9:>10.1f}")
    total = sum(c["flops"] for c in cases)
    print(f"total {total / 1e12:.2f} TFLOP per pass over all cases")
    if args.json:
        write_json(args.json, {
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "dry_run": True, "config": vars(args), "columns": cols, "cases": cases,
            "git": git_info(),
        })


def main(argv=None):
    args = parse_args(argv)
    cases = make_cases(args)
    impls = args.impls if args.impls is not None else [
        i for i in IMPL_CHOICES if i not in FP8_BF16_IMPLS or args.dtype == "fp8"]
    cols = column_names(impls, args.backend)
    if args.dry_run:
        dry_run(args, cases, cols)
        return 0
    run(args, cases, cols)
    return 0


if __name__ == "__main__":
    sys.exit(main())
