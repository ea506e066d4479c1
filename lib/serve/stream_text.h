// What of a completion's text, still being generated, may be sent: a stream's next piece, held
// back where a UTF-8 character or a stop sequence may not be complete yet, and where a stop
// sequence cuts the text.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ib::serve {

// The text a token sequence adds past what was already sent: `sent` characters of the decoded
// text are out; a trailing U+FFFD (a UTF-8 character cut between tokens) is held back until the
// next token completes it, unless `final`.
std::string text_delta(const std::string& decoded, size_t& sent, bool final);

// Where a completion's text ends when a stop sequence occurs in it: before the earliest one (or
// after it, `include`); nullopt when none occurs.
std::optional<size_t> stop_cut(const std::string& text, const std::vector<std::string>& stops, bool include);
// How much of a text still being generated may be sent: all but what could be the start of a
// stop sequence, never inside a UTF-8 character.
size_t stop_safe_end(const std::string& text, const std::vector<std::string>& stops);

}  // namespace ib::serve
