#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/spec.h"
#include "core/spec_reference.h"
#include "core/sweep.h"

namespace ib {
namespace {

const char* kValid = R"(version: 1
description: a test suite
defaults:
  warmup: 1
  min_samples: 3
experiments:
  - name: copy
    kind: ceiling
    variants: [memcpy]
    bytes: [1MiB, 4MiB]
    timeout: 2s
    cpu:
      bytes: [64KiB, 128KiB, 256KiB]
  - name: gemm
    kind: ceiling
    variants: [sgemm, gemm]
    baseline: sgemm
    m: [16, 32]
    n: 64
    k: 32K
    dtype: fp32
    max_noise: 2%
    skip:
      - {m: 32, variant: gemm}
    book:
      source: Chapter 8, a made-up table
      rows:
        - {m: 16, variant: sgemm, ms: 12, note: from the book}
)";

Spec parse(const std::string& text, Backend b = Backend::Cpu, std::vector<std::string> sets = {}, RunControlOverrides o = {}) {
  SpecOptions opt;
  opt.backend = b;
  opt.sets = std::move(sets);
  opt.overrides = o;
  return parse_spec(text, "t.yaml", opt);
}

std::string error_of(const std::string& text, Backend b = Backend::Cpu, std::vector<std::string> sets = {}) {
  try {
    parse(text, b, std::move(sets));
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

const Axis& axis(const ExperimentSpec& e, const std::string& key) {
  for (const auto& a : e.axes)
    if (a.key == key) return a;
  throw std::runtime_error("no axis " + key);
}

TEST(Spec, ValidSpecOnTheCpuBackend) {
  Spec s = parse(kValid);
  ASSERT_EQ(s.experiments.size(), 2u);
  EXPECT_EQ(s.description, "a test suite");
  const ExperimentSpec& copy = s.experiments[0];
  EXPECT_EQ(copy.kind, "ceiling");
  EXPECT_EQ(copy.variants, std::vector<std::string>{"memcpy"});
  EXPECT_EQ(copy.baseline, "");
  EXPECT_TRUE(copy.cpu_overrides_applied);
  ASSERT_EQ(copy.axes.size(), 1u);  // memcpy reads only `bytes`
  EXPECT_EQ(axis(copy, "bytes").values.size(), 3u);
  EXPECT_EQ(std::get<int64_t>(axis(copy, "bytes").values[0]), 64 * 1024);
  EXPECT_EQ(copy.control.warmup, 1);  // from defaults
  EXPECT_EQ(copy.control.min_samples, 3);
  EXPECT_DOUBLE_EQ(copy.control.timeout, 2.0);

  const ExperimentSpec& gemm = s.experiments[1];
  EXPECT_EQ(gemm.baseline, "sgemm");
  EXPECT_EQ(std::get<int64_t>(axis(gemm, "k").values[0]), 32768);  // 32K = 32768
  EXPECT_DOUBLE_EQ(gemm.control.max_noise, 0.02);
  ASSERT_EQ(gemm.skip.size(), 1u);
  ASSERT_EQ(gemm.book.rows.size(), 1u);
  EXPECT_EQ(gemm.book.rows[0].figures.size(), 2u);
  EXPECT_EQ(gemm.book.source, "Chapter 8, a made-up table");
  EXPECT_EQ((*gemm.resolved)["params"]["m"], nlohmann::json({16, 32}));
}

TEST(Spec, ColumnsAndSummaryAreRead) {
  Spec s = parse(std::string("experiments:\n  - name: a\n    kind: ceiling\n") +
                 "    variants: [memcpy]\n    columns: [ms, gbps]\n"
                 "    summary: {claim: fast, figure: gbps, holds: [above 1, grows with bytes]}\n"
                 "    book: {source: s, rows: [{role: memcpy, gbps: 10}]}\n");
  const ExperimentSpec& e = s.experiments[0];
  EXPECT_EQ(e.columns, (std::vector<std::string>{"ms", "gbps"}));
  EXPECT_EQ(e.summary.claim, "fast");
  EXPECT_EQ(e.summary.holds, (std::vector<std::string>{"above 1", "grows with bytes"}));
  ASSERT_EQ(e.book.rows.size(), 1u);
  EXPECT_EQ(e.book.rows[0].match[0].first, "role");
  EXPECT_EQ(summary_from_json(e.resolved->at("summary")).holds, e.summary.holds);
}

TEST(Spec, CpuBlockIsNotAppliedOnTheGpuBackend) {
  Spec s = parse(kValid, Backend::Cuda);
  EXPECT_FALSE(s.experiments[0].cpu_overrides_applied);
  EXPECT_EQ(axis(s.experiments[0], "bytes").values.size(), 2u);
}

TEST(Spec, SetOverridesWinOverEverythingButFlags) {
  RunControlOverrides o;
  o.warmup = 9;
  Spec s = parse(kValid, Backend::Cpu, {"bytes=[2MiB]", "gemm.m=8", "warmup=4", "copy.seed=5"}, o);
  EXPECT_EQ(axis(s.experiments[0], "bytes").values.size(), 1u);  // beats the cpu: block
  EXPECT_EQ(std::get<int64_t>(axis(s.experiments[0], "bytes").values[0]), 2 << 20);
  EXPECT_EQ(std::get<int64_t>(axis(s.experiments[1], "m").values[0]), 8);
  EXPECT_EQ(s.experiments[0].control.warmup, 9);  // the --warmup flag beats --set warmup=4
  EXPECT_EQ(s.experiments[0].control.seed, 5);
  EXPECT_NE(s.experiments[1].control.seed, 5);
}

TEST(Spec, VariantsDefaultToTheBackendsOwn) {
  Spec s = parse("experiments:\n  - {name: a, kind: ceiling}\n");
  EXPECT_EQ(s.experiments[0].variants, (std::vector<std::string>{"memcpy", "sgemm", "blas_sgemm", "fma_peak"}));
  Spec g = parse("experiments:\n  - {name: a, kind: ceiling}\n", Backend::Cuda);
  EXPECT_EQ(g.experiments[0].variants, (std::vector<std::string>{"copy", "gemm"}));
}

struct BadCase {
  const char* name;
  std::string text;
  std::string expected;  // substring of the one-line message
  std::vector<std::string> sets;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class MalformedSpec : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedSpec, NamesFileLineColumnAndKey) {
  const BadCase& c = GetParam();
  std::string msg = error_of(c.text, Backend::Cpu, c.sets);
  EXPECT_NE(msg.find(c.expected), std::string::npos) << "message: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

const std::string kHead = "experiments:\n  - name: a\n    kind: ceiling\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedSpec,
    ::testing::Values(
        BadCase{"yaml_syntax", "experiments: [\n  - {name: a\n", "t.yaml:2:3: YAML syntax error: illegal block entry", {}},
        BadCase{"unknown_key",
                kHead + "    byts: 1MiB\n",
                "t.yaml:4:5: experiments[0].byts: unknown key 'byts' for kind ceiling (did you mean 'bytes'?)",
                {}},
        BadCase{"wrong_type", kHead + "    m: many\n", "t.yaml:4:8: experiments[0].m: expected an integer, got 'many'", {}},
        BadCase{"negative_size",
                kHead + "    bytes: -1MiB\n",
                "t.yaml:4:12: experiments[0].bytes: must be at least 4 KiB, got -1 MiB",
                {}},
        BadCase{"empty_axis",
                kHead + "    m: []\n",
                "t.yaml:4:8: experiments[0].m: empty list: an axis needs at least one value",
                {}},
        BadCase{"unknown_kind",
                "experiments:\n  - {name: a, kind: celing}\n",
                "t.yaml:2:21: experiments[0].kind: unknown kind 'celing' (did you mean 'ceiling'?)",
                {}},
        BadCase{"unknown_variant",
                kHead + "    variants: [memcopy]\n",
                "t.yaml:4:16: experiments[0].variants: unknown variant 'memcopy' of kind ceiling (did you mean 'memcpy'?)",
                {}},
        BadCase{
            "missing_name", "experiments:\n  - kind: ceiling\n", "t.yaml:2:5: experiments[0]: missing required key 'name'", {}},
        BadCase{"missing_kind", "experiments:\n  - name: a\n", "t.yaml:2:5: experiments[0]: missing required key 'kind'", {}},
        BadCase{"duplicate_name",
                kHead + "  - name: a\n    kind: ceiling\n",
                "t.yaml:4:11: experiments[1].name: duplicate experiment name 'a' (first at line 2)",
                {}},
        BadCase{"bad_set_syntax", kHead, "--set 'bytes': expected key=value", {"bytes"}},
        BadCase{"bad_set_key", kHead, "--set 'seqlen=4': no experiment in t.yaml has a key 'seqlen'", {"seqlen=4"}},
        BadCase{"bad_set_value", kHead, "--set m=-3: m: must be at least 1, got -3", {"m=-3"}},
        BadCase{"bad_enum",
                kHead + "    dtype: fp8\n",
                "t.yaml:4:12: experiments[0].dtype: 'fp8' is not one of bf16, fp16, fp32",
                {}},
        BadCase{"bad_baseline",
                kHead + "    variants: [memcpy]\n    baseline: sgemm\n",
                "experiments[0].baseline: baseline 'sgemm' is not among the variants run (memcpy)",
                {}},
        BadCase{"bad_skip_key", kHead + "    skip: [{mm: 3}]\n", "unknown key 'mm' in a skip rule (did you mean 'm'?)", {}},
        BadCase{"bad_cpu_key", kHead + "    cpu: {bites: 1MiB}\n", "experiments[0].cpu.bites: unknown key 'bites'", {}},
        BadCase{"control_axis", kHead + "    warmup: [1, 2]\n", "warmup cannot be a list", {}},
        BadCase{"empty_spec", "", "t.yaml:1:1: the spec is empty", {}},
        BadCase{"no_experiments", "version: 1\n", "t.yaml:1:1: missing required key 'experiments'", {}},
        BadCase{"bad_version", "version: 2\nexperiments: []\n", "t.yaml:1:10: version: only version 1 exists", {}},
        BadCase{"unknown_top_key", "experiment: []\n", "unknown top-level key 'experiment' (did you mean 'experiments'?)", {}},
        BadCase{"duplicate_key", kHead + "    m: 1\n    m: 2\n", "t.yaml:5:5: experiments[0].m: duplicate key", {}},
        BadCase{"plot_unknown_x",
                kHead + "    plot: {x: mm}\n",
                "t.yaml:4:15: experiments[0].plot.x: 'mm' is not a key of kind ceiling (did you mean 'm'?)",
                {}},
        BadCase{"plot_text_x",
                kHead + "    plot: {x: dtype}\n",
                "t.yaml:4:15: experiments[0].plot.x: 'dtype' is a choice key: the x axis needs an integer, number, size or "
                "duration key",
                {}},
        BadCase{"plot_no_x", kHead + "    plot: [{y: ms}]\n", "t.yaml:4:12: experiments[0].plot[0]: a plot needs x", {}},
        BadCase{"book_unknown_role",
                kHead + "    book: {source: s, rows: [{role: memcopy, ms: 1}]}\n",
                "experiments[0].book.rows[0].role: no variant of kind ceiling plays the role 'memcopy' (roles: memcpy, sgemm, "
                "blas_sgemm, fma_peak, "
                "copy, gemm) "
                "(did you mean 'memcpy'?)",
                {}},
        BadCase{"summary_bad_check",
                kHead + "    summary: {figure: ms, holds: quicker}\n",
                "t.yaml:4:34: experiments[0].summary.holds: expected faster, grows with <key>",
                {}},
        BadCase{"summary_unknown_axis", kHead + "    summary: {holds: grows with mm}\n", "'mm' is not a key of kind ceiling", {}},
        BadCase{"summary_unknown_key",
                kHead + "    summary: {claims: x}\n",
                "unknown key 'claims' in summary (did you mean 'claim'?)",
                {}},
        BadCase{"plot_unknown_key",
                kHead + "    plot: {x: m, logy: true}\n",
                "t.yaml:4:18: experiments[0].plot.logy: unknown key 'logy' in plot (did you mean 'log_y'?)",
                {}},
        BadCase{"plot_bad_bool",
                kHead + "    plot: {x: m, log_x: maybe}\n",
                "experiments[0].plot.log_x: expected true or false, got 'maybe'",
                {}},
        BadCase{"plot_y_twice", kHead + "    plot: {x: m, y: [ms, ms]}\n", "experiments[0].plot.y: 'ms' is listed twice", {}},
        BadCase{"plot_y_empty", kHead + "    plot: {x: m, y: []}\n", "experiments[0].plot.y: the list is empty", {}},
        BadCase{
            "plot_scalar", kHead + "    plot: m\n", "t.yaml:4:11: experiments[0].plot: expected a map like {x: seq, y: ms}", {}}),
    [](const ::testing::TestParamInfo<BadCase>& p) { return p.param.name; });

TEST(Spec, PlotsAreParsedAndKeptInTheResolvedSpec) {
  Spec s = parse(kHead +
                 "    m: [64, 128]\n    plot:\n      - {x: m, y: speedup, book: speedup, log_x: true, title: T}\n"
                 "      - {x: bytes}\n      - {x: m, y: [speedup, predicted speedup]}\n");
  const auto& plots = s.experiments[0].plots;
  ASSERT_EQ(plots.size(), 3u);
  EXPECT_EQ(plots[2].y, (std::vector<std::string>{"speedup", "predicted speedup"}));
  EXPECT_EQ(plots[0].x, "m");
  EXPECT_EQ(plots[0].y, std::vector<std::string>{"speedup"});
  EXPECT_EQ(plots[0].book, "speedup");
  EXPECT_EQ(plots[0].log_x, std::optional<bool>(true));
  EXPECT_FALSE(plots[0].log_y.has_value());
  EXPECT_EQ(plots[0].title, "T");
  EXPECT_EQ(plots[1].x, "bytes");
  EXPECT_EQ(plots[1].y, std::vector<std::string>{"ms"});
  const auto& j = s.experiments[0].resolved->at("plot");
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(plot_from_json(j[2]).y, plots[2].y);
  const PlotSpec back = plot_from_json(j[0]);
  EXPECT_EQ(back.x, "m");
  EXPECT_EQ(back.log_x, std::optional<bool>(true));
  EXPECT_EQ(back.title, "T");
}

TEST(Spec, UnreadableFileIsAnInputError) {
  SpecOptions opt;
  try {
    load_spec("/nonexistent/spec.yaml", opt);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/spec.yaml: cannot read: No such file or directory");
  }
}

TEST(Spec, ReferenceListsEveryKeyOfEveryKind) {
  std::string ref = spec_reference_markdown();
  for (const auto& k : common_keys()) EXPECT_NE(ref.find("`" + k.name + "`"), std::string::npos) << k.name;
  for (const char* k : {"`bytes`", "`m`", "`dtype`", "`memcpy`", "`gemm`"}) EXPECT_NE(ref.find(k), std::string::npos) << k;
}

}  // namespace
}  // namespace ib
