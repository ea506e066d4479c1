// The experiment as run, for results.json (`spec`), and its plot and summary sections both ways:
// results.json is read back by plot and compare.
#include "core/spec.h"

#include <algorithm>
#include <stdexcept>

#include "core/spec_internal.h"

namespace ib {

nlohmann::json figure_to_json(const BookFigure& f) {
  if (const double* v = std::get_if<double>(&f)) return *v;
  return std::get<std::string>(f);
}

BookFigure figure_from_json(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

namespace spec_detail {

nlohmann::json SpecParser::resolved_json(const ExperimentSpec& ex) const {
  nlohmann::json j;
  j["name"] = ex.name;
  j["kind"] = ex.kind;
  if (!ex.description.empty()) j["description"] = ex.description;
  j["variants"] = ex.variants;
  j["baseline"] = ex.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(ex.baseline);
  nlohmann::json axes = nlohmann::json::object();
  for (const auto& a : ex.axes) {
    nlohmann::json vals = nlohmann::json::array();
    for (const auto& v : a.values) vals.push_back(value_to_json(v));
    axes[a.key] = vals;
  }
  j["params"] = axes;
  nlohmann::json skip = nlohmann::json::array();
  for (const auto& r : ex.skip) {
    nlohmann::json rj = nlohmann::json::object();
    for (const auto& [k, vals] : r.conditions) {
      nlohmann::json vj = nlohmann::json::array();
      for (const auto& v : vals) vj.push_back(value_to_json(v));
      rj[k] = vj;
    }
    skip.push_back(rj);
  }
  j["skip"] = skip;
  const RunControl& c = ex.control;
  j["control"] = {
      {"warmup", c.warmup},   {"min_samples", c.min_samples}, {"min_time", c.min_time},         {"max_noise", c.max_noise},
      {"timeout", c.timeout}, {"cold_l2", c.cold_l2},         {"memory_limit", c.memory_limit}, {"seed", c.seed}};
  j["cpu_overrides_applied"] = ex.cpu_overrides_applied;
  if (!ex.book.empty()) {
    nlohmann::json b;
    b["source"] = ex.book.source;
    if (!ex.book.note.empty()) b["note"] = ex.book.note;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : ex.book.rows) {
      nlohmann::json rj = nlohmann::json::object();
      for (const auto& [k, v] : r.match) rj[k] = value_to_json(v);
      for (const auto& [k, v] : r.figures) rj[k] = figure_to_json(v);
      rows.push_back(rj);
    }
    b["rows"] = rows;
    j["book"] = b;
  }
  if (!ex.columns.empty()) j["columns"] = ex.columns;
  if (!ex.summary.empty()) j["summary"] = summary_to_json(ex.summary);
  if (!ex.plots.empty()) {
    nlohmann::json plots = nlohmann::json::array();
    for (const auto& p : ex.plots) plots.push_back(plot_to_json(p));
    j["plot"] = plots;
  }
  return j;
}

}  // namespace spec_detail

nlohmann::json plot_to_json(const PlotSpec& p) {
  nlohmann::json j = {{"x", p.x}, {"y", p.y.size() == 1 ? nlohmann::json(p.y[0]) : nlohmann::json(p.y)}};
  if (!p.book.empty()) j["book"] = p.book;
  if (p.log_x) j["log_x"] = *p.log_x;
  if (p.log_y) j["log_y"] = *p.log_y;
  if (!p.title.empty()) j["title"] = p.title;
  return j;
}

PlotSpec plot_from_json(const nlohmann::json& j) {
  PlotSpec p;
  p.x = j.at("x").get<std::string>();
  if (j.contains("y"))
    p.y =
        j.at("y").is_array() ? j.at("y").get<std::vector<std::string>>() : std::vector<std::string>{j.at("y").get<std::string>()};
  // The spec parser refuses these; a results.json edited by hand must not get further (#19).
  if (p.x.empty() || p.y.empty() || std::any_of(p.y.begin(), p.y.end(), [](const std::string& y) { return y.empty(); }))
    throw std::runtime_error("/spec/plot: a plot needs an x and at least one y, none empty");
  p.book = j.value("book", std::string());
  if (j.contains("log_x")) p.log_x = j.at("log_x").get<bool>();
  if (j.contains("log_y")) p.log_y = j.at("log_y").get<bool>();
  p.title = j.value("title", std::string());
  return p;
}

nlohmann::json summary_to_json(const SummarySpec& s) {
  return {{"claim", s.claim}, {"figure", s.figure}, {"role", s.role}, {"holds", s.holds}};
}

SummarySpec summary_from_json(const nlohmann::json& j) {
  SummarySpec s;
  s.claim = j.value("claim", std::string());
  s.figure = j.value("figure", std::string());
  s.role = j.value("role", std::string());
  s.holds = j.value("holds", std::vector<std::string>{});
  return s;
}

}  // namespace ib
