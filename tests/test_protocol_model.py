"""A model of the sm90 kernel's tile-header / Q / K hand-off (src/sm90/fwd_kernel.cuh,
fwd_mainloop.cuh), run under random interleavings: the producer thread, one agent per consumer
warpgroup and the TMA completions take steps in random order. It checks the protocol's design,
not the CUDA code: no deadlock; Q (part w) is never refilled while a warpgroup that reads it may
still read it; no warpgroup reads Q before its load landed; the header is never overwritten before
every warpgroup read it; every warpgroup sees every tile, in order.

Three layouts of Q are modelled: one buffer (q_full / q_empty for the whole tile; the header
waits on q_empty), one part per warpgroup (FLASHCUTE_SM90_SPLIT_Q: q_full[w] / q_empty[w], the
header on its own barrier, hdr_empty, and the tile's first K block loaded before the parts), and
two whole-tile buffers used by the loaded tiles in turn (FLASHCUTE_SM90_Q_AHEAD: buffer j % 2
for the j-th loaded tile, its barriers completing once per use, the header on hdr_empty, so that
the producer loads a tile's Q as soon as it has published the tile).
mbarriers are modelled as the hardware keeps them: a phase counter, and waits that only see its
parity (`try_wait.parity P` returns once the phase with parity P is complete, i.e. the current
phase's parity differs from P), so a waiter two phases behind blocks for ever.

The model found a hang in the first split-Q design before any device run: for a tile without
loads the producer waited for the parts' previous phase after publishing the header, and the
consumers, arriving for such a tile as soon as they read it, could complete both phases first.
"""
import random

from _sync_model import MBarrier, Violation

END = -1


def run(seed, tiles, split, nwg=2, stages=2, mutation=None, alias_q=False, loaded_only=False, qahead=False):
    """One random interleaving over `tiles` (key blocks per tile; 0 = a tile without loads).
    Returns None, or a string describing a deadlock; raises Violation on a safety violation.
    mutation: a known-wrong variant of the protocol, to show the model catches it:
      "no_q_wait"        the producer refills Q without waiting for q_empty;
      "skip_after_header" split Q: a tile without loads waits for the parts after its header.
    alias_q: O is staged in Q's buffer (d=192/256): a warpgroup releases its Q (part) only after
    its epilogue's store has read it.
    loaded_only: split Q with q_empty[w] flipping only for tiles with loads (consumers do not
    arrive for a tile without loads; the producer keeps its own parity per loaded tile and
    waits for Q's parts only after the header, as a separate Q-issuing lane would have to).
    qahead: two Q buffers (not split), buffer j % 2 for the j-th tile with loads; the producer waits
    for its use j - 2 to be released (parity ((j // 2) & 1) ^ 1), the consumers for its load
    (parity (j // 2) & 1); a tile without loads touches neither. Mutations: "same_buffer", the
    producer always fills buffer 0 (the consumers still alternate); "tile_parity", the consumers
    wait for parity j & 1 (a phase per tile rather than per use of the buffer); "noload_arrive",
    the consumers release a buffer for a tile without loads (as with one buffer);
    "producer_counts_noload" / "consumer_counts_noload", one side counts tiles without loads."""
    rng = random.Random(seed)
    assert not (split and qahead)
    parts = nwg if split else 2 if qahead else 1
    own_hdr = split or qahead  # the header has its own barrier
    q_full = [MBarrier(1) for _ in range(parts)]
    q_empty = [MBarrier(nwg if qahead else nwg // parts) for _ in range(parts)]  # one arrival per warpgroup here
    hdr_empty, tile_full = MBarrier(nwg), MBarrier(1)
    k_full = [MBarrier(1) for _ in range(stages)]
    k_empty = [MBarrier(nwg) for _ in range(stages)]
    header = [None]
    hdr_reads = set()
    reading = [None] * nwg    # the Q part (buffer) warpgroup w may read
    inflight = [0] * parts    # Q loads into part p not yet landed
    tma = []                  # landings to come: (barrier, bytes, Q part or None)
    seen = [[] for _ in range(nwg)]
    order = list(range(len(tiles))) + [END]
    part_of = [w if split else 0 for w in range(nwg)]

    def producer():
        bp, ks, kph = 1, 0, 1  # a producer's start state: the first waits pass at once
        qpar = 1  # loaded_only: the parity of q_empty's phase to wait for, flipped per loaded tile
        qj = 0    # qahead: the tiles loaded so far

        def load_k():
            nonlocal ks, kph
            s = ks
            yield lambda: k_empty[s].passed(kph)
            k_full[s].arrive(tx=1)
            tma.append((k_full[s], 1, None))
            ks, kph = (0, kph ^ 1) if ks + 1 == stages else (ks + 1, kph)

        def load_q(p):
            if qahead:
                p = 0 if mutation == "same_buffer" else qj % 2
            if mutation != "no_q_wait":
                par = ((qj // 2) & 1) ^ 1 if qahead else qpar if loaded_only else bp
                yield lambda: q_empty[p].passed(par)
            if any(reading[w] == p for w in range(nwg)):
                raise Violation(f"Q part {p} refilled while a warpgroup reads it")
            q_full[p].arrive(tx=1)
            inflight[p] += 1
            tma.append((q_full[p], 1, p))

        def wait_parts():
            for p in range(parts):
                yield lambda p=p: q_empty[p].passed(bp)

        for t in order:
            no_loads = t != END and tiles[t] == 0
            if split and no_loads and mutation != "skip_after_header" and not loaded_only:
                yield from wait_parts()
            yield lambda: (hdr_empty if own_hdr else q_empty[0]).passed(bp)
            if header[0] is not None and hdr_reads != set(range(nwg)):
                raise Violation("tile header overwritten before every warpgroup read it")
            header[0] = t
            hdr_reads.clear()
            tile_full.arrive()
            if t == END:
                return
            if not no_loads:
                if not split:
                    yield from load_q(0)
                yield from load_k()
                if split:
                    for p in range(parts):
                        yield from load_q(p)
                    qpar ^= 1
                for _ in range(tiles[t] - 1):
                    yield from load_k()
                qj += 1
            elif split and mutation == "skip_after_header":
                yield from wait_parts()
            elif qahead and mutation == "producer_counts_noload":
                qj += 1
            bp ^= 1

    def consumer(w):
        hp, qp, ks, kph = 0, 0, 0, 0
        qj = 0  # qahead: the tiles with loads seen so far
        p = part_of[w]
        while True:
            yield lambda: tile_full.passed(hp)
            hp ^= 1
            t = header[0]
            hdr_reads.add(w)
            seen[w].append(t)
            if own_hdr:
                hdr_empty.arrive()
            if t == END:
                return
            if tiles[t] == 0:
                if not loaded_only and not qahead:
                    q_empty[p].arrive()
                elif qahead and mutation == "noload_arrive":
                    q_empty[qj % 2].arrive()  # the buffer the next loaded tile will use
                elif qahead and mutation == "consumer_counts_noload":
                    qj += 1
                continue
            if qahead:
                p, qp = qj % 2, (qj & 1 if mutation == "tile_parity" else (qj // 2) & 1)
                qj += 1
            yield lambda: q_full[p].passed(qp)
            qp ^= 1
            if inflight[p]:
                raise Violation(f"warpgroup {w} reads Q part {p} while its load is in flight")
            reading[w] = p
            for _ in range(tiles[t]):
                s = ks
                yield lambda: k_full[s].passed(kph)
                yield None  # S = Q K^T
                k_empty[s].arrive()
                ks, kph = (0, kph ^ 1) if ks + 1 == stages else (ks + 1, kph)
            if not alias_q:
                reading[w] = None
                q_empty[p].arrive()
            for _ in range(rng.randint(0, 3)):  # the epilogue (with alias_q: O written into Q's buffer)
                yield None
            if alias_q:
                reading[w] = None
                q_empty[p].arrive()

    agents = [producer()] + [consumer(w) for w in range(nwg)]
    waits = [None] * len(agents)
    done = [False] * len(agents)
    for i, a in enumerate(agents):
        try:
            waits[i] = next(a)
        except StopIteration:
            done[i] = True
    while not all(done):
        ready = [i for i, a in enumerate(agents) if not done[i] and (waits[i] is None or waits[i]())]
        choices = ready + (["tma"] if tma else [])
        if not choices:
            return f"deadlock: seed {seed}, tiles {tiles}, split {split}, {nwg} warpgroups"
        c = rng.choice(choices)
        if c == "tma":
            bar, nbytes, p = tma.pop(rng.randrange(len(tma)))
            if p is not None:
                inflight[p] -= 1
            bar.complete_tx(nbytes)
            continue
        try:
            waits[c] = agents[c].send(None)
        except StopIteration:
            done[c] = True
    for w in range(nwg):
        if seen[w] != order:
            raise Violation(f"warpgroup {w} saw tiles {seen[w]}, not {order}")
    return None


def random_tiles(rng):
    return [rng.choice([0, 0, 1, 1, 2, 3, 5]) for _ in range(rng.randint(1, 9))]


def failures(seeds, split, nwg, mutation=None, alias_q=False, loaded_only=False, qahead=False):
    out = []
    for seed in range(seeds):
        tiles = random_tiles(random.Random(seed))
        try:
            r = run(seed, tiles, split, nwg, mutation=mutation, alias_q=alias_q, loaded_only=loaded_only,
                    qahead=qahead)
        except Violation as e:
            r = f"{e}: seed {seed}, tiles {tiles}"
        if r:
            out.append(r)
    return out


def test_protocols_hold():
    for split in (False, True):
        for nwg in (2, 3):
            for alias_q in (False, True):
                bad = failures(1000, split, nwg, alias_q=alias_q)
                assert not bad, bad[:3]


def test_model_catches_a_refill_without_q_empty():
    # Split Q only: with one buffer the header's own wait on q_empty already orders the refill.
    for nwg in (2, 3):
        bad = failures(300, True, nwg, mutation="no_q_wait")
        assert any("refilled" in b or "in flight" in b for b in bad), "the model missed a Q overwrite"


def test_model_catches_the_parity_hang_of_the_first_split_design():
    bad = failures(300, True, 2, mutation="skip_after_header")
    assert any(b.startswith("deadlock") for b in bad), "the model missed the two-phases-behind hang"


def test_loaded_only_phases_hold_without_the_header_order():
    # The design a separate Q-issuing lane would need (benchmarks/RESULTS.md, session 23).
    for nwg in (2, 3):
        for alias_q in (False, True):
            bad = failures(1000, True, nwg, alias_q=alias_q, loaded_only=True)
            assert not bad, bad[:3]


def test_q_ahead_holds():
    # Two Q buffers (FLASHCUTE_SM90_Q_AHEAD; O in its own buffer, so no alias_q).
    for nwg in (2, 3):
        bad = failures(1000, False, nwg, qahead=True)
        assert not bad, bad[:3]


def test_model_catches_q_ahead_variants():
    # One buffer for every tile while the header runs ahead: the producer refills the buffer a
    # warpgroup reads (or blocks); a parity per tile: a warpgroup reads Q before it landed (or
    # blocks). (Dropping the producer's q_empty wait is not caught, and is not wrong here: it
    # publishes tile j + 2 only once every warpgroup read tile j + 1's header, i.e. finished
    # tile j and released its buffer; the wait stays as the protocol's own guard.)
    for mutation in ("same_buffer", "tile_parity", "noload_arrive", "producer_counts_noload",
                     "consumer_counts_noload"):
        bad = failures(300, False, 2, mutation=mutation, qahead=True)
        assert bad, f"the model missed {mutation}"
