// Reading tokenizer.json members with errors that name the file and the JSON pointer.
#include <cmath>

#include "core/errors.h"
#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

std::string pointer_token(const std::string& key) {
  std::string out = "/";
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

void Json::fail(const std::string& message) const {
  throw InputError(*source_ + ": " + (ptr_.empty() ? std::string("/") : ptr_) + ": " + message);
}

namespace {

const char* kind(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    default:
      return "a number";
  }
}

}  // namespace

bool Json::has(const std::string& key) const {
  if (!v_->is_object()) return false;
  auto it = v_->find(key);
  return it != v_->end() && !it->is_null();
}

Json Json::operator[](const std::string& key) const {
  if (!v_->is_object()) fail(std::string("expected an object, found ") + kind(*v_));
  auto it = v_->find(key);
  if (it == v_->end()) fail("missing member '" + key + "'");
  return Json(*it, ptr_ + pointer_token(key), source_);
}

Json Json::at(size_t index) const {
  if (!v_->is_array()) fail(std::string("expected an array, found ") + kind(*v_));
  return Json((*v_)[index], ptr_ + "/" + std::to_string(index), source_);
}

size_t Json::size() const {
  if (!v_->is_array()) fail(std::string("expected an array, found ") + kind(*v_));
  return v_->size();
}

Json Json::child(const std::string& key, const nlohmann::json& value) const {
  return Json(value, ptr_ + pointer_token(key), source_);
}

std::string Json::str() const {
  if (!v_->is_string()) fail(std::string("expected a string, found ") + kind(*v_));
  return v_->get<std::string>();
}

bool Json::boolean() const {
  if (!v_->is_boolean()) fail(std::string("expected true or false, found ") + kind(*v_));
  return v_->get<bool>();
}

int64_t Json::integer(int64_t lo, int64_t hi) const {
  int64_t x = 0;
  if (v_->is_number_integer()) {
    if (v_->is_number_unsigned() && v_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) fail("integer out of range");
    x = v_->get<int64_t>();
  } else if (v_->is_number_float()) {
    const double d = v_->get<double>();
    if (!(std::floor(d) == d) || std::fabs(d) > 9e15) fail("expected an integer, found " + v_->dump());
    x = static_cast<int64_t>(d);
  } else {
    fail(std::string("expected an integer, found ") + kind(*v_));
  }
  if (x < lo || x > hi) fail(std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double Json::number() const {
  if (!v_->is_number()) fail(std::string("expected a number, found ") + kind(*v_));
  return v_->get<double>();
}

uint32_t Json::one_char() const {
  const std::string s = str();
  size_t i = 0;
  if (s.empty()) fail("expected one character, found an empty string");
  const uint32_t cp = next_code_point(s, &i);
  if (i != s.size()) fail("expected one character, found '" + s + "'");
  return cp;
}

bool Json::opt_bool(const std::string& key, bool dflt) const { return has(key) ? (*this)[key].boolean() : dflt; }

std::optional<std::string> Json::opt_str(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return (*this)[key].str();
}

std::string Json::type() const {
  if (!v_->is_object()) fail(std::string("expected an object, found ") + kind(*v_));
  return (*this)["type"].str();
}

SplitBehavior parse_behavior(const Json& j) {
  const std::string b = j.str();
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  j.fail("'" + b + "' is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
}

}  // namespace ib::tokenizer::detail
