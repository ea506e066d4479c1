// Parsing JSON a user gave (a results.json, a tokenizer.json, a config.json, a safetensors
// header, a schema) with a bound on its nesting. nlohmann's parser and destructor do not recurse,
// but copying a value does, one frame per level: a document nested 20,000 levels deep overflowed
// the stack the first time a reader copied a part of it. No real file nests past a few dozen.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace ib {

constexpr int kMaxJsonDepth = 512;

// Json::parse(text), refusing nesting past `max_depth` with an InputError naming `source`; a
// syntax error stays nlohmann's parse_error (callers word it with their context).
template <class Json = nlohmann::json>
Json parse_json_bounded(const std::string& text, const std::string& source, int max_depth = kMaxJsonDepth) {
  typename Json::parser_callback_t bound = [&](int depth, typename Json::parse_event_t, Json&) {
    if (depth > max_depth) throw InputError(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  return Json::parse(text, bound);
}

}  // namespace ib
