#include "constrain/grammar_mask.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ib::constrain {
namespace {

// A position's cache key: its stacks' frames, in order.
void position_key(const GrammarStacks& stacks, std::string& key) {
  key.clear();
  for (const auto& st : stacks) {
    key.append(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(GrammarFrame));
    key.push_back('|');
  }
}

bool bottom_returns(const Grammar& g, const GrammarStacks& at) {
  for (const auto& st : at)
    if (st.size() == 1 && g.rule(st[0].rule).dfa.accepting[static_cast<size_t>(st[0].state)]) return true;
  return false;
}

// The position cache is cleared past these: positions cost their key (a few frames), the masks
// their words, stored once each (a large vocabulary's masks are the bound).
constexpr size_t kMaxPositionsCached = 65536;
constexpr size_t kMaxPooledMaskBytes = size_t{64} << 20;
constexpr int64_t kUnfinishable = GrammarDistances::kNone;

int64_t add_distances(int64_t a, int64_t b) {
  return a >= kUnfinishable || b >= kUnfinishable ? kUnfinishable : std::min(a + b, kUnfinishable);
}

// The distance of a stack's frames under its top.
int64_t below_top(const GrammarDistances& d, const GrammarStack& st) {
  int64_t sum = 0;
  for (size_t i = 0; i + 1 < st.size(); ++i) sum = add_distances(sum, d.of(st[i].rule)[static_cast<size_t>(st[i].state)]);
  return sum;
}

}  // namespace

GrammarTokenMasker::GrammarTokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
                                       std::shared_ptr<const GrammarDistances> dist)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), trie_(vocab_trie(vocab_)), dist_(std::move(dist)) {
  words_ = (static_cast<size_t>(vocab_->size()) + 31) / 32;
  scratch_.assign(words_, 0);
}

void GrammarTokenMasker::set_tokens_at(int32_t node, uint32_t* out) const {
  const auto& n = trie_->node[static_cast<size_t>(node)];
  const int32_t end = trie_->node[static_cast<size_t>(node) + 1].token_begin;
  for (int32_t k = n.token_begin; k < end; ++k) {
    const auto t = static_cast<uint32_t>(trie_->tokens[static_cast<size_t>(k)]);
    out[t >> 5] |= 1u << (t & 31);
  }
}

void GrammarTokenMasker::take(int32_t node, int64_t finish, uint32_t* out) {
  if (dist_) {
    if (trie_->node[static_cast<size_t>(node)].token_begin == trie_->node[static_cast<size_t>(node) + 1].token_begin) return;
    if (finish > limit_) return;
    reach_seen_ = std::max(reach_seen_, finish);
  }
  set_tokens_at(node, out);
}

void GrammarTokenMasker::take_subtree(int32_t node, int64_t finish, uint32_t* out) {
  const int32_t first = trie_->node[static_cast<size_t>(node)].token_begin;
  const int32_t last = trie_->node[static_cast<size_t>(trie_->node[static_cast<size_t>(node)].subtree_end)].token_begin;
  if (first == last) return;
  if (dist_) {
    if (finish > limit_) return;
    reach_seen_ = std::max(reach_seen_, finish);
  }
  for (int32_t k = first; k < last; ++k) {
    const auto t = static_cast<uint32_t>(trie_->tokens[static_cast<size_t>(k)]);
    out[t >> 5] |= 1u << (t & 31);
  }
}

int32_t GrammarTokenMasker::text_next(int32_t rule, int32_t state) {
  if (text_next_.empty()) text_next_.resize(grammar_->size());
  auto& known = text_next_[static_cast<size_t>(rule)];
  const GrammarRule& r = grammar_->rule(rule);
  if (known.empty()) known.assign(static_cast<size_t>(r.dfa.num_states), -3);
  int32_t& k = known[static_cast<size_t>(state)];
  if (k == -3) {
    k = r.dfa.step(state, ' ');
    for (int b = 0x21; k != -2 && b < 0x7F; ++b)
      if (b != '"' && b != '\\' && r.dfa.step(state, static_cast<uint8_t>(b)) != k) k = -2;
  }
  return k;
}

bool GrammarTokenMasker::take_text_subtree(int32_t c, const GrammarStack& base, int64_t below, int32_t state, uint32_t* out) {
  const int32_t rule = base.back().rule;
  const GrammarRule& r = grammar_->rule(rule);
  const int32_t first = trie_->by_length_begin[static_cast<size_t>(c)], last = trie_->by_length_begin[static_cast<size_t>(c) + 1];
  if (first == last) return true;
  const int32_t depth = trie_->node[static_cast<size_t>(c)].depth;
  const int32_t longest = trie_->length_of[static_cast<size_t>(last) - 1];
  // chain_[k]: the state after depth + k bytes (-1 once dead); every live one must be plain.
  chain_.assign(1, state);
  for (int32_t k = 1; k <= longest - depth; ++k) {
    const int32_t prev = chain_.back();
    int32_t next = -1;
    if (prev >= 0) {
      next = text_next(rule, prev);
      if (next == -2) return false;
      if (next >= 0 && !r.live[static_cast<size_t>(next)]) next = -1;
      if (next >= 0 && !r.plain[static_cast<size_t>(next)]) return false;
    }
    chain_.push_back(next);
  }
  const std::vector<int32_t>* top_dist = dist_ ? &dist_->of(rule) : nullptr;
  for (int32_t k = first; k < last; ++k) {
    const int32_t end = chain_[static_cast<size_t>(trie_->length_of[static_cast<size_t>(k)] - depth)];
    if (end < 0) break;  // longer tokens are dead too
    if (dist_) {
      const int64_t finish = add_distances(below, (*top_dist)[static_cast<size_t>(end)]);
      if (finish > limit_) continue;
      reach_seen_ = std::max(reach_seen_, finish);
    }
    const auto t = static_cast<uint32_t>(trie_->by_length[static_cast<size_t>(k)]);
    out[t >> 5] |= 1u << (t & 31);
  }
  return true;
}

void GrammarTokenMasker::walk_top(int32_t node, const GrammarStack& base, int64_t below, int32_t state, uint32_t* out,
                                  std::vector<int32_t>* returns) {
  const GrammarRule& r = grammar_->rule(base.back().rule);
  const std::vector<int32_t>* top_dist = dist_ ? &dist_->of(base.back().rule) : nullptr;
  const int32_t end = trie_->node[static_cast<size_t>(node)].subtree_end;
  for (int32_t c = node + 1; c < end; c = trie_->node[static_cast<size_t>(c)].subtree_end) {
    const int32_t t = r.dfa.step(state, trie_->node[static_cast<size_t>(c)].byte);
    if (t < 0 || !r.live[static_cast<size_t>(t)]) continue;
    if (r.plain[static_cast<size_t>(t)]) {
      const int64_t finish = top_dist ? add_distances(below, (*top_dist)[static_cast<size_t>(t)]) : 0;
      const auto& n = trie_->node[static_cast<size_t>(c)];
      // String content: a token of text bytes only stays in this state (a loop: the whole subtree
      // at once), or ends where its length leads down the text successors (maxLength's counting).
      if (n.text_below && n.byte >= 0x20 && n.byte < 0x7F && n.byte != '"' && n.byte != '\\') {
        const int32_t next = text_next(base.back().rule, t);
        if (next == t) {
          take_subtree(c, finish, out);
          continue;
        }
        if (next != -2 && take_text_subtree(c, base, below, t, out)) continue;
      }
      take(c, finish, out);
      walk_top(c, base, below, t, out, returns);
      continue;
    }
    GrammarStacks next = {base};
    next[0].back().state = t;
    grammar_close(*grammar_, next);
    if (next.empty()) continue;
    take(c, dist_ ? dist_->finish(next) : 0, out);
    if (returns && bottom_returns(*grammar_, next)) returns->push_back(c);
    walk(c, next, out, returns);
  }
}

void GrammarTokenMasker::walk(int32_t node, const GrammarStacks& at, uint32_t* out, std::vector<int32_t>* returns) {
  if (at.size() == 1) {
    walk_top(node, at[0], dist_ ? below_top(*dist_, at[0]) : 0, at[0].back().state, out, returns);
    return;
  }
  const int32_t end = trie_->node[static_cast<size_t>(node)].subtree_end;
  GrammarStacks next;
  for (int32_t c = node + 1; c < end; c = trie_->node[static_cast<size_t>(c)].subtree_end) {
    grammar_step(*grammar_, at, trie_->node[static_cast<size_t>(c)].byte, next);
    if (next.empty()) continue;
    take(c, dist_ ? dist_->finish(next) : 0, out);
    if (returns && bottom_returns(*grammar_, next)) returns->push_back(c);
    walk(c, next, out, returns);
  }
}

const GrammarTokenMasker::FrameMask& GrammarTokenMasker::frame_mask(const GrammarFrame& f) {
  const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(f.rule)) << 32 | static_cast<uint32_t>(f.state);
  auto it = frames_.find(key);
  if (it != frames_.end()) return it->second;
  FrameMask m;
  m.inside.assign(words_, 0);
  GrammarStacks at = {{f}};
  grammar_close(*grammar_, at);
  reach_seen_ = 0;
  walk(0, at, m.inside.data(), &m.returns);
  m.reach = reach_seen_;
  return frames_.emplace(key, std::move(m)).first->second;
}

const uint32_t* GrammarTokenMasker::mask(const GrammarStacks& stacks, int32_t* reach) {
  // The key in a buffer kept across calls: a step that finds its position allocates nothing.
  position_key(stacks, key_);
  const std::string& key = key_;
  if (auto it = positions_.find(key); it != positions_.end()) {
    if (reach) *reach = it->second.reach;
    return pool_[static_cast<size_t>(it->second.mask)].data();
  }
  std::fill(scratch_.begin(), scratch_.end(), 0u);
  int64_t position_reach = dist_ ? 0 : kUnfinishable;
  for (const auto& st : stacks) {
    const FrameMask& fm = frame_mask(st.back());
    for (size_t w = 0; w < words_; ++w) scratch_[w] |= fm.inside[w];
    // An inside token leads to the frame's own stacks over the frames below this one.
    if (dist_) position_reach = std::max(position_reach, add_distances(below_top(*dist_, st), fm.reach));
    if (st.size() < 2 || fm.returns.empty()) continue;
    // The rule returns part-way through these tokens: the rest of their bytes in the caller's.
    GrammarStacks caller = {GrammarStack(st.begin(), st.end() - 1)};
    grammar_close(*grammar_, caller);
    // The walk's own returns list is unused: these are whole stacks, their distances exact.
    reach_seen_ = 0;
    for (int32_t node : fm.returns) walk(node, caller, scratch_.data(), nullptr);
    if (dist_) position_reach = std::max(position_reach, reach_seen_);
  }
  // Tokens without bytes (the trie's root holds them) are never set by a walk; EOS where the document may end.
  if (vocab_->eos >= 0 && grammar_accepts(*grammar_, stacks))
    scratch_[static_cast<size_t>(vocab_->eos) >> 5] |= 1u << (vocab_->eos & 31);
  if (positions_.size() >= kMaxPositionsCached || (pool_.size() + 1) * words_ * sizeof(uint32_t) > kMaxPooledMaskBytes) {
    positions_.clear();
    pool_.clear();
    pool_by_hash_.clear();
  }
  PositionMask& p = positions_[key];
  p.mask = pooled(scratch_);
  p.reach = static_cast<int32_t>(std::min(position_reach, kUnfinishable));
  if (reach) *reach = p.reach;
  return pool_[static_cast<size_t>(p.mask)].data();
}

int32_t GrammarTokenMasker::pooled(const std::vector<uint32_t>& mask) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (uint32_t w : mask) h = (h ^ w) * 1099511628211ull;
  const auto range = pool_by_hash_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it)
    if (pool_[static_cast<size_t>(it->second)] == mask) return it->second;
  const auto id = static_cast<int32_t>(pool_.size());
  pool_.push_back(mask);
  pool_by_hash_.emplace(h, id);
  return id;
}

void GrammarTokenMasker::mask_within(const GrammarStacks& stacks, int32_t limit, uint32_t* out) {
  if (!dist_) throw std::logic_error("GrammarTokenMasker::mask_within needs the grammar's distances");
  std::fill(out, out + words_, 0u);
  limit_ = limit;
  walk(0, stacks, out, nullptr);
  limit_ = kUnfinishable;
  if (vocab_->eos >= 0 && grammar_accepts(*grammar_, stacks))
    out[static_cast<size_t>(vocab_->eos) >> 5] |= 1u << (vocab_->eos & 31);
}

GrammarStacks grammar_advance(const Grammar& g, const Vocabulary& vocab, const GrammarStacks& stacks, int32_t token) {
  GrammarStacks s = stacks;
  const std::string& bytes = vocab.token_bytes[static_cast<size_t>(token)];
  if (bytes.empty() || !grammar_walk(g, s, bytes)) return {};
  return s;
}

}  // namespace ib::constrain

namespace ib::constrain {

std::vector<int32_t> grammar_tokenize_greedy(const Grammar& g, const Vocabulary& vocab, const VocabTrie& trie,
                                             const std::string& text) {
  std::vector<int32_t> out;
  GrammarStacks at = grammar_start(g);
  for (size_t pos = 0; pos < text.size();) {
    // The trie nodes along the rest of the text, deepest first.
    std::vector<int32_t> path;
    int32_t node = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      int32_t next = -1;
      for (int32_t c = node + 1; c < trie.node[static_cast<size_t>(node)].subtree_end;
           c = trie.node[static_cast<size_t>(c)].subtree_end)
        if (trie.node[static_cast<size_t>(c)].byte == static_cast<uint8_t>(text[k])) {
          next = c;
          break;
        }
      if (next < 0) break;
      path.push_back(node = next);
    }
    bool taken = false;
    for (auto it = path.rbegin(); it != path.rend() && !taken; ++it) {
      const auto& n = trie.node[static_cast<size_t>(*it)];
      for (int32_t k = n.token_begin; k < trie.node[static_cast<size_t>(*it) + 1].token_begin && !taken; ++k) {
        const int32_t t = trie.tokens[static_cast<size_t>(k)];
        GrammarStacks next = grammar_advance(g, vocab, at, t);
        if (next.empty()) continue;
        at = std::move(next);
        out.push_back(t);
        pos += vocab.token_bytes[static_cast<size_t>(t)].size();
        taken = true;
      }
    }
    if (!taken) return {};
  }
  return out;
}

}  // namespace ib::constrain
