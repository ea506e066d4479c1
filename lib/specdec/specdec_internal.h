// What the split speculative decoders share beyond specdec.h: the config check and sampled
// verification of a verify pass (verify.cpp), the draft's sampling distribution (drafters.cpp) and
// the step bookkeeping of the chain, batched and tree loops (generate.cpp). Not a public interface.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "specdec/specdec.h"

namespace ib::specdec::detail {

// verify.cpp
void check_sampled(const SpecConfig& cfg, bool force_truth);
int verify_logits_sampled(const DraftTree& tree, const float* logits, int tv, const SpecConfig& cfg,
                          const std::vector<std::vector<float>>* q, uint64_t step, std::vector<int32_t>& emitted,
                          std::vector<int>& path);

// drafters.cpp
void draft_distribution(const float* logits, int dv, int tv, const model::SamplingParams& sp, std::vector<float>& q);

// generate.cpp
void count_step(SpecStats& st, int drafted, int accepted, bool rejected, const std::vector<int32_t>& emitted);
void append_emitted(const std::vector<int32_t>& emitted, std::vector<int32_t>& out, std::vector<int32_t>& history);
// After a chain step that verified k drafts and accepted j (emitted: its tokens): the draft model
// keeps in its cache the accepted drafts it saw, and `pending` becomes the accepted tokens it has not
// (d_k when all were accepted, then the step's last token). The chain and batched loops share it.
void keep_accepted_drafts(model::Model& draft, int draft_seq, const std::vector<int32_t>& drafts, int k, int j,
                          const std::vector<int32_t>& emitted, std::vector<int32_t>& pending);

}  // namespace ib::specdec::detail
