// The keys of the kinds that compare a modified KV cache with the float32 one on the engine
// (kv-evict-model, kv-quant-model): model, weights, prompt, new_tokens, text and tokenizer, as a
// group of typed parameters into the library's EngineDecodeOptions (kvcache/engine_compare.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/registry.h"
#include "kvcache/engine_compare.h"

namespace ib::kvcache {

// The group with the kind's default decode length.
ParamSet<EngineDecodeOptions> engine_decode_params(int default_prompt, int default_new_tokens);

// Spec-time check (KindInfo::check): the model and its weights, and a `text` file that reads and
// tokenizes to at least the longest decode the sweep asks for.
std::optional<KeyProblem> check_engine_decode(const SpecKeyValues& values);

}  // namespace ib::kvcache
