// PrefixIndex: the serving scheduler's prefix lookup by chained block hashes.
#include "serve/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace ib::serve {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

void list(PrefixIndex& index, int seq, int adapter, const std::vector<int32_t>& tokens, int n) {
  index.update(seq, adapter, n, [&](int i) { return tokens[static_cast<size_t>(i)]; });
}

TEST(PrefixIndex, FindsTheLongestRunOfFullBlocksAndWhoHoldsIt) {
  PrefixIndex index(4);
  const auto a = iota_tokens(14, 0);  // blocks [0..3] [4..7] [8..11], 2 tokens over
  auto b = a;
  b[9] = 99;  // diverges in its third block
  list(index, 1, -1, a, 14);
  list(index, 2, -1, b, 12);
  EXPECT_EQ(index.blocks(), 4);  // two shared, one each
  auto m = index.longest(a.data(), 14, -1);
  EXPECT_EQ(m.blocks, 3);
  EXPECT_EQ(m.seqs, std::vector<int>({1}));
  m = index.longest(b.data(), 12, -1);
  EXPECT_EQ(m.blocks, 3);
  EXPECT_EQ(m.seqs, std::vector<int>({2}));
  auto c = a;
  c[10] = 77;  // neither's third block
  m = index.longest(c.data(), 12, -1);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.seqs, std::vector<int>({1, 2}));
  m = index.longest(a.data(), 7, -1);  // only whole blocks within n count
  EXPECT_EQ(m.blocks, 1);
  // The same tokens at other positions are not a prefix: the key names what came before.
  const auto shifted = iota_tokens(8, 4);
  EXPECT_EQ(index.longest(shifted.data(), 8, -1).blocks, 0);
  // Another adapter's blocks are its own.
  EXPECT_EQ(index.longest(a.data(), 14, 3).blocks, 0);
  list(index, 3, 3, a, 8);
  m = index.longest(a.data(), 14, 3);
  EXPECT_EQ(m.blocks, 2);
  EXPECT_EQ(m.seqs, std::vector<int>({3}));
}

TEST(PrefixIndex, TruncationAndRemovalUnlistExactlyTheirBlocks) {
  PrefixIndex index(4);
  const auto a = iota_tokens(16, 0);
  list(index, 1, -1, a, 16);
  list(index, 2, -1, a, 8);
  EXPECT_EQ(index.blocks(), 4);
  list(index, 1, -1, a, 9);  // truncated to two blocks (and a token)
  EXPECT_EQ(index.blocks(), 2);
  EXPECT_EQ(index.longest(a.data(), 16, -1).blocks, 2);
  EXPECT_EQ(index.longest(a.data(), 16, -1).seqs, std::vector<int>({1, 2}));
  ASSERT_NE(index.key(1, 1), nullptr);
  EXPECT_EQ(*index.key(1, 1), *index.key(2, 1));
  EXPECT_EQ(index.key(1, 2), nullptr);
  index.remove(1);
  EXPECT_EQ(index.longest(a.data(), 16, -1).seqs, std::vector<int>({2}));
  index.remove(2);
  EXPECT_EQ(index.blocks(), 0);
  EXPECT_EQ(index.sequences(), 0);
  EXPECT_EQ(index.longest(a.data(), 16, -1).blocks, 0);
  index.remove(7);  // never listed: nothing happens
  // Growing block by block lists each block once.
  for (int n = 0; n <= 16; ++n) list(index, 5, -1, a, n);
  EXPECT_EQ(index.blocks(), 4);
  EXPECT_EQ(index.longest(a.data(), 16, -1).blocks, 4);
}

// What a finishing request's dedupe asks: who holds all of its full blocks (the candidates to
// cover it), and whose listed blocks end along its own (the candidates to be covered by it).
TEST(PrefixIndex, HoldersAndTheSequencesEndingAlongAChain) {
  PrefixIndex index(4);
  const auto a = iota_tokens(12, 0);
  auto other = a;
  other[0] = 50;
  list(index, 1, -1, a, 12);      // three blocks
  list(index, 2, -1, a, 6);       // one block, two tokens over
  list(index, 3, -1, a, 3);       // no full block
  list(index, 4, -1, other, 12);  // none of a's blocks
  list(index, 5, -1, a, 8);
  ASSERT_NE(index.holders(1, 0), nullptr);
  EXPECT_EQ(*index.holders(1, 0), std::vector<int>({1, 2, 5}));
  EXPECT_EQ(*index.holders(1, 2), std::vector<int>({1}));
  EXPECT_EQ(index.holders(1, 3), nullptr);
  EXPECT_EQ(index.holders(3, 0), nullptr);
  auto along = index.ending_along(1, 8);
  std::sort(along.begin(), along.end());
  EXPECT_EQ(along, std::vector<int>({2, 3, 5}));  // 3 has no block; 4 is elsewhere
  EXPECT_EQ(index.ending_along(2, 8), std::vector<int>({3}));
  EXPECT_EQ(index.ending_along(1, 0), std::vector<int>());  // at most 0 a block
  // Grown, 2 ends further along; removed, it is gone.
  list(index, 2, -1, a, 12);
  along = index.ending_along(1, 8);
  std::sort(along.begin(), along.end());
  EXPECT_EQ(along, std::vector<int>({2, 3, 5}));
  EXPECT_EQ(index.ending_along(5, 8), std::vector<int>({3}));
  index.remove(2);
  index.remove(3);
  EXPECT_EQ(index.ending_along(1, 8), std::vector<int>({5}));
}

// With 2-bit keys most blocks collide: a collision must be a miss (or an unlisted block), never
// a hit on other tokens, and every listed block must still be found by its own tokens.
TEST(PrefixIndex, CollidingKeysAreMissesNeverWrongHits) {
  PrefixIndex index(2, 2);
  std::vector<std::vector<int32_t>> seqs;
  for (int s = 0; s < 16; ++s) {
    seqs.push_back({s % 4, s / 4, s, 1, 2, 3});
    list(index, s, -1, seqs.back(), 6);
  }
  EXPECT_LE(index.blocks(), 4);  // four keys at most
  for (int s = 0; s < 16; ++s) {
    const auto m = index.longest(seqs[static_cast<size_t>(s)].data(), 6, -1);
    for (int holder : m.seqs) {
      const auto& h = seqs[static_cast<size_t>(holder)];
      for (int i = 0; i < m.blocks * 2; ++i)
        EXPECT_EQ(h[static_cast<size_t>(i)], seqs[static_cast<size_t>(s)][static_cast<size_t>(i)]);
    }
  }
  const std::vector<int32_t> other = {9, 9, 9, 9};
  EXPECT_EQ(index.longest(other.data(), 4, -1).blocks, 0);
  for (int s = 0; s < 16; ++s) index.remove(s);
  EXPECT_EQ(index.blocks(), 0);
}

}  // namespace
}  // namespace ib::serve
