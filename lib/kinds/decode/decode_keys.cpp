#include "kinds/decode/decode_keys.h"

#include <utility>

#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"

namespace ib::model {

const ParamSet<DecodeKeys>& decode_keys() {
  using K = DecodeKeys;
  static const ParamSet<DecodeKeys> set =
      ParamSet<DecodeKeys>()
          .add(&K::model, model_key("tiny"))
          .add(&K::weights, weights_key())
          .add(&K::batch, key_spec("batch", ParamType::Int, "sequences decoded together", Value(int64_t{1}), 1.0, 4096.0))
          .add(&K::prompt,
               key_spec("prompt", ParamType::Int, "prompt tokens (the context of a decode step)", Value(int64_t{512}), 1.0))
          .add(&K::new_tokens,
               key_spec("new_tokens", ParamType::Int, "tokens generated per sequence (generate)", Value(int64_t{128}), 1.0))
          .add(&K::temperature,
               key_spec("temperature", ParamType::Float, "0 = greedy; else sampling on the backend", Value(0.0), 0.0))
          .add(&K::matmul, matmul_key(), parse_matmul)
          .add(&K::cpu_matmul, cpu_matmul_key(), parse_cpu_matmul)
          .add_group(&K::prompts, kinds::text_prompt_params())
          .add(&K::llama_cpp,
               key_spec("llama_cpp", ParamType::String,
                        "llamacpp_* peers: the directory of llama-batched-bench and llama-simple (scripts/build-llamacpp)",
                        Value(std::string(".peers/llama.cpp/bin"))))
          .add(&K::gguf, key_spec("gguf", ParamType::String,
                                  "llamacpp_* peers: the checkpoint as GGUF; auto = the checkpoint itself when it is a GGUF "
                                  "file, else .peers/gguf/<weights dir name>-f16.gguf (scripts/build-llamacpp --convert DIR)",
                                  Value(std::string("auto"))))
          .add(&K::peer_tokens, key_spec("peer_tokens", ParamType::Int, "llamacpp_decode_step: decode steps timed per repetition",
                                         Value(int64_t{16}), 1.0, 4096.0));
  return set;
}

std::vector<std::string> decode_reads(std::vector<std::string> own, Backend backend) {
  for (const auto& key : kinds::text_prompt_params().names()) own.push_back(key);
  return backend == Backend::Cuda ? model::with_matmul(std::move(own)) : model::with_cpu_matmul(std::move(own));
}

}  // namespace ib::model
