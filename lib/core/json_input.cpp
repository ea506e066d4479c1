#include "core/json_input.h"

#include <istream>

namespace ib {

template <class Json>
Json parse_json(std::string_view text) {
  return Json::parse(text.begin(), text.end());
}

template <class Json>
Json parse_json(std::istream& in) {
  return Json::parse(in);
}

template <class Json>
Json parse_json_or_discarded(std::string_view text) {
  return Json::parse(text.begin(), text.end(), nullptr, false);
}

bool json_accepts(std::string_view text) { return nlohmann::json::accept(text.begin(), text.end()); }

template <class Json>
Json parse_json_bounded(const std::string& text, const std::string& source, int max_depth) {
  typename Json::parser_callback_t bound = [&](int depth, typename Json::parse_event_t, Json&) {
    if (depth > max_depth) throw InputError(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  return Json::parse(text.begin(), text.end(), bound);
}

template nlohmann::json parse_json<nlohmann::json>(std::string_view);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view);
template nlohmann::json parse_json<nlohmann::json>(std::istream&);
template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::istream&);
template nlohmann::json parse_json_or_discarded<nlohmann::json>(std::string_view);
template nlohmann::ordered_json parse_json_or_discarded<nlohmann::ordered_json>(std::string_view);
template nlohmann::json parse_json_bounded<nlohmann::json>(const std::string&, const std::string&, int);
template nlohmann::ordered_json parse_json_bounded<nlohmann::ordered_json>(const std::string&, const std::string&, int);

}  // namespace ib
