// Parsing JSON text, in one translation unit. nlohmann's parser is a template over the document
// type and the input adapter: every file that called Json::parse compiled its own lexer and parser
// (~1.2 s of -O3 per document type per file, in 49 files). Declared here and instantiated once in
// json_input.cpp for nlohmann::json and nlohmann::ordered_json, so callers compile none of it.
//
// parse_json_bounded parses JSON a user gave (a results.json, a tokenizer.json, a config.json, a
// safetensors header, a schema) with a bound on its nesting. nlohmann's parser and destructor do
// not recurse, but copying a value does, one frame per level: a document nested 20,000 levels deep
// overflowed the stack the first time a reader copied a part of it. No real file nests past a few dozen.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace ib {

constexpr int kMaxJsonDepth = 512;

// Json::parse(text): a syntax error throws nlohmann's parse_error (callers word it with their context).
template <class Json = nlohmann::json>
Json parse_json(std::string_view text);
template <class Json = nlohmann::json>
Json parse_json(std::istream& in);

// Json::parse(text, nullptr, false): a syntax error gives a value whose is_discarded() is true.
template <class Json = nlohmann::json>
Json parse_json_or_discarded(std::string_view text);

// Json::accept(text): whether the text is one JSON document.
bool json_accepts(std::string_view text);

// parse_json(text), refusing nesting past `max_depth` with an InputError naming `source`.
template <class Json = nlohmann::json>
Json parse_json_bounded(const std::string& text, const std::string& source, int max_depth = kMaxJsonDepth);

extern template nlohmann::json parse_json<nlohmann::json>(std::string_view);
extern template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view);
extern template nlohmann::json parse_json<nlohmann::json>(std::istream&);
extern template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::istream&);
extern template nlohmann::json parse_json_or_discarded<nlohmann::json>(std::string_view);
extern template nlohmann::ordered_json parse_json_or_discarded<nlohmann::ordered_json>(std::string_view);
extern template nlohmann::json parse_json_bounded<nlohmann::json>(const std::string&, const std::string&, int);
extern template nlohmann::ordered_json parse_json_bounded<nlohmann::ordered_json>(const std::string&, const std::string&, int);

}  // namespace ib
