// The `decode` kind's keys, declared once as a typed parameter set (core/params.h), the llama.cpp
// peer's included.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/params.h"
#include "model/model.h"
#include "model/text_prompt.h"

namespace ib::model {

struct DecodeKeys {
  std::string model, weights;
  int64_t batch = 1, prompt = 0, new_tokens = 0;
  double temperature = 0;
  Matmul matmul = Matmul::Cublas;
  CpuMatmul cpu_matmul = CpuMatmul::Blas;
  TextPromptSource prompts;
  std::string llama_cpp, gguf;  // the llama.cpp peer's binaries and checkpoint
  int64_t peer_tokens = 0;
};

const ParamSet<DecodeKeys>& decode_keys();

// A variant's keys (its declaration): `own`, the text prompt's, and its backend's engine choice
// (matmul for CUDA, cpu_matmul for the CPU).
std::vector<std::string> decode_reads(std::vector<std::string> own, Backend backend);

}  // namespace ib::model
