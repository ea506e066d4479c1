// The xgrammar and llguidance peer rows of constrain-compile and constrain-mask. Stub interpreters
// stand for python: shell scripts printing canned JSON for the ways a row ends without a check
// (unsupported, failed, unreadable, silent, killed at its deadline), and python3 scripts that read
// the input file we wrote and answer for its documents (an ok row, a refused token, a missing EOS,
// a walk our validator rejects), so every outcome goes through the real runner without the
// packages. The compiled-in script is checked against scripts/constrain_peer.py and run with
// python3; the real peers run where the interpreter has them (IB_TEST_PYTHON, else
// .venv-dev/bin/python, else python3), on a small bundled schema.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "../cli/process.h"
#include "../common/fake_interpreter.h"
#include "../common/run_kind.h"
#include "core/json_input.h"

#include "core/peer_process.h"
#include "core/point_access.h"
#include "core/registry.h"
#include "core/runner.h"
#include "core/spec.h"
#include "kinds/constrain/python_peer.h"

namespace ib::constrain {
namespace {

using ib::testing::metric;
using ib::testing::run_spec_text;

const char* kDefaults = "{warmup: 1, min_samples: 3, min_time: 0, max_noise: 50%, timeout: 5s}";
const std::string kValidDoc = R"({"tool":"get_weather","arguments":{"city":"Paris"}})";

bool have_python3() {
  const PeerProcess p = run_peer_process({"python3", "-c", "pass"}, 60);
  return p.spawn_error.empty() && p.exit_code == 0;
}

using Stub = test::FakeInterpreter;

// A python3 peer that answers for the documents of our input file: every target token and EOS
// allowed, every returned mask all ones, unless `answer` says otherwise ("refuse": [[doc, step]]
// clears a step's bit (step = the document's length: its EOS), "stop": [doc, step] ends a
// document's walk there, "walks": texts the random walks finished with); the rest of `answer`
// overrides the result's fields. It keeps a copy of the input as input.json.
Stub answering(const nlohmann::json& answer) {
  Stub s("exec python3 \"$(dirname \"$0\")/stub.py\" \"$@\"");
  test::write_text(s.dir + "/answer.json", answer.dump());
  test::write_text(s.dir + "/stub.py", R"PY(
import json, os, shutil, sys
here = os.path.dirname(os.path.abspath(__file__))
a = sys.argv[1:]
src = a[a.index("--input") + 1]
shutil.copy(src, os.path.join(here, "input.json"))
job = json.load(open(src))
ans = json.load(open(os.path.join(here, "answer.json")))
words = (len(job["vocab"]["tokens"]) + 31) // 32
docs = [{"steps": "1" * len(d), "eos": True, "accepted": True, "error": ""} for d in job["documents"]]
for d, s in ans.pop("refuse", []):
    if s >= len(job["documents"][d]):
        docs[d].update(eos=False, accepted=False)
    else:
        docs[d]["steps"] = docs[d]["steps"][:s] + "0" + docs[d]["steps"][s + 1:]
        docs[d]["error"] = "token refused"
if "stop" in ans:
    d, s = ans.pop("stop")
    docs[d].update(steps=docs[d]["steps"][:s], eos=False, accepted=False, error="token %d at step %d not accepted" % (job["documents"][d][s], s))
check = {"documents": docs,
         "masks": [{"doc": d, "step": s, "words": "ff" * (4 * words)} for d, s in job["mask_steps"]],
         "walks": [{"text": t.encode().hex(), "finished": True, "error": ""} for t in ans.pop("walks", [])]}
out = {"status": "ok", "peer": "xgrammar", "peer_version": "0.2.9", "python": "3.11.7", "check": check,
       "note": "xgrammar 0.2.9: compile = compile_json_schema + GrammarMatcher (2 threads, no cache)",
       "samples_ms": [2.0, 3.0, 4.0], "stop_reason": "noise 0.40% <= 50.00%",
       "metrics": {"tokenizer_ms": 20.0, "index_mb": 0.3, "step_mean": 4.5, "step_p50": 1.5, "step_p99": 40.0,
                   "steps_timed": 780, "py_overhead_us": 0.1}}
out.update(ans)
print("xgrammar prints this line first")
print(json.dumps(out))
)PY");
  return s;
}

// One experiment of `variant` beside lazy (ours), on a bundled schema without free text.
std::string experiment(const std::string& kind, const std::string& python, const std::string& extra = "",
                       const std::string& variant = "xgrammar") {
  return "  - name: peer\n    kind: " + kind + "\n    variants: [lazy, " + variant +
         "]\n    constraint: peers/closed_call\n    python: '" + python + "'\n" + extra;
}

Row peer_row(const ExperimentResult& r) {
  EXPECT_FALSE(r.rows.empty());
  return r.rows.empty() ? Row{} : r.rows.back();
}

std::string arg_after(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1];
  return {};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ConstrainPeer, OkCompileRowTakesTheScriptsSamplesAndOurJudgement) {
  if (!have_python3()) GTEST_SKIP() << "no python3 here (the answering stub is a python script)";
  Stub stub = answering({{"walks", {kValidDoc, R"({"tool":"fly"})"}}});
  const ExperimentResult res = run_spec_text(kDefaults, experiment("constrain-compile", stub.path));
  ASSERT_EQ(res.rows.size(), 2u);
  const Row row = peer_row(res);
  ASSERT_EQ(row.status, RowStatus::Ok) << row.message;
  EXPECT_EQ(row.samples, (std::vector<double>{2e-3, 3e-3, 4e-3}));
  EXPECT_EQ(row.stop_reason, "noise 0.40% <= 50.00% (timed in the peer's process)");
  ASSERT_TRUE(row.validation);
  EXPECT_TRUE(row.validation->ok);
  EXPECT_EQ(row.validation->metric, "disallowed_steps");
  EXPECT_TRUE(has(row.validation->detail, "steps of 8 valid documents through xgrammar 0.2.9's masks, in its own process"))
      << row.validation->detail;
  EXPECT_TRUE(
      has(row.message, "xgrammar 0.2.9: compile = compile_json_schema + GrammarMatcher (2 threads, no cache) (python 3.11.7)"))
      << row.message;
  // The walks' documents went through our validator: the second is no tool call.
  EXPECT_TRUE(
      has(row.message, "2 of 2 random walks under its mask finished, 1 valid by our validator (not: `{\"tool\":\"fly\"}`)"))
      << row.message;
  EXPECT_DOUBLE_EQ(metric(row, "walks_valid"), 1);
  EXPECT_DOUBLE_EQ(metric(row, "tokenizer"), 20);
  EXPECT_DOUBLE_EQ(metric(row, "index"), 0.3);
  // All-ones masks against our DFA's: nothing of ours missing, most of the vocabulary extra.
  EXPECT_DOUBLE_EQ(metric(row, "mask_missing"), 0);
  EXPECT_GT(metric(row, "mask_extra"), 40000);

  // What the script was asked, and what it was given: our vocabulary, our documents.
  const std::vector<std::string> argv = stub.args();
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "-c");
  EXPECT_EQ(argv[1], constrain_peer_script());
  const std::pair<const char*, const char*> asked[] = {{"--peer", "xgrammar"}, {"--mode", "compile"},  {"--warmup", "1"},
                                                       {"--min-samples", "3"}, {"--max-noise", "0.5"}, {"--timeout", "5"}};
  for (const auto& [flag, value] : asked) EXPECT_EQ(arg_after(argv, flag), value) << flag;
  EXPECT_FALSE(arg_after(argv, "--threads").empty());
  EXPECT_FALSE(test::path_exists(arg_after(argv, "--input"))) << "the input file outlives the row";
  const nlohmann::json in = ib::parse_json<nlohmann::json>(stub.file("input.json"));
  EXPECT_EQ(in["schema"].get<std::string>(),
            test::read_text(std::string(IB_SOURCE_DIR) + "/experiments/schemas/peers/closed_call.json"));
  EXPECT_EQ(in["whitespace"], "compact");
  EXPECT_EQ(in["strict_properties"], true);
  EXPECT_EQ(in["vocab"]["name"], "gpt2");
  ASSERT_EQ(in["vocab"]["tokens"].size(), 50257u);
  EXPECT_EQ(in["vocab"]["eos"], 50256);
  EXPECT_EQ(in["vocab"]["tokens"][50256], "");     // EOS: special, no bytes
  EXPECT_EQ(in["vocab"]["tokens"][90], "7b");      // GPT-2's "{"
  EXPECT_EQ(in["vocab"]["tokens"][4895], "7b22");  // and its "{\""
  EXPECT_EQ(in["documents"].size(), 8u);
  EXPECT_EQ(in["mask_steps"].size(), 12u);
  EXPECT_EQ(in["walks"], 8);
  for (const auto& d : in["documents"]) EXPECT_FALSE(d.empty());
}

TEST(ConstrainPeer, OkMaskRowReportsTheStepsAsOurRowsDo) {
  if (!have_python3()) GTEST_SKIP() << "no python3 here (the answering stub is a python script)";
  Stub stub = answering({{"walks", {kValidDoc}}});
  const ExperimentResult res = run_spec_text(
      kDefaults, experiment("constrain-mask", stub.path, "    documents: 3\n    whitespace: flexible\n", "llguidance"));
  ASSERT_EQ(res.rows.size(), 2u);
  const Row ours = res.rows[0], row = peer_row(res);
  ASSERT_EQ(row.status, RowStatus::Ok) << row.message;
  EXPECT_EQ(arg_after(stub.args(), "--mode"), "mask");
  EXPECT_EQ(arg_after(stub.args(), "--peer"), "llguidance");
  const nlohmann::json in = ib::parse_json<nlohmann::json>(stub.file("input.json"));
  ASSERT_EQ(in["documents"].size(), 3u);
  EXPECT_EQ(in["whitespace"], "flexible");
  size_t steps = 0;
  for (const auto& d : in["documents"]) steps += d.size() + 1;
  // The same documents as our row's: the same number of steps.
  EXPECT_DOUBLE_EQ(metric(row, "steps_per_run"), static_cast<double>(steps));
  EXPECT_DOUBLE_EQ(metric(ours, "steps_per_run"), static_cast<double>(steps));
  EXPECT_DOUBLE_EQ(metric(row, "step_p50"), 1.5);
  EXPECT_DOUBLE_EQ(metric(row, "step_p99"), 40);
  EXPECT_DOUBLE_EQ(metric(row, "step_mean"), 4.5);
  EXPECT_DOUBLE_EQ(metric(row, "bitmask"), metric(ours, "bitmask"));
  EXPECT_DOUBLE_EQ(metric(row, "py_overhead"), 0.1);
  EXPECT_DOUBLE_EQ(metric(row, "walks_valid"), 1);
}

TEST(ConstrainPeer, ARefusedTokenIsAFailedRowNeverTimed) {
  if (!have_python3()) GTEST_SKIP() << "no python3 here (the answering stub is a python script)";
  Stub refused = answering({{"refuse", {{1, 2}}}});
  const Row row = peer_row(run_spec_text(kDefaults, experiment("constrain-mask", refused.path)));
  EXPECT_EQ(row.status, RowStatus::Failed);
  EXPECT_TRUE(has(row.message, "validation failed: disallowed_steps 1.00 > 0 (")) << row.message;
  EXPECT_TRUE(has(row.message, "first: document 1 step 2: token ")) << row.message;
  EXPECT_TRUE(has(row.message, " not allowed after `")) << row.message;
  EXPECT_TRUE(has(row.message, "(xgrammar: token refused)")) << row.message;
  EXPECT_TRUE(row.samples.empty());

  Stub no_eos = answering({{"refuse", {{0, 1000}}}});
  const Row e = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", no_eos.path)));
  EXPECT_EQ(e.status, RowStatus::Failed);
  EXPECT_TRUE(has(e.message, "first: document 0: EOS not allowed at the end")) << e.message;

  Stub stopped = answering({{"stop", {2, 3}}});
  const Row s = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", stopped.path)));
  EXPECT_EQ(s.status, RowStatus::Failed);
  EXPECT_TRUE(has(s.message, "first: document 2 stopped at step 3 of ")) << s.message;
  EXPECT_TRUE(has(s.message, "at step 3 not accepted)")) << s.message;
}

TEST(ConstrainPeer, UnsupportedSaysWhyAndIsNotAFailure) {
  Stub stub = Stub::printing(
      R"({"status": "unsupported", "reason": "llguidance 1.9.1 refused the schema: Unimplemented keys: [\"not\"]"})");
  const Row row = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", stub.path, "", "llguidance")));
  EXPECT_EQ(row.status, RowStatus::Unsupported);
  EXPECT_EQ(row.message, "llguidance 1.9.1 refused the schema: Unimplemented keys: [\"not\"]");
  EXPECT_FALSE(row.validation);
}

TEST(ConstrainPeer, NoInterpreterIsAnUnsupportedRow) {
  for (const char* kind : {"constrain-compile", "constrain-mask"}) {
    const Row row = peer_row(run_spec_text(kDefaults, experiment(kind, "/nonexistent/python3")));
    EXPECT_EQ(row.status, RowStatus::Unsupported) << kind;
    EXPECT_EQ(row.message, "no `/nonexistent/python3` here (the `python` key): the xgrammar peer needs python3 with xgrammar")
        << kind;
  }
  const Row in_path = peer_row(run_spec_text(kDefaults, experiment("constrain-mask", "no-such-python-ib", "", "llguidance")));
  EXPECT_EQ(in_path.status, RowStatus::Unsupported);
  EXPECT_TRUE(has(in_path.message, "no `no-such-python-ib` here")) << in_path.message;
  EXPECT_TRUE(has(in_path.message, "the llguidance peer needs python3 with llguidance")) << in_path.message;
}

TEST(ConstrainPeer, ScriptFailuresAreFailedRowsWithTheReason) {
  Stub failed = Stub::printing(R"({"status": "failed", "reason": "RuntimeError: something broke"})");
  const Row f = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", failed.path)));
  EXPECT_EQ(f.status, RowStatus::Failed);
  EXPECT_EQ(f.message, "xgrammar peer failed: RuntimeError: something broke");

  Stub garbled = Stub::printing("{\"status\": \"ok\", \"check\": \n");
  const Row g = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", garbled.path)));
  EXPECT_EQ(g.status, RowStatus::Failed);
  EXPECT_TRUE(has(g.message, "xgrammar peer printed an unreadable result")) << g.message;

  Stub partial = Stub::printing(R"({"status": "ok", "peer_version": "0.2.9"})");  // no check
  const Row p = peer_row(run_spec_text(kDefaults, experiment("constrain-mask", partial.path)));
  EXPECT_EQ(p.status, RowStatus::Failed);
  EXPECT_TRUE(has(p.message, "unreadable result")) << p.message;

  Stub short_check = Stub::printing(R"({"status": "ok", "check": {"documents": [], "masks": [], "walks": []}})");
  const Row c = peer_row(run_spec_text(kDefaults, experiment("constrain-mask", short_check.path)));
  EXPECT_EQ(c.status, RowStatus::Failed);
  EXPECT_TRUE(has(c.message, "unreadable result: 0 documents checked of 8")) << c.message;

  Stub silent =
      Stub::printing("", "Traceback (most recent call last):\n  ...\nImportError: libxgrammar_bindings.so: cannot open\n", 1);
  const Row s = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", silent.path)));
  EXPECT_EQ(s.status, RowStatus::Failed);
  EXPECT_TRUE(has(s.message, "exited with code 1 and printed no result: ImportError: libxgrammar_bindings.so: cannot open"))
      << s.message;

  Stub odd = Stub::printing(R"({"status": "maybe"})");
  const Row u = peer_row(run_spec_text(kDefaults, experiment("constrain-compile", odd.path)));
  EXPECT_EQ(u.status, RowStatus::Failed);
  EXPECT_TRUE(has(u.message, "unknown status 'maybe'")) << u.message;
}

TEST(ConstrainPeer, AHungPeerIsKilledAtItsDeadline) {
  Stub stub("echo 'importing torch' >&2\nsleep 30");
  const auto t0 = std::chrono::steady_clock::now();
  const Row row =
      peer_row(run_spec_text(kDefaults, experiment("constrain-mask", stub.path, "    timeout: 0.2s\n    peer_timeout: 0.3s\n")));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(row.status, RowStatus::Failed);
  EXPECT_TRUE(
      has(row.message, "xgrammar peer killed after 0.5 s (the row's timeout + peer_timeout); its last words: importing torch"))
      << row.message;
  EXPECT_LT(took, 10.0);
}

TEST(ConstrainPeer, RegexAndChoiceAreNotGivenToThePeers) {
  Stub stub = Stub::printing(R"({"status": "failed", "reason": "should not run"})");
  const ExperimentResult res =
      run_spec_text(kDefaults,
                    "  - name: e\n    kind: constrain-compile\n    variants: [lazy, xgrammar, llguidance]\n"
                    "    constraint: ['regex:[a-z]{1,8}', 'choice:yes|no']\n    python: '" +
                        stub.path + "'\n");
  ASSERT_EQ(res.rows.size(), 6u);
  for (const Row& row : res.rows) {
    if (row.variant == "lazy") continue;
    EXPECT_EQ(row.status, RowStatus::Unsupported) << row.variant;
    EXPECT_EQ(row.message, "the " + row.variant + " peer is given JSON Schemas only (regex: and choice: are our syntax)");
  }
  EXPECT_FALSE(stub.ran());
}

TEST(ConstrainPeer, OnlyPeerExperimentsCarryThePythonKeys) {
  const ExperimentResult ours = run_spec_text(kDefaults, "  - name: e\n    kind: constrain-compile\n    variants: [lazy]\n");
  ASSERT_EQ(ours.rows.size(), 1u);
  EXPECT_FALSE(PointAccess::find(ours.rows[0].point, "python"));
  EXPECT_FALSE(PointAccess::find(ours.rows[0].point, "peer_timeout"));
  EXPECT_TRUE(PointAccess::find(ours.rows[0].point, "constraint"));
  const ExperimentResult peers = run_spec_text(kDefaults, experiment("constrain-mask", "/nonexistent/python3"));
  EXPECT_TRUE(PointAccess::find(peers.rows[0].point, "python"));
  for (const char* kind : {"constrain-compile", "constrain-mask"}) {
    const KindInfo* k = Registry::instance().kind(kind);
    ASSERT_TRUE(k) << kind;
    for (const char* peer : {"xgrammar", "llguidance"}) {
      const VariantDecl* d = find_variant(*k, peer);
      ASSERT_TRUE(d) << kind << " " << peer;
      EXPECT_TRUE(d->host);
      EXPECT_TRUE(d->uses.empty());  // every key, python's among them
    }
    const VariantDecl* lazy = find_variant(*k, "lazy");
    ASSERT_TRUE(lazy);
    EXPECT_EQ(std::find(lazy->uses.begin(), lazy->uses.end(), "python"), lazy->uses.end());
    EXPECT_NE(std::find(lazy->uses.begin(), lazy->uses.end(), "vocab"), lazy->uses.end());
  }
}

TEST(ConstrainPeer, TheExperimentSpecParses) {
  SpecOptions opt;
  const std::string path = std::string(IB_SOURCE_DIR) + "/experiments/constrain-peers.yaml";
  const Spec spec = parse_spec(test::read_text(path), path, opt);
  ASSERT_EQ(spec.experiments.size(), 2u);
  for (const auto& e : spec.experiments) {
    EXPECT_NE(std::find(e.variants.begin(), e.variants.end(), "xgrammar"), e.variants.end()) << e.name;
    EXPECT_NE(std::find(e.variants.begin(), e.variants.end(), "llguidance"), e.variants.end()) << e.name;
  }
}

// ---- the real script ----

TEST(ConstrainPeerScript, CompiledInCopyIsTheSourceFile) {
  const std::string file = test::read_text(std::string(IB_SOURCE_DIR) + "/scripts/constrain_peer.py");
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(std::string(constrain_peer_script()), file) << "rebuild: the binary holds an older script";
}

TEST(ConstrainPeerScript, ParsesAndPrintsItsHelpUnderPython3) {
  if (!have_python3()) GTEST_SKIP() << "no python3 here";
  const PeerProcess p = run_peer_process({"python3", "-c", constrain_peer_script(), "--help"}, 60);
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(has(p.out, "usage: constrain_peer.py")) << p.out;
  EXPECT_TRUE(has(p.out, "--peer {xgrammar,llguidance}")) << p.out;
  EXPECT_TRUE(has(p.out, "--mode {compile,mask}")) << p.out;
}

bool has_module(const std::string& python, const std::string& module) {
  const PeerProcess p = run_peer_process({python, "-c", "import " + module}, 120);
  return p.spawn_error.empty() && !p.timed_out && p.exit_code == 0;
}

TEST(ConstrainPeerScript, WithoutThePackageTheRowSaysSo) {
  if (!have_python3()) GTEST_SKIP() << "no python3 here";
  for (const char* peer : {"xgrammar", "llguidance"}) {
    if (has_module("python3", peer)) {
      std::cout << "python3 has " << peer << " (the real-package test covers it)\n";
      continue;
    }
    const Row row = peer_row(run_spec_text(kDefaults, experiment("constrain-mask", "python3", "", peer)));
    EXPECT_EQ(row.status, RowStatus::Unsupported) << peer;
    EXPECT_TRUE(has(row.message, std::string("python3 with ") + peer + " not found: ")) << row.message;
    EXPECT_TRUE(has(row.message, std::string("cannot import ") + peer + " (ModuleNotFoundError")) << row.message;
  }
}

// The interpreter the real-package tests use: IB_TEST_PYTHON, else the developers' .venv-dev, else python3.
std::string test_python() {
  if (const char* env = std::getenv("IB_TEST_PYTHON"); env && *env) return env;
  const std::string venv = std::string(IB_SOURCE_DIR) + "/.venv-dev/bin/python";
  if (::access(venv.c_str(), X_OK) == 0) return venv;
  return "python3";
}

TEST(ConstrainPeerScript, RealPeersPassOnAClosedSchemaAndAreTimed) {
  const std::string python = test_python();
  if (!has_module(python, "xgrammar") || !has_module(python, "llguidance"))
    GTEST_SKIP() << python << " cannot import xgrammar and llguidance (scripts/dev-venv installs them)";
  for (const char* kind : {"constrain-compile", "constrain-mask"}) {
    const ExperimentResult res =
        run_spec_text("{warmup: 1, min_samples: 3, min_time: 0, max_noise: 50%, timeout: 2s}",
                      std::string("  - name: real\n    kind: ") + kind +
                          "\n    variants: [xgrammar, llguidance]\n    constraint: peers/closed_call\n"
                          "    whitespace: [compact, flexible]\n    python: '" +
                          python + "'\n" + (kind == std::string("constrain-mask") ? "    documents: 3\n" : ""));
    ib::testing::expect_all_ok(res, 4);
    for (const Row& row : res.rows) {
      EXPECT_GE(row.stats.n, 3u) << row.variant;
      EXPECT_TRUE(has(row.stop_reason, "(timed in the peer's process)")) << row.stop_reason;
      EXPECT_TRUE(has(row.message, row.variant + " ")) << row.message;  // its version
      EXPECT_DOUBLE_EQ(metric(row, "walks_valid"), metric(row, "walks_finished")) << row.variant << ": " << row.message;
      if (row.variant == "xgrammar") {
        EXPECT_DOUBLE_EQ(metric(row, "mask_missing"), 0) << row.message;
      }
      if (std::string(kind) == "constrain-mask") {
        EXPECT_GT(metric(row, "step_p50"), 0);
      }
    }
  }
}

TEST(ConstrainPeerScript, RealPeersRefusalsAndNarrowerLanguagesShowInTheRows) {
  const std::string python = test_python();
  if (!has_module(python, "xgrammar") || !has_module(python, "llguidance"))
    GTEST_SKIP() << python << " cannot import xgrammar and llguidance (scripts/dev-venv installs them)";
  const std::string dir = test::make_temp_dir();
  // llguidance implements no `not`: an unsupported row with its error.
  test::write_text(dir + "/not.json",
                   R"({"type": "object", "properties": {"a": {"type": "integer", "not": {"const": 3}}}, "required": ["a"]})");
  const Row refused = peer_row(run_spec_text(kDefaults,
                                             "  - name: e\n    kind: constrain-compile\n    variants: [llguidance]\n"
                                             "    constraint: '" +
                                                 dir + "/not.json'\n    python: '" + python + "'\n"));
  EXPECT_EQ(refused.status, RowStatus::Unsupported);
  EXPECT_TRUE(has(refused.message, "llguidance 1.9.1 refused the schema: ")) << refused.message;
  EXPECT_TRUE(has(refused.message, "not")) << refused.message;
  // 100 characters of free text: our valid documents escape some (8 of them, 1% escapes per character), and
  // XGrammar's length-bounded strings take no escapes.
  test::write_text(dir + "/long.json", R"({"type": "string", "minLength": 100, "maxLength": 100})");
  const Row narrow = peer_row(run_spec_text(kDefaults,
                                            "  - name: e\n    kind: constrain-compile\n    variants: [xgrammar]\n"
                                            "    constraint: '" +
                                                dir + "/long.json'\n    python: '" + python + "'\n"));
  EXPECT_EQ(narrow.status, RowStatus::Failed);
  EXPECT_TRUE(has(narrow.message, "validation failed: disallowed_steps")) << narrow.message;
  EXPECT_TRUE(has(narrow.message, " not allowed after ")) << narrow.message;
  EXPECT_TRUE(narrow.samples.empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ib::constrain
