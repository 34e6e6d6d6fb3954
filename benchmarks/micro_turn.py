"""Runs benchmarks/ablation/micro_turn.cu (built into .carry/micro/micro_turn.so): SM cycles per
iteration of each consumer building block (bf16, d = 128, 64 x 128 per warpgroup), alone and
with the other consumer warpgroup busy, one CTA on an otherwise idle GPU.

    python benchmarks/micro_turn.py [--lib .carry/micro/micro_turn.so] [--json out.json]
"""
import argparse
import ctypes
import json

import torch

MODES = {  # name: (warpgroup 0's mode, warpgroup 1's mode); bits 1 S GEMM, 2 P V GEMM, 4 softmax
    "S alone": (1, 0),
    "PV alone": (2, 0),
    "S+PV alone": (3, 0),
    "S+PV both WGs": (3, 3),
    "S,PV interleaved alone": (128 | 3, 0),
    "S,PV interleaved both WGs": (128 | 3, 128 | 3),
    "softmax alone": (4, 0),
    "softmax | other WG S+PV": (4, 3),
    "S+PV+softmax alone (serial)": (7, 0),
    "S+PV+softmax both WGs": (7, 7),
    "loop: ping-pong, hoisted wait": (8 | 16, 8 | 16),
    "loop: ping-pong, pinned wait": (8 | 16 | 32, 8 | 16 | 32),
    "loop: no ping-pong, hoisted wait": (8, 8),
    "loop: no ping-pong, pinned wait": (8 | 32, 8 | 32),
    "loop: one WG, pinned wait": (8 | 32, 0),
    "loop: one WG, hoisted wait": (8, 0),
    "loop: interleaved, ping-pong": (8 | 16 | 64, 8 | 16 | 64),
    "loop: interleaved, no ping-pong": (8 | 64, 8 | 64),
    "loop: interleaved, one WG": (8 | 64, 0),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", default=".carry/micro/micro_turn.so")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--json")
    a = ap.parse_args()
    f = ctypes.CDLL(a.lib).fc_micro_turn
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    sink = torch.zeros(256, device="cuda")
    res = {}
    for name, (m0, m1) in MODES.items():
        for _ in range(2):  # the second run is reported (clocks up)
            assert f(m0, m1, a.iters, out.data_ptr(), sink.data_ptr()) == 0
        c = (out.cpu().double() / a.iters).tolist()
        res[name] = {"wg0_cycles_per_iter": round(c[0], 1), "wg1_cycles_per_iter": round(c[1], 1) if m1 else None}
        print(f"{name:32s} wg0 {c[0]:8.1f}  wg1 {c[1] if m1 else float('nan'):8.1f} cycles/iter", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
