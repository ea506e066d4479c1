#include "core/errors.h"

#include <algorithm>

namespace ib {

std::string SourceLoc::str() const {
  if (file.empty()) return "<input>";
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

InputError spec_error(const SourceLoc& loc, const std::string& key_path, const std::string& message) {
  std::string s = loc.str() + ": ";
  if (!key_path.empty()) s += key_path + ": ";
  return InputError(s + message);
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = static_cast<size_t>(-1);
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    // A prefix/suffix relation ("seq" for "seq_len") is as good as a typo.
    if (c.size() > word.size() && word.size() >= 3 && (c.compare(0, word.size(), word) == 0 || c.find(word) != std::string::npos))
      d = std::min<size_t>(d, 2);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  size_t allowed = std::max<size_t>(2, word.size() / 3);
  return best_d <= allowed ? best : std::string();
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string n = nearest(word, candidates);
  return n.empty() ? std::string() : " (did you mean '" + n + "'?)";
}

std::string one_line(const std::string& message) {
  static const char* const kHex = "0123456789abcdef";
  std::string out;
  for (const char c : message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (u < 0x20 && c != '\t')
      out += std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
    else
      out += c;
  }
  return out;
}

}  // namespace ib
