// The keys of the kinds that run the engine, declared once: `model` (a preset, or checkpoint) and
// `weights`, the CUDA engine's `matmul` and the CPU engine's `cpu_matmul`, with a point's choice.
#pragma once

#include <string>
#include <vector>

#include "core/registry.h"
#include "core/sweep.h"
#include "model/model.h"

namespace ib::model {

// The `model` key of the kinds that run the engine (a preset with random weights unless `weights`,
// or checkpoint) with its default preset, and the `weights` key.
KeySpec model_key(const std::string& default_preset);
KeySpec weights_key();
// The `matmul` key (EngineOptions::matmul, default cublas) of the kinds that run the CUDA engine;
// `engines` says whose matmuls it sets in its doc ("CUDA engine"). Only CUDA variants read it
// (the CPU engine's choice is `cpu_matmul`: a sweep over either on the other backend would repeat rows). `with_matmul`
// adds it to a CUDA variant's keys; `matmul_of` is a point's choice (cublas where it is absent).
KeySpec matmul_key(const std::string& engines = "CUDA engine");
std::vector<std::string> with_matmul(std::vector<std::string> keys);
Matmul matmul_of(const Point& p);
// The `cpu_matmul` key of the CPU engine's variants (default blas), and a point's choice.
KeySpec cpu_matmul_key();
CpuMatmul cpu_matmul_of(const Point& p);
std::vector<std::string> with_cpu_matmul(std::vector<std::string> keys);

}  // namespace ib::model
