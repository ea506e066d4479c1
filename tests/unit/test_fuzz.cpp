// Bounded mutation fuzzing of every parser that reads a user's file (#19): the spec loader, the
// JSON Schema compiler, the regex parser, tokenizer.json, config.json, a safetensors header and
// results.json. Each target mutates real seed files (byte flips, cuts, repeats, splices of the
// format's tokens, deep nesting) and asserts that the parser answers with its documented error
// type or a result, never another exception; a crash or a sanitizer report fails the binary. In
// CI each target runs a few hundred inputs (the sanitizer job runs them under ASan+UBSan);
// longer by hand:
//   IB_FUZZ_ITERATIONS=20000 ./build/asan/bin/ib_unit_tests --gtest_filter='Fuzz.*'
// The input being tried is kept in $TMPDIR/ib-fuzz-<target>.last, for a crash's reproducer.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "constrain/vocab.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "core/plot.h"
#include "core/report.h"
#include "core/spec.h"
#include "model/config.h"
#include "model/weights.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
const std::string kSource = IB_SOURCE_DIR;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

int iterations() {
  const char* env = std::getenv("IB_FUZZ_ITERATIONS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : 150;
}

std::string scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/ib-fuzz-" + std::to_string(::getpid());
  fs::create_directories(dir);
  return dir;
}

// Mutations that reach past a parser's first check: small edits of a valid file, splices of the
// format's own tokens, numbers at the edges of their types, and nesting far past any real file.
class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<std::string> tokens) : rng_(seed), tokens_(std::move(tokens)) {
    for (const char* t : {"-1", "0", "4294967296", "-2147483649", "9223372036854775808", "1e309", "NaN", "null", "\"\"", "[]",
                          "{}", "\xff", "\xc3", "\\u0000", "\\ud800"})
      tokens_.push_back(t);
  }
  std::string operator()(const std::string& seed) {
    std::string s = seed;
    const int edits = 1 + static_cast<int>(rng_() % 4);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = rng_() % s.size();
      const size_t len = 1 + rng_() % std::min<size_t>(64, s.size() - at);
      switch (rng_() % 8) {
        case 0:
          s[at] = static_cast<char>(rng_());
          break;  // a byte
        case 1:
          s.erase(at, len);
          break;  // a cut
        case 2:
          s.insert(at, s.substr(at, len));
          break;  // a repeat
        case 3:
          s.insert(at, tokens_[rng_() % tokens_.size()]);
          break;  // a token
        case 4:
          s.replace(at, len, tokens_[rng_() % tokens_.size()]);
          break;  // a swap
        case 5:
          s.resize(at);
          break;   // truncated
        case 6: {  // deep nesting
          const std::string open = rng_() % 2 ? "[" : "{\"a\":", close = open == "[" ? "]" : "}";
          const size_t depth = 1 + rng_() % 3000;
          std::string wrapped;
          for (size_t i = 0; i < depth; ++i) wrapped += open;
          wrapped += s.substr(at, len);
          for (size_t i = 0; i < depth; ++i) wrapped += close;
          s.replace(at, len, wrapped);
          break;
        }
        default: {  // a number
          const size_t digit = s.find_first_of("0123456789", at);
          if (digit != std::string::npos) s.replace(digit, 1, tokens_[rng_() % 6]);
        }
      }
    }
    return s;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<std::string> tokens_;
};

// For JSON inputs, most byte edits only reach the JSON parser. Edits of the parsed tree reach the
// reader behind it: a value swapped for an edge value or for another subtree, a key dropped, a
// list grown, a value wrapped in deep nesting.
class JsonMutator {
 public:
  explicit JsonMutator(uint64_t seed) : rng_(seed) {}
  std::string operator()(const std::string& seed) {
    nlohmann::ordered_json j;
    try {
      j = ib::parse_json<nlohmann::ordered_json>(seed);
    } catch (const nlohmann::json::exception&) {
      return seed;
    }
    const int edits = 1 + static_cast<int>(rng_() % 3);
    for (int e = 0; e < edits; ++e) edit(&j);
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

 private:
  void collect(nlohmann::ordered_json* j, std::vector<nlohmann::ordered_json*>* out) {
    out->push_back(j);
    if (j->is_structured())
      for (auto& v : *j) collect(&v, out);
  }
  nlohmann::ordered_json edge_value() {
    switch (rng_() % 12) {
      case 0:
        return -1;
      case 1:
        return 0;
      case 2:
        return int64_t{1} << 31;
      case 3:
        return std::numeric_limits<int64_t>::max();
      case 4:
        return std::numeric_limits<uint64_t>::max();
      case 5:
        return 1e308;
      case 6:
        return -0.5;
      case 7:
        return nullptr;
      case 8:
        return true;
      case 9:
        return "";
      case 10:
        return nlohmann::ordered_json::array();
      default:
        return nlohmann::ordered_json::object();
    }
  }
  void edit(nlohmann::ordered_json* root) {
    std::vector<nlohmann::ordered_json*> nodes;
    collect(root, &nodes);
    nlohmann::ordered_json* n = nodes[rng_() % nodes.size()];
    switch (rng_() % 6) {
      case 0:
        *n = edge_value();
        break;
      case 1:
        *n = nlohmann::ordered_json(*nodes[rng_() % nodes.size()]);
        break;  // a copy of another subtree
      case 2:
        if (n->is_object() && !n->empty()) {
          auto it = n->begin();
          std::advance(it, static_cast<long>(rng_() % n->size()));
          n->erase(it.key());
        } else if (n->is_array() && !n->empty()) {
          n->erase(n->begin() + static_cast<long>(rng_() % n->size()));
        }
        break;
      case 3:
        if (n->is_array() && !n->empty()) {
          const nlohmann::ordered_json item = (*n)[rng_() % n->size()];
          for (size_t k = rng_() % 2000; k > 0; --k) n->push_back(item);
        }
        break;
      case 4:
        // Moved, not copied, into each new level: copying made this quadratic in the depth.
        for (size_t k = 1 + rng_() % 2000; k > 0; --k) {
          nlohmann::ordered_json level = rng_() % 2 ? nlohmann::ordered_json::array() : nlohmann::ordered_json::object();
          if (level.is_array())
            level.push_back(std::move(*n));
          else
            level["a"] = std::move(*n);
          *n = std::move(level);
        }
        break;
      default:
        if (n->is_string()) {
          std::string s = n->get<std::string>();
          if (!s.empty()) s[rng_() % s.size()] = static_cast<char>(rng_());
          s += std::string(rng_() % 2 ? 0 : rng_() % 70000, 'x');
          *n = s;
        } else if (n->is_number()) {
          *n = n->get<double>() * -1e6;
        }
    }
  }
  std::mt19937_64 rng_;
};

// Runs `parse` on `iterations()` mutations of the seeds. `allowed` says whether an exception is one
// the parser documents; any other fails the test, naming the input's file.
template <class Parse, class Allowed>
void fuzz(const std::string& target, const std::vector<std::string>& seeds, std::vector<std::string> tokens, Parse parse,
          Allowed allowed) {
  ASSERT_FALSE(seeds.empty());
  Mutator mutate(std::hash<std::string>{}(target), std::move(tokens));
  JsonMutator mutate_json(std::hash<std::string>{}(target) + 1);
  const bool json =
      seeds[0].find_first_not_of(" \n\t") != std::string::npos && seeds[0][seeds[0].find_first_not_of(" \n\t")] == '{';
  const std::string last = scratch_dir() + "/../ib-fuzz-" + target + ".last";
  int refused = 0, accepted = 0;
  for (int i = 0; i < iterations(); ++i) {
    const std::string& seed = seeds[static_cast<size_t>(i) % seeds.size()];
    const std::string input = json && i % 4 != 3 ? mutate_json(seed) : mutate(seed);  // JSON: 3 tree edits for 1 byte edit
    write_all(last, input);
    try {
      parse(input);
      ++accepted;
    } catch (const std::exception& e) {
      if (!allowed(e)) {
        ADD_FAILURE() << target << ": input " << i << " (kept in " << last << ") threw an undocumented " << typeid(e).name()
                      << ": " << std::string(e.what()).substr(0, 300);
        return;
      }
      ++refused;
    }
  }
  ::unlink(last.c_str());
  ::testing::Test::RecordProperty("accepted", accepted);
  ::testing::Test::RecordProperty("refused", refused);
}

bool is_input_error(const std::exception& e) { return dynamic_cast<const InputError*>(&e) != nullptr; }

std::vector<std::string> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ext) out.push_back(read_all(entry.path().string()));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Fuzz, SpecLoader) {
  std::vector<std::string> seeds;
  for (const char* f : {"ceiling", "attention", "kvcache", "prefix", "specdec", "decode", "constrain"})
    seeds.push_back(read_all(kSource + "/experiments/" + f + ".yaml"));
  SpecOptions options;
  fuzz(
      "spec", seeds,
      {"- ",
       ": ",
       "[",
       "]",
       "{",
       "}",
       "&a ",
       "*a",
       "<<: ",
       "!!binary ",
       "experiments:",
       "variants:",
       "book:",
       "plot:",
       "cpu:",
       "skip:",
       "\n  - name: x\n    kind: ceiling\n",
       "1GiB",
       "32K",
       "10%",
       "1e-300s"},
      [&](const std::string& text) { parse_spec(text, "fuzz.yaml", options); }, is_input_error);
}

TEST(Fuzz, JsonSchemaCompiler) {
  std::vector<std::string> seeds = files_in(kSource + "/experiments/schemas", ".json");
  seeds.push_back(
      R"({"oneOf":[{"required":["a"]},{"required":["b"]}],"properties":{"a":{"type":"string","pattern":"^[a-z]{2,5}$"},"b":{"type":"integer","minimum":-5,"maximum":70000}}})");
  seeds.push_back(R"({"type":"array","items":{"$ref":"#/$defs/n"},"uniqueItems":true,"$defs":{"n":{"enum":[1,2,"x",null]}}})");
  constrain::SchemaOptions options;
  options.max_product_states = 20'000;
  options.max_compile_steps = 500;
  constrain::CompileLimits limits;
  limits.max_dfa_states = 20'000;
  limits.max_nfa_states = 200'000;
  limits.max_set_entries = 2'000'000;
  fuzz(
      "schema", seeds,
      {"\"type\":",
       "\"$ref\":\"#\"",
       "\"allOf\":[",
       "\"anyOf\":[",
       "\"oneOf\":[",
       "\"not\":",
       "\"if\":",
       "\"then\":",
       "\"items\":",
       "\"prefixItems\":[",
       "\"pattern\":\"(a|b)*c{3,}\"",
       "\"format\":\"date\"",
       "\"enum\":[",
       "\"minimum\":",
       "\"multipleOf\":0.1",
       "\"minLength\":",
       "\"maxItems\":",
       "\"dependentSchemas\":{",
       "\"$schema\":\"http://json-schema.org/draft-04/schema#\"",
       "\"additionalProperties\":false"},
      [&](const std::string& text) {
        nlohmann::ordered_json j;
        try {
          j = ib::parse_json<nlohmann::ordered_json>(text);
        } catch (const nlohmann::json::parse_error&) {
          return;  // not JSON: the constraint loader's error, before the compiler
        }
        try {
          constrain::compile_dfa(constrain::schema_to_regex(j, options), limits);
        } catch (const constrain::SchemaError&) {
        } catch (const constrain::RegexError&) {
        }
        // The grammar path on the same input: a grammar or a refusal, and its matcher runs.
        const auto g = constrain::schema_to_grammar(j, options).grammar;
        for (const char* doc : {"{}", "[]", "\"a\"", "1", "{\"a\":[1,{\"b\":null}]}"}) constrain::grammar_matches(*g, doc);
      },
      [](const std::exception& e) {
        return dynamic_cast<const constrain::SchemaError*>(&e) || dynamic_cast<const constrain::RegexError*>(&e);
      });
}

// The server's request bodies (#48): parse_api_request answers every input with a request or a
// refusal (never an exception), and whatever it answers is valid JSON once written back.
TEST(Fuzz, ServeRequestBody) {
  const std::vector<std::string> seeds = {
      R"({"model": "m", "prompt": "def f(x):", "max_tokens": 16, "temperature": 0, "stream": true,
          "stream_options": {"include_usage": true}, "seed": 7, "top_p": 0.9, "top_k": 40, "ignore_eos": false})",
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9"}],
          "max_completion_tokens": 32, "response_format": {"type": "json_schema", "json_schema": {"name": "p",
          "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})",
      R"({"model": "m", "prompt": [1, 2, 3, 4], "max_tokens": 4, "n": 1, "stop": [], "logprobs": null, "user": "u"})",
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})"};
  fuzz(
      "serve-body", seeds,
      {"\"model\":", "\"prompt\":", "\"messages\":[", "\"max_tokens\":", "1e400", "-0", "\"\\ud800\"", "\xff", "\xc3", "null",
       "[[[[[[[[", "{\"not\":", "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":",
       "\"stream_options\":{", "true", "9223372036854775808", "\"temperature\":"},
      [&](const std::string& text) {
        for (bool chat : {false, true}) {
          serve::ApiError e;
          const std::optional<serve::ApiRequest> r = serve::parse_api_request(text, chat, e);
          if (!r) {
            EXPECT_GE(e.status, 400);
            EXPECT_LT(e.status, 500);
            EXPECT_TRUE(ib::json_accepts(serve::error_json(e))) << serve::error_json(e).substr(0, 200);
            continue;
          }
          EXPECT_TRUE(ib::json_accepts(serve::completion_json(*r, "id", 0, r->model, r->model, "stop", {1, 1})));
          EXPECT_TRUE(ib::json_accepts(serve::stream_chunk(*r, "id", 0, r->model, r->model, "", true).substr(6)));
        }
      },
      [](const std::exception&) { return false; });
}

TEST(Fuzz, RegexParser) {
  const std::vector<std::string> seeds = {"^[a-z]+(-[a-z0-9]+)*$",
                                          "\\d{3}-\\d{4}",
                                          "(?:ab|cd)*e?f+",
                                          "[^\\s\"]{1,20}",
                                          "\\u00e9|\\u{1F600}|[\\x00-\\x1f]",
                                          "a{2,}b{0,3}(c|d|)",
                                          "^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$"};
  constrain::CompileLimits limits;
  limits.max_dfa_states = 20'000;
  limits.max_nfa_states = 200'000;
  limits.max_set_entries = 2'000'000;
  fuzz(
      "regex", seeds, {"(", ")", "(?:", "(?=", "[",  "]",      "[^", "{", "}", "{99999}", "{2,1}",
                       "*", "+", "?",   "|",   "\\", "\\p{L}", "^",  "$", ".", "-"},
      [&](const std::string& p) { constrain::compile_dfa(constrain::parse_regex(p).re, limits); },
      [](const std::exception& e) { return dynamic_cast<const constrain::RegexError*>(&e) != nullptr; });
}

// Both readers of tokenizer.json: the tokenizer (encode/decode) and the constrained decoder's vocabulary.
TEST(Fuzz, TokenizerJson) {
  const std::vector<std::string> seeds = {read_all(kSource + "/tests/data/hf/models/qwen2-tokenizer/tokenizer.json"),
                                          read_all(kSource + "/tests/data/hf/models/llama-spm-tokenizer/tokenizer.json")};
  const std::string dir = scratch_dir();
  int n = 0;
  fuzz(
      "tokenizer", seeds,
      {"\"type\":\"Sequence\",", "\"normalizers\":[", "\"decoders\":[", "\"pretokenizers\":[", "\"id\":", "\"vocab\":{",
       "\"merges\":[", "\"added_tokens\":[", "\"special\":true", "\"<0xZZ>\"", "\"Ġ\""},
      [&](const std::string& text) {
        // A path per input: both readers cache by path.
        const std::string path = dir + "/tokenizer-" + std::to_string(n++) + ".json";
        write_all(path, text);
        const auto t = tokenizer::Tokenizer::load(path);
        const std::vector<int32_t> ids = t->encode("Hello, wörld!\n\tdef f(x): return x", true);
        t->decode(ids, false);
        constrain::load_vocabulary(path);
        ::unlink(path.c_str());
      },
      [](const std::exception& e) { return is_input_error(e) || dynamic_cast<const std::runtime_error*>(&e) != nullptr; });
}

TEST(Fuzz, ConfigJson) {
  std::vector<std::string> seeds;
  for (const auto& entry : fs::directory_iterator(kSource + "/tests/data/hf/models"))
    if (fs::exists(entry.path() / "config.json")) seeds.push_back(read_all((entry.path() / "config.json").string()));
  std::sort(seeds.begin(), seeds.end());
  fuzz(
      "config", seeds,
      {"\"num_attention_heads\":", "\"head_dim\":", "\"rope_scaling\":{", "\"rope_type\":\"yarn\",", "\"layer_types\":[",
       "\"sliding_window\":", "\"max_window_layers\":", "\"torch_dtype\":\"float8\""},
      [](const std::string& text) { model::config_from_hf_json(text, "fuzz/config.json"); }, is_input_error);
}

// The header of a real checkpoint mutated (its length prefix kept consistent half of the time),
// its tensor data after it as it was; then every tensor read.
TEST(Fuzz, SafetensorsHeader) {
  const std::string src = kSource + "/tests/data/hf/models/llama-v5";
  const std::string file = read_all(src + "/model.safetensors");
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  const std::string header = file.substr(8, len), data = file.substr(8 + len);
  const model::ModelConfig config = model::config_from_hf(src);
  const std::string dir = scratch_dir() + "/ckpt";
  fs::create_directories(dir);
  write_all(dir + "/config.json", read_all(src + "/config.json"));
  int n = 0;
  fuzz(
      "safetensors", {header},
      {"\"dtype\":\"F64\"", "\"dtype\":\"BF16\"", "\"shape\":[", "\"data_offsets\":[", "\"__metadata__\":{"},
      [&](const std::string& h) {
        std::string bytes(8, '\0');
        uint64_t l = n++ % 2 ? h.size() : h.size() + static_cast<uint64_t>(n % 7) - 3;
        for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((l >> (8 * i)) & 0xFF);
        write_all(dir + "/model.safetensors", bytes + h + data);
        const auto w = model::safetensors_weights(config, dir);
        for (const auto& spec : model::tensor_specs(config)) {
          std::vector<float> buf(static_cast<size_t>(spec.elems()));
          w->read(spec, buf.data());
        }
      },
      is_input_error);
}

// results.json as plot and compare read it: parsed, then drawn (the report and every plot).
TEST(Fuzz, ResultsJson) {
  const std::vector<std::string> seeds = {read_all(kSource + "/results/h200/attention-flash-evolution.json"),
                                          read_all(kSource + "/results/cpu-amd-epyc-2t/specdec-batch.json")};
  fuzz(
      "results", seeds,
      {"\"y\":[]", "\"x\":\"\"", "\"configurations\":", "\"rows\":[", "\"samples_s\":[", "\"backend\":\"tpu\"", "\"log_x\":true",
       "\"values\":[0.3,0.30000000000000004]"},
      [](const std::string& text) {
        const ResultSet rs = results_from_json(ib::parse_json<nlohmann::json>(text));
        markdown_report(rs);
        for (const auto& e : rs.experiments) render_plots(e, rs.meta.ceilings, "fuzz");
      },
      [](const std::exception&) { return true; });  // load_results turns every std::exception into one InputError naming the file
}

}  // namespace
}  // namespace ib
