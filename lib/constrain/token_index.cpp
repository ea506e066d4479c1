#include "constrain/token_index.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "constrain/interner.h"
#include "core/backend.h"
#include "core/parallel.h"
#include "core/random.h"

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
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return tb[static_cast<size_t>(a)] < tb[static_cast<size_t>(b)]; });

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
    const auto first = trie->by_length.begin() + trie->by_length_begin[i], last = trie->by_length.begin() + trie->by_length_begin[i + 1];
    std::stable_sort(first, last, [&](int32_t a, int32_t b) { return tb[static_cast<size_t>(a)].size() < tb[static_cast<size_t>(b)].size(); });
    for (auto it = first; it != last; ++it)
      trie->length_of[static_cast<size_t>(it - trie->by_length.begin())] = static_cast<uint16_t>(tb[static_cast<size_t>(*it)].size());
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

namespace {
struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return static_cast<size_t>(p.first ^ (p.second >> 1)); }
};
using Sig = std::pair<uint64_t, uint64_t>;
}  // namespace

// The block of every state after each refinement round. Rounds up to `dense` are stored whole;
// a later round as the states that changed block since round `dense`, sorted, with their blocks:
// a refinement that runs for hundreds of rounds (the string refinement of a counting DFA, one
// counter position per round) then writes what changed instead of a table per round.
class RoundBlocks {
 public:
  explicit RoundBlocks(size_t dense) : dense_(dense) {}
  size_t size() const { return full_.size() + moved_.size(); }
  int32_t at(size_t round, size_t q) const {
    if (round < full_.size()) return full_[round][q];
    const auto& m = moved_[round - full_.size()];
    const auto it = std::lower_bound(m.begin(), m.end(), static_cast<int32_t>(q),
                                     [](const std::pair<int32_t, int32_t>& e, int32_t s) { return e.first < s; });
    return it != m.end() && it->first == static_cast<int32_t>(q) ? it->second : full_.back()[q];
  }
  void start(const std::vector<int32_t>& id) {
    full_.assign(1, id);
    moved_.clear();
    since_.clear();
    flag_.assign(id.size(), 0);
  }
  // The blocks after the next round; `changed`: the states whose block that round changed.
  void push(const std::vector<int32_t>& id, const std::vector<int32_t>& changed) {
    if (full_.size() <= dense_) {
      full_.push_back(id);
      return;
    }
    fresh_.clear();
    for (int32_t s : changed)
      if (!flag_[static_cast<size_t>(s)]) {
        flag_[static_cast<size_t>(s)] = 1;
        fresh_.push_back(s);
      }
    std::sort(fresh_.begin(), fresh_.end());
    merged_.clear();
    std::merge(since_.begin(), since_.end(), fresh_.begin(), fresh_.end(), std::back_inserter(merged_));
    since_.swap(merged_);
    auto& m = moved_.emplace_back();
    m.reserve(since_.size());
    for (int32_t s : since_) m.emplace_back(s, id[static_cast<size_t>(s)]);
  }

 private:
  size_t dense_;
  std::vector<std::vector<int32_t>> full_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> moved_;
  std::vector<int32_t> since_, fresh_, merged_;
  std::vector<uint8_t> flag_;
};

// Moore refinement limited to `max_rounds` rounds, done incrementally: after a round only the
// predecessors of states that changed block need a new signature, and within a block only those
// states can leave it (the others keep the block's old signature). Returns the block of each state
// after the last round (states in one block: alive after the same strings of up to that many
// bytes), the rounds run, and with `snapshots` the blocks after rounds 0, 1, ... (round 0: one block).
// Stops early when a round changes nothing (the partition is then final). With `only`, strings
// over the byte classes c with only[c] set (the refinement of the DFA restricted to them).
static std::vector<int32_t> moore_refine(const Dfa& dfa, size_t max_rounds, int* rounds, bool* stable,
                                         RoundBlocks* snapshots,
                                         const std::vector<uint8_t>* only = nullptr) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  std::vector<int32_t> id(n, 0);
  // Signature of a state: the map class -> block of its successor, hashed linearly,
  //   sig = Σ_c R[c] · F(block(next(s, c)))   (two independent 64-bit lanes),
  // so it can be summed per distinct successor (with R summed over the classes leading there).
  std::vector<uint64_t> r1(k), r2(k);
  for (size_t c = 0; c < k; ++c) {
    r1[c] = mix64(0x1234567ull + c) | 1;
    r2[c] = mix64(0x7654321ull + 3 * c) | 1;
  }
  struct Edge {
    int32_t to;  // -1: dead
    uint64_t w1, w2;
  };
  std::vector<int32_t> edge_start(n + 1, 0);
  std::vector<Edge> edges;
  {
    // The dead successor's weights are what the live ones leave of the classes' total (kept out
    // of the loop: most classes lead nowhere, and summing them into one edge chains every step).
    uint64_t all1 = 0, all2 = 0;
    for (size_t c = 0; c < k; ++c)
      if (!only || (*only)[c]) {
        all1 += r1[c];
        all2 += r2[c];
      }
    std::vector<int32_t> at(n, -1);  // successor -> its edge of the current state
    for (size_t s = 0; s < n; ++s) {
      const size_t first = edges.size();
      const int32_t* row = dfa.next.data() + s * k;
      uint64_t live1 = 0, live2 = 0;
      for (size_t c = 0; c < k; ++c) {
        const int32_t t = row[c];
        if (t < 0 || (only && !(*only)[c])) continue;
        if (at[static_cast<size_t>(t)] < static_cast<int32_t>(first)) {
          at[static_cast<size_t>(t)] = static_cast<int32_t>(edges.size());
          edges.push_back({t, 0, 0});
        }
        edges[static_cast<size_t>(at[static_cast<size_t>(t)])].w1 += r1[c];
        edges[static_cast<size_t>(at[static_cast<size_t>(t)])].w2 += r2[c];
        live1 += r1[c];
        live2 += r2[c];
      }
      if (live1 != all1 || live2 != all2) edges.push_back({-1, all1 - live1, all2 - live2});
      edge_start[s + 1] = static_cast<int32_t>(edges.size());
    }
  }
  // Predecessors (each once), as CSR.
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  for (const Edge& e : edges)
    if (e.to >= 0) ++pred_start[static_cast<size_t>(e.to) + 1];
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(static_cast<size_t>(pred_start[n]));
  {
    std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
    for (size_t s = 0; s < n; ++s)
      for (int32_t e = edge_start[s]; e < edge_start[s + 1]; ++e)
        if (const int32_t t = edges[static_cast<size_t>(e)].to; t >= 0) preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
  }
  // F per block, both lanes (dead: the last entry).
  std::vector<uint64_t> f1, f2;
  auto add_f = [&](uint64_t b) {
    f1.push_back(mix64(b + 0x9E3779B97F4A7C15ull));
    f2.push_back(mix64(b ^ 0xC2B2AE3D27D4EB4Full));
  };
  const uint64_t dead_f1 = mix64(0xFFFFFFFFull + 0x9E3779B97F4A7C15ull), dead_f2 = mix64(0xFFFFFFFFull ^ 0xC2B2AE3D27D4EB4Full);
  add_f(0);
  auto signature = [&](size_t s) {
    uint64_t h1 = 0, h2 = 0;
    for (int32_t e = edge_start[s]; e < edge_start[s + 1]; ++e) {
      const Edge& ed = edges[static_cast<size_t>(e)];
      if (ed.to < 0) {
        h1 += ed.w1 * dead_f1;
        h2 += ed.w2 * dead_f2;
      } else {
        const size_t b = static_cast<size_t>(id[static_cast<size_t>(ed.to)]);
        h1 += ed.w1 * f1[b];
        h2 += ed.w2 * f2[b];
      }
    }
    return Sig{h1, h2};
  };
  std::vector<Sig> sig(n), block_sig;
  std::vector<int32_t> block_size;
  struct Mover {
    int32_t block;
    Sig sig;
    int32_t state;
  };
  std::vector<Mover> movers;
  struct Slot {
    int32_t block, group;
    Sig sig;
  };
  std::vector<Slot> slots;
  std::vector<uint32_t> slot_round;
  std::vector<int32_t> moving(n + 1, 0), blocks_hit;  // per block: its movers this round
  std::vector<uint8_t> keeps(n + 1, 0);  // per block this round: 1 whole (not yet kept), 2 kept
  std::vector<int32_t> changed, affected;
  std::vector<uint32_t> seen(n, 0);
  uint32_t epoch = 0;
  *rounds = 0;
  *stable = n == 0;
  if (snapshots) snapshots->start(id);
  if (max_rounds == 0) return id;
  // Round 1 over every state (all in one block before it).
  {
    std::unordered_map<Sig, int32_t, PairHash> groups;
    for (size_t s = 0; s < n; ++s) {
      sig[s] = signature(s);
      auto [it, fresh] = groups.emplace(sig[s], static_cast<int32_t>(groups.size()));
      if (fresh) {
        block_sig.push_back(sig[s]);
        block_size.push_back(0);
        if (f1.size() < block_sig.size()) add_f(block_sig.size() - 1);
      }
      ++block_size[static_cast<size_t>(it->second)];
    }
    for (size_t s = 0; s < n; ++s) {
      id[s] = groups[sig[s]];
      if (id[s] != 0) changed.push_back(static_cast<int32_t>(s));
    }
    *rounds = 1;
    if (snapshots) snapshots->push(id, changed);
  }
  for (size_t round = 2; round <= max_rounds && !changed.empty(); ++round) {
    ++epoch;
    affected.clear();
    for (int32_t t : changed)
      for (int32_t j = pred_start[static_cast<size_t>(t)]; j < pred_start[static_cast<size_t>(t) + 1]; ++j) {
        const int32_t p = preds[static_cast<size_t>(j)];
        if (seen[static_cast<size_t>(p)] != epoch) {
          seen[static_cast<size_t>(p)] = epoch;
          affected.push_back(p);
        }
      }
    for (int32_t s : affected) sig[static_cast<size_t>(s)] = signature(static_cast<size_t>(s));
    // Affected states whose signature left their block's: grouped per (block, signature).
    movers.clear();
    for (int32_t s : affected)
      if (sig[static_cast<size_t>(s)] != block_sig[static_cast<size_t>(id[static_cast<size_t>(s)])])
        movers.push_back({id[static_cast<size_t>(s)], sig[static_cast<size_t>(s)], s});
    // Grouped through an open-addressing table of (block, signature) -> block, in the movers'
    // order: when a whole block moves, its first group keeps the block (no split for it).
    for (const Mover& mv : movers)
      if (moving[static_cast<size_t>(mv.block)]++ == 0) blocks_hit.push_back(mv.block);
    for (int32_t b : blocks_hit)  // whole: every state of the block moves (decided before any leaves)
      keeps[static_cast<size_t>(b)] = moving[static_cast<size_t>(b)] == block_size[static_cast<size_t>(b)] ? 1 : 0;
    size_t cap = 16;
    while (cap < 2 * movers.size()) cap <<= 1;
    if (slots.size() < cap) {
      slots.resize(cap);
      slot_round.resize(cap, 0);
    }
    const size_t mask = cap - 1;
    changed.clear();
    for (const Mover& mv : movers) {
      const size_t b = static_cast<size_t>(mv.block);
      size_t i = static_cast<size_t>(mix64(mv.sig.first ^ (static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull))) & mask;
      int32_t g = -1;
      for (;; i = (i + 1) & mask) {
        if (slot_round[i] != epoch) {  // a new group
          slot_round[i] = epoch;
          if (keeps[b] == 1) {  // the first group of a whole block keeps it
            keeps[b] = 2;
            g = mv.block;
            block_sig[b] = mv.sig;
          } else {
            g = static_cast<int32_t>(block_sig.size());
            block_sig.push_back(mv.sig);
            block_size.push_back(0);
            add_f(static_cast<uint64_t>(g));
          }
          slots[i] = {mv.block, g, mv.sig};
          break;
        }
        if (slots[i].block == mv.block && slots[i].sig == mv.sig) {
          g = slots[i].group;
          break;
        }
      }
      if (g == mv.block) continue;
      --block_size[b];
      ++block_size[static_cast<size_t>(g)];
      id[static_cast<size_t>(mv.state)] = g;
      changed.push_back(mv.state);
    }
    for (int32_t b : blocks_hit) {
      moving[static_cast<size_t>(b)] = 0;
      keeps[static_cast<size_t>(b)] = 0;
    }
    blocks_hit.clear();
    if (changed.empty()) break;  // nothing moved: the partition is final
    *rounds = static_cast<int>(round);
    if (snapshots) snapshots->push(id, changed);
  }
  *stable = changed.empty();
  return id;
}

MaskClasses mask_classes(const Dfa& dfa, size_t max_token_bytes) {
  const size_t n = static_cast<size_t>(dfa.num_states);
  MaskClasses mc;
  bool stable = false;
  const std::vector<int32_t> id = moore_refine(dfa, max_token_bytes, &mc.rounds, &stable, nullptr);
  // A mask also depends on whether the state accepts (EOS).
  std::map<std::pair<int32_t, int>, int32_t> final_id;
  mc.class_of.resize(n);
  for (size_t s = 0; s < n; ++s) {
    auto [it, fresh] = final_id.emplace(std::make_pair(id[s], static_cast<int>(dfa.accepting[s])), static_cast<int32_t>(final_id.size()));
    if (fresh) mc.representative.push_back(static_cast<int32_t>(s));
    mc.class_of[s] = it->second;
  }
  return mc;
}

bool is_text_byte(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
bool is_string_byte(uint8_t b) { return b >= 0x20 && b != '"' && b != '\\'; }

// run(q) = 0 when some text byte kills q, else 1 + the least run of its text successors: a
// breadth-first search backwards from the states a text byte kills.
TextProfile text_profile(const Dfa& dfa) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  std::vector<uint8_t> text_class(k, 0);
  for (int b = 0; b < 256; ++b)
    if (is_text_byte(static_cast<uint8_t>(b))) text_class[dfa.byte_class[static_cast<size_t>(b)]] = 1;
  std::vector<size_t> text_classes;  // the loops below visit these only
  for (size_t c = 0; c < k; ++c)
    if (text_class[c]) text_classes.push_back(c);
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  std::vector<uint8_t> run(n, 255);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    for (const size_t c : text_classes) {
      const int32_t t = dfa.next[s * k + c];
      if (t >= 0) ++pred_start[static_cast<size_t>(t) + 1];
      else if (run[s] != 0) {
        run[s] = 0;
        queue.push_back(static_cast<int32_t>(s));
      }
    }
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(static_cast<size_t>(pred_start[n]));
  std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
  for (size_t s = 0; s < n; ++s)
    for (const size_t c : text_classes)
      if (const int32_t t = dfa.next[s * k + c]; t >= 0) preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const int32_t t = queue[qi];
    const int r = run[static_cast<size_t>(t)] + 1;
    if (r >= 255) break;
    for (int32_t j = pred_start[static_cast<size_t>(t)]; j < pred_start[static_cast<size_t>(t) + 1]; ++j) {
      const size_t p = static_cast<size_t>(preds[static_cast<size_t>(j)]);
      if (run[p] == 255) {
        run[p] = static_cast<uint8_t>(r);
        queue.push_back(static_cast<int32_t>(p));
      }
    }
  }
  // dies_after: q is text-uniform (every text byte leads to one state u, maybe dead); then
  // dies_after(q) = 0 when u is dead, dies_after(u) + 1 when that is known, else 255.
  constexpr int32_t kMixed = -2;
  std::vector<int32_t> uniform(n, kMixed);
  for (size_t s = 0; s < n; ++s) {
    int32_t u = kMixed;
    for (const size_t c : text_classes) {
      const int32_t t = dfa.next[s * k + c];
      if (u == kMixed) u = t;
      else if (u != t) {
        u = kMixed;
        break;
      }
    }
    uniform[s] = u;
  }
  std::vector<uint8_t> dies(n, 255), mark(n, 0);  // mark: 1 on the chain being followed, 2 done
  auto inc = [](int x) { return x >= 254 ? 255 : x + 1; };
  std::vector<int32_t> chain;
  for (size_t s0 = 0; s0 < n; ++s0) {
    if (mark[s0]) continue;
    // Follow uniform successors from s0 until a dead end, a mixed state, a done state or a cycle.
    chain.clear();
    int32_t s = static_cast<int32_t>(s0);
    int last = 255;  // dies_after of the chain's last state
    while (true) {
      mark[static_cast<size_t>(s)] = 1;
      chain.push_back(s);
      const int32_t u = uniform[static_cast<size_t>(s)];
      if (u == kMixed) break;
      if (u < 0) {
        last = 0;
        break;
      }
      if (mark[static_cast<size_t>(u)] == 2) {
        last = dies[static_cast<size_t>(u)] == 255 ? 255 : inc(dies[static_cast<size_t>(u)]);
        break;
      }
      if (mark[static_cast<size_t>(u)] == 1) break;  // a cycle of uniform states: never dies
      s = u;
    }
    for (size_t j = chain.size(); j-- > 0;) {
      dies[static_cast<size_t>(chain[j])] = static_cast<uint8_t>(last);
      mark[static_cast<size_t>(chain[j])] = 2;
      last = last == 255 ? 255 : inc(last);
    }
  }
  return {std::move(run), std::move(dies)};
}

namespace {

// Moore rounds computed for the token classes: a trie node of height h <= this is looked up by
// its state's Moore block of round h, a higher one by the state itself (unless the refinement
// settled before).
constexpr size_t kTokenClassRounds = 24;
// String-refinement rounds stored whole: most trie nodes are that shallow (the rest look up what
// changed after it).
constexpr size_t kDenseStringRounds = 16;

}  // namespace

namespace {

// sub(i, q): the tokens of trie node i's subtree that stay alive, given the DFA is in state q
// (alive) after node i's bytes. It is named by an interned tuple: (i, kAll) for the whole subtree,
// (i, kUpTo, r) for its tokens of at most depth(i) + r bytes (the text fast paths, as in
// compute_mask), else (i, j1, sub(j1, q1), j2, sub(j2, q2), ...) over the children j alive from q.
// Distinct tuples name distinct subtree sets or the same set twice (never one name for two sets),
// so equal names mean equal sets. Every string below i has at most height(i) bytes, so sub(i, q)
// depends on q only through its Moore block of round height(i): each node is named once per
// block. A state's class is (accepting, j1, sub(j1, q1), ...) over the root's children.
//
// The trie is walked once, depth first, each node with the batch of states that reach it (one per
// distinct key: Moore block, or the state itself above the rounds computed), so the lookups are
// arrays per depth indexed by the key.
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
    case 1: return cont ? 0 : -1;
    case 2: return cont ? 1 : -1;
    case 3: return cont ? 2 : -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    default: return b >= 0x80 && b <= 0x8F ? 2 : -1;
  }
}
// The same with a budget of characters (a string's maxLength): state u + 8 * level, level 0 no
// limit, level 1 + r at most r more characters started (the one in progress already counted).
constexpr int kUtf8Budgets = 24;
constexpr int kUtf8States = 8 * (1 + kUtf8Budgets);
int utf8_step(int state, uint8_t b) {
  const int u = state % 8, level = state / 8;
  const int t = utf8_char_step(u, b);
  if (t < 0) return -1;
  if (u != 0 || level == 0) return t + 8 * level;  // a continuation byte, or no limit
  if (level == 1) return -1;                        // no character left to start
  return t + 8 * (level - 1);
}

}  // namespace

// The DFA's refinement over strings of string bytes only, run beside the UTF-8 content automaton
// (states n..n + kUtf8States - 1) over byte classes that split the DFA's by the automaton's columns
// (non-string bytes: class 0, left out): a state in one block with a UTF-8 state u after h rounds
// keeps alive exactly the strings of at most h string bytes that are valid content from u.
struct StringRefinement {
  RoundBlocks blocks{kDenseStringRounds};
  int rounds = 0;
  bool stable = false;
  std::vector<std::vector<std::pair<int32_t, int>>> utf8_of;  // per round: (block, UTF-8 state), sorted
  // State q's block over the strings below node x (string bytes only, at most its height), or -1
  // when x has other bytes below or the refinement stopped short of its height.
  int32_t key(const VocabTrie::Node& x, int32_t q) const {
    const int h = x.height;
    if (!x.string_below || h >= 255 || !(stable || h <= rounds)) return -1;
    return blocks.at(static_cast<size_t>(std::min(h, rounds)), static_cast<size_t>(q));
  }
  // The least UTF-8 state in `block` (a key() of node x), or -1: below x, a state of that block
  // keeps alive exactly the tokens that are valid string content from it.
  int utf8_state(const VocabTrie::Node& x, int32_t block) const {
    const auto& pairs = utf8_of[static_cast<size_t>(std::min<int>(x.height, rounds))];
    const auto it = std::lower_bound(pairs.begin(), pairs.end(), std::make_pair(block, 0));
    return it != pairs.end() && it->first == block ? it->second : -1;
  }
};

namespace {

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

// What the walkers share, read only: the Moore blocks, the transition table by column, and the
// root's children by byte class.
struct WalkShared {
  // With `text_out` (the profile `x` refers to), the text profile is computed here too.
  WalkShared(const Dfa& d, const VocabTrie& t, const TextProfile& x, TextProfile* text_out = nullptr)
      : dfa(d), trie(t), text(x), n(static_cast<size_t>(d.num_states)), k(static_cast<size_t>(d.num_classes)), roots_in(k) {
    // Independent tasks, the longest first (the string refinement of a counting DFA runs for
    // hundreds of rounds), taken by the CPU threads as they come free.
    std::atomic<int> next_task{0};
    const int tasks = text_out ? 3 : 2;
    parallel_for(2, [&](size_t, size_t) {
      for (int task; (task = next_task.fetch_add(1)) < tasks;) {
        if (task == 0) {
          strings = refine_strings(dfa, trie.max_depth);
        } else if (task == 1) {
          moore_refine(dfa, kTokenClassRounds, &rounds, &stable, &blocks);
          transpose();
        } else {
          *text_out = text_profile(dfa);
        }
      }
    });
    for (int32_t j = 1; j < static_cast<int32_t>(trie.nodes()); j = trie.subtree_end[static_cast<size_t>(j)])
      roots_in[dfa.byte_class[trie.byte[static_cast<size_t>(j)]]].push_back(j);
  }

  // The transition table by byte class, then state: a child's batch at the root sweeps a column.
  // Transposed in tiles of 64 states, so the writes stay in cache.
  // Also the live entries of each column, in state order: live_state/live_target[live_begin[c] ..
  // live_begin[c + 1]) (a schema's state lives on about one class in six).
  void transpose() {
    column.resize(n * k);
    live_begin.assign(k + 1, 0);
    constexpr size_t kTile = 64;
    for (size_t s0 = 0; s0 < n; s0 += kTile) {
      const size_t s1 = std::min(n, s0 + kTile);
      for (size_t c = 0; c < k; ++c)
        for (size_t s = s0; s < s1; ++s) {
          const int32_t t = dfa.next[s * k + c];
          column[c * n + s] = t;
          if (t >= 0) ++live_begin[c + 1];
        }
    }
    for (size_t c = 0; c < k; ++c) live_begin[c + 1] += live_begin[c];
    live_state.resize(static_cast<size_t>(live_begin[k]));
    live_target.resize(live_state.size());
    for (size_t c = 0; c < k; ++c) {
      size_t at = static_cast<size_t>(live_begin[c]);
      const int32_t* col = column.data() + c * n;
      for (size_t s = 0; s < n; ++s)
        if (col[s] >= 0) {
          live_state[at] = static_cast<int32_t>(s);
          live_target[at++] = col[s];
        }
    }
  }
  const Dfa& dfa;
  const VocabTrie& trie;
  const TextProfile& text;
  size_t n, k;
  int rounds = 0;
  bool stable = false;
  RoundBlocks blocks{kTokenClassRounds};  // every round stored whole
  // Blocks over strings of string bytes only: the key of a node with only string bytes below.
  StringRefinement strings;
  std::vector<int32_t> column;                 // column[c * n + s] = next(s, c)
  std::vector<int32_t> live_begin, live_state, live_target;
  std::vector<std::vector<int32_t>> roots_in;  // the root's children of byte class c
};

// Names the root's children of the byte classes given to it, one class at a time, with its own
// interner: a name is only ever compared with names of the same byte class, all from one walker.
class TokenClassWalk {
 public:
  explicit TokenClassWalk(const WalkShared& sh)
      : dfa_(sh.dfa), trie_(sh.trie), text_(sh.text), n_(sh.n), sh_(sh), rounds_(sh.rounds), stable_(sh.stable), blocks_(sh.blocks),
        column_(sh.column), level_(sh.trie.max_depth + 2), all_id_(sh.trie.nodes(), -1), seen_(sh.n, -1), index_(sh.n),
        stamp_(n_ + kUtf8States, -1), slot_(n_ + kUtf8States, 0) {}

  // The root's children of byte class c: from a state, they all lead to one state t, so their names
  // are a function of t, named once per distinct t. Writes group[c * n + s], the name of s's root
  // children of class c (left -1 where s dies on c).
  void root_class(size_t c, const std::vector<int32_t>& js, int32_t* group) {
    if (js.empty()) return;
    Level& L1 = level_[1];
    const size_t live0 = static_cast<size_t>(sh_.live_begin[c]), live1 = static_cast<size_t>(sh_.live_begin[c + 1]);
    targets_.clear();
    for (size_t e = live0; e < live1; ++e)
      if (const int32_t t = sh_.live_target[e]; seen_[static_cast<size_t>(t)] != static_cast<int32_t>(c)) {
        seen_[static_cast<size_t>(t)] = static_cast<int32_t>(c);
        index_[static_cast<size_t>(t)] = static_cast<int32_t>(targets_.size());
        targets_.push_back(t);
      }
    if (targets_.empty()) return;
    const size_t m = js.size();
    names_.assign(targets_.size() * m, 0);
    for (size_t x = 0; x < m; ++x) {
      const size_t uj = static_cast<size_t>(js[x]);
      const int32_t batch = serial_++;
      L1.states.clear();
      root_slot_.resize(targets_.size());
      for (size_t y = 0; y < targets_.size(); ++y) {
        const size_t key = static_cast<size_t>(key_of(uj, targets_[y]));
        if (stamp_[key] != batch) {
          stamp_[key] = batch;
          slot_[key] = static_cast<int32_t>(L1.states.size());
          L1.states.push_back(targets_[y]);
        }
        root_slot_[y] = slot_[key];  // (the deeper levels' batches reuse stamp_ and slot_)
      }
      name(js[x], 1);
      for (size_t y = 0; y < targets_.size(); ++y) names_[y * m + x] = L1.names[static_cast<size_t>(root_slot_[y])];
    }
    gid_.resize(targets_.size());
    for (size_t y = 0; y < targets_.size(); ++y) {
      tuple_.assign(1, -3 - static_cast<int32_t>(c));  // no node's tuple starts so
      tuple_.insert(tuple_.end(), names_.begin() + static_cast<std::ptrdiff_t>(y * m), names_.begin() + static_cast<std::ptrdiff_t>((y + 1) * m));
      gid_[y] = subs_.intern(tuple_);
    }
    for (size_t e = live0; e < live1; ++e)
      group[c * n_ + static_cast<size_t>(sh_.live_state[e])] = gid_[static_cast<size_t>(index_[static_cast<size_t>(sh_.live_target[e])])];
  }

 private:
  static constexpr int32_t kAll = -1, kUpTo = -2, kUtf8 = -4;
  struct Level {
    std::vector<int32_t> states, names;  // the batch of the node being named at this depth
    std::vector<int32_t> todo, target;
    std::vector<int32_t> pair_req, pair_child, pair_name;  // alive children's names, in child order
    std::vector<int32_t> first;                            // pairs of request r: [first[r], first[r + 1])
    std::vector<int32_t> sorted;                           // pair indices grouped by request
  };

  // A UTF-8 state whose string-byte block q shares after height(node) rounds (node: string bytes
  // below), or -1.
  int utf8_state(size_t node, int32_t q) const {
    const VocabTrie::Node& x = trie_.node[node];
    const int32_t b = sh_.strings.key(x, q);
    return b < 0 ? -1 : sh_.strings.utf8_state(x, b);
  }

  int32_t key_of(size_t node, int32_t q) const {
    const VocabTrie::Node& x = trie_.node[node];
    const int h = x.height;
    if (const int32_t b = sh_.strings.key(x, q); b >= 0) return b;
    return h < 255 && (stable_ || h <= rounds_) ? blocks_.at(static_cast<size_t>(std::min(h, rounds_)), static_cast<size_t>(q)) : q;
  }

  // Names level d's batch at node i (d >= 1).
  void name(int32_t i, size_t d) {
    Level& L = level_[d];
    const size_t ui = static_cast<size_t>(i);
    const VocabTrie::Node& x = trie_.node[ui];
    const int h = x.height;
    L.names.assign(L.states.size(), 0);
    L.todo.clear();
    for (size_t r = 0; r < L.states.size(); ++r) {
      const size_t q = static_cast<size_t>(L.states[r]);
      if (x.text_below && h < 255 && h <= text_.run[q]) {
        if (all_id_[ui] < 0) all_id_[ui] = subs_.intern({i, kAll});
        L.names[r] = all_id_[ui];
      } else if (x.text_below && text_.dies_after[q] != 255) {
        L.names[r] = subs_.intern({i, kUpTo, text_.dies_after[q]});
      } else if (const int u = utf8_state(ui, static_cast<int32_t>(q)); u >= 0) {
        // The tokens below that are valid UTF-8 content from u (a name per (i, u)).
        L.names[r] = subs_.intern({i, kUtf8, u});
      } else {
        L.todo.push_back(static_cast<int32_t>(r));
      }
    }
    if (L.todo.empty()) return;
    expand(i, d, L.todo);
    for (int32_t r : L.todo) {
      tuple_.assign(1, i);
      append_pairs(L, static_cast<size_t>(r));
      L.names[static_cast<size_t>(r)] = subs_.intern(tuple_);
    }
  }

  // Names the alive children of node i (depth d) for the requests `todo` of level d's batch and
  // groups the (child, name) pairs by request.
  void expand(int32_t i, size_t d, const std::vector<int32_t>& todo) {
    Level& L = level_[d];
    Level& C = level_[d + 1];
    L.pair_req.clear();
    L.pair_child.clear();
    L.pair_name.clear();
    L.target.resize(L.states.size());
    const VocabTrie::Node* node = trie_.node.data();
    for (int32_t j = i + 1; j < node[i].subtree_end; j = node[j].subtree_end) {
      const size_t uj = static_cast<size_t>(j);
      const int32_t* col = column_.data() + static_cast<size_t>(dfa_.byte_class[node[j].byte]) * n_;
      const int32_t batch = serial_++;
      C.states.clear();
      for (int32_t r : todo) {
        const int32_t t = col[L.states[static_cast<size_t>(r)]];
        if (t < 0) {
          L.target[static_cast<size_t>(r)] = -1;
          continue;
        }
        const size_t k = static_cast<size_t>(key_of(uj, t));
        if (stamp_[k] != batch) {
          stamp_[k] = batch;
          slot_[k] = static_cast<int32_t>(C.states.size());
          C.states.push_back(t);
        }
        L.target[static_cast<size_t>(r)] = slot_[k];
      }
      if (C.states.empty()) continue;
      name(j, d + 1);
      for (int32_t r : todo)
        if (const int32_t slot = L.target[static_cast<size_t>(r)]; slot >= 0) {
          L.pair_req.push_back(r);
          L.pair_child.push_back(j);
          L.pair_name.push_back(C.names[static_cast<size_t>(slot)]);
        }
    }
    // Group by request (counting sort, stable: each request's pairs stay in child order).
    L.first.assign(L.states.size() + 1, 0);
    for (int32_t r : L.pair_req) ++L.first[static_cast<size_t>(r) + 1];
    for (size_t r = 0; r < L.states.size(); ++r) L.first[r + 1] += L.first[r];
    L.sorted.resize(L.pair_req.size());
    L.target.assign(L.first.begin(), L.first.end() - 1);  // fill positions
    for (size_t p = 0; p < L.pair_req.size(); ++p) L.sorted[static_cast<size_t>(L.target[static_cast<size_t>(L.pair_req[p])]++)] = static_cast<int32_t>(p);
  }

  void append_pairs(const Level& L, size_t r) {
    for (int32_t k = L.first[r]; k < L.first[r + 1]; ++k) {
      const size_t p = static_cast<size_t>(L.sorted[static_cast<size_t>(k)]);
      tuple_.push_back(L.pair_child[p]);
      tuple_.push_back(L.pair_name[p]);
    }
  }

  const Dfa& dfa_;
  const VocabTrie& trie_;
  const TextProfile& text_;
  size_t n_;
  const WalkShared& sh_;
  int rounds_;
  bool stable_;
  const RoundBlocks& blocks_;
  const std::vector<int32_t>& column_;
  std::vector<Level> level_;
  std::vector<int32_t> all_id_, tuple_;
  std::vector<int32_t> seen_, index_, targets_, names_, gid_, root_slot_;  // root_class's scratch
  // A batch's key -> its slot in the batch, valid where stamp_ holds the batch's serial. Keys are
  // states, blocks or UTF-8 states. One pair for every level: a batch is built, its slots noted
  // (Level::target, root_slot_), and only then are deeper batches built.
  std::vector<int32_t> stamp_, slot_;
  int32_t serial_ = 0;
  TupleInterner subs_;
};

}  // namespace

// The root's byte classes are shared out over the CPU threads, largest subtrees first, each thread
// naming whole classes with its own walker; a state's class is then (accepting, c1, g1, c2, g2, ...)
// over the byte classes c it survives, g its class-c name (from the one walker that named c).
// With `strings_out`, the refinement over string bytes it ran is handed out (the index's walks use
// it to find the vocabulary's string-content pieces).
static MaskClasses token_classes_impl(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text, TextProfile* text_out,
                                      std::shared_ptr<const StringRefinement>* strings_out = nullptr);

MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text) {
  return token_classes_impl(dfa, trie, text, nullptr);
}

MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, TextProfile* text) {
  return token_classes_impl(dfa, trie, *text, text);
}

static MaskClasses token_classes_impl(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text, TextProfile* text_out,
                                      std::shared_ptr<const StringRefinement>* strings_out) {
  WalkShared sh(dfa, trie, text, text_out);
  const size_t n = sh.n, k = sh.k;
  std::vector<int32_t> group(n * k, -1);
  std::vector<std::pair<int64_t, int32_t>> work;  // (-nodes, class)
  for (size_t c = 0; c < k; ++c) {
    int64_t nodes = 0;
    for (int32_t j : sh.roots_in[c]) nodes += trie.subtree_end[static_cast<size_t>(j)] - j;
    if (nodes) work.emplace_back(-nodes, static_cast<int32_t>(c));
  }
  std::sort(work.begin(), work.end());
  std::atomic<size_t> next{0};
  const size_t threads = std::min<size_t>(std::max(1u, cpu_threads()), work.size());
  parallel_for(threads, [&](size_t b, size_t e) {
    for (size_t w = b; w < e; ++w) {
      TokenClassWalk walk(sh);
      for (size_t x; (x = next.fetch_add(1)) < work.size();) {
        const size_t c = static_cast<size_t>(work[x].second);
        walk.root_class(c, sh.roots_in[c], group.data());
      }
    }
  });
  MaskClasses mc;
  mc.rounds = sh.rounds;
  mc.class_of.resize(n);
  mc.part_begin.assign(1, 0);
  std::vector<int32_t> tuple;
  auto tuple_of = [&](size_t s) {
    tuple.assign(1, dfa.accepting[s]);
    for (size_t c = 0; c < k; ++c)
      if (const int32_t g = group[c * n + s]; g >= 0) {
        tuple.push_back(static_cast<int32_t>(c));
        tuple.push_back(g);
      }
  };
  // Hashed column by column (the names are stored by byte class), grouped by hash and confirmed
  // against each group's first state; on a hash collision, by the tuples themselves.
  {
    std::vector<uint64_t> h(n);
    std::vector<int32_t> lives(n, 0);  // named classes a state lives on
    // The live entries of class c for states [b, e) (each class's are in state order).
    auto live_range = [&](size_t c, size_t b, size_t e) {
      const auto first = sh.live_state.begin() + sh.live_begin[c], last = sh.live_state.begin() + sh.live_begin[c + 1];
      return std::make_pair(std::lower_bound(first, last, static_cast<int32_t>(b)), std::lower_bound(first, last, static_cast<int32_t>(e)));
    };
    parallel_for(n, [&](size_t b, size_t e) {  // states split over the threads, every column each
      for (size_t s = b; s < e; ++s) h[s] = mix64(0x51ED2701ull + dfa.accepting[s]);
      for (size_t c = 0; c < k; ++c) {
        const int32_t* col = group.data() + c * n;
        const auto [x0, x1] = live_range(c, b, e);
        for (auto x = x0; x != x1; ++x) {
          const size_t s = static_cast<size_t>(*x);
          if (col[s] < 0) continue;  // a class no token starts with: never named
          h[s] = mix64(h[s] ^ ((static_cast<uint64_t>(c) << 32) | static_cast<uint32_t>(col[s])));
          ++lives[s];
        }
      }
    });
    std::unordered_map<uint64_t, int32_t> by_hash;
    for (size_t s = 0; s < n; ++s) {
      auto [it, fresh] = by_hash.emplace(h[s], static_cast<int32_t>(mc.representative.size()));
      if (fresh) mc.representative.push_back(static_cast<int32_t>(s));
      mc.class_of[s] = it->second;
    }
    std::atomic<bool> exact{true};
    parallel_for(n, [&](size_t b, size_t e) {
      bool ok = true;
      for (size_t s = b; s < e && ok; ++s) {  // equal live counts, then every live entry equal: equal tuples
        const size_t r = static_cast<size_t>(mc.representative[static_cast<size_t>(mc.class_of[s])]);
        ok = dfa.accepting[s] == dfa.accepting[r] && lives[s] == lives[r];
      }
      for (size_t c = 0; c < k && ok; ++c) {
        const int32_t* col = group.data() + c * n;
        const auto [x0, x1] = live_range(c, b, e);
        for (auto x = x0; x != x1; ++x) {
          const size_t s = static_cast<size_t>(*x);
          if (col[s] != col[mc.representative[static_cast<size_t>(mc.class_of[s])]]) ok = false;
        }
      }
      if (!ok) exact = false;
    });
    if (!exact) {
      TupleInterner classes;
      mc.representative.clear();
      for (size_t s = 0; s < n; ++s) {
        tuple_of(s);
        const size_t before = classes.size();
        mc.class_of[s] = classes.intern(tuple);
        if (classes.size() != before) mc.representative.push_back(static_cast<int32_t>(s));
      }
    }
  }
  std::unordered_map<uint64_t, int32_t> part_of;  // (byte class, name) -> part
  for (const int32_t rs : mc.representative) {
    const size_t s = static_cast<size_t>(rs);
    tuple_of(s);
    for (size_t x = 1; x < tuple.size(); x += 2) {
      const size_t c = static_cast<size_t>(tuple[x]);
      auto [it, fresh] = part_of.emplace((static_cast<uint64_t>(c) << 32) | static_cast<uint32_t>(tuple[x + 1]), static_cast<int32_t>(mc.part_target.size()));
      if (fresh) {
        mc.part_byte_class.push_back(static_cast<int32_t>(c));
        mc.part_target.push_back(dfa.next[s * k + c]);
      }
      mc.parts.push_back(it->second);
    }
    mc.part_begin.push_back(static_cast<int32_t>(mc.parts.size()));
  }
  if (strings_out) *strings_out = std::make_shared<const StringRefinement>(std::move(sh.strings));
  return mc;
}

namespace {

// The tokens of trie node j's subtree alive when the DFA is in state tj (alive) after j's bytes:
// emit(first, last, whole) for each run trie.tokens[first, last) or trie.by_length[first, last),
// whole = the node whose subtree the run is when it is one taken whole (else -1). With the
// DFA's text profile, a subtree of text bytes is taken without stepping the DFA through it: whole
// when it is no deeper than the state's run, up to a token length when the state dies after a
// fixed number of text bytes. `at` holds a state per depth (max_depth + 1). A node below j that
// the walk would descend into is first offered to skip(i, t) (t: the state after its bytes); when
// that returns true (it took the node's tokens itself), the walk passes over its subtree.
template <class Emit, class Skip>
void walk_subtree(const Dfa& dfa, const VocabTrie& trie, const TextProfile* text, int32_t j, int32_t tj, int32_t* at, Emit&& emit,
                  Skip&& skip) {
  const VocabTrie::Node* node = trie.node.data();
  const int32_t end = node[j].subtree_end;
  for (int32_t i = j; i < end;) {
    const VocabTrie::Node& x = node[i];
    const uint16_t d = x.depth;
    const int32_t t = i == j ? tj : dfa.step(at[d - 1u], x.byte);
    if (t < 0) {  // no token below this node can be completed
      i = x.subtree_end;
      continue;
    }
    at[d] = t;
    int32_t last = i + 1, whole = -1;
    if (text && x.text_below) {
      const int h = x.height;
      if (h < 255 && h <= text->run[static_cast<size_t>(t)]) {
        // Every path below is text no longer than t survives: the subtree's tokens are allowed.
        last = x.subtree_end;
        whole = i;
      } else if (const int r = text->dies_after[static_cast<size_t>(t)]; r != 255) {
        // Below, t takes exactly r more bytes: the subtree's tokens up to that length.
        const size_t limit = static_cast<size_t>(d) + static_cast<size_t>(r);
        const int32_t first = trie.by_length_begin[static_cast<size_t>(i)];
        int32_t stop = first;
        while (stop < trie.by_length_begin[static_cast<size_t>(i) + 1] && trie.length_of[static_cast<size_t>(stop)] <= limit) ++stop;
        emit(trie.by_length.data() + first, trie.by_length.data() + stop, -1);
        i = x.subtree_end;
        continue;
      }
    }
    if (whole < 0 && i != j && skip(i, t)) {
      i = x.subtree_end;
      continue;
    }
    emit(trie.tokens.data() + x.token_begin, trie.tokens.data() + node[last].token_begin, whole);
    i = last;
  }
}

template <class Emit>
void walk_subtree(const Dfa& dfa, const VocabTrie& trie, const TextProfile* text, int32_t j, int32_t tj, int32_t* at, Emit&& emit) {
  walk_subtree(dfa, trie, text, j, tj, at, std::forward<Emit>(emit), [](int32_t, int32_t) { return false; });
}

void set_bits(uint32_t* words, const int32_t* first, const int32_t* last) {
  for (; first != last; ++first) {
    const uint32_t tok = static_cast<uint32_t>(*first);
    words[tok >> 5] |= 1u << (tok & 31);
  }
}

void or_bits(uint32_t* words, const uint32_t* bits, size_t n) {
  for (size_t w = 0; w < n; ++w) words[w] |= bits[w];
}

}  // namespace

void TokenSet::add(const VocabTrie& trie, size_t words, const int32_t* first, const int32_t* last, int32_t whole) {
  const uint32_t* sub = whole >= 0 ? trie.bitmap(whole) : nullptr;
  if (bits.empty() && (sub || tokens.size() + static_cast<size_t>(last - first) > words)) {
    bits.assign(words, 0u);
    set_bits(bits.data(), tokens.data(), tokens.data() + tokens.size());
    tokens = {};
  }
  if (bits.empty()) tokens.insert(tokens.end(), first, last);
  else if (sub) or_bits(bits.data(), sub, words);
  else set_bits(bits.data(), first, last);
}

void TokenSet::add_set(const TokenSet& other, size_t words) {
  if (other.bits.empty()) {
    if (bits.empty() && tokens.size() + other.tokens.size() <= words) {
      tokens.insert(tokens.end(), other.tokens.begin(), other.tokens.end());
      return;
    }
  }
  if (bits.empty()) {
    bits.assign(words, 0u);
    set_bits(bits.data(), tokens.data(), tokens.data() + tokens.size());
    tokens = {};
  }
  other.set_in(bits.data(), words);
}

void TokenSet::set_in(uint32_t* out, size_t words) const {
  if (!bits.empty()) or_bits(out, bits.data(), words);
  else set_bits(out, tokens.data(), tokens.data() + tokens.size());
}

namespace {

// An emit for walk_subtree that sets the run's bits in `words`: a whole subtree with a bitmap by
// OR-ing that in.
auto bit_setter(const VocabTrie& trie, uint32_t* words) {
  return [&trie, words](const int32_t* first, const int32_t* last, int32_t whole) {
    if (const uint32_t* bits = whole >= 0 ? trie.bitmap(whole) : nullptr) or_bits(words, bits, trie.bitmap_words);
    else set_bits(words, first, last);
  };
}

}  // namespace

void compute_mask(const Dfa& dfa, const Vocabulary& vocab, const VocabTrie& trie, int32_t state, uint32_t* words,
                  const TextProfile* text) {
  std::fill(words, words + (static_cast<size_t>(vocab.size()) + 31) / 32, 0u);
  std::vector<int32_t> at(trie.max_depth + 1);
  at[0] = state;
  const int32_t n = static_cast<int32_t>(trie.nodes());
  for (int32_t j = 1; j < n; j = trie.subtree_end[static_cast<size_t>(j)])
    if (const int32_t t = dfa.step(state, trie.byte[static_cast<size_t>(j)]); t >= 0)
      walk_subtree(dfa, trie, text, j, t, at.data(), bit_setter(trie, words));
  if (vocab.eos >= 0 && dfa.accepting[static_cast<size_t>(state)]) {
    const uint32_t e = static_cast<uint32_t>(vocab.eos);
    words[e >> 5] |= 1u << (e & 31);
  }
}

namespace {

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
      for (int b = 0; b < 256; ++b) u.next[static_cast<size_t>(q) * 256 + static_cast<size_t>(b)] = utf8_step(q, static_cast<uint8_t>(b));
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

// The tokens below trie node i (its own included) alive from UTF-8 state u after i's bytes: valid
// string content within u's character budget. They depend on the vocabulary alone, so every lazy
// masker of one vocabulary shares them, each built on first use. A string field's states (a
// budget counted down, or none) meet the same few dozen; a masker finds them through its string
// refinement (a block holding a UTF-8 state).
struct Utf8Pieces {
  explicit Utf8Pieces(std::shared_ptr<const VocabTrie> t) : trie(std::move(t)), at(trie->max_depth + 1) {}
  const TokenSet& piece(int32_t i, int u, size_t words) {
    std::lock_guard<std::mutex> lock(mu);
    auto [it, fresh] = sets.try_emplace((static_cast<uint64_t>(i) << 8) | static_cast<uint32_t>(u));
    if (fresh)
      walk_subtree(utf8_dfa(), *trie, &utf8_text(), i, u, at.data(), [&](const int32_t* first, const int32_t* last, int32_t whole) {
        it->second.add(*trie, words, first, last, whole);
      });
    return it->second;  // (entries are never changed or erased once built)
  }
  std::shared_ptr<const VocabTrie> trie;
  std::mutex mu;
  std::unordered_map<uint64_t, TokenSet> sets;  // (node << 8 | u) -> its tokens
  std::vector<int32_t> at;
};

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

MaskSource::MaskSource(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab, Classes classes)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), trie_(vocab_trie(vocab_)), words_((static_cast<size_t>(vocab_->size()) + 31) / 32),
      utf8_(utf8_pieces(trie_)) {
  if (classes == Classes::kToken) {
    classes_ = token_classes_impl(*dfa_, *trie_, text_, &text_, &strings_);
  } else {  // three independent tasks for the CPU threads
    std::atomic<int> next_task{0};
    parallel_for(2, [&](size_t, size_t) {
      for (int task; (task = next_task.fetch_add(1)) < 3;) {
        if (task == 0) strings_ = std::make_shared<const StringRefinement>(refine_strings(*dfa_, trie_->max_depth));
        else if (task == 1) classes_ = mask_classes(*dfa_, vocab_->max_token_bytes);
        else text_ = text_profile(*dfa_);
      }
    });
  }
}

void MaskSource::compute_class_mask(int32_t cls, uint32_t* words) const {
  compute_mask(*dfa_, *vocab_, *trie_, classes_.representative[static_cast<size_t>(cls)], words, &text_);
}

const TokenSet* MaskSource::string_piece(int32_t j, int32_t t, int32_t* block) const {
  const VocabTrie::Node& x = trie_->node[static_cast<size_t>(j)];
  *block = -1;
  if (!strings_ || x.subtree_end - j < kPieceNodes) return nullptr;
  *block = strings_->key(x, t);
  if (*block < 0 || x.text_below) return nullptr;  // (a text subtree's walk takes it whole or by length)
  const int u = strings_->utf8_state(x, *block);
  return u < 0 ? nullptr : &utf8_->piece(j, u, words_);
}

// Each part shared by classes walked once (its tokens as a list, or as a bitmask when that is the
// cheaper to OR), then each class's mask as the union of its parts, a part of that class alone
// walked straight into the mask: a part shared by many classes (a string's CJK subtrees) is
// walked once, not once per class.
TokenMaskIndex::TokenMaskIndex(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab), Classes::kToken) {
  const Dfa& d = *dfa_;
  const VocabTrie& trie = *trie_;
  std::vector<std::vector<int32_t>> roots_in(static_cast<size_t>(d.num_classes));
  for (int32_t j = 1; j < static_cast<int32_t>(trie.nodes()); j = trie.subtree_end[static_cast<size_t>(j)])
    roots_in[d.byte_class[trie.byte[static_cast<size_t>(j)]]].push_back(j);
  const size_t np = classes_.part_target.size();
  std::vector<int32_t> uses(np, 0), shared;  // a part of one class only is walked into its mask
  for (int32_t p : classes_.parts) ++uses[static_cast<size_t>(p)];
  for (size_t p = 0; p < np; ++p)
    if (uses[p] > 1) shared.push_back(static_cast<int32_t>(p));
  std::vector<TokenSet> shared_parts(np);
  // A subtree of string content (a root child's, or one its walk reaches) comes from the
  // vocabulary's pieces (string_piece); the rest is walked.
  parallel_for(shared.size(), [&](size_t b, size_t e) {
    std::vector<int32_t> at(trie.max_depth + 1);
    int32_t block;
    for (size_t x = b; x < e; ++x) {
      const size_t p = static_cast<size_t>(shared[x]);
      for (int32_t j : roots_in[static_cast<size_t>(classes_.part_byte_class[p])]) {
        if (const TokenSet* vp = string_piece(j, classes_.part_target[p], &block)) {
          shared_parts[p].add_set(*vp, words_);
          continue;
        }
        walk_subtree(
            d, trie, &text_, j, classes_.part_target[p], at.data(),
            [&](const int32_t* first, const int32_t* last, int32_t whole) { shared_parts[p].add(trie, words_, first, last, whole); },
            [&](int32_t i, int32_t t) {
              const TokenSet* below = string_piece(i, t, &block);
              if (below) shared_parts[p].add_set(*below, words_);
              return below != nullptr;
            });
      }
    }
  });
  masks_.assign(num_classes() * words_, 0u);
  parallel_for(num_classes(), [&](size_t b, size_t e) {
    std::vector<int32_t> at(trie.max_depth + 1);
    int32_t block;
    for (size_t c = b; c < e; ++c) {
      uint32_t* words = masks_.data() + c * words_;
      for (int32_t x = classes_.part_begin[c]; x < classes_.part_begin[c + 1]; ++x) {
        const size_t p = static_cast<size_t>(classes_.parts[static_cast<size_t>(x)]);
        if (uses[p] == 1) {
          for (int32_t j : roots_in[static_cast<size_t>(classes_.part_byte_class[p])]) {
            if (const TokenSet* vp = string_piece(j, classes_.part_target[p], &block)) {
              vp->set_in(words, words_);
              continue;
            }
            walk_subtree(d, trie, &text_, j, classes_.part_target[p], at.data(), bit_setter(trie, words), [&](int32_t i, int32_t t) {
              const TokenSet* below = string_piece(i, t, &block);
              if (below) below->set_in(words, words_);
              return below != nullptr;
            });
          }
        } else {
          shared_parts[p].set_in(words, words_);
        }
      }
      if (vocab_->eos >= 0 && d.accepting[static_cast<size_t>(classes_.representative[c])]) {
        const uint32_t eos = static_cast<uint32_t>(vocab_->eos);
        words[eos >> 5] |= 1u << (eos & 31);
      }
    }
  });
}

LazyTokenMasker::LazyTokenMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab), Classes::kMoore) {
  at_.resize(trie_->max_depth + 1);
  piece_at_.resize(trie_->max_depth + 1);
}

const uint32_t* LazyTokenMasker::mask(int32_t state) {
  const int32_t c = class_of(state);
  auto it = cache_.find(c);
  if (it == cache_.end()) {
    std::vector<uint32_t> m(words_, 0u);
    fill(classes_.representative[static_cast<size_t>(c)], m.data());
    it = cache_.emplace(c, std::move(m)).first;
  }
  return it->second.data();
}

// compute_mask, with the root's subtrees of string bytes (64 nodes or more) taken from pieces.
void LazyTokenMasker::fill(int32_t state, uint32_t* words) {
  const Dfa& d = *dfa_;
  const VocabTrie& trie = *trie_;
  const VocabTrie::Node* node = trie.node.data();
  const int32_t nodes = static_cast<int32_t>(trie.nodes());
  // The piece of node i from state t (a root child, or a node a root child's walk reaches), built
  // on first use; false when i does not qualify.
  auto take = [&](int32_t i, int32_t t) {
    int32_t block;
    if (const TokenSet* vp = string_piece(i, t, &block)) {
      vp->set_in(words, words_);
      return true;
    }
    if (block < 0) return false;
    auto [it, fresh] = pieces_.try_emplace((static_cast<uint64_t>(i) << 32) | static_cast<uint32_t>(block));
    TokenSet& piece = it->second;
    if (fresh)  // (its own scratch: take may be called from inside the walk below)
      walk_subtree(d, trie, &text_, i, t, piece_at_.data(), [&](const int32_t* first, const int32_t* last, int32_t whole) {
        piece.add(trie, words_, first, last, whole);
      });
    piece.set_in(words, words_);
    return true;
  };
  for (int32_t j = 1; j < nodes; j = node[j].subtree_end) {
    const int32_t t = d.step(state, node[j].byte);
    if (t < 0 || take(j, t)) continue;
    // A root subtree with other bytes below: its subtrees of string bytes are taken as pieces.
    walk_subtree(d, trie, &text_, j, t, at_.data(), bit_setter(trie, words), take);
  }
  if (vocab_->eos >= 0 && d.accepting[static_cast<size_t>(state)]) {
    const uint32_t e = static_cast<uint32_t>(vocab_->eos);
    words[e >> 5] |= 1u << (e & 31);
  }
}

}  // namespace ib::constrain
