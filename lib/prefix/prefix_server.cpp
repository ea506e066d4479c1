#include "prefix/prefix_server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace ib::prefix {
namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int64_t run_tokens(const std::vector<KvRun>& runs) {
  int64_t n = 0;
  for (const KvRun& r : runs) n += r.len;
  return n;
}

}  // namespace

const char* to_string(CacheKind k) {
  switch (k) {
    case CacheKind::None:
      return "none";
    case CacheKind::BlockHash:
      return "block_hash";
    case CacheKind::Radix:
      return "radix";
  }
  return "?";
}

namespace {

// The cache `o` asks for (none for CacheKind::None).
void make_cache(const ServerOptions& o, std::unique_ptr<BlockHashCache>& blocks, std::unique_ptr<RadixCache>& radix) {
  if (o.kind == CacheKind::BlockHash) {
    BlockHashCache::Options bo;
    bo.block_size = o.block_size;
    bo.capacity_blocks = o.capacity_tokens / std::max(o.block_size, 1);
    blocks = std::make_unique<BlockHashCache>(bo);
  } else if (o.kind == CacheKind::Radix) {
    radix = std::make_unique<RadixCache>(o.capacity_tokens);
  }
}

}  // namespace

PrefixServer::PrefixServer(model::Model& m, ServerOptions o) : model_(m), opt_(o) { make_cache(opt_, blocks_, radix_); }

PrefixServer::~PrefixServer() {
  // The engine outlives the server (declared first by its owner): give its sequences back.
  for (const auto& h : holder_tokens_)
    if (!in_flight_.count(h.first)) model_.release(h.first);
  for (const auto& f : in_flight_) model_.release(f.first);
}

void PrefixServer::copy_runs(const std::vector<KvRun>& runs, int dst) {
  for (const KvRun& r : runs) model_.copy_cache(r.holder, dst, r.pos, r.len);
}

void PrefixServer::add_holder_tokens(int seq, int64_t tokens) {
  if (tokens > 0) holder_tokens_[seq] += tokens;
}

void PrefixServer::drop_holder_tokens(const std::vector<KvRun>& runs) {
  for (const KvRun& r : runs) {
    auto it = holder_tokens_.find(r.holder);
    if (it == holder_tokens_.end() || it->second < r.len) throw std::logic_error("evicted K/V of a sequence that holds none");
    it->second -= r.len;
    evicted_tokens_ += r.len;
    if (it->second == 0) {
      holder_tokens_.erase(it);
      if (!in_flight_.count(r.holder)) model_.release(r.holder);
    }
  }
}

Served PrefixServer::serve(const int32_t* tokens, int n, uint64_t extra_key, const model::StepOutput& out) {
  if (n <= 0) throw std::invalid_argument("a request needs at least one token");
  Served r;
  r.prompt = n;
  // Lookup and pin. The last token is always prefilled: its logits give the first token.
  auto t0 = Clock::now();
  std::vector<KvRun> runs;
  if (blocks_) {
    r.chain = blocks_->lookup(tokens, n, extra_key, (n - 1) / blocks_->block_size());
    blocks_->acquire(r.chain);
    for (auto id : r.chain) append_run(runs, blocks_->block(id).kv);
    r.hit = static_cast<int>(r.chain.size()) * blocks_->block_size();
  } else if (radix_) {
    RadixCache::Match m = radix_->match(tokens, n, extra_key, n - 1);
    radix_->lock(m.node);
    r.node = m.node;
    runs = std::move(m.runs);
    r.hit = m.tokens;
  }
  r.lookup_us = us_since(t0);

  try {
    r.seq = model_.new_sequence(n);
  } catch (...) {
    finish(r);
    throw;
  }
  ++in_flight_[r.seq];
  try {
    auto t1 = Clock::now();
    copy_runs(runs, r.seq);
    r.copy_ms = us_since(t1) / 1e3;
    model_.prefill(r.seq, tokens + r.hit, n - r.hit, 1, out);
  } catch (...) {
    finish(r);
    throw;
  }

  // Insert the prompt; its new entries live in this request's sequence.
  auto t2 = Clock::now();
  std::vector<KvRun> evicted;
  if (blocks_) {
    BlockHashCache::InsertResult ins = blocks_->insert(tokens, n, extra_key, r.chain, r.seq);
    r.chain = std::move(ins.chain);
    r.written = ins.added * blocks_->block_size();
    evicted = std::move(ins.evicted);
  } else if (radix_) {
    RadixCache::InsertResult ins = radix_->insert(tokens, n, extra_key, r.seq);
    radix_->lock(ins.node);
    radix_->unlock(r.node);
    r.node = ins.node;
    r.written = ins.added;
    evicted = std::move(ins.evicted);
  }
  add_holder_tokens(r.seq, r.written);
  r.evicted = static_cast<int>(run_tokens(evicted));
  drop_holder_tokens(evicted);
  r.insert_us = us_since(t2);
  return r;
}

void PrefixServer::finish(Served& r) {
  auto t0 = Clock::now();
  if (blocks_)
    blocks_->release(r.chain);
  else if (radix_ && r.node >= 0)
    radix_->unlock(r.node);
  r.chain.clear();
  r.node = -1;
  r.finish_us = us_since(t0);
  if (r.seq >= 0) {
    auto it = in_flight_.find(r.seq);
    if (it != in_flight_.end() && --it->second == 0) in_flight_.erase(it);
    if (!holder_tokens_.count(r.seq)) model_.release(r.seq);
    r.seq = -1;
  }
}

void PrefixServer::clear() {
  if (!in_flight_.empty()) throw std::logic_error("clear() with requests in flight");
  if (blocks_) drop_holder_tokens(blocks_->clear());
  if (radix_) drop_holder_tokens(radix_->clear());
  if (!holder_tokens_.empty()) throw std::logic_error("holders left after clearing the cache");
  evicted_tokens_ = 0;
}

int64_t PrefixServer::cached_tokens() const {
  if (blocks_) return blocks_->size() * blocks_->block_size();
  if (radix_) return radix_->size();
  return 0;
}

int64_t PrefixServer::capacity_tokens() const {
  if (blocks_) return blocks_->capacity() * blocks_->block_size();
  if (radix_) return radix_->capacity();
  return 0;
}

std::string PrefixServer::check() const {
  std::string e = blocks_ ? blocks_->check_invariants() : radix_ ? radix_->check_invariants() : std::string();
  if (!e.empty()) return e;
  const std::vector<KvRun> runs = blocks_ ? blocks_->cached_runs() : radix_ ? radix_->cached_runs() : std::vector<KvRun>{};
  std::map<int, int64_t> count;
  for (const KvRun& r : runs) {
    count[r.holder] += r.len;
    try {
      if (model_.length(r.holder) < r.pos + r.len)
        return fmt::format("a cached entry points at positions [{}, {}) of a {}-token holder", r.pos, r.pos + r.len,
                           model_.length(r.holder));
    } catch (const std::exception&) {
      return fmt::format("a cached entry points into released sequence {}", r.holder);
    }
  }
  if (count.size() != holder_tokens_.size())
    return fmt::format("{} holders counted, the cache points into {}", holder_tokens_.size(), count.size());
  for (const auto& [seq, n] : count) {
    auto it = holder_tokens_.find(seq);
    if (it == holder_tokens_.end() || it->second != n) return fmt::format("holder {} is counted wrong", seq);
  }
  return {};
}

CacheReplay::CacheReplay(ServerOptions o) : opt_(o) { make_cache(opt_, blocks_, radix_); }

CacheReplay::Step CacheReplay::step(const int32_t* tokens, int n, uint64_t extra_key) {
  Step s;
  s.prompt = n;
  const int holder = next_holder_++;
  if (blocks_) {
    auto chain = blocks_->lookup(tokens, n, extra_key, (n - 1) / blocks_->block_size());
    blocks_->acquire(chain);
    s.hit = static_cast<int>(chain.size()) * blocks_->block_size();
    auto ins = blocks_->insert(tokens, n, extra_key, chain, holder);
    s.written = ins.added * blocks_->block_size();
    s.evicted = static_cast<int>(run_tokens(ins.evicted));
    blocks_->release(ins.chain);
  } else if (radix_) {
    auto m = radix_->match(tokens, n, extra_key, n - 1);
    radix_->lock(m.node);
    s.hit = m.tokens;
    auto ins = radix_->insert(tokens, n, extra_key, holder);
    radix_->lock(ins.node);
    radix_->unlock(m.node);
    s.written = ins.added;
    s.evicted = static_cast<int>(run_tokens(ins.evicted));
    radix_->unlock(ins.node);
  }
  return s;
}

std::string CacheReplay::check() const {
  if (blocks_) return blocks_->check_invariants();
  if (radix_) return radix_->check_invariants();
  return {};
}

int64_t CacheReplay::cached_tokens() const {
  if (blocks_) return blocks_->size() * blocks_->block_size();
  if (radix_) return radix_->size();
  return 0;
}

}  // namespace ib::prefix
