// Added tokens: the split that comes before normalization, with the single_word, lstrip, rstrip
// and normalized flags of `tokenizers`' AddedVocabulary.
#include "tokenizer/added_vocab.h"

namespace ib::tokenizer::detail {

void TokenTrie::add(const std::string& pattern, int32_t id) {
  size_t node = 0;
  for (unsigned char c : pattern) {
    int32_t next = -1;
    for (const auto& [byte, child] : nodes_[node].next)
      if (byte == c) next = child;
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_[node].next.emplace_back(c, next);
      nodes_.emplace_back();
    }
    node = static_cast<size_t>(next);
  }
  nodes_[node].id = id;
  first_[static_cast<unsigned char>(pattern[0])] = true;
}

void TokenTrie::find(std::string_view text, std::vector<std::tuple<size_t, size_t, int32_t>>* out) const {
  out->clear();
  for (size_t i = 0; i < text.size();) {
    if (!first_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    size_t node = 0, best_end = 0;
    int32_t best = -1;
    for (size_t j = i; j < text.size(); ++j) {
      int32_t next = -1;
      for (const auto& [byte, child] : nodes_[node].next)
        if (byte == static_cast<unsigned char>(text[j])) next = child;
      if (next < 0) break;
      node = static_cast<size_t>(next);
      if (nodes_[node].id >= 0) {
        best = nodes_[node].id;
        best_end = j + 1;
      }
    }
    if (best >= 0) {
      out->emplace_back(i, best_end, best);
      i = best_end;
    } else {
      ++i;
    }
  }
}

void AddedVocabulary::add(const Json& list, const BpeModel& model, const Normalizer* normalizer) {
  auto next_id = static_cast<int64_t>(model.size());
  for (size_t i = 0; i < list.size(); ++i) {
    Json j = list.at(i);
    AddedToken t;
    t.content = j["content"].str();
    const int64_t file_id = j["id"].integer(0, kMaxId);
    (void)file_id;  // `tokenizers` only warns when it differs from the id it assigns
    t.special = j.opt_bool("special", false);
    t.single_word = j.opt_bool("single_word", false);
    t.lstrip = j.opt_bool("lstrip", false);
    t.rstrip = j.opt_bool("rstrip", false);
    t.normalized = j.opt_bool("normalized", !t.special);
    if (t.content.empty()) continue;
    if (auto it = by_content_.find(t.content); it != by_content_.end() && by_id_[it->second] == t) continue;
    int32_t id;
    if (auto it = by_content_.find(t.content); it != by_content_.end()) {
      id = it->second;
    } else if (auto m = model.token_to_id(t.content)) {
      id = *m;
    } else {
      if (next_id > kMaxId) j.fail("more than 2^24 ids");
      id = static_cast<int32_t>(next_id++);
    }
    if (t.normalized && normalizer) {
      Piece p{t.content, t.content.size(), true, -1};
      normalizer->normalize(&p);
      if (p.text != t.content) normalized_[id] = p.text;
    }
    by_content_[t.content] = id;
    if (t.special) special_.insert(t.content);
    by_id_[id] = t;
    order_.emplace_back(id, t);
    max_id_ = std::max(max_id_, id);
  }
  // The two matchers, over the final set of tokens.
  std::unordered_map<std::string, int32_t> seen_raw, seen_norm;
  for (const auto& [id, t] : order_) {
    if (!(by_id_[id] == t)) continue;  // superseded by a later entry for the same id
    std::string pattern = t.content;
    if (t.normalized)
      if (auto it = normalized_.find(id); it != normalized_.end()) pattern = it->second;
    auto& seen = t.normalized ? seen_norm : seen_raw;
    if (seen.count(pattern)) continue;
    seen[pattern] = id;
    if (pattern.empty()) list.fail("added token '" + t.content + "' normalizes to an empty string");
    (t.normalized ? normalized_trie_ : raw_).add(pattern, id);
  }
}

namespace {

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t b = s.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return is_regex_word(next_code_point(s, &b));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return is_regex_word(next_code_point(s, &i));
}

// Start of the trailing run of whitespace of s (Rust regex `\s*$`).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    size_t i = b;
    if (!is_white_space(next_code_point(s, &i))) break;
    end = b;
  }
  return end;
}

// Length of the leading run of whitespace of s (Rust regex `^\s*`).
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_white_space(next_code_point(s, &j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::split(const Piece& p, const TokenTrie& trie, std::vector<Piece>* out) const {
  const std::string& s = p.text;
  if (s.empty()) return;  // an empty split is dropped
  if (trie.empty()) {
    out->push_back(slice_piece(p, 0, s.size()));
    return;
  }
  thread_local std::vector<std::tuple<size_t, size_t, int32_t>> found;
  trie.find(s, &found);
  size_t start_offset = 0;
  for (auto [start, stop, id] : found) {
    const AddedToken& t = by_id_.at(id);
    if (t.single_word) {
      const bool start_space = start == 0 || !ends_with_word(std::string_view(s).substr(0, start));
      const bool stop_space = stop == s.size() || !starts_with_word(std::string_view(s).substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(std::string_view(s).substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_len(std::string_view(s).substr(stop));
    if (start_offset < start) out->push_back(slice_piece(p, start_offset, start));
    Piece tok = slice_piece(p, start, stop);
    tok.id = id;
    out->push_back(std::move(tok));
    start_offset = stop;
  }
  if (start_offset < s.size()) out->push_back(slice_piece(p, start_offset, s.size()));
}

std::vector<Piece> AddedVocabulary::extract_and_normalize(const std::string& text, const Normalizer* normalizer) const {
  Piece whole;
  whole.text = text;
  whole.at_start = true;
  whole.zp = text.empty() ? 0 : utf8_len(static_cast<unsigned char>(text[0]));  // the first character's bytes
  std::vector<Piece> first, out;
  split(whole, raw_, &first);
  out.reserve(first.size());
  for (auto& p : first) {
    if (p.id >= 0) {
      out.push_back(std::move(p));
      continue;
    }
    if (normalizer) normalizer->normalize(&p);
    split(p, normalized_trie_, &out);
  }
  return out;
}

std::optional<int32_t> AddedVocabulary::token_to_id(const std::string& content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::id_to_token(int32_t id) const {
  if (auto it = normalized_.find(id); it != normalized_.end()) return &it->second;
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.content;
}

bool AddedVocabulary::is_special_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it != by_id_.end() && it->second.special;
}

}  // namespace ib::tokenizer::detail
