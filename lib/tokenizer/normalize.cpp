// Normalizers: Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip, StripAccents,
// ByteLevel. Refused: BertNormalizer, Nmt, Precompiled (SentencePiece charsmaps).
#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(Piece* p) const override {
    for (const auto& n : parts_) n->normalize(p);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string s) : s_(std::move(s)) {}
  void normalize(Piece* p) const override { prepend_piece(p, s_); }  // only a non-empty string

 private:
  std::string s_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(Piece* p) const override {
    std::vector<Span> spans;
    pattern_.find_matches(p->text, &spans);
    replace_spans(p, spans, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(Piece* p) const override {
    map_piece(p, [this](std::string_view s) { return normalize_unicode(form_, s); });
  }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(Piece* p) const override {
    map_piece(p, [](std::string_view s) { return to_lower(s); });
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(Piece* p) const override {
    const std::string& t = p->text;
    size_t begin = 0, end = t.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!is_white_space(next_code_point(t, &i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t s = end - 1;
        while (s > begin && (static_cast<unsigned char>(t[s]) & 0xC0) == 0x80) --s;
        size_t i = s;
        if (!is_white_space(next_code_point(t, &i))) break;
        end = s;
      }
    }
    if (begin == 0 && end == t.size()) return;
    p->zp = p->zp > begin ? std::min(p->zp, end) - begin : 0;
    p->text = t.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(Piece* p) const override {
    map_piece(p, [](std::string_view s) {
      std::string out;
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        if (!is_mark(next_code_point(s, &i))) out.append(s.data() + start, i - start);
      }
      return out;
    });
  }
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(Piece* p) const override {
    map_piece(p, [](std::string_view s) { return byte_level_encode(s); });
  }
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const Json& j, int depth) {
  const std::string type = j.type();
  if (type == "Sequence") {
    return std::make_unique<SequenceNormalizer>(parse_sequence(j, "normalizers", depth, parse_normalizer));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j["prepend"].str());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(Pattern::from_json(j["pattern"]), j["content"].str());
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const NormalForm form = type == "NFC"    ? NormalForm::NFC
                            : type == "NFD"  ? NormalForm::NFD
                            : type == "NFKC" ? NormalForm::NFKC
                                             : NormalForm::NFKD;
    std::string why;
    if (!normal_form_available(form, &why)) j["type"].fail(type + ": " + why);
    return std::make_unique<UnicodeNormalizer>(form);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") return std::make_unique<StripNormalizer>(j["strip_left"].boolean(), j["strip_right"].boolean());
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  j["type"].fail(
      "'" + type +
      "' is not supported (Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, ByteLevel)");
}

}  // namespace ib::tokenizer::detail
