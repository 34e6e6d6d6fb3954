"""One small call of every ablation variant, checked against SDPA, each synchronised: a variant
that hangs or faults shows here within seconds (run it under `timeout` before bench_ablation.py).
    timeout 60 python3 benchmarks/smoke_ablation.py [--dir .carry/ablation]
    compute-sanitizer --tool racecheck python3 benchmarks/smoke_ablation.py --dir D --small --num-sms 5
"""
import argparse
import importlib.util
import glob
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_ablation  # noqa: E402


def _load_reference():
    """flashcute.reference, loaded from the source tree: an ablation call carries only the
    variant libraries, not the package (whose __init__ would load libflashcute)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "flashcute", "reference.py")
    spec = importlib.util.spec_from_file_location("flashcute_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=".carry/ablation")
    ap.add_argument("--num-sms", type=int, default=0,
                    help="CTAs of the persistent grid (default: every SM); a few put many tiles on each")
    ap.add_argument("--small", action="store_true",
                    help="small shapes only (under compute-sanitizer), best with --num-sms 5")
    ap.add_argument("--only", default="",
                    help="comma-separated substrings: only the variants whose name contains one (e.g. under racecheck)")
    ap.add_argument("--failed-out",
                    help="write the paths of the variants that failed here, one per line (the others are "
                         "still checked: a kit can set the failed ones aside and time the rest)")
    ap.add_argument("--bitwise", action="store_true",
                    help="after the checks, group the variants of each family whose outputs and LSE are bitwise equal, per case "
                         "(a schedule change that should not touch the arithmetic, e.g. two P buffers, must keep the bits)")
    a = ap.parse_args()
    results = {}  # (family, hdim, case) -> [(variant, out, lse)] (--bitwise)
    failed = []  # paths of the variants with a wrong result
    num_sms = a.num_sms or torch.cuda.get_device_properties(0).multi_processor_count
    attention_ref = _load_reference().attention_ref  # float64, causal bottom-right, empty rows 0
    # (batch, seqlen_q, seqlen_k, heads): several tiles per CTA; then fewer keys than queries, so
    # that causal tiles of the first query rows have no work (the roles must skip the same ones),
    # and tile counts that do not divide the grid; then fewer queries than keys.
    shapes = [(3, 1024, 1024, 16), (2, 1000, 300, 20), (2, 333, 1000, 8)]
    if a.small:  # 3 query blocks x 6 heads, and causal tiles without keys (300 queries, 100 keys)
        shapes = [(2, 300, 300, 3), (2, 300, 100, 3)]
    for path in sorted(glob.glob(os.path.join(a.dir, "sm90*_hd*_*.so"))):
        fam, d, name = bench_ablation.variant_parts(path)
        if name.startswith("sol"):  # speed-of-light builds give wrong results on purpose
            continue
        if a.only and not any(x in name for x in a.only.split(",")):
            continue
        fp8 = fam.endswith("f8")
        f = bench_ablation.load(path)
        for (b, sq, sk, h), causal in ((shape, c) for shape in shapes for c in (False, True)):
            torch.manual_seed(0)
            q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            ins = (q, k, v)
            if fp8:
                ins = tuple(x.to(torch.float8_e4m3fn) for x in ins)
                q, k, v = (x.to(torch.bfloat16) for x in ins)
            vt = fp8 and bench_ablation.is_vt(name)
            if vt:  # the FP8 mode's V^T-input kernel
                ins = (ins[0], ins[1], bench_ablation.v_colmajor(ins[2]))
            out = torch.full_like(q, math.nan)
            lse = torch.full((b, h, sq), math.nan, device="cuda", dtype=torch.float32)
            t0 = time.time()
            bench_ablation.launcher(f, *ins, out, lse, causal, num_sms, vt=vt)()
            torch.cuda.synchronize()
            ref_out, ref_lse = attention_ref(q, k, v, causal=causal)
            err = (out.double() - ref_out).abs().max().item()
            # LSE: the row's own statistics (a tile's epilogue with another tile's softmax
            # state shows here); rows without visible keys must be -inf in both.
            empty = torch.isinf(ref_lse)
            lse_err = (lse.double() - ref_lse)[~empty].abs().max().item() if (~empty).any() else 0.0
            lse_empty_ok = bool((lse[empty] == -math.inf).all())
            print(f"{os.path.basename(path)} {b}x{sq}x{sk}x{h} causal={causal} max|err|={err:.3g} "
                  f"lse {lse_err:.3g} ({time.time() - t0:.2f} s)", flush=True)
            if not (err < (0.25 if fp8 else 2e-2) and lse_err < 1e-2 and lse_empty_ok):  # NaN fails
                print(f"FAILED {os.path.basename(path)}", flush=True)
                failed.append(path)
                break  # its other cases are not checked; the other variants are
            if a.bitwise:
                results.setdefault((fam, f"hd{d}", f"{b}x{sq}x{sk}x{h} causal={causal}"), []).append((name, out, lse))
    for (fam, hd, case), runs in sorted(results.items()):
        print_bitwise_groups(fam, hd, case, runs)
    if a.failed_out:
        with open(a.failed_out, "w") as fh:
            fh.writelines(f"{x}\n" for x in failed)
    if failed:
        raise SystemExit(f"FAILED: {', '.join(os.path.basename(x) for x in failed)}")


def print_bitwise_groups(fam, hd, case, runs):
    """One line per case: the variants in groups of bitwise-equal (out, LSE), and the largest
    output difference of each group from the first."""
    groups = []  # [(name list, out, lse)]
    for name, out, lse in runs:
        for g in groups:
            if torch.equal(out, g[1]) and torch.equal(lse, g[2]):
                g[0].append(name)
                break
        else:
            groups.append(([name], out, lse))
    ref = groups[0][1].float()
    parts = [f"{{{' '.join(g[0])}}}" + ("" if i == 0 else f" (max|d|={(g[1].float() - ref).abs().max().item():.3g})")
             for i, g in enumerate(groups)]
    print(f"bitwise {fam}_{hd} {case}: " + " | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
