#include "kvcache/eviction.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace ib::kvcache {

KvPolicy::KvPolicy(int budget) : budget_(budget) {
  if (budget < 1) throw std::invalid_argument(fmt::format("a KV budget of {} tokens: it must be at least 1", budget));
}

std::vector<int> KvPolicy::kept() const {
  std::vector<int> k = slots_;
  std::sort(k.begin(), k.end());
  return k;
}

KvPolicy::Append KvPolicy::on_append(int pos) {
  if (pos != newest_ + 1) throw std::invalid_argument(fmt::format("position {} appended after {}", pos, newest_));
  newest_ = pos;
  Append a;
  if (size() < budget_) {
    a.slot = size();
    slots_.push_back(pos);
  } else {
    a.slot = victim(pos);
    a.evicted = slots_[static_cast<size_t>(a.slot)];
    slots_[static_cast<size_t>(a.slot)] = pos;
  }
  placed(a.slot);
  return a;
}

std::string KvPolicy::check_invariants() const {
  const int want = std::min(budget_, newest_ + 1);
  if (size() != want)
    return fmt::format("{} holds {} tokens after {} appended (budget {})", name(), size(), newest_ + 1, budget_);
  const std::vector<int> k = kept();
  for (size_t i = 0; i < k.size(); ++i) {
    if (k[i] < 0 || k[i] > newest_) return fmt::format("{} holds position {} of {}", name(), k[i], newest_ + 1);
    if (i && k[i] == k[i - 1]) return fmt::format("{} holds position {} twice", name(), k[i]);
  }
  for (int p : promised())
    if (!std::binary_search(k.begin(), k.end(), p)) return fmt::format("{} dropped position {} it promises to keep", name(), p);
  return {};
}

namespace {

// The last n positions up to newest.
std::vector<int> last_positions(int newest, int n) {
  std::vector<int> v;
  for (int p = std::max(0, newest - n + 1); p <= newest; ++p) v.push_back(p);
  return v;
}

class FullCache final : public KvPolicy {
 public:
  FullCache() : KvPolicy(kUnbounded) {}
  std::string name() const override { return "full"; }
  std::unique_ptr<KvPolicy> clone() const override { return std::make_unique<FullCache>(*this); }

 protected:
  int victim(int) override { throw std::logic_error("the full cache never evicts"); }
  std::vector<int> promised() const override { return last_positions(newest(), newest() + 1); }
};

// Position p lives in slot p mod W: the victim is the token W back, in O(1).
class SlidingWindow final : public KvPolicy {
 public:
  explicit SlidingWindow(int window) : KvPolicy(window) {}
  std::string name() const override { return "sliding_window"; }
  std::unique_ptr<KvPolicy> clone() const override { return std::make_unique<SlidingWindow>(*this); }

 protected:
  int victim(int pos) override { return pos % budget(); }
  std::vector<int> promised() const override { return last_positions(newest(), size()); }
};

// Sinks fill slots [0, S); later positions rotate through the W = budget − S slots after them.
class StreamingLlm final : public KvPolicy {
 public:
  StreamingLlm(int budget, int sinks) : KvPolicy(budget), sinks_(sinks) {
    if (sinks < 0 || sinks >= budget)
      throw std::invalid_argument(
          fmt::format("streaming_llm with {} sink tokens needs a budget above {} (got {})", sinks, sinks, budget));
  }
  std::string name() const override { return "streaming_llm"; }
  std::unique_ptr<KvPolicy> clone() const override { return std::make_unique<StreamingLlm>(*this); }

 protected:
  int victim(int pos) override { return sinks_ + (pos - sinks_) % (budget() - sinks_); }
  std::vector<int> promised() const override {
    std::vector<int> p = last_positions(std::min(sinks_, newest() + 1) - 1, sinks_);
    if (newest() >= sinks_) {
      const std::vector<int> recent = last_positions(newest(), size() - sinks_);
      p.insert(p.end(), recent.begin(), recent.end());
    }
    return p;
  }

 private:
  int sinks_;
};

// Scores live beside the slots. Each query adds its weights (O(size)); an eviction scans the
// slots outside the recent window for the lowest score (O(size), the order of the attention
// itself), ties going to the oldest position.
class HeavyHitterOracle final : public KvPolicy {
 public:
  HeavyHitterOracle(int budget, int recent) : KvPolicy(budget), recent_(recent) {}
  std::string name() const override { return "h2o"; }
  std::unique_ptr<KvPolicy> clone() const override { return std::make_unique<HeavyHitterOracle>(*this); }
  bool uses_attention() const override { return true; }
  void on_attention(const float* weights) override {
    for (size_t s = 0; s < score_.size(); ++s) score_[s] += static_cast<double>(weights[s]);
  }

 protected:
  int victim(int pos) override {
    // After `pos` enters, the recent window is (pos − R, pos]: older tokens compete.
    const int oldest_recent = pos - recent_ + 1;
    const std::vector<int>& s = slots();
    int best = -1;
    for (int i = 0; i < size(); ++i) {
      const int p = s[static_cast<size_t>(i)];
      if (p >= oldest_recent) continue;
      const size_t b = static_cast<size_t>(best), c = static_cast<size_t>(i);
      if (best < 0 || score_[c] < score_[b] || (score_[c] == score_[b] && p < s[b])) best = i;
    }
    if (best < 0) throw std::logic_error("h2o found no token outside its recent window");
    return best;
  }
  void placed(int slot) override {
    if (slot == static_cast<int>(score_.size()))
      score_.push_back(0.0);
    else
      score_[static_cast<size_t>(slot)] = 0.0;
  }
  std::vector<int> promised() const override { return last_positions(newest(), std::min(recent_, size())); }

 private:
  int recent_;
  std::vector<double> score_;  // accumulated attention of the token in each slot
};

}  // namespace

int h2o_recent_tokens(int budget, double recent) { return std::clamp(static_cast<int>(std::lround(recent * budget)), 1, budget); }

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"full", "sliding_window", "streaming_llm", "h2o"};
  return names;
}

std::unique_ptr<KvPolicy> make_policy(const std::string& name, const PolicyOptions& o) {
  if (name == "full") return std::make_unique<FullCache>();
  if (name == "sliding_window") return std::make_unique<SlidingWindow>(o.budget);
  if (name == "streaming_llm") return std::make_unique<StreamingLlm>(o.budget, o.sinks);
  if (name == "h2o") {
    if (o.budget < 1) throw std::invalid_argument(fmt::format("a KV budget of {} tokens: it must be at least 1", o.budget));
    return std::make_unique<HeavyHitterOracle>(o.budget, h2o_recent_tokens(o.budget, o.recent));
  }
  throw std::invalid_argument("no eviction policy '" + name + "' (full, sliding_window, streaming_llm, h2o)");
}

}  // namespace ib::kvcache
