// Our trained models (data/models/, scripts/train-models: the family, and the draft distilled from
// SmolLM2 as a GGUF) against transformers on the same files: tests/data/models/<model>.golden.json holds transformers' float32
// tokenization of a held-out code prompt, its logits at the last prompt position and its 24-token greedy continuation. A change
// that breaks real, trained weights (where random ones hide errors behind near-uniform logits) fails
// here in CI.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/data_dir.h"
#include "core/json_input.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ib::model {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(IB_SOURCE_DIR) / "tests/data/models";
const std::vector<std::string> kFamily = {"ib-target-16m", "ib-draft-5m", "ib-draft-1m", "smollm2-draft-16m"};

nlohmann::json golden(const std::string& name) {
  std::ifstream in(kGolden / (name + ".golden.json"));
  EXPECT_TRUE(in.good()) << name << ": run scripts/train-models (data/models/README.md)";
  return in.good() ? ib::parse_json<nlohmann::json>(in) : nlohmann::json::object();
}

class TrainedModel : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedModel, MatchesTransformersOnHeldOutCode) {
  const nlohmann::json g = golden(GetParam());
  ASSERT_TRUE(g.contains("prompt_ids"));
  const std::string dir = (fs::path(IB_SOURCE_DIR) / g["model"].get<std::string>()).string();
  const ModelConfig c = checkpoint_config(dir);
  SCOPED_TRACE(GetParam() + ": " + c.describe());

  // The checkpoint's own tokenizer (tokenizer.json, or the GGUF's tokenizer.ggml.*), read by our
  // encoder, gives transformers' ids (BOS included where the tokenizer adds one).
  const auto tok = tokenizer::Tokenizer::load(dir);
  const auto ids = tok->encode(g["prompt"].get<std::string>());
  ASSERT_EQ(ids, g["prompt_ids"].get<std::vector<int32_t>>());

  auto weights = checkpoint_weights(c, dir);
  auto m = make_cpu_model(c, *weights);
  const int n = static_cast<int>(ids.size());
  const auto want_next = g["greedy_ids"].get<std::vector<int32_t>>();
  const int s = m->new_sequence(n + static_cast<int>(want_next.size()));
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  int32_t next = -1;
  StepOutput o;
  o.logits = logits.data();
  o.next = &next;
  m->prefill(s, ids.data(), n, 1, o);

  // Last-position logits within 1e-4 relative L2 of transformers' (bf16/f16 weights, float32 compute).
  const auto want = g["last_logits"].get<std::vector<float>>();
  ASSERT_EQ(want.size(), logits.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (logits[i] - static_cast<double>(want[i])) * (logits[i] - static_cast<double>(want[i]));
    den += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-4);
  // A trained model is confident: the logits are far from uniform (random weights would not be).
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  EXPECT_GT(*hi - *lo, 5.0f);

  std::vector<int32_t> got = {next};
  while (got.size() < want_next.size()) {
    const int32_t t = got.back();
    m->decode(&s, &t, 1, o);
    got.push_back(next);
  }
  EXPECT_EQ(got, want_next);
  EXPECT_EQ(tok->decode(got), g["greedy_text"].get<std::string>());
}

// experiments/real.yaml names data/models/... relative to the repository root; from any other
// directory (ctest runs in the build tree) the bundled data directory answers for data/.
TEST(TrainedModelPaths, DataPathsResolveFromAnyDirectory) {
  EXPECT_TRUE(fs::exists(data_path("data/models/ib-target-16m/config.json")));
  EXPECT_NO_THROW(config_from_hf("data/models/ib-draft-1m"));
  EXPECT_EQ(data_path("data/no/such/file"), "data/no/such/file");        // the error then names what was given
  EXPECT_EQ(data_path("models/ib-target-16m"), "models/ib-target-16m");  // only data/ is looked up
}

INSTANTIATE_TEST_SUITE_P(Family, TrainedModel, ::testing::ValuesIn(kFamily), [](const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

}  // namespace
}  // namespace ib::model
