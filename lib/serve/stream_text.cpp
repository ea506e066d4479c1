#include "serve/stream_text.h"

#include <algorithm>

namespace ib::serve {

std::optional<size_t> stop_cut(const std::string& text, const std::vector<std::string>& stops, bool include) {
  size_t best = std::string::npos, best_end = 0;
  for (const std::string& st : stops) {
    const size_t at = text.find(st);
    if (at < best) {
      best = at;
      best_end = at + st.size();
    }
  }
  if (best == std::string::npos) return std::nullopt;
  return include ? best_end : best;
}

size_t stop_safe_end(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& st : stops) hold = std::max(hold, st.size() - 1);
  size_t end = text.size() > hold ? text.size() - hold : 0;
  // Not inside a UTF-8 character: back to the start of the one that is cut.
  while (end > 0 && end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return end;
}

std::string text_delta(const std::string& decoded, size_t& sent, bool final) {
  size_t end = decoded.size();
  static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  if (!final && end >= sent + 3 && decoded.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  if (end <= sent) return {};
  std::string out = decoded.substr(sent, end - sent);
  sent = end;
  return out;
}

}  // namespace ib::serve
