#include "core/sweep.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/point_access.h"
#include "core/spec.h"

namespace ib {

const Param* Point::find(const std::string& key) const {
  for (const auto& p : params)
    if (p.key == key) return &p;
  return nullptr;
}

std::string Point::label(const std::vector<std::string>& keys) const {
  std::string out;
  for (const auto& p : params) {
    if (!keys.empty()) {
      bool wanted = false;
      for (const auto& k : keys) wanted = wanted || k == p.key;
      if (!wanted) continue;
    }
    std::string v = format_value(p.value, p.type);
    std::string compact;
    for (char c : v)
      if (c != ' ') compact += c;
    out += (out.empty() ? "" : " ") + p.key + "=" + compact;
  }
  return out;
}

std::vector<Point> expand_sweep(const ExperimentSpec& spec) {
  std::vector<Point> points(1);
  for (const auto& axis : spec.axes) {
    std::vector<Point> next;
    next.reserve(points.size() * axis.values.size());
    for (const auto& p : points)
      for (const auto& v : axis.values) {
        Point q = p;
        q.params.push_back(Param{axis.key, v, axis.type});
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

bool is_skipped(const ExperimentSpec& spec, const Point& p, const std::string& variant) {
  for (const auto& rule : spec.skip) {
    bool all = true;
    for (const auto& [key, values] : rule.conditions) {
      bool any = false;
      for (const auto& v : values) {
        if (key == "variant")
          any = any || std::get<std::string>(v) == variant;
        else if (const Param* q = PointAccess::find(p, key))
          any = any || values_equal(q->value, v);
      }
      all = all && any;
      if (!all) break;
    }
    if (all) return true;
  }
  return false;
}

SweepPlan plan_sweep(const ExperimentSpec& spec) {
  SweepPlan plan;
  plan.points = expand_sweep(spec);
  plan.variants = spec.variants.size();
  for (const auto& p : plan.points)
    for (const auto& v : spec.variants) {
      if (is_skipped(spec, p, v))
        ++plan.skipped;
      else
        ++plan.rows;
    }
  return plan;
}

std::string describe_plan(const SweepPlan& plan) {
  auto plural = [](size_t n, const char* one, const char* many) { return fmt::format("{} {}", n, n == 1 ? one : many); };
  std::string s = fmt::format("{} × {} = {}", plural(plan.points.size(), "configuration", "configurations"),
                              plural(plan.variants, "variant", "variants"), plural(plan.rows, "row", "rows"));
  if (plan.skipped) s += fmt::format(" ({} skipped)", plan.skipped);
  return s;
}

}  // namespace ib
