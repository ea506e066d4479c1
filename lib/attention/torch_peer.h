// The `torch_sdpa*` peer rows of `attention`: PyTorch's scaled_dot_product_attention on the same
// shape, measured by scripts/torch_sdpa_peer.py (compiled into the binary) in its own python
// process, which prints one JSON line. Declared here for the tests.
#pragma once

#include <string>
#include <vector>

#include "core/variant.h"

namespace ib::attention {

// The text of scripts/torch_sdpa_peer.py as this binary was built with it.
const char* torch_sdpa_peer_script();

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

}  // namespace ib::attention
