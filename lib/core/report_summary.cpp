// The run's summary: per experiment, the chapter's claim (spec `summary:`), the measured figure's
// range and whether the measured shape is the claim's.
#include "core/point_access.h"
#include "core/report.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/report_internal.h"
#include "core/units.h"

namespace ib {

using report_detail::role_of;

namespace {

// A row's value of the summarised figure, if it has one.
std::optional<double> figure_value(const Row& r, const std::string& figure, const Ceilings& c) {
  if (r.status != RowStatus::Ok) return std::nullopt;
  if (figure.empty() || figure == "ms") return r.stats.median * 1e3;
  if (figure == "speedup") return r.speedup ? std::optional<double>(r.speedup->ratio) : std::nullopt;
  if (figure == "overhead")
    return r.speedup && r.speedup->ratio > 0 ? std::optional<double>(100.0 * (1.0 / r.speedup->ratio - 1.0)) : std::nullopt;
  const Roofline rf = roofline(r, c);
  if (figure == "tflops") return rf.tflops;
  if (figure == "gbps") return rf.gbps;
  if (figure == "pct_copy") return rf.pct_copy;
  if (figure == "pct_gemm") return rf.pct_gemm;
  for (const auto& m : r.metrics)
    if (m.key == figure) return m.value;
  return std::nullopt;
}

std::string figure_unit(const ExperimentResult& e, const std::string& figure) {
  if (figure.empty() || figure == "ms") return " ms";
  if (figure == "speedup") return "×";
  if (figure == "tflops") return " TFLOP/s";
  if (figure == "gbps") return " GB/s";
  if (figure == "pct_copy" || figure == "pct_gemm" || figure == "overhead") return "%";
  for (const auto& r : e.rows)
    for (const auto& m : r.metrics)
      if (m.key == figure) return m.unit.empty() ? "" : m.unit == "×" || m.unit == "%" ? m.unit : " " + m.unit;
  return "";
}

bool in_summary(const ExperimentResult& e, const Row& r) {
  return e.spec.summary.role.empty() || role_of(r) == e.spec.summary.role;
}

// Whether the measured rows have one of the claim's shapes: "holds (...)", "does not hold (...)"
// or "not judged (...)".
std::string shape_verdict(const ExperimentResult& e, const std::string& h, const std::string& figure, const Ceilings& c) {
  if (h == "faster") {
    size_t n = 0, faster = 0;
    for (const auto& r : e.rows)
      if (r.speedup && in_summary(e, r)) {
        ++n;
        faster += r.speedup->verdict == Verdict::Faster;
      }
    if (n == 0) return "faster: not judged (no row compared)";
    return fmt::format("faster: {} {}/{}", faster == n ? "holds" : "does not hold", faster, n);
  }
  const bool grows = h.rfind("grows with ", 0) == 0, shrinks = h.rfind("shrinks with ", 0) == 0;
  if (grows || shrinks) {
    const std::string key = h.substr(h.find(" with ") + 6);
    // Series: rows of one variant at the same other params, in the order of the key's values.
    std::map<std::string, std::vector<std::pair<double, double>>> series;
    for (const auto& r : e.rows) {
      const std::optional<double> v = figure_value(r, figure, c);
      const Param* p = PointAccess::find(r.point, key);
      if (!v || !p || !in_summary(e, r)) continue;
      double x = 0;
      if (const auto* i = std::get_if<int64_t>(&p->value))
        x = static_cast<double>(*i);
      else if (const auto* d = std::get_if<double>(&p->value))
        x = *d;
      else
        continue;
      std::string id = r.variant;
      for (const auto& q : r.point.params)
        if (q.key != key) id += "|" + format_value(q.value, q.type);
      series[id].emplace_back(x, *v);
    }
    size_t n = 0, ok = 0;
    for (auto& [id, pts] : series) {
      if (pts.size() < 2) continue;
      std::sort(pts.begin(), pts.end());
      bool mono = true;
      for (size_t i = 1; i < pts.size(); ++i)
        mono = mono && (grows ? pts[i].second > pts[i - 1].second : pts[i].second < pts[i - 1].second);
      ++n;
      ok += mono;
    }
    if (n == 0) return h + ": not judged (no variant has two points along " + key + ")";
    return fmt::format("{}: {} {}/{} variants", h, ok == n ? "holds" : "does not hold", ok, n);
  }
  std::string op = h.substr(0, h.rfind(' '));
  const double bar = std::stod(h.substr(h.rfind(' ') + 1));
  size_t n = 0, ok = 0;
  for (const auto& r : e.rows)
    if (const std::optional<double> v = figure_value(r, figure, c); v && in_summary(e, r)) {
      ++n;
      ok += op == "below" ? *v < bar : op == "above" ? *v > bar : op == "at least" ? *v >= bar : *v <= bar;
    }
  if (n == 0) return h + ": not judged (no row has the figure)";
  return fmt::format("{}: {} {}/{}", h, ok == n ? "holds" : "does not hold", ok, n);
}

}  // namespace

std::string summary_line(const ExperimentResult& e, const Ceilings& c) {
  const SummarySpec& s = e.spec.summary;
  const std::string figure = s.figure.empty() ? "ms" : s.figure;
  std::vector<double> values;
  for (const auto& r : e.rows)
    if (const std::optional<double> v = figure_value(r, figure, c); v && in_summary(e, r)) values.push_back(*v);
  std::string line = "**" + e.spec.name + "**";
  line += s.claim.empty() ? ": no chapter claim" : ": chapter " + s.claim;
  const std::string label = figure == "ms" ? "median ms" : figure;
  if (values.empty()) {
    line += " · measured: no row has " + label;
  } else {
    const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
    const std::string unit = figure == "ms" ? "" : figure_unit(e, figure);
    const std::string range = *lo == *hi ? format_number(*lo) + unit : format_number(*lo) + "–" + format_number(*hi) + unit;
    line += fmt::format(" · measured {} {}", label, range);
  }
  size_t failed = 0;
  for (const auto& r : e.rows) failed += r.status == RowStatus::Failed;
  if (failed && !s.holds.empty())
    line += fmt::format(" · shape not judged ({} row{} FAILED)", failed, failed == 1 ? "" : "s");
  else
    for (const auto& h : s.holds) line += " · " + shape_verdict(e, h, figure, c);
  if (e.interrupted) line += " · interrupted";
  return line;
}

std::string markdown_summary(const ResultSet& rs) {
  std::string s = "## Summary\n\n";
  if (rs.meta.backend == Backend::Cpu)
    s += "The chapter's figures are its GPUs' (an A100's, mostly); these are the cpu backend at scaled sizes:\n"
         "the shapes compare, the numbers do not.\n\n";
  for (const auto& e : rs.experiments) s += "- " + summary_line(e, rs.meta.ceilings) + "\n";
  return s;
}

}  // namespace ib
