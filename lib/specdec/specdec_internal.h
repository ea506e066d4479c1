// What the split speculative decoders share beyond specdec.h: the config check and sampled
// verification of a verify pass (verify.cpp), the draft's sampling distribution (drafters.cpp) and
// the step bookkeeping of the chain and tree loops (generate.cpp). Not a public interface.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "specdec/specdec.h"

namespace ib::specdec::detail {

// verify.cpp
void check_sampled(const SpecConfig& cfg, bool force_truth);
int verify_logits_sampled(const DraftTree& tree, const float* logits, int tv, const SpecConfig& cfg,
                          const std::vector<std::vector<float>>* q, uint64_t step, std::vector<int32_t>& emitted, std::vector<int>& path);

// drafters.cpp
void draft_distribution(const float* logits, int dv, int tv, const model::SamplingParams& sp, std::vector<float>& q);

// generate.cpp
void count_step(SpecStats& st, int drafted, int accepted, bool rejected, const std::vector<int32_t>& emitted);
void append_emitted(const std::vector<int32_t>& emitted, std::vector<int32_t>& out, std::vector<int32_t>& history);

}  // namespace ib::specdec::detail
