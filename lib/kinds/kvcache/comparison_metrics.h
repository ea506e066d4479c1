// The columns of a row that compares a modified KV cache with the full one on the engine
// (kvcache/engine_compare.h): kv-evict-model's and kv-quant-model's.
#pragma once

#include <vector>

#include "core/variant.h"
#include "kvcache/engine_compare.h"

namespace ib::kvcache {

// KL mean, KL worst, top-1 agree, attn err; ppl and ppl ×full when scored.
void append_comparison_metrics(const DecodeComparison& c, std::vector<Metric>& m);

}  // namespace ib::kvcache
