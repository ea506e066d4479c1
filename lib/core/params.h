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
//
// A check across keys (KindInfo::check) reads the spec's values through the same bindings, typed
// and named by their fields, not by their keys' names:
//
//   const SpecValues<CopyParams> v(copy_params(), values);
//   for (int64_t b : v.field(&CopyParams::bytes).values) ...
//   return KeyProblem{{v.field(&CopyParams::bytes).key}, "..."};
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include "core/spec_key_values.h"
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
    fields_.push_back({offset_of(field), typeid(F)});
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
    fields_.push_back({offset_of(field), typeid(F)});
    keys_.push_back(std::move(spec));
    return *this;
  }

  // A group's keys, in its order, read into the member `group_field` (a nested struct).
  template <class G>
  ParamSet& add_group(G P::*group_field, const ParamSet<G>& group) {
    for (size_t i = 0; i < group.keys_.size(); ++i) {
      check_new(group.keys_[i].name);
      setters_.push_back([group_field, set = group.setters_[i]](P& out, const Value& v) { set(out.*group_field, v); });
      fields_.push_back({offset_of(group_field) + group.fields_[i].offset, group.fields_[i].type});
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

  // The binding of the field `get` reaches in a P: a member pointer (&P::bytes) or a function
  // returning a reference into its argument (a nested group's field); a field no key is bound to
  // is a programming error.
  template <class Get>
  size_t binding_of(Get get) const {
    const P probe{};
    const auto& field = std::invoke(get, probe);
    const size_t offset = static_cast<size_t>(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&probe));
    for (size_t i = 0; i < fields_.size(); ++i)
      if (fields_[i].offset == offset && fields_[i].type == std::type_index(typeid(field))) return i;
    throw std::logic_error("no key is bound to this field");
  }
  // The value `v` of binding i as its field holds it.
  template <class Get>
  auto field_value(size_t i, Get get, const Value& v) const {
    P out{};
    setters_[i](out, v);
    return std::invoke(get, std::as_const(out));
  }

 private:
  template <class Q>
  friend class ParamSet;  // add_group reads the group's bindings

  // Where a binding's field lies in a P (its byte offset, nested groups' added) and its type: a
  // field is found again from a member pointer or an accessor (binding_of).
  struct FieldAt {
    size_t offset;
    std::type_index type;
  };
  template <class F, class Q>
  static size_t offset_of(F Q::*field) {
    const Q probe{};
    return static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*field)) - reinterpret_cast<const char*>(&probe));
  }

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
  std::vector<FieldAt> fields_;
};

// A key's values as a spec gives them (a constant's one, an axis's all), typed as its field, and
// its name (a problem's location).
template <class F>
struct KeyValues {
  std::string key;
  std::vector<F> values;
};

// The values a spec gives the keys of a set (KindInfo::check's SpecKeyValues: every key of the
// kind, a constant as one value, an axis as all), read through the set's bindings.
template <class P>
class SpecValues {
 public:
  SpecValues(const ParamSet<P>& set, const SpecKeyValues& values) : set_(set), values_(values.values_) {}

  // The values of the key bound to a field: `v.field(&P::bytes)`, or for a nested group's field
  // `v.field([](const P& p) -> const auto& { return p.engine.weights; })`.
  template <class Get>
  auto field(Get get) const {
    using F = std::decay_t<decltype(std::invoke(get, std::declval<const P&>()))>;
    const size_t i = set_.binding_of(get);
    KeyValues<F> out{set_.keys()[i].name, {}};
    if (auto it = values_.find(out.key); it != values_.end())
      for (const Value& v : it->second) out.values.push_back(set_.field_value(i, get, v));
    return out;
  }

 private:
  const ParamSet<P>& set_;
  const std::map<std::string, std::vector<Value>>& values_;
};

}  // namespace ib
