#include "serve/arrival_trace.h"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/json_lines.h"

namespace ib::serve {

std::vector<TraceEntry> read_arrival_trace(const std::string& path, double unit, size_t limit) {
  std::vector<TraceEntry> out;
  double t0 = 0, last = 0;
  for_each_json_line(path, 1u << 20, [&](const nlohmann::json& v, size_t line) {
    const std::string where = fmt::format("{}:{}", path, line);
    if (!v.is_object() || !v.contains("timestamp") || !v["timestamp"].is_number())
      throw InputError(fmt::format("{}: a request is an object with a numeric `timestamp`", where));
    const double t = v["timestamp"].get<double>() * unit;
    if (!std::isfinite(t)) throw InputError(fmt::format("{}: timestamp is not a finite number", where));
    if (out.empty()) t0 = last = t;
    if (t < last)
      throw InputError(fmt::format("{}: timestamp {:g} is before the line above's {:g} (a trace is in arrival order)", where,
                                   v["timestamp"].get<double>(), last / unit));
    last = t;
    TraceEntry e;
    e.time = t - t0;
    auto length = [&](const char* key) {
      if (!v.contains(key)) return 0;
      if (!v[key].is_number_integer() || v[key].get<int64_t>() < 1 || v[key].get<int64_t>() > (1 << 24))
        throw InputError(fmt::format("{}: {} is a token count from 1 to {}", where, key, 1 << 24));
      return static_cast<int>(v[key].get<int64_t>());
    };
    e.input_length = length("input_length");
    e.output_length = length("output_length");
    if (v.contains("hash_ids")) {
      if (!v["hash_ids"].is_array()) throw InputError(fmt::format("{}: hash_ids is a list of integers", where));
      for (const auto& h : v["hash_ids"]) {
        if (!h.is_number_integer()) throw InputError(fmt::format("{}: hash_ids is a list of integers", where));
        e.hash_ids.push_back(h.get<int64_t>());
      }
    }
    out.push_back(std::move(e));
    return out.size() < limit;
  });
  if (out.empty()) throw InputError(fmt::format("{}: no request in the trace", path));
  return out;
}

}  // namespace ib::serve
