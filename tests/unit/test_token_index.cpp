// Vocabularies (byte decoding against known ids) and token masks (brute-force soundness and
// completeness on every state of a real schema).
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "constrain/automaton.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Vocabulary, Gpt2DecodesTheEncodeCases) {
  auto v = load_vocabulary("gpt2");
  EXPECT_EQ(v->size(), 50257);
  EXPECT_EQ(v->eos, 50256);
  EXPECT_TRUE(v->special[50256]);
  EXPECT_EQ(v->token_bytes[220], " ");
  const std::string dir = std::string(IB_SOURCE_DIR) + "/data/tokenizers/";
  std::string inputs = read_text(dir + "gpt2.encode-cases.inp"), outputs = read_text(dir + "gpt2.encode-cases.out");
  std::vector<std::string> cases;
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (true) {
    size_t next = inputs.find(sep, pos);
    if (next == std::string::npos) break;
    cases.push_back(inputs.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(outputs);
  std::string line;
  size_t i = 0;
  for (; std::getline(out, line) && i < cases.size(); ++i) {
    std::istringstream ids(line);
    std::string decoded;
    int id;
    while (ids >> id) decoded += v->token_bytes[static_cast<size_t>(id)];
    EXPECT_EQ(decoded, cases[i]) << "case " << i;
  }
  EXPECT_EQ(cases.size(), 46u);  // every input ends with a separator line
  EXPECT_EQ(i, cases.size());
}

TEST(Vocabulary, Llama2AndDeepSeekDecodeBytes) {
  auto l = load_vocabulary("llama2");
  EXPECT_EQ(l->size(), 32000);
  EXPECT_EQ(l->eos, 2);
  EXPECT_TRUE(l->special[0] && l->special[1] && l->special[2]);
  EXPECT_EQ(l->token_bytes[3], std::string(1, '\0'));  // <0x00>
  EXPECT_EQ(l->token_bytes[3 + 0x41], "A");            // <0x41>
  int the = -1;
  for (int32_t id = 0; id < l->size(); ++id)
    if (l->token_bytes[static_cast<size_t>(id)] == " the") the = id;
  EXPECT_GT(the, 0) << "'▁the' should decode to ' the'";
  auto d = load_vocabulary("deepseek-llm");
  EXPECT_EQ(d->size(), 102400);
  EXPECT_EQ(d->eos, 100001);
  EXPECT_EQ(d->token_bytes[254], " the");  // 'Ġthe'
  EXPECT_TRUE(d->special[100015]);         // [PAD...]
}

TEST(Vocabulary, BadFilesAreClearErrors) {
  EXPECT_THROW(load_vocabulary("/nonexistent/tokenizer.json"), std::runtime_error);
  EXPECT_THROW(parse_tokenizer_json("{\"model\":{}}", "t"), std::runtime_error);
  EXPECT_THROW(parse_tokenizer_json("not json", "t"), std::runtime_error);
  // Ids and sizes from the file are checked before they size or index anything (issue #19's
  // reproducers: a negative id wrote out of bounds, a huge one allocated gigabytes).
  auto error_of = [](const std::string& text) {
    try {
      parse_tokenizer_json(text, "t.json");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"model": {"vocab": {"a": 0, "b": 1, "c": -1}}})").find("/model/vocab/c: id -1 is outside"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"vocab": {"a": 400000000}}})").find("id 400000000 is outside"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"vocab": {"a": "x"}}})").find("not an integer"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"id": -5, "content": "x"}]})").find("/added_tokens/0/id"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"vocab": {"a": 0}}, "added_tokens": [{"content": "x"}]})").find("/added_tokens/0"),
            std::string::npos);
  EXPECT_NE(error_of("{\"model\": {\"vocab\": {\"" + std::string(65536, 'a') + "\": 0}}}").find("65536 bytes"),
            std::string::npos);
  EXPECT_EQ(error_of(R"({"model": {"vocab": {"a": 0, "b": 1}}})"), "no error");
}

TEST(Vocabulary, AHuggingFaceCheckpointNamesItsOwnEndOfSequence) {
  // ib-draft-1m's tokenizer.json has one added token, <|endoftext|> (id 0), the name guess; a copy
  // of the checkpoint whose generation_config says 7 (a chat model's end of turn, say) ends there.
  namespace fs = std::filesystem;
  const fs::path src = fs::path(IB_SOURCE_DIR) / "data/models/ib-draft-1m";
  EXPECT_EQ(load_vocabulary((src / "tokenizer.json").string())->eos, 0);
  const fs::path dir =
      fs::temp_directory_path() / ("ib-vocab-eos-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"})
    fs::copy_file(src / f, dir / f);
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [7, 0]})";
  EXPECT_EQ(load_vocabulary((dir / "tokenizer.json").string())->eos, 7);
  EXPECT_EQ(load_vocabulary(dir.string())->eos, 7);  // the directory itself
  fs::remove_all(dir);
}

TEST(VocabTrie, HoldsEveryNonSpecialTokenOnce) {
  auto v = load_vocabulary("gpt2");
  auto t = vocab_trie(v);
  EXPECT_EQ(t->tokens.size(), 50256u);
  EXPECT_EQ(t->token_begin.size(), t->nodes() + 1);
  EXPECT_EQ(t->subtree_end[0], static_cast<int32_t>(t->nodes()));
  // Every token's path spells its bytes.
  for (int32_t i = 1; i < static_cast<int32_t>(t->nodes()); ++i) {
    EXPECT_GT(t->subtree_end[static_cast<size_t>(i)], i);
    EXPECT_EQ(t->depth[static_cast<size_t>(i)] > 0, true);
  }
}

// Brute force: token t allowed at state s iff its bytes keep the DFA alive; EOS iff s accepts.
void expect_masks_exact(const Dfa& d, const Vocabulary& v, const std::function<const uint32_t*(int32_t)>& mask) {
  for (int32_t s = 0; s < d.num_states; ++s) {
    const uint32_t* m = mask(s);
    for (int32_t t = 0; t < v.size(); ++t) {
      bool want;
      if (t == v.eos)
        want = d.accepting[static_cast<size_t>(s)];
      else if (v.special[static_cast<size_t>(t)])
        want = false;
      else
        want = d.walk(s, v.token_bytes[static_cast<size_t>(t)]) >= 0;
      ASSERT_EQ(mask_allows(m, t), want) << "state " << s << " token " << t << " '" << v.token_bytes[static_cast<size_t>(t)]
                                         << "'";
    }
  }
}

TEST(TokenMasks, PrecomputedAndLazyAreExactOnEveryState) {
  auto v = load_vocabulary("gpt2");
  auto schema =
      ib::parse_json<nlohmann::ordered_json>(read_text(std::string(IB_SOURCE_DIR) + "/experiments/schemas/tool_call.json"));
  auto d = std::make_shared<const Dfa>(compile_dfa(schema_to_regex(schema)));
  TokenMaskIndex index(d, v);
  EXPECT_LE(index.num_classes(), static_cast<size_t>(d->num_states));
  expect_masks_exact(*d, *v, [&](int32_t s) { return index.mask(s); });
  LazyTokenMasker lazy(d, v);
  expect_masks_exact(*d, *v, [&](int32_t s) { return lazy.mask(s); });
  EXPECT_EQ(lazy.cached(), lazy.num_classes());        // one mask per Moore class
  EXPECT_LE(index.num_classes(), lazy.num_classes());  // token classes: never more
}

// The text fast path takes whole trie subtrees of text bytes: bounded, unbounded and patterned
// strings (and the UTF-8 and escape states beside them) must still give the brute-force masks.
TEST(TokenMasks, TextSubtreesTakenWholeAreExact) {
  auto v = load_vocabulary("gpt2");
  auto schema = ib::parse_json<nlohmann::ordered_json>(R"({"type":"object","properties":{
      "a":{"type":"string","maxLength":5}, "b":{"type":"string"}, "c":{"type":"string","pattern":"^[a-z ]{2,9}$"},
      "d":{"type":"string","minLength":3,"maxLength":12}},"required":["a","b","c","d"]})");
  auto d = std::make_shared<const Dfa>(compile_dfa(schema_to_regex(schema)));
  TokenMaskIndex index(d, v);
  expect_masks_exact(*d, *v, [&](int32_t s) { return index.mask(s); });
  LazyTokenMasker lazy(d, v);
  expect_masks_exact(*d, *v, [&](int32_t s) { return lazy.mask(s); });
}

// Both strategies take a root subtree of string content from the vocabulary's shared pieces
// (valid UTF-8 within a character budget): on a vocabulary rich in multi-byte characters, two
// constraints with different budgets (the second meeting pieces the first built) get exact masks,
// lazy ones cold or not.
TEST(TokenMasks, MasksShareTheVocabularysStringPieces) {
  auto v = load_vocabulary("deepseek-llm");
  for (const char* schema_text : {R"({"type":"object","properties":{"a":{"type":"string","maxLength":30},
                                     "b":{"type":"string"}},"required":["a","b"]})",
                                  R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":9},"maxItems":2})"}) {
    auto d = std::make_shared<const Dfa>(compile_dfa(schema_to_regex(ib::parse_json<nlohmann::ordered_json>(schema_text))));
    LazyTokenMasker lazy(d, v);
    for (int pass = 0; pass < 2; ++pass) {
      expect_masks_exact(*d, *v, [&](int32_t s) { return lazy.mask(s); });
      lazy.clear();
    }
    TokenMaskIndex index(d, v);  // its parts take the same pieces
    expect_masks_exact(*d, *v, [&](int32_t s) { return index.mask(s); });
  }
}

TEST(TokenMasks, TextProfileCountsTheTextBytesEveryStateTakes) {
  // "a[a-z]{0,3}x": 'b' kills the start; after "a", '-' kills it (neither a letter nor x).
  Dfa d = compile_dfa(parse_regex("a[a-z]{0,3}x").re);
  TextProfile p = text_profile(d);
  const size_t s = static_cast<size_t>(d.walk(d.start, "a"));
  EXPECT_EQ(p.run[static_cast<size_t>(d.start)], 0);
  EXPECT_EQ(p.run[s], 0);
  EXPECT_EQ(p.dies_after[s], 255);  // 'x' and 'y' lead to different states
  Dfa any = compile_dfa(parse_regex("[ -~]*").re);
  EXPECT_EQ(text_profile(any).run[static_cast<size_t>(any.start)], 255);  // no text byte ever kills it
  EXPECT_EQ(text_profile(any).dies_after[static_cast<size_t>(any.start)], 255);
  // Text without '"' and '\\' (the string of a JSON schema with maxLength 4), then a quote.
  Dfa four = compile_dfa(parse_regex("[ !#-\\[\\]-~]{0,4}\"").re);
  TextProfile q = text_profile(four);
  EXPECT_EQ(q.run[static_cast<size_t>(four.start)], 4);
  EXPECT_EQ(q.dies_after[static_cast<size_t>(four.start)], 4);
  EXPECT_EQ(q.run[static_cast<size_t>(four.walk(four.start, "a!"))], 2);
  EXPECT_EQ(q.dies_after[static_cast<size_t>(four.walk(four.start, "a!"))], 2);
  EXPECT_EQ(q.dies_after[static_cast<size_t>(four.walk(four.start, "a!b#"))], 0);
}

TEST(TokenMasks, MaskClassesSeparateWhatTokensCanTellApart) {
  // "a{0,40}b": the 41 counting states differ only near the end; with tokens of at most 3
  // bytes, states with 3+ a's left are indistinguishable.
  Dfa d = compile_dfa(parse_regex("a{0,40}b").re);
  MaskClasses mc = mask_classes(d, 3);
  EXPECT_LT(mc.representative.size(), 8u);
  MaskClasses exact = mask_classes(d, 100);
  EXPECT_EQ(exact.representative.size(), static_cast<size_t>(d.num_states));
}

// The token classes against the per-state walk: on every bundled schema and every vocabulary
// whose data is here, each state's own mask equals its class's (and a class's accepting flag is
// its members'). The classes are far fewer than the states that the Moore classes keep apart.
TEST(TokenMasks, TokenClassesGiveEachStateItsOwnMask) {
  const std::vector<std::string> schemas = {"tool_call", "tool_union", "person", "order", "calendar_event", "extraction", "tree"};
  for (const std::string vname : {"gpt2", "llama2", "deepseek-llm"}) {
    std::shared_ptr<const Vocabulary> v;
    try {
      v = load_vocabulary(vname);
    } catch (const std::runtime_error&) {
      continue;  // the data folder lacks it
    }
    auto trie = vocab_trie(v);
    const size_t words = (static_cast<size_t>(v->size()) + 31) / 32;
    for (const auto& name : schemas) {
      auto schema = ib::parse_json<nlohmann::ordered_json>(
          read_text(std::string(IB_SOURCE_DIR) + "/experiments/schemas/" + name + ".json"));
      const Dfa d = compile_dfa(schema_to_regex(schema));
      const TextProfile text = text_profile(d);
      const MaskClasses tc = token_classes(d, *trie, text);
      ASSERT_EQ(tc.class_of.size(), static_cast<size_t>(d.num_states));
      EXPECT_LE(tc.representative.size(), mask_classes(d, v->max_token_bytes).representative.size()) << name << " " << vname;
      std::vector<uint32_t> reps(tc.representative.size() * words), own(words);
      for (size_t c = 0; c < tc.representative.size(); ++c) {
        ASSERT_EQ(tc.class_of[static_cast<size_t>(tc.representative[c])], static_cast<int32_t>(c));
        compute_mask(d, *v, *trie, tc.representative[c], reps.data() + c * words, &text);
      }
      for (int32_t s = 0; s < d.num_states; ++s) {
        compute_mask(d, *v, *trie, s, own.data(), &text);  // the per-state walk (masks as before the classes)
        const uint32_t* want = reps.data() + static_cast<size_t>(tc.class_of[static_cast<size_t>(s)]) * words;
        ASSERT_TRUE(std::equal(own.begin(), own.end(), want)) << name << " " << vname << " state " << s;
      }
    }
  }
}

TEST(TokenMasks, TokenClassesMergeStatesNoTokenTellsApart) {
  // "a{0,40}b" over tokens "a", "aa", "b", "ab": counting states with 3+ a's left allow the
  // same four tokens; the last ones differ ("aa" dies with one a left).
  Vocabulary v;
  v.token_bytes = {"a", "aa", "b", "ab", ""};
  v.special = {0, 0, 0, 0, 1};
  v.eos = 4;
  v.max_token_bytes = 2;
  auto vp = std::make_shared<const Vocabulary>(v);
  const Dfa d = compile_dfa(parse_regex("a{0,40}b").re);
  const MaskClasses tc = token_classes(d, *vocab_trie(vp), text_profile(d));
  EXPECT_EQ(tc.representative.size(), 4u);  // 2+ a's left, 1 a left, 0 left, after b (accepting)
  EXPECT_EQ(mask_classes(d, 100).representative.size(), static_cast<size_t>(d.num_states));
}

// Nodes with only string bytes below are keyed by the Moore blocks over string bytes alone, of
// round height(node): "\"é{0,40}\"" with tokens of 1..4 é's (2 bytes each), quote-ended ones and
// 4 é's + 0xC3 (9 bytes: height 8 below the root's 0xC3, alive after that byte with 5+ é's left,
// so a key of one round too few merges 4 and 5 left), and the copies of the counter told apart
// only by '"' (outside the string-byte key). Each state's class mask is its own. (The counter's
// states also share blocks with the UTF-8 automaton's, budgeted or not: named without a walk, at
// the same round; one round too few fails here too.)
TEST(TokenMasks, TokenClassesKeyStringSubtreesByStringBytes) {
  Vocabulary v;
  const std::string e = "\xC3\xA9";
  v.token_bytes = {e,      e + e,  e + e + e,  e + e + e + e,          "\"", e + "\"", e + e + "\"",
                   "\xC3", "\xA9", e + "\xC3", e + e + e + e + "\xC3", ""};
  v.special.assign(v.token_bytes.size(), 0);
  v.special.back() = 1;
  v.eos = static_cast<int32_t>(v.token_bytes.size() - 1);
  v.max_token_bytes = 9;
  auto vp = std::make_shared<const Vocabulary>(v);
  auto trie = vocab_trie(vp);
  const Dfa d = compile_dfa(parse_regex("\"\u00e9{0,40}\"|x\"\u00e9{0,6}\"").re);
  const TextProfile text = text_profile(d);
  const MaskClasses tc = token_classes(d, *trie, text);
  const size_t words = (v.token_bytes.size() + 31) / 32;
  std::vector<uint32_t> own(words), rep(words);
  std::map<std::pair<std::vector<uint32_t>, int>, int> distinct;
  for (int32_t s = 0; s < d.num_states; ++s) {
    compute_mask(d, v, *trie, s, own.data(), &text);
    compute_mask(d, v, *trie, tc.representative[static_cast<size_t>(tc.class_of[static_cast<size_t>(s)])], rep.data(), &text);
    EXPECT_EQ(own, rep) << "state " << s;
    distinct.emplace(std::make_pair(own, static_cast<int>(d.accepting[static_cast<size_t>(s)])), 0);
  }
  EXPECT_EQ(tc.representative.size(), distinct.size());  // and no finer than the masks here
}

// The precomputed index ORs each class's parts (the root's children of one byte class, alive
// from one state), each walked once: brute force on every state of the UTF-8 counter above (parts
// held as token lists), and each state's own walk on every state of tool_union over the real
// vocabularies (large parts held as bitmasks too).
TEST(TokenMasks, PrecomputedIndexFromPartsIsExact) {
  Vocabulary v;
  const std::string e = "\xC3\xA9";
  v.token_bytes = {e, e + e, e + e + e, "\"", e + "\"", "\xC3", "\xA9", e + "\xC3", "x", "x\"", ""};
  v.special.assign(v.token_bytes.size(), 0);
  v.special.back() = 1;
  v.eos = static_cast<int32_t>(v.token_bytes.size() - 1);
  v.max_token_bytes = 5;
  auto vp = std::make_shared<const Vocabulary>(v);
  auto small = std::make_shared<const Dfa>(compile_dfa(parse_regex("\"\u00e9{0,9}\"|x\"\u00e9{0,3}\"x?").re));
  TokenMaskIndex tiny(small, vp);
  expect_masks_exact(*small, v, [&](int32_t s) { return tiny.mask(s); });

  auto schema =
      ib::parse_json<nlohmann::ordered_json>(read_text(std::string(IB_SOURCE_DIR) + "/experiments/schemas/tool_union.json"));
  auto d = std::make_shared<const Dfa>(compile_dfa(schema_to_regex(schema)));
  const TextProfile text = text_profile(*d);
  for (const std::string vname : {"gpt2", "llama2", "deepseek-llm"}) {
    std::shared_ptr<const Vocabulary> voc;
    try {
      voc = load_vocabulary(vname);
    } catch (const std::runtime_error&) {
      continue;  // the data folder lacks it
    }
    TokenMaskIndex index(d, voc);
    auto trie = vocab_trie(voc);
    std::vector<uint32_t> own(index.words());
    for (int32_t s = 0; s < d->num_states; ++s) {
      compute_mask(*d, *voc, *trie, s, own.data(), &text);
      ASSERT_TRUE(std::equal(own.begin(), own.end(), index.mask(s))) << vname << " state " << s;
    }
  }
}

// The incremental, hashed Moore refinement against the textbook one (every state, exact keys,
// each round from the last): the same partitions after each number of rounds, bundled schemas.
TEST(TokenMasks, MaskClassesAreTheMoorePartitions) {
  auto same_partition = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    std::map<int32_t, int32_t> ab, ba;
    for (size_t i = 0; i < a.size(); ++i)
      if (ab.emplace(a[i], b[i]).first->second != b[i] || ba.emplace(b[i], a[i]).first->second != a[i]) return false;
    return true;
  };
  for (const char* name : {"tool_union", "order", "tree"}) {
    auto schema =
        ib::parse_json<nlohmann::ordered_json>(read_text(std::string(IB_SOURCE_DIR) + "/experiments/schemas/" + name + ".json"));
    const Dfa d = compile_dfa(schema_to_regex(schema));
    const size_t n = static_cast<size_t>(d.num_states), k = static_cast<size_t>(d.num_classes);
    std::vector<int32_t> block(n, 0);
    for (size_t round = 1; round <= 40; ++round) {
      std::map<std::vector<int32_t>, int32_t> ids;
      std::vector<int32_t> next(n), key(k + 1);
      for (size_t s = 0; s < n; ++s) {
        key[0] = block[s];
        for (size_t c = 0; c < k; ++c) {
          const int32_t t = d.next[s * k + c];
          key[c + 1] = t < 0 ? -1 : block[static_cast<size_t>(t)];
        }
        next[s] = ids.emplace(key, static_cast<int32_t>(ids.size())).first->second;
      }
      block = next;
      if (round % 3 != 1 && round != 40) continue;
      std::vector<int32_t> with_accepting(n);  // mask_classes also splits by accepting
      for (size_t s = 0; s < n; ++s) with_accepting[s] = block[s] * 2 + d.accepting[s];
      ASSERT_TRUE(same_partition(mask_classes(d, round).class_of, with_accepting)) << name << " round " << round;
    }
  }
}

}  // namespace
}  // namespace ib::constrain
