"""Load balance of the sm90 kernel's causal tile orders, simulated (no GPU): the static rounds
(sections of one round, snake pairing, the grid cut to one section per round) against the dynamic
hand-out (greedy: each CTA claims the next tile in the same order when it finishes one), and a
claim made one tile ahead. Tile cost = its key blocks + a fixed per-tile cost. Prints, per
FA-convention shape, the mean work per SM over the busiest CTA's (1.0 = perfect balance).

    python benchmarks/sim_tile_schedule.py [--sms 132] [--tile-cost 1.5]
"""
import argparse
import heapq
import math


def tile_costs(s, m, n, heads, hps):
    """Key blocks per tile, in the kernel's order: sections of hps heads, each longest first."""
    nm = math.ceil(s / m)
    out = []
    for first in range(0, heads, hps):
        for mb in range(nm - 1, -1, -1):
            out += [math.ceil(min(s, (mb + 1) * m) / n)] * min(hps, heads - first)
    return out


def sections(s, m, heads, sms):
    """launch_fwd's rule: heads per section, and whether the static grid is cut to one round."""
    nm = math.ceil(s / m)
    grid = min(sms, nm * heads)
    hps = max(1, grid // nm)
    if nm <= grid and hps * nm * 10 >= grid * 9:
        return hps, hps * nm
    return heads, grid


def static(costs, grid, c):
    load = [0.0] * grid
    for i, w in enumerate(costs):
        k, j = divmod(i, grid)
        load[grid - 1 - j if k & 1 else j] += w + c
    return max(load)


def greedy(costs, grid, c, ahead=False):
    """Each CTA claims its next tile when it finishes one (ahead: when it starts one)."""
    ev = [(costs[i] + c, i) for i in range(grid)]
    heapq.heapify(ev)
    pos, end = grid, 0.0
    claimed = {}
    if ahead:
        for i in range(grid):
            claimed[i] = costs[pos] if pos < len(costs) else None
            pos += 1
    while ev:
        t, i = heapq.heappop(ev)
        end = max(end, t)
        if ahead:
            w = claimed[i]
            claimed[i] = costs[pos] if pos < len(costs) else None
        else:
            w = costs[pos] if pos < len(costs) else None
        pos += 1
        if w is not None:
            heapq.heappush(ev, (t + w + c, i))
    return end


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--tile-cost", type=float, default=1.5, help="fixed cost per tile, in key blocks")
    a = ap.parse_args()
    print("| kernel | seqlen | static (grid) | dynamic | claimed a tile ahead |\n|---|---|---|---|---|")
    for name, d, m, n in [("bf16 d64", 64, 192, 128), ("bf16 d128", 128, 128, 128), ("bf16 d256", 256, 128, 80),
                          ("e4m3 d128", 128, 128, 192), ("e4m3 d256", 256, 128, 128)]:
        for s in (1024, 4096, 16384):
            heads = (2048 // d) * (16384 // s)  # FA convention: batch * seqlen = 16k, heads * d = 2048
            hps, grid = sections(s, m, heads, a.sms)
            costs = tile_costs(s, m, n, heads, hps)
            ideal = (sum(costs) + a.tile_cost * len(costs)) / a.sms
            g = min(a.sms, len(costs))
            print(f"| {name} | {s} | {ideal / static(costs, grid, a.tile_cost):.3f} ({grid}) | "
                  f"{ideal / greedy(costs, g, a.tile_cost):.3f} | {ideal / greedy(costs, g, a.tile_cost, True):.3f} |")


if __name__ == "__main__":
    main()
