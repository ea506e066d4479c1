// A child process run to completion or to a deadline, its stdout and stderr collected: how the
// Python peers (torch SDPA, XGrammar, llguidance) run, each in its own process so that a crash,
// a hang or a slow import in a package cannot take the measuring process with it.
#pragma once

#include <string>
#include <vector>

namespace ib {

// A finished (or killed) child process.
struct PeerProcess {
  std::string spawn_error;  // non-empty: it never started (e.g. "No such file or directory")
  bool timed_out = false;   // killed at the deadline
  int exit_code = -1;       // 128 + signal when killed by a signal
  std::string out, err;
};

// Runs argv[0] (searched in PATH when it has no '/') with stdin from /dev/null, collecting stdout
// and stderr; kills its process group after `timeout_s` seconds (timed_out), or when Ctrl-C was
// pressed here (then throws).
PeerProcess run_peer_process(const std::vector<std::string>& argv, double timeout_s);
// The last non-blank line of a stream (a peer's last words on stderr).
std::string last_line(const std::string& text);
// The last stdout line that starts with '{': a peer's result (packages may print other lines first).
std::string result_line(const std::string& out);

}  // namespace ib
