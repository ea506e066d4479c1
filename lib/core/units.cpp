#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace ib {

namespace {
std::string lower_trim(const std::string& s) {
  std::string out;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "1.5gib" into 1.5 and "gib"; false if the number part is malformed.
bool split_number(const std::string& s, double* value, std::string* unit) {
  if (s.empty()) return false;
  const char* begin = s.c_str();
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) return false;
  if (!std::isfinite(v)) return false;
  *value = v;
  *unit = std::string(end);
  return true;
}
}  // namespace

std::optional<int64_t> parse_bytes(const std::string& text) {
  double v = 0;
  std::string unit;
  if (!split_number(lower_trim(text), &v, &unit)) return std::nullopt;
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib")
    mult = 1024.0;
  else if (unit == "m" || unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  else
    return std::nullopt;
  double bytes = v * mult;
  if (bytes > 9.0e18 || bytes < -9.0e18) return std::nullopt;
  double rounded = std::round(bytes);
  if (std::fabs(rounded - bytes) > 1e-6 * std::max(1.0, std::fabs(bytes))) return std::nullopt;  // "1.3B"
  return static_cast<int64_t>(rounded);
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = bytes;
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", v);
  if (std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f} {}", v, units[u]);
  return fmt::format("{} {}", format_number(v), units[u]);
}

std::optional<double> parse_fraction(const std::string& text) {
  std::string t = text;
  double scale = 1.0;
  if (!t.empty() && t.back() == '%') {
    scale = 0.01;
    t.pop_back();
  }
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v * scale;
}

std::optional<double> parse_seconds(const std::string& text) {
  double v = 0;
  std::string unit;
  if (!split_number(lower_trim(text), &v, &unit)) return std::nullopt;
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v * 1e-3;
  if (unit == "us") return v * 1e-6;
  if (unit == "ns") return v * 1e-9;
  if (unit == "min") return v * 60.0;
  return std::nullopt;
}

std::string format_seconds(double s) {
  double a = std::fabs(s);
  if (a >= 1.0) return format_number(s) + " s";
  if (a >= 1e-3) return format_number(s * 1e3) + " ms";
  if (a >= 1e-6) return format_number(s * 1e6) + " us";
  return format_number(s * 1e9) + " ns";
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  double a = std::fabs(v);
  if (a == 0) return "0";
  if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3g}", v);
}

std::string format_ms(double seconds) { return format_number(seconds * 1e3); }

}  // namespace ib
