// The vocabulary's byte trie (VocabTrie): built once per vocabulary and shared by every mask
// of it, whichever strategy builds the masks.
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "constrain/token_index.h"

namespace ib::constrain {

std::shared_ptr<const VocabTrie> vocab_trie(const std::shared_ptr<const Vocabulary>& vocab) {
  static std::mutex mu;
  static std::map<const Vocabulary*, std::weak_ptr<const VocabTrie>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(vocab.get()); it != cache.end())
    if (auto t = it->second.lock()) return t;

  // Tokens in byte order: a trie built along them comes out in depth-first pre-order.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab->size(); ++id)
    if (!vocab->special[static_cast<size_t>(id)]) order.push_back(id);
  const auto& tb = vocab->token_bytes;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return tb[static_cast<size_t>(a)] < tb[static_cast<size_t>(b)]; });

  auto trie = std::make_shared<VocabTrie>();
  auto add_node = [&](uint8_t b, uint16_t d) {
    trie->byte.push_back(b);
    trie->depth.push_back(d);
    trie->subtree_end.push_back(-1);
    trie->token_begin.push_back(static_cast<int32_t>(trie->tokens.size()));
    return static_cast<int32_t>(trie->byte.size() - 1);
  };
  std::vector<int32_t> stack = {add_node(0, 0)};  // path from the root to the current node
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& t = tb[static_cast<size_t>(id)];
    size_t lcp = 0;
    if (prev)
      while (lcp < prev->size() && lcp < t.size() && (*prev)[lcp] == t[lcp]) ++lcp;
    while (stack.size() > lcp + 1) {  // close the subtrees that end here
      trie->subtree_end[static_cast<size_t>(stack.back())] = static_cast<int32_t>(trie->byte.size());
      stack.pop_back();
    }
    for (size_t k = lcp; k < t.size(); ++k) stack.push_back(add_node(static_cast<uint8_t>(t[k]), static_cast<uint16_t>(k + 1)));
    trie->tokens.push_back(id);  // ends at the newest node (or at an identical earlier token's)
    trie->max_depth = std::max(trie->max_depth, t.size());
    prev = &t;
  }
  while (!stack.empty()) {
    trie->subtree_end[static_cast<size_t>(stack.back())] = static_cast<int32_t>(trie->byte.size());
    stack.pop_back();
  }
  trie->token_begin.push_back(static_cast<int32_t>(trie->tokens.size()));
  // Heights and text flags, children before parents (pre-order reversed).
  const size_t nn = trie->nodes();
  trie->height.assign(nn, 0);
  trie->text_below.assign(nn, 1);
  trie->string_below.assign(nn, 1);
  std::vector<int32_t> parent_at(trie->max_depth + 1, 0);
  std::vector<int32_t> parent(nn, -1);
  for (size_t i = 1; i < nn; ++i) {
    parent_at[trie->depth[i]] = static_cast<int32_t>(i);
    parent[i] = parent_at[trie->depth[i] - 1u];
  }
  for (size_t i = nn; i-- > 1;) {
    const size_t p = static_cast<size_t>(parent[i]);
    trie->height[p] = static_cast<uint8_t>(std::min(255, std::max<int>(trie->height[p], trie->height[i] + 1)));
    if (!trie->text_below[i] || !is_text_byte(trie->byte[i])) trie->text_below[p] = 0;
    if (!trie->string_below[i] || !is_string_byte(trie->byte[i])) trie->string_below[p] = 0;
  }
  trie->by_length_begin.assign(nn + 1, 0);
  for (size_t i = 0; i < nn; ++i) {
    trie->by_length_begin[i + 1] = trie->by_length_begin[i];
    if (!trie->text_below[i]) continue;
    const auto first = trie->tokens.begin() + trie->token_begin[i];
    const auto last = trie->tokens.begin() + trie->token_begin[static_cast<size_t>(trie->subtree_end[i])];
    trie->by_length.insert(trie->by_length.end(), first, last);
    trie->by_length_begin[i + 1] = static_cast<int32_t>(trie->by_length.size());
  }
  trie->length_of.resize(trie->by_length.size());
  for (size_t i = 0; i < nn; ++i) {
    const auto first = trie->by_length.begin() + trie->by_length_begin[i],
               last = trie->by_length.begin() + trie->by_length_begin[i + 1];
    std::stable_sort(first, last,
                     [&](int32_t a, int32_t b) { return tb[static_cast<size_t>(a)].size() < tb[static_cast<size_t>(b)].size(); });
    for (auto it = first; it != last; ++it)
      trie->length_of[static_cast<size_t>(it - trie->by_length.begin())] =
          static_cast<uint16_t>(tb[static_cast<size_t>(*it)].size());
  }
  trie->node.resize(nn + 1);
  for (size_t i = 0; i <= nn; ++i) {
    VocabTrie::Node& x = trie->node[i];
    x.token_begin = trie->token_begin[i];
    if (i == nn) break;
    x.subtree_end = trie->subtree_end[i];
    x.depth = trie->depth[i];
    x.byte = trie->byte[i];
    x.height = trie->height[i];
    x.text_below = trie->text_below[i];
    x.string_below = trie->string_below[i];
  }
  trie->bitmap_words = (static_cast<size_t>(vocab->size()) + 31) / 32;
  trie->bitmap_of.assign(nn, -1);
  int32_t bitmaps = 0;
  for (size_t i = 1; i < nn; ++i)
    if (trie->token_begin[static_cast<size_t>(trie->subtree_end[i])] - trie->token_begin[i] >= VocabTrie::kSubtreeBitmapTokens)
      trie->bitmap_of[i] = bitmaps++;
  trie->bitmaps.assign(static_cast<size_t>(bitmaps) * trie->bitmap_words, 0u);
  for (size_t i = 1; i < nn; ++i)
    if (const int32_t b = trie->bitmap_of[i]; b >= 0) {
      uint32_t* words = trie->bitmaps.data() + static_cast<size_t>(b) * trie->bitmap_words;
      for (int32_t x = trie->token_begin[i]; x < trie->token_begin[static_cast<size_t>(trie->subtree_end[i])]; ++x) {
        const uint32_t tok = static_cast<uint32_t>(trie->tokens[static_cast<size_t>(x)]);
        words[tok >> 5] |= 1u << (tok & 31);
      }
    }
  cache[vocab.get()] = trie;
  return trie;
}

}  // namespace ib::constrain
