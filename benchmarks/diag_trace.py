"""Records the sm90 kernel's event trace (src/sm90/trace.cuh) for ablation libraries built with
-DFLASHCUTE_SM90_TRACE=1 (names containing "_tr"), after a second of untraced warm-up calls, and
writes the raw buffers (npz) and benchmarks/trace_report.py's summaries (JSON).

    scripts/build_ablation.sh 90 128 tr:-DFLASHCUTE_SM90_TRACE=1,-DABL_TILE_COUNTER=2
    python benchmarks/diag_trace.py --seqlens 4096 --causal both --out $OUT/trace
"""
import argparse
import ctypes
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ablation import case_grid, is_vt, launcher, load, variant_inputs, variant_parts  # noqa: E402
from trace_report import summarize  # noqa: E402

CAP, ROLES = 16383, 4  # trace.cuh's kTraceCap, kTraceRoles


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=".carry/ablation")
    ap.add_argument("--seqlens", default="4096")
    ap.add_argument("--causal", choices=["both", "no", "yes"], default="both")
    ap.add_argument("--out", required=True, help="path prefix: writes PREFIX.npz and PREFIX.json")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--raw-max-seqlen", type=int, default=4096,
                    help="keep the raw buffers (npz) only up to this seqlen (16k's are ~10 MB each)")
    a = ap.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    raw, summary = {}, {}
    for path in sorted(glob.glob(os.path.join(a.dir, "sm90*_hd*_tr*.so"))):
        fam, d, name = variant_parts(path)
        lib = ctypes.CDLL(path)
        lib.fc_trace_set.argtypes = [ctypes.c_void_p]
        f = load(path)
        buf = torch.zeros(num_sms * ROLES * (CAP + 1) * 2, dtype=torch.int64, device="cuda")
        for causal, s in case_grid(a.causal, a.seqlens):
            b, h = 16384 // s, 2048 // d
            # tr<variant>: a traced build of <variant>; trvt*: the FP8 mode's V^T kernel
            vt = fam.endswith("f8") and is_vt(name[2:])
            q, k, v = variant_inputs(fam, s, d, vt)
            out = torch.full((b, s, h, d), math.nan, device="cuda", dtype=torch.bfloat16)
            lse = torch.full((b, h, s), math.nan, device="cuda", dtype=torch.float32)
            run = launcher(f, q, k, v, out, lse, causal, num_sms, vt=vt)
            assert lib.fc_trace_set(None) == 0
            t0 = time.time()
            while time.time() - t0 < a.warmup_s:
                run()
                torch.cuda.synchronize()
            buf.zero_()
            assert lib.fc_trace_set(ctypes.c_void_p(buf.data_ptr())) == 0
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            run()
            e1.record()
            torch.cuda.synchronize()
            assert lib.fc_trace_set(None) == 0
            ms = e0.elapsed_time(e1)
            assert not out.isnan().any(), "the traced launch left NaN in the output"
            arr = buf.view(num_sms, ROLES, CAP + 1, 2).cpu().numpy().view(np.uint64)
            n = int(arr[:, :, 0, 0].max())
            arr = arr[:, :, :n + 1].copy()
            key = f"{fam}_d{d}_{name}_s{s}_{'causal' if causal else 'full'}"
            if s <= a.raw_max_seqlen:
                raw[key] = arr
            sm = summarize(arr, roles=ROLES)
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            sm["traced_launch_ms"] = ms
            sm["traced_tflops"] = flops / ms / 1e9
            sm["clock_ghz_est"] = sm["cta_duration_cycles"]["max"] / (ms * 1e6)
            summary[key] = sm
            print(key, json.dumps({k: sm[k] for k in ("traced_tflops", "period_cycles", "blocks_mean",
                                                      "overhead_blocks_mean", "share_in_steady_loop",
                                                      "tail_loss", "clock_ghz_est")}), flush=True)
    if raw:  # (a device call brings back at most 8 files: none for an empty archive)
        np.savez_compressed(a.out + ".npz", **raw)
    with open(a.out + ".json", "w") as fh:
        json.dump(summary, fh, indent=1)


if __name__ == "__main__":
    main()
