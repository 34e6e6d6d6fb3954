"""The tile boundary in a raw event trace (benchmarks/diag_trace.py's .npz, kernels built with
-DFLASHCUTE_SM90_TRACE=1): per tile, when the producer issued the previous tile's last load and
published this one, when the consumers (warpgroup 0) finished the previous tile, read this header,
and saw Q land. Medians and p10/p90 in SM cycles over all CTAs; run 96-99 (benchmarks/RESULTS.md).

    python3 benchmarks/trace_boundary.py RUN.npz sm90_d128_trs_s4096_causal [more keys]
"""
import sys

import numpy as np

# trace.cuh's event numbers
HDR, Q, S0, LAST_PV_DONE, PUBLISH, LOADS = 2, 3, 4, 8, 10, 11


def events(a, cta, role):
    n = int(a[cta, role, 0, 0])
    out = []
    for i in range(1, n + 1):
        w = int(a[cta, role, i, 1])
        t = w & 0xFFFFFFFF
        out.append((int(a[cta, role, i, 0]), w >> 32, -1 if t == 0xFFFFFFFF else t))
    return out


def boundary_rows(a):
    rows = []
    for cta in range(a.shape[0]):
        prod, cons = events(a, cta, 0), events(a, cta, 1)
        pub = {t: c for c, e, t in prod if e == PUBLISH}
        lds = {t: c for c, e, t in prod if e == LOADS}
        hdr, q, s0, lpd, cur = {}, {}, {}, {}, None
        for c, e, t in cons:  # consumer events after a header belong to that header's tile
            if e == HDR:
                cur, hdr[t] = t, c
            elif cur is not None and e in (Q, S0, LAST_PV_DONE):
                {Q: q, S0: s0, LAST_PV_DONE: lpd}[e].setdefault(cur, c)
        tiles = sorted(hdr, key=hdr.get)
        for prev, t in zip(tiles, tiles[1:]):
            if t in pub and t in q and t in s0 and prev in lds and prev in lpd:
                rows.append((pub[t] - lds[prev], hdr[t] - pub[t], q[t] - pub[t], q[t] - hdr[t],
                             lpd[prev] - lds[prev], hdr[t] - lpd[prev], s0[t] - q[t]))
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
