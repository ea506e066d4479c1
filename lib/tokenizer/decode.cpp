// Decoders: ByteLevel, Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder.
// Refused: WordPiece, CTC. Each works on the list of token strings, as in `tokenizers`.
#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (const auto& d : parts_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Tokens back to bytes through GPT-2's table (a token with a character outside it stays as its
// own UTF-8), all joined, then read as UTF-8 with invalid bytes as U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      const size_t mark = bytes.size();
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const int b = byte_level_byte(next_code_point(t, &i));
        if (b < 0)
          ok = false;
        else
          bytes += static_cast<char>(b);
      }
      if (!ok) {
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens->assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<Span> spans;
    for (auto& t : *tokens) {
      pattern_.find_matches(t, &spans);
      std::string out;
      for (const auto& s : spans) {
        if (s.match)
          out += content_;
        else
          out.append(t, s.start, s.end - s.start);
      }
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xNN>" -> NN, as u8::from_str_radix(&token[3..5], 16) reads it (a leading '+' allowed).
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const int hi = t[3] == '+' ? 0 : hex_digit(t[3]), lo = hex_digit(t[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : *tokens) {
      const int b = byte_token(t);
      if (b >= 0) {
        pending += static_cast<char>(b);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    tokens->assign(1, all);
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      std::vector<std::pair<size_t, uint32_t>> chars;  // byte offset, code point
      for (size_t i = 0; i < t.size();) {
        const size_t at = i;
        chars.emplace_back(at, next_code_point(t, &i));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < chars.size() && i < start_; ++i) {
        if (chars[i].second != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t b0 = start_cut < chars.size() ? chars[start_cut].first : t.size();
      const size_t b1 = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b0, b1 - b0);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

// Metaspace: the replacement becomes a space, except in the first token when a prefix was
// prepended (then every replacement in it goes, as `tokenizers` does).
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(uint32_t replacement, bool prepends) : replacement_(replacement), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (size_t k = 0; k < tokens->size(); ++k) {
      std::string& t = (*tokens)[k];
      std::string out;
      for (size_t i = 0; i < t.size();) {
        const size_t at = i;
        const uint32_t cp = next_code_point(t, &i);
        if (cp == replacement_) {
          if (!(k == 0 && prepends_)) out += ' ';
        } else {
          out.append(t, at, i - at);
        }
      }
      t = std::move(out);
    }
  }

 private:
  uint32_t replacement_;
  bool prepends_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (size_t k = 0; k < tokens->size(); ++k) {
      const std::string rep = k + 1 == tokens->size() ? "" : " ";
      std::string& t = (*tokens)[k];
      if (suffix_.empty()) continue;  // Rust's str::replace("") would insert between every char
      std::string out;
      size_t pos = 0;
      for (size_t f = t.find(suffix_); f != std::string::npos; f = t.find(suffix_, pos)) {
        out.append(t, pos, f - pos);
        out += rep;
        pos = f + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const Json& j, int depth) {
  const std::string type = j.type();
  if (type == "Sequence") {
    return std::make_unique<SequenceDecoder>(parse_sequence(j, "decoders", depth, parse_decoder));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(Pattern::from_json(j["pattern"]), j["content"].str());
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(j["content"].one_char(), static_cast<size_t>(j["start"].integer(0, 1 << 30)),
                                          static_cast<size_t>(j["stop"].integer(0, 1 << 30)));
  if (type == "Metaspace") {
    const uint32_t replacement = j["replacement"].one_char();
    std::string scheme = j.has("prepend_scheme") ? j["prepend_scheme"].str() : "always";
    if (scheme != "always" && scheme != "first" && scheme != "never")
      j["prepend_scheme"].fail("'" + scheme + "' is not a prepend scheme (always, first, never)");
    if (j.has("add_prefix_space") && !j["add_prefix_space"].boolean()) {
      if (scheme != "never") j["add_prefix_space"].fail("add_prefix_space does not match declared prepend_scheme");
    }
    return std::make_unique<MetaspaceDecoder>(replacement, scheme != "never");
  }
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(j["suffix"].str());
  j["type"].fail("'" + type +
                 "' is not supported (ByteLevel, Sequence, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder)");
}

}  // namespace ib::tokenizer::detail
