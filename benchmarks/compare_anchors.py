"""Which timing protocol reproduces ANCHORS.md's cuDNN figures? And, under it, where do we stand
against the anchor run's FlashAttention-3?

The FA3 figures of ANCHORS.md were taken in a run whose timing protocol is not recorded; cuDNN
9.19 ran in that run too. cuDNN's own figure on the same card is therefore the calibration: the
protocol under which our run's cuDNN matches the anchor's cuDNN is the one under which the FA3
figures are comparable with ours. For each bench_attention.py JSON given (one per protocol), this
prints cuDNN(our run) / cuDNN(anchor) per case and its geometric mean, then flashcute against
FA3: absolute (ours / FA3) and calibrated (ours / cuDNN in our run against FA3 / cuDNN in the
anchor run).

    python3 benchmarks/compare_anchors.py steady.json cool.json [--fp8 steady-fp8.json cool-fp8.json]

An --fp8 JSON is calibrated with the cuDNN figures of the bf16 JSON in the same position: the
fp8 run's own cuDNN runs on e4m3-valued inputs, which draw less power than the anchor run's
randn bf16 ones (RESULTS run 131: 4-8 % faster), so it is not the anchor's condition.
For an --fp8 JSON it also prints e4m3 against flashcute's bf16 kernel, on the same (e4m3) values
and on the bf16 source tensors where the JSON has them (`--impls ...,flashcute_bf16src`), next to
FA3's own FP8 / bf16 ratio in the anchor run (whose bf16 figures come from randn bf16 inputs).
"""
import argparse
import json
import math

# ANCHORS.md (H200, bf16 forward, FA convention), TFLOP/s at seqlen 1k / 4k / 16k.
SEQLENS = (1024, 4096, 16384)
ANCHOR_CUDNN = {
    (64, False): (436, 482, 496), (64, True): (337, 433, 467),
    (128, False): (600, 654, 653), (128, True): (426, 536, 602),
    (256, False): (625, 699, 724), (256, True): (455, 597, 629),
}
ANCHOR_FA3 = {
    (64, False): (385, 504, 571), (64, True): (289, 481, 542),
    (128, False): (611, 703, 684), (128, True): (442, 684, 737),
    (256, False): (642, 783, 760), (256, True): (469, 706, 741),
}
ANCHOR_FA3_FP8 = {
    (128, False): (695, 865, 942), (128, True): (492, 798, 953),
    (256, False): (977, 1207, 1157), (256, True): (653, 1055, 1165),
}


def anchor(table, hdim, causal, seqlen):
    row = table.get((hdim, causal))
    if row is None or seqlen not in SEQLENS:
        return None
    return row[SEQLENS.index(seqlen)]


def load(path):
    with open(path) as f:
        d = json.load(f)
    by_case = {}
    for r in d["results"]:
        if r.get("tflops") is None:
            continue
        impl = r["impl"]
        kind = {"flashcute_bf16": "bf16", "flashcute_bf16src": "bf16src"}.get(
            impl, "cudnn" if impl == "cudnn" else "ours")
        by_case.setdefault((r["hdim"], r["causal"], r["seqlen"]), {})[kind] = r["tflops"]
    return d.get("timer", "?"), d["config"].get("dtype", "bf16"), by_case


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(path, cudnn_from=None):
    timer, dtype, cases = load(path)
    if cudnn_from is not None:
        cases = {k: dict(v, cudnn=cudnn_from.get(k, {}).get("cudnn")) for k, v in cases.items()}
    fa3 = ANCHOR_FA3_FP8 if dtype == "fp8" else ANCHOR_FA3
    print(f"\n== {path}  ({dtype}; {timer})")
    print(f"{'hdim':>4} {'causal':>6} {'seqlen':>6} | {'cuDNN':>6} {'anchor':>6} {'ratio':>5} | "
          f"{'ours':>6} {'FA3':>6} {'ours/FA3':>8} | {'ours/cuDNN':>10} {'FA3/cuDNN(anchor)':>17}")
    cal, absr, calr = [], [], []
    cal_by_s = {}
    for (h, c, s), v in sorted(cases.items()):
        ac, af = anchor(ANCHOR_CUDNN, h, c, s), anchor(fa3, h, c, s)
        cu, ours = v.get("cudnn"), v.get("ours")
        if cu is None or ac is None:
            continue
        cal.append(cu / ac)
        cal_by_s.setdefault(s, []).append(cu / ac)
        line = f"{h:>4} {str(c):>6} {s:>6} | {cu:6.1f} {ac:6d} {cu / ac:5.3f} |"
        if ours is not None and af is not None:
            absr.append(ours / af)
            calr.append((ours / cu) / (af / ac))
            line += f" {ours:6.1f} {af:6d} {ours / af:8.3f} | {ours / cu:10.3f} {af / ac:17.3f}"
        print(line)
    print(f"geomean cuDNN(ours) / cuDNN(anchor) = {geomean(cal):.3f}"
          f" (min {min(cal):.3f}, max {max(cal):.3f}, {len(cal)} cases); by seqlen: "
          + ", ".join(f"{s}: {geomean(v):.3f}" for s, v in sorted(cal_by_s.items())))
    if absr:
        print(f"geomean ours / FA3 = {geomean(absr):.3f}; calibrated by cuDNN = {geomean(calr):.3f}")
    if dtype == "fp8":
        fp8_over_bf16(cases)


def fp8_over_bf16(cases):
    """e4m3 / flashcute bf16 (same values; bf16 source tensors) against FA3's FP8 / bf16 (anchor)."""
    print(f"{'hdim':>4} {'causal':>6} {'seqlen':>6} | {'e4m3/bf16(same values)':>22} "
          f"{'e4m3/bf16(source)':>17} | {'FA3 fp8/bf16 (anchor)':>21}")
    for (h, c, s), v in sorted(cases.items()):
        ours, af8, af16 = v.get("ours"), anchor(ANCHOR_FA3_FP8, h, c, s), anchor(ANCHOR_FA3, h, c, s)
        if ours is None:
            continue
        same, src = (f"{ours / v[k]:.3f}" if v.get(k) else "n/a" for k in ("bf16", "bf16src"))
        fa3 = f"{af8 / af16:.3f}" if af8 and af16 else "n/a"
        print(f"{h:>4} {str(c):>6} {s:>6} | {same:>22} {src:>17} | {fa3:>21}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("jsons", nargs="+", help="bench_attention.py --json outputs (bf16)")
    p.add_argument("--fp8", nargs="*", default=[], help="--dtype fp8 outputs, one per bf16 JSON")
    args = p.parse_args()
    for path in args.jsons:
        report(path)
    for path, bf16 in zip(args.fp8, args.jsons):
        report(path, cudnn_from=load(bf16)[2])


if __name__ == "__main__":
    main()
