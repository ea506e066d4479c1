// Text in, text out, against transformers: checkpoints that bring their own tokenizer.json
// (tests/data/hf/models/{qwen2-tokenizer, llama-spm-tokenizer}, scripts/make-hf-fixtures) run
// through the decode and specdec kinds with `prompt_text` / `prompts`; the prompt's ids, the
// greedy continuation and its decoded text must be transformers' own (expected.json "text").
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/run_kind.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "core/spec.h"
#include "model/text_prompt.h"
#include "tokenizer/tokenizer.h"

namespace ib::model {
namespace {

namespace fs = std::filesystem;
using ib::testing::expect_all_ok;
using ib::testing::metric;
using ib::testing::run_spec_text;

const fs::path kModels = fs::path(IB_SOURCE_DIR) / "tests/data/hf/models";
constexpr const char* kFast = "{warmup: 0, min_samples: 1, min_time: 0, max_noise: 100%, timeout: 30s}";

nlohmann::json expected(const std::string& name) {
  std::ifstream in(kModels / name / "expected.json");
  EXPECT_TRUE(in.good()) << name;
  return ib::parse_json<nlohmann::json>(in);
}

// A YAML double-quoted scalar of `s` (JSON's escapes are YAML's).
std::string yaml_quote(const std::string& s) { return nlohmann::json(s).dump(); }

std::string text_of(const Row& r, const std::string& key) {
  for (const auto& [k, v] : r.texts)
    if (k == key) return v;
  ADD_FAILURE() << r.variant << " has no text '" << key << "'";
  return {};
}

class TextCase : public ::testing::TestWithParam<std::string> {};

TEST_P(TextCase, TheTokenizerEncodesThePromptAsTransformersDoes) {
  const auto e = expected(GetParam());
  const auto& t = e.at("text");
  auto tok = tokenizer::Tokenizer::load((kModels / GetParam()).string());
  EXPECT_EQ(tok->encode(t.at("prompt").get<std::string>(), true), t.at("prompt_ids").get<std::vector<int32_t>>());
  EXPECT_EQ(tok->decode(t.at("new_ids").get<std::vector<int32_t>>()), t.at("new_text").get<std::string>());
}

TEST_P(TextCase, DecodeGeneratesTransformersGreedyText) {
  const auto e = expected(GetParam());
  const auto& t = e.at("text");
  const std::string dir = (kModels / GetParam()).string();
  const int n = static_cast<int>(t.at("new_ids").size());
  auto r = run_spec_text(kFast, "  - {name: d, kind: decode, variants: [cpu_generate], model: checkpoint, weights: " +
                                    yaml_quote(dir) + ", prompt_text: " + yaml_quote(t.at("prompt").get<std::string>()) +
                                    ", new_tokens: " + std::to_string(n) + ", temperature: 0}");
  expect_all_ok(r, 1);
  const Row& row = r.rows[0];
  EXPECT_EQ(metric(row, "prompt tokens"), static_cast<double>(t.at("prompt_ids").size()));
  EXPECT_EQ(text_of(row, "prompt"), t.at("prompt").get<std::string>());
  EXPECT_EQ(text_of(row, "output"), t.at("new_text").get<std::string>());
  // The note says what ran: the checkpoint's settings and the prompt.
  EXPECT_NE(row.message.find("rope theta"), std::string::npos) << row.message;
  EXPECT_NE(row.message.find("prompt tokens"), std::string::npos) << row.message;
}

TEST_P(TextCase, SpecdecVerifiesTowardsTransformersGreedyText) {
  const auto e = expected(GetParam());
  const auto& t = e.at("text");
  const std::string dir = (kModels / GetParam()).string();
  const int n = static_cast<int>(t.at("new_ids").size());
  auto r = run_spec_text(kFast, "  - {name: s, kind: specdec, variants: [cpu_ngram], target: checkpoint, target_weights: " +
                                    yaml_quote(dir) + ", prompt_text: " + yaml_quote(t.at("prompt").get<std::string>()) +
                                    ", new_tokens: " + std::to_string(n) + ", k: 3}");
  expect_all_ok(r, 1);
  EXPECT_EQ(text_of(r.rows[0], "output"), t.at("new_text").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TextCase, ::testing::Values("qwen2-tokenizer", "llama-spm-tokenizer"),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string s = param.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

TEST(TextPrompt, ChatMessagesThroughTheTemplateAreTransformersRenderedPrompt) {
  const auto e = expected("qwen2-tokenizer");
  const auto& chat = e.at("text").at("chat");
  const fs::path jsonl = fs::temp_directory_path() / ("ib_chat_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(jsonl);
    out << nlohmann::json{{"messages", chat.at("messages")}}.dump() << "\n";
  }
  const std::string dir = (kModels / "qwen2-tokenizer").string();
  auto r =
      run_spec_text(kFast, "  - {name: d, kind: decode, variants: [cpu_prefill], model: checkpoint, weights: " + yaml_quote(dir) +
                               ", prompts: " + yaml_quote(jsonl.string()) +
                               ", template: " + yaml_quote(chat.at("template").get<std::string>()) + "}");
  fs::remove(jsonl);
  expect_all_ok(r, 1);
  EXPECT_EQ(text_of(r.rows[0], "prompt"), chat.at("rendered").get<std::string>());
  EXPECT_EQ(metric(r.rows[0], "prompt tokens"), static_cast<double>(chat.at("rendered_ids").size()));
  auto tok = tokenizer::Tokenizer::load(dir);
  EXPECT_EQ(tok->encode(chat.at("rendered").get<std::string>(), true), chat.at("rendered_ids").get<std::vector<int32_t>>());
}

TEST(TextPrompt, PrefixCachingServesATextSystemPromptAndTextQueries) {
  const std::string dir = (kModels / "qwen2-tokenizer").string();
  const std::string system = "You are the build bot. Answer in one line, and say when the servers are back.";
  const fs::path jsonl = fs::temp_directory_path() / ("ib_queries_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(jsonl);
    for (const char* q : {" When is the build back?", " Which jobs were lost?", " Can I restart mine?"})
      out << nlohmann::json{{"prompt", q}}.dump() << "\n";
  }
  auto r = run_spec_text(kFast,
                         "  - {name: p, kind: prefix-system-prompt, variants: [cpu_none, cpu_radix], baseline: cpu_none, model: "
                         "checkpoint, weights: " +
                             yaml_quote(dir) + ", system_text: " + yaml_quote(system) +
                             ", queries: " + yaml_quote(jsonl.string()) + ", reference_runs: 1}");
  fs::remove(jsonl);
  expect_all_ok(r, 2);
  auto tok = tokenizer::Tokenizer::load(dir);
  const double system_tokens = static_cast<double>(tok->encode(system, true).size());
  for (const Row& row : r.rows) {
    EXPECT_EQ(metric(row, "system prompt tokens"), system_tokens) << row.variant;
    EXPECT_EQ(text_of(row, "system_prompt"), system);
  }
  EXPECT_GT(metric(r.rows[1], "hit rate"), 50.0);  // the radix cache reuses the system prompt
  EXPECT_EQ(metric(r.rows[0], "hit rate"), 0.0);
}

TEST(TextPrompt, BadInputIsASpecErrorNamingTheKey) {
  auto error_of = [](const std::string& body) {
    try {
      parse_spec(std::string("experiments:\n") + body, "t.yaml", SpecOptions{});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // A preset with random weights has no tokenizer.json: `tokenizer: auto` cannot work.
  EXPECT_NE(error_of("  - {name: d, kind: decode, variants: [cpu_prefill], prompt_text: hi}").find("tokenizer"),
            std::string::npos);
  // Two prompt sources at once.
  EXPECT_NE(error_of("  - {name: d, kind: decode, variants: [cpu_prefill], tokenizer: gpt2, prompt_text: hi, prompt_file: x}")
                .find("one of"),
            std::string::npos);
  // A prompt file that is not there.
  EXPECT_NE(error_of("  - {name: d, kind: decode, variants: [cpu_prefill], tokenizer: gpt2, prompt_file: /no/such/file}")
                .find("prompt_file"),
            std::string::npos);
  // Queries without the system prompt they follow.
  EXPECT_NE(error_of("  - {name: p, kind: prefix-system-prompt, variants: [cpu_none], tokenizer: gpt2, queries: x.jsonl}")
                .find("queries"),
            std::string::npos);
  // A tokenizer whose ids run past the model's vocabulary: gpt2's 50,257 ids against tiny's 512.
  EXPECT_NE(error_of("  - {name: d, kind: decode, variants: [cpu_prefill], model: tiny, tokenizer: gpt2, prompt_text: hi}")
                .find("50257 ids"),
            std::string::npos);
}

TEST(TextPrompt, ShortTextIsOneLineAndCutAtAWholeCharacter) {
  EXPECT_EQ(short_text("a\nb|c"), "a⏎b¦c");
  EXPECT_EQ(short_text("héllo wörld", 5), "héllo…");
}

}  // namespace
}  // namespace ib::model
