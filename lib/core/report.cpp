#include "core/report.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <tuple>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "core/output.h"
#include "core/plot.h"
#include "core/units.h"

namespace ib {

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

namespace {

std::string ms(double seconds) { return format_number(seconds * 1e3); }

// Column order of the Markdown table, whatever order rows contribute their cells in.
enum Rank { kVariant, kParam, kTime, kTflops, kPctGemm, kGbps, kPctCopy, kMetric, kPeakMem, kSpeedup, kVerdict,
            kBook, kCheck, kSamples, kStop, kNote };

struct Cell {
  std::string header;
  std::string text;
  Rank rank;       // parameter columns (kParam) fold into the constants line when constant
  std::string id;  // what --columns and a spec's `columns:` name it by (ms, speedup, book_ms, a metric's key, ...)
};

std::string status_text(const Row& r) {
  switch (r.status) {
    case RowStatus::Ok: return "";
    case RowStatus::Oom: return "OOM";
    case RowStatus::Failed: return "FAILED";
    case RowStatus::Unsupported: return "unsupported";
  }
  return "";
}

std::string figure_text(const nlohmann::json& v) {
  if (v.is_number()) return format_number(v.get<double>());
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

std::string speedup_text(const Speedup& s) {
  return fmt::format("{}× [{}, {}]", format_number(s.ratio), format_number(s.lo), format_number(s.hi));
}

std::vector<Cell> row_cells(const Row& r, const Ceilings& c) {
  std::vector<Cell> cells;
  cells.push_back({"variant", r.variant, kVariant, "variant"});
  for (const auto& p : r.point.params) cells.push_back({p.key, format_value(p.value, p.type), kParam, p.key});
  if (r.status == RowStatus::Ok) cells.push_back({"ms", ms(r.stats.median) + " ± " + ms(r.stats.stdev), kTime, "ms"});
  else cells.push_back({"ms", status_text(r), kTime, "ms"});
  Roofline rf = roofline(r, c);
  if (rf.tflops) cells.push_back({"TFLOP/s", format_number(*rf.tflops), kTflops, "tflops"});
  if (rf.pct_gemm) cells.push_back({"% GEMM peak", format_number(*rf.pct_gemm), kPctGemm, "pct_gemm"});
  if (rf.gbps) cells.push_back({"GB/s", format_number(*rf.gbps), kGbps, "gbps"});
  if (rf.pct_copy) cells.push_back({"% copy peak", format_number(*rf.pct_copy), kPctCopy, "pct_copy"});
  for (const auto& m : r.metrics)
    cells.push_back({m.unit.empty() ? m.key : m.key + " (" + m.unit + ")", format_number(m.value), kMetric, m.key});
  if (r.peak_memory > 0 && r.status != RowStatus::Unsupported)
    cells.push_back({"peak mem", format_bytes(static_cast<double>(r.peak_memory)), kPeakMem, "peak_mem"});
  if (r.is_baseline) {
    cells.push_back({"speedup (95% CI)", "baseline", kSpeedup, "speedup"});
  } else if (r.speedup) {
    cells.push_back({"speedup (95% CI)", speedup_text(*r.speedup), kSpeedup, "speedup"});
    cells.push_back({"verdict", to_string(r.speedup->verdict), kVerdict, "verdict"});
  }
  for (const auto& [k, v] : r.book) cells.push_back({"book " + k, figure_text(v), kBook, "book_" + k});
  if (r.validation)
    cells.push_back({"check", fmt::format("{} {} {}", r.validation->ok ? "ok" : "FAILED", r.validation->metric,
                                          format_number(r.validation->value)),
                     kCheck, "check"});
  if (r.status == RowStatus::Ok) {
    cells.push_back({"samples", std::to_string(r.stats.n), kSamples, "samples"});
    cells.push_back({"stop", r.stop_reason, kStop, "stop"});
  }
  if (!r.message.empty()) cells.push_back({"note", r.message, kNote, "note"});
  return cells;
}

const std::string& role_of(const Row& r) { return r.role.empty() ? r.variant : r.role; }

// The book rows no row of the result matches (a role no variant of this backend plays, or a point
// the sweep does not hold): each becomes a "(chapter)" row of the table with nothing measured in it.
std::vector<std::vector<Cell>> chapter_only_cells(const ExperimentResult& result) {
  std::vector<std::vector<Cell>> out;
  if (result.interrupted) return out;  // rows not run yet are not "not measured here"
  for (const auto& br : result.spec.book.rows) {
    bool matched = false;
    for (const auto& r : result.rows) matched = matched || book_row_matches(br, r.point, r.variant, role_of(r));
    if (matched) continue;
    std::vector<Cell> cells;
    std::string who = "chapter";
    for (const auto& [k, v] : br.match)
      if (k == "role" || k == "variant") who = std::get<std::string>(v) + " (chapter)";
    cells.push_back({"variant", who, kVariant, "variant"});
    for (const auto& [k, v] : br.match) {
      if (k == "role" || k == "variant") continue;
      ParamType t = ParamType::String;
      for (const auto& a : result.spec.axes)
        if (a.key == k) t = a.type;
      cells.push_back({k, format_value(v, t), kParam, k});
    }
    cells.push_back({"ms", "—", kTime, "ms"});
    for (const auto& [k, v] : br.figures) cells.push_back({"book " + k, figure_text(v), kBook, "book_" + k});
    out.push_back(std::move(cells));
  }
  return out;
}

// Characters a terminal shows for UTF-8 text (every character here is one column wide).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `width` characters of s, the last one an ellipsis when s was longer.
std::string shorten(const std::string& s, size_t width) {
  if (display_width(s) <= width || width == 0) return s;
  std::string out;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) {
      if (n + 1 == width) break;
      ++n;
    }
    out += s[i];
  }
  return out + "…";
}

bool column_requested(const std::vector<std::string>& wanted, const std::string& id, const std::string& header) {
  for (const auto& w : wanted)
    if (w == id || w == header || (w == "book" && id.rfind("book_", 0) == 0)) return true;
  return false;
}

const std::vector<std::string> kDefaultColumns = {"ms", "tflops", "gbps", "speedup", "book", "check", "note"};

// A constants line longer than a terminal, broken at its separators.
std::string wrap_dotted(const std::vector<std::string>& items, size_t width) {
  std::string out, line;
  for (const auto& it : items) {
    if (!line.empty() && display_width(line) + 3 + display_width(it) > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " · ") + it;
  }
  return out + line;
}

}  // namespace

std::string markdown_heading(const ExperimentSpec& spec, const SweepPlan& plan, Backend backend) {
  std::string s = fmt::format("### {} ({})\n\n", spec.name, spec.kind);
  if (!spec.description.empty()) s += spec.description + "\n\n";
  s += fmt::format("backend: {}{} · {}\n", to_string(backend),
                   spec.cpu_overrides_applied ? " (scaled sizes from the spec's cpu: block)" : "", describe_plan(plan));
  return s;
}

std::string markdown_table(const ExperimentResult& result, const Ceilings& ceilings, const TableOptions& options) {
  std::string out;
  if (result.rows.empty()) {
    out += "\n_no rows were run_" + std::string(result.interrupted ? " (interrupted)" : "") + "\n";
    return out;
  }
  std::vector<std::vector<Cell>> rows;
  for (const auto& r : result.rows) rows.push_back(row_cells(r, ceilings));
  const size_t measured = rows.size();
  for (auto& cells : chapter_only_cells(result)) rows.push_back(std::move(cells));

  std::vector<std::tuple<Rank, std::string, std::string>> headers;  // rank, header, id; first-seen order within a rank
  std::set<std::string> seen;
  for (const auto& cells : rows)
    for (const auto& c : cells)
      if (seen.insert(c.header).second) headers.emplace_back(c.rank, c.header, c.id);
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  auto text_of = [](const std::vector<Cell>& cells, const std::string& h) -> std::string {
    for (const auto& c : cells)
      if (c.header == h) return c.text;
    return "";
  };

  // Which columns: every one (report.md, --columns all), else the requested ones; variant and
  // the varying params always. Params constant over the measured rows (and the chapter's rows
  // that name them) fold into the line above the table.
  if (options.compact && options.columns.size() == 1 && options.columns[0] == "all") {
    TableOptions full;  // --columns all: report.md's table, every column as it is
    return markdown_table(result, ceilings, full);
  }
  const bool all = !options.compact;
  const std::vector<std::string>& wanted =
      !options.columns.empty() ? options.columns : !result.spec.columns.empty() ? result.spec.columns : kDefaultColumns;
  std::vector<std::string> shown, constants;
  std::vector<bool> requested;  // per shown column: named by the request (fitting drops the others first)
  size_t hidden = 0;
  for (const auto& [rank, h, id] : headers) {
    bool constant = true;
    const std::string first = text_of(rows[0], h);
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string t = text_of(rows[i], h);
      if (i < measured || !t.empty()) constant = constant && t == first;
    }
    if (rank == kParam && constant) {
      // A value with line breaks (a text prompt) stays on its line: ⏎ marks them.
      std::string value;
      for (char ch : first) value += ch == '\n' ? std::string("⏎") : std::string(1, ch);
      constants.push_back(h + " = " + value);
    } else if (all || rank == kVariant || rank == kParam || column_requested(wanted, id, h)) {
      shown.push_back(h);
      requested.push_back(all || rank == kVariant || rank == kParam || column_requested(wanted, id, h));
    } else {
      ++hidden;
    }
  }

  std::vector<std::vector<std::string>> grid;  // the shown cells, row by row
  for (const auto& cells : rows) {
    std::vector<std::string> line;
    for (const auto& h : shown) line.push_back(md_escape(text_of(cells, h)));
    grid.push_back(std::move(line));
  }
  // Text reads from the left, numbers from the right: a parameter column of names (models,
  // constraints) is text.
  std::set<std::string> text_params;
  for (const auto& [rank, h, id] : headers)
    if (rank == kParam)
      for (const auto& cells : rows) {
        const std::string t = text_of(cells, h);
        if (!t.empty() && std::isalpha(static_cast<unsigned char>(t[0]))) text_params.insert(h);
      }
  auto is_left = [&](const std::string& h) {
    return h == "variant" || h == "note" || h == "stop" || h == "check" || (options.compact && text_params.count(h));
  };
  auto widths = [&]() {
    std::vector<size_t> w;
    for (size_t j = 0; j < shown.size(); ++j) {
      size_t m = std::max<size_t>(3, display_width(md_escape(shown[j])));
      for (const auto& line : grid) m = std::max(m, display_width(line[j]));
      w.push_back(m);
    }
    return w;
  };
  auto total = [&](const std::vector<size_t>& w) {
    size_t t = 1;
    for (size_t x : w) t += x + 3;
    return t;
  };
  auto drop = [&](size_t j) {
    shown.erase(shown.begin() + static_cast<std::ptrdiff_t>(j));
    requested.erase(requested.begin() + static_cast<std::ptrdiff_t>(j));
    for (auto& line : grid) line.erase(line.begin() + static_cast<std::ptrdiff_t>(j));
    ++hidden;
  };
  if (options.compact && options.max_width > 0 && !all) {
    // Fit: first the columns nobody asked for, right to left, until the table fits the target
    // width; then, past the hard limit, the asked-for ones (never variant, the varying params,
    // ms or the chapter's figures); last, long cells are shortened (report.md has them whole).
    auto droppable = [&](size_t j, bool asked) {
      const std::string& h = shown[j];
      if (requested[j] != asked || h == "variant" || h == "ms" || h.rfind("book ", 0) == 0) return false;
      for (const auto& [rank, hh, id] : headers)
        if (hh == h && rank == kParam) return false;
      return true;
    };
    auto shorten_to = [&](std::initializer_list<size_t> caps) {
      for (size_t cap : caps) {
        if (total(widths()) <= options.max_width) break;
        for (auto& line : grid)
          for (size_t j = 0; j < line.size(); ++j)
            if (shown[j] != "variant") line[j] = shorten(line[j], cap);
      }
    };
    const size_t target = std::min(options.max_width, options.target_width);
    for (size_t j = shown.size(); j-- > 0 && total(widths()) > target;)
      if (droppable(j, false)) drop(j);
    shorten_to({48, 32, 24});
    for (size_t j = shown.size(); j-- > 0 && total(widths()) > options.max_width;)
      if (droppable(j, true)) drop(j);
    shorten_to({16, 12});
  }

  out += "\n";
  if (!constants.empty()) out += (options.compact ? wrap_dotted(constants, 120) : [&] {
    std::string line;
    for (const auto& c : constants) line += (line.empty() ? "" : " · ") + c;
    return line;
  }()) + "\n\n";
  const std::vector<size_t> w = options.compact ? widths() : std::vector<size_t>(shown.size(), 0);
  auto pad = [&](const std::string& t, size_t j, bool right) {
    const size_t n = display_width(t);
    if (!options.compact || n >= w[j]) return t;
    return right ? std::string(w[j] - n, ' ') + t : t + std::string(w[j] - n, ' ');
  };
  out += "|";
  for (size_t j = 0; j < shown.size(); ++j) out += " " + pad(md_escape(shown[j]), j, false) + " |";
  out += "\n|";
  for (size_t j = 0; j < shown.size(); ++j) {
    const size_t n = options.compact ? w[j] : 4;
    out += is_left(shown[j]) ? " " + std::string(options.compact ? n : 3, '-') + " |" : " " + std::string(n - 1, '-') + ": |";
  }
  out += "\n";
  for (const auto& line : grid) {
    out += "|";
    for (size_t j = 0; j < shown.size(); ++j) out += " " + pad(line[j], j, !is_left(shown[j])) + " |";
    out += "\n";
  }
  if (options.compact && hidden > 0)
    out += fmt::format("\n+{} column{} in report.md, CSV and JSON (`--columns all` shows them)\n", hidden, hidden == 1 ? "" : "s");
  if (rows.size() > measured)
    out += "\n(chapter) rows: the chapter's figures at a role or point this run does not measure; nothing measured in them\n";
  if (!result.spec.book.empty()) {
    out += "\nbook: " + result.spec.book.source + (result.spec.book.note.empty() ? "" : " — " + result.spec.book.note) + "\n";
    if (result.spec.cpu_overrides_applied)
      out += "book = the chapter's hardware at full size; measured = this machine with the spec's cpu: block: a shape, not a race\n";
  }
  if (result.interrupted)
    out += fmt::format("\n_interrupted: {} of {} rows measured; the rows above are complete_\n", result.rows.size(),
                       result.plan.rows);
  return out;
}

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
      const Param* p = r.point.find(key);
      if (!v || !p || !in_summary(e, r)) continue;
      double x = 0;
      if (const auto* i = std::get_if<int64_t>(&p->value)) x = static_cast<double>(*i);
      else if (const auto* d = std::get_if<double>(&p->value)) x = *d;
      else continue;
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
      for (size_t i = 1; i < pts.size(); ++i) mono = mono && (grows ? pts[i].second > pts[i - 1].second : pts[i].second < pts[i - 1].second);
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
  if (failed && !s.holds.empty()) line += fmt::format(" · shape not judged ({} row{} FAILED)", failed, failed == 1 ? "" : "s");
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
  if (m.ceilings.copy_bytes_per_s > 0)
    s += fmt::format("- peaks measured: copy {} GB/s ({}), GEMM {} TFLOP/s ({})\n",
                     format_number(m.ceilings.copy_bytes_per_s / 1e9), m.ceilings.copy_label,
                     format_number(m.ceilings.gemm_flops_per_s / 1e12), m.ceilings.gemm_label);
  if (m.interrupted) s += "- **interrupted** (Ctrl-C, SIGTERM or a closed stdout): the rows below are complete, the rest were not run\n";
  if (!m.error.empty()) s += "- **stopped early**: " + m.error + " — the rows below are complete, the rest were not run\n";
  s += "\n" + markdown_summary(rs);
  for (const auto& e : rs.experiments) {
    s += "\n" + markdown_heading(e.spec, e.plan, m.backend);
    s += markdown_table(e, m.ceilings);
    for (const auto& f : render_plots(e, m.ceilings, plot_subtitle(m))) s += "\n![" + e.spec.name + ": " + f.title + "](" + f.file + ")\n";
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

std::string csv_field(const std::string& s) {
  bool quote = s.find_first_of(",\"\r\n") != std::string::npos;
  if (!quote) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += "\"\"";
    else out += c;
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
  for (const char* h : {"samples", "median_ms", "mean_ms", "stdev_ms", "min_ms", "p10_ms", "p90_ms", "stop_reason",
                        "work_flops", "work_bytes", "tflops", "gbps", "pct_gemm_peak", "pct_copy_peak",
                        "peak_memory_bytes", "speedup", "speedup_lo", "speedup_hi", "verdict", "check_metric",
                        "check_value", "check_tolerance"})
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
        const Param* q = r.point.find(p);
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
          if (x.first == b) v = x.second.is_string() ? x.second.get<std::string>() : x.second.is_number() ? num(x.second.get<double>()) : x.second.dump();
        f.push_back(v);
      }
      f.push_back(r.message);
      emit(f);
    }
  return out;
}

namespace {

ParamType param_type_from_string(const std::string& s) {
  for (ParamType t : {ParamType::Int, ParamType::Float, ParamType::Bool, ParamType::String, ParamType::Enum,
                      ParamType::Bytes, ParamType::Seconds})
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
  j["stats_s"] = {{"n", r.stats.n},         {"median", r.stats.median}, {"mean", r.stats.mean},
                  {"stdev", r.stats.stdev}, {"min", r.stats.min},       {"max", r.stats.max},
                  {"p10", r.stats.p10},     {"p90", r.stats.p90}};
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
    j["speedup"] = {{"ratio", r.speedup->ratio},
                    {"lo", r.speedup->lo},
                    {"hi", r.speedup->hi},
                    {"verdict", to_string(r.speedup->verdict)}};
  nlohmann::json book = nlohmann::json::object();
  for (const auto& [k, v] : r.book) book[k] = v;
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
    ej["spec"] = e.spec.resolved;
    nlohmann::json axes = nlohmann::json::array();
    for (const auto& a : e.spec.axes) {
      nlohmann::json vals = nlohmann::json::array();
      for (const auto& v : a.values) vals.push_back(value_to_json(v));
      axes.push_back({{"key", a.key}, {"type", to_string(a.type)}, {"values", vals}});
    }
    ej["axes"] = axes;
    ej["plan"] = {{"configurations", e.plan.points.size()}, {"variants", e.plan.variants}, {"rows", e.plan.rows},
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
  if (j.value("schema", std::string()) != "infer-bench/results")
    throw std::runtime_error("not an infer-bench results file");
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
    e.spec.resolved = ej.at("spec");
    e.spec.variants = e.spec.resolved.value("variants", std::vector<std::string>{});
    if (e.spec.resolved.contains("baseline") && e.spec.resolved["baseline"].is_string())
      e.spec.baseline = e.spec.resolved["baseline"].get<std::string>();
    e.spec.description = e.spec.resolved.value("description", std::string());
    e.spec.cpu_overrides_applied = e.spec.resolved.value("cpu_overrides_applied", false);
    if (e.spec.resolved.contains("columns")) e.spec.columns = e.spec.resolved["columns"].get<std::vector<std::string>>();
    if (e.spec.resolved.contains("summary")) e.spec.summary = summary_from_json(e.spec.resolved["summary"]);
    if (e.spec.resolved.contains("plot"))
      for (const auto& pj : e.spec.resolved.at("plot")) e.spec.plots.push_back(plot_from_json(pj));
    std::map<std::string, ParamType> types;
    for (const auto& a : ej.at("axes")) {
      Axis axis;
      axis.key = a.at("key").get<std::string>();
      axis.type = param_type_from_string(a.at("type").get<std::string>());
      for (const auto& v : a.at("values")) axis.values.push_back(value_from_json(v));
      types[axis.key] = axis.type;
      e.spec.axes.push_back(std::move(axis));
    }
    if (e.spec.resolved.contains("book")) {
      const auto& bj = e.spec.resolved["book"];
      e.spec.book.source = bj.value("source", std::string());
      e.spec.book.note = bj.value("note", std::string());
      for (const auto& rowj : bj.value("rows", nlohmann::json::array())) {
        BookRow br;
        for (const auto& [k, v] : rowj.items()) {
          if (k == "variant" || k == "role" || types.count(k)) br.match.emplace_back(k, value_from_json(v));
          else br.figures.emplace_back(k, v);
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
        r.metrics.push_back(Metric{mj.at("key").get<std::string>(), mj.at("value").get<double>(), mj.at("unit").get<std::string>()});
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
      for (const auto& [k, v] : rj.at("book").items()) r.book.emplace_back(k, v);
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
