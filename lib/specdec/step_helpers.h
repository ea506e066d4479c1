// Small helpers the speculative decoders (the generate*.cpp loops, lookahead.cpp) and their kind share.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ib::specdec::detail {

inline double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
// Text ids (GPT-2) into a smaller random-weight vocabulary.
inline int32_t fit(int32_t token, int vocab) { return token % vocab; }
// The greedy choice of a row of logits (smallest index on ties).
inline int32_t argmax_row(const float* l, int vocab) { return static_cast<int32_t>(std::max_element(l, l + vocab) - l); }

}  // namespace ib::specdec::detail
