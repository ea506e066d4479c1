// JSON Schema `format` values as languages of raw string characters (between the quotes).
//
// Each is exact where the format is a regular language of modest size and a documented subset
// otherwise — never a value the format (as the `jsonschema` package's format checker reads it)
// rejects:
// - date, date-time: calendar days per month, 29 February in leap years only; years 0001-9999;
// - time, date-time: an offset is required (RFC 3339); the leap second :60 is left out;
// - email, idn-email: a local part of at most 64 characters with at most one dot, @ a hostname
//   (below) of two to four labels (a practical subset);
// - hostname: up to four labels of letters, digits and inner hyphens (1-63 characters), the last
//   of 2-61 letters (at most 253 characters in all); idn-hostname: the same in lowercase letters
//   and digits without hyphens (so no label is a reserved "xn--" form);
// - ipv4: dotted quads without leading zeros; ipv6: eight groups, or a "::" with at most six
//   explicit groups (no embedded IPv4, no zone);
// - uri, iri: RFC 3986 URIs with a registered-name host (no IP literal); uri-reference,
//   iri-reference: those or relative references; iri and iri-reference are ASCII;
// - uri-template: literals of URI characters and {var}, {+var}, ... expressions (RFC 6570 level 4
//   names with :prefix or * modifiers);
// - json-pointer: exact (RFC 6901); relative-json-pointer: its number with a 0 only as the last
//   digit (the jsonschema package refuses any digit after a 0); uri-template prefixes below 1000;
// - duration: RFC 3339 appendix A (PnW, or P with contiguous units of Y M D, T with H M S) with
//   whole numbers of up to 9 digits;
// - regex: expressions valid in Python's re and in ECMA 262 alike: literals, escapes, classes with
//   ordered ranges, groups (also (?: (?= (?!) nested up to three deep, alternation, quantifiers
//   (* + ? {n} {n,} {0|1,m}, lazy or not), ^ $ \b \B; over any characters, backslashes spelled as
//   JSON escapes them (format_spelled);
// - uuid: 8-4-4-4-12 hex digits; byte (OpenAPI): base64 with padding.
// Integer formats (int8 ... uint64, OpenAPI) bound integers instead (integer_format_range); float,
// double and binary constrain nothing. Any other format is not asserted (as validators do with
// formats they do not know), and the compiler reports it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace ib::constrain {

// The format's language as a pattern (parse_regex's dialect, anchored, over characters a JSON
// string holds unescaped, or any characters where format_spelled); nullopt for a format this
// table does not constrain.
std::optional<std::string> format_pattern(const std::string& format);

// [lo, hi] of an integer format (int8, int16, int32, int64, uint8, uint16, uint32, uint64).
std::optional<std::pair<int64_t, int64_t>> integer_format_range(const std::string& format);

// Whether the format's pattern is over decoded characters a JSON string may have to escape (a
// regex's backslashes), to be spelled as JSON writers write them, instead of raw characters.
bool format_spelled(const std::string& format);

// float, double, binary: formats of no constraint that are not reported as unknown.
bool format_without_constraint(const std::string& format);

}  // namespace ib::constrain
