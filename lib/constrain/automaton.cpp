#include "constrain/automaton.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>
#include <unordered_map>

#include "constrain/interner.h"

namespace ib::constrain {

int Dfa::forced_byte(int32_t s) const {
  if (accepting[static_cast<size_t>(s)]) return -1;
  int found = -1;
  for (int b = 0; b < 256; ++b) {
    if (step(s, static_cast<uint8_t>(b)) < 0) continue;
    if (found >= 0) return -1;
    found = b;
  }
  return found;
}

namespace {

// The distinct byte sets of an NFA's edges, interned: an edge stores a small id, and the byte
// classes are computed once per distinct set instead of once per edge (a schema's NFA has tens of
// thousands of edges over a few dozen sets).
class ByteSetTable {
 public:
  ByteSetTable() : slots_(64, -1) {}
  int32_t intern(const ByteSet& b) {
    static_assert(std::is_trivially_copyable_v<ByteSet> && sizeof(ByteSet) == 4 * sizeof(uint64_t),
                  "ByteSet is hashed through its four words");
    uint64_t w[4];
    std::memcpy(w, &b, sizeof w);
    const uint64_t h = mix64(w[0] ^ mix64(w[1] ^ mix64(w[2] ^ mix64(w[3]))));
    size_t mask = slots_.size() - 1;
    size_t i = static_cast<size_t>(h) & mask;
    for (; slots_[i] >= 0; i = (i + 1) & mask)
      if (hash_[static_cast<size_t>(slots_[i])] == h && sets_[static_cast<size_t>(slots_[i])] == b) return slots_[i];
    const int32_t id = static_cast<int32_t>(sets_.size());
    sets_.push_back(b);
    hash_.push_back(h);
    if (sets_.size() * 2 > slots_.size()) {
      slots_.assign(slots_.size() * 2, -1);
      mask = slots_.size() - 1;
      for (size_t j = 0; j < sets_.size(); ++j) {
        size_t k = static_cast<size_t>(hash_[j]) & mask;
        while (slots_[k] >= 0) k = (k + 1) & mask;
        slots_[k] = static_cast<int32_t>(j);
      }
    } else {
      slots_[i] = id;
    }
    return id;
  }
  const std::vector<ByteSet>& sets() const { return sets_; }

 private:
  std::vector<ByteSet> sets_;
  std::vector<uint64_t> hash_;
  std::vector<int32_t> slots_;
};

// Thompson NFA in flat arrays: state s has the epsilon edges pool[eps_at[s] .. + eps_n[s]) (set
// once, when its targets are known) and at most one byte-set edge, bytes set[s] (an id in `sets`,
// -1 for none) to state to[s].
struct Nfa {
  std::vector<int32_t> eps_at, eps_n, set, to;
  std::vector<int32_t> pool;
  ByteSetTable sets;
  int64_t limit = 0;

  size_t size() const { return to.size(); }
  int32_t add() {
    if (static_cast<int64_t>(to.size()) >= limit)
      throw RegexError("the automaton needs more than " + std::to_string(limit) +
                       " NFA states (bounds such as maxLength or maxItems are too large)");
    eps_at.push_back(0);
    eps_n.push_back(0);
    set.push_back(-1);
    to.push_back(-1);
    return static_cast<int32_t>(to.size() - 1);
  }
  void set_eps(int32_t s, const int32_t* b, const int32_t* e) {
    eps_at[static_cast<size_t>(s)] = static_cast<int32_t>(pool.size());
    eps_n[static_cast<size_t>(s)] = static_cast<int32_t>(e - b);
    pool.insert(pool.end(), b, e);
  }
  void set_edge(int32_t s, int32_t set_id, int32_t target) {
    set[static_cast<size_t>(s)] = set_id;
    to[static_cast<size_t>(s)] = target;
  }

  // Continuation-passing Thompson construction: build(r, next) returns a state whose language is
  // L(r)·L(next), adding no edge to any state that existed before the call. So a sub-expression the
  // AST shares (the schema compiler's memoized object tails, x in x{2,}) and that is followed by
  // the same continuation is built once: one NFA fragment instead of one copy per path to it.
  struct PairHash {
    size_t operator()(const std::pair<const RegexNode*, int32_t>& p) const {
      return std::hash<const void*>()(p.first) * 0x9E3779B97F4A7C15ull ^ static_cast<size_t>(p.second);
    }
  };
  std::unordered_map<std::pair<const RegexNode*, int32_t>, int32_t, PairHash> built;

  int32_t eps_to(std::initializer_list<int32_t> targets) {
    const int32_t a = add();
    set_eps(a, targets.begin(), targets.end());
    return a;
  }

  // A DFA as a fragment followed by `next`: a hub state per DFA state with an epsilon edge to one
  // byte-set edge per target (the classes that lead there, merged) and, when it accepts, to next.
  // Only new states get edges, as build() requires; the subset construction sees a deterministic
  // part and does not grow it. The edges per state are worked out once per DFA (a body repeated
  // 500 times is embedded 500 times).
  struct EmbedPlan {
    std::vector<int32_t> row;                        // state s: edges [row[s], row[s + 1])
    std::vector<std::pair<int32_t, int32_t>> edges;  // (target state, byte-set id)
  };
  std::unordered_map<const Dfa*, EmbedPlan> plans;
  const EmbedPlan& plan(const Dfa& d) {
    auto [it, fresh] = plans.emplace(&d, EmbedPlan{});
    if (!fresh) return it->second;
    EmbedPlan& p = it->second;
    std::vector<ByteSet> class_bytes(static_cast<size_t>(d.num_classes));
    for (int b = 0; b < 256; ++b) class_bytes[d.byte_class[static_cast<size_t>(b)]].set(static_cast<size_t>(b));
    std::vector<std::pair<int32_t, ByteSet>> targets;
    p.row.push_back(0);
    for (int32_t s = 0; s < d.num_states; ++s) {
      targets.clear();
      for (int32_t c = 0; c < d.num_classes; ++c) {
        const int32_t t = d.next[static_cast<size_t>(s) * d.num_classes + static_cast<size_t>(c)];
        if (t < 0) continue;
        auto at = std::find_if(targets.begin(), targets.end(), [&](const auto& q) { return q.first == t; });
        if (at == targets.end()) at = targets.emplace(targets.end(), t, ByteSet{});
        at->second |= class_bytes[static_cast<size_t>(c)];
      }
      for (const auto& [t, bytes] : targets) p.edges.emplace_back(t, sets.intern(bytes));
      p.row.push_back(static_cast<int32_t>(p.edges.size()));
    }
    return p;
  }
  std::vector<int32_t> hub, hub_eps;
  int32_t embed(const Dfa& d, int32_t next) {
    const EmbedPlan& p = plan(d);
    hub.resize(static_cast<size_t>(d.num_states));
    for (auto& h : hub) h = add();
    for (int32_t s = 0; s < d.num_states; ++s) {
      hub_eps.clear();
      for (int32_t x = p.row[static_cast<size_t>(s)]; x < p.row[static_cast<size_t>(s) + 1]; ++x) {
        const int32_t e = add();
        set_edge(e, p.edges[static_cast<size_t>(x)].second, hub[static_cast<size_t>(p.edges[static_cast<size_t>(x)].first)]);
        hub_eps.push_back(e);
      }
      if (d.accepting[static_cast<size_t>(s)]) hub_eps.push_back(next);
      set_eps(hub[static_cast<size_t>(s)], hub_eps.data(), hub_eps.data() + hub_eps.size());
    }
    return hub[static_cast<size_t>(d.start)];
  }

  // A repeated body as its minimal DFA, when that is small: the subset construction then meets
  // one deterministic copy per repetition instead of the body's alternatives (a JSON string
  // character's UTF-8 lengths and escapes), which made it build about twice the states the
  // minimal DFA keeps and minimisation then merged. Compiled once per body node.
  std::unordered_map<const RegexNode*, Re> compacted;
  __attribute__((noinline)) const Re& compact(const Re& x) {
    if (x->kind == RegexNode::Kind::Bytes || x->kind == RegexNode::Kind::Automaton || x->kind == RegexNode::Kind::Empty)
      return x;
    auto [it, fresh] = compacted.emplace(x.get(), x);
    int budget = kCompactNodes;
    if (fresh && small_ast(*x, &budget)) {
      CompileLimits small;
      small.max_nfa_states = 4 * kCompactStates;
      small.max_dfa_states = kCompactStates;
      try {
        it->second = re_automaton(std::make_shared<const Dfa>(compile_dfa(x, small)));
      } catch (const RegexError&) {
        // larger than a compact body: built inline
      }
    }
    return it->second;
  }
  static constexpr int64_t kCompactStates = 64;
  static constexpr int kCompactNodes = 256;
  // Whether the AST has at most *budget nodes (a shared node counted at each use): a body that
  // large would not compile to a compact DFA, and trying costs more than it saves.
  static bool small_ast(const RegexNode& r, int* budget) {
    if (--*budget < 0) return false;
    if (r.kind == RegexNode::Kind::Automaton) return (*budget -= r.dfa->num_states) >= 0;
    for (const auto& k : r.kids)
      if (!small_ast(*k, budget)) return false;
    return true;
  }

  // The parsers bound what they build (regex groups, schema levels), so this is a backstop: an
  // expression nested past it is an error, not a stack overflow in the recursion below. Real
  // schemas stay far inside it (the deepest AST of the 340-schema corpus: 427 levels). The
  // recursion's frames are kept small (the cases with locals are functions of their own, never
  // inlined into it), so that 1500 levels fit an AddressSanitizer build's 8 MiB stack too.
  static constexpr int kMaxBuildDepth = 1500;
  int build_depth = 0;
  [[noreturn]] __attribute__((noinline)) static void too_deep() {
    throw RegexError("the expression nests deeper than " + std::to_string(kMaxBuildDepth) + " levels");
  }

  int32_t build(const Re& r, int32_t next) {
    const auto key = std::make_pair(r.get(), next);
    if (auto it = built.find(key); it != built.end()) return it->second;
    if (++build_depth > kMaxBuildDepth) too_deep();
    int32_t in = next;
    switch (r->kind) {
      case RegexNode::Kind::Concat:
        for (size_t i = r->kids.size(); i-- > 0;) in = build(r->kids[i], in);
        break;
      case RegexNode::Kind::Alt:
        in = build_alt(*r, next);
        break;
      case RegexNode::Kind::Repeat:
        in = build_repeat(*r, next);
        break;
      default:
        in = build_leaf(*r, next);
    }
    --build_depth;
    built.emplace(key, in);
    return in;
  }
  __attribute__((noinline)) int32_t build_leaf(const RegexNode& r, int32_t next) {
    switch (r.kind) {
      case RegexNode::Kind::Never:
        return add();  // no edge out
      case RegexNode::Kind::Bytes: {
        const int32_t in = add();
        set_edge(in, sets.intern(r.bytes), next);
        return in;
      }
      case RegexNode::Kind::Automaton:
        return embed(*r.dfa, next);
      default:  // Empty
        return next;
    }
  }
  __attribute__((noinline)) int32_t build_alt(const RegexNode& r, int32_t next) {
    std::vector<int32_t> ins;
    for (const auto& k : r.kids) ins.push_back(build(k, next));
    const int32_t in = add();
    set_eps(in, ins.data(), ins.data() + ins.size());
    return in;
  }
  __attribute__((noinline)) int32_t build_repeat(const RegexNode& r, int32_t next) {
    const Re& x = compact(r.kids[0]);
    int32_t in = next;
    if (r.max < 0) {  // x{min,}: min copies, then a loop state that re-enters x or leaves
      const int32_t loop = add();
      const int32_t body = build(x, loop);
      const int32_t out[2] = {body, next};
      set_eps(loop, out, out + 2);
      in = loop;
    } else {  // x{0,k} then next = next | x x{0,k-1} next
      for (int i = r.min; i < r.max; ++i) in = eps_to({build(x, in), next});
    }
    for (int i = 0; i < r.min; ++i) in = build(x, in);
    return in;
  }
};

// Byte classes: bytes that no byte-set in `sets` tells apart.
std::array<uint8_t, 256> classes_of(const std::vector<ByteSet>& sets, int* count) {
  std::array<int, 256> cls{};
  int n = 1;
  std::array<int, 512> renumber;  // (class, in the set) -> new class
  for (const auto& s : sets) {
    renumber.fill(-1);
    int fresh = 0;
    for (int b = 0; b < 256; ++b) {
      int& to = renumber[static_cast<size_t>(2 * cls[static_cast<size_t>(b)] + (s.test(static_cast<size_t>(b)) ? 1 : 0))];
      if (to < 0) to = fresh++;
      cls[static_cast<size_t>(b)] = to;
    }
    n = fresh;
  }
  std::array<uint8_t, 256> out{};
  for (int b = 0; b < 256; ++b) out[static_cast<size_t>(b)] = static_cast<uint8_t>(cls[static_cast<size_t>(b)]);
  *count = n;
  return out;
}

}  // namespace

namespace {

// A DFA as the subset and product constructions find it: states 0..n-1 with start 0, each with its
// transitions (byte class, target) in class order, the classes absent leading nowhere. Sparse: a
// state of a schema's DFA uses about one class in six.
struct RawDfa {
  int nclass = 0;
  std::vector<int32_t> row_start = {0};  // state s: entries [row_start[s], row_start[s + 1])
  std::vector<uint16_t> cls;
  std::vector<int32_t> to;
  std::vector<uint8_t> accept;
  int32_t states() const { return static_cast<int32_t>(row_start.size()) - 1; }
  void add(int c, int32_t t) {
    cls.push_back(static_cast<uint16_t>(c));
    to.push_back(t);
  }
  void end_row() { row_start.push_back(static_cast<int32_t>(to.size())); }
};

// The minimal DFA of a raw one over the byte classes `nfa_class`. States that cannot reach
// acceptance are dropped. compile_dfa (after the subset construction) and product_dfa share it.
Dfa minimize_raw(const RawDfa& raw, const std::array<uint8_t, 256>& nfa_class) {
  const int32_t n = raw.states();
  const int nclass = raw.nclass;
  const std::vector<uint8_t>& raw_accept = raw.accept;
  // Predecessors of each state as CSR of (state, class), over every transition. A predecessor of a
  // state that can reach acceptance can too, so the same lists serve the liveness search and,
  // restricted to live targets, the refinement below.
  const size_t nn = static_cast<size_t>(n), nc = static_cast<size_t>(nclass);
  const int32_t sink = n;
  const int32_t m = n + 1;
  std::vector<int32_t> in_start(static_cast<size_t>(m) + 1, 0), in_from;
  std::vector<uint16_t> in_class;
  for (const int32_t t : raw.to) ++in_start[static_cast<size_t>(t) + 1];
  for (int32_t t = 0; t < m; ++t) in_start[static_cast<size_t>(t) + 1] += in_start[static_cast<size_t>(t)];
  in_from.resize(static_cast<size_t>(in_start[static_cast<size_t>(m)]));
  in_class.resize(in_from.size());
  {
    std::vector<int32_t> fill(in_start.begin(), in_start.end() - 1);
    for (size_t s = 0; s < nn; ++s)
      for (int32_t x = raw.row_start[s]; x < raw.row_start[s + 1]; ++x) {
        const size_t e = static_cast<size_t>(fill[static_cast<size_t>(raw.to[static_cast<size_t>(x)])]++);
        in_from[e] = static_cast<int32_t>(s);
        in_class[e] = raw.cls[static_cast<size_t>(x)];
      }
  }
  // Live states: those that can reach acceptance.
  std::vector<uint8_t> live(nn, 0);
  std::vector<int32_t> work;
  for (int32_t s = 0; s < n; ++s)
    if (raw_accept[static_cast<size_t>(s)]) {
      live[static_cast<size_t>(s)] = 1;
      work.push_back(s);
    }
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    for (int32_t e = in_start[static_cast<size_t>(s)]; e < in_start[static_cast<size_t>(s) + 1]; ++e)
      if (const int32_t p = in_from[static_cast<size_t>(e)]; !live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        work.push_back(p);
      }
  }

  Dfa out;
  if (!live[0]) {  // the language is empty: one non-accepting state with no way out
    out.num_states = 1;
    out.num_classes = 1;
    out.next = {-1};
    out.accepting = {0};
    return out;
  }

  // Hopcroft minimisation over the live states plus one sink that stands for "dead". Transitions
  // into the sink are left out: the sink is alone in its block from the start (it alone cannot
  // reach acceptance), so that block never splits and is never a splitter; nor is a dead state
  // ever in a splitter, so the lists' edges into dead states are never read.
  // The partition: elements grouped by block, each block a range [first, last) of `elems`. What a
  // step reads together sits together: a state's block and position, a block's range, marks and
  // pending flag (the loop below is bound by these scattered reads).
  struct StateAt {
    int32_t block, pos;
  };
  struct Block {
    int32_t first, last, marked;
    int32_t in_work;  // pending as a splitter
  };
  std::vector<int32_t> elems;
  std::vector<StateAt> at_(static_cast<size_t>(m), StateAt{-1, 0});
  std::vector<Block> blk;
  std::vector<int32_t> pending;
  auto new_block = [&](int32_t f, int32_t l) {
    blk.push_back(Block{f, l, 0, 0});
    return static_cast<int32_t>(blk.size() - 1);
  };
  auto push_work = [&](int32_t b) {
    if (!blk[static_cast<size_t>(b)].in_work) {
      blk[static_cast<size_t>(b)].in_work = 1;
      pending.push_back(b);
    }
  };
  for (int pass = 0; pass < 3; ++pass) {  // accepting, live non-accepting, sink
    const int32_t f = static_cast<int32_t>(elems.size());
    for (int32_t s = 0; s < m; ++s) {
      const int kind = s == sink ? 2 : !live[static_cast<size_t>(s)] ? -1 : raw_accept[static_cast<size_t>(s)] ? 0 : 1;
      if (kind != pass) continue;
      at_[static_cast<size_t>(s)].pos = static_cast<int32_t>(elems.size());
      elems.push_back(s);
    }
    if (static_cast<int32_t>(elems.size()) > f) {
      const int32_t b = new_block(f, static_cast<int32_t>(elems.size()));
      for (int32_t i = f; i < static_cast<int32_t>(elems.size()); ++i) at_[static_cast<size_t>(elems[static_cast<size_t>(i)])].block = b;
      if (pass < 2) push_work(b);  // every initial block but the sink's
    }
  }
  // A splitter is a block taken with every class at once: its members' predecessors are bucketed by
  // class, and each class's bucket splits the blocks it marks in part. (The same refinement as
  // splitting by each (block, class) pair in turn: a block is pending for all classes or none.)
  std::vector<int32_t> touched, members, bucket_start(static_cast<size_t>(nclass) + 1), bucket, classes_hit;
  std::vector<int32_t> count(static_cast<size_t>(nclass), 0);
  while (!pending.empty()) {
    const int32_t a = pending.back();
    pending.pop_back();
    blk[static_cast<size_t>(a)].in_work = 0;
    members.assign(elems.begin() + blk[static_cast<size_t>(a)].first, elems.begin() + blk[static_cast<size_t>(a)].last);
    classes_hit.clear();
    size_t edges = 0;
    for (int32_t t : members)
      for (int32_t e = in_start[static_cast<size_t>(t)]; e < in_start[static_cast<size_t>(t) + 1]; ++e) {
        const uint16_t c = in_class[static_cast<size_t>(e)];
        if (count[c]++ == 0) classes_hit.push_back(c);
        ++edges;
      }
    if (edges == 0) continue;
    int32_t at = 0;
    for (int32_t c : classes_hit) {
      bucket_start[static_cast<size_t>(c)] = at;
      at += count[static_cast<size_t>(c)];
      count[static_cast<size_t>(c)] = bucket_start[static_cast<size_t>(c)];  // fill position
    }
    bucket.resize(edges);
    for (int32_t t : members)
      for (int32_t e = in_start[static_cast<size_t>(t)]; e < in_start[static_cast<size_t>(t) + 1]; ++e)
        bucket[static_cast<size_t>(count[in_class[static_cast<size_t>(e)]]++)] = in_from[static_cast<size_t>(e)];
    for (int32_t c : classes_hit) {
      const int32_t end = count[static_cast<size_t>(c)];
      count[static_cast<size_t>(c)] = 0;
      // Mark every state with a c-transition into a, moving it to the front of its block (a
      // block of one state cannot split: left alone).
      for (int32_t k = bucket_start[static_cast<size_t>(c)]; k < end; ++k) {
        const int32_t q = bucket[static_cast<size_t>(k)];
        StateAt& sq = at_[static_cast<size_t>(q)];
        Block& y = blk[static_cast<size_t>(sq.block)];
        const int32_t slot = y.first + y.marked;
        if (sq.pos < slot || y.last - y.first == 1) continue;  // already marked, or alone
        if (y.marked == 0) touched.push_back(sq.block);
        const int32_t other = elems[static_cast<size_t>(slot)];
        elems[static_cast<size_t>(slot)] = q;
        elems[static_cast<size_t>(sq.pos)] = other;
        at_[static_cast<size_t>(other)].pos = sq.pos;
        sq.pos = slot;
        ++y.marked;
      }
      for (int32_t yi : touched) {
        Block& y = blk[static_cast<size_t>(yi)];
        const int32_t size = y.last - y.first, mk = y.marked;
        y.marked = 0;
        if (mk == size) continue;
        // Split: the marked front part becomes a new block.
        const int32_t f = y.first;
        y.first += mk;
        const bool y_pending = y.in_work != 0;
        const int32_t z = new_block(f, f + mk);  // (y may move: blk grows)
        for (int32_t i = f; i < f + mk; ++i) at_[static_cast<size_t>(elems[static_cast<size_t>(i)])].block = z;
        if (y_pending) push_work(z);
        else push_work(mk <= size - mk ? z : yi);
      }
      touched.clear();
    }
  }
  std::vector<int32_t> block(static_cast<size_t>(m));
  for (size_t s = 0; s < static_cast<size_t>(m); ++s) block[s] = at_[s].block;
  // Live blocks only (the sink's block is "dead").
  const int32_t sink_block = block[static_cast<size_t>(sink)];
  int32_t blocks = 0;
  std::vector<int32_t> compact(blk.size(), -1);
  for (int32_t b = 0; b < static_cast<int32_t>(blk.size()); ++b)
    if (b != sink_block) compact[static_cast<size_t>(b)] = blocks++;
  for (int32_t s = 0; s < n; ++s) block[static_cast<size_t>(s)] = live[static_cast<size_t>(s)] ? compact[static_cast<size_t>(block[static_cast<size_t>(s)])] : -1;
  block.resize(static_cast<size_t>(n));

  // Renumber blocks so the start state is 0 and states appear in BFS order (stable output).
  std::vector<int32_t> order(static_cast<size_t>(blocks), -1);
  std::vector<int32_t> member(static_cast<size_t>(blocks), -1);
  for (int32_t s = 0; s < n; ++s)
    if (live[static_cast<size_t>(s)] && member[static_cast<size_t>(block[static_cast<size_t>(s)])] < 0)
      member[static_cast<size_t>(block[static_cast<size_t>(s)])] = s;
  std::vector<int32_t> queue = {block[0]};
  order[static_cast<size_t>(block[0])] = 0;
  int32_t assigned = 1;
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const size_t s = static_cast<size_t>(member[static_cast<size_t>(queue[qi])]);
    for (int32_t x = raw.row_start[s]; x < raw.row_start[s + 1]; ++x) {
      const int32_t t = raw.to[static_cast<size_t>(x)];
      if (!live[static_cast<size_t>(t)]) continue;
      int32_t b = block[static_cast<size_t>(t)];
      if (order[static_cast<size_t>(b)] < 0) {
        order[static_cast<size_t>(b)] = assigned++;
        queue.push_back(b);
      }
    }
  }

  // The minimal DFA's transitions over the NFA's byte classes: block o's (in BFS order) are its
  // first member's raw transitions into live states, read in place (three passes below).
  std::vector<int32_t> at_order(static_cast<size_t>(blocks));
  for (int32_t b = 0; b < blocks; ++b) at_order[static_cast<size_t>(order[static_cast<size_t>(b)])] = b;
  auto for_each_edge = [&](size_t o, auto&& f) {
    const size_t s = static_cast<size_t>(member[static_cast<size_t>(at_order[o])]);
    for (int32_t x = raw.row_start[s]; x < raw.row_start[s + 1]; ++x)
      if (const int32_t t = raw.to[static_cast<size_t>(x)]; live[static_cast<size_t>(t)])
        f(static_cast<size_t>(raw.cls[static_cast<size_t>(x)]), order[static_cast<size_t>(block[static_cast<size_t>(t)])]);
  };
  // Merge the byte classes it does not tell apart (equal columns): grouped by each column's entry
  // count and a sum of its entries' hashes, then confirmed entry by entry against the group's first
  // class (equal counts and every entry matched: equal columns); on a hash collision, by the
  // columns themselves.
  std::vector<uint64_t> col_hash(nc, 0);
  std::vector<int32_t> col_count(nc, 0);
  for (size_t o = 0; o < static_cast<size_t>(blocks); ++o)
    for_each_edge(o, [&](size_t c, int32_t t) {
      col_hash[c] += mix64((static_cast<uint64_t>(o) << 32) | static_cast<uint32_t>(t));
      ++col_count[c];
    });
  std::vector<int> class_map(nc), class_rep;
  {
    std::map<std::pair<uint64_t, int32_t>, int> groups;
    for (size_t c = 0; c < nc; ++c) {
      auto [it, fresh] = groups.emplace(std::make_pair(col_hash[c], col_count[c]), static_cast<int>(class_rep.size()));
      if (fresh) class_rep.push_back(static_cast<int>(c));
      class_map[c] = it->second;
    }
  }
  bool confirmed = true;
  {
    std::vector<int32_t> dense(nc, -1);
    std::vector<size_t> row_classes;
    for (size_t o = 0; o < static_cast<size_t>(blocks) && confirmed; ++o) {
      for_each_edge(o, [&](size_t c, int32_t t) {
        dense[c] = t;
        row_classes.push_back(c);
      });
      for (size_t c : row_classes)
        if (dense[static_cast<size_t>(class_rep[static_cast<size_t>(class_map[c])])] != dense[c]) confirmed = false;
      for (size_t c : row_classes) dense[c] = -1;
      row_classes.clear();
    }
  }
  if (!confirmed) {
    std::vector<std::vector<int32_t>> column(nc, std::vector<int32_t>(static_cast<size_t>(blocks), -1));
    for (size_t o = 0; o < static_cast<size_t>(blocks); ++o)
      for_each_edge(o, [&](size_t c, int32_t t) { column[c][o] = t; });
    std::map<std::vector<int32_t>, int> merged;
    class_rep.clear();
    for (size_t c = 0; c < nc; ++c) {
      auto [it, fresh] = merged.emplace(column[c], static_cast<int>(class_rep.size()));
      if (fresh) class_rep.push_back(static_cast<int>(c));
      class_map[c] = it->second;
    }
  }
  const size_t onc = class_rep.size();
  out.num_states = blocks;
  out.num_classes = static_cast<int32_t>(onc);
  for (int b = 0; b < 256; ++b)
    out.byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(class_map[nfa_class[static_cast<size_t>(b)]]);
  out.next.assign(static_cast<size_t>(blocks) * onc, -1);
  for (size_t o = 0; o < static_cast<size_t>(blocks); ++o)
    for_each_edge(o, [&](size_t c, int32_t t) { out.next[o * onc + static_cast<size_t>(class_map[c])] = t; });
  out.accepting.assign(static_cast<size_t>(blocks), 0);
  for (int32_t b = 0; b < blocks; ++b)
    out.accepting[static_cast<size_t>(order[static_cast<size_t>(b)])] = raw_accept[static_cast<size_t>(member[static_cast<size_t>(b)])];
  out.start = 0;
  return out;
}

}  // namespace

Dfa compile_dfa(const Re& re, const CompileLimits& limits) {
  Nfa nfa;
  nfa.limit = limits.max_nfa_states;
  const int32_t accept = nfa.add();  // no edge out: reaching it means the input matched
  const int32_t top_in = nfa.build(re, accept);

  // Byte classes of the NFA's edges.
  int nclass = 0;
  const std::vector<ByteSet>& sets = nfa.sets.sets();
  const std::array<uint8_t, 256> nfa_class = classes_of(sets, &nclass);
  std::vector<uint8_t> rep(static_cast<size_t>(nclass));  // a representative byte per class
  for (int b = 255; b >= 0; --b) rep[nfa_class[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);

  // The byte classes of each distinct edge set (edges usually cover one or two classes).
  std::vector<int32_t> set_classes_at(sets.size() + 1, 0);
  std::vector<uint16_t> set_classes;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (int c = 0; c < nclass; ++c)
      if (sets[i].test(rep[static_cast<size_t>(c)])) set_classes.push_back(static_cast<uint16_t>(c));
    set_classes_at[i + 1] = static_cast<int32_t>(set_classes.size());
  }

  // Subset construction. A DFA state is the sorted set of NFA states with a byte edge, plus
  // the accept state when it is reachable.
  const size_t nn = nfa.size();
  const std::vector<int32_t>& eps_at = nfa.eps_at;
  const std::vector<int32_t>& eps_n = nfa.eps_n;
  const std::vector<int32_t>& eps = nfa.pool;
  const std::vector<int32_t>& edge_set = nfa.set;
  std::vector<int32_t>& to = nfa.to;
  to[static_cast<size_t>(accept)] = std::numeric_limits<int32_t>::max();  // kept in closures too
  std::vector<uint32_t> mark(nn, 0);
  uint32_t epoch = 0;
  std::vector<int32_t> stack;
  auto closure = [&](const std::vector<int32_t>& seeds, std::vector<int32_t>* out) {
    ++epoch;
    out->clear();
    stack.assign(seeds.begin(), seeds.end());
    for (int32_t s : stack) mark[static_cast<size_t>(s)] = epoch;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (to[static_cast<size_t>(s)] >= 0) out->push_back(s);
      for (int32_t x = eps_at[static_cast<size_t>(s)], x_end = x + eps_n[static_cast<size_t>(s)]; x < x_end; ++x)
        if (const int32_t e = eps[static_cast<size_t>(x)]; mark[static_cast<size_t>(e)] != epoch) {
          mark[static_cast<size_t>(e)] = epoch;
          stack.push_back(e);
        }
    }
    std::sort(out->begin(), out->end());
  };

  TupleInterner sets_of;  // DFA state -> its NFA state set
  RawDfa raw;
  raw.nclass = nclass;
  auto intern = [&](const std::vector<int32_t>& set) {
    bool fresh = false;
    const int32_t id = sets_of.intern(set, &fresh);
    if (fresh) {
      if (static_cast<int64_t>(sets_of.size()) > limits.max_dfa_states)
        throw RegexError("the automaton needs more than " + std::to_string(limits.max_dfa_states) + " DFA states");
      if (static_cast<int64_t>(sets_of.entries()) > limits.max_set_entries)
        throw RegexError("the automaton's DFA states hold more than " + std::to_string(limits.max_set_entries) +
                         " NFA states in all (a long repetition inside an unanchored pattern?)");
      raw.accept.push_back(std::binary_search(set.begin(), set.end(), accept) ? 1 : 0);
    }
    return id;
  };
  std::vector<int32_t> scratch;
  closure({top_in}, &scratch);
  intern(scratch);
  // A class's move from d is fixed by which of d's NFA states have an edge on it: classes are
  // grouped by that (a bit per state, d rarely has more than a few), so each distinct move set is
  // found once, its closure taken and interned once per state d. Past 64 edge states, each class's
  // move set is compared as a list.
  std::vector<uint64_t> sig(static_cast<size_t>(nclass), 0);
  std::vector<std::vector<int32_t>> moved(static_cast<size_t>(nclass));
  std::vector<int> used;
  std::vector<int32_t> edge_states, mv;
  std::vector<int32_t> single(nn, -1);  // NFA state t -> the DFA state of the move {t}, once found
  std::vector<std::pair<uint64_t, int32_t>> seen_sigs;                 // (signature, DFA state)
  std::vector<std::tuple<uint64_t, int, int32_t>> seen_moves;          // (hash, class, DFA state)
  for (size_t d = 0; d < sets_of.size(); ++d) {
    edge_states.clear();
    for (const int32_t* it = sets_of.begin(static_cast<int32_t>(d)); it != sets_of.end(static_cast<int32_t>(d)); ++it)
      if (edge_set[static_cast<size_t>(*it)] >= 0) edge_states.push_back(*it);
    if (edge_states.size() <= 64) {
      for (size_t i = 0; i < edge_states.size(); ++i) {
        const size_t sid = static_cast<size_t>(edge_set[static_cast<size_t>(edge_states[i])]);
        for (int32_t y = set_classes_at[sid]; y < set_classes_at[sid + 1]; ++y) {
          const uint16_t c = set_classes[static_cast<size_t>(y)];
          if (sig[c] == 0) used.push_back(c);
          sig[c] |= uint64_t{1} << i;
        }
      }
      std::sort(used.begin(), used.end());
      seen_sigs.clear();
      for (int c : used) {
        const uint64_t g = sig[static_cast<size_t>(c)];
        sig[static_cast<size_t>(c)] = 0;
        int32_t id = -1;
        for (const auto& [sg, sid] : seen_sigs)
          if (sg == g) {
            id = sid;
            break;
          }
        if (id < 0) {
          mv.clear();
          for (uint64_t bits = g; bits; bits &= bits - 1)
            mv.push_back(to[static_cast<size_t>(edge_states[static_cast<size_t>(__builtin_ctzll(bits))])]);
          // A move to one NFA state (the usual case) leads where it led before.
          int32_t* known = mv.size() == 1 ? &single[static_cast<size_t>(mv[0])] : nullptr;
          if (known && *known >= 0) {
            id = *known;
          } else {
            closure(mv, &scratch);
            id = intern(scratch);
            if (known) *known = id;
          }
          seen_sigs.emplace_back(g, id);
        }
        raw.add(c, id);
      }
    } else {
      for (const int32_t s : edge_states) {
        const size_t sid = static_cast<size_t>(edge_set[static_cast<size_t>(s)]);
        for (int32_t y = set_classes_at[sid]; y < set_classes_at[sid + 1]; ++y) {
          const uint16_t c = set_classes[static_cast<size_t>(y)];
          if (moved[c].empty()) used.push_back(c);
          moved[c].push_back(to[static_cast<size_t>(s)]);
        }
      }
      std::sort(used.begin(), used.end());
      seen_moves.clear();
      for (int c : used) {
        const auto& m = moved[static_cast<size_t>(c)];
        uint64_t h = 0x9E3779B97F4A7C15ull ^ m.size();
        for (int32_t x : m) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull;
        int32_t id = -1;
        for (const auto& [hc, other, oid] : seen_moves)
          if (hc == h && moved[static_cast<size_t>(other)] == m) {
            id = oid;
            break;
          }
        if (id < 0) {
          closure(m, &scratch);
          id = intern(scratch);
          seen_moves.emplace_back(h, c, id);
        }
        raw.add(c, id);
      }
      for (int c : used) moved[static_cast<size_t>(c)].clear();
    }
    raw.end_row();
    used.clear();
  }
  sets_of = TupleInterner();
  return minimize_raw(raw, nfa_class);
}

Dfa product_dfa(const std::vector<const Dfa*>& parts, ProductRule rule, const CompileLimits& limits) {
  const size_t k = parts.size();
  if (k == 0) throw RegexError("a product of no automata");
  if (rule == ProductRule::ExactlyOne && k % 2 != 0) throw RegexError("ExactlyOne takes the parts and their over-approximations");
  const size_t n = rule == ProductRule::ExactlyOne ? k / 2 : k;

  // Byte classes of the product: the tuples of the parts' classes.
  std::array<uint8_t, 256> byte_class{};
  std::vector<std::vector<int32_t>> class_of;  // product class -> each part's class
  {
    std::map<std::vector<int32_t>, int> seen;
    std::vector<int32_t> key(k);
    for (int b = 0; b < 256; ++b) {
      for (size_t i = 0; i < k; ++i) key[i] = parts[i]->byte_class[static_cast<size_t>(b)];
      auto it = seen.find(key);
      if (it == seen.end()) {
        it = seen.emplace(key, static_cast<int>(class_of.size())).first;
        class_of.push_back(key);
      }
      byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(it->second);
    }
  }
  const int nclass = static_cast<int>(class_of.size());

  auto accepts = [&](size_t i, int32_t s) { return s >= 0 && parts[i]->accepting[static_cast<size_t>(s)] != 0; };
  auto accepting = [&](const int32_t* t) {
    switch (rule) {
      case ProductRule::Intersection:
        for (size_t i = 0; i < k; ++i)
          if (!accepts(i, t[i])) return false;
        return true;
      case ProductRule::Difference:
        if (!accepts(0, t[0])) return false;
        for (size_t i = 1; i < k; ++i)
          if (accepts(i, t[i])) return false;
        return true;
      case ProductRule::ExactlyOne: {
        // Some P_i accepts and no O_j (j != i) does: count the accepting O_j once.
        int over = 0;
        for (size_t j = 0; j < n; ++j) over += accepts(n + j, t[n + j]);
        for (size_t i = 0; i < n; ++i)
          if (accepts(i, t[i]) && over - (accepts(n + i, t[n + i]) ? 1 : 0) == 0) return true;
        return false;
      }
    }
    return false;
  };
  // A tuple that can never accept again: a needed part is dead.
  auto hopeless = [&](const std::vector<int32_t>& t) {
    switch (rule) {
      case ProductRule::Intersection:
        return std::any_of(t.begin(), t.end(), [](int32_t s) { return s < 0; });
      case ProductRule::Difference:
        return t[0] < 0;
      case ProductRule::ExactlyOne:
        return std::all_of(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n), [](int32_t s) { return s < 0; });
    }
    return false;
  };

  TupleInterner tuples;
  RawDfa raw;
  raw.nclass = nclass;
  std::vector<int32_t> t(k);
  for (size_t i = 0; i < k; ++i) t[i] = parts[i]->start;
  if (hopeless(t)) {
    RawDfa none;
    none.nclass = 1;
    none.accept = {0};
    none.end_row();
    return minimize_raw(none, std::array<uint8_t, 256>{});
  }
  tuples.intern(t);
  raw.accept.push_back(accepting(tuples.begin(0)) ? 1 : 0);
  std::vector<int32_t> from(k);
  for (size_t d = 0; d < tuples.size(); ++d) {
    std::copy(tuples.begin(static_cast<int32_t>(d)), tuples.end(static_cast<int32_t>(d)), from.begin());
    for (int c = 0; c < nclass; ++c) {
      const auto& cls = class_of[static_cast<size_t>(c)];
      for (size_t i = 0; i < k; ++i)
        t[i] = from[i] < 0 ? -1 : parts[i]->next[static_cast<size_t>(from[i]) * parts[i]->num_classes + static_cast<size_t>(cls[i])];
      if (hopeless(t)) continue;
      bool fresh = false;
      const int32_t id = tuples.intern(t, &fresh);
      if (fresh) {
        if (static_cast<int64_t>(tuples.size()) > limits.max_dfa_states)
          throw RegexError("the product automaton needs more than " + std::to_string(limits.max_dfa_states) + " states");
        if (static_cast<int64_t>(tuples.entries()) > limits.max_set_entries)
          throw RegexError("the product automaton's " + std::to_string(tuples.size()) + " states of " + std::to_string(k) +
                           " parts pass " + std::to_string(limits.max_set_entries) + " entries");
        raw.accept.push_back(accepting(tuples.begin(id)) ? 1 : 0);
      }
      raw.add(c, id);
    }
    raw.end_row();
  }
  return minimize_raw(raw, byte_class);
}

}  // namespace ib::constrain
