#include "core/session.h"

#include <sys/stat.h>

#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "core/build_info.h"
#include "core/ceilings.h"
#include "core/compare.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/json_input.h"
#include "core/nvtx.h"
#include "core/output.h"
#include "core/plot.h"
#include "core/registry.h"
#include "core/report.h"
#include "core/runner.h"
#include "core/sysinfo.h"
#include "core/units.h"

namespace ib {

namespace {

// Set when stdout's reader is gone (`infer-bench run … | head`): SIGPIPE is ignored (main), the
// write fails with EPIPE, and the run stops after its current row as on Ctrl-C, its files complete.
bool g_stdout_closed = false;

void out(const std::string& s) {
  if (g_stdout_closed) return;
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size() || std::fflush(stdout) != 0) {
    if (errno == EPIPE) {
      g_stdout_closed = true;
      request_interrupt();
    }
  }
}

class Notes {
 public:
  explicit Notes(bool quiet) : quiet_(quiet) {}
  void say(const std::string& s) const {
    if (!quiet_) std::fprintf(stderr, "infer-bench: %s\n", s.c_str());
  }

 private:
  bool quiet_;
};

// One line on stderr, rewritten in place; only on a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ~ProgressLine() { clear(); }
  void show(const std::string& s) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K%s", s.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  void clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool enabled_;
  bool shown_ = false;
};

void check_format(const std::string& f) {
  if (f != "md" && f != "csv" && f != "json") throw InputError("--format '" + f + "': expected md, csv or json");
}

Spec load_selected(const std::string& path, const SessionOptions& o, Backend backend) {
  SpecOptions so;
  so.backend = backend;
  so.sets = o.sets;
  so.overrides = o.overrides;
  so.max_rows = o.max_rows;
  Spec spec = load_spec(path, so);
  if (!o.only.empty()) {
    std::vector<std::string> names;
    for (const auto& e : spec.experiments) names.push_back(e.name);
    std::vector<ExperimentSpec> kept;
    for (const auto& want : o.only) {
      bool found = false;
      for (const auto& e : kept) found = found || e.name == want;  // named twice: run once
      if (found) continue;
      for (const auto& e : spec.experiments)
        if (e.name == want) {
          kept.push_back(e);
          found = true;
        }
      if (!found) throw InputError("--only " + want + ": no such experiment in " + path + did_you_mean(want, names));
    }
    spec.experiments = kept;
  }
  return spec;
}

std::string file_stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  auto dot = base.find_last_of('.');
  return dot == std::string::npos ? base : base.substr(0, dot);
}

class SessionObserver : public RunObserver {
 public:
  SessionObserver(ResultSet& rs, std::string dir, const SessionOptions& o)
      : rs_(rs), dir_(std::move(dir)), markdown_(o.format == "md"), progress_(!o.quiet && isatty(2)) {
    table_.compact = true;
    table_.columns = o.columns;
  }

  void experiment_started(const ExperimentSpec& spec, const SweepPlan& plan) override {
    if (markdown_) out("\n" + markdown_heading(spec, plan, rs_.meta.backend));
    ExperimentResult e;
    e.spec = spec;
    e.plan = plan;
    rs_.experiments.push_back(std::move(e));
    write();
  }
  void row_started(const ExperimentSpec& spec, size_t index, size_t total, const std::string& label) override {
    progress_.show(fmt::format("[{}/{}] {}: {}", index + 1, total, spec.name, label));
  }
  void row_finished(const ExperimentResult& result, const Row&) override {
    rs_.experiments.back() = result;
    write();
  }
  void experiment_finished(const ExperimentResult& result) override {
    progress_.clear();
    rs_.experiments.back() = result;
    if (markdown_) out(markdown_table(result, rs_.meta.ceilings, table_));
    write();
  }
  void write() const {
    write_file_atomic(dir_ + "/results.json",
                      json_report(rs_).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    write_file_atomic(dir_ + "/results.csv", csv_report(rs_));
    write_file_atomic(dir_ + "/report.md", markdown_report(rs_));
    write_plots(rs_, dir_);
  }

 private:
  ResultSet& rs_;
  std::string dir_;
  bool markdown_;
  ProgressLine progress_;
  TableOptions table_;  // stdout's: the spec's columns, fitted to a terminal
};

RunMeta make_meta(const SessionOptions& o, Backend backend, const std::string& spec_file) {
  RunMeta m;
  m.argv = o.argv;
  m.version = build_version();
  m.git_sha = build_git_sha();
  m.started_utc = utc_stamp_iso();
  m.backend = backend;
  m.device = describe(backend);
  m.spec_file = spec_file;
  return m;
}

}  // namespace

namespace {

// The run proper, into a created run directory.
int run_into_dir(const std::string& path, const SessionOptions& o, Backend backend, const Spec& spec, const std::string& dir) {
  Notes notes(o.quiet);
  auto rt = make_runtime(backend);
  ResultSet rs;
  rs.meta = make_meta(o, backend, path);
  size_t rows = 0;
  for (const auto& e : spec.experiments) rows += plan_sweep(e).rows;
  notes.say(fmt::format("{} experiment{} ({} rows) from {} on the {} backend ({}){}", spec.experiments.size(),
                        spec.experiments.size() == 1 ? "" : "s", rows, path, to_string(backend), rs.meta.device.name,
                        backend == Backend::Cpu && !cuda_unavailable_reason().empty()
                            ? " — " + cuda_unavailable_reason() + "; the CPU backend runs the spec's scaled sizes"
                            : ""));
  install_interrupt_handler();
  // The peaks cost seconds (many under a sanitizer) and only roofline columns use them.
  const bool roofline = std::any_of(spec.experiments.begin(), spec.experiments.end(), [](const ExperimentSpec& e) {
    const KindInfo* kind = Registry::instance().kind(e.kind);
    return kind && kind->roofline;
  });
  if (roofline) {
    notes.say("measuring the peaks (copy, GEMM) for the roofline columns");
    rs.meta.ceilings = measure_ceilings(*rt);
  }
  if (o.format == "md")
    out(fmt::format("## infer-bench {} — {} ({} backend)\n\npeaks: {}\n", file_stem(path), rs.meta.device.name,
                    to_string(backend),
                    roofline ? rs.meta.ceilings.describe() : "not measured (no experiment here counts bytes or FLOPs)"));

  SessionObserver observer(rs, dir, o);
  RunnerOptions ro;
  ro.profile = o.profile;
  Runner runner(*rt, ro, &observer);
  bool failed = false;
  try {
    for (const auto& e : spec.experiments) {
      if (interrupted()) break;
      ExperimentResult r = runner.run(e);
      for (const auto& row : r.rows) failed = failed || row.status == RowStatus::Failed;
    }
  } catch (const InputError& e) {
    // Bad input only a variant could see. Before any row it is as a spec error (nothing stays);
    // after some, their files stay complete and say why the run stopped.
    size_t measured = 0;
    for (const auto& x : rs.experiments) measured += x.rows.size();
    if (measured == 0) throw;
    rs.meta.error = e.what();
    rs.meta.finished_utc = utc_stamp_iso();
    observer.write();
    std::fprintf(stderr, "infer-bench: %s; the run stopped: the %zu row%s measured before it are in %s/\n",
                 one_line(e.what()).c_str(), measured, measured == 1 ? "" : "s", dir.c_str());
    return 2;
  }
  rs.meta.interrupted = interrupted();
  rs.meta.finished_utc = utc_stamp_iso();
  observer.write();
  // Last, where the terminal leaves it: one line per experiment, the chapter's claim beside the measured figure.
  if (o.format == "md") out("\n" + markdown_summary(rs));
  if (o.format == "csv") out(csv_report(rs));
  if (o.format == "json") out(json_report(rs).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  std::vector<std::string> skipped;
  std::vector<std::string> plots = write_plots(rs, dir, &skipped);
  for (const auto& line : skipped) notes.say(line);
  std::string files = "results.json, results.csv, report.md";
  for (const auto& p : plots) files += ", " + p;
  notes.say("results in " + dir + "/ (" + files + ")");
  if (rs.meta.interrupted) {
    std::fprintf(
        stderr, "infer-bench: %s: the rows measured so far are in %s/\n",
        g_stdout_closed ? "stdout was closed (the reader of the pipe exited), so the run stopped as on Ctrl-C" : "interrupted",
        dir.c_str());
    return 130;
  }
  return failed ? 1 : 0;
}

}  // namespace

int run_spec_file(const std::string& path, const SessionOptions& o) {
  check_format(o.format);
  const Backend backend = resolve_backend(o.backend);
  Spec spec = load_selected(path, o, backend);
  // Everything the user gave is valid from here on: only now is anything written.
  const std::string label = spec.experiments.size() == 1 ? spec.experiments[0].name : file_stem(path);
  const std::string dir = choose_run_dir(o.output, label);
  const std::vector<std::string> created = create_run_dir(dir);
  std::optional<RunDirLock> lock;
  try {
    lock.emplace(dir);
  } catch (const InputError&) {
    remove_created_dirs(created);  // only where empty: never another run's files
    throw;
  }
  try {
    return run_into_dir(path, o, backend, spec, dir);
  } catch (const OutputError& e) {
    // The files hold every row up to the last write that went through (temporary + rename).
    throw OutputError(std::string(e.what()) + "; the results written before it are in " + dir + "/");
  } catch (const InputError&) {
    // Bad input that only a variant could see (a checkpoint's tensors, a limit across keys): exit 2
    // leaves no run behind, as a spec error does.
    std::vector<std::string> plots;
    for (const auto& e : spec.experiments)
      for (const auto& f : plot_file_names(e)) plots.push_back(f);
    remove_run_output(dir, created, plots);
    throw;
  }
}

int list_spec_file(const std::string& path, const SessionOptions& o) {
  const Backend backend = resolve_backend(o.backend);
  Spec spec = load_selected(path, o, backend);
  size_t total = 0;
  std::string s = fmt::format("## {} — {} experiment{} for the {} backend\n", path, spec.experiments.size(),
                              spec.experiments.size() == 1 ? "" : "s", to_string(backend));
  if (!spec.description.empty()) s += "\n" + spec.description + "\n";
  for (const auto& e : spec.experiments) {
    SweepPlan plan = plan_sweep(e);
    total += plan.rows;
    s += "\n" + markdown_heading(e, plan, backend);
    std::string variants;
    for (const auto& v : e.variants) variants += (variants.empty() ? "" : ", ") + v;
    s += fmt::format("variants: {} · baseline: {}\n", variants, e.baseline.empty() ? "none" : e.baseline);
    std::string constants;
    for (const auto& a : e.axes)
      if (a.values.size() == 1) constants += (constants.empty() ? "" : " · ") + a.key + " = " + format_value(a.values[0], a.type);
    if (!constants.empty()) s += constants + "\n";
    s += "\n| # | variant | config | NVTX range |\n|---:|---|---|---|\n";
    std::vector<std::string> order;
    if (!e.baseline.empty()) order.push_back(e.baseline);
    for (const auto& v : e.variants)
      if (v != e.baseline) order.push_back(v);
    size_t i = 0;
    for (const auto& p : plan.points)
      for (const auto& v : order) {
        if (is_skipped(e, p, v)) continue;
        s += fmt::format("| {} | {} | {} | `{}` |\n", ++i, v, config_label(e, p), row_range_name(e, v, p));
      }
  }
  s += fmt::format("\n{} rows in all\n", total);
  out(s);
  return 0;
}

namespace {

// A results.json written by `run` (or a curated copy); InputError naming the file otherwise.
ResultSet load_results(const std::string& path) {
  const std::string text = read_input_file(path, uint64_t{1} << 30);
  try {
    return results_from_json(parse_json_bounded(text, path));
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.size() > 160) what = what.substr(0, 160) + "...";
    throw InputError(path + ": not a results.json of infer-bench: " + what);
  }
}

}  // namespace

int compare_results_files(const std::string& base_path, const std::string& new_path, const CompareFileOptions& o) {
  if (o.format != "md" && o.format != "csv") throw InputError("--format '" + o.format + "': expected md or csv");
  double fail = 0;
  if (!o.fail_slower.empty()) {
    const std::optional<double> v = parse_fraction(o.fail_slower);
    if (!v || *v < 0 || *v > 10) throw InputError("--fail-slower '" + o.fail_slower + "': expected a fraction like 0.05 or 5%");
    fail = *v;
  }
  const ResultSet base = load_results(base_path);
  const ResultSet next = load_results(new_path);
  for (const auto& name : o.only) {
    bool found = false;
    for (const auto& e : base.experiments) found = found || e.spec.name == name;
    for (const auto& e : next.experiments) found = found || e.spec.name == name;
    if (!found) throw InputError("--only " + name + ": neither " + base_path + " nor " + new_path + " has this experiment");
  }
  const Comparison c = compare_results(base, next, o.only);
  std::fputs((o.format == "csv" ? comparison_csv(c) : comparison_markdown(c, base_path, new_path)).c_str(), stdout);
  if (o.fail_slower.empty()) return 0;
  const std::vector<std::string> slow = slower_rows(c, fail);
  for (const auto& line : slow) std::fprintf(stderr, "infer-bench: slower: %s\n", line.c_str());
  return slow.empty() ? 0 : 1;
}

int plot_results_file(const std::string& results_path, const std::string& spec_path, const std::string& out_dir,
                      const std::string& prefix, bool quiet) {
  Notes notes(quiet);
  for (char c : prefix)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      throw InputError("--prefix '" + prefix + "': letters, digits, '-', '_' and '.' only");
  ResultSet rs = load_results(results_path);
  if (!spec_path.empty()) {
    SpecOptions so;
    so.backend = rs.meta.backend;
    const Spec spec = load_spec(spec_path, so);
    size_t matched = 0;
    for (auto& e : rs.experiments)
      for (const auto& se : spec.experiments)
        if (se.name == e.spec.name) {
          e.spec.plots = se.plots;
          ++matched;
        }
    if (matched == 0) throw InputError(spec_path + ": no experiment of " + results_path + " is in this spec (matched by name)");
  }
  size_t declared = 0;
  for (const auto& e : rs.experiments) declared += e.spec.plots.size();
  if (declared == 0)
    throw InputError(results_path + ": no experiment declares a plot (add plot: blocks to the spec and pass it with --spec)");
  std::string dir = out_dir;
  if (dir.empty()) {
    const size_t slash = results_path.rfind('/');
    dir = slash == std::string::npos ? "." : results_path.substr(0, slash == 0 ? 1 : slash);
  }
  create_run_dir(dir);
  std::vector<std::string> skipped;
  const std::vector<std::string> files = write_plots(rs, dir, &skipped, prefix);
  for (const auto& line : skipped) notes.say(line);
  for (const auto& f : files) std::printf("%s/%s\n", dir.c_str(), f.c_str());
  if (files.empty())
    throw InputError(results_path + ": none of the " + std::to_string(declared) + " declared plots has data to draw");
  return 0;
}

int show_info(const SessionOptions& o) {
  check_format(o.format);
  const Backend backend = resolve_backend(o.backend);
  DeviceInfo d = describe(backend);
  std::string s = fmt::format("## {} ({} backend)\n\n| property | value |\n|---|---|\n", d.name, to_string(backend));
  for (const auto& [k, v] : d.properties) s += fmt::format("| {} | {} |\n", k, v);
  s += fmt::format("| infer-bench | {} (git {}), CUDA backend {}, NVTX {} |\n", build_version(), build_git_sha(),
                   build_has_cuda() ? "built" : "not built", nvtx_enabled() ? "on" : "off (no-op shim)");
  if (backend == Backend::Cpu && build_has_cuda()) s += fmt::format("| GPU | {} |\n", cuda_unavailable_reason());
  out(s);

  auto rt = make_runtime(backend);
  Spec spec = ceiling_spec(backend, false, o.overrides);
  install_interrupt_handler();
  Runner runner(*rt, RunnerOptions{});
  std::vector<ExperimentResult> results;
  for (const auto& e : spec.experiments) {
    if (interrupted()) break;
    results.push_back(runner.run(e));
    TableOptions compact;
    compact.compact = true;
    compact.columns = o.columns;
    out("\n" + markdown_heading(e, results.back().plan, backend) + markdown_table(results.back(), Ceilings{}, compact));
  }
  Ceilings c = ceilings_from_results(results);
  out(fmt::format("\nceilings: {}\n", c.describe()));
  bool failed = false;
  for (const auto& r : results)
    for (const auto& row : r.rows) failed = failed || row.status == RowStatus::Failed;
  return interrupted() ? 130 : failed ? 1 : 0;
}

}  // namespace ib
