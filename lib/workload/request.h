// A request of a load, as every workload here makes it and every consumer reads it: the serving
// scheduler (serve::Request adds what a server's request asks beyond the load), the prefix-cache
// replays, and the endpoint client. Tokens are ids of the model's vocabulary.
#pragma once

#include <cstdint>
#include <vector>

namespace ib::workload {

struct Request {
  int64_t id = 0;
  double arrival = 0;  // seconds after the load's start
  std::vector<int32_t> prompt;
  int max_tokens = 1;  // output tokens, all generated (a load's requests ignore EOS, as vLLM's benchmark)
  // The request's class in its workload: 's' short (or system prompt + a question), 'l' long
  // prompt, 'c' chat turn, 'f' few-shot prompt.
  char type = 's';
  int adapter = -1;  // LoRA: the adapter its rows use (-1: the base model)
};

// The key that keeps apart what different adapters cached for the same tokens (vLLM's extra
// keys of a block hash): 0 for the base model.
inline uint64_t cache_salt(const Request& r) { return static_cast<uint64_t>(r.adapter + 1); }

}  // namespace ib::workload
