"""Per-tile figures from the sm90 kernel's event trace (src/sm90/trace.cuh; benchmarks/diag_trace.py
records it). Works on the raw buffer (numpy uint64, shape (CTAs, roles, cap + 1, 2)):

    python benchmarks/trace_report.py TRACE.npz      # prints the summary of every trace in the file

For each consumer warpgroup and tile: the key blocks it ran (turns + 1), its cycle from header to
next header, and the parts of that cycle outside the key loop's steady state. The steady-state
period is the median gap between consecutive key-loop turns; a tile's overhead is its cycle minus
(blocks x period), in cycles and in blocks.
"""
import json
import sys

import numpy as np

EV = dict(start=1, header=2, q=3, s0=4, p0=5, iter=6, last_pv=7, last_pv_done=8, epilogue=9,
          publish=10, loads=11, claim=12, end=13,
          qk_issued=14, v_ready=15, pv_issued=16, s_done=17, pv_done=18, p_ready=19,
          epi_final=20, epi_bar1=21, epi_stored=22)
LOOP_EVENTS = ("qk_issued", "v_ready", "pv_issued", "s_done", "pv_done", "p_ready")
# Consumer segments, in the order they happen within a tile.
SEGMENTS = [("header", "q"), ("q", "s0"), ("s0", "p0"), ("p0", "iter1"), ("iterN", "last_pv"),
            ("last_pv", "last_pv_done"), ("last_pv_done", "epilogue"), ("epilogue", "next_header"),
            ("last_pv_done", "epi_final"), ("epi_final", "epi_bar1"), ("epi_bar1", "epi_stored"),
            ("epi_stored", "epilogue")]


def role_events(buf, cta, role):
    n = int(buf[cta, role, 0, 0])
    e = buf[cta, role, 1:n + 1]
    return e[:, 0].astype(np.int64), (e[:, 1] >> 32).astype(np.int64), (e[:, 1] & 0xFFFFFFFF).astype(np.int64)


def consumer_tiles(clk, ev, tile):
    """Splits one warpgroup's events into tiles: a list of dicts of event -> clock."""
    tiles, cur = [], None
    for c, e, t in zip(clk, ev, tile):
        if e == EV["header"]:
            if cur is not None:
                cur["next_header"] = c
                tiles.append(cur)
            cur = {"header": c, "tile": int(t), "iters": []}
        elif cur is None:
            continue
        elif e == EV["iter"]:
            cur["iters"].append(c)
        else:
            for k, v in EV.items():
                if v == e and k not in cur:
                    cur[k] = c
    return tiles  # the last header (the end marker) closes the last tile


def loop_breakdown(buf, roles=4):
    """Median offset (cycles) of each in-turn event from the turn's start, and of the other
    warpgroups' next turn, over every steady-state turn (FLASHCUTE_SM90_TRACE=2 builds)."""
    offs = {k: [] for k in LOOP_EVENTS + ("next_iter", "other_iter")}
    for cta in range(buf.shape[0]):
        turns = {}
        for role in range(1, roles):
            clk, ev, _ = role_events(buf, cta, role)
            turns[role] = clk[ev == EV["iter"]]
            cur = None
            for c, e in zip(clk, ev):
                if e == EV["iter"]:
                    if cur is not None:
                        offs["next_iter"].append(c - cur)
                    cur = c
                elif cur is not None:
                    for k in LOOP_EVENTS:
                        if e == EV[k]:
                            offs[k].append(c - cur)
                    if e in (EV["last_pv"], EV["header"]):
                        cur = None
        roles_seen = [r for r in turns if len(turns[r])]
        for r in roles_seen:
            others = np.sort(np.concatenate([turns[o] for o in roles_seen if o != r])) if len(roles_seen) > 1 else None
            if others is None or not len(others):
                continue
            idx = np.searchsorted(others, turns[r], side="right")
            ok = idx < len(others)
            offs["other_iter"].extend((others[idx[ok]] - turns[r][ok]).tolist())
    return {k: (float(np.median(v)) if v else None) for k, v in offs.items()}


def summarize(buf, roles=4):
    ctas = buf.shape[0]
    periods, rows = [], []
    ends, starts = [], []
    for cta in range(ctas):
        for role in range(1, roles):
            clk, ev, tile = role_events(buf, cta, role)
            if len(clk) == 0:
                continue
            starts.append(clk[0])
            ends.append(clk[-1])
            for t in consumer_tiles(clk, ev, tile):
                if "q" not in t:
                    continue  # no keys: nothing loaded
                it = t["iters"]
                if len(it) >= 2:
                    periods.extend(np.diff(it).tolist())
                t["blocks"] = len(it) + 1
                t["iter1"] = it[0] if it else t.get("last_pv")
                t["iterN"] = it[-1] if it else t.get("p0")
                t["cta"], t["role"] = cta, role
                rows.append(t)
    period = float(np.median(periods)) if periods else float("nan")
    out = {"ctas": ctas, "tiles": len(rows), "period_cycles": period,
           "period_p10_p90": [float(np.percentile(periods, 10)), float(np.percentile(periods, 90))] if periods else None}
    seg = {}
    for a, b in SEGMENTS:
        vals = [t[b] - t[a] for t in rows if a in t and b in t]
        seg[f"{a}->{b}"] = float(np.mean(vals)) if vals else None
    out["segments_mean_cycles"] = seg
    cyc = np.array([t["next_header"] - t["header"] for t in rows], dtype=np.float64)
    blk = np.array([t["blocks"] for t in rows], dtype=np.float64)
    over = cyc - blk * period
    out["blocks_mean"] = float(blk.mean()) if len(blk) else None
    out["tile_cycles_mean"] = float(cyc.mean()) if len(cyc) else None
    out["overhead_cycles_mean"] = float(over.mean()) if len(over) else None
    out["overhead_blocks_mean"] = float(over.mean() / period) if len(over) else None
    # Steady-state share: the key-loop turns' time against all consumer time.
    tot = cyc.sum()
    out["share_in_steady_loop"] = float((blk * period).sum() / tot) if tot else None
    # By tile length (causal: short tiles pay the same overhead).
    by = {}
    for lo, hi in ((1, 2), (2, 5), (5, 17), (17, 65), (65, 10 ** 9)):
        m = (blk >= lo) & (blk < hi)
        if m.any():
            by[f"{lo}-{hi - 1 if hi < 10 ** 9 else 'inf'}"] = {
                "tiles": int(m.sum()), "overhead_cycles": float(over[m].mean()),
                "segments": {f"{a}->{b}": float(np.mean([t[b] - t[a] for t, mm in zip(rows, m) if mm and a in t and b in t]))
                             for a, b in SEGMENTS}}
    out["by_blocks"] = by
    # The end: how long CTAs (consumer WG 0) sit finished while others still run (relative to each
    # CTA's own start; clocks of different SMs are not comparable, so this uses durations).
    durs = []
    for cta in range(ctas):
        clk, ev, tile = role_events(buf, cta, 1)
        if len(clk):
            durs.append(clk[-1] - clk[0])
    durs = np.array(durs, dtype=np.float64)
    out["cta_duration_cycles"] = {"max": float(durs.max()), "mean": float(durs.mean()), "min": float(durs.min())}
    out["tail_loss"] = float(1 - durs.mean() / durs.max())
    # Producer: how long it waits for Q's buffer (publish after the previous claim).
    pw = []
    for cta in range(ctas):
        clk, ev, tile = role_events(buf, cta, 0)
        last_claim = None
        for c, e in zip(clk, ev):
            if e == EV["claim"]:
                last_claim = c
            elif e == EV["publish"] and last_claim is not None:
                pw.append(c - last_claim)
    out["producer_wait_q_empty_cycles_mean"] = float(np.mean(pw)) if pw else None
    out["turn_offsets_median"] = loop_breakdown(buf, roles)
    return out


def main():
    data = np.load(sys.argv[1])
    for name in data.files:
        print(name)
        print(json.dumps(summarize(data[name]), indent=1))


if __name__ == "__main__":
    main()
