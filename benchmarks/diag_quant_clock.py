"""The FP8 mode's quantizer alone and in the mode's own sequence, with the SM clock (session 44).

Question (RESULTS.md, run 163): the block quantizer takes 0.087 ms alone but ~0.11 ms in the FP8 mode's
sweep. Is that the SM clock (a latency-bound kernel slowed by the 700 W limit that the attention kernel
holds the card at)? Per state, for `--seconds` each, CUDA events around every quantizer call, the
median of its time, and nvidia-smi's SM clock and power sampled meanwhile (diag_clocks.poll);
the calls are bench_fp8_mode.py's columns quant-blocks, fp8-kernel-blocks and bf16:
  alone     the quantizer back to back
  in mode   quantizer, then the e4m3 V^T kernel on its outputs (the FP8 mode's two kernels), repeated
  after bf16  the quantizer back to back right after `--seconds` of the bf16 kernel
    python3 benchmarks/diag_quant_clock.py [--hdim 128] [--seqlen 4096] [--seconds 2] [--json out.json]
"""
import argparse
import json
import statistics
import threading
import time

from bench_fp8_mode import make_cases, parse_args, runners  # noqa: E402  (same folder)
from diag_clocks import poll  # noqa: E402


def timed_state(torch, seconds, quant, after=None):
    """Median ms of quant() over `seconds` (each call between two events; after() follows it untimed),
    with the median SM clock and power of diag_clocks.poll's samples meanwhile."""
    stop, clocks, times = threading.Event(), [], []
    th = threading.Thread(target=poll, args=(clocks, stop))
    th.start()
    t_end = time.time() + seconds
    while time.time() < t_end:
        evs = []
        for _ in range(20):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            quant()
            e1.record()
            if after is not None:
                after()
            evs.append((e0, e1))
        torch.cuda.synchronize()
        times += [a.elapsed_time(b) for a, b in evs]
    stop.set()
    th.join()
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return {"quant_ms": med(times), "calls": len(times), "sm_mhz": med([c[0] for c in clocks]),
            "power_w": med([c[1] for c in clocks]), "samples": len(clocks)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import flashcute

    # bench_fp8_mode.py's case (FlashAttention's convention) and its column functions: the FP8
    # mode's quantizer call, its attention call on that quantizer's outputs, the bf16 kernel
    case, = make_cases(parse_args(["--hdims", str(a.hdim), "--seqlens", str(a.seqlen)]))
    fns = runners(case, torch, flashcute)
    quant, kernel, bf16 = fns["quant-blocks"], fns["fp8-kernel-blocks"], fns["bf16"]
    if quant is None:
        raise SystemExit(f"diag_quant_clock: no block-wise V^T quantizer at hdim {a.hdim}")
    for fn in (quant, kernel, bf16):
        fn()
    torch.cuda.synchronize()
    rows = []
    time.sleep(1.0)
    rows.append(("alone", timed_state(torch, a.seconds, quant)))
    rows.append(("in mode (then the V^T kernel)", timed_state(torch, a.seconds, quant, after=kernel)))
    t_end = time.time() + a.seconds
    while time.time() < t_end:
        for _ in range(20):
            bf16()
        torch.cuda.synchronize()
    rows.append(("right after bf16", timed_state(torch, a.seconds, quant)))
    rows.append(("alone again", timed_state(torch, a.seconds, quant)))
    d, s = case["hdim"], case["seqlen"]
    print(f"# {torch.cuda.get_device_name()} | hdim {d} seqlen {s} batch {case['batch']} heads {case['heads']}")
    print("| state | quantizer ms (median) | calls | SM clock MHz (median) | power W (median) |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['quant_ms']:.4f} | {r['calls']} | {r['sm_mhz']:.0f} | {r['power_w']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"hdim": d, "seqlen": s, "rows": [dict(state=n, **r) for n, r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
