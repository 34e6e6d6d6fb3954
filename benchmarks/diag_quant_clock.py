"""The FP8 mode's two kernels timed alone and in the mode's own sequence, with the SM clock and
the host's time per call (sessions 44-45).

Question (RESULTS.md, runs 162-163): the block quantizer takes 0.087 ms alone (H200) but ~0.11 ms
in the FP8 mode's sweep, and at d=128 4k the mode's time exceeds quantizer + V^T kernel by
~0.02-0.03 ms. Is that the SM clock (a latency-bound quantizer slowed by the 700 W limit that the
attention kernel holds the card at), the attention kernel running slower after the quantizer, or
the host (the mode's Python path)?
Every state runs batches of 20 repetitions of a sequence of calls (bench_fp8_mode.py's columns:
quant-blocks, fp8-kernel-blocks, fp8-mode, bf16), a CUDA event before and after every call, and
the GPU kept fed: each batch is queued behind a GPU sleep longer than the host needs to queue it,
so no call waits for the host (run 164 showed the unfed quantizer timing the host's Python time).
Reported per state and call: the median ms, and nvidia-smi's SM clock and power meanwhile
(diag_clocks.poll); and the host's microseconds per call (diag_host_split.host_us).
  quant                 the quantizer back to back
  quant, kernel         the FP8 mode's two kernels as the mode issues them (both timed)
  mode                  flashcute.flash_attn_func(q, k, v, fp8=True), the whole mode
  bf16                  the bf16 kernel (the mode's baseline, in the same protocol)
  kv quant, kernel      the quantizer on k and v only, then the kernel: q's share (session 48)
  quant after bf16      the quantizer right after `--seconds` of the bf16 kernel
    python3 benchmarks/diag_quant_clock.py [--hdim 128] [--seqlen 4096] [--causal] [--seconds 2] [--json out.json]
"""
import argparse
import json
import statistics
import threading
import time

from bench_fp8_mode import make_cases, parse_args, runners  # noqa: E402  (same folder)
from diag_clocks import poll  # noqa: E402
from diag_host_split import host_us  # noqa: E402  (host us per call, the calls queued ahead of the GPU)

BATCH = 20
SLEEP_CYCLES_PER_US = 2000  # torch.cuda._sleep spins clock cycles: ~2 GHz (generous below it)


def timed_state(torch, seconds, seq, host):
    """Median ms of each call of seq (a list of functions, run in order, BATCH times per batch),
    with the median SM clock and power of diag_clocks.poll's samples meanwhile. Each batch waits
    behind a GPU sleep as long as the host falls behind the GPU over a batch (1.3x; the first
    batch's from the host time alone), so no call waits for the host, and the sleep stays short
    where the GPU's own work keeps the host ahead (the power state then is the sequence's)."""
    host_us_seq = sum(host) + 20 * len(seq)  # + the two events' records per call
    lag_us = BATCH * host_us_seq
    stop, clocks, times = threading.Event(), [], [[] for _ in seq]
    th = threading.Thread(target=poll, args=(clocks, stop))
    th.start()
    t_end = time.time() + seconds
    while time.time() < t_end:
        torch.cuda._sleep(int((1.3 * lag_us + 200) * SLEEP_CYCLES_PER_US))
        evs = []
        for _ in range(BATCH):
            for fn in seq:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                evs.append((e0, e1))
        torch.cuda.synchronize()
        batch = [a.elapsed_time(b) for a, b in evs]
        for i, t in enumerate(batch):
            times[i % len(seq)].append(t)
        lag_us = max(0.0, BATCH * host_us_seq - 1e3 * sum(batch))
    stop.set()
    th.join()
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    return {"ms": [med(t) for t in times], "calls": len(times[0]), "sm_mhz": med([c[0] for c in clocks]),
            "power_w": med([c[1] for c in clocks]), "samples": len(clocks)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hdim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    import flashcute

    # bench_fp8_mode.py's case (FlashAttention's convention) and its column functions
    case, = make_cases(parse_args(["--hdims", str(a.hdim), "--seqlens", str(a.seqlen),
                                   "--causal", "yes" if a.causal else "no"]))
    fns = runners(case, torch, flashcute)
    names = {"quant": "quant-blocks", "kernel": "fp8-kernel-blocks", "mode": "fp8-mode", "bf16": "bf16",
             "kv quant": "quant-kv-blocks"}
    f = {k: fns[c] for k, c in names.items()}
    if f["quant"] is None:
        raise SystemExit(f"diag_quant_clock: no block-wise V^T quantizer at hdim {a.hdim}")
    for fn in f.values():
        fn()
    host = {k: host_us(fn, n=100) for k, fn in f.items()}  # 100: well inside the launch queue
    # "kv quant, kernel": the sequence with q's quantization left out, the most a kernel that
    # rotates and casts q itself could save (session 48)
    states = [("quant", ["quant"]), ("quant, kernel", ["quant", "kernel"]), ("mode", ["mode"]), ("bf16", ["bf16"]),
              ("kv quant, kernel", ["kv quant", "kernel"])]
    rows = []
    time.sleep(1.0)
    for name, keys in states:
        rows.append((name, keys, timed_state(torch, a.seconds, [f[k] for k in keys], [host[k] for k in keys])))
    t_end = time.time() + a.seconds
    while time.time() < t_end:
        for _ in range(BATCH):
            f["bf16"]()
        torch.cuda.synchronize()
    rows.append(("quant after bf16", ["quant"], timed_state(torch, a.seconds, [f["quant"]], [host["quant"]])))
    d, s = case["hdim"], case["seqlen"]
    print(f"# {torch.cuda.get_device_name()} | hdim {d} seqlen {s} causal {a.causal} batch {case['batch']} "
          f"heads {case['heads']} | host us per call: " + ", ".join(f"{k} {v:.0f}" for k, v in host.items()))
    print("| state | ms per call (median) | calls | SM clock MHz (median) | power W (median) |")
    print("|---|---|---|---|---|")
    for name, keys, r in rows:
        ms = " + ".join(f"{k} {m:.4f}" for k, m in zip(keys, r["ms"]))
        print(f"| {name} | {ms} | {r['calls']} | {r['sm_mhz']:.0f} | {r['power_w']:.0f} |")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"hdim": d, "seqlen": s, "causal": a.causal, "host_us": host,
                       "rows": [dict(state=n, calls_timed=k, **r) for n, k, r in rows]}, fh, indent=1)


if __name__ == "__main__":
    main()
