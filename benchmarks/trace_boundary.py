"""The tile boundary in a raw event trace (benchmarks/diag_trace.py's .npz, kernels built with
-DFLASHCUTE_SM90_TRACE=1): per tile, when the producer issued the previous tile's last load and
published this one, when the consumers (warpgroup 0) finished the previous tile, read this header,
and saw Q land. Medians and p10/p90 in SM cycles over all CTAs; runs 96-99 (benchmarks/RESULTS.md).

    python3 benchmarks/trace_boundary.py RUN.npz sm90_d128_trs_s4096_causal [more keys]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_report import EV, consumer_tiles, role_events  # noqa: E402


def boundary_rows(buf):
    rows = []
    for cta in range(buf.shape[0]):
        clk, ev, tile = role_events(buf, cta, 0)
        pub = {int(t): int(c) for c, e, t in zip(clk, ev, tile) if e == EV["publish"]}
        lds = {int(t): int(c) for c, e, t in zip(clk, ev, tile) if e == EV["loads"]}
        tiles = consumer_tiles(*role_events(buf, cta, 1))
        for prev, cur in zip(tiles, tiles[1:]):
            t, tp = cur["tile"], prev["tile"]
            if t in pub and tp in lds and "q" in cur and "s0" in cur and "last_pv_done" in prev:
                rows.append((pub[t] - lds[tp], cur["header"] - pub[t], cur["q"] - pub[t],
                             cur["q"] - cur["header"], prev["last_pv_done"] - lds[tp],
                             cur["header"] - prev["last_pv_done"], cur["s0"] - cur["q"]))
    return np.array(rows)


NAMES = ["prev tile's last load -> publish", "publish -> header read", "publish -> Q landed",
         "header read -> Q landed", "prev last load -> prev last PV done",
         "prev last PV done -> header read", "Q landed -> first S issued"]


def main():
    z = np.load(sys.argv[1])
    for key in sys.argv[2:]:
        r = boundary_rows(z[key])
        print(f"{key}: {len(r)} tile boundaries")
        for j, name in enumerate(NAMES):
            print(f"  {name:38s} median {np.median(r[:, j]):7.0f}  p10 {np.percentile(r[:, j], 10):7.0f}"
                  f"  p90 {np.percentile(r[:, j], 90):7.0f}")


if __name__ == "__main__":
    main()
