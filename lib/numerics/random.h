// Counter-based random numbers: element i of a tensor filled with seed s is the same on the
// GPU and on the CPU, so references regenerate inputs instead of copying them back.
#pragma once

#include <cstdint>

#include "numerics/hd.h"

namespace ib {

// SplitMix64 finaliser: a bijective 64-bit mixer.
IB_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

IB_HD uint64_t random_bits(uint64_t seed, uint64_t index) { return mix64(seed ^ mix64(index)); }

// Uniform in [-1, 1), 24 random bits.
IB_HD float random_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(random_bits(seed, index) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

}  // namespace ib
