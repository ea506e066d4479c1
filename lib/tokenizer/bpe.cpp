// The BPE model of `tokenizers`: characters (or <0xNN> byte fallback, or unk) become symbols, then
// the lowest-ranked merge is applied first, leftmost on ties, with a heap over a linked list of
// symbols, so a long word costs O(n log n), not a rescan per merge.
#include <algorithm>

#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

namespace {

constexpr size_t kCacheCapacity = 1 << 16;  // words
constexpr size_t kCacheMaxWord = 256;       // bytes; longer words are not cached (as `tokenizers`)

// A 4-ary min-heap of merge candidates keyed by rank << 32 | position.
class MergeHeap {
 public:
  struct Entry {
    uint64_t key;
    int32_t new_id;
  };
  static uint64_t key(uint32_t rank, size_t pos) { return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos); }
  void clear() { v_.clear(); }
  bool empty() const { return v_.empty(); }
  void add(Entry e) { v_.push_back(e); }  // then heapify()
  void heapify() {
    for (size_t i = v_.size() / 4 + 1; i-- > 0;) down(i);
  }
  void push(Entry e) {
    v_.push_back(e);
    size_t i = v_.size() - 1;
    while (i > 0) {
      const size_t parent = (i - 1) / 4;
      if (v_[parent].key <= e.key) break;
      v_[i] = v_[parent];
      i = parent;
    }
    v_[i] = e;
  }
  Entry pop() {
    const Entry top = v_.front();
    v_.front() = v_.back();
    v_.pop_back();
    if (!v_.empty()) down(0);
    return top;
  }

 private:
  void down(size_t i) {
    const size_t n = v_.size();
    if (i >= n) return;
    const Entry e = v_[i];
    while (true) {
      const size_t first = 4 * i + 1;
      if (first >= n) break;
      size_t best = first;
      const size_t last = std::min(first + 4, n);
      for (size_t c = first + 1; c < last; ++c)
        if (v_[c].key < v_[best].key) best = c;
      if (v_[best].key >= e.key) break;
      v_[i] = v_[best];
      i = best;
    }
    v_[i] = e;
  }
  std::vector<Entry> v_;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

void BpeModel::MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n + 2) cap *= 2;  // at most half full
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  used_ = 0;
}

void BpeModel::MergeTable::set(uint64_t key, Merge m) {
  if (2 * (used_ + 1) > slots_.size()) {  // grow (reserve was too small)
    std::vector<Slot> old;
    old.swap(slots_);
    reserve(old.size());
    for (const Slot& s : old)
      if (s.key != kEmpty) set(s.key, s.merge);
  }
  for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = m;
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.merge = m;
      ++used_;
      return;
    }
  }
}

BpeModel::BpeModel(const Json& model) {
  byte_ids_.fill(-1);
  if (model.has("type") && model["type"].str() != "BPE")
    model["type"].fail("'" + model["type"].str() + "' is not supported (BPE)");
  if (model.has("dropout")) {
    const double p = model["dropout"].number();
    if (p != 0.0) model["dropout"].fail("dropout must be null: a sampled segmentation is not reproducible");
  }
  if (!model.has("vocab") || !model.has("merges")) model.fail("missing vocab/merges");
  Json vocab = model["vocab"];
  if (!vocab.is_object()) vocab.fail("expected an object of token: id");

  tokens_.reserve(vocab.raw().size());
  ids_.reserve(vocab.raw().size());
  by_id_.reserve(vocab.raw().size());
  for (const auto& [token, idj] : vocab.raw().items()) {
    Json at = vocab.child(token, idj);
    const auto id = static_cast<int32_t>(at.integer(0, kMaxId));
    if (by_id_.count(id)) at.fail("id " + std::to_string(id) + " is also the id of '" + tokens_[by_id_[id]] + "'");
    by_id_.emplace(id, static_cast<uint32_t>(tokens_.size()));
    tokens_.push_back(token);
    ids_.push_back(id);
    max_id_ = std::max(max_id_, id);
  }
  vocab_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) vocab_.emplace(std::string_view(tokens_[i]), ids_[i]);

  if (auto unk = model.opt_str("unk_token")) {
    auto it = vocab_.find(*unk);
    if (it == vocab_.end()) model["unk_token"].fail("'" + *unk + "' is not in the vocabulary");
    unk_id_ = it->second;
  }
  continuing_subword_prefix_ = model.opt_str("continuing_subword_prefix").value_or("");
  end_of_word_suffix_ = model.opt_str("end_of_word_suffix").value_or("");
  fuse_unk_ = model.opt_bool("fuse_unk", false);
  byte_fallback_ = model.opt_bool("byte_fallback", false);
  ignore_merges_ = model.opt_bool("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    static const char* hex = "0123456789ABCDEF";
    const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
    if (auto it = vocab_.find(name); it != vocab_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
  }

  // Merges: [["a", "b"], ...] or the older ["a b", ...] (lines starting "#version" skipped).
  Json merges = model["merges"];
  const size_t n = merges.size();
  bool tuples = true, strings = true;
  for (size_t i = 0; i < n; ++i) {
    const auto& m = merges.raw()[i];
    tuples = tuples && m.is_array();
    strings = strings && m.is_string();
  }
  if (!tuples && !strings) merges.fail("expected a list of [\"a\", \"b\"] pairs or a list of \"a b\" strings");
  const size_t prefix_len = continuing_subword_prefix_.size();
  merges_.reserve(n);
  uint32_t rank = 0;
  for (size_t i = 0; i < n; ++i) {
    Json m = merges.at(i);
    std::string a, b;
    if (tuples) {
      if (m.size() != 2) m.fail("a merge is a pair of two tokens");
      a = m.at(0).str();
      b = m.at(1).str();
    } else {
      const std::string line = m.str();
      if (line.rfind("#version", 0) == 0) continue;
      const size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        m.fail("'" + line + "' is not two tokens separated by one space");
      a = line.substr(0, sp);
      b = line.substr(sp + 1);
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end()) m.fail("'" + a + "' is not in the vocabulary");
    if (ib == vocab_.end()) m.fail("'" + b + "' is not in the vocabulary");
    if (b.size() < prefix_len) m.fail("'" + b + "' is shorter than the continuing_subword_prefix");
    const std::string merged = a + b.substr(prefix_len);
    auto im = vocab_.find(merged);
    if (im == vocab_.end())
      m.fail(
          "the merged token '" + merged + "' is not in the vocabulary" +
          (prefix_len > 0 ? " (continuing_subword_prefix '" + continuing_subword_prefix_ + "' dropped from '" + b + "')" : ""));
    merges_.set(pair_key(ia->second, ib->second), Merge{rank, im->second});  // a repeated pair: the later rank
    ++rank;
  }

  // A barrier: a character (SentencePiece's U+2581, a space, byte-level's U+0120) that is in the
  // vocabulary and that no token has after a different character. Word-level prefix or suffix and
  // unk handling make splitting unsafe (they look at the whole word), so then there is none.
  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    for (const char* candidate : {"\xE2\x96\x81", " ", "\xC4\xA0"}) {
      const std::string c = candidate;
      if (!vocab_.count(c)) continue;
      bool safe = true;
      for (const auto& t : tokens_) {
        for (size_t pos = t.find(c, 1); safe && pos != std::string::npos; pos = t.find(c, pos + 1))
          if (pos < c.size() || t.compare(pos - c.size(), c.size(), c) != 0) safe = false;
        if (!safe) break;
      }
      if (safe) {
        barrier_ = c;
        break;
      }
    }
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (word.size() <= kCacheMaxWord || barrier_.empty()) {
    tokenize_chunk(word, out);
    return;
  }
  // A long word (a text without a pre-tokenizer) falls apart before each barrier that follows
  // another character: no merge can join across it, so the pieces merge alone, and are cached.
  size_t start = 0;
  for (size_t pos = word.find(barrier_, 1); pos != std::string_view::npos; pos = word.find(barrier_, pos + 1)) {
    if (pos >= barrier_.size() && word.compare(pos - barrier_.size(), barrier_.size(), barrier_) == 0) continue;  // in a run
    tokenize_chunk(word.substr(start, pos - start), out);
    start = pos;
  }
  tokenize_chunk(word.substr(start), out);
}

void BpeModel::tokenize_chunk(std::string_view word, std::vector<int32_t>* out) const {
  const bool cacheable = word.size() < kCacheMaxWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(std::string(word)); it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out->size();
  merge_word(word, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() < kCacheCapacity)
      cache_.emplace(std::string(word), std::vector<int32_t>(out->begin() + static_cast<std::ptrdiff_t>(before), out->end()));
  }
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>* out) const {
  struct Symbol {
    int32_t c;
    int32_t prev, next;
    uint32_t len;  // 0: merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t c, size_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({c, n - 1, -1, static_cast<uint32_t>(len)});
  };

  // Characters to symbols, as BPE::merge_word does (including where a pending unk lands).
  bool unk = false;  // an unk symbol is pending (fuse_unk grows it)
  int32_t unk_sym = -1;
  size_t unk_len = 0;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    const size_t start = i;
    i += utf8_len(static_cast<unsigned char>(w[i]));
    if (i > w.size()) i = w.size();
    const size_t byte_len = i - start;
    const bool first = start == 0, last = i == w.size();
    std::string_view piece = w.substr(start, byte_len);
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      s.assign(first ? "" : continuing_subword_prefix_);
      s.append(piece);
      if (last) s += end_of_word_suffix_;
      piece = s;
    }
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      if (unk) {
        add(unk_sym, unk_len);
        unk = false;
      }
      add(it->second, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk && fuse_unk_) {
        unk_len += byte_len;
      } else {
        if (unk) add(unk_sym, unk_len);
        unk = true;
        unk_sym = *unk_id_;
        unk_len = byte_len;
      }
    }
  }
  if (unk) add(unk_sym, unk_len);

  // Lowest rank first, then leftmost position (Word::merge_all): a 4-ary min-heap on
  // rank << 32 | position, built in O(n), since a text without a pre-tokenizer is one long word.
  thread_local MergeHeap queue;
  queue.clear();
  auto find_merge = [&](int32_t a, int32_t b) { return merges_.find(pair_key(a, b)); };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const Merge* m = find_merge(symbols[i].c, symbols[i + 1].c)) queue.add({MergeHeap::key(m->rank, i), m->new_id});
  queue.heapify();

  while (!queue.empty()) {
    const MergeHeap::Entry top = queue.pop();
    const auto top_pos = static_cast<int32_t>(top.key & 0xFFFFFFFFu);
    Symbol& left = symbols[static_cast<size_t>(top_pos)];
    if (left.len == 0 || left.next == -1) continue;
    const Symbol right = symbols[static_cast<size_t>(left.next)];
    // A stale entry: the pair there no longer merges into this token.
    const Merge* m = find_merge(left.c, right.c);
    if (!m || m->new_id != top.new_id) continue;
    left.c = top.new_id;
    left.len += right.len;
    symbols[static_cast<size_t>(left.next)].len = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top_pos;
    if (left.prev >= 0) {
      if (const Merge* pm = find_merge(symbols[static_cast<size_t>(left.prev)].c, left.c))
        queue.push({MergeHeap::key(pm->rank, static_cast<size_t>(left.prev)), pm->new_id});
    }
    if (left.next >= 0) {
      if (const Merge* nm = find_merge(left.c, symbols[static_cast<size_t>(left.next)].c))
        queue.push({MergeHeap::key(nm->rank, static_cast<size_t>(top_pos)), nm->new_id});
    }
  }
  for (const auto& sym : symbols)
    if (sym.len != 0) out->push_back(sym.c);
}

}  // namespace ib::tokenizer::detail
