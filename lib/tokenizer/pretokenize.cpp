// Pre-tokenizers: Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit. Refused: UnicodeScripts, FixedLength.
#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

namespace {

// PreTokenizedString::split: each piece that is not an added token becomes the pieces `f` gives.
template <typename F>
void split_each(std::vector<Piece>* pieces, F f) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) {
    if (p.id >= 0)
      out.push_back(std::move(p));
    else
      f(p, &out);
  }
  *pieces = std::move(out);
}

template <typename Pred>
void split_on_chars(std::vector<Piece>* pieces, Pred pred, SplitBehavior behavior) {
  std::vector<Span> spans;
  split_each(pieces, [&](Piece& p, std::vector<Piece>* out) {
    find_char_matches(p.text, pred, &spans);
    split_piece(p, spans, behavior, false, out);
  });
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](Piece& p, std::vector<Piece>* out) {
      pattern_.find_matches(p.text, &spans);
      split_piece(p, spans, behavior_, invert_, out);
    });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// GPT-2's pattern, hard-coded in `tokenizers`.
constexpr const char* kGpt2Pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<std::pair<size_t, size_t>> found;
    std::vector<Span> spans;
    split_each(pieces, [&](Piece& p, std::vector<Piece>* out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) prepend_piece(&p, " ");
      if (!regex_) {
        if (!p.text.empty()) out->push_back(std::move(p));
        return;
      }
      regex_->find_iter(p.text, &found);
      // Isolated: matches and the gaps between them are all pieces.
      size_t prev = 0;
      for (const auto& [s, e] : found) {
        if (prev < s) out->push_back(slice_piece(p, prev, s));
        if (s < e) out->push_back(slice_piece(p, s, e));
        prev = e;
      }
      if (prev < p.text.size()) out->push_back(slice_piece(p, prev, p.text.size()));
    });
    // Then every piece that is not an added token goes to the byte alphabet.
    for (auto& p : *pieces)
      if (p.id < 0) map_piece(&p, [](std::string_view s) { return byte_level_encode(s); });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(uint32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(replacement, &rep_);
  }
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](Piece& p, std::vector<Piece>* out) {
      find_char_matches(
          p.text, [](uint32_t c) { return c == ' '; }, &spans);
      replace_spans(&p, spans, rep_);
      const bool starts = p.text.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && p.at_start)))
        prepend_piece(&p, rep_);
      if (split_) {
        find_char_matches(
            p.text, [this](uint32_t c) { return c == replacement_; }, &spans);
        split_piece(p, spans, SplitBehavior::MergedWithNext, false, out);
      } else if (!p.text.empty()) {
        out->push_back(std::move(p));
      }
    });
  }

 private:
  uint32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_on_chars(pieces, is_numeric, individual_ ? SplitBehavior::Isolated : SplitBehavior::Contiguous);
  }

 private:
  bool individual_;
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override { split_on_chars(pieces, is_punctuation, behavior_); }

 private:
  SplitBehavior behavior_;
};

// Whitespace: Rust regex `\w+|[^\w\s]+`, inverted, Removed: the runs of word characters and the
// runs of other non-space characters are the pieces.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](Piece& p, std::vector<Piece>* out) {
      spans.clear();
      const std::string& t = p.text;
      int run = -1;  // class of the current run: 0 word, 1 other, 2 space
      size_t run_start = 0;
      for (size_t i = 0; i < t.size();) {
        const size_t start = i;
        const uint32_t cp = next_code_point(t, &i);
        const int cls = is_regex_word(cp) ? 0 : is_white_space(cp) ? 2 : 1;
        if (cls != run) {
          if (run >= 0) spans.push_back({run_start, start, run == 2});
          run = cls;
          run_start = start;
        }
      }
      if (run >= 0) spans.push_back({run_start, t.size(), run == 2});
      split_piece(p, spans, SplitBehavior::Removed, false, out);
    });
  }
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>* pieces) const override { split_on_chars(pieces, is_white_space, SplitBehavior::Removed); }
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_on_chars(pieces, is_white_space, SplitBehavior::Removed);
    split_on_chars(pieces, is_punctuation, SplitBehavior::Isolated);
  }
};

class CharDelimiterPreTokenizer : public PreTokenizer {
 public:
  explicit CharDelimiterPreTokenizer(uint32_t delimiter) : delimiter_(delimiter) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_on_chars(
        pieces, [this](uint32_t c) { return c == delimiter_; }, SplitBehavior::Removed);
  }

 private:
  uint32_t delimiter_;
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, int depth) {
  const std::string type = j.type();
  if (type == "Sequence") {
    return std::make_unique<SequencePreTokenizer>(parse_sequence(j, "pretokenizers", depth, parse_pre_tokenizer));
  }
  if (type == "Split")
    return std::make_unique<SplitPreTokenizer>(Pattern::from_json(j["pattern"]), parse_behavior(j["behavior"]),
                                               j["invert"].boolean());
  if (type == "ByteLevel") {
    // trim_offsets only moves offsets; add_prefix_space is required, as `tokenizers` requires it.
    return std::make_unique<ByteLevelPreTokenizer>(j["add_prefix_space"].boolean(), j.opt_bool("use_regex", true));
  }
  if (type == "Metaspace") {
    const uint32_t replacement = j["replacement"].one_char();
    PrependScheme scheme = PrependScheme::Always;
    if (j.has("prepend_scheme")) {
      const std::string s = j["prepend_scheme"].str();
      if (s == "always")
        scheme = PrependScheme::Always;
      else if (s == "first")
        scheme = PrependScheme::First;
      else if (s == "never")
        scheme = PrependScheme::Never;
      else
        j["prepend_scheme"].fail("'" + s + "' is not a prepend scheme (always, first, never)");
    }
    if (j.has("add_prefix_space") && !j["add_prefix_space"].boolean()) {
      if (scheme != PrependScheme::Never) j["add_prefix_space"].fail("add_prefix_space does not match declared prepend_scheme");
      scheme = PrependScheme::Never;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, j.opt_bool("split", true));
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(j["individual_digits"].boolean());
  if (type == "Punctuation")
    return std::make_unique<PunctuationPreTokenizer>(j.has("behavior") ? parse_behavior(j["behavior"]) : SplitBehavior::Isolated);
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "CharDelimiterSplit") return std::make_unique<CharDelimiterPreTokenizer>(j["delimiter"].one_char());
  j["type"].fail("'" + type +
                 "' is not supported (Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, "
                 "BertPreTokenizer, CharDelimiterSplit)");
}

}  // namespace ib::tokenizer::detail
