// The tile and mask rules of flash3 (numerics/flash_tiles.h) against the visibility rule of the
// float64 reference (AttentionShape::first_key / visible_keys), by brute force over small
// shapes: every tile holding a key some row of the block sees is visited, and the first and last
// visited tiles each hold such a key (no tile is loaded for nothing at either end); key_hidden is
// the reference's rule; tile_needs_mask is exact.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kinds/attention/problem.h"
#include "numerics/flash_tiles.h"

namespace ib::attention {
namespace {

// The shape the reference's visibility rule reads (batch, heads and head_dim do not matter).
AttentionShape lengths(int seq_q, int seq_k, bool causal, int window) {
  return AttentionShape{1, 1, 1, 64, seq_q, seq_k, causal, window};
}

std::string describe(const AttentionShape& s) {
  return "seq_q " + std::to_string(s.seq_q) + " seq_k " + std::to_string(s.seq_k) + " causal " + std::to_string(s.causal) +
         " window " + std::to_string(s.window);
}

TEST(FlashKeyTiles, MatchTheReferenceVisibility) {
  const int kRows = 128;
  for (int tile : {64, 128})
    for (int seq_k : {1, 17, 127, 128, 129, 300, 1000})
      for (int seq_q : {1, 7, 128, 129, 300, 1000})
        for (bool causal : {false, true})
          for (int window : {0, 1, 50, 128, 1000}) {
            if (window > 0 && !causal) continue;
            const AttentionShape s = lengths(seq_q, seq_k, causal, window);
            const int n_tiles = (seq_k + tile - 1) / tile;
            for (int m0 = 0; m0 < seq_q; m0 += kRows) {
              // needed[t]: some row of the block sees some key of tile t.
              std::vector<bool> needed(static_cast<size_t>(n_tiles), false);
              for (int i = m0; i < std::min(m0 + kRows, seq_q); ++i)
                for (int j = s.first_key(i); j < s.visible_keys(i); ++j) needed[static_cast<size_t>(j / tile)] = true;
              const KeyTileRange r = flash_key_tiles(m0, kRows, seq_q, seq_k, causal, window, tile);
              const std::string where = describe(s) + " tile " + std::to_string(tile) + " m0 " + std::to_string(m0);
              ASSERT_GE(r.first, 0) << where;
              ASSERT_GE(r.count, 0) << where;
              ASSERT_LE(r.first + r.count, n_tiles) << where;
              for (int t = 0; t < n_tiles; ++t) {
                if (needed[static_cast<size_t>(t)]) {
                  EXPECT_TRUE(t >= r.first && t < r.first + r.count) << where << ": tile " << t << " skipped";
                }
              }
              if (r.count > 0) {
                EXPECT_TRUE(needed[static_cast<size_t>(r.first)])
                    << where << ": first tile " << r.first << " holds no visible key";
                EXPECT_TRUE(needed[static_cast<size_t>(r.first + r.count - 1)]) << where << ": last tile holds no visible key";
              }
            }
          }
}

// key_hidden is the reference's rule, and tile_needs_mask is true exactly for the blocks of
// rows × keys that hold a hidden pair (rows past seq_q included: a kernel computes them too).
TEST(FlashKeyTiles, MaskPredicatesMatchTheReference) {
  for (int seq_k : {1, 100, 300})
    for (int seq_q : {1, 100, 300})
      for (bool causal : {false, true})
        for (int window : {0, 1, 7, 64, 1000}) {
          if (window > 0 && !causal) continue;
          const AttentionShape s = lengths(seq_q, seq_k, causal, window);
          const int shift = seq_k - seq_q;
          const std::string where = describe(s);
          for (int i = 0; i < seq_q; ++i)
            for (int j = 0; j < seq_k + 20; ++j) {
              const bool visible = j >= s.first_key(i) && j < s.visible_keys(i);
              ASSERT_EQ(key_hidden(j, i, seq_k, causal, shift, window), !visible) << where << " query " << i << " key " << j;
            }
          for (int row0 = 0; row0 < seq_q + 16; row0 += 16)
            for (int n0 = 0; n0 < seq_k; n0 += 32) {
              bool any = false;
              for (int i = row0; i < row0 + 16; ++i)
                for (int j = n0; j < n0 + 64; ++j) any = any || key_hidden(j, i, seq_k, causal, shift, window);
              ASSERT_EQ(tile_needs_mask(n0, 64, row0, 16, seq_k, causal, shift, window), any)
                  << where << " rows " << row0 << " keys " << n0;
            }
        }
}

}  // namespace
}  // namespace ib::attention
