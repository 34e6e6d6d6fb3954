"""A model of the FP8 quantizer's fused schedule (src/sm90/fp8_quantize_schedule.cuh, item_at;
quantize_kernel in fp8_quantize_item.cuh), run under random interleavings: CTAs claiming
positions from the shared counter, each one position ahead of the item it computes, the A (amax)
and B (cast) items those positions map to (item_at, ported below), and B items waiting until
every A item of their slot is counted.

It checks the design, not the CUDA code:
  - no deadlock, also when fewer CTAs are resident than launched (a CTA starts only when a
    resident one has finished), which is what the kernel's comment claims not to need;
  - every position is computed once, and every B item after all A items of its slot.
A known-wrong variant (`mutation`) shows that the model catches that kind of mistake.
"""
import random

import pytest

from _sync_model import Violation


def item_at(n, lag, pos):
    """Counter position -> (is B, item index in its pass): the kernel's item_at."""
    if lag >= n:
        return pos >= n, (pos - n if pos >= n else pos)
    if pos < lag:
        return False, pos
    if pos < 2 * n - lag:
        k = pos - lag
        return bool(k & 1), (k >> 1 if k & 1 else lag + (k >> 1))
    return True, pos - n


def run(seed, slot_items, ctas, resident, lag=None, mutation=None):
    """One random interleaving. slot_items: items per slot (items of a slot are consecutive).
    Returns None, or a string describing a deadlock; raises Violation on a safety violation.
    mutation: "no_a_wait" (B items do not wait for their slot's A items)."""
    rng = random.Random(seed)
    slot_of = [s for s, m in enumerate(slot_items) for _ in range(m)]
    n = len(slot_of)
    max_items = max(slot_items)
    if lag is None:
        lag = max_items + 2 * ctas
    lag = min(max(lag, 0), n)
    end = 2 * n
    counter = [0]
    done = [0] * len(slot_items)          # A items counted per slot
    computed = []                         # (pos, is_b, item) in completion order

    def compute(pos):
        is_b, j = item_at(n, lag, pos)
        slot = slot_of[j]
        if is_b and mutation != "no_a_wait":
            while done[slot] < slot_items[slot]:
                yield "wait"
        if is_b and done[slot] < slot_items[slot]:
            raise Violation(f"B item {j} of slot {slot} computed before its A items")
        if not is_b:
            done[slot] += 1
        computed.append((pos, is_b, j))
        yield

    def cta():
        """The next position claimed before computing this one."""
        ahead = []                        # claimed positions, in order
        for _ in range(2):
            pos = counter[0]
            counter[0] += 1
            ahead.append(pos)
            yield
        while ahead[0] < end:
            yield from compute(ahead.pop(0))
            pos = counter[0]
            counter[0] += 1
            ahead.append(pos)
            yield

    gens = {}
    waiting = list(range(ctas))
    rng.shuffle(waiting)
    active = []
    finished = 0
    steps = 0
    while finished < ctas:
        while len(active) < resident and waiting:
            c = waiting.pop()
            gens[c] = cta()
            active.append(c)
        progressed = False
        for c in rng.sample(active, len(active)):
            try:
                r = next(gens[c])
            except StopIteration:
                active.remove(c)
                finished += 1
                progressed = True
                break
            if r != "wait":
                progressed = True
                break
        steps += 1
        if not progressed:
            return f"deadlock after {steps} steps: {len(computed)} of {end} positions computed"
    got = sorted(p for p, _, _ in computed)
    if got != list(range(end)):
        raise Violation(f"positions computed {len(got)} (unique {len(set(got))}) of {end}")
    return None


SHAPES = [  # items per slot: one tensor, uneven slots, many small slots
    [4, 4, 4, 4],
    [7, 3, 1, 5, 2],
    [1] * 9 + [6],
]


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_schedule_never_deadlocks_or_races(shape):
    for seed in range(60):
        ctas = 1 + seed % 5
        resident = 1 + seed % ctas
        slot_items = SHAPES[shape]
        lag = [None, max(slot_items), 10 ** 6][seed % 3]  # automatic, smallest safe, every A first
        r = run(seed, slot_items, ctas, resident, lag=lag)
        assert r is None, f"seed {seed} ctas {ctas} resident {resident} lag {lag}: {r}"


@pytest.mark.parametrize("mutation", ["no_a_wait"])
def test_model_catches_known_wrong_variants(mutation):
    caught = 0
    for seed in range(60):
        try:
            ctas = 2 + seed % 4
            r = run(seed, SHAPES[1], ctas=ctas, resident=ctas, lag=max(SHAPES[1]), mutation=mutation)
        except Violation:
            caught += 1
            continue
        caught += r is not None
    assert caught > 0, f"the model never caught {mutation}"


def test_small_lag_deadlocks_with_one_resident_cta():
    """A lag below the items of a slot lets a B item wait for an A item at a later position:
    with one resident CTA it never comes (why the kernel clamps the lag up)."""
    hung = [run(seed, [6, 6], ctas=1, resident=1, lag=1) for seed in range(5)]
    assert all(h is not None and "deadlock" in h for h in hung)


# ---- varlen: the plan kernel's prefix and decode_varlen, ported ----------------------------------
def plan_prefix(bounds, rows_per_item):
    """plan_kernel: prefix[b] = items of slots before b (per kv head), each max(1, ceil(rows / R))."""
    seqlen = bounds[-1]
    clamp = [min(max(x, 0), seqlen) for x in bounds]
    n = [max(1, -(-max(0, clamp[b + 1] - clamp[b]) // rows_per_item)) for b in range(len(bounds) - 1)]
    prefix = [0]
    for x in n:
        prefix.append(prefix[-1] + x)
    return prefix, clamp


def decode_varlen(local, prefix, clamp, heads_k, rows_per_item):
    """decode_varlen: (b, hk, chunk, row0, rows, slot_items), chunk -1 for a spare item."""
    batch = len(prefix) - 1
    spare = local >= prefix[batch] * heads_k
    if spare:
        local = 0
    c = local // heads_k
    top = (batch - 1).bit_length() - 1 if batch > 1 else -1
    lo = 0
    for i in range(27, -1, -1):
        if i > top:
            continue
        mid = lo + (1 << i)
        if mid < batch and prefix[mid] <= c:
            lo = mid
    first, n = prefix[lo], prefix[lo + 1] - prefix[lo]
    rem = local - first * heads_k
    hk, chunk = rem // n, rem - (rem // n) * n
    row0 = clamp[lo] + chunk * rows_per_item
    rows = 0 if spare else max(0, min(rows_per_item, clamp[lo + 1] - row0))
    return lo, hk, -1 if spare else chunk, row0, rows, n


@pytest.mark.parametrize("seed", range(40))
def test_varlen_decode_covers_every_row_once(seed):
    """Over the host's item bound (heads_k * (ceil(seqlen / R) + batch)), the decoded items cover
    every row of every (slot, kv head) exactly once, each slot's items are consecutive and
    counted as slot_items, every item of a slot has rows (or the slot is empty and has one item),
    and the items past the prefix's total are spare."""
    rng = random.Random(seed)
    batch = rng.choice([1, 2, 3, 7, 33])
    lens = [rng.choice([0, 1, 5, 64, 100, 300]) for _ in range(batch)]
    bounds = [0]
    for x in lens:
        bounds.append(bounds[-1] + x)
    heads_k, rows_per_item = rng.choice([1, 2, 4]), rng.choice([8, 32, 64])
    prefix, clamp = plan_prefix(bounds, rows_per_item)
    seqlen = bounds[-1]
    items_bound = heads_k * (max(1, -(-seqlen // rows_per_item)) + batch)
    assert prefix[batch] * heads_k <= items_bound
    seen = {}
    last_local = {}
    for local in range(items_bound):
        b, hk, chunk, row0, rows, n = decode_varlen(local, prefix, clamp, heads_k, rows_per_item)
        if local >= prefix[batch] * heads_k:
            assert chunk == -1 and rows == 0
            continue
        assert 0 <= b < batch and 0 <= hk < heads_k and 0 <= chunk < n == prefix[b + 1] - prefix[b]
        if (b, hk) in last_local:
            assert last_local[(b, hk)] == local - 1, "a slot's items are not consecutive"
        last_local[(b, hk)] = local
        assert rows > 0 or lens[b] == 0
        for r in range(row0, row0 + rows):
            assert clamp[b] <= r < clamp[b + 1]
            assert (b, hk, r) not in seen
            seen[(b, hk, r)] = local
    assert len(seen) == heads_k * seqlen
