// #48's corrupt-file sweep: copies of a trained checkpoint (ib-draft-1m) and of a PEFT adapter
// with one thing wrong each: every key of every JSON file (and of its small nested objects)
// removed or given a value of the wrong type or range, each file cut short, the safetensors
// headers' length, dtypes, shapes and offsets edited, a weight made NaN. Each copy loads the way
// serve and run load it, and either loads or fails with an InputError of one line naming the file
// (and the key, where a key was edited): never a crash, a hang, another exception, or a library's
// words.
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "constrain/vocab.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/model_choice.h"
#include "tokenizer/tokenizer.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kModel = fs::path(IB_SOURCE_DIR) / "data/models/ib-draft-1m";
const fs::path kAdapter = fs::path(IB_SOURCE_DIR) / "data/adapters/mlp-regex-r2";

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary | std::ios::trunc) << s; }

// A scratch copy of the model and the adapter; each case edits one file and restores it.
class Corrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("ib-corrupt-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    fs::copy(kModel, root_ / "model");
    fs::copy(kAdapter, root_ / "adapter");
  }
  void TearDown() override { fs::remove_all(root_); }

  // Where `file` lives: the adapter's directory for adapter_*, else the model's.
  fs::path path_of(const std::string& file) const { return root_ / (file.rfind("adapter", 0) == 0 ? "adapter" : "model") / file; }

  // Loads what `file` feeds, as serve does: "" when it loads, else the InputError's text.
  std::string load(const std::string& file) {
    const std::string model = (root_ / "model").string(), adapter = (root_ / "adapter").string();
    if (file.rfind("tokenizer", 0) == 0) {
      // What Tokenizer::load and constrain::load_vocabulary parse (both cache by path); the weights
      // are not read (loading them per case was most of this sweep's time under the sanitizers).
      const std::string path = (root_ / "model" / file).string(), text = read_bytes(path);
      tokenizer::Tokenizer::from_json(text, path);
      constrain::parse_tokenizer_json(text, path);
      return "";
    }
    model::ModelChoice m = model::choose_model("checkpoint", model, 0, "weights", "weights");
    if (file.rfind("adapter", 0) == 0) {
      model::LoraAdapter a = model::load_peft_adapter(m.config, adapter);
      model::check_adapter_fits(m.config, a);
    } else {
      auto engine = model::make_cpu_model(m.config, *m.weights);
    }
    return "";
  }

  // One case: `file` (under model/ or adapter/) holds `bytes`; `key` is the key edited ("" for
  // none). What went wrong is added to problems_.
  void expect_clean(const std::string& file, const std::string& bytes, const std::string& key, const std::string& what,
                    bool must_refuse = false) {
    const fs::path path = path_of(file);
    const std::string good = read_bytes(path);
    write_bytes(path, bytes);
    ++cases_;
    std::string message;
    try {
      message = load(file);
    } catch (const InputError& e) {
      message = e.what();
      if (message.empty()) message = "(empty message)";
      if (message.find('\n') != std::string::npos)
        problems_.push_back(file + ", " + what + ": more than one line: " + message);
      else if (message.find(file) == std::string::npos)
        problems_.push_back(file + ", " + what + ": the file is not named: " + message);
      else if (!key.empty() && message.find(key) == std::string::npos)
        problems_.push_back(file + ", " + what + ": the key '" + key + "' is not named: " + message);
    } catch (const std::exception& e) {
      problems_.push_back(file + ", " + what + ": not an InputError: " + e.what());
    }
    if (message.empty() && must_refuse) problems_.push_back(file + ", " + what + ": loaded");
    write_bytes(path, good);
  }

  // Every key (and the keys of nested objects of at most 12 keys) removed or replaced.
  void sweep_json(const std::string& file) {
    const std::string text = read_bytes(path_of(file));
    const Json good = ib::parse_json<Json>(text);
    const std::vector<Json> wrong = {nullptr, "x", -1, 1e300, 0.5, Json::array(), Json::object(), true, int64_t{1} << 40};
    std::function<void(const Json::json_pointer&, const Json&)> walk = [&](const Json::json_pointer& at, const Json& node) {
      for (auto it = node.begin(); it != node.end(); ++it) {
        const Json::json_pointer p = at / it.key();
        Json edited = good;
        edited.at(at).erase(it.key());
        expect_clean(file, edited.dump(), "", "without " + p.to_string());
        for (const Json& w : wrong) {
          if (w == it.value()) continue;
          edited = good;
          edited[p] = w;
          expect_clean(file, edited.dump(), it.key(), p.to_string() + " = " + w.dump());
        }
        if (it.value().is_object() && it.value().size() <= 12) walk(p, it.value());
      }
    };
    walk(Json::json_pointer(), good);
    for (size_t cut : {size_t{0}, size_t{1}, text.size() / 3, text.size() / 2, text.rfind('}')})
      expect_clean(file, text.substr(0, cut), "", "cut to " + std::to_string(cut) + " bytes", true);
    expect_clean(file, "\xff\xfe" + text, "", "bytes before the JSON", true);
  }

  // The 8-byte header length, the header's entries, the data cut short, a NaN weight.
  void sweep_safetensors(const std::string& file) {
    const std::string bytes = read_bytes(path_of(file));
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
    const Json header = ib::parse_json<Json>(bytes.substr(8, n));
    const std::string data = bytes.substr(8 + n);
    auto with_header = [&](const std::string& h, uint64_t len) {
      std::string out(8, '\0');
      for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
      return out + h + data;
    };
    for (uint64_t len : {uint64_t{0}, uint64_t{1}, n - 1, n + 1, uint64_t{bytes.size()}, uint64_t{1} << 62, ~uint64_t{0}})
      expect_clean(file, with_header(header.dump(), len), "", "header length " + std::to_string(len), true);
    for (size_t cut : {size_t{0}, size_t{4}, size_t{8}, size_t{8 + n / 2}, size_t{8 + n}, bytes.size() / 2, bytes.size() - 1})
      expect_clean(file, bytes.substr(0, cut), "", "cut to " + std::to_string(cut) + " bytes", true);
    std::vector<std::string> names;
    for (auto it = header.begin(); it != header.end(); ++it)
      if (it.key() != "__metadata__") names.push_back(it.key());
    const std::vector<std::pair<std::string, std::vector<Json>>> edits = {
        {"dtype", {"F64", "Q9", 7, nullptr}},
        {"shape", {Json::array(), Json::array({-1}), Json::array({int64_t{1} << 40, int64_t{1} << 40}), Json::array({"a"}), 3}},
        {"data_offsets", {Json::array({0}), Json::array({8, 4}), Json::array({0, int64_t{1} << 50}), "x", Json::array({-8, 0})}},
    };
    for (const std::string& name : {names.front(), names[names.size() / 2], names.back()})
      for (const auto& [field, values] : edits)
        for (const Json& v : values) {
          Json h = header;
          h[name][field] = v;
          const std::string d = h.dump();
          expect_clean(file, with_header(d, d.size()), "", name + "." + field + " = " + v.dump(), true);
        }
    Json h = header;
    h[names.front()].erase("dtype");
    expect_clean(file, with_header(h.dump(), h.dump().size()), "", "no dtype", true);
    // A NaN in the first tensor's data (an f32 or bf16 NaN pattern, whatever the dtype).
    std::string nan = bytes;
    const uint64_t at = 8 + n + header[names.front()]["data_offsets"][0].get<uint64_t>();
    for (uint64_t i = 0; i < 4; ++i) nan[at + i] = static_cast<char>(i % 2 == 0 ? 0xc0 : 0x7f);
    expect_clean(file, nan, "", "a NaN weight", true);
  }

  void report() {
    std::string all;
    for (const std::string& p : problems_) all += "\n  " + p;
    EXPECT_TRUE(problems_.empty()) << problems_.size() << " of " << cases_ << " corrupt copies:" << all;
  }

  fs::path root_;
  int cases_ = 0;
  std::vector<std::string> problems_;
};

TEST_F(Corrupt, CheckpointJsonFilesFailWithTheFileAndKey) {
  for (const char* f : {"config.json", "generation_config.json"}) sweep_json(f);
  report();
}

// The sweep edits the file's keys, which do not depend on the vocabulary's size: the copy keeps
// every key and the first 400 ids of the vocabulary (the byte alphabet and the merges that make
// the rest), so each of the ~360 corrupt copies parses in a fraction of the time.
void keep_first_ids(const fs::path& path, int64_t ids) {
  Json t = ib::parse_json<Json>(read_bytes(path));
  Json& model = t.at("model");
  Json vocab = Json::object();
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it)
    if (it.value().get<int64_t>() < ids) vocab[it.key()] = it.value();
  Json merges = Json::array();
  for (const Json& m : model.at("merges")) {
    const std::string a = m.at(0), b = m.at(1);
    if (vocab.contains(a) && vocab.contains(b) && vocab.contains(a + b)) merges.push_back(m);
  }
  model["vocab"] = vocab;
  model["merges"] = merges;
  write_bytes(path, t.dump());
}

TEST_F(Corrupt, TokenizerFilesFailWithTheFileAndKey) {
  keep_first_ids(path_of("tokenizer.json"), 400);
  ASSERT_EQ(load("tokenizer.json"), "") << "the smaller copy must load";
  sweep_json("tokenizer.json");
  report();
}

TEST_F(Corrupt, AdapterConfigFailsWithTheFileAndKey) {
  sweep_json("adapter_config.json");
  report();
}

TEST_F(Corrupt, SafetensorsFilesFailWithTheFileAndTensor) {
  sweep_safetensors("model.safetensors");
  sweep_safetensors("adapter_model.safetensors");
  report();
}

}  // namespace
}  // namespace ib
