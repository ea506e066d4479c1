// The torch SDPA peer rows of `attention`. Stub interpreters (shell scripts printing canned JSON)
// stand for python, so every way a peer row can end (ok, unsupported, OOM, failed, unreadable,
// silent, killed at its deadline, a failed check) goes through the real runner without torch;
// the compiled-in script is checked against scripts/torch_sdpa_peer.py and run with python3,
// and on torch itself (CPU) where the interpreter has it (IB_TEST_PYTHON, else python3).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "../cli/process.h"
#include "../common/fake_interpreter.h"
#include "../common/run_kind.h"

#include "core/peer_process.h"
#include "core/point_access.h"
#include "core/runner.h"
#include "kinds/attention/torch_peer.h"

namespace ib::attention {
namespace {

using ib::testing::run_spec_text;

const char* kDefaults = "{warmup: 1, min_samples: 3, min_time: 0, max_noise: 50%, timeout: 5s}";

using Stub = test::FakeInterpreter;

// One experiment of the CPU peer against cpu_flash (the baseline) on a small shape.
std::string experiment(const std::string& python, const std::string& extra = "") {
  return "  - name: peer\n    kind: attention\n    variants: [cpu_flash, cpu_torch_sdpa]\n    baseline: cpu_flash\n"
         "    heads: 2\n    kv_heads: 1\n    head_dim: 32\n    seq: 64\n    python: '" +
         python + "'\n" + extra;
}

nlohmann::json ok_result() {
  return {{"status", "ok"},
          {"torch", "2.11.0+cu130"},
          {"device", "CPU, 2 torch threads"},
          {"backend", "default"},
          {"check",
           {{"metric", "rel_l2"},
            {"value", 2e-7},
            {"tolerance", 1e-4},
            {"nan_rows", 0},
            {"rows_checked", 128},
            {"rows", 128},
            {"max_abs_error", 3e-8}}},
          {"note", "torch dispatched to flash"},
          {"samples_ms", {2.0, 3.0, 4.0}},
          {"stop_reason", "noise 0.40% <= 50.00%"},
          {"peak_memory_bytes", 3 << 20},
          {"io_bytes", 1 << 20}};
}

// The peer's row (a copy: the result is often a temporary).
Row peer_row(const ExperimentResult& r) {
  EXPECT_FALSE(r.rows.empty());
  return r.rows.empty() ? Row{} : r.rows.back();
}

// The value after `flag` in argv ("" when absent).
std::string arg_after(const std::vector<std::string>& argv, const std::string& flag) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1];
  return {};
}

TEST(TorchPeer, OkRowTakesTheScriptsGateSamplesAndMemory) {
  Stub stub = Stub::printing("torch prints this line first\n" + ok_result().dump() + "\n");
  const ExperimentResult res = run_spec_text(kDefaults, experiment(stub.path));
  ASSERT_EQ(res.rows.size(), 2u);
  const Row row = peer_row(res);
  ASSERT_EQ(row.status, RowStatus::Ok) << row.message;
  EXPECT_EQ(row.samples, (std::vector<double>{2e-3, 3e-3, 4e-3}));
  EXPECT_DOUBLE_EQ(row.stats.median, 3e-3);
  EXPECT_EQ(row.stop_reason, "noise 0.40% <= 50.00% (timed in the peer's process)");
  ASSERT_TRUE(row.validation);
  EXPECT_TRUE(row.validation->ok);
  EXPECT_EQ(row.validation->metric, "rel_l2");
  EXPECT_DOUBLE_EQ(row.validation->tolerance, 1e-4);  // our CPU gate, not the script's word
  EXPECT_NE(row.validation->detail.find("torch 2.11.0+cu130 on CPU, 2 torch threads"), std::string::npos)
      << row.validation->detail;
  EXPECT_NE(row.validation->detail.find("128 of 128 rows vs float64 in torch"), std::string::npos) << row.validation->detail;
  EXPECT_EQ(row.peak_memory, 3 << 20);
  EXPECT_DOUBLE_EQ(ib::testing::metric(row, "extra mem"), 2.0);
  EXPECT_EQ(row.message, "torch dispatched to flash");
  EXPECT_GT(row.work.flops, 0);
  EXPECT_TRUE(row.speedup);  // side by side with the baseline

  // What the script was asked: the point's shape, our gate, the row's stopping rule, CPU fp32.
  const std::vector<std::string> argv = stub.args();
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "-c");
  EXPECT_EQ(argv[1], torch_sdpa_peer_script());
  const std::pair<const char*, const char*> asked[] = {{"--device", "cpu"},    {"--backend", "default"},  {"--heads", "2"},
                                                       {"--kv-heads", "1"},    {"--head-dim", "32"},      {"--seq-k", "64"},
                                                       {"--seq-q", "64"},      {"--tolerance", "0.0001"}, {"--min-samples", "3"},
                                                       {"--max-noise", "0.5"}, {"--timeout", "5"},        {"--compute", "fp32"}};
  for (const auto& [flag, value] : asked) EXPECT_EQ(arg_after(argv, flag), value) << flag;
  EXPECT_FALSE(arg_after(argv, "--threads").empty());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--causal"), argv.end());
}

TEST(TorchPeer, UnsupportedSaysWhyAndIsNotAFailure) {
  Stub stub = Stub::printing(R"({"status": "unsupported", "reason": "torch 2.11.0 SDPA flash refused the shape: no masks"})");
  const Row row = peer_row(run_spec_text(kDefaults, experiment(stub.path)));
  EXPECT_EQ(row.status, RowStatus::Unsupported);
  EXPECT_EQ(row.message, "torch 2.11.0 SDPA flash refused the shape: no masks");
  EXPECT_FALSE(row.validation);
  EXPECT_EQ(row.peak_memory, -1);
}

TEST(TorchPeer, NoInterpreterIsAnUnsupportedRow) {
  const Row row = peer_row(run_spec_text(kDefaults, experiment("/nonexistent/python3")));
  EXPECT_EQ(row.status, RowStatus::Unsupported);
  EXPECT_EQ(row.message, "no `/nonexistent/python3` here (the `python` key): the torch peer needs python3 with torch");
  const Row in_path = peer_row(run_spec_text(kDefaults, experiment("no-such-python-ib")));
  EXPECT_EQ(in_path.status, RowStatus::Unsupported);
  EXPECT_NE(in_path.message.find("no `no-such-python-ib` here"), std::string::npos) << in_path.message;
}

TEST(TorchPeer, AFailedCheckIsAFailedRowNeverTimed) {
  nlohmann::json bad = ok_result();
  bad["check"]["value"] = 0.05;
  bad.erase("samples_ms");  // the script does not time after a failed check
  Stub stub = Stub::printing(bad.dump());
  const Row row = peer_row(run_spec_text(kDefaults, experiment(stub.path)));
  EXPECT_EQ(row.status, RowStatus::Failed);
  EXPECT_NE(row.message.find("validation failed: rel_l2 0.05 > 0.0001 (torch 2.11.0+cu130"), std::string::npos) << row.message;
  EXPECT_TRUE(row.samples.empty());

  nlohmann::json nan = ok_result();
  nan["check"]["nan_rows"] = 7;
  Stub nan_stub = Stub::printing(nan.dump());
  const Row nan_row = peer_row(run_spec_text(kDefaults, experiment(nan_stub.path)));
  EXPECT_EQ(nan_row.status, RowStatus::Failed);
  EXPECT_NE(nan_row.message.find("nan_rows 7"), std::string::npos) << nan_row.message;
  EXPECT_NE(nan_row.message.find("7 of 128 rows hold NaN/inf"), std::string::npos) << nan_row.message;
}

TEST(TorchPeer, ScriptFailuresAreFailedRowsWithTheReason) {
  Stub failed = Stub::printing(R"({"status": "failed", "reason": "RuntimeError: CUDA error: an illegal memory access"})");
  const Row f = peer_row(run_spec_text(kDefaults, experiment(failed.path)));
  EXPECT_EQ(f.status, RowStatus::Failed);
  EXPECT_EQ(f.message, "torch peer failed: RuntimeError: CUDA error: an illegal memory access");

  Stub oom =
      Stub::printing(R"({"status": "oom", "reason": "OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 GiB"})");
  const Row o = peer_row(run_spec_text(kDefaults, experiment(oom.path)));
  EXPECT_EQ(o.status, RowStatus::Oom);
  EXPECT_NE(o.message.find("Tried to allocate 64.00 GiB"), std::string::npos) << o.message;

  Stub garbled = Stub::printing("{\"status\": \"ok\", \"check\": \n");
  const Row g = peer_row(run_spec_text(kDefaults, experiment(garbled.path)));
  EXPECT_EQ(g.status, RowStatus::Failed);
  EXPECT_NE(g.message.find("torch peer printed an unreadable result"), std::string::npos) << g.message;

  Stub partial = Stub::printing(R"({"status": "ok", "torch": "2.11.0"})");  // no check
  const Row p = peer_row(run_spec_text(kDefaults, experiment(partial.path)));
  EXPECT_EQ(p.status, RowStatus::Failed);
  EXPECT_NE(p.message.find("unreadable result"), std::string::npos) << p.message;

  Stub silent = Stub::printing("", "Traceback (most recent call last):\n  ...\nImportError: libcudnn.so.9: cannot open\n", 1);
  const Row s = peer_row(run_spec_text(kDefaults, experiment(silent.path)));
  EXPECT_EQ(s.status, RowStatus::Failed);
  EXPECT_NE(s.message.find("exited with code 1 and printed no result: ImportError: libcudnn.so.9: cannot open"),
            std::string::npos)
      << s.message;

  Stub odd = Stub::printing(R"({"status": "maybe"})");
  const Row u = peer_row(run_spec_text(kDefaults, experiment(odd.path)));
  EXPECT_EQ(u.status, RowStatus::Failed);
  EXPECT_NE(u.message.find("unknown status 'maybe'"), std::string::npos) << u.message;
}

TEST(TorchPeer, AHungPeerIsKilledAtItsDeadline) {
  Stub stub("echo 'loading torch' >&2\nsleep 30");
  const auto t0 = std::chrono::steady_clock::now();
  const Row row = peer_row(run_spec_text(kDefaults, experiment(stub.path, "    timeout: 0.2s\n    peer_timeout: 0.3s\n")));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(row.status, RowStatus::Failed);
  EXPECT_NE(row.message.find("torch peer killed after 0.5 s (the row's timeout + peer_timeout); its last words: loading torch"),
            std::string::npos)
      << row.message;
  EXPECT_LT(took, 5.0);
}

TEST(TorchPeer, CudaPeersNeedTheCudaBackend) {
  const ExperimentResult res =
      run_spec_text(kDefaults,
                    "  - name: gpu-peers\n    kind: attention\n    variants: [torch_sdpa, torch_sdpa_flash, torch_sdpa_cudnn, "
                    "torch_sdpa_efficient, torch_sdpa_math]\n    heads: 2\n    head_dim: 32\n    seq: 64\n");
  ASSERT_EQ(res.rows.size(), 5u);
  for (const Row& row : res.rows) {
    EXPECT_EQ(row.status, RowStatus::Unsupported) << row.variant;
    EXPECT_EQ(row.message, "needs the cuda backend") << row.variant;
  }
}

TEST(TorchPeer, OnlyPeerExperimentsCarryThePythonKeys) {
  const ExperimentResult ours = run_spec_text(kDefaults,
                                              "  - name: e\n    kind: attention\n    variants: [cpu_flash]\n"
                                              "    heads: 2\n    head_dim: 32\n    seq: 64\n");
  ASSERT_EQ(ours.rows.size(), 1u);
  EXPECT_FALSE(PointAccess::find(ours.rows[0].point, "python"));
  EXPECT_FALSE(PointAccess::find(ours.rows[0].point, "peer_timeout"));
  const ExperimentResult peers = run_spec_text(kDefaults, experiment("/nonexistent/python3"));
  EXPECT_TRUE(PointAccess::find(peers.rows[0].point, "python"));
}

// ---- the real script ----

TEST(TorchPeerScript, CompiledInCopyIsTheSourceFile) {
  const std::string file = test::read_text(std::string(IB_SOURCE_DIR) + "/scripts/torch_sdpa_peer.py");
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(std::string(torch_sdpa_peer_script()), file) << "rebuild: the binary holds an older script";
}

std::string test_python() {
  const char* env = std::getenv("IB_TEST_PYTHON");
  return env && *env ? env : "python3";
}

bool has_torch(const std::string& python) {
  const PeerProcess p = run_peer_process({python, "-c", "import torch"}, 120);
  return p.spawn_error.empty() && !p.timed_out && p.exit_code == 0;
}

TEST(TorchPeerScript, ParsesAndPrintsItsHelpUnderPython3) {
  const PeerProcess p = run_peer_process({"python3", "-c", torch_sdpa_peer_script(), "--help"}, 60);
  if (!p.spawn_error.empty()) GTEST_SKIP() << "no python3 here";
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("usage: torch_sdpa_peer.py"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("--backend {default,flash,efficient,cudnn,math}"), std::string::npos) << p.out;
}

TEST(TorchPeerScript, WithoutTorchTheRowSaysSo) {
  const PeerProcess probe = run_peer_process({"python3", "-c", "pass"}, 60);
  if (!probe.spawn_error.empty()) GTEST_SKIP() << "no python3 here";
  if (has_torch("python3")) GTEST_SKIP() << "python3 has torch (the real-torch test covers it)";
  const Row row = peer_row(run_spec_text(kDefaults, experiment("python3")));
  EXPECT_EQ(row.status, RowStatus::Unsupported);
  EXPECT_NE(row.message.find("python3 with torch not found: "), std::string::npos) << row.message;
  EXPECT_NE(row.message.find("cannot import torch (ModuleNotFoundError"), std::string::npos) << row.message;
}

TEST(TorchPeerScript, RealTorchOnTheCpuPassesTheGate) {
  const std::string python = test_python();
  if (!has_torch(python)) GTEST_SKIP() << python << " cannot import torch";
  // Causal or not, GQA, fewer queries than keys (bottom-right causal), a sliding window.
  const std::string cases[] = {
      "    heads: 2\n    causal: [true, false]\n    seq: [64, 100]\n",
      "    heads: 4\n    seq_q: 17\n    seq: 100\n    window: [0, 16]\n",
  };
  for (const std::string& c : cases) {
    const ExperimentResult res =
        run_spec_text(kDefaults,
                      "  - name: real\n    kind: attention\n    variants: [cpu_torch_sdpa]\n    kv_heads: 1\n"
                      "    head_dim: 32\n    python: '" +
                          python + "'\n" + c);
    ib::testing::expect_all_ok(res);
    for (const Row& row : res.rows) {
      EXPECT_GE(row.stats.n, 3u) << row.point.label();
      EXPECT_NE(row.validation->detail.find("on CPU, "), std::string::npos) << row.validation->detail;
      EXPECT_NE(row.stop_reason.find("(timed in the peer's process)"), std::string::npos) << row.stop_reason;
    }
  }
}

}  // namespace
}  // namespace ib::attention
