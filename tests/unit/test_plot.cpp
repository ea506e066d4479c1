// SVG plots of an experiment's rows: which plots are drawn, where the points land, the chapter's
// figures, OOM rows, scales, and that the document is well-formed text.
#include <regex>
#include <string>
#include <vector>

#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/run_kind.h"
#include "core/plot.h"
#include "core/report.h"
#include "core/spec.h"

namespace ib {
namespace {

// An attention-like experiment: two variants over x = m (64, 128, 256), the second 2x faster,
// the last point of the first an OOM row, book figures on the second.
ExperimentResult fixture(const std::string& plot_yaml) {
  SpecOptions opt;
  Spec spec = parse_spec(
      "experiments:\n"
      "  - name: demo\n"
      "    kind: ceiling\n"
      "    variants: [sgemm, memcpy]\n"
      "    baseline: sgemm\n"
      "    m: [64, 128, 256]\n"
      "    dtype: fp32\n"
      "    plot: " +
          plot_yaml + "\n",
      "demo.yaml", opt);
  ExperimentResult e;
  e.spec = spec.experiments[0];
  e.plan = plan_sweep(e.spec);
  const auto points = expand_sweep(e.spec);
  for (size_t i = 0; i < points.size(); ++i) {
    const double base_ms = 1.0 * static_cast<double>(1u << i);  // 1, 2, 4 ms
    Row b;
    b.experiment = "demo";
    b.kind = "ceiling";
    b.variant = "sgemm";
    b.point = points[i];
    b.is_baseline = true;
    b.samples = {base_ms * 0.9e-3, base_ms * 1e-3, base_ms * 1.1e-3};
    b.stats = summarize(b.samples);
    if (i == 2) {
      b.status = RowStatus::Oom;
      b.samples.clear();
      b.stats = Stats{};
    }
    Row f = b;
    f.variant = "memcpy";
    f.is_baseline = false;
    f.status = RowStatus::Ok;
    f.samples = {base_ms * 0.45e-3, base_ms * 0.5e-3, base_ms * 0.55e-3};
    f.stats = summarize(f.samples);
    f.speedup = Speedup{2.0 + 0.1 * static_cast<double>(i), 1.9, 2.4, Verdict::Faster};
    f.metrics = {{"tokens/step", 1.5 + static_cast<double>(i), ""}};
    f.book = {{"ms", BookFigure("~" + std::to_string(static_cast<int>(base_ms)))}, {"speedup", BookFigure("1.5-2.5")}};
    e.rows.push_back(b);
    e.rows.push_back(f);
  }
  return e;
}

// The (x, y) pairs of every polyline, in document order.
std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  const std::regex line("<polyline points=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), line); it != std::sregex_iterator(); ++it) {
    std::vector<std::pair<double, double>> pts;
    const std::string s = (*it)[1];
    const std::regex pair("([-0-9.]+),([-0-9.]+)");
    for (auto jt = std::sregex_iterator(s.begin(), s.end(), pair); jt != std::sregex_iterator(); ++jt)
      pts.emplace_back(std::stod((*jt)[1]), std::stod((*jt)[2]));
    out.push_back(pts);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Plot, OneLinePerVariantWithPointsWhereTheValuesAre) {
  ExperimentResult e = fixture("{x: m, y: ms, log_y: false}");
  std::vector<PlotFile> files = render_plots(e, Ceilings{}, "Test GPU");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].file, "demo.svg");
  const std::string& svg = files[0].svg;
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("Test GPU"), std::string::npos);
  auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 2u);
  // sgemm: two measured points (the third is OOM), memcpy: three; x increases along each.
  ASSERT_EQ(lines[0].size(), 2u);
  ASSERT_EQ(lines[1].size(), 3u);
  for (const auto& l : lines)
    for (size_t i = 1; i < l.size(); ++i) EXPECT_GT(l[i].first, l[i - 1].first);
  // Larger values sit higher (smaller SVG y); memcpy (half the time) sits below sgemm at each x.
  EXPECT_LT(lines[1][1].second, lines[1][0].second);
  EXPECT_EQ(lines[0][0].first, lines[1][0].first);
  EXPECT_GT(lines[1][0].second, lines[0][0].second);
  // Linear axis from zero: y(1 ms) − y(0) is twice y(0.5 ms) − y(0).
  const double y_base_1ms = lines[0][0].second, y_fast_05ms = lines[1][0].second;
  const double y_fast_2ms = lines[1][2].second;  // 0.5 · 4 = 2 ms
  EXPECT_NEAR(y_fast_05ms - y_base_1ms, (y_fast_05ms - y_fast_2ms) / 3.0, 0.2);
  EXPECT_EQ(count(svg, ">OOM<"), 1u);
  EXPECT_NE(svg.find("out of memory"), std::string::npos);
  EXPECT_EQ(count(svg, "fill=\"white\" stroke="), 3u + 1u);  // a diamond per memcpy book figure, one in the legend
  EXPECT_NE(svg.find("figure from the chapter"), std::string::npos);
}

// The legend sits under the x axis, so the plot keeps the image's width: the lines reach past the
// old legend column (x 560), and every legend label is below the plot's frame (y 400).
TEST(Plot, TheLegendIsUnderThePlotNotBesideIt) {
  ExperimentResult e = fixture("{x: m, y: ms, log_y: false}");
  const std::string svg = render_plots(e, Ceilings{}, "dev")[0].svg;
  double right = 0;
  for (const auto& l : polylines(svg))
    for (const auto& pt : l) right = std::max(right, pt.first);
  EXPECT_GT(right, 800.0);
  for (const char* label : {"figure from the chapter", "out of memory"}) {
    const auto at = svg.find(std::string(">") + label + "<");
    ASSERT_NE(at, std::string::npos) << label;
    const auto y = svg.rfind(" y=\"", at);
    ASSERT_NE(y, std::string::npos);
    EXPECT_GT(std::stod(svg.substr(y + 4)), 420.0) << label;
  }
}

TEST(Plot, SpeedupsLeaveTheBaselineOutAndDrawTheBooksRange) {
  ExperimentResult e = fixture("{x: m, y: speedup}");
  std::vector<PlotFile> files = render_plots(e, Ceilings{}, "dev");
  ASSERT_EQ(files.size(), 1u);
  const std::string& svg = files[0].svg;
  auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].size(), 3u);
  EXPECT_NE(svg.find("speedup vs sgemm (95% CI)"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"5 4\""), std::string::npos);  // y = 1
  EXPECT_EQ(count(svg, "stroke-dasharray=\"3 2\""), 3u);               // "1.5-2.5" drawn as a range
}

TEST(Plot, AMetricByItsKeyAndPlotsWithoutDataAreSkippedWithAReason) {
  ExperimentResult e = fixture("[{x: m, y: tokens/step}, {x: m, y: nothing}, {x: m, y: ms}]");
  std::vector<std::string> skipped;
  std::vector<PlotFile> files = render_plots(e, Ceilings{}, "dev", &skipped);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].file, "demo.svg");
  EXPECT_EQ(files[1].file, "demo-3.svg");  // named by position in the spec
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("demo: plot 2 (nothing vs m) not drawn: no row has a value of nothing"), std::string::npos)
      << skipped[0];
  EXPECT_EQ(polylines(files[0].svg).size(), 1u);
  // Only one x value left: nothing to draw.
  ExperimentResult one = fixture("{x: m}");
  one.rows.resize(2);
  skipped.clear();
  EXPECT_TRUE(render_plots(one, Ceilings{}, "dev", &skipped).empty());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("fewer than two values of m"), std::string::npos);
}

TEST(Plot, SeveralQuantitiesShareTheAxisOneLineStyleEach) {
  ExperimentResult e = fixture("{x: m, y: [speedup, tokens/step]}");
  const std::string svg = render_plots(e, Ceilings{}, "dev")[0].svg;
  auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 2u);  // memcpy's speedup and its tokens/step (the baseline has neither)
  EXPECT_NE(svg.find("memcpy · speedup"), std::string::npos);
  EXPECT_NE(svg.find("memcpy · tokens/step"), std::string::npos);
  EXPECT_EQ(count(svg, "stroke-dasharray=\"6 3\""), 2u);  // the second quantity's line and its legend entry
  // The book's speedup range sits beside the first quantity only.
  EXPECT_EQ(count(svg, "stroke-dasharray=\"3 2\""), 3u);
  // tokens/step 1.5, 2.5, 3.5 above speedup 2.0, 2.1, 2.2 at the last x: smaller SVG y.
  EXPECT_LT(lines[1][2].second, lines[0][2].second);
}

TEST(Plot, LogScalesWhenTheValuesSpanAWideRange) {
  // m spans 4x and the times 0.45..4.4 ms under 16x: linear unless asked.
  const std::string svg = render_plots(fixture("{x: m, y: ms}"), Ceilings{}, "dev")[0].svg;
  EXPECT_EQ(svg.find("(log scale)"), std::string::npos);
  // Times spanning 1000x: a log y axis by itself.
  ExperimentResult wide = fixture("{x: m, y: ms}");
  for (auto& r : wide.rows)
    for (const auto& prm : r.point.params)
      if (r.variant == "memcpy" && prm.key == "m" && prm.value == Value(int64_t{256})) r.stats.median *= 1000;
  const std::string svg2 = render_plots(wide, Ceilings{}, "dev")[0].svg;
  EXPECT_NE(svg2.find("median ms (whiskers: p10–p90) (log scale)"), std::string::npos);
  EXPECT_EQ(svg2.find("m (log scale)"), std::string::npos);
  // On a log x axis equal ratios are equal distances: 64 -> 128 as far as 128 -> 256.
  ExperimentResult lg = fixture("{x: m, y: ms, log_x: true}");
  auto lines = polylines(render_plots(lg, Ceilings{}, "dev")[0].svg);
  ASSERT_EQ(lines[1].size(), 3u);
  EXPECT_NEAR(lines[1][1].first - lines[1][0].first, lines[1][2].first - lines[1][1].first, 0.2);
}

TEST(Plot, BookFiguresAsWrittenInSpecs) {
  using V = std::vector<double>;
  EXPECT_EQ(book_figure_values(12.0), V{12});
  EXPECT_EQ(book_figure_values(std::string("~25")), V{25});
  EXPECT_EQ(book_figure_values(std::string("1.3\u00d7")), V{1.3});
  EXPECT_EQ(book_figure_values(std::string("64 GB")), V{64});
  EXPECT_EQ(book_figure_values(std::string("0.5-1")), (V{0.5, 1}));
  EXPECT_EQ(book_figure_values(std::string("1.5\u20132")), (V{1.5, 2}));
  EXPECT_EQ(book_figure_values(std::string("\u2248 420")), V{420});
  EXPECT_TRUE(book_figure_values(std::string("< 100")).empty());
  EXPECT_TRUE(book_figure_values(std::string("OOM")).empty());
  EXPECT_EQ(book_figure_values(figure_from_json(nlohmann::json::array())), V{});  // not a figure: its text, no number
}

TEST(Plot, TextIsEscaped) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  ExperimentResult e = fixture("{x: m, title: \"x < y & z\"}");
  const std::string svg = render_plots(e, Ceilings{}, "GPU <0>")[0].svg;
  EXPECT_NE(svg.find("x &lt; y &amp; z"), std::string::npos);
  EXPECT_NE(svg.find("GPU &lt;0&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("x < y"), std::string::npos);
}

TEST(Plot, TheReportLinksThePlotsAndTheyComeBackFromJson) {
  ResultSet rs;
  rs.meta.backend = Backend::Cpu;
  rs.meta.device.name = "dev";
  rs.experiments.push_back(fixture("[{x: m, y: ms}, {x: m, y: speedup}]"));
  const std::string md = markdown_report(rs);
  EXPECT_NE(md.find("![demo: ms vs m](demo.svg)"), std::string::npos) << md;
  EXPECT_NE(md.find("![demo: speedup vs m](demo-2.svg)"), std::string::npos);
  ResultSet back = results_from_json(json_report(rs));
  ASSERT_EQ(back.experiments.size(), 1u);
  ASSERT_EQ(back.experiments[0].spec.plots.size(), 2u);
  const auto a = render_plots(rs.experiments[0], rs.meta.ceilings, "dev");
  const auto b = render_plots(back.experiments[0], back.meta.ceilings, "dev");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].svg, b[i].svg);
}

// #19: two x values one ulp apart (0.3 and 0.30000000000000004) made the tick loop step by less
// than an ulp, forever. Now the axis is widened and the plot is drawn.
TEST(Plot, XValuesAnUlpApartStillMakeAPlot) {
  const ExperimentResult e = testing::run_spec_text(
      "{warmup: 0, min_samples: 1, min_time: 0, max_noise: 1, timeout: 5s}",
      "  - {name: u, kind: kv-evict, variants: [sliding_window], context: 256, decode_steps: 8, head_dim: 16,"
      " budget: [0.3, 0.30000000000000004], plot: {x: budget, y: err mean}}\n");
  ASSERT_EQ(e.rows.size(), 2u);
  const std::vector<PlotFile> files = render_plots(e, Ceilings{}, "Test GPU");
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].svg.find("</svg>"), std::string::npos);
  EXPECT_LT(count(files[0].svg, "<text"), 200u);  // a bounded number of ticks
}

// #19: `plot` on a results.json whose experiment is named "../escaped" wrote outside -o.
TEST(Plot, FileNamesStayInTheOutputDirectory) {
  ExperimentSpec spec;
  spec.name = "../escaped";
  spec.plots.resize(2);
  const auto names = plot_file_names(spec);
  ASSERT_EQ(names.size(), 2u);
  for (const auto& n : names) EXPECT_EQ(n.find('/'), std::string::npos) << n;
  EXPECT_EQ(names[0], ".._escaped.svg");
  EXPECT_EQ(names[1], ".._escaped-2.svg");
}

}  // namespace
}  // namespace ib
