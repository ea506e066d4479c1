// A kind's keys bound to the fields of a parameter struct, declared once: each binding carries the
// key's name, type, doc, default and range (the KeySpec that the spec reader, `infer-bench keys`
// and the reference docs are made from) and the field the key's value lands in. A variant reads a
// sweep point into the struct (`read`) instead of looking keys up by their names.
//
//   struct CopyParams { int64_t bytes = 0; };
//   const ParamSet<CopyParams>& copy_params() {
//     static const ParamSet<CopyParams> set = ParamSet<CopyParams>().add(
//         &CopyParams::bytes, key_spec("bytes", ParamType::Bytes, "size of the copied buffer", Value(int64_t{1} << 30)));
//     return set;
//   }
//   kind.keys = copy_params().keys();                  // the kind's declaration
//   const CopyParams p = copy_params().read(point);    // in the variant
//
// Sets compose: a group of keys several kinds share (text prompts, a model and its weights) is a
// ParamSet of its own struct, added to a kind's set as a member (`add_group`).
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/sweep.h"
#include "core/value.h"

namespace ib {

template <class P>
class ParamSet {
 public:
  // An integer key (Int, Bytes) into an integer field; a real one (Float, Seconds) into a double;
  // a Bool into a bool; a String or Enum into a std::string. A type that does not fit the field is
  // a programming error, refused when the set is built (the kind's registration).
  template <class F>
  ParamSet& add(F P::*field, KeySpec spec) {
    check_fits<F>(spec);
    check_new(spec.name);
    setters_.push_back([field](P& out, const Value& v) { out.*field = convert<F>(v); });
    keys_.push_back(std::move(spec));
    return *this;
  }
  // An Enum key into a field of another type (a DType, a policy enum): `parse` maps each choice.
  template <class F, class Parse>
  ParamSet& add(F P::*field, KeySpec spec, Parse parse) {
    if (spec.type != ParamType::Enum && spec.type != ParamType::String)
      throw std::logic_error("key '" + spec.name + "': a parsed field needs an enum or string key");
    check_new(spec.name);
    setters_.push_back([field, parse](P& out, const Value& v) { out.*field = parse(std::get<std::string>(v)); });
    keys_.push_back(std::move(spec));
    return *this;
  }

  // A group's keys, in its order, read into the member `group_field` (a nested struct).
  template <class G>
  ParamSet& add_group(G P::*group_field, const ParamSet<G>& group) {
    for (size_t i = 0; i < group.keys_.size(); ++i) {
      check_new(group.keys_[i].name);
      setters_.push_back([group_field, set = group.setters_[i]](P& out, const Value& v) { set(out.*group_field, v); });
      keys_.push_back(group.keys_[i]);
    }
    return *this;
  }

  // The keys in declaration order (KindInfo::keys, or part of them).
  const std::vector<KeySpec>& keys() const { return keys_; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& k : keys_) out.push_back(k.name);
    return out;
  }

  // The struct for a point: each key's value where the point holds it (a key no listed variant
  // reads is left out of the points), else its default; a required key the point lacks throws
  // std::out_of_range naming it.
  P read(const Point& point) const {
    P out{};
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (const Param* p = point.find(keys_[i].name)) {
        setters_[i](out, p->value);
      } else if (keys_[i].default_value) {
        setters_[i](out, *keys_[i].default_value);
      } else {
        throw std::out_of_range("parameter '" + keys_[i].name + "' is not in the point");
      }
    }
    return out;
  }

 private:
  template <class Q>
  friend class ParamSet;  // add_group reads the group's bindings

  // A key bound twice would be read into two fields: a programming error.
  void check_new(const std::string& name) const {
    for (const auto& k : keys_)
      if (k.name == name) throw std::logic_error("key '" + name + "' is bound twice");
  }
  template <class F>
  static void check_fits(const KeySpec& spec) {
    const ParamType t = spec.type;
    bool fits = false;
    if constexpr (std::is_same_v<F, bool>) {
      fits = t == ParamType::Bool;
    } else if constexpr (std::is_integral_v<F>) {
      fits = t == ParamType::Int || t == ParamType::Bytes;
    } else if constexpr (std::is_floating_point_v<F>) {
      fits = t == ParamType::Float || t == ParamType::Seconds;
    } else if constexpr (std::is_same_v<F, std::string>) {
      fits = t == ParamType::String || t == ParamType::Enum;
    }
    if (!fits) throw std::logic_error("key '" + spec.name + "': its type (" + to_string(t) + ") does not fit its field");
  }
  template <class F>
  static F convert(const Value& v) {
    if constexpr (std::is_same_v<F, bool>) {
      return std::get<bool>(v);
    } else if constexpr (std::is_integral_v<F>) {
      return static_cast<F>(std::get<int64_t>(v));
    } else if constexpr (std::is_floating_point_v<F>) {
      return static_cast<F>(as_number(v));
    } else {
      return std::get<std::string>(v);
    }
  }

  std::vector<KeySpec> keys_;
  std::vector<std::function<void(P&, const Value&)>> setters_;
};

}  // namespace ib
