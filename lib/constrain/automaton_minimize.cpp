// DFA minimisation (Hopcroft, then merging byte classes no state tells apart): the step that
// compile_dfa and product_dfa both end with, kept apart as the longest single algorithm.
#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/automaton_internal.h"
#include "numerics/random.h"

namespace ib::constrain::detail {

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
      for (int32_t i = f; i < static_cast<int32_t>(elems.size()); ++i)
        at_[static_cast<size_t>(elems[static_cast<size_t>(i)])].block = b;
      if (pass < 2) push_work(b);  // every initial block but the sink's
    }
  }
  // A splitter is a block taken with every class at once: its members' predecessors are bucketed by
  // class, and each class's bucket splits the blocks it marks in part. (The same refinement as
  // splitting by each (block, class) pair in turn: a block is pending for all classes or none.)
  std::vector<int32_t> touched, members, bucket_start(static_cast<size_t>(nclass) + 1), bucket, classes_hit;
  std::vector<int32_t> count(static_cast<size_t>(nclass), 0);
  while (!pending.empty()) {
    compile_budget_tick();
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
        if (y_pending)
          push_work(z);
        else
          push_work(mk <= size - mk ? z : yi);
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
  for (int32_t s = 0; s < n; ++s)
    block[static_cast<size_t>(s)] =
        live[static_cast<size_t>(s)] ? compact[static_cast<size_t>(block[static_cast<size_t>(s)])] : -1;
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
    for (size_t o = 0; o < static_cast<size_t>(blocks); ++o) for_each_edge(o, [&](size_t c, int32_t t) { column[c][o] = t; });
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
    out.accepting[static_cast<size_t>(order[static_cast<size_t>(b)])] =
        raw_accept[static_cast<size_t>(member[static_cast<size_t>(b)])];
  out.start = 0;
  return out;
}

}  // namespace ib::constrain::detail
