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
