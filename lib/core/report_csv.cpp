// results.csv: one RFC 4180 record per row, every experiment's params, metrics and book figures as
// columns of their own.
#include "core/point_access.h"
#include "core/report.h"

#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib {

std::string csv_field(const std::string& s) {
  bool quote = s.find_first_of(",\"\r\n") != std::string::npos;
  if (!quote) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"')
      out += "\"\"";
    else
      out += c;
  }
  return out + "\"";
}

std::string csv_report(const ResultSet& rs) {
  std::vector<std::string> params, metrics, book;
  std::set<std::string> seen_p, seen_m, seen_b;
  for (const auto& e : rs.experiments)
    for (const auto& r : e.rows) {
      for (const auto& p : r.point.params)
        if (seen_p.insert(p.key).second) params.push_back(p.key);
      for (const auto& m : r.metrics)
        if (seen_m.insert(m.key).second) metrics.push_back(m.key);
      for (const auto& b : r.book)
        if (seen_b.insert(b.first).second) book.push_back(b.first);
    }
  std::vector<std::string> header = {"experiment", "kind", "backend", "variant", "status"};
  for (const auto& p : params) header.push_back(p);
  for (const char* h : {"samples",       "median_ms",     "mean_ms",           "stdev_ms",       "min_ms",     "p10_ms",
                        "p90_ms",        "stop_reason",   "work_flops",        "work_bytes",     "tflops",     "gbps",
                        "pct_gemm_peak", "pct_copy_peak", "peak_memory_bytes", "speedup",        "speedup_lo", "speedup_hi",
                        "verdict",       "check_metric",  "check_value",       "check_tolerance"})
    header.push_back(h);
  for (const auto& m : metrics) header.push_back(m);
  for (const auto& b : book) header.push_back("book_" + b);
  header.push_back("message");

  auto num = [](double v) { return fmt::format("{:.6g}", v); };
  std::string out;
  auto emit = [&](const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_field(fields[i]);
    out += "\r\n";
  };
  emit(header);
  for (const auto& e : rs.experiments)
    for (const auto& r : e.rows) {
      std::vector<std::string> f = {r.experiment, r.kind, to_string(r.backend), r.variant, to_string(r.status)};
      for (const auto& p : params) {
        const Param* q = PointAccess::find(r.point, p);
        f.push_back(q ? value_to_json(q->value).dump() : "");
        if (q && std::holds_alternative<std::string>(q->value)) f.back() = std::get<std::string>(q->value);
      }
      const bool ok = r.status == RowStatus::Ok;
      f.push_back(ok ? std::to_string(r.stats.n) : "");
      for (double v : {r.stats.median, r.stats.mean, r.stats.stdev, r.stats.min, r.stats.p10, r.stats.p90})
        f.push_back(ok ? num(v * 1e3) : "");
      f.push_back(r.stop_reason);
      f.push_back(r.work.flops > 0 ? num(r.work.flops) : "");
      f.push_back(r.work.bytes > 0 ? num(r.work.bytes) : "");
      Roofline rf = roofline(r, rs.meta.ceilings);
      for (const auto& o : {rf.tflops, rf.gbps, rf.pct_gemm, rf.pct_copy}) f.push_back(o ? num(*o) : "");
      f.push_back(r.peak_memory >= 0 && r.status != RowStatus::Unsupported ? std::to_string(r.peak_memory) : "");
      if (r.speedup) {
        f.push_back(num(r.speedup->ratio));
        f.push_back(num(r.speedup->lo));
        f.push_back(num(r.speedup->hi));
        f.push_back(to_string(r.speedup->verdict));
      } else {
        const bool timed_baseline = r.is_baseline && ok;
        f.insert(f.end(), {timed_baseline ? "1" : "", "", "", r.is_baseline ? "baseline" : ""});
      }
      if (r.validation) {
        f.push_back(r.validation->metric);
        f.push_back(num(r.validation->value));
        f.push_back(num(r.validation->tolerance));
      } else {
        f.insert(f.end(), {"", "", ""});
      }
      for (const auto& m : metrics) {
        std::string v;
        for (const auto& x : r.metrics)
          if (x.key == m) v = num(x.value);
        f.push_back(v);
      }
      for (const auto& b : book) {
        std::string v;
        for (const auto& x : r.book)
          if (x.first == b)
            v = std::holds_alternative<double>(x.second) ? num(std::get<double>(x.second)) : std::get<std::string>(x.second);
        f.push_back(v);
      }
      f.push_back(r.message);
      emit(f);
    }
  return out;
}

}  // namespace ib
