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

  CUTE_HOST_DEVICE int num_tiles() const { return num_m_blocks * num_heads * num_batch; }

  CUTE_DEVICE TileCoord tile(int t) const {
    TileCoord c;
    int bh;
    if (longest_first) {
      const int nbh = num_heads * num_batch;
      const int first_bh = t / (heads_per_section * num_m_blocks) * heads_per_section;
      const int heads = min(heads_per_section, nbh - first_bh);  // the last section may be short
      const int r = t - first_bh * num_m_blocks;
      c.m_block = num_m_blocks - 1 - r / heads;
      bh = first_bh + r % heads;
    } else {
      c.m_block = t % num_m_blocks;
      bh = t / num_m_blocks;
    }
    c.b = bh / num_heads;
    c.h = bh % num_heads;
    return c;
  }
  // Tile of CTA c in round k. Equal-cost tiles: k * G + c. Longest-first: the rounds snake
  // (c, then G - 1 - c, ...), so the CTA that took the heaviest tile of one round takes the
  // lightest of the next; with plain striding CTA 0 gets the heaviest tile of every round
  // (d=128 causal 4k ran at 0.78x the non-causal rate with it; see benchmarks/RESULTS.md).
  CUTE_DEVICE int at_round(int k) const {
    const int g = gridDim.x, c = blockIdx.x;
    return k * g + ((longest_first && (k & 1)) ? g - 1 - c : c);
  }
  CUTE_DEVICE int first() const { return at_round(0); }
  CUTE_DEVICE int next(int t) const { return at_round(t / int(gridDim.x) + 1); }
};

}  // namespace flashcute::sm90
