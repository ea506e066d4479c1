// Every key of a kind with the values a spec gives it (a constant as one value, an axis as all of
// them), what KindInfo::check receives. A kind reads it only through its own ParamSet
// (SpecValues<P>::field), never by a key's name, so a renamed key cannot leave a check behind.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/value.h"

namespace ib {

template <class P>
class SpecValues;

class SpecKeyValues {
 public:
  explicit SpecKeyValues(std::map<std::string, std::vector<Value>> values) : values_(std::move(values)) {}

 private:
  template <class P>
  friend class SpecValues;
  std::map<std::string, std::vector<Value>> values_;
};

}  // namespace ib
