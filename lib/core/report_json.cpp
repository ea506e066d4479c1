// results.json both ways: the versioned document a run writes, and the reader plot and compare use,
// which names where (/meta, /experiments/N/rows/M) a missing or mistyped member is.
#include "core/report.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib {

namespace {

ParamType param_type_from_string(const std::string& s) {
  for (ParamType t : {ParamType::Int, ParamType::Float, ParamType::Bool, ParamType::String, ParamType::Enum, ParamType::Bytes,
                      ParamType::Seconds})
    if (s == to_string(t)) return t;
  throw std::runtime_error("unknown parameter type '" + s + "'");
}

nlohmann::json row_json(const Row& r, const Ceilings& c) {
  nlohmann::json j;
  j["variant"] = r.variant;
  if (!r.role.empty() && r.role != r.variant) j["role"] = r.role;
  j["status"] = to_string(r.status);
  j["message"] = r.message;
  j["backend"] = to_string(r.backend);
  nlohmann::json params = nlohmann::json::object();
  for (const auto& p : r.point.params) params[p.key] = value_to_json(p.value);
  j["params"] = params;
  j["baseline"] = r.is_baseline;
  j["samples_s"] = r.samples;
  j["stats_s"] = {{"n", r.stats.n},     {"median", r.stats.median}, {"mean", r.stats.mean}, {"stdev", r.stats.stdev},
                  {"min", r.stats.min}, {"max", r.stats.max},       {"p10", r.stats.p10},   {"p90", r.stats.p90}};
  j["stop_reason"] = r.stop_reason;
  if (r.validation)
    j["validation"] = {{"ok", r.validation->ok},
                       {"metric", r.validation->metric},
                       {"value", r.validation->value},
                       {"tolerance", r.validation->tolerance},
                       {"detail", r.validation->detail}};
  j["work"] = {{"flops", r.work.flops}, {"bytes", r.work.bytes}};
  if (!r.texts.empty()) {
    nlohmann::json t = nlohmann::json::object();
    for (const auto& [k, v] : r.texts) t[k] = v;
    j["texts"] = t;
  }
  Roofline rf = roofline(r, c);
  nlohmann::json d = nlohmann::json::object();
  if (rf.tflops) d["tflops"] = *rf.tflops;
  if (rf.gbps) d["gbps"] = *rf.gbps;
  if (rf.pct_gemm) d["pct_gemm_peak"] = *rf.pct_gemm;
  if (rf.pct_copy) d["pct_copy_peak"] = *rf.pct_copy;
  j["derived"] = d;
  nlohmann::json metrics = nlohmann::json::array();
  for (const auto& m : r.metrics) metrics.push_back({{"key", m.key}, {"value", m.value}, {"unit", m.unit}});
  j["metrics"] = metrics;
  if (r.speedup)
    j["speedup"] = {
        {"ratio", r.speedup->ratio}, {"lo", r.speedup->lo}, {"hi", r.speedup->hi}, {"verdict", to_string(r.speedup->verdict)}};
  nlohmann::json book = nlohmann::json::object();
  for (const auto& [k, v] : r.book) book[k] = figure_to_json(v);
  j["book"] = book;
  j["peak_memory_bytes"] = r.peak_memory;
  return j;
}

}  // namespace

nlohmann::json json_report(const ResultSet& rs) {
  const RunMeta& m = rs.meta;
  nlohmann::json j;
  j["schema"] = "infer-bench/results";
  j["schema_version"] = kResultsSchemaVersion;
  j["meta"] = {{"argv", m.argv},
               {"version", m.version},
               {"git_sha", m.git_sha},
               {"started_utc", m.started_utc},
               {"finished_utc", m.finished_utc},
               {"backend", to_string(m.backend)},
               {"device", m.device.to_json()},
               {"ceilings", m.ceilings.to_json()},
               {"spec_file", m.spec_file},
               {"interrupted", m.interrupted}};
  if (!m.error.empty()) j["meta"]["error"] = m.error;
  nlohmann::json exps = nlohmann::json::array();
  for (const auto& e : rs.experiments) {
    nlohmann::json ej;
    ej["name"] = e.spec.name;
    ej["kind"] = e.spec.kind;
    ej["spec"] = e.spec.resolved ? *e.spec.resolved : nlohmann::json();
    nlohmann::json axes = nlohmann::json::array();
    for (const auto& a : e.spec.axes) {
      nlohmann::json vals = nlohmann::json::array();
      for (const auto& v : a.values) vals.push_back(value_to_json(v));
      axes.push_back({{"key", a.key}, {"type", to_string(a.type)}, {"values", vals}});
    }
    ej["axes"] = axes;
    ej["plan"] = {{"configurations", e.plan.points.size()},
                  {"variants", e.plan.variants},
                  {"rows", e.plan.rows},
                  {"skipped", e.plan.skipped}};
    ej["interrupted"] = e.interrupted;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : e.rows) rows.push_back(row_json(r, m.ceilings));
    ej["rows"] = rows;
    exps.push_back(ej);
  }
  j["experiments"] = exps;
  return j;
}

namespace {

// The reader proper; *where follows it (the experiment and row being read) for the message of a
// missing or mistyped member.
ResultSet read_results(const nlohmann::json& j, std::string* where) {
  if (j.value("schema", std::string()) != "infer-bench/results") throw std::runtime_error("not an infer-bench results file");
  int version = j.value("schema_version", 0);
  if (version != kResultsSchemaVersion)
    throw std::runtime_error(fmt::format("results schema version {} (this build reads {})", version, kResultsSchemaVersion));
  ResultSet rs;
  *where = "/meta";
  const auto& m = j.at("meta");
  rs.meta.argv = m.at("argv").get<std::vector<std::string>>();
  rs.meta.version = m.at("version").get<std::string>();
  rs.meta.git_sha = m.at("git_sha").get<std::string>();
  rs.meta.started_utc = m.at("started_utc").get<std::string>();
  rs.meta.finished_utc = m.at("finished_utc").get<std::string>();
  auto backend_at = [](const nlohmann::json& b, const char* pointer) {
    const auto parsed = backend_from_string(b.get<std::string>());
    if (!parsed) throw std::runtime_error(fmt::format("{}: unknown backend '{}'", pointer, b.get<std::string>()));
    return *parsed;
  };
  rs.meta.backend = backend_at(m.at("backend"), "/meta/backend");
  const auto& dev = m.at("device");
  rs.meta.device.backend = backend_at(dev.at("backend"), "/meta/device/backend");
  rs.meta.device.name = dev.at("name").get<std::string>();
  for (const auto& [k, v] : dev.at("properties").items()) rs.meta.device.properties.emplace_back(k, v.get<std::string>());
  rs.meta.ceilings = Ceilings::from_json(m.at("ceilings"));
  rs.meta.spec_file = m.at("spec_file").get<std::string>();
  rs.meta.interrupted = m.at("interrupted").get<bool>();
  rs.meta.error = m.value("error", std::string());
  *where = "/experiments";
  for (const auto& ej : j.at("experiments")) {
    const std::string at_experiment = fmt::format("/experiments/{}", rs.experiments.size());
    *where = at_experiment;
    ExperimentResult e;
    e.spec.name = ej.at("name").get<std::string>();
    e.spec.kind = ej.at("kind").get<std::string>();
    e.spec.resolved = std::make_shared<const nlohmann::json>(ej.at("spec"));
    const nlohmann::json& resolved = *e.spec.resolved;
    e.spec.variants = resolved.value("variants", std::vector<std::string>{});
    if (resolved.contains("baseline") && resolved["baseline"].is_string())
      e.spec.baseline = resolved["baseline"].get<std::string>();
    e.spec.description = resolved.value("description", std::string());
    e.spec.cpu_overrides_applied = resolved.value("cpu_overrides_applied", false);
    if (resolved.contains("columns")) e.spec.columns = resolved["columns"].get<std::vector<std::string>>();
    if (resolved.contains("summary")) e.spec.summary = summary_from_json(resolved["summary"]);
    if (resolved.contains("plot"))
      for (const auto& pj : resolved.at("plot")) e.spec.plots.push_back(plot_from_json(pj));
    std::map<std::string, ParamType> types;
    for (const auto& a : ej.at("axes")) {
      Axis axis;
      axis.key = a.at("key").get<std::string>();
      axis.type = param_type_from_string(a.at("type").get<std::string>());
      for (const auto& v : a.at("values")) axis.values.push_back(value_from_json(v));
      types[axis.key] = axis.type;
      e.spec.axes.push_back(std::move(axis));
    }
    if (resolved.contains("book")) {
      const auto& bj = resolved["book"];
      e.spec.book.source = bj.value("source", std::string());
      e.spec.book.note = bj.value("note", std::string());
      for (const auto& rowj : bj.value("rows", nlohmann::json::array())) {
        BookRow br;
        for (const auto& [k, v] : rowj.items()) {
          if (k == "variant" || k == "role" || types.count(k))
            br.match.emplace_back(k, value_from_json(v));
          else
            br.figures.emplace_back(k, figure_from_json(v));
        }
        e.spec.book.rows.push_back(std::move(br));
      }
    }
    const auto& plan = ej.at("plan");
    e.plan.variants = plan.at("variants").get<size_t>();
    e.plan.rows = plan.at("rows").get<size_t>();
    e.plan.skipped = plan.at("skipped").get<size_t>();
    // The configurations are the axes' product (plan_sweep); a hand-edited count must not size
    // an allocation.
    size_t product = 1;
    for (const auto& a : e.spec.axes) product *= std::max<size_t>(1, a.values.size());
    const size_t configurations = plan.at("configurations").get<size_t>();
    if (configurations != product)
      throw std::runtime_error(fmt::format("/experiments/{}/plan/configurations: {}, but its axes make {}", rs.experiments.size(),
                                           configurations, product));
    e.plan.points.resize(configurations);
    e.interrupted = ej.at("interrupted").get<bool>();
    for (const auto& rj : ej.at("rows")) {
      *where = fmt::format("{}/rows/{}", at_experiment, e.rows.size());
      Row r;
      r.experiment = e.spec.name;
      r.kind = e.spec.kind;
      r.variant = rj.at("variant").get<std::string>();
      r.role = rj.value("role", r.variant);
      r.status = row_status_from_string(rj.at("status").get<std::string>());
      r.message = rj.at("message").get<std::string>();
      r.backend = backend_at(rj.at("backend"), "/experiments/*/rows/*/backend");
      for (const auto& a : e.spec.axes)
        if (rj.at("params").contains(a.key))
          r.point.params.push_back(Param{a.key, value_from_json(rj.at("params").at(a.key)), types[a.key]});
      r.is_baseline = rj.at("baseline").get<bool>();
      r.samples = rj.at("samples_s").get<std::vector<double>>();
      const auto& st = rj.at("stats_s");
      r.stats.n = st.at("n").get<size_t>();
      r.stats.median = st.at("median").get<double>();
      r.stats.mean = st.at("mean").get<double>();
      r.stats.stdev = st.at("stdev").get<double>();
      r.stats.min = st.at("min").get<double>();
      r.stats.max = st.at("max").get<double>();
      r.stats.p10 = st.at("p10").get<double>();
      r.stats.p90 = st.at("p90").get<double>();
      r.stop_reason = rj.at("stop_reason").get<std::string>();
      if (rj.contains("validation")) {
        const auto& v = rj["validation"];
        r.validation = Validation{v.at("ok").get<bool>(), v.at("metric").get<std::string>(), v.at("value").get<double>(),
                                  v.at("tolerance").get<double>(), v.at("detail").get<std::string>()};
      }
      if (rj.contains("texts") && rj["texts"].is_object())
        for (auto it = rj["texts"].begin(); it != rj["texts"].end(); ++it)
          if (it.value().is_string()) r.texts.emplace_back(it.key(), it.value().get<std::string>());
      r.work.flops = rj.at("work").at("flops").get<double>();
      r.work.bytes = rj.at("work").at("bytes").get<double>();
      for (const auto& mj : rj.at("metrics"))
        r.metrics.push_back(
            Metric{mj.at("key").get<std::string>(), mj.at("value").get<double>(), mj.at("unit").get<std::string>()});
      if (rj.contains("speedup")) {
        const auto& s = rj["speedup"];
        Speedup sp;
        sp.ratio = s.at("ratio").get<double>();
        sp.lo = s.at("lo").get<double>();
        sp.hi = s.at("hi").get<double>();
        std::string v = s.at("verdict").get<std::string>();
        sp.verdict = v == "faster" ? Verdict::Faster : v == "slower" ? Verdict::Slower : Verdict::Same;
        r.speedup = sp;
      }
      for (const auto& [k, v] : rj.at("book").items()) r.book.emplace_back(k, figure_from_json(v));
      r.peak_memory = rj.at("peak_memory_bytes").get<int64_t>();
      e.rows.push_back(std::move(r));
    }
    rs.experiments.push_back(std::move(e));
  }
  return rs;
}

}  // namespace

ResultSet results_from_json(const nlohmann::json& j) {
  std::string where;
  try {
    return read_results(j, &where);
  } catch (const nlohmann::json::exception& e) {  // a member missing or of another type
    throw std::runtime_error(fmt::format("{}: {}", where.empty() ? "/" : where, e.what()));
  }
}

}  // namespace ib
