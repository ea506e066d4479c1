// KV-cache eviction policies (§8.3) as KV managers with a fixed budget of slots: the cache holds
// at most `budget` tokens, a new token takes a free slot while there is one and otherwise the slot
// of the token the policy evicts for it, so the K/V memory never grows past the budget.
//   full            never evicts (the baseline; memory grows with the context)
//   sliding_window  the last `budget` tokens (a plain window, no sinks: "window without sinks")
//   streaming_llm   StreamingLLM (Xiao et al. 2023): the first `sinks` tokens + the last budget − sinks
//   h2o             H2O (Zhang et al. 2023): the last `recent` tokens + the heavy hitters, the older
//                   tokens with the largest attention accumulated over every query so far; a new
//                   token evicts the older token with the lowest accumulated score
// Positions arrive in order 0, 1, 2, ...; the newest token is always kept (a query sees itself).
// One policy serves one cache (one head, or every head of a model sharing one kept set).
#pragma once

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ib::kvcache {

class KvPolicy {
 public:
  static constexpr int kUnbounded = std::numeric_limits<int>::max();

  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<KvPolicy> clone() const = 0;

  int budget() const { return budget_; }
  int size() const { return static_cast<int>(slots_.size()); }
  int newest() const { return newest_; }  // last position appended, -1 before the first
  // Position held by each slot; grows to min(budget, tokens) and then stays that size.
  const std::vector<int>& slots() const { return slots_; }
  // The kept positions in increasing order.
  std::vector<int> kept() const;

  struct Append {
    int slot = 0;      // where the new token's K/V go
    int evicted = -1;  // the position dropped from that slot, -1 when the cache had room
  };
  // Token `pos` (= newest() + 1) enters the cache. O(1) for the windows, O(size) for H2O.
  Append on_append(int pos);
  // The newest query's attention weights over the slots (weights[s] for s < size()), after the
  // on_append of its token. Only policies that score tokens (H2O) read them.
  virtual void on_attention(const float* weights) { (void)weights; }
  virtual bool uses_attention() const { return false; }

  // "" when the kept set is what the policy promises: size() = min(budget, newest + 1), distinct
  // positions up to newest, and the policy's own guarantees (window, sinks, recent tokens).
  std::string check_invariants() const;

 protected:
  explicit KvPolicy(int budget);
  // The slot to evict when the cache is full and `pos` arrives.
  virtual int victim(int pos) = 0;
  // A token has just been placed in `slot` (score bookkeeping).
  virtual void placed(int slot) { (void)slot; }
  // Positions the policy guarantees to hold right now (besides the size).
  virtual std::vector<int> promised() const = 0;

 private:
  int budget_;
  int newest_ = -1;
  std::vector<int> slots_;
};

struct PolicyOptions {
  int budget = KvPolicy::kUnbounded;  // tokens held at most (full ignores it)
  int sinks = 4;                      // streaming_llm: first tokens always kept
  double recent = 0.5;                // h2o: fraction of the budget kept as the recent window
};

// "full", "sliding_window", "streaming_llm", "h2o"; throws std::invalid_argument for another
// name or a budget the policy cannot honour (streaming_llm needs budget > sinks).
std::unique_ptr<KvPolicy> make_policy(const std::string& name, const PolicyOptions& o);
const std::vector<std::string>& policy_names();
// H2O's recent window in tokens for a budget: round(recent × budget), at least 1, at most budget.
int h2o_recent_tokens(int budget, double recent);

}  // namespace ib::kvcache
