// UTF-8, character classes and normalization forms as the Rust side of `tokenizers` sees them
// (Rust's char methods and the unicode-normalization crate), answered by ICU.
#include <stdexcept>

#include <algorithm>
#include <iterator>

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/uset.h>
#include <unicode/ustring.h>

#include "tokenizer/tokenizer_internal.h"

#ifdef IB_ICU_WITHOUT_DATA
// ICU's common library is linked on its own, without its 30 MB data library (binaries that travel
// to another machine): the character properties and the NFC/NFD tables are compiled into the
// common library; this empty, invalid common-data header makes every data lookup fail cleanly
// (NFKC and NFKD are then refused when a tokenizer.json asks for them).
extern "C" const unsigned char U_ICUDATA_ENTRY_POINT[64] = {};
#endif

namespace ib::tokenizer::detail {

uint32_t next_code_point(std::string_view s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  if (c < 0x80) {
    ++*i;
    return c;
  }
  const size_t n = utf8_len(c);
  uint32_t cp = n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < n && *i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3Fu);
  *i += n;
  return cp;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 with *bad set to the length of the maximal
// invalid subpart there (Unicode's "substitution of maximal subparts", which Rust follows).
size_t valid_sequence(std::string_view s, size_t i, size_t* bad) {
  const auto b = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u; };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  const auto cont = [](unsigned x) { return x >= 0x80 && x <= 0xBF; };
  if (c >= 0xC2 && c <= 0xDF) {
    if (cont(b(1))) return 2;
    *bad = 1;
    return 0;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (b(1) < lo || b(1) > hi) return *bad = 1, 0;
    if (!cont(b(2))) return *bad = 2, 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (b(1) < lo || b(1) > hi) return *bad = 1, 0;
    if (!cont(b(2))) return *bad = 2, 0;
    if (!cont(b(3))) return *bad = 3, 0;
    return 4;
  }
  *bad = 1;
  return 0;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    size_t bad = 0;
    const size_t n = valid_sequence(s, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    const size_t n = valid_sequence(s, i, &bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

namespace {

// `tokenizers` answers these questions with Rust's tables, of several Unicode versions; ICU 72 is
// Unicode 15.0. Measured over every code point against tokenizers 0.23.3:
// - Rust's std (char::is_numeric, to_lowercase) and regex crate (\w) are newer: the characters
//   they add are listed here;
// - the unicode-categories crate (Punctuation, BertPreTokenizer) is Unicode 8.0 and the
//   unicode-normalization-alignments crate (NFC..NFKD, StripAccents) Unicode 9.0: characters
//   assigned later are left out by age, with the few whose category has changed since.
struct Range {
  uint32_t lo, hi;
};
constexpr Range kRustWordExtra[] = {
    {0x897, 0x897},     {0x1C89, 0x1C8A},   {0xA7CB, 0xA7CD},   {0xA7DA, 0xA7DC},   {0x105C0, 0x105F3}, {0x10D40, 0x10D65},
    {0x10D69, 0x10D6D}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x10EFC, 0x10EFC}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
    {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113C0}, {0x113C2, 0x113C2}, {0x113C5, 0x113C5}, {0x113C7, 0x113CA},
    {0x113CC, 0x113D3}, {0x113E1, 0x113E2}, {0x116D0, 0x116E3}, {0x11BC0, 0x11BE0}, {0x11BF0, 0x11BF9}, {0x11F5A, 0x11F5A},
    {0x13460, 0x143FA}, {0x16100, 0x16139}, {0x16D40, 0x16D6C}, {0x16D70, 0x16D79}, {0x18CFF, 0x18CFF}, {0x1CCF0, 0x1CCF9},
    {0x1E5D0, 0x1E5FA}, {0x2EBF0, 0x2EE5D}};
constexpr Range kRustNumericExtra[] = {{0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9},
                                       {0x11DE0, 0x11DE9}, {0x16130, 0x16139}, {0x16D70, 0x16D79},
                                       {0x16FF4, 0x16FF6}, {0x1CCF0, 0x1CCF9}, {0x1E5F1, 0x1E5FA}};
constexpr Range kRustLowerExtra[] = {  // code point, its lowercase
    {0x1C89, 0x1C8A},   {0xA7CB, 0x264},    {0xA7CC, 0xA7CD},   {0xA7CE, 0xA7CF},   {0xA7D2, 0xA7D3},   {0xA7D4, 0xA7D5},
    {0xA7DA, 0xA7DB},   {0xA7DC, 0x19B},    {0x10D50, 0x10D70}, {0x10D51, 0x10D71}, {0x10D52, 0x10D72}, {0x10D53, 0x10D73},
    {0x10D54, 0x10D74}, {0x10D55, 0x10D75}, {0x10D56, 0x10D76}, {0x10D57, 0x10D77}, {0x10D58, 0x10D78}, {0x10D59, 0x10D79},
    {0x10D5A, 0x10D7A}, {0x10D5B, 0x10D7B}, {0x10D5C, 0x10D7C}, {0x10D5D, 0x10D7D}, {0x10D5E, 0x10D7E}, {0x10D5F, 0x10D7F},
    {0x10D60, 0x10D80}, {0x10D61, 0x10D81}, {0x10D62, 0x10D82}, {0x10D63, 0x10D83}, {0x10D64, 0x10D84}, {0x10D65, 0x10D85},
    {0x16EA0, 0x16EBB}, {0x16EA1, 0x16EBC}, {0x16EA2, 0x16EBD}, {0x16EA3, 0x16EBE}, {0x16EA4, 0x16EBF}, {0x16EA5, 0x16EC0},
    {0x16EA6, 0x16EC1}, {0x16EA7, 0x16EC2}, {0x16EA8, 0x16EC3}, {0x16EA9, 0x16EC4}, {0x16EAA, 0x16EC5}, {0x16EAB, 0x16EC6},
    {0x16EAC, 0x16EC7}, {0x16EAD, 0x16EC8}, {0x16EAE, 0x16EC9}, {0x16EAF, 0x16ECA}, {0x16EB0, 0x16ECB}, {0x16EB1, 0x16ECC},
    {0x16EB2, 0x16ECD}, {0x16EB3, 0x16ECE}, {0x16EB4, 0x16ECF}, {0x16EB5, 0x16ED0}, {0x16EB6, 0x16ED1}, {0x16EB7, 0x16ED2},
    {0x16EB8, 0x16ED3}};

template <size_t N>
bool in_ranges(const Range (&r)[N], uint32_t cp) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (r[mid].hi < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < N && r[lo].lo <= cp && cp <= r[lo].hi;
}

bool assigned_by(uint32_t cp, uint8_t major) {
  UVersionInfo v;
  u_charAge(static_cast<UChar32>(cp), v);
  return v[0] <= major;  // unassigned characters have age 0.0
}

}  // namespace

bool is_white_space(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE);
}

bool is_numeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0 || in_ranges(kRustNumericExtra, cp);
}

bool is_punctuation(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
  if (cp == 0x166D || cp == 0x111C9) return true;  // Po in Unicode 8.0
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0 && assigned_by(cp, 8);
}

bool is_regex_word(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  const auto c = static_cast<UChar32>(cp);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL) || in_ranges(kRustWordExtra, cp);
}

bool is_mark(uint32_t cp) {
  if (cp < 0x80) return false;
  if (cp == 0x1CF2 || cp == 0x1CF3) return true;  // Mc in Unicode 9.0
  if (cp == 0x111C9) return false;                // Po in Unicode 9.0
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) != 0 && assigned_by(cp, 9);
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
      ++i;
      continue;
    }
    const uint32_t cp = next_code_point(s, &i);
    // Rust's char::to_lowercase: the simple mapping, except U+0130, the one unconditional
    // multi-character lowercase mapping (no final-sigma context: one character at a time).
    if (cp == 0x130) {
      out += "i\xCC\x87";
    } else {
      const Range* hit = std::lower_bound(std::begin(kRustLowerExtra), std::end(kRustLowerExtra), cp,
                                          [](const Range& r, uint32_t x) { return r.lo < x; });
      if (hit != std::end(kRustLowerExtra) && hit->lo == cp)
        append_utf8(hit->hi, &out);
      else
        append_utf8(static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp))), &out);
    }
  }
  return out;
}

namespace {

// ICU's normalizer restricted to the characters of Unicode 9.0: the others pass through as the
// unassigned characters they were then. Null, with *why set, when ICU cannot give that form.
const UNormalizer2* unicode9_normalizer(NormalForm form, std::string* why) {
  struct Filtered {
    USet* set = nullptr;
    UNormalizer2* forms[4] = {};
    std::string errors[4];
    Filtered() {
      UErrorCode err = U_ZERO_ERROR;
      static const UChar pattern[] = u"[:age=9.0:]";
      set = uset_openPattern(pattern, -1, &err);
      if (U_FAILURE(err)) {
        for (auto& e : errors) e = std::string("ICU: the Unicode 9.0 set: ") + u_errorName(err);
        return;
      }
      uset_freeze(set);
      for (int i = 0; i < 4; ++i) {
        err = U_ZERO_ERROR;
        const UNormalizer2* base = i == 0   ? unorm2_getNFCInstance(&err)
                                   : i == 1 ? unorm2_getNFDInstance(&err)
                                   : i == 2 ? unorm2_getNFKCInstance(&err)
                                            : unorm2_getNFKDInstance(&err);
        if (U_SUCCESS(err)) forms[i] = unorm2_openFiltered(base, set, &err);
        if (U_FAILURE(err)) {
          forms[i] = nullptr;
#ifdef IB_ICU_WITHOUT_DATA
          errors[i] = "needs ICU's data library, which this build leaves out (INFER_BENCH_STATIC_DEPS)";
#else
          errors[i] = std::string("ICU has no such normalizer: ") + u_errorName(err);
#endif
        }
      }
    }
    ~Filtered() {
      for (auto* f : forms) unorm2_close(f);
      uset_close(set);
    }
  };
  static const Filtered filtered;
  const int i = static_cast<int>(form);
  if (!filtered.forms[i] && why) *why = filtered.errors[i];
  return filtered.forms[i];
}

}  // namespace

bool normal_form_available(NormalForm form, std::string* why) { return unicode9_normalizer(form, why) != nullptr; }

std::string normalize_unicode(NormalForm form, std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);  // every normal form leaves ASCII alone
  UErrorCode err = U_ZERO_ERROR;
  std::string why;
  const UNormalizer2* n = unicode9_normalizer(form, &why);
  if (!n) throw std::runtime_error(why);
  std::u16string in(s.size() + 1, u'\0');
  int32_t in_len = 0;
  u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), static_cast<int32_t>(in.size()), &in_len, s.data(),
                static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU: UTF-8 to UTF-16: ") + u_errorName(err));
  // Decompositions grow text by at most a factor of 18 (NFKD of U+FDFA); retry with the exact size.
  std::u16string norm(static_cast<size_t>(in_len) * 2 + 16, u'\0');
  int32_t norm_len = unorm2_normalize(n, reinterpret_cast<const UChar*>(in.data()), in_len, reinterpret_cast<UChar*>(norm.data()),
                                      static_cast<int32_t>(norm.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    norm.assign(static_cast<size_t>(norm_len) + 1, u'\0');
    norm_len = unorm2_normalize(n, reinterpret_cast<const UChar*>(in.data()), in_len, reinterpret_cast<UChar*>(norm.data()),
                                static_cast<int32_t>(norm.size()), &err);
  }
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalize: ") + u_errorName(err));
  std::string out(static_cast<size_t>(norm_len) * 3 + 1, '\0');
  int32_t out_len = 0;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_len, reinterpret_cast<const UChar*>(norm.data()), norm_len,
              &err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU: UTF-16 to UTF-8: ") + u_errorName(err));
  out.resize(static_cast<size_t>(out_len));
  return out;
}

namespace {

// GPT-2's table: bytes 33-126, 161-172 and 174-255 stand for themselves; the other 68 bytes map
// to 256, 257, ... in byte order.
struct ByteLevelTable {
  std::array<std::string, 256> chars;
  std::array<int16_t, 324> bytes;  // code point (< 324) -> byte
  ByteLevelTable() {
    bytes.fill(-1);
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256 + extra++;
      append_utf8(cp, &chars[static_cast<size_t>(b)]);
      bytes[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTable& table() {
  static const ByteLevelTable t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() { return table().chars; }

int byte_level_byte(uint32_t cp) { return cp < 324 ? table().bytes[cp] : -1; }

std::string byte_level_encode(std::string_view s) {
  const auto& chars = table().chars;
  std::string out;
  out.reserve(s.size() * 2);
  for (char c : s) out += chars[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace ib::tokenizer::detail
