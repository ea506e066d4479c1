// Malformed specs and arguments through the real binary: each a one-line error naming the file,
// line and key, exit code 2, and nothing written.
#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "infer_bench_binary.h"

namespace ib::test {
namespace {

struct Malformed {
  const char* name;
  std::string spec;                // written to bad.yaml ("" = do not write)
  std::vector<std::string> extra;  // more arguments
  std::string expected;            // in the one-line error
};

// Shown by gtest and ctest instead of the struct's bytes.
void PrintTo(const Malformed& m, std::ostream* os) { *os << m.name; }

class CliMalformed : public ::testing::TestWithParam<Malformed> {};

const std::string kHead = "experiments:\n  - name: a\n    kind: ceiling\n    variants: [memcpy]\n";

TEST_P(CliMalformed, OneLineErrorExitTwoAndNothingWritten) {
  const Malformed& c = GetParam();
  std::string dir = make_temp_dir();
  if (!c.spec.empty()) write_text(dir + "/bad.yaml", c.spec);
  write_text(dir + "/file.txt", "not a directory");
  std::vector<std::string> args = {kBinary, "run", "bad.yaml", "--backend", "cpu"};
  args.insert(args.end(), c.extra.begin(), c.extra.end());
  ProcessOptions o;
  o.cwd = dir;
  auto r = run_process(args, o);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(c.expected), std::string::npos) << "stderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::vector<std::string> expected_files = {"file.txt"};
  if (!c.spec.empty()) expected_files.insert(expected_files.begin(), "bad.yaml");
  EXPECT_EQ(list_files(dir), expected_files);  // no results/, no run directory, no partial files
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliMalformed,
    ::testing::Values(
        Malformed{"yaml_syntax", "experiments: [\n  - {name: a\n", {}, "bad.yaml:2:3: YAML syntax error"},
        Malformed{"unknown_key",
                  kHead + "    byts: 1MiB\n",
                  {},
                  "bad.yaml:5:5: experiments[0].byts: unknown key 'byts' for kind ceiling (did you mean 'bytes'?)"},
        Malformed{"wrong_type",
                  kHead + "    bytes: lots\n",
                  {},
                  "bad.yaml:5:12: experiments[0].bytes: expected a size like 4096, 64MiB or 80GB, got 'lots'"},
        Malformed{"negative_size",
                  kHead + "    bytes: -64MiB\n",
                  {},
                  "bad.yaml:5:12: experiments[0].bytes: must be at least 4 KiB, got -64 MiB"},
        Malformed{"int_past_int32",
                  kHead + "    bytes: 1MiB\n  - name: b\n    kind: attention\n    seq: [64, 3000000000]\n",
                  {},
                  "bad.yaml:8:15: experiments[1].seq[1]: must be at most 2147483647, got 3000000000"},
        Malformed{"int_suffix_overflow",
                  "experiments:\n  - name: a\n    kind: attention\n    seq: 9223372036854775807K\n",
                  {},
                  "bad.yaml:4:10: experiments[0].seq: expected an integer, got '9223372036854775807K'"},
        Malformed{"prefix_query_range",
                  "experiments:\n  - name: a\n    kind: prefix-cost\n    query_min: 10\n    query_max: 5\n",
                  {},
                  "bad.yaml:5:16: experiments[0].query_max: query_max 5 is below query_min 10"},
        Malformed{"prefix_shares",
                  "experiments:\n  - name: a\n    kind: prefix-mixed\n    chat_share: 0.8\n    fewshot_share: 0.5\n",
                  {},
                  "bad.yaml:5:20: experiments[0].fewshot_share: chat_share 0.8 + fewshot_share 0.5 exceeds 1"},
        Malformed{"empty_axis",
                  kHead + "    bytes: []\n",
                  {},
                  "bad.yaml:5:12: experiments[0].bytes: empty list: an axis needs at least one value"},
        Malformed{"unknown_kind",
                  "experiments:\n  - name: a\n    kind: attentoin\n",
                  {},
                  "bad.yaml:3:11: experiments[0].kind: unknown kind 'attentoin'"},
        Malformed{"unknown_variant",
                  "experiments:\n  - name: a\n    kind: ceiling\n    variants: [memcopy]\n",
                  {},
                  "bad.yaml:4:16: experiments[0].variants: unknown variant 'memcopy' of kind ceiling (did you mean 'memcpy'?)"},
        Malformed{"missing_required_key",
                  "experiments:\n  - kind: ceiling\n",
                  {},
                  "bad.yaml:2:5: experiments[0]: missing required key 'name'"},
        Malformed{"duplicate_name",
                  kHead + "  - name: a\n    kind: ceiling\n",
                  {},
                  "bad.yaml:5:11: experiments[1].name: duplicate experiment name 'a' (first at line 2)"},
        Malformed{"bad_set",
                  kHead,
                  {"--set", "bites=1MiB"},
                  "--set 'bites=1MiB': no experiment in bad.yaml has a key 'bites' (did you mean 'bytes'?)"},
        Malformed{"unreadable_file", "", {}, "bad.yaml: cannot read: No such file or directory"},
        Malformed{"unwritable_output",
                  kHead,
                  {"--output", "file.txt/run"},
                  "--output file.txt/run: cannot create file.txt/run: Not a directory"},
        Malformed{"bad_memory_limit", kHead, {"--memory-limit", "lots"}, "--memory-limit 'lots': expected a size like 80GiB"},
        Malformed{"bad_format", kHead, {"--format", "xml"}, "--format 'xml': expected md, csv or json"},
        Malformed{"bad_only", kHead, {"--only", "b"}, "--only b: no such experiment in bad.yaml"},
        Malformed{"negative_warmup", kHead, {"--warmup", "-5"}, "--warmup: must be at least 0"},
        Malformed{"negative_seed", kHead, {"--seed", "-3"}, "--seed: must be at least 0"},
        Malformed{"negative_min_samples", kHead, {"--min-samples", "-1"}, "--min-samples: must be at least 1"},
        Malformed{"bad_max_noise", kHead, {"--max-noise", "2"}, "--max-noise '2': expected a fraction in (0, 1]"},
        Malformed{"model_vocab_below_tokenizer",
                  "experiments:\n  - name: a\n    kind: constrain-generate\n    model: tiny\n",
                  {},
                  "bad.yaml:4:12: experiments[0].model: model 'tiny' has 512 token ids, fewer than the 32000 tokens of vocab "
                  "'llama2'"}),
    [](const ::testing::TestParamInfo<Malformed>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace ib::test
