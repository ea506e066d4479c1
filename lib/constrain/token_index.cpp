#include "constrain/token_index.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

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
  cache[vocab.get()] = trie;
  return trie;
}

namespace {
struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return static_cast<size_t>(p.first ^ (p.second >> 1)); }
};
using Sig = std::pair<uint64_t, uint64_t>;
}  // namespace

// Moore refinement limited to `max_token_bytes` rounds, done incrementally: after a round only
// the predecessors of states that changed block need a new signature, and within a block only
// those states can leave it (the others keep the block's old signature).
MaskClasses mask_classes(const Dfa& dfa, size_t max_token_bytes) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  // Predecessors, as CSR.
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  for (size_t e = 0; e < n * k; ++e)
    if (dfa.next[e] >= 0) ++pred_start[static_cast<size_t>(dfa.next[e]) + 1];
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(static_cast<size_t>(pred_start[n]));
  {
    std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
    for (size_t s = 0; s < n; ++s)
      for (size_t c = 0; c < k; ++c)
        if (int32_t t = dfa.next[s * k + c]; t >= 0) preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
  }
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
  for (size_t s = 0; s < n; ++s) {
    const size_t first = edges.size();
    for (size_t c = 0; c < k; ++c) {
      const int32_t t = dfa.next[s * k + c];
      size_t e = first;
      while (e < edges.size() && edges[e].to != t) ++e;
      if (e == edges.size()) edges.push_back({t, 0, 0});
      edges[e].w1 += r1[c];
      edges[e].w2 += r2[c];
    }
    edge_start[s + 1] = static_cast<int32_t>(edges.size());
  }
  auto signature = [&](size_t s) {
    uint64_t h1 = 0, h2 = 0;
    for (int32_t e = edge_start[s]; e < edge_start[s + 1]; ++e) {
      const Edge& ed = edges[static_cast<size_t>(e)];
      const uint64_t b = ed.to < 0 ? 0xFFFFFFFFull : static_cast<uint64_t>(id[static_cast<size_t>(ed.to)]);
      h1 += ed.w1 * mix64(b + 0x9E3779B97F4A7C15ull);
      h2 += ed.w2 * mix64(b ^ 0xC2B2AE3D27D4EB4Full);
    }
    return Sig{h1, h2};
  };
  std::vector<Sig> sig(n), block_sig;
  std::vector<int32_t> block_size;
  std::vector<int32_t> changed, affected;
  std::vector<uint32_t> seen(n, 0);
  uint32_t epoch = 0;
  MaskClasses mc;
  // Round 1 over every state (all in one block before it).
  {
    std::unordered_map<Sig, int32_t, PairHash> groups;
    for (size_t s = 0; s < n; ++s) {
      sig[s] = signature(s);
      auto [it, fresh] = groups.emplace(sig[s], static_cast<int32_t>(groups.size()));
      if (fresh) {
        block_sig.push_back(sig[s]);
        block_size.push_back(0);
      }
      ++block_size[static_cast<size_t>(it->second)];
    }
    for (size_t s = 0; s < n; ++s) {
      id[s] = groups[sig[s]];
      if (id[s] != 0) changed.push_back(static_cast<int32_t>(s));
    }
    mc.rounds = 1;
  }
  for (size_t round = 2; round <= max_token_bytes && !changed.empty(); ++round) {
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
    std::unordered_map<int32_t, std::unordered_map<Sig, std::vector<int32_t>, PairHash>> movers;
    for (int32_t s : affected)
      if (sig[static_cast<size_t>(s)] != block_sig[static_cast<size_t>(id[static_cast<size_t>(s)])])
        movers[id[static_cast<size_t>(s)]][sig[static_cast<size_t>(s)]].push_back(s);
    changed.clear();
    for (auto& [b, groups] : movers) {
      size_t moving = 0;
      for (const auto& [sg, members] : groups) moving += members.size();
      auto it = groups.begin();
      if (moving == static_cast<size_t>(block_size[static_cast<size_t>(b)]) ) {
        // The whole block moves: one group keeps the block (no split for it).
        block_sig[static_cast<size_t>(b)] = it->first;
        ++it;
      }
      for (; it != groups.end(); ++it) {
        const int32_t nb = static_cast<int32_t>(block_sig.size());
        block_sig.push_back(it->first);
        block_size.push_back(static_cast<int32_t>(it->second.size()));
        block_size[static_cast<size_t>(b)] -= static_cast<int32_t>(it->second.size());
        for (int32_t s : it->second) {
          id[static_cast<size_t>(s)] = nb;
          changed.push_back(s);
        }
      }
    }
    mc.rounds = static_cast<int>(round);
  }
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

// run(q) = 0 when some text byte kills q, else 1 + the least run of its text successors: a
// breadth-first search backwards from the states a text byte kills.
TextProfile text_profile(const Dfa& dfa) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  std::vector<uint8_t> text_class(k, 0);
  for (int b = 0; b < 256; ++b)
    if (is_text_byte(static_cast<uint8_t>(b))) text_class[dfa.byte_class[static_cast<size_t>(b)]] = 1;
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  std::vector<uint8_t> run(n, 255);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    for (size_t c = 0; c < k; ++c) {
      if (!text_class[c]) continue;
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
    for (size_t c = 0; c < k; ++c)
      if (const int32_t t = dfa.next[s * k + c]; text_class[c] && t >= 0)
        preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
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
    for (size_t c = 0; c < k; ++c) {
      if (!text_class[c]) continue;
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

void compute_mask(const Dfa& dfa, const Vocabulary& vocab, const VocabTrie& trie, int32_t state, uint32_t* words,
                  const TextProfile* text) {
  std::fill(words, words + (static_cast<size_t>(vocab.size()) + 31) / 32, 0u);
  std::vector<int32_t> at(trie.max_depth + 1);
  at[0] = state;
  const int32_t n = static_cast<int32_t>(trie.nodes());
  for (int32_t i = 1; i < n;) {
    const uint16_t d = trie.depth[static_cast<size_t>(i)];
    const int32_t t = dfa.step(at[d - 1u], trie.byte[static_cast<size_t>(i)]);
    if (t < 0) {  // no token below this node can be completed
      i = trie.subtree_end[static_cast<size_t>(i)];
      continue;
    }
    at[d] = t;
    int32_t last = i + 1;
    if (text && trie.text_below[static_cast<size_t>(i)]) {
      const int h = trie.height[static_cast<size_t>(i)];
      if (h < 255 && h <= text->run[static_cast<size_t>(t)]) {
        // Every path below is text no longer than t survives: the subtree's tokens are allowed.
        last = trie.subtree_end[static_cast<size_t>(i)];
      } else if (const int r = text->dies_after[static_cast<size_t>(t)]; r != 255) {
        // Below, t takes exactly r more bytes: the subtree's tokens up to that length.
        const size_t limit = static_cast<size_t>(d) + static_cast<size_t>(r);
        for (int32_t j = trie.by_length_begin[static_cast<size_t>(i)]; j < trie.by_length_begin[static_cast<size_t>(i) + 1]; ++j) {
          if (trie.length_of[static_cast<size_t>(j)] > limit) break;
          const uint32_t tok = static_cast<uint32_t>(trie.by_length[static_cast<size_t>(j)]);
          words[tok >> 5] |= 1u << (tok & 31);
        }
        i = trie.subtree_end[static_cast<size_t>(i)];
        continue;
      }
    }
    for (int32_t j = trie.token_begin[static_cast<size_t>(i)]; j < trie.token_begin[static_cast<size_t>(last)]; ++j) {
      const uint32_t tok = static_cast<uint32_t>(trie.tokens[static_cast<size_t>(j)]);
      words[tok >> 5] |= 1u << (tok & 31);
    }
    i = last;
  }
  if (vocab.eos >= 0 && dfa.accepting[static_cast<size_t>(state)]) {
    const uint32_t e = static_cast<uint32_t>(vocab.eos);
    words[e >> 5] |= 1u << (e & 31);
  }
}

MaskSource::MaskSource(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : dfa_(std::move(dfa)), vocab_(std::move(vocab)), trie_(vocab_trie(vocab_)),
      classes_(mask_classes(*dfa_, vocab_->max_token_bytes)), text_(text_profile(*dfa_)), words_((static_cast<size_t>(vocab_->size()) + 31) / 32) {}

void MaskSource::compute_class_mask(int32_t cls, uint32_t* words) const {
  compute_mask(*dfa_, *vocab_, *trie_, classes_.representative[static_cast<size_t>(cls)], words, &text_);
}

TokenMaskIndex::TokenMaskIndex(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab)) {
  masks_.resize(num_classes() * words_);
  parallel_for(num_classes(), [&](size_t b, size_t e) {
    for (size_t c = b; c < e; ++c) compute_class_mask(static_cast<int32_t>(c), masks_.data() + c * words_);
  });
}

LazyTokenMasker::LazyTokenMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab)) {}

const uint32_t* LazyTokenMasker::mask(int32_t state) {
  const int32_t c = class_of(state);
  auto it = cache_.find(c);
  if (it == cache_.end()) {
    std::vector<uint32_t> m(words_);
    compute_class_mask(c, m.data());
    it = cache_.emplace(c, std::move(m)).first;
  }
  return it->second.data();
}

}  // namespace ib::constrain
