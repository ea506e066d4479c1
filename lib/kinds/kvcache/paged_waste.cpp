// Kind `kv-paged-waste` (PagedAttention, §8.3): how much of the KV memory a server holds is
// waste, replaying one workload of requests with varied prompt and output lengths under
// continuous batching (up to `concurrent` sequences; each decode step adds a token to every
// running sequence; a finished sequence frees its memory and the next request is admitted, its
// prompt prefilled at once). Waste = 1 − tokens stored / token slots allocated, averaged over
// the decode steps.
//   contiguous_max    each sequence reserves max_len slots at admission (FasterTransformer-style)
//   contiguous_exact  each reserves exactly prompt + output (an oracle that knows the output length)
//   paged             the block manager: blocks of block_size allocated as tokens arrive
#include <algorithm>
#include <cmath>
#include <deque>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/params.h"
#include "core/registry.h"
#include "model/block_manager.h"
#include "numerics/random.h"

namespace ib::kvcache {
namespace {

// The kind's keys, bound to the fields they fill (core/params.h).
struct WasteKeys {
  int requests = 0, concurrent = 0, prompt_min = 0, prompt_max = 0, output_min = 0, output_max = 0, max_len = 0, block_size = 0;
};

const ParamSet<WasteKeys>& waste_keys() {
  using P = WasteKeys;
  static const ParamSet<WasteKeys> set =
      ParamSet<WasteKeys>()
          .add(&P::requests, key_spec("requests", ParamType::Int, "requests replayed", Value(int64_t{500}), 1.0))
          .add(&P::concurrent,
               key_spec("concurrent", ParamType::Int, "sequences decoded at once (continuous batching)", Value(int64_t{32}), 1.0))
          .add(&P::prompt_min, key_spec("prompt_min", ParamType::Int, "shortest prompt (tokens)", Value(int64_t{16}), 1.0))
          .add(&P::prompt_max, key_spec("prompt_max", ParamType::Int, "longest prompt", Value(int64_t{1024}), 1.0))
          .add(&P::output_min, key_spec("output_min", ParamType::Int, "shortest output", Value(int64_t{16}), 1.0))
          .add(&P::output_max, key_spec("output_max", ParamType::Int, "longest output", Value(int64_t{512}), 1.0))
          .add(&P::max_len,
               key_spec("max_len", ParamType::Int, "the model's maximum sequence length (contiguous_max reserves it)",
                        Value(int64_t{2048}), 1.0))
          .add(&P::block_size,
               key_spec("block_size", ParamType::Int, "tokens per block (paged)", Value(int64_t{16}), 1.0, 4096.0));
  return set;
}

// A request as the waste study sees it: its prompt and output lengths (tokens).
struct SequenceLengths {
  int prompt = 0, output = 0;
};

std::vector<SequenceLengths> make_requests(const WasteKeys& k, uint64_t seed) {
  const int n = k.requests;
  const int pmin = k.prompt_min, pmax = k.prompt_max;
  const int omin = k.output_min, omax = k.output_max;
  std::vector<SequenceLengths> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    r[static_cast<size_t>(i)].prompt =
        pmin + static_cast<int>(random_bits(seed, 2 * static_cast<uint64_t>(i)) % static_cast<uint64_t>(pmax - pmin + 1));
    r[static_cast<size_t>(i)].output =
        omin + static_cast<int>(random_bits(seed, 2 * static_cast<uint64_t>(i) + 1) % static_cast<uint64_t>(omax - omin + 1));
  }
  return r;
}

enum class Policy { ContiguousMax, ContiguousExact, Paged };

class WasteVariant : public Variant {
 public:
  explicit WasteVariant(Policy policy) : policy_(policy) {}

  std::string unsupported(const Point& p) const override {
    const WasteKeys k = waste_keys().read(p);
    if (k.prompt_min > k.prompt_max || k.output_min > k.output_max)
      return "prompt_min/output_min must not exceed prompt_max/output_max";
    if (int64_t{k.prompt_max} + k.output_max > k.max_len)
      return fmt::format("prompt_max + output_max ({}) exceeds max_len ({})", int64_t{k.prompt_max} + k.output_max, k.max_len);
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const WasteKeys k = waste_keys().read(p);
    requests_ = make_requests(k, seed);
    concurrent_ = k.concurrent;
    max_len_ = k.max_len;
    block_size_ = k.block_size;
  }
  Validation validate(BackendRuntime& rt) override {
    check_ = true;
    run(rt);
    check_ = false;
    if (!problem_.empty()) return {false, "bookkeeping", 1, 0, problem_};
    return {true, "bookkeeping", 0, 0,
            policy_ == Policy::Paged ? "block manager invariants held after every step; slots ≥ tokens throughout"
                                     : "slots ≥ tokens throughout"};
  }
  void run(BackendRuntime&) override {
    problem_.clear();
    struct Live {
      SequenceLengths r;
      int length = 0;
      BlockManager::SeqId id = -1;
    };
    // A pool that can never run out: the simulation measures waste, not admission failures.
    std::optional<BlockManager> blocks;
    if (policy_ == Policy::Paged) {
      int need = 0;
      for (const auto& r : requests_) need = std::max(need, (r.prompt + r.output + block_size_ - 1) / block_size_);
      blocks.emplace(need * concurrent_, block_size_);
    }
    std::deque<SequenceLengths> waiting(requests_.begin(), requests_.end());
    std::vector<Live> live;
    double sum_tokens = 0, sum_slots = 0, peak_slots = 0, sum_live = 0;
    int64_t steps = 0;
    while (!waiting.empty() || !live.empty()) {
      while (static_cast<int>(live.size()) < concurrent_ && !waiting.empty()) {
        Live l{waiting.front(), waiting.front().prompt, -1};
        waiting.pop_front();
        if (blocks) {
          l.id = blocks->create();
          blocks->append(l.id, l.length);
        }
        live.push_back(l);
      }
      // One decode step: every running sequence gets a token.
      for (auto& l : live) {
        ++l.length;
        if (blocks && !blocks->append(l.id, 1)) problem_ = "block pool exhausted";
      }
      double tokens = 0, slots = 0;
      for (const auto& l : live) {
        tokens += l.length;
        if (policy_ == Policy::ContiguousMax) slots += max_len_;
        if (policy_ == Policy::ContiguousExact) slots += l.r.prompt + l.r.output;
      }
      if (blocks) slots = static_cast<double>(blocks->used_blocks()) * block_size_;
      if (check_) {
        if (slots < tokens && problem_.empty()) problem_ = fmt::format("step {}: {} slots for {} tokens", steps, slots, tokens);
        if (blocks) {
          try {
            blocks->check_invariants();
          } catch (const std::logic_error& e) {
            if (problem_.empty()) problem_ = fmt::format("step {}: {}", steps, e.what());
          }
        }
      }
      sum_tokens += tokens;
      sum_live += static_cast<double>(live.size());
      sum_slots += slots;
      peak_slots = std::max(peak_slots, slots);
      ++steps;
      // Finished sequences free their memory.
      for (auto it = live.begin(); it != live.end();) {
        if (it->length >= it->r.prompt + it->r.output) {
          if (blocks) blocks->free(it->id);
          it = live.erase(it);
        } else {
          ++it;
        }
      }
    }
    waste_ = sum_slots > 0 ? 1.0 - sum_tokens / sum_slots : 0;
    mean_slots_ = steps ? sum_slots / static_cast<double>(steps) : 0;
    mean_tokens_ = steps ? sum_tokens / static_cast<double>(steps) : 0;
    mean_live_ = steps ? sum_live / static_cast<double>(steps) : 0;
    peak_slots_ = peak_slots;
    steps_ = steps;
  }
  std::vector<Metric> metrics() const override {
    return {{"waste", 100.0 * waste_, "%"},
            {"mean slots", mean_slots_, "tokens"},
            {"mean stored", mean_tokens_, "tokens"},
            {"peak slots", peak_slots_, "tokens"},
            // Sequences the policy keeps in the memory contiguous_max holds for `concurrent`
            // (concurrent · max_len slots over its mean slots per running sequence).
            {"batch in same memory", mean_slots_ > 0 ? static_cast<double>(concurrent_) * max_len_ * mean_live_ / mean_slots_ : 0,
             ""},
            {"steps", static_cast<double>(steps_), ""}};
  }

 private:
  Policy policy_;
  std::vector<SequenceLengths> requests_;
  int concurrent_ = 1, max_len_ = 2048, block_size_ = 16;
  bool check_ = false;
  std::string problem_;
  double waste_ = 0, mean_live_ = 0, mean_slots_ = 0, mean_tokens_ = 0, peak_slots_ = 0;
  int64_t steps_ = 0;
};

KindInfo waste_kind() {
  KindInfo k;
  k.name = "kv-paged-waste";
  k.smallest = "requests: 20\nconcurrent: 4\nprompt_max: 64\noutput_max: 32\nmax_len: 128\n";
  k.group = "kvcache";
  k.doc =
      "KV memory waste of a served workload (continuous batching, requests with uniform random prompt and output "
      "lengths): 1 − tokens stored / token slots allocated, averaged over decode steps, for contiguous reservation to "
      "max_len, contiguous reservation of exactly prompt + output (oracle), and paged blocks (the block manager). "
      "`batch in same memory` = sequences the policy fits in the memory contiguous_max uses for `concurrent`. A sample "
      "is the whole replay's bookkeeping.";
  k.keys = waste_keys().keys();
  return k;
}

const KindRegistration waste_registration(waste_kind());
const std::vector<std::string> waste_contiguous_keys = {"requests",   "concurrent", "prompt_min", "prompt_max",
                                                        "output_min", "output_max", "max_len"};
const VariantListRegistration waste_variants(
    "kv-paged-waste",
    {{{"contiguous_max", Backend::Cpu, "each sequence reserves max_len token slots", waste_contiguous_keys, true},
      make_variant<WasteVariant>(Policy::ContiguousMax)},
     {{"contiguous_exact", Backend::Cpu, "each reserves prompt + output (knows the output length in advance)",
       waste_contiguous_keys, true},
      make_variant<WasteVariant>(Policy::ContiguousExact)},
     {{"paged", Backend::Cpu, "blocks of block_size from the block manager as tokens arrive", {}, true},
      make_variant<WasteVariant>(Policy::Paged)}});

}  // namespace
}  // namespace ib::kvcache
