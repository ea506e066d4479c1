// The token classes (token_classes): states grouped by the vocabulary's tokens, named by one
// walk of the trie per byte class; the precomputed index builds one mask per class.
#include <algorithm>
#include <atomic>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/interner.h"
#include "constrain/token_index_internal.h"
#include "core/backend.h"
#include "numerics/parallel.h"
#include "numerics/random.h"

namespace ib::constrain {

using detail::kUtf8States;
using detail::moore_refine;
using detail::refine_strings;
using detail::token_classes_impl;

namespace {

// Moore rounds computed for the token classes: a trie node of height h <= this is looked up by
// its state's Moore block of round h, a higher one by the state itself (unless the refinement
// settled before).
constexpr size_t kTokenClassRounds = 24;

// sub(i, q): the tokens of trie node i's subtree that stay alive, given the DFA is in state q
// (alive) after node i's bytes. It is named by an interned tuple: (i, kAll) for the whole subtree,
// (i, kUpTo, r) for its tokens of at most depth(i) + r bytes (the text fast paths, as in
// compute_mask), else (i, j1, sub(j1, q1), j2, sub(j2, q2), ...) over the children j alive from q.
// Distinct tuples name distinct subtree sets or the same set twice (never one name for two sets),
// so equal names mean equal sets. Every string below i has at most height(i) bytes, so sub(i, q)
// depends on q only through its Moore block of round height(i): each node is named once per
// block. A state's class is (accepting, j1, sub(j1, q1), ...) over the root's children.
//
// The trie is walked once, depth first, each node with the batch of states that reach it (one per
// distinct key: Moore block, or the state itself above the rounds computed), so the lookups are
// arrays per depth indexed by the key.

// What the walkers share, read only: the Moore blocks, the transition table by column, and the
// root's children by byte class.
struct WalkShared {
  // With `text_out` (the profile `x` refers to), the text profile is computed here too.
  WalkShared(const Dfa& d, const VocabTrie& t, const TextProfile& x, TextProfile* text_out = nullptr)
      : dfa(d), trie(t), text(x), n(static_cast<size_t>(d.num_states)), k(static_cast<size_t>(d.num_classes)), roots_in(k) {
    // Independent tasks, the longest first (the string refinement of a counting DFA runs for
    // hundreds of rounds), taken by the CPU threads as they come free.
    std::atomic<int> next_task{0};
    const int tasks = text_out ? 3 : 2;
    parallel_for(2, [&](size_t, size_t) {
      for (int task; (task = next_task.fetch_add(1)) < tasks;) {
        if (task == 0) {
          strings = refine_strings(dfa, trie.max_depth);
        } else if (task == 1) {
          moore_refine(dfa, kTokenClassRounds, &rounds, &stable, &blocks);
          transpose();
        } else {
          *text_out = text_profile(dfa);
        }
      }
    });
    for (int32_t j = 1; j < static_cast<int32_t>(trie.nodes()); j = trie.subtree_end[static_cast<size_t>(j)])
      roots_in[dfa.byte_class[trie.byte[static_cast<size_t>(j)]]].push_back(j);
  }

  // The transition table by byte class, then state: a child's batch at the root sweeps a column.
  // Transposed in tiles of 64 states, so the writes stay in cache.
  // Also the live entries of each column, in state order: live_state/live_target[live_begin[c] ..
  // live_begin[c + 1]) (a schema's state lives on about one class in six).
  void transpose() {
    column.resize(n * k);
    live_begin.assign(k + 1, 0);
    constexpr size_t kTile = 64;
    for (size_t s0 = 0; s0 < n; s0 += kTile) {
      const size_t s1 = std::min(n, s0 + kTile);
      for (size_t c = 0; c < k; ++c)
        for (size_t s = s0; s < s1; ++s) {
          const int32_t t = dfa.next[s * k + c];
          column[c * n + s] = t;
          if (t >= 0) ++live_begin[c + 1];
        }
    }
    for (size_t c = 0; c < k; ++c) live_begin[c + 1] += live_begin[c];
    live_state.resize(static_cast<size_t>(live_begin[k]));
    live_target.resize(live_state.size());
    for (size_t c = 0; c < k; ++c) {
      size_t at = static_cast<size_t>(live_begin[c]);
      const int32_t* col = column.data() + c * n;
      for (size_t s = 0; s < n; ++s)
        if (col[s] >= 0) {
          live_state[at] = static_cast<int32_t>(s);
          live_target[at++] = col[s];
        }
    }
  }
  const Dfa& dfa;
  const VocabTrie& trie;
  const TextProfile& text;
  size_t n, k;
  int rounds = 0;
  bool stable = false;
  RoundBlocks blocks{kTokenClassRounds};  // every round stored whole
  // Blocks over strings of string bytes only: the key of a node with only string bytes below.
  StringRefinement strings;
  std::vector<int32_t> column;  // column[c * n + s] = next(s, c)
  std::vector<int32_t> live_begin, live_state, live_target;
  std::vector<std::vector<int32_t>> roots_in;  // the root's children of byte class c
};

// Names the root's children of the byte classes given to it, one class at a time, with its own
// interner: a name is only ever compared with names of the same byte class, all from one walker.
class TokenClassWalk {
 public:
  explicit TokenClassWalk(const WalkShared& sh)
      : dfa_(sh.dfa),
        trie_(sh.trie),
        text_(sh.text),
        n_(sh.n),
        sh_(sh),
        rounds_(sh.rounds),
        stable_(sh.stable),
        blocks_(sh.blocks),
        column_(sh.column),
        level_(sh.trie.max_depth + 2),
        all_id_(sh.trie.nodes(), -1),
        seen_(sh.n, -1),
        index_(sh.n),
        stamp_(n_ + kUtf8States, -1),
        slot_(n_ + kUtf8States, 0) {}

  // The root's children of byte class c: from a state, they all lead to one state t, so their names
  // are a function of t, named once per distinct t. Writes group[c * n + s], the name of s's root
  // children of class c (left -1 where s dies on c).
  void root_class(size_t c, const std::vector<int32_t>& js, int32_t* group) {
    if (js.empty()) return;
    Level& L1 = level_[1];
    const size_t live0 = static_cast<size_t>(sh_.live_begin[c]), live1 = static_cast<size_t>(sh_.live_begin[c + 1]);
    targets_.clear();
    for (size_t e = live0; e < live1; ++e)
      if (const int32_t t = sh_.live_target[e]; seen_[static_cast<size_t>(t)] != static_cast<int32_t>(c)) {
        seen_[static_cast<size_t>(t)] = static_cast<int32_t>(c);
        index_[static_cast<size_t>(t)] = static_cast<int32_t>(targets_.size());
        targets_.push_back(t);
      }
    if (targets_.empty()) return;
    const size_t m = js.size();
    names_.assign(targets_.size() * m, 0);
    for (size_t x = 0; x < m; ++x) {
      const size_t uj = static_cast<size_t>(js[x]);
      const int32_t batch = serial_++;
      L1.states.clear();
      root_slot_.resize(targets_.size());
      for (size_t y = 0; y < targets_.size(); ++y) {
        const size_t key = static_cast<size_t>(key_of(uj, targets_[y]));
        if (stamp_[key] != batch) {
          stamp_[key] = batch;
          slot_[key] = static_cast<int32_t>(L1.states.size());
          L1.states.push_back(targets_[y]);
        }
        root_slot_[y] = slot_[key];  // (the deeper levels' batches reuse stamp_ and slot_)
      }
      name(js[x], 1);
      for (size_t y = 0; y < targets_.size(); ++y) names_[y * m + x] = L1.names[static_cast<size_t>(root_slot_[y])];
    }
    gid_.resize(targets_.size());
    for (size_t y = 0; y < targets_.size(); ++y) {
      tuple_.assign(1, -3 - static_cast<int32_t>(c));  // no node's tuple starts so
      tuple_.insert(tuple_.end(), names_.begin() + static_cast<std::ptrdiff_t>(y * m),
                    names_.begin() + static_cast<std::ptrdiff_t>((y + 1) * m));
      gid_[y] = subs_.intern(tuple_);
    }
    for (size_t e = live0; e < live1; ++e)
      group[c * n_ + static_cast<size_t>(sh_.live_state[e])] =
          gid_[static_cast<size_t>(index_[static_cast<size_t>(sh_.live_target[e])])];
  }

 private:
  static constexpr int32_t kAll = -1, kUpTo = -2, kUtf8 = -4;
  struct Level {
    std::vector<int32_t> states, names;  // the batch of the node being named at this depth
    std::vector<int32_t> todo, target;
    std::vector<int32_t> pair_req, pair_child, pair_name;  // alive children's names, in child order
    std::vector<int32_t> first;                            // pairs of request r: [first[r], first[r + 1])
    std::vector<int32_t> sorted;                           // pair indices grouped by request
  };

  // A UTF-8 state whose string-byte block q shares after height(node) rounds (node: string bytes
  // below), or -1.
  int utf8_state(size_t node, int32_t q) const {
    const VocabTrie::Node& x = trie_.node[node];
    const int32_t b = sh_.strings.key(x, q);
    return b < 0 ? -1 : sh_.strings.utf8_state(x, b);
  }

  int32_t key_of(size_t node, int32_t q) const {
    const VocabTrie::Node& x = trie_.node[node];
    const int h = x.height;
    if (const int32_t b = sh_.strings.key(x, q); b >= 0) return b;
    return h < 255 && (stable_ || h <= rounds_) ? blocks_.at(static_cast<size_t>(std::min(h, rounds_)), static_cast<size_t>(q))
                                                : q;
  }

  // Names level d's batch at node i (d >= 1).
  void name(int32_t i, size_t d) {
    Level& L = level_[d];
    const size_t ui = static_cast<size_t>(i);
    const VocabTrie::Node& x = trie_.node[ui];
    const int h = x.height;
    L.names.assign(L.states.size(), 0);
    L.todo.clear();
    for (size_t r = 0; r < L.states.size(); ++r) {
      const size_t q = static_cast<size_t>(L.states[r]);
      if (x.text_below && h < 255 && h <= text_.run[q]) {
        if (all_id_[ui] < 0) all_id_[ui] = subs_.intern({i, kAll});
        L.names[r] = all_id_[ui];
      } else if (x.text_below && text_.dies_after[q] != 255) {
        L.names[r] = subs_.intern({i, kUpTo, text_.dies_after[q]});
      } else if (const int u = utf8_state(ui, static_cast<int32_t>(q)); u >= 0) {
        // The tokens below that are valid UTF-8 content from u (a name per (i, u)).
        L.names[r] = subs_.intern({i, kUtf8, u});
      } else {
        L.todo.push_back(static_cast<int32_t>(r));
      }
    }
    if (L.todo.empty()) return;
    expand(i, d, L.todo);
    for (int32_t r : L.todo) {
      tuple_.assign(1, i);
      append_pairs(L, static_cast<size_t>(r));
      L.names[static_cast<size_t>(r)] = subs_.intern(tuple_);
    }
  }

  // Names the alive children of node i (depth d) for the requests `todo` of level d's batch and
  // groups the (child, name) pairs by request.
  void expand(int32_t i, size_t d, const std::vector<int32_t>& todo) {
    Level& L = level_[d];
    Level& C = level_[d + 1];
    L.pair_req.clear();
    L.pair_child.clear();
    L.pair_name.clear();
    L.target.resize(L.states.size());
    const VocabTrie::Node* node = trie_.node.data();
    for (int32_t j = i + 1; j < node[i].subtree_end; j = node[j].subtree_end) {
      const size_t uj = static_cast<size_t>(j);
      const int32_t* col = column_.data() + static_cast<size_t>(dfa_.byte_class[node[j].byte]) * n_;
      const int32_t batch = serial_++;
      C.states.clear();
      for (int32_t r : todo) {
        const int32_t t = col[L.states[static_cast<size_t>(r)]];
        if (t < 0) {
          L.target[static_cast<size_t>(r)] = -1;
          continue;
        }
        const size_t k = static_cast<size_t>(key_of(uj, t));
        if (stamp_[k] != batch) {
          stamp_[k] = batch;
          slot_[k] = static_cast<int32_t>(C.states.size());
          C.states.push_back(t);
        }
        L.target[static_cast<size_t>(r)] = slot_[k];
      }
      if (C.states.empty()) continue;
      name(j, d + 1);
      for (int32_t r : todo)
        if (const int32_t slot = L.target[static_cast<size_t>(r)]; slot >= 0) {
          L.pair_req.push_back(r);
          L.pair_child.push_back(j);
          L.pair_name.push_back(C.names[static_cast<size_t>(slot)]);
        }
    }
    // Group by request (counting sort, stable: each request's pairs stay in child order).
    L.first.assign(L.states.size() + 1, 0);
    for (int32_t r : L.pair_req) ++L.first[static_cast<size_t>(r) + 1];
    for (size_t r = 0; r < L.states.size(); ++r) L.first[r + 1] += L.first[r];
    L.sorted.resize(L.pair_req.size());
    L.target.assign(L.first.begin(), L.first.end() - 1);  // fill positions
    for (size_t p = 0; p < L.pair_req.size(); ++p)
      L.sorted[static_cast<size_t>(L.target[static_cast<size_t>(L.pair_req[p])]++)] = static_cast<int32_t>(p);
  }

  void append_pairs(const Level& L, size_t r) {
    for (int32_t k = L.first[r]; k < L.first[r + 1]; ++k) {
      const size_t p = static_cast<size_t>(L.sorted[static_cast<size_t>(k)]);
      tuple_.push_back(L.pair_child[p]);
      tuple_.push_back(L.pair_name[p]);
    }
  }

  const Dfa& dfa_;
  const VocabTrie& trie_;
  const TextProfile& text_;
  size_t n_;
  const WalkShared& sh_;
  int rounds_;
  bool stable_;
  const RoundBlocks& blocks_;
  const std::vector<int32_t>& column_;
  std::vector<Level> level_;
  std::vector<int32_t> all_id_, tuple_;
  std::vector<int32_t> seen_, index_, targets_, names_, gid_, root_slot_;  // root_class's scratch
  // A batch's key -> its slot in the batch, valid where stamp_ holds the batch's serial. Keys are
  // states, blocks or UTF-8 states. One pair for every level: a batch is built, its slots noted
  // (Level::target, root_slot_), and only then are deeper batches built.
  std::vector<int32_t> stamp_, slot_;
  int32_t serial_ = 0;
  TupleInterner subs_;
};

}  // namespace

MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text) {
  return token_classes_impl(dfa, trie, text, nullptr);
}

MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, TextProfile* text) {
  return token_classes_impl(dfa, trie, *text, text);
}

namespace detail {

// (Declared in token_index_internal.h.)
MaskClasses token_classes_impl(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text, TextProfile* text_out,
                               std::shared_ptr<const StringRefinement>* strings_out) {
  WalkShared sh(dfa, trie, text, text_out);
  const size_t n = sh.n, k = sh.k;
  std::vector<int32_t> group(n * k, -1);
  std::vector<std::pair<int64_t, int32_t>> work;  // (-nodes, class)
  for (size_t c = 0; c < k; ++c) {
    int64_t nodes = 0;
    for (int32_t j : sh.roots_in[c]) nodes += trie.subtree_end[static_cast<size_t>(j)] - j;
    if (nodes) work.emplace_back(-nodes, static_cast<int32_t>(c));
  }
  std::sort(work.begin(), work.end());
  std::atomic<size_t> next{0};
  const size_t threads = std::min<size_t>(std::max(1u, cpu_threads()), work.size());
  parallel_for(threads, [&](size_t b, size_t e) {
    for (size_t w = b; w < e; ++w) {
      TokenClassWalk walk(sh);
      for (size_t x; (x = next.fetch_add(1)) < work.size();) {
        const size_t c = static_cast<size_t>(work[x].second);
        walk.root_class(c, sh.roots_in[c], group.data());
      }
    }
  });
  MaskClasses mc;
  mc.rounds = sh.rounds;
  mc.class_of.resize(n);
  mc.part_begin.assign(1, 0);
  std::vector<int32_t> tuple;
  auto tuple_of = [&](size_t s) {
    tuple.assign(1, dfa.accepting[s]);
    for (size_t c = 0; c < k; ++c)
      if (const int32_t g = group[c * n + s]; g >= 0) {
        tuple.push_back(static_cast<int32_t>(c));
        tuple.push_back(g);
      }
  };
  // Hashed column by column (the names are stored by byte class), grouped by hash and confirmed
  // against each group's first state; on a hash collision, by the tuples themselves.
  {
    std::vector<uint64_t> h(n);
    std::vector<int32_t> lives(n, 0);  // named classes a state lives on
    // The live entries of class c for states [b, e) (each class's are in state order).
    auto live_range = [&](size_t c, size_t b, size_t e) {
      const auto first = sh.live_state.begin() + sh.live_begin[c], last = sh.live_state.begin() + sh.live_begin[c + 1];
      return std::make_pair(std::lower_bound(first, last, static_cast<int32_t>(b)),
                            std::lower_bound(first, last, static_cast<int32_t>(e)));
    };
    parallel_for(n, [&](size_t b, size_t e) {  // states split over the threads, every column each
      for (size_t s = b; s < e; ++s) h[s] = mix64(0x51ED2701ull + dfa.accepting[s]);
      for (size_t c = 0; c < k; ++c) {
        const int32_t* col = group.data() + c * n;
        const auto [x0, x1] = live_range(c, b, e);
        for (auto x = x0; x != x1; ++x) {
          const size_t s = static_cast<size_t>(*x);
          if (col[s] < 0) continue;  // a class no token starts with: never named
          h[s] = mix64(h[s] ^ ((static_cast<uint64_t>(c) << 32) | static_cast<uint32_t>(col[s])));
          ++lives[s];
        }
      }
    });
    std::unordered_map<uint64_t, int32_t> by_hash;
    for (size_t s = 0; s < n; ++s) {
      auto [it, fresh] = by_hash.emplace(h[s], static_cast<int32_t>(mc.representative.size()));
      if (fresh) mc.representative.push_back(static_cast<int32_t>(s));
      mc.class_of[s] = it->second;
    }
    std::atomic<bool> exact{true};
    parallel_for(n, [&](size_t b, size_t e) {
      bool ok = true;
      for (size_t s = b; s < e && ok; ++s) {  // equal live counts, then every live entry equal: equal tuples
        const size_t r = static_cast<size_t>(mc.representative[static_cast<size_t>(mc.class_of[s])]);
        ok = dfa.accepting[s] == dfa.accepting[r] && lives[s] == lives[r];
      }
      for (size_t c = 0; c < k && ok; ++c) {
        const int32_t* col = group.data() + c * n;
        const auto [x0, x1] = live_range(c, b, e);
        for (auto x = x0; x != x1; ++x) {
          const size_t s = static_cast<size_t>(*x);
          if (col[s] != col[mc.representative[static_cast<size_t>(mc.class_of[s])]]) ok = false;
        }
      }
      if (!ok) exact = false;
    });
    if (!exact) {
      TupleInterner classes;
      mc.representative.clear();
      for (size_t s = 0; s < n; ++s) {
        tuple_of(s);
        const size_t before = classes.size();
        mc.class_of[s] = classes.intern(tuple);
        if (classes.size() != before) mc.representative.push_back(static_cast<int32_t>(s));
      }
    }
  }
  std::unordered_map<uint64_t, int32_t> part_of;  // (byte class, name) -> part
  for (const int32_t rs : mc.representative) {
    const size_t s = static_cast<size_t>(rs);
    tuple_of(s);
    for (size_t x = 1; x < tuple.size(); x += 2) {
      const size_t c = static_cast<size_t>(tuple[x]);
      auto [it, fresh] = part_of.emplace((static_cast<uint64_t>(c) << 32) | static_cast<uint32_t>(tuple[x + 1]),
                                         static_cast<int32_t>(mc.part_target.size()));
      if (fresh) {
        mc.part_byte_class.push_back(static_cast<int32_t>(c));
        mc.part_target.push_back(dfa.next[s * k + c]);
      }
      mc.parts.push_back(it->second);
    }
    mc.part_begin.push_back(static_cast<int32_t>(mc.parts.size()));
  }
  if (strings_out) *strings_out = std::make_shared<const StringRefinement>(std::move(sh.strings));
  return mc;
}

}  // namespace detail

}  // namespace ib::constrain
