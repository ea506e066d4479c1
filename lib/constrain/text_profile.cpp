// Text and string bytes, and how each DFA state takes text bytes (TextProfile): what lets a
// walk take a subtree of text bytes without stepping the DFA through it.
#include <cstdint>
#include <utility>
#include <vector>

#include "constrain/token_index.h"

namespace ib::constrain {

bool is_text_byte(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
bool is_string_byte(uint8_t b) { return b >= 0x20 && b != '"' && b != '\\'; }

// run(q) = 0 when some text byte kills q, else 1 + the least run of its text successors: a
// breadth-first search backwards from the states a text byte kills.
TextProfile text_profile(const Dfa& dfa) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  std::vector<uint8_t> text_class(k, 0);
  for (int b = 0; b < 256; ++b)
    if (is_text_byte(static_cast<uint8_t>(b))) text_class[dfa.byte_class[static_cast<size_t>(b)]] = 1;
  std::vector<size_t> text_classes;  // the loops below visit these only
  for (size_t c = 0; c < k; ++c)
    if (text_class[c]) text_classes.push_back(c);
  std::vector<int32_t> pred_start(n + 1, 0), preds;
  std::vector<uint8_t> run(n, 255);
  std::vector<int32_t> queue;
  for (size_t s = 0; s < n; ++s)
    for (const size_t c : text_classes) {
      const int32_t t = dfa.next[s * k + c];
      if (t >= 0)
        ++pred_start[static_cast<size_t>(t) + 1];
      else if (run[s] != 0) {
        run[s] = 0;
        queue.push_back(static_cast<int32_t>(s));
      }
    }
  for (size_t i = 0; i < n; ++i) pred_start[i + 1] += pred_start[i];
  preds.resize(static_cast<size_t>(pred_start[n]));
  std::vector<int32_t> fill(pred_start.begin(), pred_start.end() - 1);
  for (size_t s = 0; s < n; ++s)
    for (const size_t c : text_classes)
      if (const int32_t t = dfa.next[s * k + c]; t >= 0)
        preds[static_cast<size_t>(fill[static_cast<size_t>(t)]++)] = static_cast<int32_t>(s);
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const int32_t t = queue[qi];
    const int r = run[static_cast<size_t>(t)] + 1;
    if (r >= 255) break;
    for (int32_t j = pred_start[static_cast<size_t>(t)]; j < pred_start[static_cast<size_t>(t) + 1]; ++j) {
      const size_t p = static_cast<size_t>(preds[static_cast<size_t>(j)]);
      if (run[p] == 255) {
        run[p] = static_cast<uint8_t>(r);
        queue.push_back(static_cast<int32_t>(p));
      }
    }
  }
  // dies_after: q is text-uniform (every text byte leads to one state u, maybe dead); then
  // dies_after(q) = 0 when u is dead, dies_after(u) + 1 when that is known, else 255.
  constexpr int32_t kMixed = -2;
  std::vector<int32_t> uniform(n, kMixed);
  for (size_t s = 0; s < n; ++s) {
    int32_t u = kMixed;
    for (const size_t c : text_classes) {
      const int32_t t = dfa.next[s * k + c];
      if (u == kMixed)
        u = t;
      else if (u != t) {
        u = kMixed;
        break;
      }
    }
    uniform[s] = u;
  }
  std::vector<uint8_t> dies(n, 255), mark(n, 0);  // mark: 1 on the chain being followed, 2 done
  auto inc = [](int x) { return x >= 254 ? 255 : x + 1; };
  std::vector<int32_t> chain;
  for (size_t s0 = 0; s0 < n; ++s0) {
    if (mark[s0]) continue;
    // Follow uniform successors from s0 until a dead end, a mixed state, a done state or a cycle.
    chain.clear();
    int32_t s = static_cast<int32_t>(s0);
    int last = 255;  // dies_after of the chain's last state
    while (true) {
      mark[static_cast<size_t>(s)] = 1;
      chain.push_back(s);
      const int32_t u = uniform[static_cast<size_t>(s)];
      if (u == kMixed) break;
      if (u < 0) {
        last = 0;
        break;
      }
      if (mark[static_cast<size_t>(u)] == 2) {
        last = dies[static_cast<size_t>(u)] == 255 ? 255 : inc(dies[static_cast<size_t>(u)]);
        break;
      }
      if (mark[static_cast<size_t>(u)] == 1) break;  // a cycle of uniform states: never dies
      s = u;
    }
    for (size_t j = chain.size(); j-- > 0;) {
      dies[static_cast<size_t>(chain[j])] = static_cast<uint8_t>(last);
      mark[static_cast<size_t>(chain[j])] = 2;
      last = last == 255 ? 255 : inc(last);
    }
  }
  return {std::move(run), std::move(dies)};
}

}  // namespace ib::constrain
