// Added tokens (`added_tokens` of tokenizer.json): found in the input before anything else, as
// `tokenizers`' AddedVocabulary does. Not a public header.
#pragma once

#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

struct AddedToken {
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
  bool operator==(const AddedToken& o) const {
    return content == o.content && single_word == o.single_word && lstrip == o.lstrip && rstrip == o.rstrip &&
           normalized == o.normalized && special == o.special;
  }
};

// Leftmost-longest matching of a set of byte strings (the role of daachorse in `tokenizers`).
class TokenTrie {
 public:
  void add(const std::string& pattern, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }
  // Non-overlapping leftmost-longest matches: (start, end, id).
  void find(std::string_view text, std::vector<std::tuple<size_t, size_t, int32_t>>* out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t id = -1;
  };
  std::vector<Node> nodes_{Node{}};
  bool first_[256] = {};
};

class AddedVocabulary {
 public:
  // `tokens` in file order; ids are assigned as `tokenizers` assigns them: the model's id for a
  // content it has, else the next free id after the model's vocabulary (the file's "id" is only
  // checked, as the library only warns about it).
  void add(const Json& list, const BpeModel& model, const Normalizer* normalizer);

  // The two passes of extract_and_normalize: split out the non-normalized tokens on the raw text,
  // normalize the rest, split out the normalized tokens.
  std::vector<Piece> extract_and_normalize(const std::string& text, const Normalizer* normalizer) const;

  std::optional<int32_t> token_to_id(const std::string& content) const;
  // The string decode uses: the normalized form for tokens that were normalized, else the content.
  const std::string* id_to_token(int32_t id) const;
  bool is_special_string(const std::string& token) const { return special_.count(token) != 0; }
  bool is_special_id(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  // (id, token) in file order, for finding BOS / EOS by name.
  const std::vector<std::pair<int32_t, AddedToken>>& in_order() const { return order_; }

 private:
  void split(const Piece& p, const TokenTrie& trie, std::vector<Piece>* out) const;

  std::unordered_map<std::string, int32_t> by_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> normalized_;  // id -> normalized form, when it differs
  std::unordered_set<std::string> special_;
  std::vector<std::pair<int32_t, AddedToken>> order_;
  TokenTrie raw_, normalized_trie_;
  int32_t max_id_ = -1;
};

}  // namespace ib::tokenizer::detail
