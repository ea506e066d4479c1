// Internals shared by the tokenizer's files: JSON access that names pointers, Unicode helpers,
// the PCRE2 wrapper, the split machinery and the pipeline components. Not a public header.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ib::tokenizer::detail {

// Sequence components nest at most this deep (a bound on what a file can make us recurse into).
constexpr int kMaxSequenceDepth = 64;
// Ids are below 2^24: a bound on what a file can make us allocate.
constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;

// ---- JSON access: every failure is an InputError "<source>: <pointer>: <message>" ----

class Json {
 public:
  Json(const nlohmann::json& v, std::string pointer, const std::string* source)
      : v_(&v), ptr_(std::move(pointer)), source_(source) {}
  [[noreturn]] void fail(const std::string& message) const;
  const std::string& pointer() const { return ptr_; }
  const std::string& source() const { return *source_; }
  const nlohmann::json& raw() const { return *v_; }

  bool is_null() const { return v_->is_null(); }
  bool is_object() const { return v_->is_object(); }
  bool is_array() const { return v_->is_array(); }
  bool is_string() const { return v_->is_string(); }
  // Present and not null.
  bool has(const std::string& key) const;
  // A member that must be there (null counts as there); fails naming pointer/key when missing.
  Json operator[](const std::string& key) const;
  Json at(size_t index) const;
  size_t size() const;                                                    // of an array (fails on anything else)
  Json child(const std::string& key, const nlohmann::json& value) const;  // while iterating items()

  std::string str() const;
  bool boolean() const;
  int64_t integer(int64_t lo, int64_t hi) const;
  double number() const;
  uint32_t one_char() const;  // a string of exactly one character (Rust's `char`)
  // Helpers for optional members: the default when absent or null.
  bool opt_bool(const std::string& key, bool dflt) const;
  std::optional<std::string> opt_str(const std::string& key) const;
  std::string type() const;  // the required "type" member, as a string

 private:
  const nlohmann::json* v_;
  std::string ptr_;
  const std::string* source_;
};

// The components of a Sequence (key `list_key`: "normalizers", "decoders", ...), each parsed by
// `parse(component, depth + 1)`; past kMaxSequenceDepth levels the file is refused.
template <class Parse>
auto parse_sequence(const Json& j, const char* list_key, int depth, Parse parse) {
  if (depth >= kMaxSequenceDepth) j.fail("Sequence nested deeper than " + std::to_string(kMaxSequenceDepth) + " levels");
  Json list = j[list_key];
  std::vector<decltype(parse(list, depth))> parts;
  for (size_t i = 0; i < list.size(); ++i) parts.push_back(parse(list.at(i), depth + 1));
  return parts;
}

// "a" -> "/a", with JSON-pointer escaping of '~' and '/'.
std::string pointer_token(const std::string& key);

// ---- Unicode ----

// The input is valid UTF-8 (checked or repaired on the way in).
inline size_t utf8_len(unsigned char lead) { return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }
uint32_t next_code_point(std::string_view s, size_t* i);
void append_utf8(uint32_t cp, std::string* out);
// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

bool is_white_space(uint32_t cp);          // Rust char::is_whitespace (White_Space)
bool is_numeric(uint32_t cp);              // Rust char::is_numeric (Nd, Nl, No)
bool is_punctuation(uint32_t cp);          // ASCII punctuation or general category P*
bool is_regex_word(uint32_t cp);           // Rust regex's \w (Alphabetic, M, Nd, Pc, Join_Control)
bool is_mark(uint32_t cp);                 // general category M*
std::string to_lower(std::string_view s);  // Rust str chars().flat_map(char::to_lowercase)
enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize_unicode(NormalForm form, std::string_view s);
bool normal_form_available(NormalForm form, std::string* why);

// GPT-2's byte -> printable character table, as UTF-8 strings; and back (-1 when not in it).
const std::array<std::string, 256>& byte_level_chars();
int byte_level_byte(uint32_t cp);

// ---- Regex: PCRE2 with onig's meaning of the pattern ----

// Rewrites an Oniguruma pattern (what `tokenizers` compiles) so PCRE2 gives the same matches:
// \s \S \w \W \d \D \h \H \b \B, \p{L} and the like, [:alpha:] and [:punct:] get onig's classes
// (and its newer Unicode), (?m) becomes PCRE2's (?s).
std::string onig_to_pcre2(const std::string& pattern);

class Regex {
 public:
  // Throws std::runtime_error with PCRE2's message and offset when the pattern does not compile.
  explicit Regex(const std::string& onig_pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // All matches as rust-onig's find_iter yields them (an empty match right after the previous
  // match is skipped); positions are byte offsets into `text`, which must be valid UTF-8.
  void find_iter(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  void* code_;  // pcre2_code_8
};

// ---- Splitting ----

// One piece of the input on its way through the pipeline. `id` >= 0: an added token, done.
// `at_start`: this piece's original offset is 0 (what Metaspace's prepend_scheme "first" asks);
// `zp`: how many leading bytes still map back to the piece's original start, so a later slice
// knows whether it starts at the original offset 0 as well.
struct Piece {
  std::string text;
  size_t zp = 0;
  bool at_start = false;
  int32_t id = -1;
};

struct Span {
  size_t start, end;
  bool match;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
SplitBehavior parse_behavior(const Json& j);

// A pattern of a Split pre-tokenizer or Replace normalizer/decoder: a literal, a regex or a
// predicate on characters; find_matches covers the whole text with match / non-match spans.
class Pattern {
 public:
  static Pattern literal(std::string s);
  static Pattern regex(const Json& j, const std::string& onig_pattern);
  // {"String": "..."} or {"Regex": "..."}
  static Pattern from_json(const Json& j);
  void find_matches(std::string_view text, std::vector<Span>* out) const;

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

template <typename Pred>
void find_char_matches(std::string_view text, Pred pred, std::vector<Span>* out) {
  out->clear();
  size_t last = 0, i = 0;
  while (i < text.size()) {
    size_t start = i;
    uint32_t cp = next_code_point(text, &i);
    if (pred(cp)) {
      if (last < start) out->push_back({last, start, false});
      out->push_back({start, i, true});
      last = i;
    }
  }
  if (last < text.size()) out->push_back({last, text.size(), false});
  if (text.empty()) out->push_back({0, 0, false});
}

Piece slice_piece(const Piece& p, size_t start, size_t end);
// NormalizedString::split: appends the non-empty slices of `p` to `out`.
void split_piece(const Piece& p, std::vector<Span> spans, SplitBehavior behavior, bool invert, std::vector<Piece>* out);
// NormalizedString::replace over the given spans, and prepend.
void replace_spans(Piece* p, const std::vector<Span>& spans, const std::string& content);
void prepend_piece(Piece* p, const std::string& s);
// A transformation that maps each character on its own (lowercase, byte-level, ...).
template <typename F>
void map_piece(Piece* p, F f) {
  const size_t zp = p->zp;
  std::string head = zp ? f(std::string_view(p->text).substr(0, zp)) : std::string();
  p->text = f(std::string_view(p->text));
  size_t z = std::min(head.size(), p->text.size());
  // A composition across the boundary (NFC) can leave it inside a character: take all of it.
  while (z < p->text.size() && (static_cast<unsigned char>(p->text[z]) & 0xC0) == 0x80) ++z;
  p->zp = z;
}
std::string byte_level_encode(std::string_view s);

// ---- Components ----

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Piece* p) const = 0;
};
std::unique_ptr<Normalizer> parse_normalizer(const Json& j, int depth);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits the pieces that are not added tokens, in place.
  virtual void pre_tokenize(std::vector<Piece>* pieces) const = 0;
};
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, int depth);

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>* tokens) const = 0;
};
std::unique_ptr<Decoder> parse_decoder(const Json& j, int depth);

// The BPE model: vocab, merges by rank, byte fallback, unk, word cache.
class BpeModel {
 public:
  explicit BpeModel(const Json& model);
  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, std::vector<int32_t>* out) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  size_t size() const { return tokens_.size(); }  // distinct tokens (the library's vocab size)
  int32_t max_id() const { return max_id_; }

 private:
  void tokenize_chunk(std::string_view word, std::vector<int32_t>* out) const;
  void merge_word(std::string_view word, std::vector<int32_t>* out) const;

  std::vector<std::string> tokens_;  // storage the maps below point into
  std::vector<int32_t> ids_;         // id of tokens_[i]
  std::unordered_map<std::string_view, int32_t> vocab_;
  std::unordered_map<int32_t, uint32_t> by_id_;  // id -> index into tokens_
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  // (left id, right id) -> merge: open addressing, probed several times per merge step.
  class MergeTable {
   public:
    void reserve(size_t n);
    void set(uint64_t key, Merge m);  // a repeated key takes the later value
    const Merge* find(uint64_t key) const {
      for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.key == key) return &s.merge;
        if (s.key == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
    struct Slot {
      uint64_t key = kEmpty;
      Merge merge{};
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0, used_ = 0;
  };
  MergeTable merges_;
  int32_t max_id_ = -1;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> tokens, -1 when absent
  std::string barrier_;                  // where a long word may be cut (see the constructor)

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace ib::tokenizer::detail
