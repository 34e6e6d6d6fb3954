"""A model of the FP8 quantizer's resident kernel schedule (src/sm90/fp8_quantize.cu,
resident_quantize_kernel), run under random interleavings.

The kernel: CTA c takes items c, c + grid, c + 2 grid, ... (items of one slot are consecutive);
for each it waits for the item's copies, publishes the item's amax (counts it in the slot), then
waits until every item of the slot is counted and casts. The next item's copies are in flight
meanwhile, but its amax is published only in the next iteration. The launch guarantees every CTA
resident at once (cooperative launch) and at most `grid` items per slot; the kernel's comment
argues that then nothing deadlocks. The model checks that claim, and that without either
condition it does deadlock (so that both checks in launch_resident are needed, not decoration):
  - no deadlock and every item cast exactly once, after all amax items of its slot;
  - a slot of grid + 1 items deadlocks (a CTA would wait for its own unpublished next item);
  - fewer CTAs resident than launched deadlocks (a slot waits for CTAs that cannot start).
"""
import random

import pytest


def run(seed, slot_items, grid, resident=None):
    """One random interleaving; returns (cast order, None) or (partial order, deadlock text).
    resident: CTAs that can run at once (default: all); the others start, in index order, only
    when a running one has finished. A deadlock is exact: every running CTA waits for a slot
    that is not complete, so no step can change anything."""
    rng = random.Random(seed)
    slot_of = [s for s, m in enumerate(slot_items) for _ in range(m)]
    n = len(slot_of)
    counted = [0] * len(slot_items)
    cast = []
    waiting_on = {}  # CTA -> the slot it waits for (absent: it can step)

    def complete(slot):
        return counted[slot] == slot_items[slot]

    def cta(c):
        j = c
        while j < n:
            yield                             # item j's copies land (any time after issue)
            counted[slot_of[j]] += 1          # amax published
            waiting_on[c] = slot_of[j]
            yield                             # resumed only once the slot is complete
            del waiting_on[c]
            assert complete(slot_of[j])       # every amax of the slot is in
            cast.append(j)
            j += grid

    resident = grid if resident is None else resident
    pending = list(range(grid))
    running = {}
    while pending and len(running) < resident:
        c = pending.pop(0)
        running[c] = cta(c)
    while running:
        ready = [c for c in sorted(running) if c not in waiting_on or complete(waiting_on[c])]
        if not ready:
            return cast, f"deadlock: CTAs {sorted(running)} wait, {len(pending)} not started"
        c = rng.choice(ready)
        try:
            next(running[c])
        except StopIteration:
            del running[c]
            if pending:
                nc = pending.pop(0)
                running[nc] = cta(nc)
    return cast, None


SHAPES = [  # (items per slot, grid)
    ([4] * 10, 4),            # slots of exactly grid items: every slot spans two rounds but one
    ([3] * 13, 4),            # slots cross round boundaries everywhere
    ([1, 7, 2, 5, 1, 1, 6], 7),  # uneven (varlen-like) slots, the largest = grid
    ([2] * 9, 16),            # more CTAs than items
    ([5, 5, 5], 5),
]


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_resident_schedule_never_deadlocks(shape):
    slot_items, grid = SHAPES[shape]
    assert max(slot_items) <= grid
    n = sum(slot_items)
    slot_of = [s for s, m in enumerate(slot_items) for _ in range(m)]
    for seed in range(200):
        cast, dead = run(seed, slot_items, grid)
        assert dead is None, f"seed {seed}: {dead}"
        assert sorted(cast) == list(range(n)), f"seed {seed}: an item cast twice or never"
        # every item is cast after every item of its slot was counted: checked by the assert in
        # cta(); and each CTA casts its items in order
        for c in range(grid):
            mine = [j for j in cast if j % grid == c]
            assert mine == sorted(mine)
        assert len({slot_of[j] for j in cast}) == len(slot_items)


def test_slot_larger_than_grid_deadlocks():
    """launch_resident refuses slots of more than grid items: here CTA 0 holds item 0 and would
    publish item grid (same slot) only after casting item 0."""
    grid = 4
    _, dead = run(0, [grid + 1, 2], grid)
    assert dead is not None


def test_fewer_resident_than_launched_deadlocks():
    """Why the launch is cooperative: with 2 of 4 CTAs running, slot 0's items 2 and 3 belong to
    CTAs that start only when CTA 0 or 1 finishes, and those wait for slot 0."""
    deadlocked = [run(seed, [4, 4], 4, resident=2)[1] is not None for seed in range(20)]
    assert all(deadlocked)
