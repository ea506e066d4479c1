// The engine's greedy continuation of a prompt, token by token through its KV cache: what the
// golden tests compare with a reference's generate().
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace ib::testing_support {

// Up to `n` tokens after `prompt`; stops after a token of `stop` (included), as generate() does.
inline std::vector<int32_t> greedy_continuation(model::Model& m, const std::vector<int32_t>& prompt, size_t n,
                                                const std::vector<int32_t>& stop = {}) {
  const int s = m.new_sequence(static_cast<int>(prompt.size() + n) + 1);
  int32_t next = 0;
  model::StepOutput o;
  o.next = &next;
  m.prefill(s, prompt.data(), static_cast<int>(prompt.size()), 1, o);
  std::vector<int32_t> got = {next};
  while (got.size() < n && std::find(stop.begin(), stop.end(), got.back()) == stop.end()) {
    const int32_t t = got.back();
    m.decode(&s, &t, 1, o);
    got.push_back(next);
  }
  m.release(s);
  return got;
}

}  // namespace ib::testing_support
