// The gate of the kv-quant and kv-paged variants (a decode-attention kernel over a cache of the
// shape, kvcache/decode_problem.h): the stored cache and the output checked against the host
// quantizer and float64 attention, and the metrics every row reports from that check.
#pragma once

#include <functional>
#include <vector>

#include "core/variant.h"
#include "kvcache/decode_problem.h"

namespace ib::kvcache {

// The gate and the accuracy of a decode-attention variant, over every (sequence, kv head) when
// the problem is small, else 8 sampled ones (the first, the last, random):
//  * the stored cache equals the host quantizer's bytes and scales (a wrong quantize-on-append
//    kernel fails here, before any attention runs);
//  * the output is finite everywhere (it is poisoned with NaN before the checked run);
//  * the output vs float64 attention over the *dequantized* stored values: relative L2 within
//    `tolerance` (the gate: the kernel computes the attention its cache holds);
//  * the output vs float64 attention over the original bf16 values: relative L2 and max abs
//    error – what the format costs in accuracy (reported, not gated).
struct DecodeCheck {
  Validation gate;
  double format_rel_l2 = 0, format_max_err = 0;
};
using FetchHead = std::function<StoredHead(int b, int kvh)>;
using ReadOut = std::function<float(int b, int h, int c)>;
DecodeCheck check_decode(const DecodeShape& s, const DecodeInputs& in, uint64_t seed, const FetchHead& fetch, const ReadOut& out,
                         double tolerance);

// The metrics every decode-attention row reports from its check.
std::vector<Metric> decode_metrics(const DecodeShape& s, const DecodeCheck& c);

}  // namespace ib::kvcache
