"""Warp stall samples of one ncu source page (scripts/ncu_source.sh's src_*.csv.gz), summed by
instruction execution count: code run once per key block, once per tile, once per CTA, ...
separate by their counts, so the share of time spent in each shows without reading the SASS.
    python3 scripts/ncu_stalls_by_count.py benchmarks/runs/2026-12-03-run24-src-bf16-d128-4k.csv.gz
"""
import csv, gzip, sys, collections
f = sys.argv[1]
lines = gzip.open(f, "rt").read().splitlines()
hi = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.DictReader(lines[hi:]))
agg = collections.Counter(); first = {}
tot = 0
for i, r in enumerate(rows):
    s = int(r["Warp Stall Sampling (All Samples)"].replace(",", "") or 0)
    ex = int(r["Instructions Executed"].replace(",", "") or 0)
    agg[ex] += s; tot += s
    first.setdefault(ex, i)
for ex, s in sorted(agg.items(), key=lambda x: -x[1])[:20]:
    print(f"ex={ex:9d} first_at={first[ex]:5d} samples {100*s/tot:5.1f}%")
