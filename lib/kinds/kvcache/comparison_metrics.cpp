#include "kinds/kvcache/comparison_metrics.h"

namespace ib::kvcache {

void append_comparison_metrics(const DecodeComparison& c, std::vector<Metric>& m) {
  m.push_back({"KL mean", c.kl_mean, "nats"});
  m.push_back({"KL worst", c.kl_worst, "nats"});
  m.push_back({"top-1 agree", c.top1_agree, "%"});
  m.push_back({"attn err", c.attn_err, "rel L2"});
  if (!c.scored) return;
  m.push_back({"ppl", c.ppl, ""});
  m.push_back({"ppl ×full", c.ppl / c.ref_ppl, "×"});
}

}  // namespace ib::kvcache
