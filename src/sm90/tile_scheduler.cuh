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
  CUTE_DEVICE int first() const { return blockIdx.x; }
  CUTE_DEVICE int next(int t) const { return t + gridDim.x; }
};

}  // namespace flashcute::sm90
