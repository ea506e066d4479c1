// The `lora` kind's keys, declared once as a typed parameter set (core/params.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"

namespace ib::lora {

enum class Popularity { Uniform, Zipf };
enum class Measure { Decode, Prefill };

struct LoraKeys {
  std::string model, weights, adapter, modules;
  int64_t adapters = 0, rank = 0, batch = 0, prompt = 0;
  double alpha = 0, zipf_s = 0;
  Popularity popularity = Popularity::Uniform;
  Measure measure = Measure::Decode;
};

const ParamSet<LoraKeys>& lora_keys();

}  // namespace ib::lora
