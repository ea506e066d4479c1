// Unconstrained JSON string content: the UTF-8 content automaton, the DFA's refinement over
// string bytes that finds states behaving like it, and the vocabulary's pieces of valid content.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "constrain/token_index_internal.h"

namespace ib::constrain {

using detail::kUtf8States;
using detail::moore_refine;
using detail::walk_subtree;

namespace {

// UTF-8 string content as an automaton over string bytes: state 0 between characters (ASCII
// string bytes and lead bytes leave it), 1-3 continuation bytes left, 4-7 the lead bytes whose
// next byte is narrower (E0, ED: no surrogates, F0, F4). -1: not a prefix of valid content.
int utf8_char_step(int u, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (u) {
    case 0:
      if (b < 0x80) return is_string_byte(b) ? 0 : -1;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b == 0xE0) return 4;
      if (b == 0xED) return 5;
      if (b >= 0xE1 && b <= 0xEF) return 2;
      if (b == 0xF0) return 6;
      if (b >= 0xF1 && b <= 0xF3) return 3;
      if (b == 0xF4) return 7;
      return -1;
    case 1:
      return cont ? 0 : -1;
    case 2:
      return cont ? 1 : -1;
    case 3:
      return cont ? 2 : -1;
    case 4:
      return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5:
      return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6:
      return b >= 0x90 && b <= 0xBF ? 2 : -1;
    default:
      return b >= 0x80 && b <= 0x8F ? 2 : -1;
  }
}
// The same with a budget of characters (a string's maxLength): state u + 8 * level, level 0 no
// limit, level 1 + r at most r more characters started (the one in progress already counted).
int utf8_step(int state, uint8_t b) {
  const int u = state % 8, level = state / 8;
  const int t = utf8_char_step(u, b);
  if (t < 0) return -1;
  if (u != 0 || level == 0) return t + 8 * level;  // a continuation byte, or no limit
  if (level == 1) return -1;                       // no character left to start
  return t + 8 * (level - 1);
}

// The UTF-8 content automaton with its character budgets (utf8_step) as a DFA over bytes, and its
// text profile: what a trie walk needs to run through it.
const Dfa& utf8_dfa() {
  static const Dfa d = [] {
    Dfa u;
    u.num_states = kUtf8States;
    u.num_classes = 256;
    for (int b = 0; b < 256; ++b) u.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
    u.next.assign(static_cast<size_t>(kUtf8States) * 256, -1);
    u.accepting.assign(static_cast<size_t>(kUtf8States), 0);
    for (int q = 0; q < kUtf8States; ++q) {
      for (int b = 0; b < 256; ++b)
        u.next[static_cast<size_t>(q) * 256 + static_cast<size_t>(b)] = utf8_step(q, static_cast<uint8_t>(b));
      u.accepting[static_cast<size_t>(q)] = q % 8 == 0;
    }
    return u;
  }();
  return d;
}

const TextProfile& utf8_text() {
  static const TextProfile t = text_profile(utf8_dfa());
  return t;
}

}  // namespace

namespace detail {

// (Declared in token_index_internal.h.)
StringRefinement refine_strings(const Dfa& dfa, size_t max_depth) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  StringRefinement out;
  Dfa u;
  std::map<std::vector<int>, uint8_t> joint;
  std::vector<int> rep_byte(1, 0), key(kUtf8States + 1);
  for (int b = 0; b < 256; ++b) {
    const uint8_t ub = static_cast<uint8_t>(b);
    if (!is_string_byte(ub)) continue;
    key[0] = dfa.byte_class[ub];
    for (int q = 0; q < kUtf8States; ++q) key[static_cast<size_t>(q) + 1] = utf8_step(q, ub);
    auto [it, fresh] = joint.emplace(key, static_cast<uint8_t>(rep_byte.size()));
    if (fresh) rep_byte.push_back(b);
    u.byte_class[ub] = it->second;
  }
  const size_t kj = rep_byte.size();
  u.num_classes = static_cast<int32_t>(kj);
  u.num_states = static_cast<int32_t>(n) + kUtf8States;
  u.next.assign(static_cast<size_t>(u.num_states) * kj, -1);
  u.accepting.assign(static_cast<size_t>(u.num_states), 0);
  std::vector<size_t> dfa_class(kj);  // the DFA's class of each joint class's bytes
  for (size_t c = 1; c < kj; ++c) dfa_class[c] = dfa.byte_class[static_cast<uint8_t>(rep_byte[c])];
  for (size_t s = 0; s < n; ++s)  // row by row: the writes stay in cache
    for (size_t c = 1; c < kj; ++c) u.next[s * kj + c] = dfa.next[s * k + dfa_class[c]];
  for (size_t c = 1; c < kj; ++c) {
    const uint8_t b = static_cast<uint8_t>(rep_byte[c]);
    for (int q = 0; q < kUtf8States; ++q)
      if (const int to = utf8_step(q, b); to >= 0) u.next[(n + static_cast<size_t>(q)) * kj + c] = static_cast<int32_t>(n) + to;
  }
  std::vector<uint8_t> string_class(kj, 1);
  string_class[0] = 0;
  moore_refine(u, std::min<size_t>(max_depth, 254), &out.rounds, &out.stable, &out.blocks, &string_class);
  out.utf8_of.resize(out.blocks.size());
  for (size_t h = 0; h < out.blocks.size(); ++h) {
    for (int q = 0; q < kUtf8States; ++q) out.utf8_of[h].emplace_back(out.blocks.at(h, n + static_cast<size_t>(q)), q);
    std::sort(out.utf8_of[h].begin(), out.utf8_of[h].end());  // by block, then state: a block's least state first
  }
  return out;
}

}  // namespace detail

// A piece of Utf8Pieces (token_index_internal.h): walked through the UTF-8 content automaton on
// its first use.
const TokenSet& Utf8Pieces::piece(int32_t i, int u, size_t words) {
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = sets.try_emplace((static_cast<uint64_t>(i) << 8) | static_cast<uint32_t>(u));
  if (fresh)
    walk_subtree(utf8_dfa(), *trie, &utf8_text(), i, u, at.data(), [&](const int32_t* first, const int32_t* last, int32_t whole) {
      it->second.add(*trie, words, first, last, whole);
    });
  return it->second;  // (entries are never changed or erased once built)
}

std::shared_ptr<Utf8Pieces> utf8_pieces(const std::shared_ptr<const VocabTrie>& trie) {
  static std::mutex mu;
  static std::map<const VocabTrie*, std::weak_ptr<Utf8Pieces>> cache;  // alive: holds its trie
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(trie.get()); it != cache.end())
    if (auto p = it->second.lock()) return p;
  auto p = std::make_shared<Utf8Pieces>(trie);
  cache[trie.get()] = p;
  return p;
}

}  // namespace ib::constrain
