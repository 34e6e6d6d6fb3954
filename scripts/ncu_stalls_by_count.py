"""Warp stall samples of one ncu source page (scripts/ncu_source.sh's src_*.csv.gz), summed by
instruction execution count: code run once per key block, once per tile, once per CTA, ...
separate by their counts, so the share of time spent in each shows without reading the SASS.
    python3 scripts/ncu_stalls_by_count.py benchmarks/runs/2026-12-03-run24-src-bf16-d128-4k.csv.gz
(read_source_page and count are shared with scripts/ncu_stalls_by_op.py.)
"""
import collections
import csv
import gzip
import sys


def read_source_page(path):
    """The per-instruction rows of an ncu source page (csv.gz), as dicts by column name."""
    lines = gzip.open(path, "rt").read().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    return list(csv.DictReader(lines[head:]))


def count(row, column):
    """A counter column of one row as an int (empty = 0)."""
    return int(row[column].replace(",", "") or 0)


def main(path):
    agg = collections.Counter()
    first = {}
    tot = 0
    for i, r in enumerate(read_source_page(path)):
        s = count(r, "Warp Stall Sampling (All Samples)")
        ex = count(r, "Instructions Executed")
        agg[ex] += s
        tot += s
        first.setdefault(ex, i)
    for ex, s in sorted(agg.items(), key=lambda x: -x[1])[:20]:
        print(f"ex={ex:9d} first_at={first[ex]:5d} samples {100*s/tot:5.1f}%")


if __name__ == "__main__":
    main(sys.argv[1])
