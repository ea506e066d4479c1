// Tokenizer (lib/tokenizer): encodings and decodings against the `tokenizers` library's own
// outputs (the golden batteries of scripts/make-tokenizer-fixtures and scripts/make-hf-fixtures,
// llama.cpp's cases), small pipelines whose expected ids were computed with tokenizers 0.23.3,
// and the errors a bad tokenizer.json gets.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"
#include "tokenizer/tokenizer.h"

namespace ib::tokenizer {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kSource = IB_SOURCE_DIR;

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The tokenizer a golden file is about: a shipped one by name, or a checkpoint directory of the
// HF fixtures (tests/data/hf/models/<name>/tokenizer.json).
std::shared_ptr<const Tokenizer> tokenizer_for(const std::string& name) {
  if (fs::exists(kSource + "/data/tokenizers/" + name + ".tokenizer.json.gz")) return Tokenizer::load(name);
  return Tokenizer::load(kSource + "/tests/data/hf/models/" + name);
}

// llama.cpp's test format: inputs separated by "\n__ggml_vocab_test__\n", one line of ids each.
struct LlamaCppCases {
  std::vector<std::string> inputs;
  std::vector<Ids> ids;
};

LlamaCppCases read_llamacpp(const std::string& inp, const std::string& out) {
  LlamaCppCases c;
  const std::string text = read(inp), sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t next = text.find(sep, pos);
    if (next == std::string::npos) break;
    c.inputs.push_back(text.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream lines(read(out));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream ss(line);
    Ids ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    c.ids.push_back(ids);
  }
  return c;
}

std::string show(const Ids& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// ---- golden files ----

TEST(TokenizerGolden, Gpt2EncodeCasesOfLlamaCpp) {
  auto t = Tokenizer::load("gpt2");
  auto c = read_llamacpp(kSource + "/data/tokenizers/gpt2.encode-cases.inp", kSource + "/data/tokenizers/gpt2.encode-cases.out");
  ASSERT_EQ(c.inputs.size(), 46u);
  ASSERT_EQ(c.ids.size(), c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) EXPECT_EQ(show(t->encode(c.inputs[i], false)), show(c.ids[i])) << "case " << i;
}

class TokenizerBattery : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerBattery, MatchesTokenizersLibrary) {
  const std::string name = GetParam();
  const std::string path = kSource + "/tests/data/hf/tokenizers/" + name + ".battery.json";
  if (!fs::exists(path)) GTEST_SKIP() << path << " not written yet";
  const auto battery = ib::parse_json<nlohmann::json>(read(path));
  auto t = tokenizer_for(name);
  size_t matched = 0;
  const auto& cases = battery.at("cases");
  ASSERT_GE(cases.size(), 100u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string text = c.at("text");
    const Ids ids = t->encode(text, false), ids_special = t->encode(text, true);
    const Ids want = c.at("ids"), want_special = c.at("ids_special");
    bool ok = true;
    ok &= ids == want;
    EXPECT_EQ(show(ids), show(want)) << name << " case " << i << " ids: " << c.at("text").dump();
    ok &= ids_special == want_special;
    EXPECT_EQ(show(ids_special), show(want_special)) << name << " case " << i << " ids_special";
    std::vector<std::string> tokens;
    for (int32_t id : want) tokens.push_back(t->id_to_token(id).value_or("?"));
    ok &= tokens == c.at("tokens").get<std::vector<std::string>>();
    EXPECT_EQ(tokens, c.at("tokens").get<std::vector<std::string>>()) << name << " case " << i << " tokens";
    const std::string decoded = t->decode(want_special, false), decoded_skip = t->decode(want_special, true);
    ok &= decoded == c.at("decoded").get<std::string>() && decoded_skip == c.at("decoded_skip").get<std::string>();
    EXPECT_EQ(decoded, c.at("decoded").get<std::string>()) << name << " case " << i << " decode";
    EXPECT_EQ(decoded_skip, c.at("decoded_skip").get<std::string>()) << name << " case " << i << " decode skip_special_tokens";
    matched += ok;
  }
  std::printf("[ battery  ] %s: %zu of %zu cases match tokenizers %s\n", name.c_str(), matched, cases.size(),
              battery.value("tokenizers", std::string("?")).c_str());
}

std::string test_name(const ::testing::TestParamInfo<std::string>& p) {
  std::string n = p.param;
  for (auto& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(TokenizerShipped, TokenizerBattery,
                         ::testing::Values("gpt2", "llama2", "deepseek-llm", "qwen2-tokenizer", "llama-spm-tokenizer"),
                         test_name);

class TokenizerLlamaCpp : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerLlamaCpp, MatchesLlamaCppCases) {
  const std::string name = GetParam();
  const std::string base = kSource + "/tests/data/hf/tokenizers/" + name + ".llamacpp";
  if (!fs::exists(base + ".inp") || !fs::exists(base + ".out")) GTEST_SKIP() << base << ".inp/.out not written yet";
  auto t = tokenizer_for(name);
  auto c = read_llamacpp(base + ".inp", base + ".out");
  ASSERT_EQ(c.ids.size(), c.inputs.size());
  ASSERT_GE(c.inputs.size(), 40u);
  size_t matched = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Ids ids = t->encode(c.inputs[i], false);
    matched += ids == c.ids[i];
    EXPECT_EQ(show(ids), show(c.ids[i])) << name << " case " << i;
  }
  std::printf("[ llama.cpp] %s: %zu of %zu cases match\n", name.c_str(), matched, c.inputs.size());
}

INSTANTIATE_TEST_SUITE_P(TokenizerShipped, TokenizerLlamaCpp, ::testing::Values("gpt2", "llama2", "deepseek-llm"), test_name);

// ---- the shipped tokenizers' facts ----

TEST(TokenizerLoad, NamesPathsAndDirectoriesShareOneInstance) {
  auto a = Tokenizer::load("gpt2"), b = Tokenizer::load("gpt2");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->name(), "gpt2");
  EXPECT_EQ(a->vocab_size(), 50257);
  EXPECT_EQ(a->eos_id(), 50256);
  EXPECT_EQ(a->bos_id(), 50256);
  EXPECT_TRUE(a->is_special(50256));
  EXPECT_EQ(a->token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(a->token_to_id("\xC4\xA0the"), 262);  // "Ġthe"
  EXPECT_EQ(a->id_to_token(262), "\xC4\xA0the");
  EXPECT_FALSE(a->id_to_token(1 << 20).has_value());
  EXPECT_FALSE(a->token_to_id("no such token").has_value());
  auto c = Tokenizer::load(kSource + "/data/tokenizers/gpt2.tokenizer.json.gz");
  EXPECT_EQ(c.get(), a.get());  // same resolved file

  auto l = Tokenizer::load("llama2");
  EXPECT_EQ(l->vocab_size(), 32000);
  EXPECT_EQ(l->bos_id(), 1);
  EXPECT_EQ(l->eos_id(), 2);
  EXPECT_EQ(l->encode("Hello", true).front(), 1);
  EXPECT_EQ(l->encode("Hello", false).size() + 1, l->encode("Hello", true).size());
  auto d = Tokenizer::load("deepseek-llm");
  EXPECT_EQ(d->vocab_size(), 102400);
  EXPECT_EQ(d->bos_id(), 100000);
  EXPECT_EQ(d->eos_id(), 100001);

  // A checkpoint directory and a plain tokenizer.json.
  const fs::path dir = fs::temp_directory_path() / ("ib_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string json =
      R"({"version":"1.0","added_tokens":[],"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})";
  std::ofstream(dir / "tokenizer.json") << json;
  auto from_dir = Tokenizer::load(dir.string());
  auto from_file = Tokenizer::load((dir / "tokenizer.json").string());
  EXPECT_EQ(from_dir.get(), from_file.get());
  EXPECT_EQ(from_dir->encode("abab"), (Ids{2, 2}));
  fs::remove_all(dir);
  EXPECT_THROW(Tokenizer::load("no-such-tokenizer"), InputError);
}

TEST(TokenizerLoad, DecodesWhatItEncodes) {
  for (const char* name : {"gpt2", "llama2", "deepseek-llm"}) {
    auto t = Tokenizer::load(name);
    for (const std::string s :
         {"Hello, world!", "  two  spaces\nand a newline", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"}) {
      EXPECT_EQ(t->decode(t->encode(s, true), true), s) << name;
    }
  }
}

TEST(TokenizerEncode, InvalidUtf8IsReadWithReplacementCharacters) {
  auto t = Tokenizer::load("gpt2");
  // Python: b"a\xffb\xe2\x82".decode(errors="replace") == "a\ufffdb\ufffd"
  EXPECT_EQ(t->encode("a\xff"
                      "b\xe2\x82",
                      false),
            t->encode("a\xEF\xBF\xBD"
                      "b\xEF\xBF\xBD",
                      false));
}

TEST(TokenizerDecode, LoneBytesBecomeReplacementCharacters) {
  auto t = Tokenizer::load("gpt2");
  // 'Ã' (id 127) is byte 0xC3 alone, 'ĥ' (id 223) is 0xE2's stand-in; from_utf8_lossy: U+FFFD each.
  EXPECT_EQ(t->decode({127}), "\xEF\xBF\xBD");
  EXPECT_EQ(t->decode({64, 127, 64}),
            "a\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(t->decode({-1, 1 << 23, 64}), "a");  // ids outside the vocabulary are skipped
  auto l = Tokenizer::load("llama2");
  // ByteFallback: <0xE6> <0x97> alone is not UTF-8, one U+FFFD per byte.
  EXPECT_EQ(l->decode({*l->token_to_id("<0xE6>"), *l->token_to_id("<0x97>")}), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerEncode, IsFastAndThreadSafe) {
  auto t = Tokenizer::load("gpt2");
  std::string text;
  const std::string para = read(kSource + "/data/tokenizers/README.md");
  while (text.size() < (1u << 20)) text += para;
  const auto a = std::chrono::steady_clock::now();
  const Ids ids = t->encode(text, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  std::printf("[ speed    ] gpt2: %zu bytes -> %zu ids in %.3f s\n", text.size(), ids.size(), s);
  EXPECT_LT(s, 10.0);  // ~0.1 s in a Release build; generous for sanitizer builds
  EXPECT_EQ(t->decode(ids), text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < got.size(); ++k) threads.emplace_back([&, k] { got[k] = t->encode(text.substr(0, 200000), false); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, t->encode(text.substr(0, 200000), false));
}

// ---- small pipelines; the expected ids are what tokenizers 0.23.3 gives for the same JSON ----

Tokenizer make(const std::string& json) { return Tokenizer::from_json(json, "test.json"); }

TEST(TokenizerPipeline, AddedTokenFlags) {
  // vocab: single characters; added: "[M]" lstrip+rstrip special, "hi" single_word, "<x>" plain.
  const auto t =
      make(R"({"version":"1.0","model":{"type":"BPE","vocab":{"a":0,"b":1," ":2,"h":3,"i":4,"x":5,"<":6,">":7},"merges":[]},
    "added_tokens":[{"id":8,"content":"[M]","single_word":false,"lstrip":true,"rstrip":true,"normalized":false,"special":true},
                    {"id":9,"content":"hi","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false},
                    {"id":10,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false}]})");
  EXPECT_EQ(t.encode("a  [M]  b"), (Ids{0, 8, 1}));  // the spaces go with [M]
  EXPECT_EQ(t.encode("hi a"), (Ids{9, 2, 0}));       // a word on its own
  EXPECT_EQ(t.encode("ahi"), (Ids{0, 3, 4}));        // inside a word: not the added token
  EXPECT_EQ(t.encode("a<x>b"), (Ids{0, 10, 1}));
  EXPECT_EQ(t.decode({0, 8, 1}), "a [M] b");  // no decoder: tokens joined by spaces
  EXPECT_EQ(t.decode({0, 8, 1}, true), "a b");
  EXPECT_EQ(t.vocab_size(), 11);
}

TEST(TokenizerPipeline, ByteFallbackUnkAndFuse) {
  std::string vocab = R"("<unk>":0,"▁":1,"a":2,"b":3,"▁a":4,"ab":5)";
  for (int b = 0; b < 256; ++b) {
    char name[16];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab += ",\"" + std::string(name) + "\":" + std::to_string(6 + b);
  }
  const std::string pipeline =
      R"("normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"},{"type":"Replace","pattern":{"String":" "},"content":"▁"}]},
    "decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]})";
  const auto t = make(R"({"model":{"type":"BPE","unk_token":"<unk>","byte_fallback":true,"fuse_unk":true,"vocab":{)" + vocab +
                      R"(},"merges":[["▁","a"],["a","b"]]},)" + pipeline + "}");
  // "▁ab▁é": "▁ a" (rank 0) comes before "a b", so ▁a b; é has no token: its two bytes.
  EXPECT_EQ(t.encode("ab \xC3\xA9"), (Ids{4, 3, 1, 6 + 0xC3, 6 + 0xA9}));
  EXPECT_EQ(t.decode({4, 3, 1, 6 + 0xC3, 6 + 0xA9}), "ab \xC3\xA9");
  // Without byte fallback, unknown characters fuse into one <unk>.
  const auto u = make(R"({"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":true,"vocab":{"<unk>":0,"a":1},"merges":[]}})");
  EXPECT_EQ(u.encode("a\xC3\xA9\xC3\xA9"
                     "a"),
            (Ids{1, 0, 1}));
  const auto v = make(R"({"model":{"type":"BPE","unk_token":"<unk>","fuse_unk":false,"vocab":{"<unk>":0,"a":1},"merges":[]}})");
  EXPECT_EQ(v.encode("a\xC3\xA9\xC3\xA9"
                     "a"),
            (Ids{1, 0, 0, 1}));
}

TEST(TokenizerPipeline, MergesByRankLeftmostFirst) {
  // "aaaa": merge "a a" (rank 0) leftmost first gives "aa aa", then "aa aa" (rank 1).
  const auto t = make(
      R"({"model":{"type":"BPE","vocab":{"a":0,"aa":1,"aaaa":2,"b":3,"ab":4,"aab":5},"merges":["a a","aa aa","a b","aa b"]}})");
  EXPECT_EQ(t.encode("aaaa"), (Ids{2}));
  EXPECT_EQ(t.encode("aaa"), (Ids{1, 0}));
  EXPECT_EQ(t.encode("aab"), (Ids{5}));  // "a a" (0) before "a b" (2), then "aa b"
  EXPECT_EQ(t.encode("aaab"), (Ids{1, 4}));
  const auto ignore =
      make(R"({"model":{"type":"BPE","ignore_merges":true,"vocab":{"a":0,"b":1,"ba":2,"ab":3,"aba":4},"merges":["a b"]}})");
  EXPECT_EQ(ignore.encode("aba"), (Ids{4}));  // the whole word is a token
}

TEST(TokenizerPipeline, MetaspaceAndSplitBehaviours) {
  const std::string vocab = R"("▁":0,"a":1,"b":2,"-":3,"▁a":4)";
  const auto first = make(R"({"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},
    "decoder":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":true},
    "added_tokens":[{"id":5,"content":"<s>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
    "model":{"type":"BPE","vocab":{)" +
                          vocab + R"(},"merges":["▁ a"]}})");
  EXPECT_EQ(first.encode("a b"), (Ids{4, 0, 2}));
  EXPECT_EQ(first.encode("<s>a b"), (Ids{5, 1, 0, 2}));  // "first": only at the very start of the text
  EXPECT_EQ(first.decode({4, 0, 2}), "a b");
  const auto split = [&](const std::string& behavior, bool invert) {
    return make(R"({"pre_tokenizer":{"type":"Split","pattern":{"String":"-"},"behavior":")" + behavior + R"(","invert":)" +
                (invert ? "true" : "false") +
                R"(},"model":{"type":"BPE","vocab":{"a":0,"-":1,"a-":2,"-a":3,"--":4},"merges":["a -","- a","- -"]}})");
  };
  // "a--a" under each behaviour (tokenizers: Removed a,a; Isolated a,-,-,a; MergedWithPrevious
  // a-,-,a; MergedWithNext a,-,-a; Contiguous a,--,a).
  EXPECT_EQ(split("Removed", false).encode("a--a"), (Ids{0, 0}));
  EXPECT_EQ(split("Isolated", false).encode("a--a"), (Ids{0, 1, 1, 0}));
  EXPECT_EQ(split("MergedWithPrevious", false).encode("a--a"), (Ids{2, 1, 0}));
  EXPECT_EQ(split("MergedWithNext", false).encode("a--a"), (Ids{0, 1, 3}));
  EXPECT_EQ(split("Contiguous", false).encode("a--a"), (Ids{0, 4, 0}));
  EXPECT_EQ(split("Removed", true).encode("a--a"), (Ids{1, 1}));
}

TEST(TokenizerPipeline, RegexSplitWithOnigClasses) {
  // Llama 3's pattern, pieces looked up whole (ignore_merges). Onig's \s is White_Space, so U+180E
  // is punctuation to it and joins the "!" (PCRE2's own \s would split them); its \p{L} has the
  // letters of Unicode 16 (U+1C89), which PCRE2 10.42 does not.
  const std::string pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  const auto t =
      make(R"({"pre_tokenizer":{"type":"Split","pattern":{"Regex":")" + pattern + R"("},"behavior":"Isolated","invert":false},
    "model":{"type":"BPE","ignore_merges":true,"vocab":{"a":0,"b":1,"!":2,"\u180e":3,"!\u180e":4,"\u1c89":5,"\u1c89b":6,"I":7,"'M":8,
    " ":9,"123":10,"45":11,"'":12,"M":13," b":14},"merges":[]}})");
  EXPECT_EQ(t.encode("I'M 12345"), (Ids{7, 8, 9, 10, 11}));
  EXPECT_EQ(t.encode("a!\xE1\xA0\x8E"), (Ids{0, 4}));
  EXPECT_EQ(t.encode("\xE1\xB2\x89"
                     "b b"),
            (Ids{6, 14}));
}

TEST(TokenizerPipeline, UnicodeNormalizers) {
  auto with = [](const std::string& form) {
    return R"({"normalizer":{"type":"Sequence","normalizers":[{"type":")" + form + R"("},{"type":"Lowercase"}]},
      "model":{"type":"BPE","vocab":{"1":0,"\u2044":1,"2":2,"\u00bd":3,"\u00e9":4,"e":5,"\u0301":6,"b":7},"merges":[]}})";
  };
  const auto nfc = make(with("NFC"));
  EXPECT_EQ(nfc.encode("\xC2\xBD"), (Ids{3}));  // ½ stays
  EXPECT_EQ(nfc.encode("E\xCC\x81"
                       "B"),
            (Ids{4, 7}));  // E + U+0301 composes, then lowercases
  // NFKC needs ICU's data library, which a build with INFER_BENCH_STATIC_DEPS leaves out.
  try {
    const auto nfkc = make(with("NFKC"));
    EXPECT_EQ(nfkc.encode("\xC2\xBD"), (Ids{0, 1, 2}));  // ½ -> 1⁄2
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("test.json: /normalizer/normalizers/0/type: NFKC: needs ICU's data library"),
              std::string::npos)
        << e.what();
  }
}

// ---- errors: one line naming the file and the JSON pointer ----

void expect_error(const std::string& json, const std::string& pointer, const std::string& words) {
  try {
    Tokenizer::from_json(json, "DIR/tokenizer.json");
    ADD_FAILURE() << "no error for " << json.substr(0, 200);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("DIR/tokenizer.json: " + pointer + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(TokenizerErrors, NameTheFileAndThePointer) {
  expect_error(R"({"model":{"type":"WordPiece","vocab":{"a":0}}})", "/model/type", "'WordPiece' is not supported (BPE)");
  expect_error(R"({"model":{"type":"Unigram","vocab":[["a",0.0]]}})", "/model/type", "'Unigram' is not supported (BPE)");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}})", "/model/vocab/a", "out of range");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":16777216},"merges":[]}})", "/model/vocab/a", "out of range");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":0},"merges":[]}})", "/model/vocab/b", "is also the id of 'a'");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b","a c"]}})", "/model/merges/1",
               "'c' is not in the vocabulary");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[["a","b"]]}})", "/model/merges/0",
               "'ab' is not in the vocabulary");
  expect_error(R"({"model":{"type":"BPE","dropout":0.1,"vocab":{"a":0},"merges":[]}})", "/model/dropout", "dropout must be null");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Precompiled"}})", "/normalizer/type",
               "'Precompiled' is not supported");
  expect_error(
      R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated","invert":false}})",
      "/pre_tokenizer/pattern/Regex", "regex does not compile");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"decoder":{"type":"WordPiece","prefix":"##"}})",
               "/decoder/type", "'WordPiece' is not supported");
  expect_error(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"added_tokens":[{"content":"x"}]})", "/added_tokens/0",
               "missing member 'id'");
  // Sequence nesting: 64 levels are fine, 65 are not.
  auto nested = [](int depth) {
    std::string n = R"({"type":"Lowercase"})";
    for (int i = 0; i < depth; ++i) n = R"({"type":"Sequence","normalizers":[)" + n + "]}";
    return R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":)" + n + "}";
  };
  EXPECT_NO_THROW(Tokenizer::from_json(nested(64), "DIR/tokenizer.json"));
  std::string pointer = "/normalizer";
  for (int i = 0; i < 64; ++i) pointer += "/normalizers/0";
  expect_error(nested(65), pointer, "nested deeper than 64");
  // Not JSON, and too large.
  try {
    Tokenizer::from_json("{\"model\": nope}", "DIR/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("DIR/tokenizer.json: not JSON (at byte", 0), 0u) << e.what();
  }
  EXPECT_THROW(Tokenizer::from_json(std::string((64u << 20) + 1, ' '), "big.json"), InputError);
  // #19 item 5: a decoder nested 20,000 levels overflowed the stack (the first copy of it
  // recursed per level). JSON past 512 levels is refused as it is parsed.
  std::string deep(20000, '[');
  deep = R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"decoder":)" + deep + std::string(20000, ']') + "}";
  try {
    Tokenizer::from_json(deep, "DIR/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "DIR/tokenizer.json: JSON nested deeper than 512 levels") << e.what();
  }
}

}  // namespace
}  // namespace ib::tokenizer
