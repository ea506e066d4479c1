// Moore refinement of a DFA's states (moore_refine) and the lazy masker's classes built on it
// (mask_classes); the string refinement and the token classes run it too.
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/token_index_internal.h"
#include "numerics/random.h"

namespace ib::constrain {

namespace {
struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return static_cast<size_t>(p.first ^ (p.second >> 1)); }
};
using Sig = std::pair<uint64_t, uint64_t>;
}  // namespace

namespace detail {

// (Declared in token_index_internal.h.)
std::vector<int32_t> moore_refine(const Dfa& dfa, size_t max_rounds, int* rounds, bool* stable, RoundBlocks* snapshots,
                                  const std::vector<uint8_t>* only) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  std::vector<int32_t> id(n, 0);
  // Signature of a state: the map class -> block of its successor, hashed linearly,
  //   sig = Σ_c R[c] · F(block(next(s, c)))   (two independent 64-bit lanes),
  // so it can be summed per distinct successor (with R summed over the classes leading there).
  std::vector<uint64_t> r1(k), r2(k);
  for (size_t c = 0; c < k; ++c) {
    r1[c] = mix64(0x1234567ull + c) | 1;
    r2[c] = mix64(0x7654321ull + 3 * c) | 1;
  }
  struct Edge {
    int32_t to;  // -1: dead
    uint64_t w1, w2;
  };
  std::vector<int32_t> edge_start(n + 1, 0);
  std::vector<Edge> edges;
  {
    // The dead successor's weights are what the live ones leave of the classes' total (kept out
    // of the loop: most classes lead nowhere, and summing them into one edge chains every step).
    uint64_t all1 = 0, all2 = 0;
    for (size_t c = 0; c < k; ++c)
      if (!only || (*only)[c]) {
        all1 += r1[c];
        all2 += r2[c];
      }
    std::vector<int32_t> at(n, -1);  // successor -> its edge of the current state
    for (size_t s = 0; s < n; ++s) {
      const size_t first = edges.size();
      const int32_t* row = dfa.next.data() + s * k;
      uint64_t live1 = 0, live2 = 0;
      for (size_t c = 0; c < k; ++c) {
        const int32_t t = row[c];
        if (t < 0 || (only && !(*only)[c])) continue;
        if (at[static_cast<size_t>(t)] < static_cast<int32_t>(first)) {
          at[static_cast<size_t>(t)] = static_cast<int32_t>(edges.size());
          edges.push_back({t, 0, 0});
        }
        edges[static_cast<size_t>(at[static_cast<size_t>(t)])].w1 += r1[c];
        edges[static_cast<size_t>(at[static_cast<size_t>(t)])].w2 += r2[c];
        live1 += r1[c];
        live2 += r2[c];
      }
      if (live1 != all1 || live2 != all2) edges.push_back({-1, all1 - live1, all2 - live2});
      edge_start[s + 1] = static_cast<int32_t>(edges.size());
    }
  }
  // Predecessors (each once), as CSR.
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  for (const Edge& e : edges)
    if (e.to >= 0) ++pred_start[static_cast<size_t>(e.to) + 1];
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(static_cast<size_t>(pred_start[n]));
  {
    std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
    for (size_t s = 0; s < n; ++s)
      for (int32_t e = edge_start[s]; e < edge_start[s + 1]; ++e)
        if (const int32_t t = edges[static_cast<size_t>(e)].to; t >= 0)
          preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
  }
  // F per block, both lanes (dead: the last entry).
  std::vector<uint64_t> f1, f2;
  auto add_f = [&](uint64_t b) {
    f1.push_back(mix64(b + 0x9E3779B97F4A7C15ull));
    f2.push_back(mix64(b ^ 0xC2B2AE3D27D4EB4Full));
  };
  const uint64_t dead_f1 = mix64(0xFFFFFFFFull + 0x9E3779B97F4A7C15ull), dead_f2 = mix64(0xFFFFFFFFull ^ 0xC2B2AE3D27D4EB4Full);
  add_f(0);
  auto signature = [&](size_t s) {
    uint64_t h1 = 0, h2 = 0;
    for (int32_t e = edge_start[s]; e < edge_start[s + 1]; ++e) {
      const Edge& ed = edges[static_cast<size_t>(e)];
      if (ed.to < 0) {
        h1 += ed.w1 * dead_f1;
        h2 += ed.w2 * dead_f2;
      } else {
        const size_t b = static_cast<size_t>(id[static_cast<size_t>(ed.to)]);
        h1 += ed.w1 * f1[b];
        h2 += ed.w2 * f2[b];
      }
    }
    return Sig{h1, h2};
  };
  std::vector<Sig> sig(n), block_sig;
  std::vector<int32_t> block_size;
  struct Mover {
    int32_t block;
    Sig sig;
    int32_t state;
  };
  std::vector<Mover> movers;
  struct Slot {
    int32_t block, group;
    Sig sig;
  };
  std::vector<Slot> slots;
  std::vector<uint32_t> slot_round;
  std::vector<int32_t> moving(n + 1, 0), blocks_hit;  // per block: its movers this round
  std::vector<uint8_t> keeps(n + 1, 0);               // per block this round: 1 whole (not yet kept), 2 kept
  std::vector<int32_t> changed, affected;
  std::vector<uint32_t> seen(n, 0);
  uint32_t epoch = 0;
  *rounds = 0;
  *stable = n == 0;
  if (snapshots) snapshots->start(id);
  if (max_rounds == 0) return id;
  // Round 1 over every state (all in one block before it).
  {
    std::unordered_map<Sig, int32_t, PairHash> groups;
    for (size_t s = 0; s < n; ++s) {
      sig[s] = signature(s);
      auto [it, fresh] = groups.emplace(sig[s], static_cast<int32_t>(groups.size()));
      if (fresh) {
        block_sig.push_back(sig[s]);
        block_size.push_back(0);
        if (f1.size() < block_sig.size()) add_f(block_sig.size() - 1);
      }
      ++block_size[static_cast<size_t>(it->second)];
    }
    for (size_t s = 0; s < n; ++s) {
      id[s] = groups[sig[s]];
      if (id[s] != 0) changed.push_back(static_cast<int32_t>(s));
    }
    *rounds = 1;
    if (snapshots) snapshots->push(id, changed);
  }
  for (size_t round = 2; round <= max_rounds && !changed.empty(); ++round) {
    ++epoch;
    affected.clear();
    for (int32_t t : changed)
      for (int32_t j = pred_start[static_cast<size_t>(t)]; j < pred_start[static_cast<size_t>(t) + 1]; ++j) {
        const int32_t p = preds[static_cast<size_t>(j)];
        if (seen[static_cast<size_t>(p)] != epoch) {
          seen[static_cast<size_t>(p)] = epoch;
          affected.push_back(p);
        }
      }
    for (int32_t s : affected) sig[static_cast<size_t>(s)] = signature(static_cast<size_t>(s));
    // Affected states whose signature left their block's: grouped per (block, signature).
    movers.clear();
    for (int32_t s : affected)
      if (sig[static_cast<size_t>(s)] != block_sig[static_cast<size_t>(id[static_cast<size_t>(s)])])
        movers.push_back({id[static_cast<size_t>(s)], sig[static_cast<size_t>(s)], s});
    // Grouped through an open-addressing table of (block, signature) -> block, in the movers'
    // order: when a whole block moves, its first group keeps the block (no split for it).
    for (const Mover& mv : movers)
      if (moving[static_cast<size_t>(mv.block)]++ == 0) blocks_hit.push_back(mv.block);
    for (int32_t b : blocks_hit)  // whole: every state of the block moves (decided before any leaves)
      keeps[static_cast<size_t>(b)] = moving[static_cast<size_t>(b)] == block_size[static_cast<size_t>(b)] ? 1 : 0;
    size_t cap = 16;
    while (cap < 2 * movers.size()) cap <<= 1;
    if (slots.size() < cap) {
      slots.resize(cap);
      slot_round.resize(cap, 0);
    }
    const size_t mask = cap - 1;
    changed.clear();
    for (const Mover& mv : movers) {
      const size_t b = static_cast<size_t>(mv.block);
      size_t i = static_cast<size_t>(mix64(mv.sig.first ^ (static_cast<uint64_t>(b) * 0x9E3779B97F4A7C15ull))) & mask;
      int32_t g = -1;
      for (;; i = (i + 1) & mask) {
        if (slot_round[i] != epoch) {  // a new group
          slot_round[i] = epoch;
          if (keeps[b] == 1) {  // the first group of a whole block keeps it
            keeps[b] = 2;
            g = mv.block;
            block_sig[b] = mv.sig;
          } else {
            g = static_cast<int32_t>(block_sig.size());
            block_sig.push_back(mv.sig);
            block_size.push_back(0);
            add_f(static_cast<uint64_t>(g));
          }
          slots[i] = {mv.block, g, mv.sig};
          break;
        }
        if (slots[i].block == mv.block && slots[i].sig == mv.sig) {
          g = slots[i].group;
          break;
        }
      }
      if (g == mv.block) continue;
      --block_size[b];
      ++block_size[static_cast<size_t>(g)];
      id[static_cast<size_t>(mv.state)] = g;
      changed.push_back(mv.state);
    }
    for (int32_t b : blocks_hit) {
      moving[static_cast<size_t>(b)] = 0;
      keeps[static_cast<size_t>(b)] = 0;
    }
    blocks_hit.clear();
    if (changed.empty()) break;  // nothing moved: the partition is final
    *rounds = static_cast<int>(round);
    if (snapshots) snapshots->push(id, changed);
  }
  *stable = changed.empty();
  return id;
}

}  // namespace detail

using detail::moore_refine;

MaskClasses mask_classes(const Dfa& dfa, size_t max_token_bytes) {
  const size_t n = static_cast<size_t>(dfa.num_states);
  MaskClasses mc;
  bool stable = false;
  const std::vector<int32_t> id = moore_refine(dfa, max_token_bytes, &mc.rounds, &stable, nullptr);
  // A mask also depends on whether the state accepts (EOS).
  std::map<std::pair<int32_t, int>, int32_t> final_id;
  mc.class_of.resize(n);
  for (size_t s = 0; s < n; ++s) {
    auto [it, fresh] =
        final_id.emplace(std::make_pair(id[s], static_cast<int>(dfa.accepting[s])), static_cast<int32_t>(final_id.size()));
    if (fresh) mc.representative.push_back(static_cast<int32_t>(s));
    mc.class_of[s] = it->second;
  }
  return mc;
}

}  // namespace ib::constrain
