// The Markdown table of an experiment: a row's cells, the chapter-only rows, which columns are
// shown (constants folded above, --columns, fitting a terminal) and the layout of stdout's table.
#include "core/report.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/report_internal.h"
#include "core/units.h"

namespace ib {

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

namespace {

// Column order of the Markdown table, whatever order rows contribute their cells in.
enum Rank {
  kVariant,
  kParam,
  kTime,
  kTflops,
  kPctGemm,
  kGbps,
  kPctCopy,
  kMetric,
  kPeakMem,
  kSpeedup,
  kVerdict,
  kBook,
  kCheck,
  kSamples,
  kStop,
  kNote
};

struct Cell {
  std::string header;
  std::string text;
  Rank rank;       // parameter columns (kParam) fold into the constants line when constant
  std::string id;  // what --columns and a spec's `columns:` name it by (ms, speedup, book_ms, a metric's key, ...)
};

std::string status_text(const Row& r) {
  switch (r.status) {
    case RowStatus::Ok:
      return "";
    case RowStatus::Oom:
      return "OOM";
    case RowStatus::Failed:
      return "FAILED";
    case RowStatus::Unsupported:
      return "unsupported";
  }
  return "";
}

std::string figure_text(const BookFigure& v) {
  if (const double* d = std::get_if<double>(&v)) return format_number(*d);
  return std::get<std::string>(v);
}

std::string speedup_text(const Speedup& s) {
  return fmt::format("{}× [{}, {}]", format_number(s.ratio), format_number(s.lo), format_number(s.hi));
}

std::vector<Cell> row_cells(const Row& r, const Ceilings& c) {
  std::vector<Cell> cells;
  cells.push_back({"variant", r.variant, kVariant, "variant"});
  for (const auto& p : r.point.params) cells.push_back({p.key, format_value(p.value, p.type), kParam, p.key});
  if (r.status == RowStatus::Ok)
    cells.push_back({"ms", format_ms(r.stats.median) + " ± " + format_ms(r.stats.stdev), kTime, "ms"});
  else
    cells.push_back({"ms", status_text(r), kTime, "ms"});
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
    cells.push_back(
        {"check",
         fmt::format("{} {} {}", r.validation->ok ? "ok" : "FAILED", r.validation->metric, format_number(r.validation->value)),
         kCheck, "check"});
  if (r.status == RowStatus::Ok) {
    cells.push_back({"samples", std::to_string(r.stats.n), kSamples, "samples"});
    cells.push_back({"stop", r.stop_reason, kStop, "stop"});
  }
  if (!r.message.empty()) cells.push_back({"note", r.message, kNote, "note"});
  return cells;
}

}  // namespace

namespace report_detail {

const std::string& role_of(const Row& r) { return r.role.empty() ? r.variant : r.role; }

}  // namespace report_detail

using report_detail::role_of;

namespace {

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
  const std::vector<std::string>& wanted = !options.columns.empty()       ? options.columns
                                           : !result.spec.columns.empty() ? result.spec.columns
                                                                          : kDefaultColumns;
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
  if (!constants.empty())
    out += (options.compact ? wrap_dotted(constants, 120) : [&] {
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
    out +=
        fmt::format("\n+{} column{} in report.md, CSV and JSON (`--columns all` shows them)\n", hidden, hidden == 1 ? "" : "s");
  if (rows.size() > measured)
    out += "\n(chapter) rows: the chapter's figures at a role or point this run does not measure; nothing measured in them\n";
  if (!result.spec.book.empty()) {
    out += "\nbook: " + result.spec.book.source + (result.spec.book.note.empty() ? "" : " — " + result.spec.book.note) + "\n";
    if (result.spec.cpu_overrides_applied)
      out +=
          "book = the chapter's hardware at full size; measured = this machine with the spec's cpu: block: a shape, not a race\n";
  }
  if (result.interrupted)
    out += fmt::format("\n_interrupted: {} of {} rows measured; the rows above are complete_\n", result.rows.size(),
                       result.plan.rows);
  return out;
}

}  // namespace ib
