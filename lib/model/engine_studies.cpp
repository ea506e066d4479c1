#include "model/engine_studies.h"

#include <stdexcept>

namespace ib::model {

KvEvictionStudy& kv_eviction(Model& m) {
  if (auto* s = dynamic_cast<KvEvictionStudy*>(&m)) return *s;
  throw std::runtime_error("KV eviction studies (set_kept, record_attention) are not supported by this engine");
}

KvFormatStudy& kv_format_study(Model& m) {
  if (auto* s = dynamic_cast<KvFormatStudy*>(&m)) return *s;
  throw std::runtime_error("KV format studies (set_kv_format, kv_amax) are not supported by this engine");
}

LoraAdapters& lora_adapters(Model& m) {
  if (auto* s = dynamic_cast<LoraAdapters*>(&m)) return *s;
  throw std::runtime_error("LoRA adapters are not supported by this engine");
}

bool has_lora_adapters(const Model& m) { return dynamic_cast<const LoraAdapters*>(&m) != nullptr; }

}  // namespace ib::model
