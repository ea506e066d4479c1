// Request traces for the prefix-caching experiments: the chapter's agent case (one shared system
// prompt + a short query per request) and a mixed server load (several tenants' system prompts,
// multi-turn chats whose prefix grows every turn, few-shot prompts, Poisson arrivals). Tokens are
// seeded random ids: what a prefix cache sees is only which prompts share which prefixes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/request.h"

namespace ib::workload {

// Request i = the shared system prompt + a query of query_min … query_max tokens (seeded by i).
class SystemPromptWorkload {
 public:
  SystemPromptWorkload(int vocab, int system_prompt, int query_min, int query_max, uint64_t seed);
  // Text prompts, tokenized: request i is `system` + queries[i mod queries.size()].
  SystemPromptWorkload(std::vector<int32_t> system, std::vector<std::vector<int32_t>> queries);
  std::vector<int32_t> request(uint64_t i) const;
  int system_prompt() const { return static_cast<int>(system_.size()); }

 private:
  int vocab_ = 0, query_min_ = 1, query_max_ = 1;
  uint64_t seed_ = 0;
  std::vector<int32_t> system_;
  std::vector<std::vector<int32_t>> queries_;  // text queries; empty: random ones
};

struct MixedOptions {
  int requests = 200;
  double qps = 10;              // Poisson arrival rate
  int tenants = 4;              // each with its own system prompt and few-shot examples
  int system_prompt = 1000;     // mean tokens; tenant t's is 0.5 … 1.5 × this, spread evenly
  int user_tokens = 40;         // a user message or question: 0.5 … 1.5 × this
  int reply_tokens = 120;       // the assistant's reply, carried into the next turn's prompt
  int max_turns = 6;            // turns of a chat
  int fewshot_tokens = 600;     // a tenant's few-shot examples (after its system prompt)
  double chat_share = 0.5;      // fraction of requests that are chat turns
  double fewshot_share = 0.25;  // ... few-shot prompts; the rest: system prompt + a question
  int max_prompt = 0;           // longest prompt allowed (the model's positions); 0 = no cap
};

// Requests in arrival order. Up to 8 chats are open at a time; a chat request continues an open
// chat (70%) or opens one. The assistant's reply is not decoded here (TTFT experiments): its
// tokens enter the next turn's prompt, so a server that caches only prompts prefills them then.
std::vector<Request> mixed_workload(const MixedOptions& o, int vocab, uint64_t seed);

// The system-prompt workload as a trace (count requests, Poisson arrivals at qps).
std::vector<Request> system_prompt_trace(const SystemPromptWorkload& w, int count, double qps, uint64_t seed);

// "120 requests: 61 chat turns, 30 few-shot, 29 single; prompts 180–2,400 tokens (mean 900)".
std::string describe_prefix_trace(const std::vector<Request>& trace);

}  // namespace ib::workload
