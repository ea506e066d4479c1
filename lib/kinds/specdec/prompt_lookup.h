// The base of specdec's prompt-lookup methods (ngram, ngram_tree): drafts are the continuations of
// earlier occurrences of the last n-gram (ngram_min..ngram_max tokens), no draft model.
#pragma once

#include <string>

#include "kinds/specdec/specdec_variant.h"

namespace ib::specdec {

class PromptLookup : public SpecdecVariant {
 public:
  using SpecdecVariant::SpecdecVariant;

 protected:
  std::string method_unsupported(const SpecdecKeys& keys) const override {
    return keys.ngram_min > keys.ngram_max ? "ngram_min > ngram_max" : "";
  }
  void configure(const SpecdecKeys& keys, uint64_t) override {
    cfg_.source = DraftSource::Ngram;
    cfg_.ngram_min = static_cast<int>(keys.ngram_min);
    cfg_.ngram_max = static_cast<int>(keys.ngram_max);
    cfg_.k = static_cast<int>(keys.k);
  }
};

}  // namespace ib::specdec
