// run_peer_process (core/peer_process.h): the child's process group is killed at the deadline,
// its output is kept, a missing program is a spawn error; last_line and result_line read a peer.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "../cli/process.h"

#include "core/peer_process.h"

namespace ib {
namespace {

TEST(PeerProcess, ProcessGroupIsKilledAtTheDeadline) {
  const std::string dir = test::make_temp_dir();
  const std::string pid_file = dir + "/pid";
  // The shell's child (sleep) would keep the pipes open: killing the group ends both.
  const PeerProcess p =
      run_peer_process({"/bin/sh", "-c", "echo out; echo err >&2; sleep 30 & echo $! > '" + pid_file + "'; wait"}, 0.5);
  EXPECT_TRUE(p.timed_out);
  EXPECT_EQ(p.out, "out\n");
  EXPECT_EQ(p.err, "err\n");
  EXPECT_EQ(p.exit_code, 128 + 9);
  std::string pid = test::read_text(pid_file);
  while (!pid.empty() && pid.back() == '\n') pid.pop_back();
  ASSERT_FALSE(pid.empty());
  std::string state;
  for (int i = 0; i < 50; ++i) {  // the orphaned sleep is gone, or a zombie waiting for init
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(stat, line)) break;
    state = line.substr(line.rfind(')') + 2, 1);
    if (state == "Z") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(state.empty() || state == "Z") << "sleep " << pid << " still in state " << state;
  std::filesystem::remove_all(dir);

  const PeerProcess quick = run_peer_process({"/bin/sh", "-c", "echo hi; exit 3"}, 10);
  EXPECT_FALSE(quick.timed_out);
  EXPECT_EQ(quick.exit_code, 3);
  EXPECT_EQ(quick.out, "hi\n");
  const PeerProcess missing = run_peer_process({"/nonexistent/ib-python"}, 10);
  EXPECT_FALSE(missing.spawn_error.empty());
}

TEST(PeerProcess, LastLineAndResultLineReadWhatAPeerPrinted) {
  EXPECT_EQ(last_line("Traceback\n  File x\nImportError: no torch\n\n"), "ImportError: no torch");
  EXPECT_EQ(last_line(" \n\t"), "");
  EXPECT_EQ(result_line("loading\n{\"status\": \"ok\"}\nbye\n"), "{\"status\": \"ok\"}");
  EXPECT_EQ(result_line("{\"a\": 1}\n  {\"b\": 2}\n"), "  {\"b\": 2}");
  EXPECT_EQ(result_line("no json here\n"), "");
}

}  // namespace
}  // namespace ib
