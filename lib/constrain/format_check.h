// `format` checked by parsing, for SchemaValidator: written from the RFCs, not from the compiler's
// patterns (schema_formats.h), so that the two can disagree when one is wrong.
//
// Checked: date, time, date-time (RFC 3339 with calendar days and leap seconds at 23:59:60 UTC),
// uuid, email and idn-email (dot-atoms of at most 64 characters @ a hostname with a dot, or
// [IPv4]), hostname (RFC 1123 labels, 253
// characters), ipv4, ipv6 (with "::" and an embedded IPv4 tail), json-pointer,
// relative-json-pointer, duration (ISO 8601 as RFC 3339 appendix A writes it), regex (std::regex
// ECMAScript compiles it), uri and uri-reference (RFC 3986's components and their characters).
// Every other format — iri, uri-template, idn-hostname, vendor formats — is accepted: the golden
// fixtures from the jsonschema package check those.
#pragma once

#include <string>

namespace ib::constrain {

bool format_valid(const std::string& format, const std::string& value);

}  // namespace ib::constrain
