// The prompts a serve-endpoint pass sends (endpoint_load_variant.h): seeded token ids fitted to a
// chat template, a fresh draw per pass, a trace's arrivals and shared blocks, a dataset's
// conversations.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/json_input.h"
#include "core/output.h"
#include "core/spec.h"
#include "kinds/serve_endpoint/endpoint_load_variant.h"
#include "model/checkpoint.h"
#include "serve/arrival_trace.h"
#include "serve/conversation_dataset.h"
#include "serve/endpoint_result_file.h"

namespace ib::serve {
namespace {

// vLLM's ShareGPT sampling filters: a prompt or answer under 4 tokens, a prompt over 1,024 or a
// conversation over 2,048 is left out.
constexpr size_t kDatasetMinTokens = 4, kDatasetMaxPrompt = 1024, kDatasetMaxTotal = 2048;

}  // namespace

int EndpointLoad::next_draw() const {
  static std::mutex m;
  static std::map<std::string, int> sent;  // server -> draws sent to it
  std::lock_guard<std::mutex> lock(m);
  int draw = 0;
  for (const ServerSide& side : sides_) draw = std::max(draw, sent[side.options.url]);
  for (const ServerSide& side : sides_) sent[side.options.url] = draw + 1;
  return draw;
}

std::pair<size_t, int> EndpointLoad::chat_prompts(const std::vector<workload::Request>& trace, int pass,
                                                  std::vector<std::string>& texts, std::vector<int>& counts) {
  texts.clear();
  counts.clear();
  auto count = [&](const std::string& text) {
    return static_cast<int>(tokenizer_->encode(chat_template_->render({{"user", text}}, true), false).size());
  };
  std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) * 31 + static_cast<uint64_t>(pass) + 0xc4a7);
  std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
  size_t unfit = 0;
  int worst = 0;
  for (const workload::Request& r : trace) {
    if (!chat_template_) {
      texts.push_back(tokenizer_->decode(r.prompt, true));
      continue;
    }
    if (!keys_.dataset.empty()) {
      texts.push_back(tokenizer_->decode(r.prompt, true));
      counts.push_back(count(texts.back()));
      continue;
    }
    const int want = static_cast<int>(r.prompt.size());
    const size_t keep = static_cast<size_t>(keys_.system_prompt);  // the shared system prompt stays whole
    std::vector<int32_t> ids = r.prompt;
    std::string text = tokenizer_->decode(ids, true);
    int n = count(text);
    for (int step = 0; step < 24 && n != want; ++step) {
      if (n > want) {
        const size_t cut = std::min(static_cast<size_t>(n - want), ids.size() > keep + 1 ? ids.size() - keep - 1 : 0);
        if (cut == 0) break;
        ids.resize(ids.size() - cut);
      } else {
        for (int k = 0; k < want - n; ++k) ids.push_back(token(rng));
      }
      text = tokenizer_->decode(ids, true);
      n = count(text);
    }
    if (n != want) {
      ++unfit;
      worst = std::max(worst, std::abs(n - want));
    }
    texts.push_back(std::move(text));
    counts.push_back(n);
  }
  return {unfit, worst};
}

std::vector<workload::Request> EndpointLoad::fresh_tokens(int pass) const {
  std::vector<workload::Request> t = base_;
  if (pass == 0) return t;
  std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) * 0x9e37'79b9'7f4a'7c15ULL + static_cast<uint64_t>(pass));
  std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
  std::vector<int32_t> system(static_cast<size_t>(keys_.system_prompt));
  for (auto& x : system) x = token(rng);
  for (size_t k = 0; k < t.size(); ++k) {
    std::vector<int32_t>& p = t[k].prompt;
    std::copy(system.begin(), system.end(), p.begin());
    if (!keys_.dataset.empty()) {
      if (system.empty() && !p.empty()) p[0] = token(rng);
    } else if (!blocks_.empty() && !blocks_[k].empty()) {
      const std::vector<int32_t> b = block_tokens(blocks_[k], p.size() - system.size(), pass, t[k].id);
      std::copy(b.begin(), b.end(), p.begin() + static_cast<std::ptrdiff_t>(system.size()));
    } else {
      for (size_t i = system.size(); i < p.size(); ++i) p[i] = token(rng);
    }
  }
  return t;
}

std::vector<int32_t> EndpointLoad::block_tokens(const std::vector<int64_t>& hash_ids, size_t n, int pass, int64_t request) const {
  std::vector<int32_t> out;
  out.reserve(n);
  std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
  for (size_t b = 0; out.size() < n; ++b) {
    // Past the listed blocks (an input_length longer than they cover): tokens of this request alone.
    const uint64_t h = b < hash_ids.size() ? static_cast<uint64_t>(hash_ids[b])
                                           : (static_cast<uint64_t>(request) << 24 | b) ^ 0xa5a5'0000'0000'0000ULL;
    std::mt19937_64 rng((h + 1) * 0x9e37'79b9'7f4a'7c15ULL ^ (static_cast<uint64_t>(keys_.workload_seed) << 20) ^
                        static_cast<uint64_t>(pass) ^ (b < hash_ids.size() ? 0 : 0x5bd1'e995ULL));
    for (int64_t i = 0; i < keys_.trace_block && out.size() < n; ++i) out.push_back(token(rng));
  }
  return out;
}

std::string EndpointLoad::apply_trace() {
  const std::vector<TraceEntry> trace =
      read_arrival_trace(keys_.trace, keys_.trace_time_unit == "s" ? 1.0 : 1e-3, static_cast<size_t>(keys_.requests));
  base_.resize(std::min(base_.size(), trace.size()));
  const size_t sys = static_cast<size_t>(keys_.system_prompt);
  std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) ^ 0x7261'6365ULL);
  std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
  blocks_.assign(base_.size(), {});
  size_t lengths = 0, blocked = 0;
  for (size_t i = 0; i < base_.size(); ++i) {
    workload::Request& r = base_[i];
    const TraceEntry& e = trace[i];
    r.arrival = e.time;
    if (e.output_length > 0) r.max_tokens = e.output_length;
    if (!keys_.dataset.empty()) continue;  // the dataset's prompts; the trace's times
    size_t n = r.prompt.size() - sys;
    if (e.input_length > 0) {
      n = static_cast<size_t>(e.input_length);
      ++lengths;
    } else if (!e.hash_ids.empty()) {
      n = e.hash_ids.size() * static_cast<size_t>(keys_.trace_block);
    }
    r.prompt.resize(sys + n);
    if (!e.hash_ids.empty()) {
      blocks_[i] = e.hash_ids;
      const std::vector<int32_t> b = block_tokens(e.hash_ids, n, 0, r.id);
      std::copy(b.begin(), b.end(), r.prompt.begin() + static_cast<std::ptrdiff_t>(sys));
      ++blocked;
    } else {
      for (size_t k = sys; k < r.prompt.size(); ++k) r.prompt[k] = token(rng);
    }
  }
  return fmt::format("; arrivals from {} ({} of its requests{}{})", keys_.trace, base_.size(),
                     lengths ? fmt::format(", {} with its prompt lengths", lengths) : "",
                     blocked ? fmt::format(", {} with its shared {}-token prompt blocks", blocked, keys_.trace_block) : "");
}

std::string EndpointLoad::apply_dataset() {
  size_t skipped = 0;
  const std::vector<Conversation> convs = read_conversations(keys_.dataset, 1u << 22, &skipped);
  std::vector<size_t> order(convs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed));
  std::shuffle(order.begin(), order.end(), rng);
  const size_t sys = static_cast<size_t>(keys_.system_prompt);
  std::vector<int32_t> system(
      base_.empty() ? std::vector<int32_t>()
                    : std::vector<int32_t>(base_[0].prompt.begin(), base_[0].prompt.begin() + static_cast<std::ptrdiff_t>(sys)));
  size_t used = 0, filtered = 0, next = 0;
  std::vector<std::pair<std::vector<int32_t>, int>> taken;  // prompt ids, answer tokens
  for (workload::Request& r : base_) {
    // The next conversation that passes the filters; once all are used, from the first again.
    while (taken.size() <= used && next < order.size()) {
      const Conversation& c = convs[order[next++]];
      std::vector<int32_t> ids = tokenizer_->encode(c.prompt);
      const size_t answer = tokenizer_->encode(c.reply, false).size();
      if (ids.size() < kDatasetMinTokens || answer < kDatasetMinTokens || ids.size() > kDatasetMaxPrompt ||
          ids.size() + answer > kDatasetMaxTotal) {
        ++filtered;
        continue;
      }
      taken.emplace_back(std::move(ids), static_cast<int>(answer));
    }
    if (taken.empty())
      throw InputError(
          fmt::format("none of {}'s {} conversations passes vLLM's filters (prompt and answer of "
                      "at least 4 tokens, a prompt of at most 1,024, both of at most 2,048)",
                      keys_.dataset, convs.size()));
    const auto& [ids, answer] = taken[used % taken.size()];
    ++used;
    r.prompt = system;
    r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
    r.max_tokens = keys_.dataset_output_len > 0 ? static_cast<int>(keys_.dataset_output_len) : answer;
    r.type = 's';
  }
  return fmt::format(
      "; prompts from {} ({} conversations{}{}{})", keys_.dataset, std::min(used, taken.size()),
      used > taken.size() ? fmt::format(", each used up to {} times", (used + taken.size() - 1) / taken.size()) : "",
      filtered ? fmt::format(", {} left out by vLLM's length filters", filtered) : "",
      skipped ? fmt::format(", {} without an answered user turn", skipped) : "");
}

}  // namespace ib::serve
