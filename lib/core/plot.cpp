#include "core/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/units.h"

namespace ib {

namespace {

// Canvas: the plot area, then the legend on its right.
// The plot takes the whole width; the legend sits under the x axis, in as many columns as its
// longest label allows, and the image grows by its rows.
constexpr double kWidth = 940;
constexpr double kLeft = 78, kRight = 910, kTop = 62, kBottom = 400;
constexpr double kLegendTop = kBottom + 62, kLegendRow = 18;
constexpr size_t kLegendLabel = 46, kLegendMaxEntries = 24;
// Tableau 10: distinct in colour and in grey, readable on white.
const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

struct PlotPoint {
  double x = 0;
  std::optional<double> y, lo, hi;  // y unset: no value (an OOM row, or the quantity is missing)
  bool oom = false;
  std::vector<double> book;  // one value, or a range [lo, hi]
};

struct PlotSeries {
  std::string label;
  size_t color = 0;               // one colour per variant and parameter combination
  size_t dash = 0;                // one line style per quantity (several y: measured solid, the next dashed, ...)
  std::vector<PlotPoint> points;  // sorted by x
};

std::optional<double> numeric(const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return std::nullopt;
}

const Param* find_param(const Row& r, const std::string& key) {
  for (const auto& p : r.point.params)
    if (p.key == key) return &p;
  return nullptr;
}

struct YQuantity {
  std::string label;           // the axis title
  bool reference_one = false;  // draw y = 1 (speedups)
};

YQuantity describe_one(const std::string& y, const ExperimentResult& result) {
  if (y == "ms") return {"median ms (whiskers: p10–p90)"};
  if (y == "speedup")
    return {"speedup vs " + (result.spec.baseline.empty() ? std::string("the baseline") : result.spec.baseline) + " (95% CI)",
            true};
  if (y == "tflops") return {"TFLOP/s"};
  if (y == "gbps") return {"GB/s"};
  for (const auto& r : result.rows)
    for (const auto& m : r.metrics)
      if (m.key == y) return {m.unit.empty() ? m.key : m.key + " (" + m.unit + ")", m.unit == "\u00d7"};
  return {y};
}

// One quantity: its full label; several: their names (the legend tells the lines apart).
YQuantity describe_y(const PlotSpec& p, const ExperimentResult& result) {
  if (p.y.size() == 1) return describe_one(p.y[0], result);
  YQuantity q;
  for (const auto& y : p.y) {
    q.label += (q.label.empty() ? "" : " / ") + y;
    q.reference_one = q.reference_one || describe_one(y, result).reference_one;
  }
  return q;
}

std::string join_y(const PlotSpec& p) {
  std::string s;
  for (const auto& y : p.y) s += (s.empty() ? "" : ", ") + y;
  return s;
}

// The row's y (and its spread) for the plot's quantity; nothing when the row has none.
void measure(const Row& r, const std::string& y, const Ceilings& c, PlotPoint* pt) {
  if (r.status != RowStatus::Ok) return;
  if (y == "ms") {
    pt->y = r.stats.median * 1e3;
    pt->lo = r.stats.p10 * 1e3;
    pt->hi = r.stats.p90 * 1e3;
  } else if (y == "speedup") {
    if (r.speedup && !r.is_baseline) {
      pt->y = r.speedup->ratio;
      pt->lo = r.speedup->lo;
      pt->hi = r.speedup->hi;
    }
  } else if (y == "tflops" || y == "gbps") {
    const Roofline rf = roofline(r, c);
    pt->y = y == "tflops" ? rf.tflops : rf.gbps;
  } else {
    for (const auto& m : r.metrics)
      if (m.key == y) pt->y = m.value;
  }
  if (pt->y && !std::isfinite(*pt->y)) pt->y.reset();
  if (!pt->y || !pt->lo || !pt->hi || !std::isfinite(*pt->lo) || !std::isfinite(*pt->hi)) pt->lo = pt->hi = std::nullopt;
}

// A tick's value as short as it reads: 0.5, 2, 1500, 2.5e+07.
std::string tick_label(double v) {
  if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3)) return fmt::format("{:.3g}", v);
  return fmt::format("{:.6g}", v);
}

std::string format_x(double v, ParamType t) {
  if (t == ParamType::Bytes) return format_bytes(v);
  if (t == ParamType::Seconds) return format_seconds(v);
  if (t == ParamType::Int && v >= 1024 && std::fmod(v, 1024) == 0)
    return fmt::format("{}K", static_cast<long long>(v / 1024));  // sequence lengths: 32K as the chapter writes them
  return tick_label(v);
}

struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double p0 = 0, p1 = 1;  // pixels of lo and hi
  double operator()(double v) const {
    const double t = log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo)) : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
};

// Linear ticks at 1, 2 or 5 × 10^k, about `want` of them, covering [lo, hi] (which it widens).
std::vector<double> linear_ticks(double* lo, double* hi, int want) {
  // An empty range, or one too narrow for the doubles around it (values an ulp apart: a step
  // below the ulp would never advance), is widened to 10% of the magnitude.
  const double scale = std::max(std::fabs(*lo), std::fabs(*hi));
  if (!(*hi - *lo > scale * 1e-9)) *hi = *lo + (scale == 0 ? 1 : scale * 0.1);
  const double raw = (*hi - *lo) / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * mag >= raw) {
      step = f * mag;
      break;
    }
  *lo = std::floor(*lo / step + 1e-9) * step;
  *hi = std::ceil(*hi / step - 1e-9) * step;
  std::vector<double> t;
  // Counted, not accumulated: about `want` ticks whatever the rounding.
  const long n = std::lround((*hi - *lo) / step);
  for (long i = 0; i <= std::min<long>(n, 10L * want + 10); ++i) {
    const double v = *lo + static_cast<double>(i) * step;
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

// Log ticks: 1, 2, 5 × 10^k inside [lo, hi] when the range spans few decades, else decades only.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const double decades = std::log10(hi / lo);
  for (int e = static_cast<int>(std::floor(std::log10(lo))); e <= static_cast<int>(std::ceil(std::log10(hi))); ++e)
    for (double f : decades <= 2.5 ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
      const double v = f * std::pow(10.0, e);
      if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) t.push_back(v);
    }
  return t;
}

bool wants_log(const std::vector<double>& v) {
  if (v.empty()) return false;
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  return *mn > 0 && *mx / *mn >= 16;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

std::string text(double x, double y, const std::string& s, const std::string& extra = "") {
  return fmt::format("<text x=\"{}\" y=\"{}\"{}>{}</text>\n", num(x), num(y), extra.empty() ? "" : " " + extra, xml_escape(s));
}

std::string truncate(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // not inside a UTF-8 character
  return s.substr(0, cut) + "…";
}

std::string diamond(double x, double y, const char* color) {
  return fmt::format("<path d=\"M{} {}l5 5l-5 5l-5 -5z\" fill=\"white\" stroke=\"{}\" stroke-width=\"1.6\"/>\n", num(x),
                     num(y - 5), color);
}

std::string cross(double x, double y, const char* color) {
  return fmt::format("<path d=\"M{} {}l8 8M{} {}l-8 8\" stroke=\"{}\" stroke-width=\"2.2\"/>\n", num(x - 4), num(y - 4),
                     num(x + 4), num(y - 4), color);
}

constexpr size_t kColors = sizeof(kPalette) / sizeof(kPalette[0]);

const char* color_of(const PlotSeries& s) { return kPalette[s.color % kColors]; }

// Solid for the first quantity of the first ten colours; past them, or for the next quantities,
// a dash pattern tells the lines apart.
std::string dash_of(const PlotSeries& s) {
  static const char* const kDashes[] = {"", "6 3", "2 3", "8 3 2 3"};
  const size_t k = (s.dash + s.color / kColors) % 4;
  return k == 0 ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", kDashes[k]);
}

std::optional<PlotFile> render_one(const ExperimentResult& result, const PlotSpec& p, const Ceilings& ceilings,
                                   const std::string& device, std::string* why) {
  // x's type, and which other parameters vary (they split the series).
  ParamType x_type = ParamType::Int;
  bool x_found = false;
  std::map<std::string, std::set<std::string>> values;
  for (const auto& r : result.rows)
    for (const auto& prm : r.point.params) {
      values[prm.key].insert(format_value(prm.value, prm.type));
      if (prm.key == p.x) {
        x_type = prm.type;
        x_found = true;
      }
    }
  if (!x_found) {
    *why = "no row has the parameter '" + p.x + "'";
    return std::nullopt;
  }
  std::set<std::string> variants;
  for (const auto& r : result.rows) variants.insert(r.variant);
  const std::string book_key = p.book.empty() ? p.y.front() : p.book;

  std::vector<PlotSeries> series;
  std::map<std::string, size_t> index, colors;
  for (const auto& r : result.rows) {
    const Param* xp = find_param(r, p.x);
    if (!xp) continue;
    const std::optional<double> xv = numeric(xp->value);
    if (!xv) continue;
    std::string base = variants.size() > 1 || values.size() <= 1 ? r.variant : "";
    for (const auto& prm : r.point.params)
      if (prm.key != p.x && values[prm.key].size() > 1)
        base += (base.empty() ? "" : ", ") + prm.key + "=" + format_value(prm.value, prm.type);
    if (base.empty()) base = r.variant;
    const size_t color = colors.emplace(base, colors.size()).first->second;
    for (size_t yi = 0; yi < p.y.size(); ++yi) {
      const std::string label = p.y.size() > 1 ? base + " · " + p.y[yi] : base;
      auto [it, fresh] = index.emplace(label, series.size());
      if (fresh) series.push_back(PlotSeries{label, color, yi, {}});
      PlotPoint pt;
      pt.x = *xv;
      pt.oom = yi == 0 && r.status == RowStatus::Oom;
      measure(r, p.y[yi], ceilings, &pt);
      // The chapter's figure beside the quantity it names (the first y when `book` is not given).
      if (p.book.empty() ? yi == 0 : p.y[yi] == book_key || (yi == 0 && std::find(p.y.begin(), p.y.end(), book_key) == p.y.end()))
        for (const auto& [k, v] : r.book)
          if (k == book_key) pt.book = book_figure_values(v);
      if (pt.y || pt.oom || !pt.book.empty()) series[it->second].points.push_back(std::move(pt));
    }
  }
  // Drop series with nothing to draw; the plot needs two x values somewhere.
  series.erase(std::remove_if(series.begin(), series.end(), [](const PlotSeries& s) { return s.points.empty(); }), series.end());
  std::vector<double> xs, ys;
  for (auto& s : series) {
    std::sort(s.points.begin(), s.points.end(), [](const PlotPoint& a, const PlotPoint& b) { return a.x < b.x; });
    for (const auto& pt : s.points) {
      xs.push_back(pt.x);
      if (pt.y) ys.push_back(*pt.y);
      if (pt.lo) ys.push_back(*pt.lo);
      if (pt.hi) ys.push_back(*pt.hi);
      for (double b : pt.book) ys.push_back(b);
    }
  }
  if (ys.empty()) {
    *why = "no row has a value of " + join_y(p) + " (the y of a plot is ms, speedup, tflops, gbps or a metric's name)";
    return std::nullopt;
  }
  std::set<double> distinct_x(xs.begin(), xs.end());
  if (distinct_x.size() < 2) {
    *why = fmt::format("fewer than two values of {} with a {} to draw", p.x, join_y(p));
    return std::nullopt;
  }

  Scale sx, sy;
  sx.log = p.log_x.value_or(wants_log(xs));
  sy.log = p.log_y.value_or(wants_log(ys));
  if (sx.log && *std::min_element(xs.begin(), xs.end()) <= 0) sx.log = false;
  if (sy.log && *std::min_element(ys.begin(), ys.end()) <= 0) sy.log = false;
  sx.p0 = kLeft;
  sx.p1 = kRight;
  sy.p0 = kBottom;
  sy.p1 = kTop;
  std::vector<double> xt, yt;
  const double x_min = *distinct_x.begin(), x_max = *distinct_x.rbegin();
  if (sx.log) {  // a little room either side; ticks at the measured values when there are few
    sx.lo = x_min / std::pow(x_max / x_min, 0.04);
    sx.hi = x_max * std::pow(x_max / x_min, 0.04);
    xt = distinct_x.size() <= 10 ? std::vector<double>(distinct_x.begin(), distinct_x.end()) : log_ticks(sx.lo, sx.hi);
  } else {
    sx.lo = x_min;
    sx.hi = x_max;
    if (distinct_x.size() <= 8 && x_type == ParamType::Int) {
      const double pad = (x_max - x_min) * 0.04;
      sx.lo -= pad;
      sx.hi += pad;
      xt.assign(distinct_x.begin(), distinct_x.end());
    } else {
      xt = linear_ticks(&sx.lo, &sx.hi, 7);
    }
  }
  const YQuantity yq = describe_y(p, result);
  double y_min = *std::min_element(ys.begin(), ys.end()), y_max = *std::max_element(ys.begin(), ys.end());
  if (yq.reference_one) {
    y_min = std::min(y_min, 1.0);
    y_max = std::max(y_max, 1.0);
  }
  if (sy.log) {
    sy.lo = std::pow(10.0, std::floor(std::log10(y_min) * 4) / 4);
    sy.hi = std::pow(10.0, std::ceil(std::log10(y_max) * 4) / 4);
    if (sy.hi <= sy.lo) sy.hi = sy.lo * 10;
    yt = log_ticks(sy.lo, sy.hi);
  } else {
    sy.lo = y_min >= 0 ? 0.0 : y_min;  // a linear axis of non-negative values starts at zero
    sy.hi = y_max + (y_max - sy.lo) * 0.05;
    yt = linear_ticks(&sy.lo, &sy.hi, 6);
  }

  bool any_book = false, any_oom = false;
  for (const auto& se : series)
    for (const auto& pt : se.points) {
      any_book = any_book || pt.book.size() == 1 || pt.book.size() == 2;
      any_oom = any_oom || pt.oom;
    }
  // Legend layout: entries (series, then the chapter's diamond and the OOM cross) in columns.
  const size_t shown = std::min(series.size(), kLegendMaxEntries);
  size_t longest = 0;
  for (size_t i = 0; i < shown; ++i) longest = std::max(longest, std::min(series[i].label.size(), kLegendLabel));
  longest = std::max<size_t>(longest, 24);  // "figure from the chapter", "… N more (hover a line)"
  const double entry_w = 36 + 6.6 * static_cast<double>(longest);
  const size_t columns = std::max<size_t>(1, std::min<size_t>(4, static_cast<size_t>((kWidth - kLeft) / entry_w)));
  const size_t entries = shown + (shown < series.size()) + any_book + any_oom;
  const size_t legend_rows = (entries + columns - 1) / columns;
  const double height = kLegendTop + static_cast<double>(legend_rows) * kLegendRow + 6;
  auto legend_at = [&](size_t k) {
    return std::make_pair(kLeft + static_cast<double>(k % columns) * entry_w,
                          kLegendTop + static_cast<double>(k / columns) * kLegendRow);
  };

  const std::string title = p.title.empty() ? (join_y(p) + " vs " + p.x) : p.title;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n",
      kWidth, num(height));
  s += fmt::format("<title>{}</title>\n", xml_escape(result.spec.name + ": " + title));
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", kWidth, num(height));
  s += text(kLeft, 24, result.spec.name + ": " + title, "font-size=\"15\" font-weight=\"bold\"");
  s += text(kLeft, 43, truncate(device + (result.spec.cpu_overrides_applied ? " · scaled sizes (cpu: block)" : ""), 110),
            "fill=\"#555\"");
  // Grid and ticks.
  for (double v : yt) {
    const double py = sy(v);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#e4e4e4\"/>\n", num(kLeft), num(py), num(kRight),
                     num(py));
    s += text(kLeft - 6, py + 4, tick_label(v), "text-anchor=\"end\"");
  }
  for (double v : xt) {
    const double px = sx(v);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#f0f0f0\"/>\n", num(px), num(kTop), num(px),
                     num(kBottom));
    s += text(px, kBottom + 16, format_x(v, x_type), "text-anchor=\"middle\"");
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", num(kLeft), num(kTop),
                   num(kRight - kLeft), num(kBottom - kTop));
  s += text((kLeft + kRight) / 2, kBottom + 38, p.x + (sx.log ? " (log scale)" : ""), "text-anchor=\"middle\"");
  s += text(0, 0, yq.label + (sy.log ? " (log scale)" : ""),
            fmt::format("text-anchor=\"middle\" transform=\"translate({} {}) rotate(-90)\"", num(20), num((kTop + kBottom) / 2)));
  if (yq.reference_one && 1.0 >= sy.lo && 1.0 <= sy.hi)
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#666\" stroke-dasharray=\"5 4\"/>\n", num(kLeft),
                     num(sy(1.0)), num(kRight), num(sy(1.0)));

  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = color_of(series[i]);
    std::string line;
    for (const auto& pt : series[i].points)
      if (pt.y) line += (line.empty() ? "" : " ") + num(sx(pt.x)) + "," + num(sy(*pt.y));
    s += fmt::format("<g><title>{}</title>\n", xml_escape(series[i].label));
    if (line.find(' ') != std::string::npos)
      s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", line, color,
                       dash_of(series[i]));
    for (const auto& pt : series[i].points) {
      const double px = sx(pt.x);
      if (pt.lo && pt.hi) {
        s += fmt::format("<path d=\"M{0} {1}V{2}M{3} {1}h6M{3} {2}h6\" stroke=\"{4}\" stroke-width=\"1.2\"/>\n", num(px),
                         num(sy(*pt.lo)), num(sy(*pt.hi)), num(px - 3), color);
      }
      if (pt.y) s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.6\" fill=\"{}\"/>\n", num(px), num(sy(*pt.y)), color);
      if (pt.oom) {
        s += cross(px, kTop + 12, color);
        s += text(px, kTop + 30, "OOM", fmt::format("text-anchor=\"middle\" font-size=\"10\" fill=\"{}\"", color));
      }
      if (pt.book.size() == 1) {
        s += diamond(px + 7, sy(pt.book[0]), color);
      } else if (pt.book.size() == 2) {
        s += fmt::format(
            "<path d=\"M{0} {1}V{2}M{3} {1}h8M{3} {2}h8\" stroke=\"{4}\" stroke-width=\"2\" stroke-dasharray=\"3 2\"/>\n",
            num(px + 7), num(sy(pt.book[0])), num(sy(pt.book[1])), num(px + 3), color);
        s += diamond(px + 7, sy((pt.book[0] + pt.book[1]) / 2), color);
      }
    }
    s += "</g>\n";
  }

  // Legend, under the plot.
  size_t k = 0;
  for (size_t i = 0; i < shown; ++i, ++k) {
    const auto [lx, ly] = legend_at(k);
    const char* color = color_of(series[i]);
    s += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", num(lx), num(ly),
                     num(lx + 22), num(ly), color, dash_of(series[i]));
    s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.6\" fill=\"{}\"/>\n", num(lx + 11), num(ly), color);
    s += text(lx + 30, ly + 4, truncate(series[i].label, kLegendLabel));
  }
  if (shown < series.size()) {
    const auto [lx, ly] = legend_at(k++);
    s += text(lx + 30, ly + 4, fmt::format("… {} more (hover a line)", series.size() - shown), "fill=\"#555\"");
  }
  if (any_book) {
    const auto [lx, ly] = legend_at(k++);
    s += diamond(lx + 11, ly, "#444");
    s += text(lx + 30, ly + 4, "figure from the chapter");
  }
  if (any_oom) {
    const auto [lx, ly] = legend_at(k++);
    s += cross(lx + 11, ly, "#444");
    s += text(lx + 30, ly + 4, "out of memory");
  }
  s += "</svg>\n";
  return PlotFile{"", title, std::move(s)};
}

}  // namespace

std::vector<std::string> plot_file_names(const ExperimentSpec& spec) {
  // A file in the output directory whatever the name says: a results.json edited by hand can name
  // an experiment "../escaped" (the spec parser cannot), so path separators and control
  // characters become '_'.
  std::string base = spec.name;
  for (char& ch : base)
    if (ch == '/' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = '_';
  if (base.empty()) base = "_";
  std::vector<std::string> names;
  for (size_t i = 0; i < spec.plots.size(); ++i) names.push_back(i == 0 ? base + ".svg" : fmt::format("{}-{}.svg", base, i + 1));
  return names;
}

std::vector<PlotFile> render_plots(const ExperimentResult& result, const Ceilings& ceilings, const std::string& device,
                                   std::vector<std::string>* skipped) {
  std::vector<PlotFile> files;
  for (size_t i = 0; i < result.spec.plots.size(); ++i) {
    std::string why;
    std::optional<PlotFile> f;
    try {  // a plot is a view of the results: it never costs the run its files
      f = render_one(result, result.spec.plots[i], ceilings, device, &why);
    } catch (const std::exception& e) {
      why = std::string("internal error: ") + e.what();
    }
    if (!f) {
      if (skipped)
        skipped->push_back(fmt::format("{}: plot {} ({} vs {}) not drawn: {}", result.spec.name, i + 1,
                                       join_y(result.spec.plots[i]), result.spec.plots[i].x, why));
      continue;
    }
    f->file = plot_file_names(result.spec)[i];
    files.push_back(std::move(*f));
  }
  return files;
}

std::vector<double> book_figure_values(const BookFigure& figure) {
  if (const double* v = std::get_if<double>(&figure)) return {*v};
  std::string s = std::get<std::string>(figure);
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  const std::string approx = "\u2248";  // ≈
  if (s.compare(i, 1, "~") == 0)
    ++i;
  else if (s.compare(i, approx.size(), approx) == 0)
    i += approx.size();
  while (i < s.size() && s[i] == ' ') ++i;
  if (i >= s.size() || !(std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) return {};  // "< 100", "OOM"
  const char* start = s.c_str() + i;
  char* end = nullptr;
  const double a = std::strtod(start, &end);
  if (end == start || !std::isfinite(a)) return {};
  std::string rest(end);
  for (const char* dash : {"-", "\u2013"})  // a range: "0.5-1", "1.5–2"
    if (rest.rfind(dash, 0) == 0) {
      const char* b_start = end + std::string(dash).size();
      char* b_end = nullptr;
      const double b = std::strtod(b_start, &b_end);
      if (b_end != b_start && std::isfinite(b) && b >= a) return {a, b};
    }
  return {a};
}

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t')
          out += ' ';
        else
          out += c;
    }
  }
  return out;
}

}  // namespace ib
