// A point's parameters by their keys' names, for core's own files (the runner, the sweep, the
// reports) and the tests. A kind reads its points through its ParamSet (core/params.h), typed and
// by field, so check-layers refuses this header anywhere else.
#pragma once

#include <stdexcept>
#include <string>

#include "core/sweep.h"

namespace ib {

struct PointAccess {
  static const Param* find(const Point& p, const std::string& key) { return p.find(key); }
  // Throws std::out_of_range naming the key when the point lacks it.
  static const Value& at(const Point& p, const std::string& key) {
    const Param* q = p.find(key);
    if (!q) throw std::out_of_range("no parameter '" + key + "' in this point");
    return q->value;
  }
};

}  // namespace ib
