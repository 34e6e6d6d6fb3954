// Static persistent tile scheduler: gridDim.x = min(#tiles, #SMs) CTAs, CTA c takes tiles
// c, c + gridDim.x, ... Every role of a CTA walks the same sequence, so producer and consumers
// agree on the tile without talking to each other.
//
// Order. Without a causal/window-right mask every tile costs the same; tiles of one (batch, head)
// are consecutive so that concurrently running CTAs share K/V in L2. With a right mask, later
// query blocks see more keys, so heavy tiles should start first. But taking every head's last
// query block first, then every head's next-to-last, ... puts one head's query blocks rounds
// apart: when there are more heads than CTAs, a round reads the whole K/V of ~132 different heads
// and nothing is still in L2 when the same head's next query block comes (ncu, d=128 causal 1k:
// DRAM 80 % busy, L2 hit rate 12 %). So the heads are cut into sections of about one round of
// tiles (heads_per_section = CTAs / query blocks): a section's query blocks run together, the
// longest first, and the rounds snake (below) so that heavy and light tiles pair up per CTA.
// The pairing needs a round to be exactly one section, so the launch cuts the grid to
// heads_per_section * query blocks CTAs (without that, 132 CTAs over sections of 128 tiles
// drift a section by 4 tiles per round and d=128 causal lost 10-24 %, runs 5 and 19). Per head
// dim: TileConfig::kSections; off, one section holds every head.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/fast_math.h>

#ifndef FLASHCUTE_SM90_FAST_DIVMOD
#define FLASHCUTE_SM90_FAST_DIVMOD 1  // the tile walk's divisions by multiply-shift (0: hardware-less division, A/B)
#endif

namespace flashcute::sm90 {

struct TileCoord {
  int m_block, h, b;
};

struct StaticTileScheduler {
  int num_m_blocks, num_heads, num_batch;
  bool longest_first;
  int heads_per_section;  // longest_first only: (batch, head)s whose query blocks run together
  // num_tiles(), filled in by the launch: the kernel's loops compare against this kernel
  // parameter directly (a product computed on the device was one register too many for the
  // d=256 consumer, and ptxas spilled it).
  int total_tiles = 0;
  // Dynamic hand-out (below): FwdParams::tile_counter for causal/local tiles; nullptr: the
  // static rounds.
  int* counter = nullptr;

  CUTE_HOST_DEVICE int num_tiles() const { return num_m_blocks * num_heads * num_batch; }

  // The tile walk's divisors as multiply-shift constants (FLASHCUTE_SM90_FAST_DIVMOD), set by
  // set_divisors once the grid and the sections are final. Every role works out each tile's
  // coordinates at the tile boundary, where a hardware-less integer division (~20 dependent
  // instructions, I2F / MUFU.RCP / F2I) sits on the critical path between tiles (run 96 trace).
  cutlass::FastDivmod fd_m_blocks{}, fd_heads{}, fd_section{}, fd_hps{}, fd_grid{}, fd_group{};
  // (A launch without tiles, e.g. seqlen_q == 0, still gets divisors >= 1: FastDivmod(0) would
  // divide by zero on the host; such a launch never divides.)
  void set_divisors(int grid, int head_group) {
    auto fd = [](int d) { return cutlass::FastDivmod(d > 1 ? d : 1); };
    fd_m_blocks = fd(num_m_blocks);
    fd_heads = fd(num_heads);
    fd_section = fd(heads_per_section * num_m_blocks);
    fd_hps = fd(heads_per_section);
    fd_grid = fd(grid);
    fd_group = fd(head_group);
  }
  // x / d and x % d for x >= 0 (the A/B switch off: the hardware-less division by fd's divisor).
  CUTE_DEVICE static void divmod(cutlass::FastDivmod const& fd, int x, int& q, int& r) {
    if constexpr (bool(FLASHCUTE_SM90_FAST_DIVMOD)) {
      fd.fast_divmod(q, r, x);
    } else {
      q = x / fd.divisor;
      r = x % fd.divisor;
    }
  }
  CUTE_DEVICE static int div(cutlass::FastDivmod const& fd, int x) {
    int q, r;
    divmod(fd, x, q, r);
    return q;
  }

  CUTE_DEVICE TileCoord tile(int t) const {
    TileCoord c;
    int bh;
    if (longest_first) {
      const int nbh = num_heads * num_batch;
      const int first_bh = div(fd_section, t) * heads_per_section;
      const int heads = min(heads_per_section, nbh - first_bh);  // the last section may be short
      const int r = t - first_bh * num_m_blocks;
      int q, rem;
      if (heads == heads_per_section) {
        divmod(fd_hps, r, q, rem);
      } else {
        q = r / heads;
        rem = r % heads;
      }
      c.m_block = num_m_blocks - 1 - q;
      bh = first_bh + rem;
    } else {
      divmod(fd_m_blocks, t, bh, c.m_block);
    }
    divmod(fd_heads, bh, c.b, c.h);
    return c;
  }
  // The K/V head of query head h (GQA).
  CUTE_DEVICE int kv_head(int h) const { return div(fd_group, h); }
  // Tile of CTA c in round k. Equal-cost tiles: k * G + c. Longest-first: the rounds snake
  // (c, then G - 1 - c, ...), so the CTA that took the heaviest tile of one round takes the
  // lightest of the next; with plain striding CTA 0 gets the heaviest tile of every round
  // (d=128 causal 4k ran at 0.78x the non-causal rate with it; see benchmarks/RESULTS.md).
  CUTE_DEVICE int at_round(int k) const {
    const int g = gridDim.x, c = blockIdx.x;
    return k * g + ((longest_first && (k & 1)) ? g - 1 - c : c);
  }
  CUTE_DEVICE int first() const { return at_round(0); }
  CUTE_DEVICE int next(int t) const {
    return at_round(div(fd_grid, t) + 1);  // fd_grid: gridDim.x
  }
};

// Dynamic hand-out (causal/local with FwdParams::tile_counter). The static rounds above need a
// round to be one section, so with 128 query blocks per head the launch cuts the grid to 128
// CTAs (3 % of the SMs idle) and pairs heavy and light tiles only approximately. Here each CTA
// takes its first tile (blockIdx.x) and then the next unclaimed one in the same order, from a
// global counter, once its producer has issued a tile's loads: greedy list scheduling over the
// longest-first sections, which ends on the lightest tiles and so balances to within a light
// tile on every SM (simulated for the FA-convention shapes: 99.6-99.9 % of the mean at 4k-16k,
// against 96-97 %; measured +0.7..+2.5 % causal at 4k-16k, runs 77-78). The counter (two int32:
// next tile, finished CTAs) must be zero at launch; the last CTA to finish sets it back to zero.
//
// The tile header: the producer thread hands each tile's index, static or claimed, to the
// consumers (fwd_kernel.cuh). It writes it once q_empty (or hdr_empty,
// FwdTraits::kHeaderBarrier) says they are done with the previous one, and publishes it by an
// arrival on tile_full before the tile's Q is loaded, so that the consumers work the tile out
// while Q is in flight (published with Q instead, run 76 lost 3-12 % at 1k).
struct TileHeader {
  int tile;      // >= total_tiles: no more tiles
  // The producer thread's own tile-loop state, kept here rather than in its 24 registers: held
  // across a tile's loads in registers, these pushed the TMA issue sequence into local-memory
  // spills (12-268 bytes, depending on the head dim; such spills cost run 75's bf16 d=128
  // variant 15-18 %). Each is touched once per tile.
  int next;                 // the tile after this one (static order or claimed)
  uint32_t buffers_phase;   // parity of q_empty's (and o_free's) phase the next tile waits for
  int* counter;             // the hand-out's counter (as a kernel parameter the compiler held it
                            // in two registers throughout the loop)
};
// A volatile access: the compiler reloads the value where it is used instead of keeping it.
template <class T> CUTE_DEVICE T load_volatile(T const& x) { return *reinterpret_cast<T const volatile*>(&x); }

// mbarrier arrive / wait that also order the header's plain shared-memory accesses around them.
CUTE_DEVICE void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(cute::cast_smem_ptr_to_uint(bar)) : "memory");
}
CUTE_DEVICE void mbar_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n\t.reg .pred P1;\n\t"
      "MBAR_WAIT:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
      "@!P1 bra MBAR_WAIT;\n\t}"
      ::"r"(cute::cast_smem_ptr_to_uint(bar)), "r"(phase) : "memory");
}

CUTE_DEVICE int claim_tile(TileHeader& h) {
  int* counter = load_volatile(h.counter);
  return atomicAdd(counter, 1) + int(gridDim.x);
}
// After this CTA's last claim: the last CTA to get here zeroes the counter for the next launch
// (every CTA has made its last atomicAdd on counter[0] before it counts itself finished).
CUTE_DEVICE void finish_claims(int* counter) {
  __threadfence();
  if (atomicAdd(counter + 1, 1) == int(gridDim.x) - 1) {
    counter[0] = 0;
    counter[1] = 0;
  }
}

}  // namespace flashcute::sm90
