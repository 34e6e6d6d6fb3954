"""The FP8 mode's quantizer alone and in the mode's own sequence, with the SM clock (session 44).

Question (RESULTS.md, run 163): the block quantizer takes 0.087 ms alone but ~0.11 ms in the FP8 mode's
sweep. Is that the SM clock (a latency-bound kernel slowed by the 700 W limit that the attention kernel
holds the card at)? Per state, for `--seconds` each, CUDA events around every quantizer call, the
median of its time, and nvidia-smi's SM clock and power sampled meanwhile:
  alone     the quantizer back to back
  in mode   quantizer, then the e4m3 V^T kernel on its outputs (the FP8 mode's two kernels), repeated
  after bf16  the quantizer back to back right after `--seconds` of the bf16 kernel
    python3 benchmarks/diag_quant_clock.py [--hdim 128] [--seqlen 4096] [--seconds 2] [--json out.json]
"""
import argparse
import json
import statistics
import subprocess
import threading
import time


def sample_clocks(stop, out):
    """nvidia-smi's SM clock (MHz) and power (W) until stop is set."""
    while not stop.is_set():
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True)
        try:
            mhz, watts = (float(x) for x in r.stdout.strip().split(","))
            out.append((mhz, watts))
        except ValueError:
            pass
        time.sleep(0.05)


def timed_state(torch, seconds, quant, after=None):
    """Median ms of quant() over `seconds` (each call between two events; after() follows it untimed)."""
    stop, clocks, times = threading.Event(), [], []
    th = threading.Thread(target=sample_clocks, args=(stop, clocks))
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
    from flashcute import fp8 as F
    from flashcute import ops

    d, s = a.hdim, a.seqlen
    b, h = max(1, 16384 // s), 2048 // d  # FlashAttention's convention, as bench_fp8_mode.py
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    block = ops.vt_key_block(d, s)

    def quant():
        return F.quantize_qkv(q, k, v, rotate=True, v_colmajor=True, block_keys=block)

    q8, k8, vt8, ds = quant()

    def kernel():  # the FP8 mode's attention call on the quantizer's outputs
        return ops.call_fwd(q8, k8, vt8, descales=ds, softmax_scale=d ** -0.5, causal=False, window_left=-1,
                            window_right=-1, softcap=0.0, top_left=False, backend="auto",
                            out_dtype=torch.bfloat16, v_is_vt=True)

    def bf16():
        return flashcute.flash_attn_func(q, k, v)

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
    print(f"# {torch.cuda.get_device_name()} | hdim {d} seqlen {s} batch {b} heads {h} | block {block}")
    print("| state | quantizer ms (median) | calls | SM clock MHz (median) | power W (median) |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['quant_ms']:.4f} | {r['calls']} | {r['sm_mhz']:.0f} | {r['power_w']:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"hdim": d, "seqlen": s, "rows": [dict(state=n, **r) for n, r in rows]}, f, indent=1)


if __name__ == "__main__":
    main()
