// Tree drafting (Medusa/EAGLE's mechanism): a token tree of the draft's top candidates, verified in
// one target pass under a tree attention mask; static shapes or an EAGLE-2 dynamic tree.
#include <algorithm>

#include "core/registry.h"
#include "kinds/specdec/specdec_variant.h"

namespace ib::specdec {
namespace {

class DraftTreeVariant final : public SpecdecVariant {
 public:
  using SpecdecVariant::SpecdecVariant;

 private:
  bool uses_draft_model() const override { return true; }
  std::string method_unsupported(const SpecdecKeys& keys) const override {
    if (keys.dynamic_nodes > 0) {
      if (keys.acceptance == Acceptance::Controlled)
        return "a dynamic tree ranks candidates by the draft's confidence: it needs acceptance: model";
      if (keys.sampled()) return "dynamic trees are verified greedily (pruning by confidence breaks the sampled draws)";
    }
    return {};
  }
  void configure(const SpecdecKeys& keys, uint64_t) override {
    cfg_.tree = parse_tree_shape(keys.tree);
    cfg_.k = static_cast<int>(cfg_.tree.size());
    cfg_.dynamic_nodes = static_cast<int>(keys.dynamic_nodes);
  }
  // The static tree's nodes, depth by depth (a dynamic tree's budget and its last expansion where more).
  int verify_nodes() const override {
    int nodes = cfg_.k;
    for (int w = 1, t = 0; t < static_cast<int>(cfg_.tree.size()); ++t) nodes += w *= cfg_.tree[static_cast<size_t>(t)];
    if (cfg_.dynamic_nodes > 0) nodes = std::max(nodes, cfg_.dynamic_nodes + cfg_.k * cfg_.tree[0]);
    return nodes;
  }
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) override {
    return speculative_generate_tree(*target_, tseq_, draft_.get(), dseq_, prompt_.back(), n_, cfg_, truth, forced_, history,
                                     stats_);
  }
  // The tree's analytic model at the α the spec sets (controlled) – per-depth α̂ is not the α of a
  // tree – and the draft forwards per step as measured.
  void add_metrics(std::vector<Metric>& m) const override {
    const Measured x = add_speculation_metrics(m, true);
    if (cfg_.source != DraftSource::Controlled) return;
    const double steps = static_cast<double>(stats_.steps);
    const double e = expected_tokens_tree(cfg_.alpha, cfg_.tree);
    const double forwards = steps > 0 ? static_cast<double>(stats_.draft_forward) / steps : 0;
    m.push_back({"E (analytic)", e, ""});
    m.push_back({"predicted speedup", e / (forwards * x.c + x.v), "×"});
  }
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kDraftTreeReads = {"draft",         "draft_weights", "draft_layers", "tree",
                                                  "dynamic_nodes", "acceptance",    "alpha"};

const VariantListRegistration draft_tree_variants(
    "specdec",
    {
        {{"draft_tree", Backend::Cuda,
          "a token tree of the draft's top candidates verified in one target pass with a tree attention mask (Medusa/EAGLE's "
          "mechanism)",
          specdec_reads(kDraftTreeReads, Backend::Cuda)},
         IB_IF_CUDA(make_variant<DraftTreeVariant>(Backend::Cuda))},
        {{"cpu_draft_tree", Backend::Cpu, "token-tree drafting + tree verification on the CPU engine",
          specdec_reads(kDraftTreeReads, Backend::Cpu)},
         make_variant<DraftTreeVariant>(Backend::Cpu)},
    });

}  // namespace
}  // namespace ib::specdec
