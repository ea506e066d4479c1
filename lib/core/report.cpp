// report.md: the run's metadata, the summary, then each experiment's heading, table and plots; and
// the SVG files those plots link to. The pieces are report_table, report_summary and plot.cpp.
#include "core/report.h"

#include <fmt/format.h>

#include "core/output.h"
#include "core/plot.h"
#include "core/units.h"

namespace ib {

std::string markdown_heading(const ExperimentSpec& spec, const SweepPlan& plan, Backend backend) {
  std::string s = fmt::format("### {} ({})\n\n", spec.name, spec.kind);
  if (!spec.description.empty()) s += spec.description + "\n\n";
  s += fmt::format("backend: {}{} · {}\n", to_string(backend),
                   spec.cpu_overrides_applied ? " (scaled sizes from the spec's cpu: block)" : "", describe_plan(plan));
  return s;
}

std::string plot_subtitle(const RunMeta& m) {
  return fmt::format("{} · {} backend · infer-bench {} (git {})", m.device.name, to_string(m.backend), m.version, m.git_sha);
}

std::string markdown_report(const ResultSet& rs) {
  const RunMeta& m = rs.meta;
  std::string s = "# infer-bench results\n\n";
  std::string cmd;
  for (const auto& a : m.argv) cmd += (cmd.empty() ? "" : " ") + a;
  s += "- command: `" + cmd + "`\n";
  s += fmt::format("- infer-bench {} (git {})\n", m.version, m.git_sha);
  s += fmt::format("- backend: {} — {}\n", to_string(m.backend), m.device.name);
  s += "- started: " + m.started_utc + (m.finished_utc.empty() ? " (running)" : ", finished: " + m.finished_utc) + "\n";
  if (m.ceilings.copy_bytes_per_s > 0) s += fmt::format("- peaks measured: {}\n", m.ceilings.describe());
  if (m.interrupted)
    s += "- **interrupted** (Ctrl-C, SIGTERM or a closed stdout): the rows below are complete, the rest were not run\n";
  if (!m.error.empty()) s += "- **stopped early**: " + m.error + " — the rows below are complete, the rest were not run\n";
  s += "\n" + markdown_summary(rs);
  for (const auto& e : rs.experiments) {
    s += "\n" + markdown_heading(e.spec, e.plan, m.backend);
    s += markdown_table(e, m.ceilings);
    for (const auto& f : render_plots(e, m.ceilings, plot_subtitle(m)))
      s += "\n![" + e.spec.name + ": " + f.title + "](" + f.file + ")\n";
  }
  return s;
}

std::vector<std::string> write_plots(const ResultSet& rs, const std::string& dir, std::vector<std::string>* skipped,
                                     const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : rs.experiments)
    for (const auto& f : render_plots(e, rs.meta.ceilings, plot_subtitle(rs.meta), skipped)) {
      write_file_atomic(dir + "/" + prefix + f.file, f.svg);
      names.push_back(prefix + f.file);
    }
  return names;
}

}  // namespace ib
