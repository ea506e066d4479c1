// LoRA adapters in the CPU engine against transformers + PEFT on the same files:
// data/adapters/ and tests/data/lora/expected.json (scripts/make-lora-fixtures) hold three adapters PEFT wrote over
// data/models/ib-draft-1m (q/v rank 8; all-linear rank 4 with rsLoRA, saved as full module paths;
// a regex over two MLP projections, rank 2) and PEFT's own float32 logits with each. The engine's
// batched path (each row its own adapter, one pass), its merged path and a plain engine on merged
// weights must all reproduce them; the reader must refuse what it does not model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"
#include "core/stats.h"
#include "model/config.h"
#include "model/engine_studies.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/weights.h"

namespace ib::model {
namespace {

namespace fs = std::filesystem;

const fs::path kLora = fs::path(IB_SOURCE_DIR) / "data/adapters";
const fs::path kExpected = fs::path(IB_SOURCE_DIR) / "tests/data/lora/expected.json";
const std::vector<std::string> kAdapters = {"qv-r8", "all-r4-rslora", "mlp-regex-r2"};

struct Fixture {
  nlohmann::json expected;
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  std::vector<int32_t> prompt;
};

Fixture load() {
  Fixture f;
  std::ifstream in(kExpected);
  EXPECT_TRUE(in.good()) << "run scripts/make-lora-fixtures";
  f.expected = ib::parse_json<nlohmann::json>(in);
  const std::string dir = (fs::path(IB_SOURCE_DIR) / f.expected["base"].get<std::string>()).string();
  f.config = config_from_hf(dir);
  f.weights = safetensors_weights(f.config, dir);
  f.prompt = f.expected["prompt_ids"].get<std::vector<int32_t>>();
  return f;
}

std::vector<float> want_logits(const Fixture& f, const std::string& adapter) {
  return adapter.empty() ? f.expected["base_last_logits"].get<std::vector<float>>()
                         : f.expected["adapters"][adapter]["last_logits"].get<std::vector<float>>();
}

// The last-position logits of a prefill of the prompt on `seq`.
std::vector<float> prefill_logits(Model& m, int seq, const std::vector<int32_t>& prompt) {
  std::vector<float> logits(static_cast<size_t>(m.config().vocab));
  StepOutput o;
  o.logits = logits.data();
  m.prefill(seq, prompt.data(), static_cast<int>(prompt.size()), 1, o);
  return logits;
}

TEST(Lora, ReadsPeftAdaptersAsPeftWroteThem) {
  const Fixture f = load();
  const LoraAdapter qv = load_peft_adapter(f.config, (kLora / "qv-r8").string());
  EXPECT_EQ(qv.rank, 8);
  EXPECT_FLOAT_EQ(qv.scaling, 2.0f);  // 16 / 8
  EXPECT_EQ(modules_label(qv.modules()), "q_proj,v_proj");
  const LoraAdapter all = load_peft_adapter(f.config, (kLora / "all-r4-rslora").string());
  EXPECT_TRUE(all.rslora);
  EXPECT_FLOAT_EQ(all.scaling, 4.0f);   // rsLoRA: 8 / sqrt(4)
  EXPECT_EQ(all.modules().size(), 7u);  // all-linear, saved by PEFT as every layer's module paths
  const LoraAdapter mlp = load_peft_adapter(f.config, (kLora / "mlp-regex-r2").string());
  EXPECT_EQ(modules_label(mlp.modules()), "gate_proj,down_proj");  // the regex's fullmatch
  EXPECT_EQ(mlp.parameters(), int64_t{2} * f.config.layers * 2 * (f.config.hidden + f.config.mlp));
}

TEST(Lora, EachAdapterMatchesPeftAloneAndInOneMixedBatch) {
  const Fixture f = load();
  auto m = make_cpu_model(f.config, *f.weights);
  std::vector<int> ids;
  for (const auto& n : kAdapters) ids.push_back(lora_adapters(*m).add_adapter(load_peft_adapter(f.config, (kLora / n).string())));
  EXPECT_GT(lora_adapters(*m).adapter_bytes(), 0);
  // Alone: one sequence per adapter, and the base model.
  for (size_t i = 0; i <= kAdapters.size(); ++i) {
    const std::string name = i < kAdapters.size() ? kAdapters[i] : "";
    const int s = m->new_sequence(64);
    lora_adapters(*m).set_adapter(s, i < kAdapters.size() ? ids[i] : -1);
    const double err = relative_l2(prefill_logits(*m, s, f.prompt), want_logits(f, name));
    EXPECT_LE(err, 1e-4) << (name.empty() ? "base" : name);
    m->release(s);
  }
  // Mixed: the four rows (three adapters and the base) in one batched pass, in a shuffled order.
  const std::vector<int> order = {2, 0, 3, 1};
  std::vector<int> seqs, counts;
  std::vector<int32_t> tokens;
  for (int i : order) {
    seqs.push_back(m->new_sequence(64));
    lora_adapters(*m).set_adapter(seqs.back(), i < 3 ? ids[static_cast<size_t>(i)] : -1);
    counts.push_back(static_cast<int>(f.prompt.size()));
    tokens.insert(tokens.end(), f.prompt.begin(), f.prompt.end());
  }
  const size_t V = static_cast<size_t>(f.config.vocab), n = f.prompt.size();
  std::vector<float> all(4 * n * V);
  StepOutput o;
  o.logits = all.data();
  m->prefill_batch(seqs.data(), counts.data(), 4, tokens.data(), o);
  for (size_t j = 0; j < order.size(); ++j) {
    const std::string name = order[j] < 3 ? kAdapters[static_cast<size_t>(order[j])] : "";
    const std::vector<float> last(all.begin() + static_cast<std::ptrdiff_t>(((j + 1) * n - 1) * V),
                                  all.begin() + static_cast<std::ptrdiff_t>((j + 1) * n * V));
    EXPECT_LE(relative_l2(last, want_logits(f, name)), 1e-4) << (name.empty() ? "base" : name) << " in the mixed batch";
  }
  // Decode steps of the mixed batch continue each row with its own adapter: PEFT's greedy tokens.
  std::vector<int32_t> cur(4), next(4);
  for (size_t j = 0; j < 4; ++j)
    cur[j] = static_cast<int32_t>(std::max_element(all.begin() + static_cast<std::ptrdiff_t>(((j + 1) * n - 1) * V),
                                                   all.begin() + static_cast<std::ptrdiff_t>((j + 1) * n * V)) -
                                  (all.begin() + static_cast<std::ptrdiff_t>(((j + 1) * n - 1) * V)));
  std::vector<std::vector<int32_t>> got(4);
  StepOutput d;
  d.next = next.data();
  for (int step = 0; step < 8; ++step) {
    for (size_t j = 0; j < 4; ++j) got[j].push_back(cur[j]);
    m->decode(seqs.data(), cur.data(), 4, d);
    cur = next;
  }
  for (size_t j = 0; j < 4; ++j) {
    if (order[j] == 3) continue;
    auto want = f.expected["adapters"][kAdapters[static_cast<size_t>(order[j])]]["greedy_ids"].get<std::vector<int32_t>>();
    want.resize(got[j].size());
    EXPECT_EQ(got[j], want) << kAdapters[static_cast<size_t>(order[j])];
  }
}

TEST(Lora, MergedWeightsAndTheMergedEngineMatchPeft) {
  const Fixture f = load();
  auto m = make_cpu_model(f.config, *f.weights);
  for (size_t i = 0; i < kAdapters.size(); ++i) {
    const LoraAdapter a = load_peft_adapter(f.config, (kLora / kAdapters[i]).string());
    // A plain engine built on W + scaling·B·A (the reference the experiments validate against).
    auto merged = merged_weights(*f.weights, f.config, a);
    auto plain = make_cpu_model(f.config, *merged);
    const int ps = plain->new_sequence(64);
    EXPECT_LE(relative_l2(prefill_logits(*plain, ps, f.prompt), want_logits(f, kAdapters[i])), 1e-4) << kAdapters[i];
    // The serving engine merging it in place of its base projections.
    const int id = lora_adapters(*m).add_adapter(a);
    lora_adapters(*m).merge_adapter(id);
    EXPECT_EQ(lora_adapters(*m).merged_adapter(), id);
    const int s = m->new_sequence(64);
    lora_adapters(*m).set_adapter(s, id);
    EXPECT_LE(relative_l2(prefill_logits(*m, s, f.prompt), want_logits(f, kAdapters[i])), 1e-4) << kAdapters[i] << " merged";
    m->release(s);
  }
  // Unmerged: the base weights again, untouched by the merges.
  lora_adapters(*m).merge_adapter(-1);
  const int s = m->new_sequence(64);
  EXPECT_LE(relative_l2(prefill_logits(*m, s, f.prompt), want_logits(f, "")), 1e-4);
  // While one adapter is merged, a row of another adapter (or of the base) is a caller's error.
  lora_adapters(*m).merge_adapter(0);
  m->truncate(s, 0);
  EXPECT_THROW(prefill_logits(*m, s, f.prompt), std::logic_error);
}

// A temporary copy of an adapter whose config gets one change.
fs::path edited(const std::string& adapter, const std::function<void(nlohmann::json&)>& edit) {
  const fs::path dir = fs::temp_directory_path() /
                       ("ib-lora-" + adapter + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kLora / adapter / "adapter_model.safetensors", dir / "adapter_model.safetensors");
  std::ifstream in(kLora / adapter / "adapter_config.json");
  nlohmann::json j = ib::parse_json<nlohmann::json>(in);
  edit(j);
  std::ofstream(dir / "adapter_config.json") << j.dump();
  return dir;
}

void expect_refused(const ModelConfig& c, const fs::path& dir, const std::string& message) {
  try {
    load_peft_adapter(c, dir.string());
    ADD_FAILURE() << dir << ": accepted; expected an error with '" << message << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Lora, RefusesWhatItDoesNotModelWithTheKeyOrTensor) {
  const Fixture f = load();
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["use_dora"] = true; }), "adapter_config.json: use_dora:");
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["r"] = 4; }),
                 "lora_A.weight': shape [8, 128], the config needs [4, 128]");
  expect_refused(f.config,
                 edited("qv-r8",
                        [](auto& j) {
                          j["target_modules"] = {"q_proj", "lm_head"};
                        }),
                 "target_modules: 'lm_head' names no projection");
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["target_modules"] = {"q_proj"}; }),
                 "v_proj.lora_A.weight' is not a LoRA A/B of a module target_modules selects");
  expect_refused(f.config,
                 edited("qv-r8",
                        [](auto& j) {
                          j["target_modules"] = {"q_proj", "v_proj", "k_proj"};
                        }),
                 "k_proj.lora_A.weight' is missing");
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["peft_type"] = "IA3"; }), "peft_type: 'IA3', only LORA");
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["modules_to_save"] = {"lm_head"}; }), "modules_to_save: is set");
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["target_modules"] = "model\\.layers\\.0\\.self_attn\\.(q|v)_proj"; }),
                 "selects q_proj in some layers only");
  // #48: a regex nested 100,000 deep crashed (std::regex recursed per level) and a catastrophic one
  // hung; both are refused naming the key, at once.
  const std::string deep = std::string(100000, '(') + "q_proj" + std::string(100000, ')');
  expect_refused(f.config, edited("qv-r8", [&](auto& j) { j["target_modules"] = deep; }), "target_modules: '(((");
  const auto start = std::chrono::steady_clock::now();
  expect_refused(f.config, edited("qv-r8", [](auto& j) { j["target_modules"] = "(.*.*)*[0-9]{2}"; }), "backtracks too much");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  // Another base model: the adapter's shapes do not fit.
  ModelConfig other = f.config;
  other.hidden = 96;
  other.head_dim = 24;
  try {
    load_peft_adapter(other, (kLora / "qv-r8").string());
    ADD_FAILURE() << "an adapter for another base shape was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("shape [8, 128], the config needs [8, 96]"), std::string::npos) << e.what();
  }
}

TEST(Lora, RandomAdaptersMoveTheLogitsMeasurablyAndDiffer) {
  const Fixture f = load();
  auto m = make_cpu_model(f.config, *f.weights);
  const auto modules = parse_modules("all", "modules");
  const LoraAdapter a = random_adapter(f.config, 16, 32, modules, 7), b = random_adapter(f.config, 16, 32, modules, 8);
  const int ia = lora_adapters(*m).add_adapter(a), ib = lora_adapters(*m).add_adapter(b);
  const int s = m->new_sequence(64);
  const std::vector<float> base = prefill_logits(*m, s, f.prompt);
  m->truncate(s, 0);
  lora_adapters(*m).set_adapter(s, ia);
  const std::vector<float> la = prefill_logits(*m, s, f.prompt);
  m->truncate(s, 0);
  lora_adapters(*m).set_adapter(s, ib);
  const std::vector<float> lb = prefill_logits(*m, s, f.prompt);
  const double da = relative_l2(la, base), dab = relative_l2(la, lb);
  EXPECT_GT(da, 0.01);
  EXPECT_LT(da, 1.0);
  EXPECT_GT(dab, 0.01);  // two seeds, two adapters
  // And the batched path agrees with a plain engine on the merged weights.
  auto merged = merged_weights(*f.weights, f.config, a);
  auto plain = make_cpu_model(f.config, *merged);
  EXPECT_LE(relative_l2(la, prefill_logits(*plain, plain->new_sequence(64), f.prompt)), 1e-4);
  EXPECT_THROW(parse_modules("q,x", "modules"), InputError);
  EXPECT_THROW(parse_modules("q,q", "modules"), InputError);
}

}  // namespace
}  // namespace ib::model
