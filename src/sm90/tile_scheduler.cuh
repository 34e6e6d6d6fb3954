// Static persistent tile scheduler: gridDim.x = min(#tiles, #SMs) CTAs, CTA c takes tiles
// c, c + gridDim.x, ... Every role of a CTA walks the same sequence, so producer and consumers
// agree on the tile without talking to each other.
//
// Order. Without a causal/window-right mask every tile costs the same; tiles of one (batch, head)
// are consecutive so that concurrently running CTAs share K/V in L2. With a right mask, later
// query blocks see more keys: query blocks go outermost, last (longest) first, so the heavy
// tiles start first and the light ones fill the tail.
#pragma once

namespace flashcute::sm90 {

struct TileCoord {
  int m_block, h, b;
};

struct StaticTileScheduler {
  int num_m_blocks, num_heads, num_batch;
  bool longest_first;

  CUTE_HOST_DEVICE int num_tiles() const { return num_m_blocks * num_heads * num_batch; }

  CUTE_DEVICE TileCoord tile(int t) const {
    TileCoord c;
    int bh;
    if (longest_first) {
      const int nbh = num_heads * num_batch;
      c.m_block = num_m_blocks - 1 - t / nbh;
      bh = t % nbh;
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
  // Grouping heads into L2-sized sections (all query blocks of a few heads together, so their
  // K/V stay in L2) was measured too and lost 8-10 % at causal 4k/16k: it breaks this balance.
  CUTE_DEVICE int at_round(int k) const {
    const int g = gridDim.x, c = blockIdx.x;
    return k * g + ((longest_first && (k & 1)) ? g - 1 - c : c);
  }
  CUTE_DEVICE int first() const { return at_round(0); }
  CUTE_DEVICE int next(int t) const { return at_round(t / int(gridDim.x) + 1); }
};

}  // namespace flashcute::sm90
