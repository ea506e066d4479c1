// The engine against Hugging Face transformers itself: tests/data/hf/models/<case>/ holds a
// random-init checkpoint saved by transformers (config.json in the 5.x or 4.x layout, safetensors)
// and transformers' own float32 logits for fixed token ids (every position of one forward, and the
// same positions through a KV cache), its greedy continuation, its RoPE frequencies and its layer
// types (scripts/make-hf-fixtures made them; CI has no Python). A case with "expect_error" is a
// config or checkpoint the engine must refuse, naming that key or tensor.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"

namespace ib::model {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = fs::path(IB_SOURCE_DIR) / "tests/data/hf/models";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  return ib::parse_json<nlohmann::json>(in);
}

std::vector<fs::path> cases() {
  std::vector<fs::path> v;
  if (fs::exists(kCases))
    for (const auto& e : fs::directory_iterator(kCases))
      if (fs::exists(e.path() / "expected.json")) v.push_back(e.path());
  std::sort(v.begin(), v.end());
  return v;
}

// Relative L2 error of one logits row against transformers', and whether the argmax agrees.
double row_error(const float* got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - static_cast<double>(want[i])) * (got[i] - static_cast<double>(want[i]));
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}
bool same_argmax(const float* got, const std::vector<float>& want) {
  const size_t a = static_cast<size_t>(std::max_element(got, got + want.size()) - got);
  const size_t b = static_cast<size_t>(std::max_element(want.begin(), want.end()) - want.begin());
  // A near-tie in transformers' own row is not a disagreement worth failing on.
  return a == b || std::abs(want[a] - want[b]) < 1e-4f * std::max(1.0f, std::abs(want[b]));
}

constexpr double kTolerance = 1e-4;  // relative, per logits row (the bar)

TEST(HfParity, TheFixturesAreThere) {
  // Without them every other test here would pass vacuously.
  EXPECT_GE(cases().size(), 12u) << "run scripts/make-hf-fixtures (tests/data/hf/README.md)";
}

class HfCase : public ::testing::TestWithParam<std::string> {};

TEST_P(HfCase, MatchesTransformers) {
  const fs::path dir = kCases / GetParam();
  const nlohmann::json e = read_json(dir / "expected.json");
  // Checkpoints transformers runs and the engine refuses on purpose, with the key it must name:
  // dynamic NTK recomputes the frequencies from each forward call's longest position, so a
  // cached decode would mix keys rotated by different frequencies (transformers' own
  // decode_logits differ from its logits there).
  std::string refused = GetParam() == "llama-rope-dynamic" ? "rope_type" : "";
  if (e.contains("expect_error") && !e["expect_error"].is_null()) refused = e["expect_error"].get<std::string>();
  if (!refused.empty()) {
    const std::string& key = refused;
    try {
      const ModelConfig c = config_from_hf(dir.string());
      safetensors_weights(c, dir.string());
      ADD_FAILURE() << GetParam() << ": loaded without an error (expected one naming " << key << ")";
    } catch (const InputError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(key), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    }
    return;
  }
  const ModelConfig c = config_from_hf(dir.string());
  SCOPED_TRACE(GetParam() + ": " + c.describe() + "; " + c.describe_details());

  // What the loader decided, against what transformers decided (its float32 inv_freq buffer).
  const nlohmann::json& facts = e.contains("transformers_facts") ? e["transformers_facts"] : e;
  if (facts.contains("rope_inv_freq") && facts["rope_inv_freq"].is_array()) {
    const auto want = facts["rope_inv_freq"].get<std::vector<double>>();
    const auto got = c.rope_inv_freq();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6 * std::abs(want[i]) + 1e-12) << "inv_freq " << i;
  }
  if (facts.contains("rope_attention_factor") && facts["rope_attention_factor"].is_number()) {
    EXPECT_NEAR(c.rope_attention_factor(), facts["rope_attention_factor"].get<double>(), 1e-6);
  }
  if (facts.contains("layer_types") && facts["layer_types"].is_array()) {
    const auto types = facts["layer_types"].get<std::vector<std::string>>();
    ASSERT_EQ(static_cast<int>(types.size()), c.layers);
    for (int l = 0; l < c.layers; ++l)
      EXPECT_EQ(c.window(l) > 0, types[static_cast<size_t>(l)] == "sliding_attention") << "layer " << l;
  }

  auto weights = safetensors_weights(c, dir.string());
  auto m = make_cpu_model(c, *weights);
  const auto ids = e["input_ids"].get<std::vector<int32_t>>();
  const auto logits = e["logits"].get<std::vector<std::vector<float>>>();
  const int n = static_cast<int>(ids.size()), V = c.vocab;
  ASSERT_EQ(static_cast<int>(logits.size()), n);

  // Every position of one forward pass.
  {
    const int s = m->new_sequence(n);
    std::vector<float> out(static_cast<size_t>(n) * V);
    StepOutput o;
    o.logits = out.data();
    m->prefill(s, ids.data(), n, n, o);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      const float* row = &out[static_cast<size_t>(i) * V];
      worst = std::max(worst, row_error(row, logits[static_cast<size_t>(i)]));
      EXPECT_TRUE(same_argmax(row, logits[static_cast<size_t>(i)])) << "position " << i;
    }
    EXPECT_LE(worst, kTolerance) << "prefill logits";
    RecordProperty("prefill_rel_l2", std::to_string(worst));  // in --gtest_output=json
    m->release(s);
  }
  // The same positions through the KV cache: a prefill of K tokens, then one token at a time.
  {
    const int k = e["prefill"].get<int>();
    const auto dec = e["decode_logits"].get<std::vector<std::vector<float>>>();
    ASSERT_EQ(static_cast<int>(dec.size()), n - k);
    const int s = m->new_sequence(n);
    std::vector<float> out(static_cast<size_t>(V));
    StepOutput o;
    o.logits = out.data();
    m->prefill(s, ids.data(), k, 1, o);
    EXPECT_LE(row_error(out.data(), logits[static_cast<size_t>(k - 1)]), kTolerance) << "prefill of " << k;
    double worst = 0;
    for (int i = k; i < n; ++i) {
      m->decode(&s, &ids[static_cast<size_t>(i)], 1, o);
      worst = std::max(worst, row_error(out.data(), dec[static_cast<size_t>(i - k)]));
    }
    EXPECT_LE(worst, kTolerance) << "cached decode logits";
    RecordProperty("decode_rel_l2", std::to_string(worst));
    m->release(s);
  }
  // transformers' greedy continuation, token for token.
  {
    const auto prompt = e["greedy_prompt"].get<std::vector<int32_t>>();
    const auto want = e["greedy_new"].get<std::vector<int32_t>>();
    const int s = m->new_sequence(static_cast<int>(prompt.size() + want.size()));
    int32_t next = 0;
    StepOutput o;
    o.next = &next;
    m->prefill(s, prompt.data(), static_cast<int>(prompt.size()), 1, o);
    std::vector<int32_t> got = {next};
    while (got.size() < want.size()) {
      const int32_t t = got.back();
      m->decode(&s, &t, 1, o);
      got.push_back(next);
    }
    EXPECT_EQ(got, want);
  }
}

std::vector<std::string> case_names() {
  std::vector<std::string> v;
  for (const auto& p : cases()) v.push_back(p.filename().string());
  if (v.empty()) v.push_back("none");  // TheFixturesAreThere fails then
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, HfCase, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string n = param.param;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace ib::model
