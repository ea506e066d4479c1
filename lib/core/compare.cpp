#include "core/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/units.h"

namespace ib {

namespace {

std::set<std::string> param_keys(const ExperimentResult& e) {
  std::set<std::string> keys;
  for (const auto& r : e.rows)
    for (const auto& p : r.point.params) keys.insert(p.key);
  return keys;
}

// The row's identity within its experiment: variant and the shared parameters' values.
std::string row_key(const Row& r, const std::set<std::string>& shared) {
  std::string k = r.variant;
  for (const auto& p : r.point.params)
    if (shared.count(p.key)) k += "\x1f" + p.key + "=" + format_value(p.value, p.type);
  return k;
}

std::string cell(RowStatus s, double median) {
  if (s == RowStatus::Ok) return format_ms(median);
  return s == RowStatus::Oom ? "OOM" : s == RowStatus::Failed ? "FAILED" : "unsupported";
}

// The parameter keys whose values differ across an experiment's compared rows (table columns).
std::vector<std::string> varying_keys(const ExperimentComparison& e) {
  std::vector<std::string> out;
  if (e.rows.empty()) return out;
  for (const auto& p0 : e.rows[0].params) {
    const std::string first = format_value(p0.value, p0.type);
    bool constant = true;
    for (const auto& r : e.rows) {
      bool same = false;
      for (const auto& p : r.params) same = same || (p.key == p0.key && format_value(p.value, p.type) == first);
      constant = constant && same;
    }
    if (!constant) out.push_back(p0.key);
  }
  return out;
}

std::string describe(const RunMeta& m) {
  return fmt::format("{} ({} backend), infer-bench {} git {}, {}", m.device.name, to_string(m.backend), m.version, m.git_sha,
                     m.started_utc);
}

}  // namespace

Comparison compare_results(const ResultSet& base, const ResultSet& next, const std::vector<std::string>& only, uint64_t seed) {
  Comparison c;
  c.base = base.meta;
  c.next = next.meta;
  auto wanted = [&](const std::string& name) { return only.empty() || std::find(only.begin(), only.end(), name) != only.end(); };
  std::map<std::string, const ExperimentResult*> next_by_name;
  for (const auto& e : next.experiments)
    if (wanted(e.spec.name)) next_by_name.emplace(e.spec.name, &e);
  std::set<std::string> seen;
  for (const auto& be : base.experiments) {
    if (!wanted(be.spec.name)) continue;
    auto it = next_by_name.find(be.spec.name);
    if (it == next_by_name.end()) {
      c.base_only.push_back(be.spec.name);
      continue;
    }
    seen.insert(be.spec.name);
    const ExperimentResult& ne = *it->second;
    std::set<std::string> shared;
    const std::set<std::string> bk = param_keys(be), nk = param_keys(ne);
    std::set_intersection(bk.begin(), bk.end(), nk.begin(), nk.end(), std::inserter(shared, shared.begin()));

    ExperimentComparison ec;
    ec.name = be.spec.name;
    std::map<std::string, const Row*> next_rows;
    for (const auto& r : ne.rows) next_rows.emplace(row_key(r, shared), &r);  // a duplicate key keeps the first
    std::set<std::string> used;
    for (const auto& br : be.rows) {
      const std::string key = row_key(br, shared);
      auto nr = next_rows.find(key);
      if (nr == next_rows.end() || !used.insert(key).second) {
        ++ec.base_only;
        continue;
      }
      RowComparison rc;
      rc.variant = br.variant;
      for (const auto& p : br.point.params)
        if (shared.count(p.key)) rc.params.push_back(p);
      rc.base_status = br.status;
      rc.new_status = nr->second->status;
      rc.base_median = br.stats.median;
      rc.new_median = nr->second->stats.median;
      if (rc.base_status == RowStatus::Ok && rc.new_status == RowStatus::Ok && !br.samples.empty() &&
          !nr->second->samples.empty())
        rc.speedup = bootstrap_speedup(br.samples, nr->second->samples, seed);
      ec.rows.push_back(std::move(rc));
    }
    ec.new_only = ne.rows.size() - used.size();
    c.experiments.push_back(std::move(ec));
  }
  for (const auto& e : next.experiments)
    if (wanted(e.spec.name) && !seen.count(e.spec.name)) c.new_only.push_back(e.spec.name);
  return c;
}

std::string comparison_markdown(const Comparison& c, const std::string& base_label, const std::string& new_label) {
  std::string s = "# infer-bench compare\n\n";
  s += "- base: `" + base_label + "` — " + describe(c.base) + "\n";
  s += "- new: `" + new_label + "` — " + describe(c.next) + "\n";
  s += "- new vs base: the ratio of median times (> 1: the new run is faster), 95% bootstrap interval from both runs' "
       "raw samples; `same` when the interval covers 1\n";
  size_t faster = 0, slower = 0, same = 0, matched = 0;
  double log_sum = 0;
  for (const auto& e : c.experiments) {
    s += "\n### " + e.name + "\n\n";
    if (e.rows.empty()) {
      s += "_no row of this experiment is in both runs_\n";
    } else {
      // Parameters that vary across the compared rows get a column; the others one line above.
      const std::vector<std::string> varying = varying_keys(e);
      std::vector<std::string> constants;
      for (const auto& p : e.rows[0].params)
        if (std::find(varying.begin(), varying.end(), p.key) == varying.end())
          constants.push_back(p.key + " = " + format_value(p.value, p.type));
      if (!constants.empty()) {
        std::string line;
        for (const auto& x : constants) line += (line.empty() ? "" : " · ") + x;
        s += line + "\n\n";
      }
      s += "| variant |";
      for (const auto& k : varying) s += " " + md_escape(k) + " |";
      s += " base ms | new ms | new vs base (95% CI) | verdict |\n| --- |";
      for (size_t k = 0; k < varying.size(); ++k) s += " ---: |";
      s += " ---: | ---: | ---: | --- |\n";
      for (const auto& r : e.rows) {
        s += "| " + md_escape(r.variant) + " |";
        for (const auto& k : varying)
          for (const auto& p : r.params)
            if (p.key == k) s += " " + md_escape(format_value(p.value, p.type)) + " |";
        s += " " + cell(r.base_status, r.base_median) + " | " + cell(r.new_status, r.new_median) + " |";
        if (r.speedup) {
          s += fmt::format(" {}× [{}, {}] | {} |\n", format_number(r.speedup->ratio), format_number(r.speedup->lo),
                           format_number(r.speedup->hi), to_string(r.speedup->verdict));
          ++matched;
          log_sum += std::log(r.speedup->ratio);
          (r.speedup->verdict == Verdict::Faster ? faster : r.speedup->verdict == Verdict::Slower ? slower : same)++;
        } else {
          s += r.base_status == r.new_status ? " | |\n"
                                             : fmt::format(" | {} → {} |\n", to_string(r.base_status), to_string(r.new_status));
        }
      }
    }
    if (e.base_only || e.new_only)
      s += fmt::format("\n{} row{} only in base, {} only in new (matched by variant and the parameters both runs have)\n",
                       e.base_only, e.base_only == 1 ? "" : "s", e.new_only);
  }
  s += "\n## Summary\n\n";
  s += fmt::format("{} row{} timed in both runs: {} faster, {} slower, {} the same", matched, matched == 1 ? "" : "s", faster,
                   slower, same);
  if (matched > 0)
    s += fmt::format("; geometric mean of new vs base {}×", format_number(std::exp(log_sum / static_cast<double>(matched))));
  s += "\n";
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& x : v) out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  if (!c.base_only.empty()) s += "\nexperiments only in base: " + list(c.base_only) + "\n";
  if (!c.new_only.empty()) s += "\nexperiments only in new: " + list(c.new_only) + "\n";
  return s;
}

std::string comparison_csv(const Comparison& c) {
  std::string s = "experiment,variant,params,base_status,new_status,base_ms,new_ms,speedup,speedup_lo,speedup_hi,verdict\n";
  for (const auto& e : c.experiments)
    for (const auto& r : e.rows) {
      std::string params;
      for (const auto& p : r.params) params += (params.empty() ? "" : ";") + p.key + "=" + format_value(p.value, p.type);
      s += csv_field(e.name) + "," + csv_field(r.variant) + "," + csv_field(params) + "," + to_string(r.base_status) + "," +
           to_string(r.new_status) + ",";
      s += (r.base_status == RowStatus::Ok ? fmt::format("{}", r.base_median * 1e3) : "") + ",";
      s += (r.new_status == RowStatus::Ok ? fmt::format("{}", r.new_median * 1e3) : "") + ",";
      if (r.speedup)
        s += fmt::format("{},{},{},{}\n", r.speedup->ratio, r.speedup->lo, r.speedup->hi, to_string(r.speedup->verdict));
      else
        s += ",,,\n";
    }
  return s;
}

std::vector<std::string> slower_rows(const Comparison& c, double fraction) {
  std::vector<std::string> out;
  const double bound = 1.0 / (1.0 + fraction);
  for (const auto& e : c.experiments) {
    const std::vector<std::string> varying = varying_keys(e);
    for (const auto& r : e.rows) {
      if (!r.speedup || r.speedup->hi >= bound) continue;
      std::string params;
      for (const auto& p : r.params)
        if (std::find(varying.begin(), varying.end(), p.key) != varying.end())
          params += (params.empty() ? "" : ", ") + p.key + "=" + format_value(p.value, p.type);
      out.push_back(fmt::format("{}: {}{}: {} → {} ms, new vs base {}× [{}, {}]", e.name, r.variant,
                                params.empty() ? "" : " (" + params + ")", format_ms(r.base_median), format_ms(r.new_median),
                                format_number(r.speedup->ratio), format_number(r.speedup->lo), format_number(r.speedup->hi)));
    }
  }
  return out;
}

}  // namespace ib
