"""SM clock and board power while one kernel runs back to back (is a case power/clock limited?).
For each case: ~2 s of back-to-back calls while nvidia-smi is polled every 100 ms; prints the
median SM clock (MHz), power (W), the TFLOP/s of that window and TFLOP/s per GHz.
    python3 benchmarks/diag_clocks.py [--cases 128:4096:nc,128:4096:causal] [--impls flashcute,cudnn,e4m3]
                                      [--repeat 2] [--seconds 3]
"""
import argparse
import subprocess
import threading
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def poll(samples, stop):
    while not stop.is_set():
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout.strip().split(",")
        try:
            samples.append((float(out[0]), float(out[1])))
        except (ValueError, IndexError):
            pass
        time.sleep(0.1)


def run_case(name, fn, fl, seconds=2.0):
    fn(); torch.cuda.synchronize()
    samples, stop = [], threading.Event()
    th = threading.Thread(target=poll, args=(samples, stop)); th.start()
    t0 = time.perf_counter(); n = 0
    e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        n += 10
        torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    stop.set(); th.join()
    ms = e0.elapsed_time(e1) / n
    s = sorted(samples[len(samples) // 4:])  # skip the ramp
    clk = sorted(x[0] for x in s)[len(s) // 2] if s else float("nan")
    pw = sorted(x[1] for x in s)[len(s) // 2] if s else float("nan")
    tf = fl / ms / 1e9
    print(f"{name:34s} {tf:7.1f} TFLOP/s  SM {clk:6.0f} MHz  {pw:5.0f} W  {tf / clk * 1e3:6.1f} TFLOP/s per GHz"
          f"  ({len(s)} samples)", flush=True)


def main():
    import flashcute
    from flashcute import flash_attn_interface as fai
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="128:4096:nc,128:4096:causal,128:16384:nc,256:16384:nc",
                    help="hdim:seqlen:nc|causal, comma-separated")
    ap.add_argument("--impls", default="flashcute,cudnn,e4m3")
    ap.add_argument("--repeat", type=int, default=1, help="run the whole list this many times")
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    cases = [(int(d), int(s), c == "causal") for d, s, c in (x.split(":") for x in a.cases.split(","))]
    impls = a.impls.split(",")
    for d, s, causal in cases * a.repeat:
        b, h = 16384 // s, 2048 // d
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
        fl = 4 * b * s * s * h * d / (2 if causal else 1)
        sc = d ** -0.5
        tag = f"d{d} s{s} {'causal' if causal else 'nc'}"
        if "flashcute" in impls:
            run_case(f"flashcute bf16 {tag}", lambda: flashcute.flash_attn_func(q, k, v, softmax_scale=sc, causal=causal),
                     fl, a.seconds)
        if "cudnn" in impls:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                run_case(f"cudnn bf16 {tag}", lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=sc),
                         fl, a.seconds)
        if "e4m3" in impls:
            run_case(f"flashcute e4m3 {tag}", lambda: fai.flash_attn_func(q8, k8, v8, softmax_scale=sc, causal=causal),
                     fl, a.seconds)


if __name__ == "__main__":
    main()
