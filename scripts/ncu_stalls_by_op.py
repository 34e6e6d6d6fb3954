"""Warp stall samples of one ncu source page (scripts/ncu_source.sh's src_*.csv.gz), by stall
reason and by SASS opcode (with each opcode's top three reasons), and the executed instruction
mix: where the warps wait, not which line.
    python3 scripts/ncu_stalls_by_op.py benchmarks/runs/2026-12-06-run112-src-fp8vt-d128-4k.csv.gz
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_stalls_by_count import count, read_source_page  # noqa: E402


def opcode(source):
    parts = source.strip().split()
    if not parts:
        return "?"
    op = parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]
    return op.split(".")[0]


def main(path):
    rows = read_source_page(path)
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    by_reason, by_op, executed = collections.Counter(), collections.Counter(), collections.Counter()
    op_reasons = collections.defaultdict(collections.Counter)
    total = 0
    for r in rows:
        n = count(r, "Warp Stall Sampling (All Samples)")
        op = opcode(r["Source"])
        total += n
        by_op[op] += n
        executed[op] += count(r, "Instructions Executed")
        for c in reasons:
            v = count(r, c)
            by_reason[c] += v
            op_reasons[op][c] += v
    print(f"{path}: {total} samples")
    for c, v in by_reason.most_common(12):
        print(f"  {c:28s} {100 * v / total:5.1f} %")
    print("by opcode (samples, top reasons):")
    for op, v in by_op.most_common(18):
        top = ", ".join(f"{k[6:]} {100 * x / total:.1f}" for k, x in op_reasons[op].most_common(3))
        print(f"  {op:12s} {100 * v / total:5.1f} %   [{top}]")
    ex_total = sum(executed.values())
    print(f"executed warp instructions: {ex_total}")
    print("  " + ", ".join(f"{k} {100 * v / ex_total:.1f} %" for k, v in executed.most_common(16)))


if __name__ == "__main__":
    main(sys.argv[1])
