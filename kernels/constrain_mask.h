// Greedy token choice under a token bitmask on the GPU (constrained decoding's per-step work).
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace ib {

// out[r] = argmax over allowed t of logits[r * vocab + t] (smallest index on ties, -1 if none).
// mask: (vocab + 31) / 32 words per row, bit t allows token t; nullptr allows every token.
void launch_masked_argmax(const float* logits, const uint32_t* mask, int32_t vocab, int32_t rows, int32_t* out,
                          cudaStream_t stream);

}  // namespace ib
