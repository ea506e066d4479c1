// Bad input found after the spec is read, through the real binary: by a variant while running (no
// run directory left) or late (the rows before it kept); checkpoint directories, GGUF files,
// constraints and vocabularies checked with the spec (and by serve); an unwritable output
// directory refused up front; a host allocation that fails outside the tracker as an OOM row.
#include <string>

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "infer_bench_binary.h"

namespace ib::test {
namespace {

// Bad input only a variant sees (here kv-evict's whole-number budget above 1) is still exit 2 with
// the experiment's file:line, and the run directory made for it (parents included) is removed.
TEST_F(Cli, BadInputFoundWhileRunningLeavesNoRunDirectory) {
  write_text(dir_ + "/bad.yaml",
             "experiments:\n  - name: a\n    kind: kv-evict\n    variants: [sliding_window]\n    context: 64\n"
             "    decode_steps: 8\n    budget: 2.5\n    min_samples: 1\n    min_time: 0\n");
  for (const std::string out : {"out", "deep/er/out"}) {
    auto r = ib({"kvcache", "bad.yaml", "--backend", "cpu", "-q", "--format", "json", "-o", out}, in_dir());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("infer-bench: bad.yaml:2:5: experiment a (sliding_window", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("budget 2.5"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(path_exists(dir_ + "/out")) << out;
    EXPECT_FALSE(path_exists(dir_ + "/deep")) << out;
  }
  auto r = ib({"kvcache", "bad.yaml", "--backend", "cpu", "-q", "--format", "json"}, in_dir());  // the default results/runs/...
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(path_exists(dir_ + "/results")) << r.err;
}

// #19 item 14: the same after an earlier experiment measured its rows: they stay, in complete
// files (its plot too), and results.json says which experiment stopped the run.
TEST_F(Cli, BadInputFoundLateKeepsTheRowsMeasuredBeforeIt) {
  write_text(dir_ + "/bad.yaml",
             "experiments:\n  - name: copy\n    kind: ceiling\n    variants: [memcpy]\n    bytes: [1MiB, 2MiB]\n"
             "    plot: {x: bytes, y: gbps}\n    min_samples: 2\n    min_time: 0\n"
             "  - name: a\n    kind: kv-evict\n    variants: [sliding_window]\n    context: 64\n"
             "    decode_steps: 8\n    budget: 2.5\n    min_samples: 1\n    min_time: 0\n");
  auto r = ib({"run", "bad.yaml", "--backend", "cpu", "-q", "-o", "out"}, in_dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("experiment a (sliding_window"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; the run stopped: the 2 rows measured before it are in out/"), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  EXPECT_NE(j["meta"]["error"].get<std::string>().find("experiment a (sliding_window"), std::string::npos) << j["meta"];
  ASSERT_GE(j["experiments"].size(), 1u);
  EXPECT_EQ(j["experiments"][0]["rows"].size(), 2u);
  for (const auto& row : j["experiments"][0]["rows"]) EXPECT_EQ(row["status"], "ok");
  EXPECT_NE(read_text(dir_ + "/out/report.md").find("stopped early"), std::string::npos);
  EXPECT_EQ(lines(read_text(dir_ + "/out/results.csv")), 3u);  // the header and the two rows
  const auto files = list_files(dir_ + "/out");
  EXPECT_TRUE(std::any_of(files.begin(), files.end(), [](const std::string& f) { return f.find(".svg") != std::string::npos; }));
  EXPECT_FALSE(path_exists(dir_ + "/out/.infer-bench.lock"));
}

// `weights: DIR` is read when the spec is (config.json and the safetensors headers): a missing
// directory, one without config.json or with a garbage one is exit 2 at the key's file:line,
// never a crash (num_attention_heads: 0 divided by zero), a FAILED row or a run directory.
TEST_F(Cli, CheckpointDirectoriesAreCheckedWithTheSpec) {
  const std::string fields =
      R"("model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 256)";
  struct Case {
    std::string config;  // "" = no config.json
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"", "/config.json: cannot open (a Hugging Face checkpoint directory needs config.json)"},
      {"garbage{", "/config.json: not JSON: "},
      {"[1, 2]", "/config.json: expected a JSON object of model settings"},
      {"{" + fields + R"(, "num_attention_heads": 0})", "/config.json: num_attention_heads: 0 is out of range (at least 1)"},
      {"{" + fields + R"(, "num_attention_heads": 4, "rope_theta": "big"})", "/config.json: rope_theta: not a number"},
      {"{" + fields + R"(, "num_attention_heads": 4})", ": no model.safetensors or model.safetensors.index.json"},
  };
  for (const std::string sub : {"decode", "specdec"}) {
    for (const auto& c : cases) {
      const std::string ckpt = make_temp_dir();
      if (!c.config.empty()) write_text(ckpt + "/config.json", c.config);
      const std::string spec =
          sub == "decode"
              ? "experiments:\n  - name: a\n    kind: decode\n    model: checkpoint\n    weights: " + ckpt + "\n"
              : "experiments:\n  - name: a\n    kind: specdec\n    target: checkpoint\n    target_weights: " + ckpt + "\n";
      write_text(dir_ + "/bad.yaml", spec);
      auto r = ib({sub, "bad.yaml", "--backend", "cpu", "-o", "out"}, in_dir());
      EXPECT_EQ(r.exit_code, 2) << sub << " " << c.config << "\n" << r.err;
      EXPECT_EQ(lines(r.err), 1u) << r.err;
      const std::string key =
          sub == "decode" ? "bad.yaml:5:14: experiments[0].weights: " : "bad.yaml:5:21: experiments[0].target_weights: ";
      EXPECT_NE(r.err.find(key + ckpt + c.expected), std::string::npos) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_FALSE(path_exists(dir_ + "/out"));
    }
  }
  write_text(dir_ + "/bad.yaml", "experiments:\n  - name: a\n    kind: specdec\n    target: tiny\n    draft: checkpoint\n");
  auto r = ib({"specdec", "bad.yaml", "--backend", "cpu", "-o", "out"}, in_dir());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.yaml:5:12: experiments[0].draft: draft checkpoint needs draft_weights: DIR"), std::string::npos)
      << r.err;
}

// A GGUF file as a checkpoint: one that names an architecture the engine does not run is refused
// with the spec (the key's file:line, the file and the GGUF key), and by `serve`, exit 2.
TEST_F(Cli, GgufCheckpointsAreCheckedWithTheSpecAndByServe) {
  std::string gguf = "GGUF";
  auto u32 = [&](uint32_t v) { gguf.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { gguf.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& t) {
    u64(t.size());
    gguf += t;
  };
  u32(3);  // version
  u64(0);  // tensors
  u64(1);  // metadata
  str("general.architecture");
  u32(8);  // string
  str("gpt-neox");
  const std::string file = dir_ + "/neox.gguf";
  write_text(file, gguf);
  write_text(dir_ + "/bad.yaml",
             "experiments:\n  - name: a\n    kind: decode\n    model: checkpoint\n    weights: " + file + "\n");
  auto r = ib({"decode", "bad.yaml", "--backend", "cpu", "-o", "out"}, in_dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(
      r.err.find("bad.yaml:5:14: experiments[0].weights: " + file + ": key 'general.architecture': 'gpt-neox' is not supported"),
      std::string::npos)
      << r.err;
  EXPECT_FALSE(path_exists(dir_ + "/out"));
  write_text(file, gguf.substr(0, 30));  // cut inside the key
  r = ib({"serve", file, "--port", "0"}, in_dir());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find(file + ": "), std::string::npos) << r.err;
}

// A constraint or vocabulary that cannot be used is bad input found with the spec (exit 2 at the
// key's file:line, nothing written), not FAILED rows after the run started.
TEST_F(Cli, ConstraintsAndVocabulariesAreCheckedWithTheSpec) {
  write_text(dir_ + "/broken.json", "{\"type\": \"object\", \"properties\": {\n");
  write_text(dir_ + "/unsupported.json", R"({"type": "object", "unevaluatedProperties": false})");
  struct Case {
    std::string line;  // line 5 of the spec
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"    constraint: broken.json\n", "bad.yaml:5:17: experiments[0].constraint: 'broken.json': the schema is not JSON: "},
      {"    constraint: nope.json\n",
       "bad.yaml:5:17: experiments[0].constraint: 'nope.json' is no schema file, nor a bundled schema (calendar_event, "
       "extraction, "
       "order, person, tool_call, tool_union, tree), nor regex:PATTERN or choice:a|b|c"},
      {"    constraint: unsupported.json\n",
       "bad.yaml:5:17: experiments[0].constraint: 'unsupported.json': schema /unevaluatedProperties: unsupported keyword "
       "'unevaluatedProperties'"},
      {"    constraint: [tool_call, 'regex:(ab']\n",
       "bad.yaml:5:17: experiments[0].constraint: 'regex:(ab': pattern /(ab/ at offset 3"},
      {"    vocab: gpt3\n",
       "bad.yaml:5:12: experiments[0].vocab: 'gpt3' is not gpt2, llama2, deepseek-llm nor a readable tokenizer.json"},
  };
  for (const char* kind : {"constrain-compile", "constrain-generate"})
    for (const auto& c : cases) {
      write_text(dir_ + "/bad.yaml",
                 std::string("experiments:\n  - name: a\n    kind: ") + kind + "\n    min_samples: 1\n" + c.line);
      auto r = ib({"constrain", "bad.yaml", "--backend", "cpu", "-o", "out"}, in_dir());
      EXPECT_EQ(r.exit_code, 2) << kind << " " << c.line << r.err;
      EXPECT_EQ(lines(r.err), 1u) << r.err;
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_FALSE(path_exists(dir_ + "/out"));
    }
}

// An output directory the file system refuses is refused before anything runs, even for root
// (whom access(W_OK) would let through on sysfs): one line, exit 2, nothing on stdout.
TEST_F(Cli, UnwritableOutputDirectoryIsRefusedUpFront) {
  if (!path_exists("/sys/kernel")) GTEST_SKIP() << "no /sys/kernel";
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "-o", "/sys/kernel"}, in_dir());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("infer-bench: --output /sys/kernel: not writable: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Host memory a variant holds outside the tracked buffers (here cpu_paged's block tables for two
// billion sequences) is an OOM row too when it cannot be had, not a FAILED one. Run under a 4 GB
// address-space limit so that the allocation fails at once, whatever the machine.
TEST_F(Cli, UntrackedHostAllocationFailureIsAnOomRow) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "an address-space limit cannot hold an AddressSanitizer binary's shadow memory";
#endif
  write_text(dir_ + "/big.yaml",
             "experiments:\n  - name: big\n    kind: kv-paged\n    variants: [cpu_paged]\n    batch: 2000000000\n"
             "    heads: 1\n    context: 2000000000\n    min_samples: 1\n    min_time: 0\n");
  auto r = run_process({"/bin/sh", "-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", kBinary, "kvcache", "big.yaml", "--backend",
                        "cpu", "-o", "out", "-q", "--format", "json"},
                       in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  const auto& row = j["experiments"][0]["rows"][0];
  EXPECT_EQ(row["status"], "OOM") << row.dump();
  EXPECT_NE(row["message"].get<std::string>().find("std::bad_alloc"), std::string::npos) << row.dump();
}

}  // namespace
}  // namespace ib::test
