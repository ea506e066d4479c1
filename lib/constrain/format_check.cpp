#include "constrain/format_check.h"

#include <cctype>
#include <regex>
#include <vector>

namespace ib::constrain {

namespace {

bool digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

int number(const std::string& s, size_t at, size_t n) { return std::stoi(s.substr(at, n)); }

bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int days_in(int y, int m) {
  static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leap(y) ? 29 : d[m - 1];
}

bool date(const std::string& s) {
  if (s.size() != 10 || !digits(s, 0, 4) || s[4] != '-' || !digits(s, 5, 2) || s[7] != '-' || !digits(s, 8, 2)) return false;
  const int y = number(s, 0, 4), m = number(s, 5, 2), d = number(s, 8, 2);
  return y >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= days_in(y, m);
}

// hh:mm:ss[.f](Z|±hh:mm); a leap second only where the time in UTC is 23:59:60.
bool time(const std::string& s) {
  if (s.size() < 9 || !digits(s, 0, 2) || s[2] != ':' || !digits(s, 3, 2) || s[5] != ':' || !digits(s, 6, 2)) return false;
  const int h = number(s, 0, 2), mi = number(s, 3, 2), sec = number(s, 6, 2);
  size_t i = 8;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    if (j == i + 1) return false;
    i = j;
  }
  int offset = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    if (i + 1 != s.size()) return false;
  } else if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    if (s.size() != i + 6 || !digits(s, i + 1, 2) || s[i + 3] != ':' || !digits(s, i + 4, 2)) return false;
    const int oh = number(s, i + 1, 2), om = number(s, i + 4, 2);
    if (oh > 23 || om > 59) return false;
    offset = (s[i] == '+' ? 1 : -1) * (oh * 60 + om);
  } else {
    return false;
  }
  if (h > 23 || mi > 59 || sec > 60) return false;
  if (sec == 60) {
    const int utc = ((h * 60 + mi - offset) % 1440 + 1440) % 1440;
    return utc == 23 * 60 + 59;
  }
  return true;
}

bool uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out(1);
  for (char x : s) {
    if (x == c)
      out.emplace_back();
    else
      out.back() += x;
  }
  return out;
}

bool ipv4(const std::string& s);
bool ipv6(const std::string& s);

bool hostname(std::string s) {
  if (!s.empty() && s.back() == '.') s.pop_back();
  if (s.empty() || s.size() > 253) return false;
  for (const auto& label : split(s, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

bool email(const std::string& s) {
  const size_t at = s.rfind('@');
  if (at == std::string::npos || at == 0) return false;
  const std::string local = s.substr(0, at), domain = s.substr(at + 1);
  if (local.size() > 64) return false;
  for (const auto& atom : split(local, '.')) {
    if (atom.empty()) return false;
    for (char c : atom)
      if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("!#$%&'*+/=?^_`{|}~-").find(c) == std::string::npos)
        return false;
  }
  if (domain.size() > 2 && domain.front() == '[' && domain.back() == ']') return ipv4(domain.substr(1, domain.size() - 2));
  return domain.find('.') != std::string::npos && hostname(domain);
}

bool ipv4(const std::string& s) {
  const auto parts = split(s, '.');
  if (parts.size() != 4) return false;
  for (const auto& p : parts) {
    if (p.empty() || p.size() > 3 || !digits(p, 0, p.size()) || (p.size() > 1 && p[0] == '0') || std::stoi(p) > 255) return false;
  }
  return true;
}

bool ipv6(const std::string& s) {
  // Groups of 1-4 hex digits; one "::" for one or more zero groups; an IPv4 tail counts as two.
  const size_t dc = s.find("::");
  if (dc != std::string::npos && s.find("::", dc + 1) != std::string::npos) return false;
  auto groups = [](const std::string& part, bool last, int* n) {
    if (part.empty()) return true;
    const auto g = split(part, ':');
    for (size_t i = 0; i < g.size(); ++i) {
      if (last && i + 1 == g.size() && g[i].find('.') != std::string::npos) {
        if (!ipv4(g[i])) return false;
        *n += 2;
        continue;
      }
      if (g[i].empty() || g[i].size() > 4) return false;
      for (char c : g[i])
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
      ++*n;
    }
    return true;
  };
  int n = 0;
  if (dc == std::string::npos) return groups(s, true, &n) && n == 8;
  return groups(s.substr(0, dc), false, &n) && groups(s.substr(dc + 2), true, &n) && n <= 7;
}

bool json_pointer(const std::string& s) {
  if (s.empty()) return true;
  if (s[0] != '/') return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '~' && (i + 1 == s.size() || (s[i + 1] != '0' && s[i + 1] != '1'))) return false;
  return true;
}

bool relative_json_pointer(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || (i > 1 && s[0] == '0')) return false;
  const std::string rest = s.substr(i);
  return rest == "#" || json_pointer(rest);
}

// P(nY)(nM)(nD)(T(nH)(nM)(nS)) in that order, the units written contiguous, with at least one;
// or PnW.
bool duration(const std::string& s) {
  if (s.size() < 3 || s[0] != 'P') return false;
  size_t i = 1;
  auto units = [&](const std::string& order, bool* any) {
    size_t next = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j == s.size()) return false;
      const size_t u = order.find(s[j], next);
      if (u == std::string::npos || (next > 0 && u != next)) return false;  // contiguous units (RFC 3339 appendix A)
      next = u + 1;
      *any = true;
      i = j + 1;
    }
    return true;
  };
  if (s.size() >= 3 && s.back() == 'W') {
    for (size_t j = 1; j + 1 < s.size(); ++j)
      if (!std::isdigit(static_cast<unsigned char>(s[j]))) return false;
    return true;
  }
  bool date_part = false, time_part = false;
  if (!units("YMD", &date_part)) return false;
  if (i < s.size()) {
    if (s[i] != 'T') return false;
    ++i;
    if (!units("HMS", &time_part) || !time_part) return false;
  }
  return i == s.size() && (date_part || time_part);
}

// RFC 3986: characters of a component (unreserved, sub-delims, the extra ones it allows) or %HH.
bool uri_chars(const std::string& s, const std::string& extra) {
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
        return false;
      i += 2;
    } else if (!(std::isalnum(static_cast<unsigned char>(c)) || std::string("-._~!$&'()*+,;=").find(c) != std::string::npos ||
                 extra.find(c) != std::string::npos)) {
      return false;
    }
  }
  return true;
}

// [//authority]path[?query][#fragment] after the scheme (or alone: a relative reference).
bool uri_rest(const std::string& s, bool relative) {
  std::string rest = s, fragment, query;
  if (const size_t h = rest.find('#'); h != std::string::npos) {
    fragment = rest.substr(h + 1);
    rest = rest.substr(0, h);
  }
  if (const size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (!uri_chars(fragment, ":@/?") || !uri_chars(query, ":@/?")) return false;
  std::string path = rest;
  if (rest.rfind("//", 0) == 0) {
    const size_t slash = rest.find('/', 2);
    std::string authority = rest.substr(2, slash == std::string::npos ? std::string::npos : slash - 2);
    path = slash == std::string::npos ? "" : rest.substr(slash);
    if (const size_t at = authority.rfind('@'); at != std::string::npos) {
      if (!uri_chars(authority.substr(0, at), ":")) return false;
      authority = authority.substr(at + 1);
    }
    std::string host = authority;
    if (!host.empty() && host[0] == '[') {  // IP literal
      const size_t close = host.find(']');
      if (close == std::string::npos || !ipv6(host.substr(1, close - 1))) return false;
      host = host.substr(close + 1);
      if (!host.empty() && host[0] != ':') return false;
      authority = host;  // what is left: the port
      host.clear();
    }
    if (const size_t colon = authority.rfind(':'); colon != std::string::npos) {
      for (char c : authority.substr(colon + 1))
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
      if (!host.empty()) host = host.substr(0, host.rfind(':'));
    }
    if (!uri_chars(host, "")) return false;
  } else if (relative) {
    const size_t slash = path.find('/');
    if (path.substr(0, slash).find(':') != std::string::npos) return false;  // a first segment with ':' is a scheme
  }
  return uri_chars(path, ":@/");
}

bool uri(const std::string& s) {
  const size_t colon = s.find(':');
  if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (size_t i = 1; i < colon; ++i)
    if (!std::isalnum(static_cast<unsigned char>(s[i])) && s[i] != '+' && s[i] != '-' && s[i] != '.') return false;
  return uri_rest(s.substr(colon + 1), false);
}

}  // namespace

bool format_valid(const std::string& f, const std::string& s) {
  if (f == "date") return date(s);
  if (f == "time") return time(s);
  if (f == "date-time") return s.size() > 11 && (s[10] == 'T' || s[10] == 't') && date(s.substr(0, 10)) && time(s.substr(11));
  if (f == "uuid") return uuid(s);
  if (f == "email" || f == "idn-email") return email(s);
  if (f == "hostname") return hostname(s);
  if (f == "ipv4") return ipv4(s);
  if (f == "ipv6") return ipv6(s);
  if (f == "json-pointer") return json_pointer(s);
  if (f == "relative-json-pointer") return relative_json_pointer(s);
  if (f == "duration") return duration(s);
  if (f == "uri") return uri(s);
  if (f == "uri-reference") return uri(s) || uri_rest(s, true);
  if (f == "regex") {
    try {
      std::regex re(s, std::regex::ECMAScript);
      return true;
    } catch (const std::regex_error&) {
      return false;
    }
  }
  return true;
}

}  // namespace ib::constrain
