// Patterns and the split / replace / prepend operations of `tokenizers`' NormalizedString, on
// pieces that carry just enough alignment to know whether they start at the original offset 0.
#include <stdexcept>

#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

Pattern Pattern::literal(std::string s) {
  Pattern p;
  if (s.empty()) {
    p.regex_ = std::make_shared<Regex>("");  // onig's empty regex: an empty match everywhere
  } else {
    p.literal_ = std::move(s);
  }
  return p;
}

Pattern Pattern::regex(const Json& j, const std::string& onig_pattern) {
  Pattern p;
  try {
    p.regex_ = std::make_shared<Regex>(onig_pattern);
  } catch (const std::runtime_error& e) {
    j.fail(e.what());
  }
  return p;
}

Pattern Pattern::from_json(const Json& j) {
  if (!j.is_object() || j.raw().size() != 1) j.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  if (j.has("String")) return literal(j["String"].str());
  if (j.has("Regex")) {
    Json r = j["Regex"];
    return regex(r, r.str());
  }
  j.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

void Pattern::find_matches(std::string_view text, std::vector<Span>* out) const {
  out->clear();
  if (text.empty()) {
    out->push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  auto add = [&](size_t s, size_t e) {
    if (prev != s) out->push_back({prev, s, false});
    out->push_back({s, e, true});
    prev = e;
  };
  if (regex_) {
    thread_local std::vector<std::pair<size_t, size_t>> found;
    regex_->find_iter(text, &found);
    for (const auto& [s, e] : found) add(s, e);
  } else {
    for (size_t pos = text.find(literal_); pos != std::string_view::npos; pos = text.find(literal_, pos + literal_.size()))
      add(pos, pos + literal_.size());
  }
  if (prev != text.size()) out->push_back({prev, text.size(), false});
}

Piece slice_piece(const Piece& p, size_t start, size_t end) {
  Piece c;
  c.text = p.text.substr(start, end - start);
  // The slice starts at the original offset 0 when its first byte still maps back there.
  c.at_start = p.at_start && start < p.zp;
  c.zp = c.at_start ? std::min(p.zp, end) - start : 0;
  return c;
}

void split_piece(const Piece& p, std::vector<Span> spans, SplitBehavior behavior, bool invert, std::vector<Piece>* out) {
  if (invert)
    for (auto& s : spans) s.match = !s.match;
  // After this, `match` means "remove".
  std::vector<Span> parts;
  parts.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto s : spans) parts.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::Removed:
      parts = std::move(spans);
      break;
    case SplitBehavior::Contiguous: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.match == previous && !parts.empty())
          parts.back().end = s.end;
        else
          parts.push_back({s.start, s.end, false});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.match && !previous && !parts.empty())
          parts.back().end = s.end;
        else
          parts.push_back({s.start, s.end, false});
        previous = s.match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool previous = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous && !parts.empty())
          parts.back().start = it->start;
        else
          parts.push_back({it->start, it->end, false});
        previous = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
  }
  for (const auto& s : parts)
    if (!s.match && s.end > s.start) out->push_back(slice_piece(p, s.start, s.end));
}

void replace_spans(Piece* p, const std::vector<Span>& spans, const std::string& content) {
  std::string out;
  out.reserve(p->text.size());
  size_t zp = 0;
  bool open = true;  // every byte so far maps back to the original start
  for (const auto& s : spans) {
    if (!s.match) {
      out.append(p->text, s.start, s.end - s.start);
      if (open) {
        if (s.end <= p->zp) {
          zp += s.end - s.start;
        } else {
          if (s.start < p->zp) zp += p->zp - s.start;
          open = false;
        }
      }
    } else {
      out += content;
      // Inserted text takes the alignment of the match's last byte (of nothing, at offset 0).
      if (open) {
        if (s.end <= p->zp)
          zp += content.size();
        else
          open = false;
      }
    }
  }
  p->text = std::move(out);
  p->zp = std::min(zp, p->text.size());
}

void prepend_piece(Piece* p, const std::string& s) {
  if (p->text.empty()) return;
  // The new text takes the alignment of the first character.
  if (p->zp > 0) p->zp += s.size();
  p->text.insert(0, s);
}

}  // namespace ib::tokenizer::detail
