// A request as the serving scheduler sees it: a prompt's tokens, how many tokens to generate, and
// when it arrived. Output lengths are fixed (vLLM's benchmark runs with ignore_eos), so the work a
// load asks for does not depend on what the model writes.
#pragma once

#include <cstdint>
#include <vector>

namespace ib::serve {

struct Request {
  int64_t id = 0;
  double arrival = 0;  // seconds after the load's start
  std::vector<int32_t> prompt;
  int max_tokens = 1;  // output tokens, all generated (no stop at EOS)
  char type = 's';     // the workload's class of the request: 's' short, 'l' long prompt
};

// One output token of one request, as a step produced it.
struct Emitted {
  int64_t request = 0;
  int32_t token = 0;
  bool finished = false;  // the request's last token: its sequence was released
};

}  // namespace ib::serve
